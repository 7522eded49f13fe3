"""`shogi-dnn train --set train.eval_weight=0.33` on records with engine evaluations (floodgate `'**`
comments), converted with `shogi-dnn convert`: the cpu-smoke preset runs and logs the result loss."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from shogi_dnn.cli import main
from shogi_dnn.dataset import shards
from tests.support.paths import REPO

SMOKE = str(REPO / "train" / "cpu-smoke.toml")
FLOODGATE = REPO / "tests" / "data" / "csa" / "floodgate_rust_shogi_sample.csa"
MOVE = re.compile(r"^[+-]\d{4}[A-Z]{2}$")


def write_variants(root: Path, cuts: tuple[int, ...]) -> list[Path]:
    """The floodgate game cut after `cut` moves (with their comments), ended by %TORYO: distinct games,
    so the dataset has several shards and both splits."""
    lines = FLOODGATE.read_text(encoding="utf-8").splitlines()
    move_lines = [i for i, line in enumerate(lines) if MOVE.match(line)]
    paths = []
    for cut in cuts:
        end = move_lines[cut] if cut < len(move_lines) else len(lines)
        body = [line for line in lines[:end] if not line.startswith("%")]
        path = root / f"floodgate-{cut}.csa"
        path.write_text("\n".join(body + ["%TORYO"]) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def test_train_with_eval_weight_on_converted_floodgate_records(tmp_path: Path) -> None:
    sources = write_variants(tmp_path, (81, 75, 70, 64, 60, 52, 47, 40))
    data, run = tmp_path / "data", tmp_path / "run"
    assert main(["convert", *map(str, sources), "--out", str(data), "--shard-size", "1", "--val-fraction", "0.3",
                 "--workers", "1", "--no-progress"]) == 0
    report = json.loads((data / "convert-report.json").read_text())
    manifest = shards.read_manifest(data)
    assert len(manifest.split("train")) >= 2 and manifest.split("validation")
    assert sum(report["positions_with_eval"].values()) > 0.9 * report["positions_total"]
    assert main(["train", "--config", SMOKE, "--data", str(data), "--run-dir", str(run),
                 "--set", "train.eval_weight=0.33", "--set", "train.max_steps_per_stage=2"]) == 0
    assert json.loads((run / "config.json").read_text())["train"]["eval_weight"] == 0.33
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    kinds = {r.get("kind") for r in records}
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and all(math.isfinite(x) for x in losses), records
    assert "validation" in kinds, kinds
