"""`shogi-dnn export`: the ONNX file (onnxruntime) and the SavedModel (TensorFlow) give the Keras model's
win probabilities on 1,000 real positions (tests/data records) within 1e-5, for both input feature sets,
with and without mirror averaging; the README's onnxruntime example runs without TensorFlow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn import kifu
from shogi_dnn.analysis import predict
from shogi_dnn.config import ModelConfig
from tests.support.evalrun import make_random_run
from tests.support.paths import DATA

tf = pytest.importorskip("tensorflow")

from shogi_dnn.training import export
from shogi_dnn.training import model as model_lib

POSITIONS = 1000
TOLERANCE = 1e-5
README = Path(__file__).resolve().parents[2] / "README.md"


def real_positions(count: int = POSITIONS) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` positions of the records under tests/data (every game replayed), side to move's
    view."""
    boards, hands = [], []
    for path in sorted(p for p in DATA.rglob("*") if p.is_file() and p.suffix not in (".md",)):
        try:
            items = list(kifu.read_record_file(path))
        except Exception:                     # noqa: BLE001 - not a record file
            continue
        for item in items:
            if isinstance(item, Exception):
                continue
            game = predict.game_positions(item)
            boards.append(game.board)
            hands.append(game.hands)
        if sum(len(b) for b in boards) >= count:
            break
    board, hand = np.concatenate(boards)[:count], np.concatenate(hands)[:count]
    assert len(board) == count
    return board, hand


@pytest.fixture(scope="module")
def positions() -> tuple[np.ndarray, np.ndarray]:
    return real_positions()


def keras_probability(model, board, hands, mirror_average: bool) -> np.ndarray:
    logits = model_lib.value_logits(model, board, hands, mirror_average=mirror_average)
    return tf.sigmoid(logits).numpy()


def onnx_probability(path: Path, board, hands) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([export.OUTPUT], {"board": board, "hands": hands})[0]


def savedmodel_probability(path: Path, board, hands) -> np.ndarray:
    loaded = tf.saved_model.load(str(path))
    out = loaded.signatures[export.SIGNATURE](board=tf.constant(board), hands=tf.constant(hands))
    return out[export.OUTPUT].numpy()


@pytest.mark.slow
@pytest.mark.parametrize("feature_set", ["pieces", "attacks"])
@pytest.mark.parametrize("mirror_average", [True, False])
def test_both_formats_match_keras_on_real_positions(tmp_path, positions, feature_set, mirror_average) -> None:
    pytest.importorskip("tf2onnx")
    cfg = ModelConfig(blocks=1, filters=8, value_hidden=8, features=feature_set, batch_norm="local")
    model = model_lib.build_model(cfg, seed=5)
    board, hands = positions
    expected = keras_probability(model, board, hands, mirror_average)
    assert expected.std() > 1e-4            # a model that says something different per position

    onnx_path, onnx_sidecar = export.export_model(model, cfg, "onnx", tmp_path / "m.onnx",
                                                  mirror_average=mirror_average)
    sm_path, sm_sidecar = export.export_model(model, cfg, "savedmodel", tmp_path / "sm",
                                              mirror_average=mirror_average)
    got_onnx = onnx_probability(onnx_path, board, hands)
    got_sm = savedmodel_probability(sm_path, board, hands)
    diff_onnx = float(np.abs(got_onnx - expected).max())
    diff_sm = float(np.abs(got_sm - expected).max())
    print(f"\n{feature_set} mirror_average={mirror_average}: {POSITIONS} positions, max |p - keras| "
          f"onnx {diff_onnx:.3g}, savedmodel {diff_sm:.3g}")
    assert got_onnx.shape == got_sm.shape == (POSITIONS,)
    assert got_onnx.dtype == got_sm.dtype == np.float32
    assert diff_onnx < TOLERANCE and diff_sm < TOLERANCE

    info = json.loads(onnx_sidecar.read_text())
    assert onnx_sidecar == tmp_path / "m.onnx.json" and sm_sidecar == tmp_path / "sm.json"
    assert [i["name"] for i in info["inputs"]] == ["board", "hands"]
    assert info["inputs"][0]["shape"] == ["batch", 81] and info["outputs"][0]["name"] == "win_probability"
    assert info["mirror_average"] is mirror_average and info["model"]["features"] == feature_set
    assert json.loads(sm_sidecar.read_text())["signature"] == export.SIGNATURE


