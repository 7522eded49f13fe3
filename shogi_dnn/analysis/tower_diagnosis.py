"""The towers of a run as metrics.jsonl logged them, and the unbalanced-tower check (numpy, no TensorFlow).

A tower is named by its device (`CPU:0`, `GPU:1`: device_label), the towers by their kind (device_kind).
find_unbalanced_towers flags a tower whose median compute_positions_per_s is below SLOW_RATIO of the
others' median ("slow"; without that field, its positions/s against the fastest's), one with fewer than
SHARE_RATIO of the busiest one's positions ("share"), and one whose mean loss over the last LAST_WINDOW
records is not finite or more than LOSS_GAP nats from the median ("loss"). Under synchronous all-reduce
wall-time positions/s is equal across towers, hence compute_positions_per_s (train.time_towers).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

SLOW_RATIO = 0.75
SHARE_RATIO = 0.9
LOSS_GAP = 0.1
LAST_WINDOW = 0.2


@dataclasses.dataclass(frozen=True)
class TowerFlag:
    """One unbalanced-tower finding: kind is "slow", "share" or "loss"; gpu is the tower's index."""

    kind: str
    gpu: int
    device: str
    message: str


def train_records(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training records of metrics.jsonl (kind "train"), in order."""
    return [r for r in records if r.get("kind") == "train"]


def validation_records(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The validation records of metrics.jsonl (kind "validation"), in order."""
    return [r for r in records if r.get("kind") == "validation"]


def per_gpu_series(records: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A per-tower metric over the records that have per-tower entries.

    Returns:
        samples [R] float64 (each record's samples seen), values [R, G] float64 of `key` per tower (NaN
        where a record lacks it), and the G device names as logged (`gpu<i>` where none was).
    """
    rows = [r for r in records if r.get("per_gpu")]
    gpus = max((len(r["per_gpu"]) for r in rows), default=0)
    values = np.full((len(rows), gpus), np.nan)
    devices = [f"gpu{i}" for i in range(gpus)]
    for i, r in enumerate(rows):
        for g, entry in enumerate(r["per_gpu"]):
            value = entry.get(key)
            values[i, g] = np.nan if value is None else float(value)
            devices[g] = str(entry.get("device", devices[g]))
    return np.array([float(r.get("samples", i)) for i, r in enumerate(rows)]), values, devices


def device_label(name: Any) -> str:
    """One name per device in every table: `CPU:0`, `GPU:1`, `worker1@10.0.0.2:2222/GPU:0` (a cluster's
    tower), never TensorFlow's `/job:localhost/replica:0/task:0/device:CPU:0`."""
    text = str(name)
    return text.rsplit("device:", 1)[-1] if "device:" in text else text


def device_kind(devices: Sequence[Any]) -> str:
    """'GPU' when every tower is a GPU, 'CPU' when every one is a CPU, else 'device' (for titles, tables
    and flags)."""
    kinds = {device_label(d).rsplit("/", 1)[-1].split(":")[0].upper() for d in devices}
    return kinds.pop() if len(kinds) == 1 and kinds <= {"GPU", "CPU"} else "device"


def find_unbalanced_towers(records: Sequence[dict[str, Any]], slow_ratio: float = SLOW_RATIO,
                           loss_gap: float = LOSS_GAP, last_window: float = LAST_WINDOW) -> list[TowerFlag]:
    """The flags of towers much slower than the others, short of positions, or whose recent loss diverges
    ("slow", then "share", then "loss"), from metrics.jsonl `records` (module docstring).
    """
    train = train_records(records)
    _, compute, devices = per_gpu_series(train, "compute_positions_per_s")
    _, speed, devices = per_gpu_series(train, "positions_per_s")
    kind = device_kind(devices)
    flags = []
    if compute.size and np.isfinite(compute).any():          # each tower's own compute rate (busy_s)
        flags += _slow_compute_flags(compute, devices, slow_ratio, kind)
    elif speed.size and np.isfinite(speed).any():            # older runs: interval rates (see the caveat)
        flags += _slow_interval_flags(speed, devices, slow_ratio, kind)
    flags += _share_flags(train, kind)
    return flags + _loss_flags(train, loss_gap, last_window, kind)


def _slow_compute_flags(compute: np.ndarray, devices: Sequence[str], slow_ratio: float,
                        kind: str) -> list[TowerFlag]:
    """Towers whose median compute positions/s ([R, G] float64) is below slow_ratio of the median of the
    other towers'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # a tower with no value: NaN median, skipped
        medians = np.nanmedian(np.where(np.isfinite(compute), compute, np.nan), axis=0)
    flags = []
    for g, m in enumerate(medians):
        others = np.delete(medians, g)
        others = others[np.isfinite(others)]
        if not np.isfinite(m) or not others.size:
            continue
        reference = float(np.median(others))
        if reference > 0 and m < slow_ratio * reference:
            flags.append(TowerFlag("slow", g, devices[g], f"{kind} {g} ({devices[g]}) computes {m:,.0f} "
                                   f"positions per busy second, {m / reference:.0%} of the other towers' "
                                   f"median ({reference:,.0f})"))
    return flags


def _slow_interval_flags(speed: np.ndarray, devices: Sequence[str], slow_ratio: float,
                         kind: str) -> list[TowerFlag]:
    """Towers whose median interval positions/s ([R, G] float64) is below slow_ratio of the fastest
    tower's (runs logged without compute rates; see the caveat)."""
    medians = np.nanmedian(np.where(np.isfinite(speed), speed, np.nan), axis=0)
    fastest = np.nanmax(medians)
    return [TowerFlag("slow", g, devices[g], f"{kind} {g} ({devices[g]}) runs at {m:,.0f} positions/s, "
                      f"{m / fastest:.0%} of the fastest ({fastest:,.0f})")
            for g, m in enumerate(medians) if np.isfinite(m) and fastest > 0 and m < slow_ratio * fastest]


def _share_flags(train: Sequence[dict[str, Any]], kind: str,
                 share_ratio: float = SHARE_RATIO) -> list[TowerFlag]:
    """Towers that processed much fewer positions than the busiest one (uneven input sharding)."""
    _, counts, devices = per_gpu_series(train, "positions")
    if not counts.size or not np.isfinite(counts).any():
        return []
    totals = np.nansum(counts, axis=0)
    busiest = totals.max()
    return [TowerFlag("share", g, devices[g], f"{kind} {g} ({devices[g]}) processed {int(t):,} positions, "
                      f"{t / busiest:.0%} of the busiest tower's {int(busiest):,}")
            for g, t in enumerate(totals) if busiest > 0 and t < share_ratio * busiest]


def _loss_flags(train: Sequence[dict[str, Any]], loss_gap: float, last_window: float,
                kind: str) -> list[TowerFlag]:
    """Towers with a non-finite loss in the last `last_window` of the training records, or whose mean loss
    there differs from the towers' median by more than loss_gap."""
    _, loss, devices = per_gpu_series(train, "loss")
    if not loss.size:
        return []
    window = max(1, math.ceil(last_window * len(loss)))
    non_finite = _non_finite_losses(train[-window:], loss.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # a tower with no value: NaN mean, skipped
        means = np.nanmean(loss[-window:], axis=0)
        reference = float(np.nanmedian(means)) if np.isfinite(means).any() else math.nan
    flags = []
    for g, m in enumerate(means):
        if non_finite[g]:
            flags.append(TowerFlag("loss", g, devices[g], f"{kind} {g} ({devices[g]}) has a non-finite "
                                   "training loss in the last records"))
        elif np.isfinite(m) and abs(m - reference) > loss_gap:
            flags.append(TowerFlag("loss", g, devices[g], f"{kind} {g} ({devices[g]}) recent training loss "
                                   f"{m:.4f} vs the towers' median {reference:.4f}"))
    return flags


def _non_finite_losses(records: Sequence[dict[str, Any]], gpus: int) -> list[bool]:
    """Per tower: did any record report a NaN/inf loss (a missing value is not counted)?"""
    bad = [False] * gpus
    for r in records:
        for g, entry in enumerate(r.get("per_gpu") or []):
            value = entry.get("loss")
            if isinstance(value, (int, float)) and not math.isfinite(value):
                bad[g] = True
    return bad
