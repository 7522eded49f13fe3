"""engine/players.py: the Keras evaluator equals the model's mirror-averaged probability, the ONNX evaluator
runs an export without TensorFlow, the material evaluator applies the fitted piece values, and
make_evaluator picks the right one or says why not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.analysis import baselines, scoring
from shogi_dnn.dataset import features, policy
from shogi_dnn.engine import players
from shogi_dnn.errors import RunError
from shogi_dnn.kifu.record import STANDARD_START_SFEN
from shogi_dnn.rules import new_position
from tests.support.evaldata import material_dataset
from tests.support.paths import REPO


def _children() -> tuple[np.ndarray, np.ndarray]:
    position = new_position(STANDARD_START_SFEN)
    pairs = []
    for move in position.legal_usi():
        child = position.copy()
        child.push_usi(move)
        pairs.append(features.encode_position(child))
    return np.stack([b for b, _ in pairs]), np.stack([h for _, h in pairs])


def _tiny_onnx(path: Path, weight: float = 0.1) -> Path:
    """An ONNX graph with the export's signature: win_probability = sigmoid(weight * pieces in hand)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Cast", ["hands"], ["h"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["h", "axes"], ["s"], keepdims=0),
             helper.make_node("Mul", ["s", "w"], ["x"]),
             helper.make_node("Sigmoid", ["x"], ["win_probability"])]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("board", TensorProto.UINT8, ["batch", 81]),
         helper.make_tensor_value_info("hands", TensorProto.UINT8, ["batch", 14])],
        [helper.make_tensor_value_info("win_probability", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
         helper.make_tensor("w", TensorProto.FLOAT, [], [weight])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, path)
    return path


def _policy_onnx(path: Path, seed: int = 0) -> tuple[Path, np.ndarray]:
    """An ONNX graph with two outputs: win_probability as _tiny_onnx's, and policy [batch, 2187] =
    board . W."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    weights = (np.random.default_rng(seed).normal(size=(81, 2187)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Cast", ["hands"], ["h"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["h", "axes"], ["s"], keepdims=0),
             helper.make_node("Mul", ["s", "w"], ["x"]),
             helper.make_node("Sigmoid", ["x"], ["win_probability"]),
             helper.make_node("Cast", ["board"], ["b"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["b", "W"], ["policy"])]
    graph = helper.make_graph(
        nodes, "tiny-policy",
        [helper.make_tensor_value_info("board", TensorProto.UINT8, ["batch", 81]),
         helper.make_tensor_value_info("hands", TensorProto.UINT8, ["batch", 14])],
        [helper.make_tensor_value_info("win_probability", TensorProto.FLOAT, ["batch"]),
         helper.make_tensor_value_info("policy", TensorProto.FLOAT, ["batch", 2187])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
         helper.make_tensor("w", TensorProto.FLOAT, [], [0.1]), numpy_helper.from_array(weights, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path, weights


def test_priors_from_a_policy_output(tmp_path: Path) -> None:
    path, weights = _policy_onnx(tmp_path / "policy.onnx")
    evaluator = players.make_evaluator("network", path)
    evaluator.load()
    assert evaluator.has_policy and players.has_policy(evaluator)
    position = new_position(STANDARD_START_SFEN)
    position.push_usi("7g7f")                               # White to move: labels from White's view
    board, hands = features.encode_position(position)
    legal = position.legal_usi()
    labels = players.legal_labels(position, legal)
    assert len(set(labels.tolist())) == len(legal)
    got = players.evaluate(evaluator, board[None], hands[None], [labels])
    logits = board.astype(np.float32) @ weights
    want = np.exp(logits[labels] - logits[labels].max())
    assert got.priors[0] == pytest.approx(want / want.sum(), rel=1e-5)
    assert got.win.tolist() == pytest.approx([float(scoring.sigmoid(0.1 * hands.sum()))], abs=1e-6)
    for move, label in zip(legal, labels):                 # the label names the move (policy.label_to_move)
        assert features.decode_move(policy.label_to_move(board, int(label)), position.turn) == move
    plain = players.make_evaluator("network", _tiny_onnx(tmp_path / "tiny.onnx"))
    plain.load()
    assert not plain.has_policy and players.evaluate(plain, board[None], hands[None], [labels]).priors is None
    assert players.evaluate(evaluator, board[None], hands[None]).priors is None     # no labels asked


def test_the_search_uses_the_policy(tmp_path: Path) -> None:
    from shogi_dnn.engine import limits, search

    path, _ = _policy_onnx(tmp_path / "policy.onnx", seed=4)
    evaluator = players.make_evaluator("network", path)
    position = new_position(STANDARD_START_SFEN)
    run = search.Search(evaluator, position, limits.Limits(nodes=64))
    run.run()
    board, hands = features.encode_position(position)
    labels = [players.legal_labels(position, run.tree.legal)]
    want = players.evaluate(evaluator, board[None], hands[None], labels)
    assert run.tree.edges.priors == pytest.approx(want.priors[0])
    assert 64 <= run.nodes < 64 + limits.Settings().batch_size              # no quiescence with a policy


def test_legal_priors_is_a_softmax_over_the_given_labels() -> None:
    logits = np.log(np.asarray([[1.0, 2.0, 3.0, 4.0] + [1.0] * 2183, [5.0] * 2187]))
    got = players.legal_priors(logits, [np.asarray([1, 3]), np.asarray([], np.int64)])
    assert got[0] == pytest.approx([2 / 6, 4 / 6]) and got[1].size == 0


def test_onnx_evaluator_without_tensorflow(tmp_path: Path) -> None:
    path = _tiny_onnx(tmp_path / "tiny.onnx")
    evaluator = players.make_evaluator("network", path)
    assert isinstance(evaluator, players.OnnxEvaluator)
    board, hands = _children()
    hands[3, 0] = 5
    got = evaluator.win_probability(board, hands)
    assert got.shape == (len(board),) and got.dtype == np.float64
    assert got == pytest.approx(scoring.sigmoid(0.1 * hands.sum(axis=1)), abs=1e-6)
    code = ("import sys; from pathlib import Path; from shogi_dnn.engine import players, protocol; "
            "import io; "
            f"e = players.make_evaluator('network', Path({str(path)!r})); out = io.StringIO(); "
            "protocol.UsiEngine(e, out).run(iter(['isready', 'position startpos', 'go depth 1', 'quit'])); "
            "print(out.getvalue().split()[-1], 'tensorflow' in sys.modules, 'keras' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    move, tf_loaded, keras_loaded = done.stdout.split()
    assert move in new_position(STANDARD_START_SFEN).legal_usi()
    assert (tf_loaded, keras_loaded) == ("False", "False")


def test_a_broken_onnx_file_is_one_error(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")        # reading the file needs it (the export extra), as the siblings' onnx
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not a model")
    with pytest.raises(RunError, match="not a readable ONNX model"):
        players.make_evaluator("network", path).load()


@pytest.mark.slow                  # builds and saves a Keras model: ~8 s on the shared CPU
def test_keras_evaluator_is_the_mirror_averaged_model(tmp_path: Path) -> None:
    from shogi_dnn.config import ModelConfig
    from shogi_dnn.training import model as model_lib

    config = ModelConfig(blocks=1, filters=8, value_hidden=8, features="attacks")
    model = model_lib.build_model(config, seed=3)
    model.save(tmp_path / "model.keras")
    board, hands = _children()
    want = scoring.sigmoid(np.asarray(model_lib.value_logits(model, board, hands, mirror_average=True),
                                      np.float64))
    evaluator = players.make_evaluator("network", tmp_path)
    assert isinstance(evaluator, players.KerasEvaluator)
    assert evaluator.win_probability(board, hands) == pytest.approx(want, abs=1e-5)
    alone = players.make_evaluator("network", tmp_path, mirror_average=False).win_probability(board, hands)
    assert alone == pytest.approx(scoring.sigmoid(np.asarray(model({"board": board, "hands": hands}),
                                                             np.float64).reshape(-1)), abs=1e-5)


def test_material_evaluator_fits_on_the_runs_training_split(tmp_path: Path) -> None:
    material_dataset(tmp_path / "data", {"train": (400, 0.8, False), "validation": (100, 0.5, False)})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"data_dir": str(tmp_path / "data")}))
    evaluator = players.make_evaluator("material", run_dir)
    board, hands = _children()
    got = evaluator.win_probability(board, hands)
    fitted = baselines.Baselines.from_dict(json.loads((run_dir / "baselines.json").read_text())["baselines"])
    assert got == pytest.approx(scoring.sigmoid(fitted.material_logits(board, hands)))
    assert fitted.piece_values()["R"] > 1.0                # the planted extra rook wins


def test_make_evaluator_refusals(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no such run directory or model file"):
        players.make_evaluator("network", tmp_path / "missing")
    with pytest.raises(RunError, match="unknown player"):
        players.make_evaluator("random", tmp_path)
    with pytest.raises(RunError, match="not a run directory"):
        players.make_evaluator("network", tmp_path)
    with pytest.raises(RunError, match="needs the run directory"):
        players.make_evaluator("material", _tiny_onnx(tmp_path / "m.onnx"))


@pytest.mark.slow                  # builds and saves a Keras model: ~10 s on the shared CPU
def test_keras_evaluator_with_a_policy_output(tmp_path: Path) -> None:
    import keras

    board_in = keras.Input((81,), dtype="uint8", name="board")
    hands_in = keras.Input((14,), dtype="uint8", name="hands")
    x = keras.layers.Concatenate()([keras.ops.cast(board_in, "float32"), keras.ops.cast(hands_in, "float32")])
    value = keras.layers.Dense(1, name="value")(x)
    logits = keras.layers.Dense(policy.NUM_MOVE_LABELS, name="policy")(x)
    model = keras.Model({"board": board_in, "hands": hands_in}, [value, logits])
    model.save(tmp_path / "model.keras")
    board, hands = _children()
    evaluator = players.make_evaluator("network", tmp_path)
    evaluator.load()
    assert evaluator.has_policy
    v, p = (np.asarray(t, np.float64) for t in model({"board": board, "hands": hands}))
    mirrored = model({"board": features.mirror_board(board), "hands": hands})
    mv, mp = (np.asarray(t, np.float64) for t in mirrored)
    win, got = evaluator.evaluate_logits(board, hands)
    assert win == pytest.approx((scoring.sigmoid(v[:, 0]) + scoring.sigmoid(mv[:, 0])) / 2, abs=1e-5)
    mirror = policy.mirror_labels(np.arange(policy.NUM_MOVE_LABELS))
    assert got == pytest.approx((p + mp[:, mirror]) / 2, abs=1e-4)
    alone = players.make_evaluator("network", tmp_path, mirror_average=False)
    assert alone.evaluate_logits(board, hands)[1] == pytest.approx(p, abs=1e-4)


def test_open_network_picks_the_packaged_onnx_file_or_its_keras_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packaged network: its ONNX export where onnxruntime imports and mirror averaging is wanted, else
    its Keras model (nothing loaded yet either way); the refusals are one RunError each."""
    from shogi_dnn import packaged

    pytest.importorskip("onnxruntime")
    onnx = players.open_network()
    assert isinstance(onnx, players.OnnxEvaluator) and onnx.path == packaged.model_file("onnx")
    plain = players.open_network(mirror_average=False)
    assert isinstance(plain, players.KerasEvaluator) and not plain.mirror_average
    monkeypatch.setitem(sys.modules, "onnxruntime", None)          # `import onnxruntime` fails
    assert not players.onnxruntime_available()
    keras_model = players.open_network()
    assert isinstance(keras_model, players.KerasEvaluator)
    assert keras_model.run_dir == packaged.model_dir() and keras_model.mirror_average
    with pytest.raises(RunError, match="no checkpoints"):
        players.open_network(checkpoint="ckpt-00000010")
    with pytest.raises(RunError, match="not both"):
        players.open_network(run_dir=Path("a"), model=Path("b.onnx"))


def test_predict_searches_with_the_keras_model_when_onnxruntime_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """predict on the packaged network without the export extra: the loaded model answers the search (an
    ONNX session would need onnxruntime)."""
    import argparse

    from shogi_dnn.commands import predict as predict_command
    from shogi_dnn.engine import game_values

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    args = argparse.Namespace(mirror_average=True)
    evaluator = predict_command.searcher(object(), "packaged", own=False, args=args)
    assert isinstance(evaluator, game_values.ModelEvaluator)
