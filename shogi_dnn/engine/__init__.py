"""The network as a USI engine (evaluators, PUCT and best-first search, quiescence, the USI protocol) and
the glue that measures it in games (arena.py); docs/architecture.md maps the modules.
"""
