"""The command-line dispatcher: usage, version, unknown commands, one-line errors."""

from __future__ import annotations

import subprocess
import sys

from shogi_dnn import cli


def test_usage_lists_every_command(capsys) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out


def test_no_arguments_is_a_usage_error(capsys) -> None:
    assert cli.main([]) == 2


def test_unknown_command(capsys) -> None:
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_python_dash_m_entry_point() -> None:
    result = subprocess.run([sys.executable, "-m", "shogi_dnn", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("shogi-dnn ")
