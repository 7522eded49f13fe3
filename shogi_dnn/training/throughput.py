"""The batch-size throughput model: what a per-GPU batch and N GPUs really give (numpy only, no TensorFlow).

One optimizer step of N devices on a global batch B (= N x per-replica batch b) takes

    time_per_step = B / v0 + t        throughput v = B / (B / v0 + t)  ->  v0 as B grows

where v0 is the ideal throughput (positions/s) of the part of the step that grows with the batch, over
all N devices, and t the fixed cost per step (launches, gradient all-reduce, the update).

The time is linear in B, so v0 and t come from a least-squares line through measured (B, seconds per
step) points. Timing noise is roughly proportional to the time, so the line minimises *relative*
residuals (weights 1 / time): small batches, which pin t, count as much as large ones. t is kept >= 0
(a negative fixed cost is noise: the line is then refitted through the origin).

The saturation batch: v / v0 = B / (B + v0 t), so 90% of v0 needs B90 = 9 v0 t.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.errors import ConfigError

SATURATION = 0.9          # "saturated": the batch reaches this fraction of v0


@dataclasses.dataclass(frozen=True)
class ThroughputFit:
    """v0 and t fitted for one device count, with the fit quality.

    Attributes:
        devices: number of devices (towers) the points were measured on.
        v0: ideal throughput over all devices, positions/s.
        t: fixed cost per optimizer step, seconds.
        r2: coefficient of determination of the time-per-step line (1 = exact; nan if not fitted).
        rel_rms: root mean square of the relative throughput error over the points (0 = exact).
        num_points: number of (batch, time) points in the fit (0 for a declared fit).
    """

    devices: int
    v0: float
    t: float
    r2: float = math.nan
    rel_rms: float = math.nan
    num_points: int = 0

    def seconds_per_step(self, global_batch: float | np.ndarray) -> float | np.ndarray:
        """Predicted time of one step on `global_batch` positions over all devices."""
        return global_batch / self.v0 + self.t

    def throughput(self, global_batch: float | np.ndarray) -> float | np.ndarray:
        """Predicted positions/s over all devices at `global_batch`."""
        return global_batch / self.seconds_per_step(global_batch)

    def fraction(self, global_batch: float) -> float:
        """Fraction of v0 reached at `global_batch`: B / (B + v0 t)."""
        return float(global_batch / (global_batch + self.v0 * self.t))

    def global_batch_for(self, fraction: float = SATURATION) -> float:
        """Global batch reaching `fraction` of v0: B = f / (1 - f) * v0 * t (9 v0 t for 90%)."""
        if not 0.0 < fraction < 1.0:
            raise ConfigError(f"fraction of v0 must be in (0, 1), got {fraction}")
        return fraction / (1.0 - fraction) * self.v0 * self.t

    @property
    def b90(self) -> float:
        """Global batch reaching 90% of v0 (9 v0 t)."""
        return self.global_batch_for(SATURATION)

    @property
    def per_replica_b90(self) -> float:
        """Per-device batch reaching 90% of v0 (b90 / devices)."""
        return self.b90 / self.devices

    def to_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "v0": self.v0, "t": self.t, "r2": _finite(self.r2),
                "rel_rms": _finite(self.rel_rms), "num_points": self.num_points,
                "b90": self.b90, "per_replica_b90": self.per_replica_b90}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def fit_throughput(global_batches: Sequence[float], seconds_per_step: Sequence[float],
                   devices: int = 1) -> ThroughputFit:
    """Least-squares fit of time = B / v0 + t to measured points of one device count.

    Args:
        global_batches: [P] positions per step over all devices (repeats allowed).
        seconds_per_step: [P] measured seconds per optimizer step, warm-up excluded.
        devices: the device count the points were measured on (kept in the result).

    Raises:
        ConfigError: fewer than 2 distinct batch sizes, mismatched lengths, non-positive batches or
            times, or times that do not grow with the batch (no throughput to fit).
    """
    b = np.asarray(global_batches, dtype=np.float64)
    y = np.asarray(seconds_per_step, dtype=np.float64)
    _check_points(b, y, devices)
    slope, t = _relative_line(b, y)
    if t < 0.0:                        # a negative fixed cost is noise: fit through the origin
        slope, t = float(np.sum(b / y) / np.sum(b * b / (y * y))), 0.0
    if slope <= 0.0:
        raise ConfigError(f"{devices} device(s): time per step does not grow with the batch "
                          f"(slope {slope:.3g} s/position): measure larger batches or more steps")
    predicted = b * slope + t
    ss_res = float(np.sum((y - predicted) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else math.nan
    rel_rms = float(np.sqrt(np.mean(((b / predicted) / (b / y) - 1.0) ** 2)))
    return ThroughputFit(devices=devices, v0=1.0 / slope, t=float(t), r2=r2, rel_rms=rel_rms,
                         num_points=int(b.size))


def _check_points(b: np.ndarray, y: np.ndarray, devices: int) -> None:
    where = f"{devices} device(s)"
    if devices < 1:
        raise ConfigError(f"device count must be positive, got {devices}")
    if b.ndim != 1 or b.shape != y.shape:
        raise ConfigError(f"{where}: {b.size} batch sizes but {y.size} times")
    if np.unique(b).size < 2:
        raise ConfigError(f"{where}: need at least 2 distinct batch sizes to fit v0 and t, got "
                          f"{sorted(set(b.tolist()))}")
    if not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise ConfigError(f"{where}: batch sizes must be positive, got {b.tolist()}")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ConfigError(f"{where}: seconds per step must be positive, got {y.tolist()}")


def _relative_line(b: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) minimising sum(((slope b + t - y) / y)^2)."""
    design = np.stack([b / y, 1.0 / y], axis=1)
    (slope, intercept), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    return float(slope), float(intercept)


