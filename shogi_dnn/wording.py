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


DURATION_UNITS = (("minutes", 60.0), ("hours", 3600.0), ("days", 86400.0))


def duration_unit(seconds: float) -> tuple[str, float]:
    """The unit a graph of durations up to `seconds` reads best in, and its length in seconds: minutes
    below 2 hours, hours below 2 days, else days (so the axis reads 0-120 minutes, 2-48 hours, 2+ days)."""
    if seconds < 2 * 3600:
        return DURATION_UNITS[0]
    if seconds < 2 * 86400:
        return DURATION_UNITS[1]
    return DURATION_UNITS[2]
