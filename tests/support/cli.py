"""Running the command line in tests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shogi_dnn.cli import main
from tests.support.paths import REPO

# A fresh interpreter runs `shogi-dnn ARGV` and prints its exit status and whether TensorFlow was loaded.
_FRESH = ("import sys\nfrom shogi_dnn.cli import main\nrc = main(sys.argv[1:])\n"
          "print(rc, 'tensorflow' in sys.modules)")


def one_error_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """Run `shogi-dnn ARGV`, expect exit status 2 and exactly one `shogi-dnn train: error:` line, no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("shogi-dnn train: error:")]
    assert len(lines) == 1, err
    return lines[0]


def refusal_in_fresh_process(argv: list[str]) -> str:
    """Run `shogi-dnn ARGV` in a new Python process; expect exit status 2 with TensorFlow never imported
    (a refusal before TensorFlow starts). Returns its stderr."""
    out = subprocess.run([sys.executable, "-c", _FRESH, *argv], capture_output=True, text=True, cwd=REPO,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.split()[-2:] == ["2", "False"], out.stdout + out.stderr
    return out.stderr
