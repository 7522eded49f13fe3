"""TensorFlow's start-up lines: none without --verbose, each once with it (shogi_dnn/commands/tf_quiet.py)."""

from __future__ import annotations

import subprocess
import sys

from shogi_dnn.commands import tf_quiet
from tests.support.paths import REPO

SCRIPT = "import sys; from shogi_dnn.commands import tf_quiet; tf_quiet.install(sys.argv[1] == '1'); import tensorflow"


def _stderr(verbose: bool) -> str:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "0"}
    result = subprocess.run([sys.executable, "-c", SCRIPT, "1" if verbose else "0"], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_start_up_lines_off_by_default_and_once_with_verbose() -> None:
    assert _stderr(False) == ""
    lines = _stderr(True).splitlines()
    assert lines, "TensorFlow printed nothing at start-up: nothing to check"
    keys = [tf_quiet._STAMP.sub("", line) for line in lines]
    assert len(keys) == len(set(keys)), lines
    assert sum("absl::InitializeLog" in line for line in lines) <= 1


def test_unique_lines_ignores_time_stamps() -> None:
    text = ("W0000 00:00:1.1   7 a.cc:1] x\nI0000 00:00:1.2   7 b.cc:2] y\n"
            "W0000 00:00:2.1   7 a.cc:1] x\nplain\nplain\n")
    assert tf_quiet.unique_lines(text) == ["W0000 00:00:1.1   7 a.cc:1] x", "I0000 00:00:1.2   7 b.cc:2] y", "plain"]
