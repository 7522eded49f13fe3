"""Benchmarks: one module per `shogi-dnn bench` target, each with `main(argv) -> int`.
Speed targets live here (and in the notes), never in timed unit tests."""
