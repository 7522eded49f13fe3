"""evaluate: per-tower scores consistent with the totals and with the training code's eval step,
baselines fitted on the training split, one-line errors for bad arguments."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shogi_dnn import cli
from shogi_dnn.analysis import baselines, data_check, evaluate, scoring
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import EVAL_NONE
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.folders import run_files
from shogi_dnn.training import pipeline
from shogi_dnn.training.devices import local_values, make_strategy
from shogi_dnn.training.losses import METRIC_KEYS
from shogi_dnn.training.steps import make_eval_step
from tests.support.evaldata import material_dataset, split_paths
from tests.support.evalrun import make_random_run


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    manifest = material_dataset(root / "data", {"train": (300, 0.9, False), "validation": (205, 0.5, True),
                                                "test": (50, 0.5, False)},
                                eval_share={"train": 0.8, "validation": 0.7})
    run_dir = make_random_run(root / "run", root / "data", devices=2, per_replica_batch=16)
    result = evaluate.evaluate_run(run_dir, split="validation", global_batch=32,   # 7 steps, the last partial
                                   mirror_average=False)
    return manifest, run_dir, result


def test_eval_json_keys_and_per_gpu_consistency(planted) -> None:
    _manifest, run_dir, result = planted
    on_disk = json.loads((run_dir / "eval-validation.json").read_text())
    assert on_disk == json.loads(json.dumps(result))
    for key in ("split", "positions", "loss", "accuracy", "brier", "ece", "per_gpu", "by_ply", "baselines"):
        assert key in on_disk
    assert result["split"] == "validation" and result["positions"] == 205
    gpus = result["per_gpu"]
    assert len(gpus) == 2 and sum(g["positions"] for g in gpus) == 205
    weighted = sum(g["loss"] * g["positions"] for g in gpus) / 205
    assert weighted == pytest.approx(result["loss"], rel=1e-9)
    assert result["per_gpu_spread"]["loss"] == pytest.approx(abs(gpus[0]["loss"] - gpus[1]["loss"]))
    assert sum(r["positions"] for r in result["by_ply"]) == 205
    assert sum(r["positions"] for r in result["by_rating"]) == 205
    assert result["decisive"] + result["draws"]["positions"] == 205


def test_totals_match_a_plain_prediction_of_every_row(planted) -> None:
    manifest, run_dir, result = planted
    model = evaluate.load_run_model(run_dir)
    rows = [b for b in pipeline.make_eval_dataset(split_paths(manifest, "validation"), global_batch=64)]
    logits = np.concatenate([model({"board": b["board"], "hands": b["hands"]}).numpy().reshape(-1)
                             for b in rows])
    win = np.concatenate([b["win"].numpy() for b in rows])
    assert result["loss"] == pytest.approx(scoring.log_loss(logits, win), rel=1e-5)
    assert result["accuracy"] == pytest.approx(scoring.accuracy(logits, win))
    # the model on the positions that carry an engine evaluation, next to the engine there
    evals = np.concatenate([shards.read_positions(p, keys=["eval"]).arrays["eval"]
                            for p in split_paths(manifest, "validation")])
    has = evals != EVAL_NONE
    evaluated = result["baselines"]["engine"]["evaluated"]
    assert evaluated["positions"] == evaluated["model"]["positions"] == int(has.sum()) > 0
    assert evaluated["model"]["loss"] == pytest.approx(scoring.log_loss(logits[has], win[has]), rel=1e-5)
    assert evaluated["model"]["accuracy"] == pytest.approx(scoring.accuracy(logits[has], win[has]))


def test_table_names_the_device_kind_the_run_used(planted) -> None:
    # A CPU run's evaluate table said "per GPU" (the report and the plots already said CPU).
    _manifest, _run_dir, result = planted
    assert all("CPU" in g["device"] for g in result["per_gpu"])     # the tests' towers are logical CPUs
    table = evaluate.format_table(result)
    assert "per CPU " in table and "GPU" not in table
    gpus = {**result, "per_gpu": [{**g, "device": f"/job:localhost/replica:0/task:0/device:GPU:{i}"}
                                  for i, g in enumerate(result["per_gpu"])]}
    assert "per GPU " in evaluate.format_table(gpus)
    mixed = {**result, "per_gpu": [{**gpus["per_gpu"][0]}, *result["per_gpu"][1:]]}
    assert "per tower " in evaluate.format_table(mixed)


def test_per_gpu_matches_the_training_eval_step(planted) -> None:
    manifest, run_dir, result = planted
    strategy = make_strategy(simulate_devices=2)
    with strategy.scope():
        model = evaluate.load_run_model(run_dir)
    step = make_eval_step(strategy, model)
    assert result["global_batch"] == 32
    dataset = pipeline.make_eval_dataset(split_paths(manifest, "validation"), global_batch=32)
    sums = np.zeros((2, 4))
    for batch in strategy.experimental_distribute_dataset(dataset):
        out = step(batch)
        sums += np.array([local_values(strategy, out[k]) for k in METRIC_KEYS]).T
    for tower, gpu in zip(sums, result["per_gpu"]):
        loss_sum, correct, decisive, count = tower
        assert gpu["positions"] == count
        assert gpu["loss"] == pytest.approx(loss_sum / count, rel=1e-5)
        assert gpu["accuracy"] == pytest.approx(correct / decisive)


def test_baselines_are_fitted_on_the_train_split(planted) -> None:
    _, run_dir, result = planted
    b = result["baselines"]
    assert b["train_positions"] == 300 and b["side_to_move"]["rate"] == pytest.approx(0.9)
    assert b["material"]["accuracy"] == 0.0         # the train rule is reversed in validation
    assert b["side_to_move"]["positions"] == 205
    assert (run_dir / "baselines.json").is_file()
    table = evaluate.format_table(result)
    assert "material" in table and "side to move" in table and "spread" in table


def test_intervals_over_games_and_paired_comparisons(planted) -> None:
    manifest, _, result = planted
    b = result["baselines"]
    games = len(np.unique(np.concatenate([shards.read_positions(p, keys=["game"]).arrays["game"]
                                          for p in split_paths(manifest, "validation")])))
    assert result["bootstrap"] == {"unit": "game", "games": games, "resamples": scoring.BOOTSTRAP_RESAMPLES,
                                   "seed": scoring.BOOTSTRAP_SEED, "level": scoring.BOOTSTRAP_LEVEL}
    assert list(result["comparisons"]) == ["material", "piece_square", "side_to_move", "engine",
                                           "engine_evaluated"]
    for name in ("material", "piece_square", "side_to_move", "engine"):
        for metric in ("accuracy", "loss"):
            lo, hi = b[name]["intervals"][metric]
            assert lo <= b[name][metric] <= hi
            d = result["comparisons"][name][metric]
            assert d["estimate"] == pytest.approx(result[metric] - b[name][metric], abs=1e-9)
            assert d["lo"] <= d["estimate"] <= d["hi"] and d["resolved"] == (d["lo"] > 0 or d["hi"] < 0)
    lo, hi = result["intervals"]["accuracy"]
    assert lo <= result["accuracy"] <= hi
    # the material rule is reversed in validation: material is certainly behind a coin-flipping random model
    assert result["comparisons"]["material"]["accuracy"]["resolved"]
    evaluated = b["engine"]["evaluated"]
    d = result["comparisons"]["engine_evaluated"]["loss"]
    assert d["estimate"] == pytest.approx(evaluated["model"]["loss"] - evaluated["engine"]["loss"], abs=1e-9)
    table = evaluate.format_table(result)
    assert "piece-square" in table and "engine, evaluated" in table
    assert f"bootstrap over {games} games" in table
    assert "model ahead of material: accuracy" in table


def test_an_older_or_damaged_baselines_cache_is_fitted_again(planted, caplog) -> None:
    import logging

    _, run_dir, _ = planted
    cache = run_dir / "baselines.json"
    saved = json.loads(cache.read_text())
    assert saved["key"]["baselines"] == evaluate.baselines.BASELINES_VERSION
    old = {"key": {k: v for k, v in saved["key"].items() if k != "baselines"},
           "baselines": {k: v for k, v in saved["baselines"].items() if k not in ("piece_square", "engine")}}
    cache.write_text(json.dumps(old))                           # written before piece_square and engine
    fitted, _ = baselines.fitted_baselines(run_dir, run_dir)
    assert fitted.piece_square.passes > 0 and json.loads(cache.read_text()) == saved
    cache.write_text(json.dumps({"key": saved["key"], "baselines": {"weights": []}}))
    with caplog.at_level(logging.WARNING, logger="shogi_dnn.analysis.evaluate"):
        again, _ = baselines.fitted_baselines(run_dir, run_dir)
    assert again == fitted and any("fitting them again" in r.getMessage() for r in caplog.records)


def test_test_split_and_one_tower(planted) -> None:
    _, run_dir, _ = planted
    result = evaluate.evaluate_run(run_dir, split="test", simulate_devices=1)
    assert result["positions"] == 50 and len(result["per_gpu"]) == 1
    assert (run_dir / "eval-test.json").is_file()
    everything = evaluate.evaluate_run(run_dir, split="all", simulate_devices=4)
    assert everything["positions"] == 300 + 205 + 50 and len(everything["per_gpu"]) == 4
    assert sum(g["positions"] for g in everything["per_gpu"]) == 555


def test_bad_arguments(planted, tmp_path, capsys) -> None:
    _, run_dir, _ = planted
    with pytest.raises(RunError, match="no such run directory"):
        evaluate.evaluate_run(tmp_path / "nope")
    with pytest.raises(ConfigError, match="--split"):
        data_check.split_paths(run_dir, "valid")
    assert cli.main(["evaluate", "--run-dir", str(run_dir), "--split", "valid"]) == 2
    assert cli.main(["evaluate", "--run-dir", str(tmp_path / "nope")]) == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.keras").write_bytes(b"not a zip")
    (broken / "run.json").write_text((run_dir / "run.json").read_text())
    assert cli.main(["evaluate", "--run-dir", str(broken), "--simulate-devices", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("shogi-dnn evaluate: error:") for line in err)
    assert "--split 'valid'" in err[0] and "no such run directory" in err[1] and "model.keras" in err[2]


@pytest.mark.slow
def test_trained_run_learns_the_planted_rule(tmp_path_factory) -> None:
    from tests.support.trainedrun import trained_run

    run_dir, _ = trained_run(tmp_path_factory)
    result = evaluate.evaluate_run(run_dir, split="validation")      # run.json: 2 simulated CPU towers
    assert result["positions"] == 300 and len(result["per_gpu"]) == 2
    assert result["accuracy"] >= 0.95
    assert result["loss"] < result["baselines"]["side_to_move"]["loss"] - 0.3
    assert result["baselines"]["train_positions"] == 2000
    early = evaluate.evaluate_run(run_dir, split="test", checkpoint="ckpt-00000008", simulate_devices=1)
    assert early["positions"] == 100 and early["model"] == "ckpt-00000008"
    final = evaluate.evaluate_run(run_dir, split="test", simulate_devices=1)
    assert early["loss"] > final["loss"]            # the stage-0 checkpoint, not the final model
    with pytest.raises(RunError, match="no checkpoint 'nope'"):
        evaluate.evaluate_run(run_dir, split="test", checkpoint="nope", simulate_devices=1)


def test_eval_batch_fits_any_tower_count() -> None:
    from shogi_dnn.config import Config, TrainConfig

    fixed = Config(train=TrainConfig(global_batch=64))
    assert [evaluate.eval_global_batch(fixed, n, minimum=0) for n in (1, 2, 3, 4)] == [64, 64, 66, 64]
    assert evaluate.eval_global_batch(Config(train=TrainConfig(per_replica_batch=16)), 3, minimum=0) == 48
    assert evaluate.eval_global_batch(fixed, 3) == 1026


@pytest.mark.slow
def test_latest_checkpoint_when_there_is_no_final_model(tmp_path_factory, tmp_path, capsys) -> None:
    import shutil

    from tests.support.trainedrun import trained_run

    run_dir, _ = trained_run(tmp_path_factory)
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    # An earlier checkpoint of the finished run, asked for: said as such, not as an unfinished run.
    earlier = evaluate.evaluate_run(copy, split="test", simulate_devices=1, checkpoint="8")
    assert run_files.eval_labels(earlier)[0] == (
        "EARLIER CHECKPOINT: checkpoint ckpt-00000008 at step 8 of 16 (512 samples, epoch 0 of 1): an earlier "
        "checkpoint (the run's final model is model.keras); these are a partly trained model's scores")
    (copy / "model.keras").unlink()
    result = evaluate.evaluate_run(copy, split="test", simulate_devices=1)
    assert result["model"] == "ckpt-00000016" and result["positions"] == 100
    assert result["checkpoint"]["finished"]
    assert not any("UNFINISHED" in line for line in run_files.eval_labels(result))
    one_tower = evaluate.evaluate_run(run_dir, split="test", simulate_devices=1)
    assert result["loss"] == pytest.approx(one_tower["loss"])
    # A run stopped half-way: evaluate and report say which checkpoint and that the run is unfinished.
    for name in ("ckpt-00000016", "ckpt-00000012"):
        shutil.rmtree(copy / "checkpoints" / name)
    unfinished = ("UNFINISHED RUN: checkpoint ckpt-00000008 at step 8 of 16 (512 samples, epoch 0 of 1): the run "
                  "is unfinished")
    assert cli.main(["evaluate", "--run-dir", str(copy), "--split", "test", "--simulate-devices", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"WARNING: {unfinished}; these are a partly trained model's scores\n")
    assert cli.main(["report", "--run-dir", str(copy)]) == 0
    assert f"{unfinished} (`train --resume` continues it)" in capsys.readouterr().out
    assert "**UNFINISHED RUN**: checkpoint ckpt-00000008 at step 8 of 16" in (copy / "report.md").read_text()


@pytest.mark.slow
def test_truncated_checkpoint_is_a_one_line_error(tmp_path_factory, tmp_path, capsys) -> None:
    import shutil

    from tests.support.trainedrun import trained_run

    run_dir, _ = trained_run(tmp_path_factory)
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    ckpt = copy / "checkpoints" / "ckpt-00000016"
    (data,) = ckpt.glob("weights.data-*")
    with open(data, "r+b") as f:                      # a copy cut short: half the bytes
        f.truncate(data.stat().st_size // 2)
    assert cli.main(["evaluate", "--run-dir", str(copy), "--checkpoint", "16",
                     "--simulate-devices", "1"]) == 2
    (copy / "model.keras").unlink()                   # no final model: the latest checkpoint
    assert cli.main(["predict", "--run-dir", str(copy), "startpos"]) == 2
    (ckpt / "state.json").write_text("{\"state\": ")  # corrupt state/config JSON
    assert cli.main(["evaluate", "--run-dir", str(copy), "--simulate-devices", "1"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith("predict: loading")]    # predict says what it loads before TF starts
    assert len(err) == 3, err
    assert all(line.startswith(f"shogi-dnn {cmd}: error: {ckpt}") for line, cmd in
               zip(err, ("evaluate", "predict", "evaluate")))
    assert "cannot restore the model" in err[0] and "cannot restore the model" in err[1]
    assert "state.json: unreadable checkpoint state" in err[2]


def test_a_multi_worker_run_is_evaluated_on_this_machines_devices(planted, tmp_path, caplog) -> None:
    import logging
    import shutil

    _, run_dir, result = planted
    assert evaluate.this_machine_devices(["worker0@10.0.0.1:2222/GPU:0", "worker0@10.0.0.1:2222/GPU:1",
                                          "worker1@10.0.0.2:2222/GPU:0", "worker1@10.0.0.2:2222/GPU:1"]
                                         ) == ["GPU:0", "GPU:1"]
    assert evaluate.this_machine_devices(["CPU:0", "CPU:1"]) == ["CPU:0", "CPU:1"]
    for per_worker in (2, 1):
        copy = tmp_path / f"run{per_worker}"
        shutil.copytree(run_dir, copy)
        info = json.loads((copy / "run.json").read_text())
        info["devices"] = [f"worker{w}@127.0.0.1:{w + 1}/CPU:{d}"
                           for w in range(2) for d in range(per_worker)]
        info["num_workers"], info["num_replicas"] = 2, 2 * per_worker
        (copy / "run.json").write_text(json.dumps(info))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="shogi_dnn.analysis.evaluate"):
            got = evaluate.evaluate_run(copy, split="validation", global_batch=32, mirror_average=False)
        assert len(got["per_gpu"]) == per_worker
        assert got["loss"] == pytest.approx(result["loss"], abs=1e-5)
        assert any("evaluating on this machine's CPU:0" in r.getMessage() for r in caplog.records)


def test_foreign_or_damaged_shards_are_one_line_and_write_nothing(planted, tmp_path) -> None:
    """A shard of another dataset copied in is refused before scoring (it used to be scored, overwriting
    eval-<split>.json); a damaged chunk (fletcher32) is one line naming the shard and rows, not a
    traceback."""
    import shutil

    import h5py

    from shogi_dnn.errors import ShardFormatError

    manifest, run_dir, _ = planted
    data = tmp_path / "data"
    shutil.copytree(manifest.root, data)
    before = (run_dir / "eval-test.json").exists()
    (data / "test-00000.h5").write_bytes((data / "validation-00001.h5").read_bytes())
    with pytest.raises(ShardFormatError,
                       match=r"test-00000.h5 \(listed in .*\): .*the manifest says") as info:
        evaluate.evaluate_run(run_dir, data, split="test", global_batch=32)
    assert "\n" not in str(info.value) and (run_dir / "eval-test.json").exists() == before
    shutil.copy(manifest.root / "test-00000.h5", data / "test-00000.h5")
    path = data / "test-00000.h5"
    with h5py.File(path, "r") as f:
        chunk = f["pieces"].id.get_chunk_info(0)
    raw = bytearray(path.read_bytes())
    raw[chunk.byte_offset + chunk.size // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ShardFormatError,
                       match=r"test-00000.h5: rows 0-\d+ \(chunk 0\) of dataset 'pieces' cannot be "
                             r"read") as info:
        evaluate.evaluate_run(run_dir, data, split="test", global_batch=32)
    assert "\n" not in str(info.value) and (run_dir / "eval-test.json").exists() == before
    with pytest.raises(ShardFormatError, match=r"test-00000.h5 .*: sha256"):
        evaluate.evaluate_run(run_dir, data, split="test", global_batch=32, verify_shards=True)


@pytest.fixture(scope="module")
def policy_run(tmp_path_factory):
    """Random legal games converted (their moves stored) and a random run with a policy head."""
    from shogi_dnn.config import ModelConfig
    from shogi_dnn.convert.run import ConvertSettings, run_convert
    from tests.support.kifugen import write_corpus

    root = tmp_path_factory.mktemp("evaluate-policy")
    write_corpus(root / "records", seed=5, files=2, per_file=6)
    run_convert([root / "records"], root / "data", ConvertSettings(val_fraction=0.4), workers=1)
    run_dir = make_random_run(root / "run", root / "data", devices=2,
                              model_cfg=ModelConfig(blocks=1, filters=8, value_hidden=8, policy_head=True))
    return root / "data", run_dir


@pytest.mark.parametrize("mirror", [False, True])
def test_policy_top_k_over_legal_moves_by_hand(policy_run, mirror: bool) -> None:
    from shogi_dnn.dataset import policy
    from shogi_dnn.training import model as model_lib

    data, run_dir = policy_run
    result = evaluate.evaluate_run(run_dir, split="validation", global_batch=32, mirror_average=mirror)
    block = result["policy"]
    on_disk = json.loads((run_dir / "eval-validation.json").read_text())["policy"]
    assert on_disk == json.loads(json.dumps(block))
    # By hand: every validation row, its legal moves, the move played's place among them.
    paths = split_paths(shards.read_manifest(data), "validation")
    rows = [shards.read_positions(p).arrays for p in paths]
    board, hands = (np.concatenate([r[k] for r in rows]) for k in (shards.KEY_BOARD, shards.KEY_HANDS))
    labels = policy.move_labels(np.concatenate([r[shards.KEY_MOVE] for r in rows]))
    games = np.concatenate([r[shards.KEY_GAME] for r in rows])
    logits = np.asarray(model_lib.policy_logits(evaluate.load_run_model(run_dir), board, hands, mirror))
    top1 = top5 = counted = 0
    for i in np.flatnonzero(labels >= 0):
        legal = np.flatnonzero(policy.legal_label_mask(board[i], hands[i]))
        order = legal[np.argsort(-logits[i, legal], kind="stable")]
        place = int(np.flatnonzero(order == labels[i])[0])
        counted, top1, top5 = counted + 1, top1 + (place == 0), top5 + (place < 5)
    assert block["positions"] == counted and block["games"] == len(np.unique(games[labels >= 0]))
    assert block["top1"] == pytest.approx(top1 / counted, abs=1e-4)     # float32 logits: ties are rare
    assert block["top5"] == pytest.approx(top5 / counted, abs=1e-4)
    assert block["intervals"]["top1"][0] <= block["top1"] <= block["intervals"]["top1"][1]
    assert block["bootstrap"]["unit"] == "game"
    assert "policy: top-1" in evaluate.format_table(result)


def test_no_policy_block_without_a_head(planted) -> None:
    _manifest, _run_dir, result = planted
    assert "policy" not in result and "policy:" not in evaluate.format_table(result)
