"""The network as a USI engine, and the glue that measures it in games.

  players.py    evaluators: the run's network (Keras or ONNX) or the material baseline -> win probabilities
  search.py     one ply in one batch, or best-first minimax over batched evaluations; cp scale; declarations
  protocol.py   USI on stdin/stdout: the command loop, a search thread, time management, options
  arena.py      matches through ShogiArena (a USI tournament runner): configs, results, Elo, CSA records

Above training/ and analysis/ (it loads their models and baselines), beside bench/ (`bench games` runs
arena.py); commands/usi.py and bench/games.py are the thin entry points.
"""
