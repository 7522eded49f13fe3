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


def test_a_closed_pipe_ends_quietly() -> None:
    """`shogi-dnn --help | head -2`: the reader closes the pipe before (or while) the help is written."""
    for argv in (["--help"], ["convert", "--help"]):
        proc = subprocess.Popen([sys.executable, "-m", "shogi_dnn", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.close()                         # closed before the interpreter has even started
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
        assert "Traceback" not in err and "BrokenPipeError" not in err, err
        assert proc.returncode in (0, 141)


def test_verbose_is_taken_anywhere_and_listed(capsys) -> None:
    assert "--verbose" in (cli._usage())
    assert cli.main(["report", "--run-dir", "/nonexistent-run", "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "--verbose" not in err and "unrecognized" not in err
