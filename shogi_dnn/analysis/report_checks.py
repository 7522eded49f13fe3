"""The checks a report makes before it shows numbers (no TensorFlow).

check_evals: an eval-<split>.json scored on data other than run.json's "dataset", or checked game by game
against trained games that have changed since, is refused unless --allow-changed-data, then labelled DATA
CHANGED. plan_check: `shogi-dnn plan`'s predicted positions/s for the run's towers and global batch
against the run's measured median.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.dataset import game_keys, identity, shards
from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files
from shogi_dnn.training import throughput

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PlanCheck:
    """What `shogi-dnn plan` predicted for this run's towers and batch against what the run measured."""

    devices: int
    global_batch: int
    fit_devices: int
    predicted: float          # positions/s of the fit at the run's global batch
    measured: float           # median positions/s of the run's training log lines

    @property
    def ratio(self) -> float:
        """Measured over predicted positions/s."""
        return self.measured / self.predicted

    def text(self) -> str:
        """One line: the run's towers and batch, the predicted and measured rates, their ratio."""
        return (f"plan vs measured: {self.devices} tower(s), global batch {self.global_batch}: the fit for "
                f"{self.fit_devices} device(s) predicts {self.predicted:,.0f} positions/s, the run measured "
                f"{self.measured:,.0f} (median of its training lines): {self.ratio:.2f}x the plan")


def plan_check(run_dir: str | Path, fits: dict[int, throughput.ThroughputFit]) -> PlanCheck | None:
    """The plan's rate for the run's device count and global batch (run.json) against the measured median
    positions/s of metrics.jsonl; None when the run logged no training rate."""
    run = run_files.read_run_json(run_dir)
    rates = [r["positions_per_s"] for r in run_files.read_metrics(run_dir)
             if r.get("kind") == "train" and r.get("positions_per_s")]
    devices, batch = int(run.get("num_replicas") or 1), int(run.get("global_batch") or 0)
    if not rates or batch <= 0:
        return None
    fit = throughput.select_fit(fits, devices)
    predicted = batch / float(fit.seconds_per_step(batch))
    return PlanCheck(devices, batch, fit.devices, predicted, float(np.median(rates)))


def check_evals(run_dir: str | Path, evals: dict[str, dict[str, Any]], allow_changed_data: bool = False,
                say_unknown: bool = True) -> dict[str, list[str]]:
    """Per evaluated split, the lines its numbers must carry; one log line for those whose data cannot be
    checked, unless not `say_unknown`.

    Raises:
        RunError: an evaluation scored other data than the run now trains on, without `allow_changed_data`.
    """
    run_dir = Path(run_dir)
    trained = run_files.read_run_json(run_dir).get(run_files.KEY_DATASET)
    labels, unknown = {}, []
    for split, result in evals.items():
        labels[split] = run_files.eval_labels(result)
        if trained is None or result.get(run_files.KEY_DATASET) is None:
            unknown.append(f"eval-{split}.json")
            continue
        changed = _data_change(run_dir, split, result, trained)
        if changed is None:
            continue
        if not allow_changed_data:
            raise RunError(f"{run_files.eval_path(run_dir, split)} was {changed}: evaluate again, or pass "
                           f"{run_files.ALLOW_CHANGED_DATA} to report it anyway (labelled)")
        labels[split].append(f"DATA CHANGED: {changed}")
    if unknown and say_unknown:
        log.warning("%s: the data of %s cannot be checked against the run's (no dataset identity recorded: "
                    "scored or trained before runs recorded one)", run_dir, ", ".join(unknown))
    return labels


def _data_change(run_dir: Path, split: str, result: dict[str, Any], trained: dict[str, Any]) -> str | None:
    """How the data an evaluation scored differs from the run's now, in words, or None.

    Raises:
        RunError: an identity that cannot be read.
    """
    check = result.get("data_check") or {}
    if check.get("status") == "changed":
        return None
    if check.get("status") in ("foreign", "overlap"):
        return _games_change(run_dir, check.get("games") or {})
    splits = shards.SPLITS if split == "all" else (split,)
    try:
        check = identity.compare(result[run_files.KEY_DATASET], identity.DatasetIdentity.from_dict(trained),
                                 splits)
    except ValueError as exc:
        raise RunError(f"{run_dir / run_files.RUN_JSON} or eval-{split}.json: dataset: {exc}") from exc
    return f"scored on {check.detail}, and the run trains on the latter now" if check.changed else None


def _games_change(run_dir: Path, games: dict[str, Any]) -> str | None:
    """'checked against the 40 games the run had trained on; it has trained on 72 since ...', or None when
    the run's trained games (game_keys.py) are those the evaluation was checked against."""
    trained = game_keys.read_trained_games(run_dir)
    if trained is None or trained.digest() == games.get("run_digest"):
        return None
    return (f"checked against the {games.get('run_games', '?')} games the run had trained on; it has trained "
            f"on {trained.games:,} since (resumed on other data), some of which may be among the scored "
            "games")