@pytest.mark.parametrize("mirror_average", [True, False])
def test_policy_head_exports_both_outputs(tmp_path, positions, mirror_average) -> None:
    """A policy model: ONNX and SavedModel give the Keras win probabilities and policy logits (the
    mirror-averaged ones as model.policy_logits computes them); the sidecar names both outputs."""
    pytest.importorskip("tf2onnx")
    ort = pytest.importorskip("onnxruntime")
    cfg = ModelConfig(blocks=1, filters=8, value_hidden=8, batch_norm="local", policy_head=True)
    model = model_lib.build_model(cfg, seed=6)
    board, hands = positions[0][:200], positions[1][:200]
    value, logits = model_lib.value_and_policy_logits(model, board, hands, mirror_average=mirror_average)
    expected_p, expected_logits = tf.sigmoid(value).numpy(), np.asarray(logits)
    onnx_path, sidecar = export.export_model(model, cfg, "onnx", tmp_path / "m.onnx",
                                             mirror_average=mirror_average)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got_p, got_logits = session.run([export.OUTPUT, export.POLICY_OUTPUT], {"board": board, "hands": hands})
    assert got_logits.shape == (200, 2187) and got_logits.dtype == np.float32
    assert np.abs(got_p - expected_p).max() < TOLERANCE
    assert np.abs(got_logits - expected_logits).max() < 1e-4           # logits of about -8, float32
    sm_path, _ = export.export_model(model, cfg, "savedmodel", tmp_path / "sm", mirror_average=mirror_average)
    out = tf.saved_model.load(str(sm_path)).signatures[export.SIGNATURE](board=tf.constant(board),
                                                                         hands=tf.constant(hands))
    assert np.abs(out[export.POLICY_OUTPUT].numpy() - expected_logits).max() < 1e-4
    info = json.loads(sidecar.read_text())
    assert [o["name"] for o in info["outputs"]] == [export.OUTPUT, export.POLICY_OUTPUT]
    assert info["outputs"][1]["shape"] == ["batch", 2187] and info["model"]["policy_head"] is True
    # A value-only model's export names one output, as before.
    plain = ModelConfig(blocks=1, filters=8, value_hidden=8)
    described = export.describe("onnx", tmp_path / "x.onnx", plain, None, True)
    assert [o["name"] for o in described["outputs"]] == [export.OUTPUT]


