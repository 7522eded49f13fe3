"""locks.py with two real processes: a child holds a folder's lock through locks.acquire while this process
tries to be a second writer (refused, naming the child), reads the folder (never blocked), and takes the
lock over once the child is killed; the same in the exclusive (O_EXCL) mode; train and convert refuse a
locked folder in one line before doing anything."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.folders import locks, run_files
from tests.support.cli import one_error_line
from tests.support.kifugen import write_corpus
from tests.support.paths import REPO

NAME = "writer.lock"
# The child: take the lock the real way, say so, hold it until stdin closes (then release it).
CHILD = ("import sys\nfrom shogi_dnn.folders import locks\n"
         "with locks.acquire(sys.argv[1], sys.argv[2], sys.argv[3], instead='wait'):\n"
         "    print('held', flush=True)\n    sys.stdin.read()\n")


@pytest.fixture
def holder(tmp_path: Path) -> Iterator:
    """start(folder, command, mode) -> the child process, once it holds the lock."""
    children: list[subprocess.Popen] = []

    def start(folder: Path, command: str = "train", mode: str = "") -> subprocess.Popen:
        env = {**os.environ, locks.MODE_ENV: mode}
        return _start_holder(children, [CHILD, str(folder), NAME, command], env)

    yield start
    _kill_all(children)


def _start_holder(children: list[subprocess.Popen], code_and_args: list[str],
                  env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -c CODE ARGS...` as a child (kept in `children`), returned once it prints "held"."""
    child = subprocess.Popen([sys.executable, "-c", *code_and_args], cwd=REPO, env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    children.append(child)
    assert child.stdout.readline().strip() == "held"
    return child


def _kill_all(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()


def kill(child: subprocess.Popen) -> None:
    """SIGKILL: the child cannot release anything; its lock file stays behind."""
    child.send_signal(signal.SIGKILL)
    child.wait()


@pytest.mark.parametrize("mode", ["", locks.EXCLUSIVE])
def test_second_writer_refused_reader_not_blocked_stale_taken_over(tmp_path: Path, holder, mode: str,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(locks.MODE_ENV, mode)
    folder = tmp_path / "runs" / "x"
    child = holder(folder, "train", mode)
    info = json.loads((folder / NAME).read_text())
    assert (info["command"], info["pid"], info["host"], info["mode"]) == (
        "train", child.pid, socket.gethostname(), mode or locks.FLOCK)
    with pytest.raises(locks.LockedError) as refused:
        locks.acquire(folder, NAME, "train", instead="choose another --run-dir")
    since = time.strftime("%H:%M:%S", time.localtime(info["started"]))
    assert str(refused.value) == (f"{folder} is being written by train, pid {child.pid} on host "
                                  f"{socket.gethostname()} since {since}; wait for it or choose another --run-dir")
    # A reader never waits: the folder's files read at once while the writer holds the lock.
    (folder / "run.json").write_text('{"data_dir": "d"}')
    import fcntl
    real_flock = fcntl.flock

    def never_blocking_flock(fd: int, operation: int) -> None:
        assert operation & fcntl.LOCK_NB or operation == fcntl.LOCK_UN, "a reader waits on a lock"
        real_flock(fd, operation)
    fcntl.flock = never_blocking_flock
    try:
        assert run_files.read_run_json(folder) == {"data_dir": "d"}
    finally:
        fcntl.flock = real_flock
    # The holder dies without releasing: its file is left, and the next writer takes the lock over.
    kill(child)
    assert (folder / NAME).is_file()
    with caplog.at_level("WARNING", logger="shogi_dnn.folders.locks"):
        lock = locks.acquire(folder, NAME, "train", instead="choose another --run-dir")
    assert f"taking over the lock of train, pid {child.pid} on host {socket.gethostname()}" in caplog.text
    assert "(the process is gone)" in caplog.text
    assert json.loads((folder / NAME).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (folder / NAME).exists()                      # released: the file is gone


def test_released_lock_is_free_and_a_live_exclusive_holder_refuses_flock(tmp_path: Path, holder,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "data"
    child = holder(folder, "convert")
    child.stdin.close()                                      # the child releases and exits
    child.wait()
    assert not (folder / NAME).exists()
    with locks.acquire(folder, NAME, "convert", instead="x"), \
            pytest.raises(locks.LockedError, match="being written by convert, pid"):
        locks.acquire(folder, NAME, "convert", instead="x")       # a second writer in the same process too
    # A writer that had to use the exclusive file (flock unsupported for it) is honoured by a flock writer.
    child = holder(folder, "convert", locks.EXCLUSIVE)
    monkeypatch.delenv(locks.MODE_ENV, raising=False)
    with pytest.raises(locks.LockedError, match=f"pid {child.pid}"):
        locks.acquire(folder, NAME, "convert", instead="x")


def test_exclusive_lock_of_another_host_names_the_file_to_delete(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(locks.MODE_ENV, locks.EXCLUSIVE)
    tmp_path.joinpath(NAME).write_text(json.dumps({"command": "train", "pid": 1, "host": "elsewhere",
                                                   "started": time.time(), "mode": locks.EXCLUSIVE}))
    with pytest.raises(locks.LockedError) as refused:
        locks.acquire(tmp_path, NAME, "train", instead="choose another --run-dir")
    assert "is being written by train, pid 1 on host elsewhere since " in str(refused.value)
    assert str(refused.value).endswith(f"; wait for it or choose another --run-dir (if that process is gone, "
                                       f"delete {tmp_path / NAME})")
    tmp_path.joinpath(NAME).write_text("garbage")
    with pytest.raises(locks.LockedError, match="unreadable"):
        locks.acquire(tmp_path, NAME, "train", instead="x")


def test_flock_unsupported_falls_back_to_the_exclusive_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    import errno
    import fcntl

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.delenv(locks.MODE_ENV, raising=False)
    monkeypatch.setattr(fcntl, "flock", no_flock)
    with caplog.at_level("WARNING", logger="shogi_dnn.folders.locks"):
        lock = locks.acquire(tmp_path, NAME, "train", instead="x")
    assert "flock is not supported here" in caplog.text
    assert json.loads((tmp_path / NAME).read_text())["mode"] == locks.EXCLUSIVE
    with pytest.raises(locks.LockedError, match=f"pid {os.getpid()}"):
        locks.acquire(tmp_path, NAME, "train", instead="x")
    lock.release()
    assert not (tmp_path / NAME).exists()


def test_train_and_convert_refuse_a_locked_folder_in_one_line(tmp_path: Path, holder,
                                                              capsys: pytest.CaptureFixture) -> None:
    run_dir = tmp_path / "run"
    child = holder(run_dir, "train")
    line = one_error_line(capsys, ["train", "--config", str(REPO / "train" / "cpu-smoke.toml"), "--data",
                                   str(tmp_path / "data"), "--run-dir", str(run_dir)])
    assert f"{run_dir} is being written by train, pid {child.pid}" in line
    assert line.endswith("; wait for it or choose another --run-dir")
    out = tmp_path / "data"
    write_corpus(tmp_path / "records", files=1, per_file=2)
    child = holder(out, "convert")
    assert cli.main(["convert", str(tmp_path / "records"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"shogi-dnn convert: error: {out} is being written by convert, pid {child.pid} on host "
                           f"{socket.gethostname()} since "
                           f"{time.strftime('%H:%M:%S', time.localtime(json.loads((out / NAME).read_text())['started']))}"
                           "; wait for it or choose another --out")
    assert sorted(p.name for p in out.iterdir()) == [NAME]          # nothing written beside the lock


# A dataset's reader or writer held the real way (locks.read_dataset / locks.replace_dataset) by a child.
DATASET_CHILD = ("import sys\nfrom shogi_dnn.folders import locks\n"
                 "if sys.argv[2] == 'read':\n    held = locks.read_dataset(sys.argv[1], 'train')\n"
                 "else:\n    writer = locks.acquire(sys.argv[1], 'writer.lock', 'convert', instead='wait')\n"
                 "    held = locks.replace_dataset(sys.argv[1], 'convert')\n"
                 "print('held', flush=True)\nsys.stdin.read()\n")


@pytest.fixture
def dataset_holder() -> Iterator:
    """start(folder, 'read' | 'write') -> the child process, once it holds the dataset's lock that way."""
    children: list[subprocess.Popen] = []

    def start(folder: Path, how: str) -> subprocess.Popen:
        return _start_holder(children, [DATASET_CHILD, str(folder), how])

    yield start
    _kill_all(children)


def test_convert_overwrite_is_refused_while_a_reader_holds_the_dataset(
        tmp_path: Path, dataset_holder, capsys: pytest.CaptureFixture) -> None:
    """Issue 31: `convert --overwrite` of a dataset a `train` was reading ran with no notice (the train then
    died on rows outside the shards). A reader's shared lock refuses it in one line naming the reader; more
    readers may hold it at once; once they are gone (even killed) the conversion runs."""
    out = tmp_path / "data"
    write_corpus(tmp_path / "records", files=1, per_file=2)
    assert cli.main(["convert", str(tmp_path / "records"), "--out", str(out), "--quiet"]) == 0
    manifest = (out / "manifest.json").read_bytes()
    write_corpus(tmp_path / "other", files=1, per_file=3, seed=5)
    readers = [dataset_holder(out, "read"), dataset_holder(out, "read")]          # shared: both hold it
    assert cli.main(["convert", str(tmp_path / "other"), "--out", str(out), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert (f"error: {out} is being read by train, pid {readers[1].pid} on host {socket.gethostname()} since "
            in err and "(and 1 more reader); wait for it to end (or stop it), or choose another --out" in err)
    assert (out / "manifest.json").read_bytes() == manifest                       # nothing replaced
    readers[0].stdin.close()
    readers[0].wait()
    kill(readers[1])                                                              # the kernel drops its lock
    assert cli.main(["convert", str(tmp_path / "other"), "--out", str(out), "--overwrite", "--quiet"]) == 0
    assert (out / "manifest.json").read_bytes() != manifest
    assert (out / locks.READERS_LOCK).read_bytes() == b""                         # stale names dropped


def test_train_is_refused_while_convert_writes_its_dataset(tmp_path: Path, dataset_holder,
                                                           capsys: pytest.CaptureFixture) -> None:
    from tests.support.shardgen import make_dataset

    data = tmp_path / "data"
    make_dataset(data, train=[200], validation=[64], chunk_rows=32)
    child = dataset_holder(data, "write")
    line = one_error_line(capsys, ["train", "--config", str(REPO / "train" / "cpu-smoke.toml"), "--data",
                                   str(data), "--run-dir", str(tmp_path / "run")])
    assert f"{data} is being written by convert, pid {child.pid} on host" in line
    assert line.endswith("; wait for it to finish")
