"""The one atomic write (folders/run_files.py: atomic_path, write_atomic, write_json_atomic, atomic_pair):
a temp renamed into place; on any error nothing partial is left and the old file stays as it was; a full
disk is one line naming the path and the space; a device, FIFO or socket in the way is refused, never
replaced; and no module of the package renames files on its own."""

from __future__ import annotations

import ast
import errno
import os
import re
import socket
import stat
from pathlib import Path

import pytest

from shogi_dnn.errors import DiskFullError, OutputError
from shogi_dnn.folders import run_files

PACKAGE = Path(run_files.__file__).resolve().parents[1]
ENOSPC = OSError(errno.ENOSPC, "No space left on device")
DISK_FULL = r"disk full \(needs about [\d.,]+ KiB, [\d.,]+ [KMGT]iB free on .*\); free some space"


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_full_disk_is_one_line_and_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    with pytest.raises(DiskFullError, match=f"^{target}: {DISK_FULL}") as info:
        with run_files.atomic_path(target, needed=3000) as tmp:
            tmp.write_bytes(b"partial")
            raise ENOSPC
    assert "\n" not in str(info.value) and "needs about 2.9 KiB" in str(info.value)
    assert _names(tmp_path) == ["data.bin"] and target.read_bytes() == b"old"


@pytest.mark.parametrize("error", [ValueError("bad value"), KeyboardInterrupt()])
def test_other_errors_pass_through_and_leave_nothing(tmp_path: Path, error: BaseException) -> None:
    target = tmp_path / "out"
    with pytest.raises(type(error)):
        with run_files.atomic_path(target, tmp=tmp_path / ".out.tmp") as tmp:
            tmp.mkdir()
            (tmp / "part").write_text("x")
            raise error
    assert _names(tmp_path) == []


def test_text_bytes_json_and_mode(tmp_path: Path) -> None:
    script = run_files.write_atomic(tmp_path / "run.sh", "#!/bin/sh\n", mode=0o755)
    assert script.read_text() == "#!/bin/sh\n" and stat.S_IMODE(script.stat().st_mode) == 0o755
    assert run_files.write_atomic(tmp_path / "b.npz", b"\x00\x01").read_bytes() == b"\x00\x01"
    run_files.write_json_atomic(tmp_path / "r.json", {"b": 1, "a": "歩"}, sort_keys=True)
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == '{\n  "a": "歩",\n  "b": 1\n}\n'
    with pytest.raises(ValueError):                     # strict JSON: no NaN, and no file
        run_files.write_json_atomic(tmp_path / "s.json", {"x": float("nan")}, allow_nan=False)
    assert _names(tmp_path) == ["b.npz", "r.json", "run.sh"]


def test_a_full_disk_in_write_text_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.write_text

    def full(self: Path, text: str, *args: object, **kwargs: object) -> int:
        real(self, text[:5], encoding="utf-8")
        raise ENOSPC
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(DiskFullError, match=f"^{tmp_path / 'manifest.json'}: {DISK_FULL}"):
        run_files.write_atomic(tmp_path / "manifest.json", "x" * 5000)
    assert _names(tmp_path) == []


def test_a_stale_temp_is_replaced_and_a_folder_replaces_a_folder(tmp_path: Path) -> None:
    final, tmp = tmp_path / "ckpt-1", tmp_path / ".tmp-ckpt-1"
    final.mkdir()
    (final / "old").write_text("old")
    tmp.mkdir()
    (tmp / "stale").write_text("a killed save")         # a killed earlier write of the same temp
    with run_files.atomic_path(final, tmp=tmp, fsync=True) as t:
        t.mkdir()
        (t / "new").write_text("new")
    assert _names(tmp_path) == ["ckpt-1"] and _names(final) == ["new"]


