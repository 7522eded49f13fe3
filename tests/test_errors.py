"""errors.py: names shown escaped (printable), so a message stays one line; KifuError's message."""

from __future__ import annotations

import pytest

from shogi_dnn.errors import KifuError, printable
from shogi_dnn.kifu.record import SourceLine


@pytest.mark.parametrize("name, shown", [
    ("棋譜　01.kif", "棋譜　01.kif"),                     # Japanese and an ideographic space stay
    ("a\nb.csa", "a\\nb.csa"),
    ("a\r\x1b[2Kb", "a\\r\\x1b[2Kb"),
    ("a\u2028b\x85c", "a\\u2028b\\x85c"),                 # separators str.splitlines breaks at
    ("evil\u202ecsa.kif", "evil\\u202ecsa.kif"),           # a bidirectional override
    ("back\\slash", "back\\slash"),
])
def test_printable_escapes_what_would_break_or_hide_a_line(name: str, shown: str) -> None:
    assert printable(name) == shown
    assert len(printable(name).splitlines()) == 1


def test_a_kifu_error_and_a_source_line_show_the_name_escaped() -> None:
    error = KifuError("x\n0 errors; 1 game.csa", 4, "unrecognised line 'bad'")
    assert str(error) == "x\\n0 errors; 1 game.csa:4: unrecognised line 'bad'"
    assert error.path == "x\n0 errors; 1 game.csa"              # the name itself is kept
    assert str(SourceLine("a\nb.kif", 3)) == "a\\nb.kif:3"
