"""Plots and RUN/report.md from RUN/metrics.jsonl and RUN/eval-*.json (matplotlib Agg, no TensorFlow).

Plots (RUN/plots/, one PNG each, written atomically; fonts: shogi_dnn.plotting). The x axis is samples
seen (training positions), as TensorBoard's (run_log writes its scalars at step = samples); a tower is
named by its device (`CPU:0`, `GPU:1`) and a title says GPU, CPU or device as the towers are:
  loss.png, accuracy.png   training loss / accuracy per tower over samples seen (one line per tower,
                           like TensorBoard's gpu0/loss, gpu1/loss), validation points on top
  validation.png           validation loss and accuracy at the end of each stage, each point marked
                           with its epoch and stage (e0 s1), epoch starts as dotted lines
  throughput.png           positions/s per tower over samples seen
  lr.png                   learning rate over samples seen
  calibration.png          reliability curve of every eval-<split>.json (mean predicted vs observed)

An unbalanced tower is flagged in report.md: a GPU whose median compute positions/s (its positions over
its own busy seconds, metrics.jsonl per_gpu compute_positions_per_s) is below SLOW_RATIO of the median of
the other GPUs' ("slow"; for runs logged without it: median positions/s below SLOW_RATIO of the fastest
GPU's, see the caveat); a GPU that processed fewer than SHARE_RATIO of the positions of the busiest one
("share"); or one whose mean training loss over the last LAST_WINDOW of the records is not finite or
differs from the GPUs' median by more than LOSS_GAP nats ("loss": the towers share weights, so their
losses should differ only by sampling noise).
Caveat: under synchronous all-reduce every tower waits for the slowest, so per-GPU positions/s computed
as (tower positions / interval wall time), as the trainer logs it, is equal across towers; a slow GPU
shows in it only as a low total throughput (see `shogi-dnn bench scaling`). Hence the "slow" test uses
compute_positions_per_s, timed per tower before the all-reduce, when the records have it (a run trained
with train.time_towers = true; report.md says so when they do not).

Data (check_evals): each eval-<split>.json records the identity of the data it scored (identity.py); one
scored on data other than what the run now says it trains on (run.json "dataset": the run was resumed on
other data with --data-changed after the evaluation) is refused in one line unless --allow-changed-data,
and labelled DATA CHANGED in report.md and the summary then, as is one that evaluate scored with that flag.
Evaluations or runs from before identities were recorded are reported, with one line saying so.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.dataset import identity, shards
from shogi_dnn import plotting
from shogi_dnn.folders import run_files
from shogi_dnn.analysis import scoring
from shogi_dnn.errors import RunError
from shogi_dnn.training import throughput

log = logging.getLogger(__name__)

SLOW_RATIO = 0.75
SHARE_RATIO = 0.9
LOSS_GAP = 0.1
LAST_WINDOW = 0.2


@dataclasses.dataclass(frozen=True)
class TowerFlag:
    """One unbalanced-tower finding: kind is "slow" or "loss"."""

    kind: str
    gpu: int
    device: str
    message: str


def _train(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "train"]


def _validation(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "validation"]


def per_gpu_series(records: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Samples [R] and values [R, G] float64 of `key` per GPU over the records that have it (NaN gaps)."""
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


