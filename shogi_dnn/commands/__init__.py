"""One module per `shogi-dnn` subcommand, each with `main(argv) -> int`. Keep them thin."""
