"""Self-play: games of USI engines written as CSA with the searching side's score (`shogi-dnn selfplay`)."""
