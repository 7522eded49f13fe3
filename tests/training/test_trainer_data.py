"""The data a run trains on: recorded in run.json and every checkpoint (identity.py); `--resume` on other
data refused in one line naming both, allowed with data_changed (--data-changed) and then written to
run.json's history; a run from before identities were recorded resumes on its own folder with a warning.
The chief records the games it trains on (RUN/trained-games.npz, game_keys.py): those of both datasets after
a change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from shogi_dnn.dataset import game_keys, identity, shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import checkpoints
from tests.support.cli import one_error_line
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset
from tests.training.test_trainer import make_trainer, tiny_config, train

CONFIG = tiny_config(checkpoint_every_steps=0)


def run_json(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def strip_identity(run: Path) -> None:
    """Make the run look as if trained before identities were recorded."""
    for path in [run / "run.json", *(c / "state.json" for c in checkpoints.list_checkpoints(run))]:
        data = json.loads(path.read_text())
        data.pop("dataset", None)
        data.pop("history", None)
        path.write_text(json.dumps(data))


@pytest.mark.slow
def test_resume_on_other_data_is_refused_or_recorded(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_dataset(a, train=[200, 160, 180], validation=[100], chunk_rows=32)
    make_dataset(b, train=[200, 160, 180], validation=[100], chunk_rows=32, seed=1)    # other positions
    ident_a = identity.dataset_identity(shards.read_manifest(a))
    ident_b = identity.dataset_identity(shards.read_manifest(b))
    run = tmp_path / "run"
    train(CONFIG, a, run, devices=1, stop_after=1)
    assert run_json(run)["dataset"] == ident_a.to_dict() and run_json(run)["history"] == []
    keys_a = game_keys.split_keys(shards.read_manifest(a), ("train",)).keys
    assert game_keys.read_trained_games(run).keys.tolist() == np.unique(keys_a).tolist()   # the games trained on
    newest = checkpoints.find_checkpoint(run)
    assert checkpoints.read_dataset(newest) == ident_a.to_dict()

    # A run from before identities: its own folder resumes with a warning, another folder is refused.
    strip_identity(run)
    with pytest.raises(ConfigError, match=f"dataset {a.resolve()} \\(its identity not recorded\\); --data "
                                          f"{b.resolve()} is another folder. Pass --data-changed"):
        make_trainer(CONFIG, b, run, 1, resume=True).run()
    with caplog.at_level("WARNING", logger="shogi_dnn.training.trainer"):
        train(CONFIG, a, run, devices=1, resume=True, stop_after=1)
    assert "records no dataset identity (saved before runs recorded one)" in caplog.text
    assert run_json(run)["dataset"] == ident_a.to_dict()

    # Another --data: refused in one line naming both, nothing written.
    newest = checkpoints.find_checkpoint(run)
    with pytest.raises(ConfigError) as refused:
        make_trainer(CONFIG, b, run, 1, resume=True).run()
    assert str(refused.value) == (
        f"{newest} was trained on dataset {a.resolve()} ({ident_a.describe(['train', 'validation'])}); "
        f"{b.resolve()} has {ident_b.describe(['train', 'validation'])}: another dataset. "
        "Pass --data-changed to continue it on this data (recorded in run.json's "
        "history).")   # synthetic games tables: same splits
    assert run_json(run)["data_dir"] == str(a.resolve())

    # --data-changed: continues on b; run.json says b now and keeps the change in its history.
    trainer = make_trainer(CONFIG, b, run, 1, resume=True, data_changed=True,
                      command="shogi-dnn train ... --resume --data-changed")
    trainer.run()
    info = run_json(run)
    assert info["data_dir"] == str(b.resolve()) and info["dataset"] == ident_b.to_dict()
    [entry] = info["history"]
    assert entry["event"] == "data changed" and entry["checkpoint"] == newest.name
    assert entry["from"] == ident_a.to_dict() and entry["to"] == ident_b.to_dict()
    assert entry["command"] == "shogi-dnn train ... --resume --data-changed"
    assert checkpoints.read_dataset(checkpoints.find_checkpoint(run)) == ident_b.to_dict()
    assert (run / "model.keras").is_file()
    keys_b = game_keys.split_keys(shards.read_manifest(b), ("train",)).keys     # the games of both trained on
    trained = game_keys.read_trained_games(run)
    assert trained.keys.tolist() == np.unique([*keys_a, *keys_b]).tolist()
    assert trained.manifests == (ident_a.manifest, ident_b.manifest)


def test_data_changed_goes_with_resume(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    line = one_error_line(capsys, ["train", "--config", str(REPO / "train" / "cpu-smoke.toml"), "--data",
                                   str(tmp_path), "--run-dir", str(tmp_path / "run"), "--data-changed"])
    assert line.endswith("--data-changed goes with --resume (a new run records the data it starts on)")