@dataclasses.dataclass(frozen=True)
class Scaling:
    """What N devices give over one at one per-replica batch.

    Attributes:
        devices: N.
        per_replica_batch: the batch per device compared at.
        throughput_1: positions/s of one device at that batch (from the 1-device fit).
        throughput_n: positions/s of N devices at N x that batch (from the N-device fit).
        speedup: throughput_n / throughput_1.
        efficiency: speedup / N (1 = perfect scaling).
    """

    devices: int
    per_replica_batch: float
    throughput_1: float
    throughput_n: float
    speedup: float
    efficiency: float

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


def scaling(single: ThroughputFit, multi: ThroughputFit, per_replica_batch: float | None = None) -> Scaling:
    """Speed-up and efficiency of `multi` over `single` at `per_replica_batch` (default: multi's
    per-replica b90, the batch that keeps the N devices at 90% of their v0).

    Raises:
        ConfigError: `single` was not fitted on one device, or the batch is not positive.
    """
    if single.devices != 1:
        raise ConfigError(f"speed-up is relative to one device, got a fit for {single.devices}")
    batch = multi.per_replica_b90 if per_replica_batch is None else float(per_replica_batch)
    if batch <= 0:
        raise ConfigError(f"per-replica batch must be positive, got {batch}")
    v1 = float(single.throughput(batch))
    vn = float(multi.throughput(batch * multi.devices))
    speedup = vn / v1
    return Scaling(devices=multi.devices, per_replica_batch=batch, throughput_1=v1, throughput_n=vn,
                   speedup=speedup, efficiency=speedup / multi.devices)


@dataclasses.dataclass(frozen=True)
class BatchAdvice:
    """How close a per-replica batch keeps the devices to their fitted v0.

    Attributes:
        per_replica_batch: the configured batch per device.
        fraction: fraction of v0 reached at that batch on fit.devices devices.
        per_replica_b90: per-device batch reaching 90% of v0.
        fit: the fit the advice is based on.
    """

    per_replica_batch: int
    fraction: float
    per_replica_b90: float
    fit: ThroughputFit

    @property
    def saturated(self) -> bool:
        """True when the batch reaches SATURATION (90%) of v0."""
        return self.fraction >= SATURATION - 1e-9

    @property
    def text(self) -> str:
        """One line for the trainer's start-up log."""
        fit = self.fit
        head = (f"per-GPU batch {self.per_replica_batch} reaches {100 * self.fraction:.0f}% of the fitted "
                f"v0 ({fit.v0:.0f} positions/s on {fit.devices} device(s), t = {fit.t:.3g} s/step)")
        if self.saturated:
            return f"{head}: the devices are kept busy"
        needed = math.ceil(self.per_replica_b90 - 1e-9)      # 9 * 8000 * 0.004 / 4 is 72, not 72.00..01
        return f"{head}; ~{needed} per GPU needed for {100 * SATURATION:.0f}%"


