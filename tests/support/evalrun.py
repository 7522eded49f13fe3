"""A tiny run directory with a randomly initialised model, for evaluate/report/predict tests
(before, or without, a real training run).

    from tests.support.evalrun import make_random_run
    run_dir = make_random_run(tmp_path / "run", data_dir, devices=2)
"""

from __future__ import annotations

import json
from pathlib import Path

from shogi_dnn.config import Config, ModelConfig, TrainConfig

TINY_MODEL = ModelConfig(blocks=1, filters=8, value_hidden=8)


def make_random_run(run_dir: Path, data_dir: Path, devices: int = 2, per_replica_batch: int = 16,
                    seed: int = 3, model_cfg: ModelConfig = TINY_MODEL) -> Path:
    """RUN/model.keras (random weights), RUN/config.json and RUN/run.json naming `devices` CPU towers
    (model_cfg: e.g. with policy_head=True)."""
    from shogi_dnn.training import model

    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = Config(model=model_cfg, train=TrainConfig(per_replica_batch=per_replica_batch))
    model.build_model(cfg.model, seed=seed).save(run_dir / "model.keras")
    (run_dir / "config.json").write_text(cfg.to_json())
    names = [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(devices)]
    (run_dir / "run.json").write_text(json.dumps({"data_dir": str(data_dir), "devices": names,
                                                  "num_replicas": devices, "num_workers": 1}))
    return run_dir
