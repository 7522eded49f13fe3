"""A full disk during convert: one line naming the path and the space, no partial shard left, and the
rerun (with space again) finishes with the same shards. On a real size-limited tmpfs where the test
can mount one (root), else skipped; the fault-injecting variant runs everywhere."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import shards
from shogi_dnn.errors import DiskFullError
from tests.support.paths import REPO

CSA = REPO / "tests" / "data" / "csa"


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 40 KiB tmpfs at tmp_path/fs (remountable larger); skipped where mounting is impossible."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode(errors='replace').strip()})")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def _files(root: Path) -> dict[str, str]:
    return {p.name: shards.file_sha256(p) for p in sorted(root.glob("*.h5"))}


def test_convert_on_a_full_tmpfs_is_one_line_and_the_rerun_is_identical(small_fs: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    inputs = [str(CSA)]
    reference = tmp_path / "reference"
    assert cli.main(["convert", *inputs, "--out", str(reference), "--workers", "1", "--shard-size", "300",
                     "--no-progress"]) == 0
    assert sum(p.stat().st_size for p in reference.glob("*.h5")) > 40 << 10     # does not fit
    out = small_fs / "out"
    code = cli.main(["convert", *inputs, "--out", str(out), "--workers", "1", "--shard-size", "300",
                     "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "disk full (needs about " in err[0] and "iB free on" in err[0] and str(out) in err[0]
    assert not list(out.glob("*.tmp")) and not (out / "manifest.json").exists()
    for path in out.glob("*.h5"):                    # every shard left is complete (it verifies)
        with shards.open_shard(path):
            pass
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
    assert cli.main(["convert", *inputs, "--out", str(out), "--workers", "1", "--shard-size", "300",
                     "--no-progress"]) == 0
    assert _files(out) == _files(reference)


def test_a_failed_shard_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC part-way through the 2nd shard's one write (shards are built in memory, then written by
    run_files.write_atomic): one line with the shard's exact size, no .tmp, the rerun is identical."""
    real, sizes = Path.write_bytes, []

    def failing(self, data, *args, **kwargs):
        if self.name == "train-00001.h5.tmp":
            sizes.append(len(data))
            real(self, data[:len(data) // 2])            # a partial write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_bytes", failing)
    out = tmp_path / "out"
    with pytest.raises(DiskFullError,
                       match=r"train-00001.h5: disk full \(needs about [\d.]+ [KM]iB, [\d,.]+ [KM]iB free"):
        run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    assert [p.name for p in out.glob("*.h5*")] == ["train-00000.h5"]
    monkeypatch.setattr(Path, "write_bytes", real)
    run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    reference = tmp_path / "reference"
    run_convert([CSA], reference, ConvertSettings(shard_size=300), workers=1)
    assert _files(out) == _files(reference)
    assert sizes == [(out / "train-00001.h5").stat().st_size]     # "needs about" is the shard's size


def _convert_in_subprocess(out: Path, preexec=None, workers: int = 1) -> subprocess.CompletedProcess:
    """`shogi-dnn convert` of tests/data/csa in a process of its own: a crash (exit 139) shows there.
    With 2 workers the shards are written in a worker process (the error comes back through the pool)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": ""}
    return subprocess.run([sys.executable, "-m", "shogi_dnn", "convert", str(CSA), "--out", str(out),
                           "--workers", str(workers), "--shard-size", "300", "--no-progress"],
                          capture_output=True, text=True, env=env, preexec_fn=preexec, timeout=120,
                          check=False)


def _assert_one_line(done: subprocess.CompletedProcess, out: Path, words: str) -> None:
    """Exit 2, one stderr line naming a file of `out` with `words`, no traceback, nothing partial left."""
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, (done.returncode, err[:5])
    assert words in err[0] and f"{out}/" in err[0] and "needs about " in err[0], err[0]
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp")) and not (out / "writer.lock").exists()
    for path in out.glob("*.h5"):                    # every shard left is complete
        with shards.open_shard(path):
            pass


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The shards of an uninterrupted conversion (the subprocess tests' settings)."""
    out = tmp_path_factory.mktemp("reference") / "out"
    run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    return _files(out)


def _file_size_limit(limit_kib: int):
    """A preexec_fn: RLIMIT_FSIZE (`ulimit -f`) of `limit_kib` KiB, SIGXFSZ ignored (EFBIG, not a kill)."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_kib << 10, limit_kib << 10))

    return limited


@pytest.mark.parametrize("limit_kib,workers", [(4, 1), (24, 2)])
def test_convert_over_a_file_size_limit_is_one_line_and_the_rerun_is_identical(
        tmp_path: Path, reference: dict[str, str], limit_kib: int, workers: int) -> None:
    """A size-limited write without root: RLIMIT_FSIZE (`ulimit -f`) with SIGXFSZ ignored makes the
    shard write fail with EFBIG inside the limit, as ENOSPC would on a full disk. HDF5 writing the file
    itself used to crash there (exit 139, dozens of ignored-exception tracebacks, a .tmp left; with
    2 workers exit 1 or 2 after 28-43 lines)."""
    out = tmp_path / "out"
    done = _convert_in_subprocess(out, _file_size_limit(limit_kib), workers)
    _assert_one_line(done, out, "file too large (")
    run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    assert _files(out) == reference


@pytest.mark.parametrize("size", ["16k", "64k"])
def test_convert_on_a_small_tmpfs_exits_with_one_line(tmp_path: Path, reference: dict[str, str],
                                                     size: str) -> None:
    """A real full disk (root only: a tmpfs of `size`; 16k filled in the first shard, 64k in the
    second, both crashed before): exit 2 and one line; with space again the rerun is identical."""
    mount = tmp_path / "fs"
    mount.mkdir()
    with _tmpfs(mount, size):
        out = mount / "out"
        _assert_one_line(_convert_in_subprocess(out), out, "disk full (")
        subprocess.run(["mount", "-o", "remount,size=16m", str(mount)], check=True)
        run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
        assert _files(out) == reference


@contextlib.contextmanager
def _tmpfs(mount: Path, size: str) -> Iterator[None]:
    """A tmpfs of `size` mounted at `mount` for the block (the test skips where it cannot mount one)."""
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode(errors='replace').strip()})")
    try:
        yield
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_at_the_report_is_one_line_and_leaves_no_temp(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC when convert-report.json is written (the last file of a conversion): one line, no .tmp left,
    and the rerun completes with the same shards."""
    real = Path.write_text

    def failing(self, text, *args, **kwargs):
        if self.name == "convert-report.json.tmp":
            real(self, text[:10], *args, **kwargs)         # a partial write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing)
    out = tmp_path / "out"
    with pytest.raises(DiskFullError, match=r"convert-report.json: disk full"):
        run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    assert not list(out.glob("*.tmp"))
    monkeypatch.setattr(Path, "write_text", real)
    run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    reference = tmp_path / "reference"
    run_convert([CSA], reference, ConvertSettings(shard_size=300), workers=1)
    assert _files(out) == _files(reference) and (out / "convert-report.json").is_file()


@pytest.mark.slow
def test_every_point_where_the_disk_fills_is_one_line(tmp_path: Path) -> None:
    """The sweep (root only): tmpfs of 8 to 80 KiB, so that the disk fills in the first shard, the
    dedup index, a resume checkpoint, the second shard, ... (tests/data/csa's shards are 38 and 31 KiB):
    always exit 2 and one line naming the file, or a complete conversion."""
    mount = tmp_path / "fs"
    mount.mkdir()
    failed_at = set()
    for size_kib in range(8, 88, 8):
        with _tmpfs(mount, f"{size_kib}k"):
            out = mount / "out"
            done = _convert_in_subprocess(out)
            if done.returncode:
                _assert_one_line(done, out, "disk full (")
                failed_at.add(done.stderr.split(": disk full")[0].rsplit("/", 1)[1])
    assert {"train-00000.h5", "train-00001.h5"} <= failed_at and len(failed_at) >= 3, failed_at
