"""shogi_dnn/packaged: the shipped network's files are found and checked (missing, empty, damaged: one line
naming the file), and the files the package ships are whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shogi_dnn import packaged
from shogi_dnn.errors import RunError


def test_the_shipped_files_are_whole() -> None:
    folder = packaged.model_dir()
    for kind in ("keras", "onnx"):
        assert packaged.model_file(kind).parent == folder
    sidecar = json.loads((folder / packaged.ONNX_SIDECAR).read_text())
    assert sidecar["file"] == packaged.ONNX_FILE and sidecar["model"]["policy_head"] is True
    assert [o["name"] for o in sidecar["outputs"]] == ["win_probability", "policy_logits"]
    card = (folder / packaged.CARD_FILE).read_text()
    assert "shogi-dnn train" in card and "held-out" in card
    assert (folder / packaged.TRAINED_GAMES_FILE).stat().st_size > 0


@pytest.mark.parametrize("kind", ["keras", "onnx"])
@pytest.mark.parametrize("damage", ["missing", "empty", "garbage"])
def test_a_missing_or_damaged_file_is_one_line(tmp_path: Path, kind: str, damage: str) -> None:
    shutil.copytree(packaged.model_dir(), packaged.model_dir(tmp_path))
    path = packaged.model_dir(tmp_path) / (packaged.KERAS_FILE if kind == "keras" else packaged.ONNX_FILE)
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(b"" if damage == "empty" else b"\x00garbage, not a model")
    with pytest.raises(RunError) as info:
        packaged.model_file(kind, tmp_path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert ("is missing" if damage == "missing" else "is damaged") in message
    assert "--run-dir" in message


def test_every_shipped_file_is_package_data() -> None:
    """pyproject.toml's package-data patterns match each file of the packaged folder (else a wheel
    lacks it)."""
    import fnmatch
    try:
        import tomllib
    except ModuleNotFoundError:         # Python 3.10
        import tomli as tomllib
    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "shogi_dnn.packaged"]
    base = packaged.model_dir().parent
    for path in packaged.model_dir().iterdir():
        name = path.relative_to(base).as_posix()
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name


def _usi_session(commands: list[str], until: str, timeout: float = 120) -> list[str]:
    """`shogi-dnn usi` (no model argument) fed `commands`; its stdout lines up to the first starting with
    `until`, then `quit`. A line not seen within `timeout` seconds fails the test (the process is killed)."""
    import os
    import queue
    import subprocess
    import sys
    import threading
    import time

    from tests.support.paths import REPO
    process = subprocess.Popen([sys.executable, "-m", "shogi_dnn", "usi"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)
    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    try:
        process.stdin.write("\n".join(commands) + "\n")
        process.stdin.flush()
        deadline = time.monotonic() + timeout
        while not seen or not seen[-1].startswith(until):
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, (seen, process.stderr.read())
            seen.append(line)
        process.stdin.write("quit\n")
        process.stdin.flush()
        assert process.wait(timeout=30) == 0
        assert process.stderr.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
    return seen


def test_usi_without_a_model_argument_plays_the_packaged_network() -> None:
    """`shogi-dnn usi` alone: readyok, a search with the packaged network that reports scores, a legal
    move."""
    pytest.importorskip("onnxruntime")
    from shogi_dnn.kifu.record import STANDARD_START_SFEN
    from shogi_dnn.rules import new_position
    lines = _usi_session(["usi", "isready", "position startpos moves 7g7f", "go nodes 60"], "bestmove")
    assert "usiok" in lines and "readyok" in lines
    position = new_position(STANDARD_START_SFEN)
    position.push_usi("7g7f")
    assert lines[-1].split()[1] in set(position.legal_usi())
    assert any(" score cp " in line for line in lines if line.startswith("info"))


@pytest.mark.parametrize("game,note", [(1, "one of the"), (4, "not one of the")])
def test_predict_without_a_run_uses_the_packaged_network(tmp_path: Path, game: int, note: str) -> None:
    """`shogi-dnn predict RECORD` alone: the packaged Keras model, the graph in the working folder, and
    whether the game is one it trained on (games 1 and 4 of fairy-0000.csa: its training and validation
    splits, as the dataset it was trained on says)."""
    import os
    import subprocess
    import sys

    from tests.support.paths import REPO
    record = REPO.parent / "shared" / "kifu-fairy" / "fairy-0000.csa"
    if not record.is_file():
        pytest.skip("../shared/kifu-fairy is absent")
    done = subprocess.run([sys.executable, "-m", "shogi_dnn", "predict", "--game", str(game), str(record)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert f"the packaged model {packaged.NAME}" in done.stderr
    assert f"{note} 2,677 games {packaged.NAME} trained on" in done.stdout
    assert (tmp_path / f"predict-{record.stem}.png").stat().st_size > 0