def find_unbalanced_towers(records: Sequence[dict[str, Any]], slow_ratio: float = SLOW_RATIO,
                           loss_gap: float = LOSS_GAP, last_window: float = LAST_WINDOW) -> list[TowerFlag]:
    """Towers much slower than the fastest, or whose recent training loss diverges from the others'."""
    train = _train(records)
    flags = []
    _, compute, devices = per_gpu_series(train, "compute_positions_per_s")
    _, speed, devices = per_gpu_series(train, "positions_per_s")
    if compute.size and np.isfinite(compute).any():          # each tower's own compute rate (busy_s)
        flags += _slow_compute_flags(compute, devices, slow_ratio)
    elif speed.size and np.isfinite(speed).any():            # older runs: interval rates (see the caveat)
        medians = np.nanmedian(np.where(np.isfinite(speed), speed, np.nan), axis=0)
        fastest = np.nanmax(medians)
        for g, m in enumerate(medians):
            if np.isfinite(m) and fastest > 0 and m < slow_ratio * fastest:
                flags.append(TowerFlag("slow", g, devices[g], f"GPU {g} ({devices[g]}) runs at {m:,.0f} "
                                       f"positions/s, {m / fastest:.0%} of the fastest ({fastest:,.0f})"))
    flags += _share_flags(train)
    _, loss, devices = per_gpu_series(train, "loss")
    if loss.size:
        window = max(1, math.ceil(last_window * len(loss)))
        non_finite = _non_finite_losses(train[-window:], loss.shape[1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)      # a GPU with no value: NaN mean, skipped
            means = np.nanmean(loss[-window:], axis=0)
            reference = float(np.nanmedian(means)) if np.isfinite(means).any() else math.nan
        for g, m in enumerate(means):
            if non_finite[g]:
                flags.append(TowerFlag("loss", g, devices[g], f"GPU {g} ({devices[g]}) has a non-finite "
                                       "training loss in the last records"))
            elif np.isfinite(m) and abs(m - reference) > loss_gap:
                flags.append(TowerFlag("loss", g, devices[g], f"GPU {g} ({devices[g]}) recent training loss "
                                       f"{m:.4f} vs the towers' median {reference:.4f}"))
    return flags


def _slow_compute_flags(compute: np.ndarray, devices: Sequence[str], slow_ratio: float) -> list[TowerFlag]:
    """GPUs whose median compute positions/s is below slow_ratio of the median of the other towers'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # a GPU with no value: NaN median, skipped
        medians = np.nanmedian(np.where(np.isfinite(compute), compute, np.nan), axis=0)
    flags = []
    for g, m in enumerate(medians):
        others = np.delete(medians, g)
        others = others[np.isfinite(others)]
        if not np.isfinite(m) or not others.size:
            continue
        reference = float(np.median(others))
        if reference > 0 and m < slow_ratio * reference:
            flags.append(TowerFlag("slow", g, devices[g], f"GPU {g} ({devices[g]}) computes {m:,.0f} positions "
                                   f"per busy second, {m / reference:.0%} of the other towers' median "
                                   f"({reference:,.0f})"))
    return flags


def _share_flags(train: Sequence[dict[str, Any]], share_ratio: float = SHARE_RATIO) -> list[TowerFlag]:
    """GPUs that processed much fewer positions than the busiest one (uneven input sharding)."""
    _, counts, devices = per_gpu_series(train, "positions")
    if not counts.size or not np.isfinite(counts).any():
        return []
    totals = np.nansum(counts, axis=0)
    busiest = totals.max()
    return [TowerFlag("share", g, devices[g], f"GPU {g} ({devices[g]}) processed {int(t):,} positions, "
                      f"{t / busiest:.0%} of the busiest tower's {int(busiest):,}")
            for g, t in enumerate(totals) if busiest > 0 and t < share_ratio * busiest]


def _non_finite_losses(records: Sequence[dict[str, Any]], gpus: int) -> list[bool]:
    """Per GPU: did any record report a NaN/inf loss (a missing value is not counted)?"""
    bad = [False] * gpus
    for r in records:
        for g, entry in enumerate(r.get("per_gpu") or []):
            value = entry.get("loss")
            if isinstance(value, (int, float)) and not math.isfinite(value):
                bad[g] = True
    return bad


SAMPLES_LABEL = "samples seen (training positions)"


def _save(fig: Any, path: Path) -> Path:
    with run_files.atomic_path(path) as tmp:      # a full disk: one line, no partial plot left
        fig.savefig(tmp, format="png", dpi=plotting.DPI)
    return path


def _figure(title: str, ylabel: str, xlabel: str = SAMPLES_LABEL) -> tuple[Any, Any]:
    fig = plotting.new_figure((8, 4.5), tight_layout=True)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def device_kind(devices: Sequence[Any]) -> str:
    """'GPU' when every tower is a GPU, 'CPU' when every one is a CPU, else 'device' (for titles)."""
    kinds = {device_label(d).rsplit("/", 1)[-1].split(":")[0].upper() for d in devices}
    return kinds.pop() if len(kinds) == 1 and kinds <= {"GPU", "CPU"} else "device"


def plot_per_gpu(records: Sequence[dict[str, Any]], key: str, path: Path, title: str,
                 ylabel: str | None = None) -> Path:
    """One line per tower of a per-tower training metric over samples, plus validation points if any;
    `{kind}` in the title becomes GPU, CPU or device (device_kind)."""
    samples, values, devices = per_gpu_series(_train(records), key)
    fig, ax = _figure(title.format(kind=device_kind(devices)), ylabel or key.replace("_", " "))
    for g in range(values.shape[1]):
        ax.plot(samples, values[:, g], lw=1.2, label=device_label(devices[g]))
    validation = [r for r in _validation(records) if r.get(key) is not None]
    if validation:
        ax.plot([r["samples"] for r in validation], [r[key] for r in validation], "ko--", ms=4,
                label="validation")
    if values.shape[1] or validation:
        ax.legend(fontsize=8)
    return _save(fig, path)


VALIDATION_PANELS = (("loss", "loss (binary cross-entropy, nats)"),
                     ("accuracy", "accuracy (decisive positions)"))


def plot_validation(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """validation_figure as a PNG."""
    return _save(validation_figure(records), path)


def validation_figure(records: Sequence[dict[str, Any]]) -> Any:
    """Validation loss and accuracy at the end of each stage: points marked `e<epoch> s<stage>`, a dotted
    line where each epoch after the first begins (halfway between the validations around it)."""
    validation = _validation(records)
    fig = plotting.new_figure((10, 4.5), tight_layout=True)
    fig.suptitle("validation at the end of each stage (e = epoch, s = stage)", fontsize=11)
    starts = _epoch_starts(validation)
    for i, (key, ylabel) in enumerate(VALIDATION_PANELS):
        ax = fig.add_subplot(1, 2, i + 1)
        points = [(r["samples"], r[key], r.get("epoch"), r.get("stage")) for r in validation
                  if r.get(key) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-")
        for x, y, epoch, stage in points:
            ax.annotate(f"e{epoch} s{stage}", (x, y), fontsize=7, xytext=(2, 4), textcoords="offset points")
        for epoch, x in starts:
            ax.axvline(x, color="grey", ls=":", lw=0.8)
            ax.annotate(f"epoch {epoch}", (x, 1), xycoords=("data", "axes fraction"), xytext=(2, -10),
                        textcoords="offset points", fontsize=7, color="grey")
        ax.set_title(f"validation {key}")
        ax.set_xlabel(SAMPLES_LABEL)
        ax.set_ylabel(ylabel)
        ax.margins(x=0.08, y=0.15)                 # room for the labels inside the frame
        ax.grid(alpha=0.3)
    return fig


def _epoch_starts(validation: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """(epoch, samples where it began) of every epoch after the first: halfway between the previous
    epoch's last validation and this epoch's first."""
    starts, previous = [], None
    for r in validation:
        epoch = r.get("epoch")
        if previous is not None and epoch is not None and epoch != previous.get("epoch"):
            starts.append((int(epoch), (previous["samples"] + r["samples"]) / 2))
        previous = r
    return starts


def plot_series(records: Sequence[dict[str, Any]], key: str, path: Path, title: str) -> Path:
    """A whole-run training metric (e.g. lr) over samples."""
    fig, ax = _figure(title, key)
    points = [(r["samples"], r[key]) for r in _train(records) if r.get(key) is not None]
    ax.plot([p[0] for p in points], [p[1] for p in points])
    return _save(fig, path)


SMALL_BIN = 100        # calibration bins with fewer positions are drawn hollow: their observed score is noise


def calibration_points(result: dict[str, Any]) -> list[tuple[float, float, int, bool]]:
    """(mean predicted, observed, positions, small) of each non-empty reliability bin of an eval result."""
    return [(float(r["mean_prob"]), float(r["mean_label"]), int(r.get("positions", 0)),
             int(r.get("positions", 0)) < SMALL_BIN) for r in result.get("reliability", [])
            if r.get("positions", 1) and r.get("mean_prob") is not None]


def calibration_figure(evals: dict[str, dict[str, Any]]) -> Any:
    """Reliability curves of every evaluated split, each bin labelled with its count of positions; bins of
    fewer than SMALL_BIN positions are hollow (and named in the legend)."""
    fig, ax = _figure("calibration", "observed score (win 1, draw 0.5)", "predicted win probability")
    ax.plot([0, 1], [0, 1], color="grey", ls=":", label="perfect")
    for split, result in evals.items():
        points = calibration_points(result)
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], "-",
                        label=f"{split} (ECE {result.get('ece') or 0:.3f})")
        big = [p for p in points if not p[3]]
        small = [p for p in points if p[3]]
        ax.plot([p[0] for p in big], [p[1] for p in big], "o", color=line.get_color())
        if small:
            ax.plot([p[0] for p in small], [p[1] for p in small], "o", mfc="none", color=line.get_color(),
                    label=f"{split}: bin of < {SMALL_BIN} positions")
        for x, y, n, _ in points:
            ax.annotate(f"{n:,}", (x, y), fontsize=6, xytext=(3, -9), textcoords="offset points",
                        color=line.get_color())
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.text(0.99, 0.01, "numbers: positions per bin", transform=ax.transAxes, ha="right", fontsize=7, color="grey")
    return fig


def plot_calibration(evals: dict[str, dict[str, Any]], path: Path) -> Path:
    """Reliability curves (mean predicted win probability vs observed score) of every evaluated split."""
    return _save(calibration_figure(evals), path)


def make_plots(run_dir: Path, records: Sequence[dict[str, Any]],
               evals: dict[str, dict[str, Any]]) -> dict[str, Path]:
    """Write every plot that has data into RUN/plots/; returns name -> path."""
    out = run_dir / run_files.PLOTS_DIR
    out.mkdir(exist_ok=True)
    plots = {}
    if _train(records):
        plots["loss"] = plot_per_gpu(records, "loss", out / "loss.png", "training loss per {kind}",
                                     "loss (binary cross-entropy, nats)")
        plots["accuracy"] = plot_per_gpu(records, "accuracy", out / "accuracy.png", "training accuracy per {kind}",
                                         "accuracy (decisive positions)")
        plots["throughput"] = plot_per_gpu(_train(records), "positions_per_s", out / "throughput.png",
                                           "positions/s per {kind}", "positions/s")
        plots["lr"] = plot_series(records, "lr", out / "lr.png", "learning rate")
    if _validation(records):
        plots["validation"] = plot_validation(records, out / "validation.png")
    if evals:
        plots["calibration"] = plot_calibration(evals, out / "calibration.png")
    return plots


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
        return self.measured / self.predicted

    def text(self) -> str:
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
    """Per evaluated split, the lines its numbers must carry (run_files.eval_labels, and DATA CHANGED for
    an evaluation of data other than the run's now, when allowed); one log line for those whose data
    cannot be checked (no identity recorded), unless not `say_unknown` (said once already).

    Raises:
        RunError: an evaluation scored data other than what the run now trains on, without
            `allow_changed_data` (one line: evaluate again, or pass the flag).
    """
    run_dir = Path(run_dir)
    trained = run_files.read_run_json(run_dir).get(run_files.KEY_DATASET)
    labels, unknown = {}, []
    for split, result in evals.items():
        labels[split] = run_files.eval_labels(result)
        scored = result.get(run_files.KEY_DATASET)
        if trained is None or scored is None:
            unknown.append(f"eval-{split}.json")
            continue
        if (result.get("data_check") or {}).get("status") == "changed":
            continue                                      # scored with the flag: labelled already
        splits = shards.SPLITS if split == "all" else (split,)
        try:
            check = identity.compare(scored, identity.DatasetIdentity.from_dict(trained), splits)
        except ValueError as exc:
            raise RunError(f"{run_dir / run_files.RUN_JSON} or eval-{split}.json: dataset: {exc}") from exc
        if not check.changed:
            continue
        where = run_files.eval_path(run_dir, split)
        if not allow_changed_data:
            raise RunError(f"{where} was scored on {check.detail}, and the run trains on the latter now: evaluate "
                           f"again, or pass {run_files.ALLOW_CHANGED_DATA} to report it anyway (labelled)")
        labels[split].append(f"DATA CHANGED: scored on {check.detail}, and the run trains on the latter now")
    if unknown and say_unknown:
        log.warning("%s: the data of %s cannot be checked against the run's (no dataset identity recorded: "
                    "scored or trained before runs recorded one)", run_dir, ", ".join(unknown))
    return labels


def write_report(run_dir: str | Path, fits: dict[int, throughput.ThroughputFit] | None = None,
                 allow_changed_data: bool = False) -> Path:
    """Plots plus RUN/report.md (written atomically); with throughput fits (`bench scaling`) also the
    plan-vs-measured line. Raises RunError for a missing/corrupt run, or for an evaluation of data other
    than the run's (check_evals) unless `allow_changed_data`."""
    run_dir = run_files.check_run_dir(run_dir)
    records = run_files.read_metrics(run_dir)
    evals = run_files.read_evals(run_dir)
    labels = check_evals(run_dir, evals, allow_changed_data)
    plots = make_plots(run_dir, records, evals)
    text = render_markdown(run_dir, records, evals, plots, find_unbalanced_towers(records), labels)
    check = plan_check(run_dir, fits) if fits else None
    if check is not None:
        text = text.rstrip("\n") + "\n\n## Plan vs measured\n\n" + check.text() + "\n"
    path = run_dir / run_files.REPORT_MD
    with run_files.atomic_path(path, needed=len(text.encode("utf-8"))) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def device_label(name: Any) -> str:
    """One name per device in every table: `CPU:0`, `GPU:1`, `worker1@10.0.0.2:2222/GPU:0` (a cluster's
    tower), never TensorFlow's `/job:localhost/replica:0/task:0/device:CPU:0`."""
    text = str(name)
    return text.rsplit("device:", 1)[-1] if "device:" in text else text


def render_markdown(run_dir: Path, records: Sequence[dict[str, Any]], evals: dict[str, dict[str, Any]],
                    plots: dict[str, Path], flags: Sequence[TowerFlag],
                    labels: dict[str, list[str]] | None = None) -> str:
    """The text of report.md: training summary, towers, validation per stage, evaluations (with their
    `labels`, check_evals), plots."""
    run = run_files.read_run_json(run_dir)
    lines = [f"# Run report: {run_dir.name}", "",
             f"- data: `{run.get('data_dir', '?')}`{_dataset_text(run)}",
             *_history_lines(run),
             (f"- towers: {run.get('num_replicas', '?')} "
             f"({', '.join(device_label(d) for d in run.get('devices', [])) or '?'})")]
    lines += _training_lines(records)
    lines += _tower_lines(records, flags)
    lines += _validation_lines(records)
    for split, result in evals.items():
        lines += _eval_lines(split, result, (labels or {}).get(split, []))
    lines += ["", "## Plots", ""]
    lines += [f"![{name}]({path.relative_to(run_dir).as_posix()})" for name, path in plots.items()]
    return "\n".join(lines) + "\n"


def _n(value: Any, fmt: str = ".4f") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, fmt)


def _training_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    train = _train(records)
    if not train:
        return ["", "No training records in metrics.jsonl."]
    last = train[-1]
    return [(f"- samples seen: {last.get('samples', 0):,} in {last.get('step', '?')} steps "
            f"(epoch {last.get('epoch', '?')}, stage {last.get('stage', '?')})"),
            (f"- last training loss {_n(last.get('loss'))}, accuracy {_n(last.get('accuracy'))}, "
            f"lr {_n(last.get('lr'), '.3g')}, {_n(last.get('positions_per_s'), ',.0f')} positions/s")]


def _tower_lines(records: Sequence[dict[str, Any]], flags: Sequence[TowerFlag]) -> list[str]:
    train = _train(records)
    _, speed, devices = per_gpu_series(train, "positions_per_s")
    _, loss, _ = per_gpu_series(train, "loss")
    _, acc, _ = per_gpu_series(train, "accuracy")
    if not devices:
        return []
    window = max(1, math.ceil(LAST_WINDOW * len(loss)))
    lines = ["", "## Towers", "", "| GPU | device | median positions/s | recent loss | recent accuracy |",
             "|---|---|---|---|---|"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # all-NaN columns: shown as "-"
        for g, device in enumerate(devices):
            lines.append(f"| {g} | `{device_label(device)}` | {_n(float(np.nanmedian(speed[:, g])), ',.0f')} | "
                         f"{_n(float(np.nanmean(loss[-window:, g])))} | {_n(float(np.nanmean(acc[-window:, g])))} |")
    lines.append("")
    lines += [f"- **UNBALANCED TOWER**: {f.message}" for f in flags] or [("- towers balanced: no slow GPU "
                                                                          "and no diverging loss")]
    timed = any("busy_s" in g for r in records if r.get("kind") == "train" for g in r["per_gpu"])
    if len(devices) > 1 and not timed:
        lines.append("- each tower's own compute time was not logged, so a slow GPU shows only in the total "
                     "throughput: train with `--set train.time_towers=true` for the per-GPU check")
    return lines


def _validation_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    validation = _validation(records)
    if not validation:
        return []
    lines = ["", "## Validation per stage", "", "| epoch | stage | samples | loss | accuracy |", "|---|---|---|---|---|"]
    lines += [f"| {r.get('epoch', '-')} | {r.get('stage', '-')} | {r.get('samples', 0):,} | {_n(r.get('loss'))} | "
              f"{_n(r.get('accuracy'))} |" for r in validation]
    best = min((r for r in validation if r.get("loss") is not None), key=lambda r: r["loss"], default=None)
    if best:
        lines.append(f"\nBest validation loss {_n(best['loss'])} at {best.get('samples', 0):,} samples.")
    return lines


def _dataset_text(run: dict[str, Any]) -> str:
    """' (manifest 1a2b3c4d, train 1,574 games, validation 174 games)', or '' for a run without an identity."""
    try:
        return f" ({identity.DatasetIdentity.from_dict(run[run_files.KEY_DATASET]).describe()})"
    except (KeyError, ValueError):
        return ""


def _history_lines(run: dict[str, Any]) -> list[str]:
    """One line per data change recorded on resume (run.json "history")."""
    lines = []
    for entry in run.get(run_files.KEY_HISTORY) or []:
        old, new = entry.get("from") or {}, entry.get("to") or {}
        lines.append(f"- {entry.get('event', 'change')} at {entry.get('time', '?')} (resumed from "
                     f"{entry.get('checkpoint', '?')}): `{old.get('data_dir', '?')}` manifest "
                     f"{str(old.get('manifest', '?'))[:identity.SHORT]} -> `{new.get('data_dir', '?')}` manifest "
                     f"{str(new.get('manifest', '?'))[:identity.SHORT]}")
    return lines


# (label in report.md, label in --summary, key of eval-<split>.json "baselines"); "engine" also has its
# evaluated-positions rows. Files written before a baseline existed simply lack its row.
BASELINE_ROWS = (("material baseline", "material", "material"), ("piece-square baseline", "piece-square", "piece_square"),
                 ("side-to-move baseline", "side to move", "side_to_move"), ("engine baseline", "engine", "engine"))
COMPARISON_LABELS = {"material": "material", "piece_square": "piece-square", "side_to_move": "side to move",
                     "engine": "engine", "engine_evaluated": "engine on evaluated positions"}


def _with_interval(row: dict[str, Any], metric: str) -> str:
    """'0.6600' or, when the row has its bootstrap interval, '0.6600 (0.6400..0.6800)'."""
    pair = (row.get("intervals") or {}).get(metric)
    text = _n(row.get(metric))
    return f"{text} ({pair[0]:.4f}..{pair[1]:.4f})" if pair and text != "-" else text


def _predictor_rows(result: dict[str, Any], model: str, labels: int) -> list[tuple[str, dict[str, Any]]]:
    """(label, row) of the model and every baseline present; with the engine, the evaluated-only rows.
    labels: 0 for report.md's labels, 1 for --summary's."""
    b = result.get("baselines", {})
    rows = [(model, result)] + [(names[labels], b[key]) for *names, key in BASELINE_ROWS if b.get(key)]
    evaluated = (b.get("engine") or {}).get("evaluated") or {}
    if evaluated.get("model") and evaluated.get("engine"):
        rows += [(f"{model}, evaluated positions" if labels == 0 else "model, evaluated", evaluated["model"]),
                 (("engine baseline, evaluated positions", "engine, evaluated")[labels], evaluated["engine"])]
    return rows


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """One line per paired comparison of the model with a baseline (scoring.comparison_text), then what
    the intervals are; empty for a file written before the intervals."""
    boot = result.get("bootstrap")
    comparisons = result.get("comparisons")
    if not boot or not comparisons:
        return []
    lines = [scoring.comparison_text(COMPARISON_LABELS.get(k, k), c, boot.get("level", scoring.BOOTSTRAP_LEVEL))
             for k, c in comparisons.items()]
    lines.append(f"({boot.get('level', scoring.BOOTSTRAP_LEVEL):.0%} intervals: bootstrap over {boot.get('games', '?')} "
                 f"games, {boot.get('resamples', '?')} resamples; not resolved: the interval contains 0)")
    return lines


def _engine_line(result: dict[str, Any]) -> list[str]:
    engine = result.get("baselines", {}).get("engine")
    if not engine or "evaluated" not in engine:
        return []
    evaluated = engine["evaluated"]
    return [(f"engine: sigmoid(eval / a), a = {engine.get('scale', 0):.0f} cp/logit fitted on the training split; "
             f"evaluations on {engine.get('coverage', 0):.1%} of these positions ({evaluated.get('positions', 0):,} "
             f"positions, {evaluated.get('games', '?')} games: the evaluated rows), p = 0.5 elsewhere")]


def _eval_lines(split: str, result: dict[str, Any], labels: Sequence[str] = ()) -> list[str]:
    intervals = " (95% interval over games)" if result.get("intervals") else ""
    lines = ["", f"## Evaluation: {split}", "", *(f"> **WARNING**: {line}\n" for line in labels),
             (f"{result.get('positions', 0):,} positions ({result.get('decisive', '?')} decisive, "
             f"{result.get('draws', {}).get('positions', '?')} draws); accuracy over decisive positions."), "",
             f"| predictor | loss{intervals} | accuracy{intervals} | Brier | ECE |", "|---|---|---|---|---|"]
    model = "model (mirror-averaged)" if result.get("mirror_average") else "model"
    for name, row in _predictor_rows(result, model, 0):
        lines.append(f"| {name} | {_with_interval(row, 'loss')} | {_with_interval(row, 'accuracy')} | "
                     f"{_n(row.get('brier'))} | {_n(row.get('ece'))} |")
    extra = _engine_line(result) + comparison_lines(result)
    if extra:
        lines += [""] + [f"- {line}" for line in extra]
    gpus = result.get("per_gpu", [])
    if gpus:
        spread = result.get("per_gpu_spread", {})
        lines += ["", "| GPU | positions | loss | accuracy |", "|---|---|---|---|"]
        lines += [f"| `{device_label(g.get('device', i))}` | {g.get('positions')} | {_n(g.get('loss'))} | {_n(g.get('accuracy'))} |"
                  for i, g in enumerate(gpus)]
        lines.append(f"\nSpread between GPUs: loss {_n(spread.get('loss'))}, "
                     f"accuracy {_n(spread.get('accuracy'))}.")
    return lines


# ----------------------------------------------------------------------------------------------------
# The one comparison table (report --summary): the end of `make demo`


def summary_table(run_dir: str | Path, split: str = "validation", allow_changed_data: bool = False) -> str:
    """Model vs the baselines on one evaluated split (RUN/eval-<split>.json): accuracy (decisive positions),
    log loss, each with its 95% interval over games when the file has them, ECE, positions and games (from
    the dataset's manifest), then one line per paired comparison ("model ahead of material: accuracy
    +0.0210 (95% +0.0040..+0.0380 over games), ..." or "... not resolved"); a file written before the
    intervals gets the old line "model ahead of material: accuracy +0.0600, log loss -0.0500".
    An evaluation of data the run no longer trains on is refused unless allow_changed_data (then labelled).
    RunError when the split was not evaluated."""
    from shogi_dnn.errors import ShogiDnnError

    run_dir = Path(run_dir)
    path = run_dir / f"eval-{split}.json"
    if not path.is_file():
        raise RunError(f"{path}: not found: run `shogi-dnn evaluate --run-dir {run_dir} --split {split}` first")
    result = json.loads(path.read_text(encoding="utf-8"))
    labels = check_evals(run_dir, {split: result}, allow_changed_data, say_unknown=False)[split]
    games: Any = result.get("games")               # recorded by evaluate; older files: the manifest now
    if not isinstance(games, int):
        games = "?"
        try:
            manifest = shards.read_manifest(Path(result.get("data_dir") or run_files.read_run_json(run_dir)["data_dir"]))
            games = sum(s.games for s in (manifest.split(split) if split != "all" else manifest.shards))
        except (ShogiDnnError, OSError, KeyError):
            pass                                        # the dataset moved: games unknown, the rest stands
    games_text = f"{games:,}" if isinstance(games, int) else games
    table = [["predictor", "accuracy", "log loss", "ECE", "positions", "games"]]
    for name, row in _predictor_rows(result, "model", 1):
        row_games = row.get("games")
        table.append([name, _with_interval(row, "accuracy"), _with_interval(row, "loss"), _n(row.get("ece")),
                      f"{row.get('positions', result.get('positions', 0)):,}",
                      f"{row_games:,}" if isinstance(row_games, int) else games_text])
    widths = [max(len(r[c]) for r in table) for c in range(len(table[0]))]
    intervals = "; in brackets the 95% interval over games" if result.get("intervals") else ""
    lines = [f"WARNING: {line}" for line in labels]
    lines += [(f"{split} split: model vs baselines (accuracy over decisive positions; lower log loss and ECE are "
              f"better{intervals})")]
    lines += ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths)))
              for r in table]
    comparisons = comparison_lines(result)
    material = result.get("baselines", {}).get("material")
    if comparisons:
        lines += comparisons
    elif material and result.get("accuracy") is not None and material.get("accuracy") is not None:
        d_acc, d_loss = result["accuracy"] - material["accuracy"], result["loss"] - material["loss"]
        ahead = d_acc > 0 and d_loss < 0
        lines.append(f"model {'ahead of' if ahead else 'NOT ahead of'} material: accuracy {d_acc:+.4f}, "
                     f"log loss {d_loss:+.4f}")
    return "\n".join(lines)
