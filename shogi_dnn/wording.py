"""Words for the console: counts with the right plural, durations, and progress bars.

Every progress bar of the package is made by `progress_bar`: on a terminal a tqdm bar (redrawn in place
with '\\r'); when stderr is a file or a pipe a PlainBar, which writes one whole line every PLAIN_EVERY_S
seconds and one at the end ('evaluate: 120/400 batch (30%), 41 s'), or nothing where
`redirected="silent"` (a caller that logs its own lines, like the trainer).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, Literal, TextIO


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

PLAIN_EVERY_S = 30.0                    # a redirected log gets a progress line at most this often


class PlainBar:
    """The subset of tqdm's interface the package uses, printing whole lines to `stream`."""

    def __init__(self, iterable: Iterable[Any] | None, total: int | None, desc: str, unit: str, initial: int,
                 stream: TextIO, every_s: float | None = None, silent: bool = False) -> None:
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n, self.stream, self.silent = initial, stream, silent
        self.every_s = PLAIN_EVERY_S if every_s is None else every_s
        self.start = self.last = time.monotonic()
        self.postfix, self.closed, self.printed = "", False, initial

    def __iter__(self) -> Iterator[Any]:
        assert self.iterable is not None
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self) -> PlainBar:  # noqa: PYI034 - Python 3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self._line(now)

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        self.postfix = text

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.n != self.printed:
                self._line(time.monotonic())

    def line_text(self, now: float) -> str:
        """'desc: n/total unit (pct%), s s[, postfix]'."""
        share = (f"/{self.total:,} {self.unit} ({100 * self.n / self.total:.0f}%)" if self.total
                 else f" {self.unit}")
        postfix = f", {self.postfix}" if self.postfix else ""
        return f"{self.desc + ': ' if self.desc else ''}{self.n:,}{share}, {now - self.start:.0f} s{postfix}"

    def _line(self, now: float) -> None:
        self.last, self.printed = now, self.n
        if not self.silent:
            self.stream.write(self.line_text(now) + "\n")
            self.stream.flush()


def progress_bar(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", initial: int = 0, leave: bool = False, enabled: bool = True,
                 redirected: Literal["lines", "silent"] = "lines", stream: TextIO | None = None) -> Any:
    """A progress bar over `iterable` (or updated by hand): tqdm where `stream` (stderr) is a terminal,
    else a PlainBar writing whole lines (`redirected="lines"`) or nothing (`"silent"`); nothing either
    way when not `enabled`."""
    stream = sys.stderr if stream is None else stream
    if stream.isatty():
        from tqdm import tqdm
        return tqdm(iterable, total=total, desc=desc or None, unit=unit, initial=initial, leave=leave,
                    disable=not enabled, dynamic_ncols=True, file=stream)
    return PlainBar(iterable, total, desc, unit, initial, stream,
                    silent=not enabled or redirected == "silent")
