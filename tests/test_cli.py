"""The command-line dispatcher: usage, version, unknown commands, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shogi_dnn import cli

REPO = Path(__file__).resolve().parents[1]


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


def test_a_name_with_a_line_break_is_one_error_line(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "no\nshogi-dnn inspect: ok\x1b[2K"
    assert cli.main(["inspect", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("shogi-dnn inspect: error: "), err
    assert "no\\nshogi-dnn inspect: ok\\x1b[2K" in err and "\x1b" not in err


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


def test_a_closed_pipe_inside_a_command_is_not_an_error(capsys, monkeypatch) -> None:
    """`shogi-dnn predict GAME | head`: the command's own print meets the closed pipe (an OSError, which the
    commands' error handler must not turn into `error: [Errno 32] Broken pipe`, exit 2)."""
    from shogi_dnn.commands import inspect as inspect_command

    def write_to_a_closed_pipe(argv: list[str]) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(inspect_command, "main", write_to_a_closed_pipe)
    assert cli.main(["inspect", "anything"]) == 141
    assert capsys.readouterr().err == ""


def test_verbose_is_taken_anywhere_and_listed(capsys) -> None:
    assert "--verbose" in (cli._usage())
    assert cli.main(["report", "--run-dir", "/nonexistent-run", "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "--verbose" not in err and "unrecognized" not in err


@pytest.mark.parametrize("body, message", [
    ("exec('raise KeyboardInterrupt')", "shogi-dnn inspect: interrupted"),             # cli catches it
    ("_caught()", ""),                                              # the command catches it (convert)
])
def test_ctrl_c_inside_exec_of_a_string_still_exits_130(tmp_path, body: str, message: str) -> None:
    """CI once saw `interrupted` printed and then the process killed by SIGINT (-2): the Ctrl-C landed
    inside `exec(<string>)` during `import tensorflow`, which sets CPython's "unhandled KeyboardInterrupt"
    flag even when the exception is caught later, and the interpreter then kills itself with SIGINT after
    exiting. The dispatcher clears it: exit 130 wherever the interrupt lands."""
    (tmp_path / "interrupted_in_exec.py").write_text(
        "import sys, types\n"
        "from shogi_dnn import cli\n"
        "fake = types.ModuleType('shogi_dnn.commands.inspect')\n"
        "def _caught():\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')\n"
        "    except KeyboardInterrupt:\n"
        "        return 130\n"
        f"fake.main = lambda argv: {body}\n"
        "sys.modules['shogi_dnn.commands.inspect'] = fake\n"
        "sys.exit(cli.main(['inspect']))\n")
    # Run as `python -m shogi_dnn` runs (a script file's SystemExit skips the flag's check).
    result = subprocess.run([sys.executable, "-m", "interrupted_in_exec"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert result.stderr.strip() == message


def test_ctrl_c_while_the_command_loads_is_one_line(monkeypatch, capsys) -> None:
    """A Ctrl-C in the first second can land while the command's modules are imported (train's: 0.19 s
    of the 0.32 s that `import shogi_dnn.commands.train` takes on an idle 2-core machine): `interrupted`,
    130, no traceback (it was a traceback)."""
    class Interrupting:
        def find_spec(self, name, path=None, target=None):
            if name == "shogi_dnn.commands.inspect":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "shogi_dnn.commands.inspect", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert cli.main(["inspect"]) == 130
    assert capsys.readouterr().err == "shogi-dnn inspect: interrupted\n"
