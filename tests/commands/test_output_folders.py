"""Output folders that cannot be written are one line before any work, for every command that writes:
export --out, convert --out, train --run-dir, predict --out, report and evaluate (RUN/); so is an output
that is a FIFO (as a device or a socket would be: never replaced).

Tests run as root, which chmod does not stop, and this machine has no read-only mount to write in; so
two cases are tested: a file where the folder should be (a real failure of the OS), and a read-only
file system simulated by making the probe's tempfile.mkstemp raise EROFS as a read-only mount does.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

import pytest

from shogi_dnn.cli import main
from shogi_dnn.errors import OutputError
from shogi_dnn.folders import run_files
from tests.support.evalrun import make_random_run
from tests.support.paths import DATA, REPO

SMOKE = str(REPO / "train" / "cpu-smoke.toml")


def test_check_writable_probes_without_leaving_anything(tmp_path: Path) -> None:
    assert run_files.check_writable(tmp_path / "new" / "deeper", "--out") == tmp_path / "new" / "deeper"
    assert list(tmp_path.iterdir()) == []                    # nothing created, the probe removed
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match=r"^--out .*/file/sub: cannot write there \(.*/file is a file, not a "
                                          r"folder\); choose a writable folder$"):
        run_files.check_writable(tmp_path / "file" / "sub", "--out")


@pytest.fixture
def read_only(monkeypatch: pytest.MonkeyPatch):
    """Every folder reads as a read-only mount for the write probe (what EROFS says)."""
    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run")
    return make_random_run(root / "RUN", root / "data", devices=1)


def one_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("command", ["export", "convert", "train", "predict", "report", "evaluate"])
def test_read_only_output_is_one_line(capsys: pytest.CaptureFixture, read_only, run_dir: Path,
                                      tmp_path: Path, command: str) -> None:
    record = str(next((DATA / "csa").rglob("*.csa")))
    argv, flag = {
        "export": (["export", "--run-dir", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "m.onnx")],
                   f"--out {tmp_path / 'm.onnx'}: cannot write in {tmp_path}"),
        "convert": (["convert", record, "--out", str(tmp_path / "ds"), "--no-progress"],
                    f"--out {tmp_path / 'ds'}: cannot write there"),
        "train": (["train", "--config", SMOKE, "--data", str(tmp_path), "--run-dir", str(tmp_path / "r")],
                  f"--run-dir {tmp_path / 'r'}: cannot write there"),
        "predict": (["predict", "--run-dir", str(run_dir), "--out", str(tmp_path / "g.png"), record],
                    f"--out {tmp_path / 'g.png'}: cannot write in {tmp_path}"),
        "report": (["report", "--run-dir", str(run_dir)], f"--run-dir {run_dir}: cannot write there"),
        "evaluate": (["evaluate", "--run-dir", str(run_dir)], f"--run-dir {run_dir}: cannot write there"),
    }[command]
    line = one_line(capsys, argv)
    assert line == f"shogi-dnn {command}: error: {flag} (Read-only file system); choose a writable folder"


def test_a_file_for_the_export_folder_is_one_line(capsys: pytest.CaptureFixture, run_dir: Path,
                                                  tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    line = one_line(capsys, ["export", "--run-dir", str(run_dir), "--format", "savedmodel", "--out",
                             str(tmp_path / "file" / "sm")])
    assert line.endswith("is a file, not a folder); choose a writable folder")


@pytest.mark.parametrize("command", ["export", "convert", "train", "predict"])
def test_a_fifo_as_the_output_is_one_line_and_stays(capsys: pytest.CaptureFixture, run_dir: Path,
                                                    tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    record = str(next((DATA / "csa").rglob("*.csa")))
    argv, flag = {
        "export": (["export", "--run-dir", str(run_dir), "--format", "onnx", "--out", str(fifo)], "--out"),
        "convert": (["convert", record, "--out", str(fifo), "--no-progress"], "--out"),
        "train": (["train", "--config", SMOKE, "--data", str(tmp_path), "--run-dir", str(fifo)], "--run-dir"),
        "predict": (["predict", "--run-dir", str(run_dir), "--out", str(fifo), record], "--out"),
    }[command]
    line = one_line(capsys, argv)
    assert line == (f"shogi-dnn {command}: error: {flag} {fifo}: a FIFO (named pipe), not a regular file or "
                    "folder; shogi-dnn writes only files and folders: choose another path")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(tmp_path.iterdir()) == [fifo]
