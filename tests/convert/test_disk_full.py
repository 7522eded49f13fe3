"""A full disk during convert: one line naming the path and the space, no partial shard left, and the
rerun (with space again) finishes with the same shards. On a real size-limited tmpfs where the test
can mount one (root), else skipped; the fault-injecting variant runs everywhere."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.dataset import shards
from shogi_dnn.convert.run import ConvertSettings, run_convert
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
    """Fault injection at the lowest seam h5py gives Python (the dataset write): ENOSPC on the 2nd shard."""
    import h5py

    real, calls = h5py.Group.create_dataset, []

    def failing(self, name, *args, **kwargs):
        if name == "pieces":
            calls.append(name)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    out = tmp_path / "out"
    with pytest.raises(DiskFullError, match=r"train-00001.h5: disk full \(needs about [\d.]+ [KM]iB, [\d,.]+ [KM]iB free"):
        run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    assert [p.name for p in out.glob("*.h5*")] == ["train-00000.h5"]
    monkeypatch.setattr(h5py.Group, "create_dataset", real)
    run_convert([CSA], out, ConvertSettings(shard_size=300), workers=1)
    reference = tmp_path / "reference"
    run_convert([CSA], reference, ConvertSettings(shard_size=300), workers=1)
    assert _files(out) == _files(reference)


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
