"""Words for the console: counts with the right plural, durations."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`1 game`, `2 games`, `12,345 positions`, `1 file`; `plural_form` for irregular nouns."""
    return f"{count:,} {noun if count == 1 else plural_form or noun + 's'}"


def format_duration(seconds: float) -> str:
    """3725 -> '1h02m', 95 -> '1m35s', 4.2 -> '4.2s', 200000 -> '2d07h' (plan's table, train's ETA)."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"