def batch_advice(per_replica_batch: int, fit: ThroughputFit) -> BatchAdvice:
    """Advice for the trainer: the fraction of v0 a per-replica batch reaches under `fit`.

    Raises:
        ConfigError: the batch is not positive.
    """
    if per_replica_batch <= 0:
        raise ConfigError(f"per-replica batch must be positive, got {per_replica_batch}")
    return BatchAdvice(per_replica_batch=per_replica_batch,
                       fraction=fit.fraction(per_replica_batch * fit.devices),
                       per_replica_b90=fit.per_replica_b90, fit=fit)


def select_fit(fits: Mapping[int, ThroughputFit], devices: int) -> ThroughputFit:
    """The fit for `devices`, else the one measured on the nearest device count (fewer on a tie).

    Raises:
        ConfigError: no fits at all.
    """
    if not fits:
        raise ConfigError("no throughput fits to choose from")
    return fits[min(fits, key=lambda n: (abs(n - devices), n))]


def fits_from_dict(raw: Mapping[str, Any], origin: str) -> dict[int, ThroughputFit]:
    """Fits from the JSON of `shogi-dnn bench scaling` or a declared {"fits": [{"devices", "v0", "t"}]}.

    Raises:
        ConfigError: no "fits" list, or an entry without positive devices/v0 and non-negative t.
    """
    entries = raw.get("fits") if isinstance(raw, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{origin}: expected a non-empty \"fits\" list of {{devices, v0, t}}")
    fits: dict[int, ThroughputFit] = {}
    for index, entry in enumerate(entries):
        fit = _fit_entry(entry, f"{origin}: fits[{index}]")
        fits[fit.devices] = fit
    return fits


def _fit_entry(entry: Any, where: str) -> ThroughputFit:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected an object with devices, v0 and t")
    try:
        devices, v0, t = int(entry["devices"]), float(entry["v0"]), float(entry["t"])
    except KeyError as exc:
        raise ConfigError(f"{where}: missing key {exc.args[0]!r}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: devices, v0 and t must be numbers ({exc})") from exc
    if devices < 1 or not v0 > 0 or not t >= 0 or not math.isfinite(v0 + t):
        raise ConfigError(f"{where}: need devices >= 1, v0 > 0 and t >= 0, got {devices}, {v0}, {t}")
    quality = {k: float(entry[k]) for k in ("r2", "rel_rms") if isinstance(entry.get(k), (int, float))}
    return ThroughputFit(devices=devices, v0=v0, t=t, num_points=len(entry.get("points") or ()), **quality)


def load_fits(spec: str | Path) -> dict[int, ThroughputFit]:
    """Fits from a JSON file (bench output or declared), or inline "v0=258,t=0.054[,devices=1]".

    Raises:
        ConfigError: unreadable or invalid file, or a malformed inline declaration.
    """
    text = str(spec)
    if "=" in text and not Path(text).exists():
        return _parse_inline(text)
    path = Path(text)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such scaling fit file") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable JSON scaling fit: {exc}") from exc
    return fits_from_dict(raw, str(path))


def _parse_inline(text: str) -> dict[int, ThroughputFit]:
    entry: dict[str, str] = {"devices": "1"}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in ("v0", "t", "devices"):
            raise ConfigError(f"scaling fit {text!r}: expected v0=POSITIONS_PER_S,t=SECONDS[,devices=N]")
        entry[key.strip()] = value.strip()
    return fits_from_dict({"fits": [entry]}, f"scaling fit {text!r}")


def advise(fit_spec: str | Path, per_replica_batch: int, num_replicas: int) -> BatchAdvice:
    """The trainer's start-up advice: load `--scaling-fit` (file or inline), pick the fit for the
    number of towers (nearest measured count) and rate the per-replica batch against it.

    Raises:
        ConfigError: an unreadable or invalid fit, or a non-positive batch.
    """
    return batch_advice(per_replica_batch, select_fit(load_fits(fit_spec), num_replicas))
