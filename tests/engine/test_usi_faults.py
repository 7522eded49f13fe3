"""`shogi-dnn usi` as a process, on a broken setup: a model it can check up front (a corrupt or mismatched
ONNX file, no onnxruntime, a run without a checkpoint, a Keras file with a Lambda layer) is one line on
stderr and exit status 2 before `usiok`; one that fails to load later still answers `readyok` and a legal
move at every `go`; a network that answers NaN still answers a legal move. Every read has a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import new_position
from tests.support.cli import refusal_in_fresh_process
from tests.support.paths import REPO

TIMEOUT = 120                      # seconds a whole session may take: a hang fails, never blocks
START_MOVES = set(new_position(STANDARD_START_SFEN).legal_usi())


def _onnx(path: Path, board_width: int = 81, board_float: bool = False, wide: bool = False,
          weight: float = 0.1) -> Path:
    """An ONNX graph like the export's: win_probability = sigmoid(weight * pieces in hand); the board
    input's width and dtype as given; `wide`: the output is sigmoid(hands), [batch, 14]."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Cast", ["hands"], ["h"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["h", "axes"], ["s"], keepdims=0),
             helper.make_node("Mul", ["s", "w"], ["x"]),
             helper.make_node("Sigmoid", ["h" if wide else "x"], ["win_probability"])]
    out_shape = ["batch", 14] if wide else ["batch"]
    board_type = TensorProto.FLOAT if board_float else TensorProto.UINT8
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("board", board_type, ["batch", board_width]),
         helper.make_tensor_value_info("hands", TensorProto.UINT8, ["batch", 14])],
        [helper.make_tensor_value_info("win_probability", TensorProto.FLOAT, out_shape)],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
         helper.make_tensor("w", TensorProto.FLOAT, [], [weight])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _session(argv: list[str], commands: list[str], env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess:
    """`shogi-dnn usi ARGV` fed `commands` (then end of input); its exit status and output."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "shogi_dnn", "usi", *argv], input="\n".join(commands) + "\n",
                          capture_output=True, text=True, cwd=REPO, env=environment, timeout=TIMEOUT)


def _refused(done: subprocess.CompletedProcess, words: str) -> None:
    """Exit status 2, nothing on stdout, one line on stderr containing `words`."""
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shogi-dnn usi: error: ") and words in lines[0], lines


HANDSHAKE = ["usi", "isready", "position startpos", "go byoyomi 100", "quit"]


def test_a_corrupt_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(os.urandom(4096))
    _refused(_session(["--model", str(path)], HANDSHAKE), "not a readable ONNX model")


@pytest.mark.parametrize("shape,words", [
    ({"board_width": 80}, "input board is tensor(uint8) ['batch', 80], not tensor(uint8) [batch, 81]"),
    ({"board_float": True}, "input board is tensor(float) ['batch', 81], not tensor(uint8) [batch, 81]"),
    ({"wide": True}, "output win_probability is tensor(float) ['batch', 14], not a float [batch]"),
])
def test_an_onnx_model_of_another_signature(tmp_path: Path, shape: dict, words: str) -> None:
    path = _onnx(tmp_path / "model.onnx", **shape)
    _refused(_session(["--model", str(path)], HANDSHAKE), words)


def test_no_onnxruntime(tmp_path: Path) -> None:
    path = _onnx(tmp_path / "model.onnx")
    shadow = tmp_path / "shadow" / "onnxruntime"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('onnxruntime is not installed')\n")
    done = _session(["--model", str(path)], HANDSHAKE,
                    env={"PYTHONPATH": f"{shadow.parent}{os.pathsep}{REPO}"})
    _refused(done, "an ONNX model needs onnxruntime")


def _run_dir(tmp_path: Path, data_dir: Path | None = None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"data_dir": str(data_dir or tmp_path / "moved-away")}))
    return run


def test_a_run_without_a_model_or_checkpoint(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    _refused(_session(["--run-dir", str(run)], HANDSHAKE), "no checkpoint in")
    assert "no checkpoint in" in refusal_in_fresh_process(["usi", "--run-dir", str(run)])  # no TensorFlow


def test_a_keras_model_with_a_lambda_layer(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    config = {"class_name": "Functional", "config": {"layers": [
        {"class_name": "InputLayer", "config": {"name": "board"}},
        {"class_name": "Lambda", "config": {"name": "scale", "function": "..."}}]}}
    with zipfile.ZipFile(run / "model.keras", "w") as archive:
        archive.writestr("config.json", json.dumps(config, indent=2))
        archive.writestr("metadata.json", "{}")
    _refused(_session(["--run-dir", str(run)], HANDSHAKE), "a Lambda layer")


def test_a_model_that_fails_to_load_later_plays_material_moves(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)                                # the material fit's dataset has moved away
    done = _session(["--run-dir", str(run), "--player", "material"],
                    ["usi", "isready", "position startpos", "go byoyomi 100", "go depth 1", "quit"])
    out = done.stdout.splitlines()
    assert done.returncode == 1, (out, done.stderr)
    error = [line for line in out if line.startswith("info string error: model: ")]
    assert len(error) == 3 and "readyok" in out and out.index("readyok") == out.index(error[0]) + 1
    moves = [line.split()[1] for line in out if line.startswith("bestmove")]
    assert len(moves) == 2 and set(moves) <= START_MOVES
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("shogi-dnn usi: error: "), done.stderr


def test_a_network_that_answers_nan(tmp_path: Path) -> None:
    path = _onnx(tmp_path / "nan.onnx", weight=float("nan"))
    done = _session(["--model", str(path)],
                    ["usi", "isready", "setoption name ResignValue value 1000", "position startpos",
                     "go nodes 40", "go depth 1", "go btime 0 wtime 0 byoyomi 300", "quit"])
    out = done.stdout.splitlines()
    assert done.returncode == 0 and done.stderr == "", done.stderr
    moves = [line.split()[1] for line in out if line.startswith("bestmove")]
    assert len(moves) == 3 and set(moves) <= START_MOVES, out
    nan = [line for line in out if line.startswith("info string error: the network gave NaN for ")]
    assert len(nan) == 3 and not any(" score " in line for line in out), out
