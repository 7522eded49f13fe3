"""Analysis of trained runs and of data: evaluate, scoring maths, baselines, predict, report, inspect
(docs/architecture.md maps the modules).
"""
