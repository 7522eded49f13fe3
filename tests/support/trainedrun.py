"""One tiny TRAINED run per test session (train/cpu-smoke.toml on the planted material dataset, 2 towers),
shared by the evaluate/report/predict/notebook tests that need real trainer output.

    from tests.support.trainedrun import trained_run
    run_dir, data_dir = trained_run(tmp_path_factory)

The planted rule (tests.evaldata): the side with the extra rook on 5e wins, in train and validation alike,
so a smoke run learns it: a known answer for predict and evaluate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.evaldata import material_dataset
from tests.support.paths import REPO

_CACHE: dict[Path, tuple[Path, Path]] = {}


def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run_dir, data_dir) of the session's trained run; trains it on first use (about 20 s on 2 cores)."""
    base = tmp_path_factory.getbasetemp()
    if base not in _CACHE:
        from shogi_dnn import cli

        root = tmp_path_factory.mktemp("trained")
        data_dir, run_dir = root / "data", root / "run"
        material_dataset(data_dir, {"train": (2000, 0.5, False), "validation": (300, 0.5, False),
                                    "test": (100, 0.5, False)})
        code = cli.main(["train", "--config", str(REPO / "train" / "cpu-smoke.toml"), "--data", str(data_dir),
                         "--run-dir", str(run_dir), "--simulate-devices", "2"])
        assert code == 0 and (run_dir / "model.keras").is_file()
        _CACHE[base] = (run_dir, data_dir)
    return _CACHE[base]
