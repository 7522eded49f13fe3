"""The network as a USI engine, and the glue that measures it in games.

  players.py    evaluators: the run's network (Keras or ONNX) or the material baseline -> win probabilities,
                and policy priors over the legal moves when the network has a policy head
  search.py     PUCT tree search over batched evaluations; limits, lines, cp scale, declarations
  quiescence.py capture quiescence search at the leaves (a network without a policy head)
  minimax.py    best-first minimax to a depth (`go depth D`; 1: the one-ply player)
  protocol.py   USI on stdin/stdout: the command loop, a search thread, time management, options
  arena.py      matches through ShogiArena (a USI tournament runner): configs, results, Elo, CSA records

Above training/ and analysis/ (it loads their models and baselines), beside bench/ (`bench games` runs
arena.py); commands/usi.py and bench/games.py are the thin entry points.
"""