@pytest.mark.slow
def test_command_fixed_batch_and_readme_example(tmp_path, positions, caplog) -> None:
    """`shogi-dnn export` on a run (default paths, a fixed batch; tf2onnx's lines only with --verbose), then
    the README's example verbatim."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    from shogi_dnn import cli

    run_dir = make_random_run(tmp_path / "RUN", tmp_path / "data", devices=1)
    with caplog.at_level("INFO"):
        assert cli.main(["export", "--run-dir", str(run_dir), "--format", "onnx"]) == 0
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("tf2onnx")]
    assert (run_dir / "export" / "model.onnx").is_file()
    assert (run_dir / "export" / "model.onnx.json").is_file()
    fixed = tmp_path / "fixed.onnx"
    with caplog.at_level("INFO"):
        assert cli.main(["export", "--run-dir", str(run_dir), "--format", "onnx", "--batch", "4",
                         "--no-mirror-average", "--out", str(fixed), "--verbose"]) == 0
    assert any(r.getMessage().startswith("Using opset") for r in caplog.records if r.name.startswith("tf2onnx"))
    session = ort.InferenceSession(str(fixed), providers=["CPUExecutionProvider"])
    assert [i.shape for i in session.get_inputs()] == [[4, 81], [4, 14]]
    board, hands = positions
    model = model_lib.load_model(run_dir / "model.keras")
    got = session.run(None, {"board": board[:4], "hands": hands[:4]})[0]
    np.testing.assert_allclose(got, keras_probability(model, board[:4], hands[:4], False), atol=TOLERANCE)
    assert cli.main(["export", "--run-dir", str(run_dir), "--format", "savedmodel"]) == 0
    assert (run_dir / "export" / "saved_model" / "saved_model.pb").is_file()
    assert json.loads((run_dir / "export" / "saved_model.json").read_text())["format"] == "savedmodel"

    # The README's example, run as written from the folder holding RUN/, in a fresh interpreter.
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Export"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    check = ("\nimport sys\nassert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, "
             "'TF imported'\n")
    env = dict(os.environ, PYTHONPATH=str(README.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", code + check], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    p = float(re.search(r"probability (\d\.\d+)", result.stdout).group(1))
    assert 0.0 <= p <= 1.0
    print("\n" + result.stdout.strip())


@pytest.mark.parametrize("fmt", ["savedmodel", "onnx"])
def test_out_through_a_symlink_writes_where_it_points(tmp_path, fmt) -> None:
    # The symlink given as --out was replaced (or the rename onto it failed): the link stays, the export
    # goes where it points.
    from shogi_dnn import cli

    if fmt == "onnx":
        pytest.importorskip("tf2onnx")
    run_dir = make_random_run(tmp_path / "RUN", tmp_path / "data", devices=1)
    disk = tmp_path / "big-disk"
    disk.mkdir()
    target = disk / ("sm" if fmt == "savedmodel" else "m.onnx")
    target.mkdir() if fmt == "savedmodel" else target.write_bytes(b"old")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert cli.main(["export", "--run-dir", str(run_dir), "--format", fmt, "--out", str(link)]) == 0
    assert link.is_symlink() and link.resolve() == target
    assert (target / "saved_model.pb").is_file() if fmt == "savedmodel" else target.stat().st_size > 1000
    assert export.check_pair(target)["format"] == fmt and sorted(p.name for p in disk.iterdir()) == [
        target.name, target.name + ".json"]


def test_bad_batch_is_one_line_error(tmp_path, capsys) -> None:
    from shogi_dnn import cli

    run_dir = tmp_path / "RUN"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")
    assert cli.main(["export", "--run-dir", str(run_dir), "--format", "onnx", "--batch", "0"]) == 2
    assert "--batch 0" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", [pytest.param("onnx", marks=pytest.mark.slow), "savedmodel"])
def test_interrupted_export_leaves_the_old_pair(tmp_path, monkeypatch, fmt) -> None:
    """An export interrupted between the model and its sidecar keeps the previous model and sidecar as
    they were (and no temp folder); interrupted between the two renames, no old sidecar is left beside
    the new model; check_pair tells a pair that belongs together."""
    if fmt == "onnx":
        pytest.importorskip("tf2onnx")
    cfg = ModelConfig(blocks=0, filters=4, value_hidden=4)
    path = tmp_path / ("m.onnx" if fmt == "onnx" else "sm")
    old_path, old_sidecar = export.export_model(model_lib.build_model(cfg, seed=1), cfg, fmt, path)
    old_digest, old_info = export.model_digest(path), old_sidecar.read_bytes()
    assert export.check_pair(path)[export.MODEL_DIGEST] == old_digest
    new_model = model_lib.build_model(cfg, seed=2)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt("between the model and its sidecar")

    with monkeypatch.context() as patch:
        patch.setattr(export, "describe", interrupted)          # the new model is written by then
        with pytest.raises(KeyboardInterrupt):
            export.export_model(new_model, cfg, fmt, path)
    assert export.model_digest(path) == old_digest and old_sidecar.read_bytes() == old_info
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, old_sidecar.name])

    real_replace = os.replace

    def replace_then_die(src, dst):
        if Path(dst) == old_sidecar:                       # the final rename, not the staged write
            raise KeyboardInterrupt("between the renames")
        return real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", replace_then_die)
        with pytest.raises(KeyboardInterrupt):
            export.export_model(new_model, cfg, fmt, path)
    assert not old_sidecar.exists() and export.model_digest(path) != old_digest   # never new + old
    with pytest.raises(export.RunError, match="missing"):
        export.check_pair(path)
    export.export_model(new_model, cfg, fmt, path)
    assert export.check_pair(path)[export.MODEL_DIGEST] == export.model_digest(path) != old_digest
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, old_sidecar.name])


def test_check_pair_refuses_a_sidecar_of_another_model(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(b"model one")
    export.sidecar_path(path).write_text(json.dumps({export.MODEL_DIGEST: export.model_digest(path)}))
    assert export.check_pair(path)
    path.write_bytes(b"model two")
    with pytest.raises(export.RunError, match="describes another export than m.onnx"):
        export.check_pair(path)


def test_savedmodel_permission_error_is_one_line(tmp_path, monkeypatch) -> None:
    """TensorFlow's own PermissionDeniedError (a read-only folder it writes in) becomes one RunError."""
    def denied(*args, **kwargs):
        raise tf.errors.PermissionDeniedError(None, None, "/ro/sm/variables; Read-only file system\nmore")

    monkeypatch.setattr(export.tf.saved_model, "save", denied)
    cfg = ModelConfig(blocks=0, filters=4, value_hidden=4)
    with pytest.raises(export.RunError,
                       match=r"cannot write the SavedModel \(/ro/sm/variables; Read-only file "
                                              r"system\)$"):
        export.export_model(model_lib.build_model(cfg), cfg, "savedmodel", tmp_path / "sm")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("block", ["se", "gpool"])
