"""Analysis of trained runs and of data: evaluate, scoring maths, baselines, predict, report, inspect.

  scoring.py    accuracy, log loss, Brier, ECE, calibration bins, phase tables, bootstrap over games (numpy)
  baselines.py  side-to-move, material, piece-square and engine baselines on the same positions
  evaluate.py   a run's model on a split (TensorFlow), eval-<split>.json
  predict.py    one position or every position of a game (TensorFlow through evaluate)
  report.py     report.md and plots from a run directory (TensorFlow-free)
  inspect.py    record files, positions and datasets summarised (TensorFlow-free)
"""
