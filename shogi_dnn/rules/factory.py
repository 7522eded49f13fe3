"""Backend choice: a `Position` on cshogi when installed (extra `fast`), else on python-shogi."""

from __future__ import annotations

import functools
import os

from shogi_dnn.errors import ConfigError
from shogi_dnn.rules.position import Position
from shogi_dnn.rules.pyshogi_backend import ShogiPosition
from shogi_dnn.rules.validity import check_sfen

# Backend choice for the encoder (and anything else that asks): cshogi when importable (extra `fast`),
# else python-shogi. SHOGI_DNN_BACKEND=python-shogi|cshogi (or --backend) forces one.
BACKEND_ENV = "SHOGI_DNN_BACKEND"
BACKENDS = ("python-shogi", "cshogi")


@functools.lru_cache(maxsize=1)
def available_backends() -> tuple[str, ...]:
    """The backends that can be used here: python-shogi always, cshogi when it imports."""
    try:
        import shogi_dnn.rules.cshogi_backend  # noqa: F401
    except ImportError:
        return BACKENDS[:1]
    return BACKENDS


def resolve_backend(name: str | None = None) -> str:
    """The backend: `name` unless None or 'auto', else $SHOGI_DNN_BACKEND, else the fastest.

    Raises:
        ConfigError: an unknown backend name, or cshogi asked for but not installed.
    """
    choice = name if name not in (None, "", "auto") else os.environ.get(BACKEND_ENV, "auto") or "auto"
    if choice == "auto":
        return available_backends()[-1]
    if choice not in BACKENDS:
        raise ConfigError(f"unknown rules backend {choice!r} (choose from auto, {', '.join(BACKENDS)})")
    if choice not in available_backends():
        raise ConfigError(f"rules backend {choice!r} is not installed (pip install 'shogi-dnn[fast]')")
    return choice


def position_factory(backend: str | None = None):
    """A `sfen -> Position` constructor for the resolved backend (see resolve_backend)."""
    if resolve_backend(backend) == "cshogi":
        from shogi_dnn.rules.cshogi_backend import CshogiPosition
        return CshogiPosition
    return ShogiPosition


def new_position(sfen: str) -> Position:
    """A position on the resolved backend (SHOGI_DNN_BACKEND=python-shogi forces the reference library)."""
    return position_factory()(sfen)


def position_from_sfen(sfen: str) -> Position:
    """new_position for a position given by hand, after rules/validity.py's full check (both kings required).

    Raises:
        IllegalPositionError: one line naming the rule the position breaks (or the bad SFEN text).
    """
    check_sfen(sfen)
    return new_position(sfen)