def test_block_kinds_export_to_onnx(tmp_path, positions, block) -> None:
    """SE and global-pooling blocks convert to ONNX with the Keras probabilities and policy logits."""
    pytest.importorskip("tf2onnx")
    ort = pytest.importorskip("onnxruntime")
    cfg = ModelConfig(blocks=2, filters=8, value_hidden=8, value_head="pool", policy_head=True, block=block)
    model = model_lib.build_model(cfg, seed=7)
    board, hands = positions[0][:100], positions[1][:100]
    value, logits = model_lib.value_and_policy_logits(model, board, hands, mirror_average=True)
    onnx_path, _ = export.export_model(model, cfg, "onnx", tmp_path / "m.onnx", mirror_average=True)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got_p, got_logits = session.run([export.OUTPUT, export.POLICY_OUTPUT], {"board": board, "hands": hands})
    assert np.abs(got_p - tf.sigmoid(value).numpy()).max() < TOLERANCE
    assert np.abs(got_logits - np.asarray(logits)).max() < 1e-4


def test_int8_export_is_close_to_the_float_model(tmp_path, positions) -> None:
    """--quantize int8: the sidecar says so, convolutions became int8 QDQ pairs, and the probabilities and
    policy logits stay near the float model's on positions the calibration did not see."""
    pytest.importorskip("tf2onnx")
    onnx = pytest.importorskip("onnx")
    cfg = ModelConfig(blocks=2, filters=16, value_hidden=16, value_head="pool", policy_head=True,
                      features="attacks")
    model = model_lib.build_model(cfg, seed=8)
    board, hands = positions
    float_path, _ = export.export_model(model, cfg, "onnx", tmp_path / "f.onnx")
    int8_path, sidecar = export.export_model(model, cfg, "onnx", tmp_path / "q.onnx",
                                             calibration=(board[:256], hands[:256]))
    assert json.loads(sidecar.read_text())["quantized"].startswith("int8")
    ops = [n.op_type for n in onnx.load(str(int8_path)).graph.node]
    assert ops.count("DequantizeLinear") >= 3 and "QuantizeLinear" in ops
    assert "quantized" not in json.loads(export.sidecar_path(float_path).read_text())
    held_out = board[256:], hands[256:]
    diff = np.abs(onnx_probability(int8_path, *held_out) - onnx_probability(float_path, *held_out))
    assert diff.max() < 0.05 and diff.mean() < 0.01
    from shogi_dnn.engine import players  # the engine takes it as it takes the float one
    evaluator = players.OnnxEvaluator(int8_path)
    players.check(evaluator)
    win, logits = evaluator.evaluate_logits(*held_out)
    assert evaluator.has_policy and logits.shape == (len(win), 2187)


def test_quantize_needs_onnx_and_positions(tmp_path, capsys) -> None:
    from shogi_dnn.commands import export as export_command
    with pytest.raises(export.RunError, match="only with --format onnx"):
        export_command.main(["--run-dir", str(tmp_path), "--format", "savedmodel", "--quantize", "int8"])
    with pytest.raises(export.RunError, match="calibration positions"):
        export.quantize_onnx(tmp_path / "x.onnx", tmp_path / "y.onnx", np.zeros((0, 81), np.uint8),
                             np.zeros((0, 14), np.uint8))
