"""Running the command line in tests."""

from __future__ import annotations

import pytest

from shogi_dnn.cli import main


def one_error_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """Run `shogi-dnn ARGV`, expect exit status 2 and exactly one `shogi-dnn train: error:` line, no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("shogi-dnn train: error:")]
    assert len(lines) == 1, err
    return lines[0]
