"""Words for the console: counts with the right plural."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`1 game`, `2 games`, `12,345 positions`, `1 file`; `plural_form` for irregular nouns."""
    return f"{count:,} {noun if count == 1 else plural_form or noun + 's'}"