def test_a_failed_folder_rename_puts_the_old_folder_back(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    final, tmp = tmp_path / "sm", tmp_path / ".sm.tmp"
    final.mkdir()
    (final / "old").write_text("old")
    real = os.replace

    def refuse_new(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        if Path(src) == tmp:
            raise PermissionError(errno.EACCES, "Permission denied")
        real(src, dst)
    monkeypatch.setattr(os, "replace", refuse_new)
    with pytest.raises(PermissionError):
        with run_files.atomic_path(final, tmp=tmp) as t:
            t.mkdir()
            (t / "new").write_text("new")
    assert _names(tmp_path) == ["sm"] and _names(final) == ["old"]


def test_fsync_reaches_every_file_and_the_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    with run_files.atomic_path(tmp_path / "ckpt", fsync=True) as t:
        (t / "sub").mkdir(parents=True)
        (t / "a").write_text("a")
        (t / "sub" / "b").write_text("b")
    assert len(synced) == 4                             # a, sub/b, the temp folder, then tmp_path
    synced.clear()
    run_files.write_atomic(tmp_path / "plain", "no fsync asked")
    assert synced == []


def test_a_pair_is_replaced_as_one_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, sidecar = tmp_path / "m.onnx", tmp_path / "m.onnx.json"
    with run_files.atomic_pair(model, sidecar) as (new_model, new_sidecar):
        new_model.write_bytes(b"one")
        new_sidecar.write_text("1")
    assert _names(tmp_path) == ["m.onnx", "m.onnx.json"] and model.read_bytes() == b"one"
    with pytest.raises(DiskFullError, match=f"^{model}: disk full"):      # before the renames: old pair
        with run_files.atomic_pair(model, sidecar) as (new_model, new_sidecar):
            new_model.write_bytes(b"two")
            raise ENOSPC
    assert _names(tmp_path) == ["m.onnx", "m.onnx.json"] and model.read_bytes() == b"one"
    real = os.replace

    def die_at_the_sidecar(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        if Path(dst) == sidecar:
            raise KeyboardInterrupt
        real(src, dst)
    monkeypatch.setattr(os, "replace", die_at_the_sidecar)
    with pytest.raises(KeyboardInterrupt):
        with run_files.atomic_pair(model, sidecar) as (new_model, new_sidecar):
            new_model.write_bytes(b"three")
            new_sidecar.write_text("3")
    assert _names(tmp_path) == ["m.onnx"] and model.read_bytes() == b"three"    # never new + old sidecar


@pytest.fixture(params=["fifo", "socket"])
def special(request: pytest.FixtureRequest, tmp_path: Path):
    """A FIFO or a bound Unix socket at tmp_path/s (what a device file is to the write: not a file)."""
    path = tmp_path / "s"
    if request.param == "fifo":
        os.mkfifo(path)
        yield path, "a FIFO (named pipe)"
        return
    with socket.socket(socket.AF_UNIX) as sock:
        cwd = os.getcwd()
        os.chdir(tmp_path)                 # a relative bind: tmp_path may exceed a socket path's 108 bytes
        try:
            sock.bind("s")
        finally:
            os.chdir(cwd)
        yield path, "a socket"


def test_a_fifo_or_a_socket_is_refused_and_kept(special: tuple[Path, str]) -> None:
    path, kind = special
    folder, mode = path.parent, os.lstat(path).st_mode
    refused = re.escape(f"{path}: {kind}, not a regular file or folder; shogi-dnn writes only files and folders")
    for write in (lambda: run_files.write_atomic(path, "x"),
                  lambda: run_files.write_json_atomic(path, {}),
                  lambda: run_files.write_atomic(folder / "ok", "x", tmp=path),
                  lambda: run_files.atomic_pair(folder / "m.onnx", path).__enter__(),
                  lambda: run_files.atomic_pair(path, folder / "m.json").__enter__()):
        with pytest.raises(OutputError, match=f"^{refused}"):
            write()
    with pytest.raises(OutputError, match=f"^--out {refused}: choose another path$"):
        run_files.check_writable(folder, "--out", path)
    assert os.lstat(path).st_mode == mode and _names(folder) == ["s"]


def test_a_device_file_is_refused(tmp_path: Path) -> None:
    device = Path("/dev/null")
    if not device.exists() or not stat.S_ISCHR(os.lstat(device).st_mode):
        pytest.skip("no /dev/null character device here")
    with pytest.raises(OutputError, match="^/dev/null: a character device, not a regular file or folder"):
        run_files.refuse_special_file(device)      # the check alone: nothing is written near a real device
    run_files.refuse_special_file(tmp_path)
    run_files.refuse_special_file(tmp_path / "absent")


def _renames(tree: ast.AST) -> list[int]:
    """Lines that rename a file: os.replace/os.rename/shutil.move, Path.rename, Path.replace (one
    argument, unlike str.replace)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
            name = node.func.attr
            if ((owner == "os" and name in ("replace", "rename", "renames"))
                    or (owner == "shutil" and name == "move") or name == "rename"
                    or (name == "replace" and len(node.args) == 1 and not node.keywords)):
                found.append(node.lineno)
    return found


def test_only_the_helper_renames_files() -> None:
    sample = "p.rename(q)\nos.replace(a, b)\n'x'.replace('a', 'b')\np.replace(q)\nshutil.move(a, b)"
    assert _renames(ast.parse(sample)) == [1, 2, 4, 5]
    found = {str(p.relative_to(PACKAGE.parent)): lines for p in sorted(PACKAGE.rglob("*.py"))
             if (lines := _renames(ast.parse(p.read_text(encoding="utf-8"))))}
    assert list(found) == ["shogi_dnn/folders/run_files.py"], found
