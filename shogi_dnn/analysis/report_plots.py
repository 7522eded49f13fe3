"""The report's plots from RUN/metrics.jsonl and RUN/eval-*.json (matplotlib Agg, no TensorFlow).

Plots (RUN/plots/, one PNG each, written atomically); x axis: samples seen; towers named by device:
  loss.png, accuracy.png   training loss / accuracy per tower over samples seen (one line per tower,
                           like TensorBoard's gpu0/loss, gpu1/loss), validation points on top
  validation.png           validation loss and accuracy at the end of each stage, each point marked
                           with its epoch and stage (e0 s1), epoch starts as dotted lines
  policy_loss.png, policy_accuracy.png   only for a run with a policy head (metrics.jsonl policy_loss,
                           policy_acc): the policy's cross-entropy and top-1 (argmax over all labels) per
                           tower, validation points on top
  throughput.png           positions/s per tower over samples seen
  lr.png                   learning rate over samples seen
  calibration.png          reliability curve of every eval-<split>.json (mean predicted vs observed), and
                           below it a bar per bin with its count of positions
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shogi_dnn import plotting
from shogi_dnn.analysis.tower_diagnosis import (
    device_kind,
    device_label,
    per_gpu_series,
    train_records,
    validation_records,
)
from shogi_dnn.folders import run_files

SAMPLES_LABEL = "samples seen (training positions)"
VALIDATION_PANELS = (("loss", "loss (binary cross-entropy, nats)"),
                     ("accuracy", "accuracy (decisive positions)"))
SMALL_BIN = 100        # calibration bins with fewer positions are drawn hollow: their observed score is noise


def make_plots(run_dir: Path, records: Sequence[dict[str, Any]],
               evals: dict[str, dict[str, Any]]) -> dict[str, Path]:
    """Write every plot that has data into RUN/plots/; plot name -> path, in the module docstring's order."""
    out = run_dir / run_files.PLOTS_DIR
    out.mkdir(exist_ok=True)
    plots = {}
    if train_records(records):
        plots["loss"] = plot_per_gpu(records, "loss", out / "loss.png", "training loss per {kind}",
                                     "loss (binary cross-entropy, nats)")
        plots["accuracy"] = plot_per_gpu(records, "accuracy", out / "accuracy.png",
                                         "training accuracy per {kind}", "accuracy (decisive positions)")
        if any("policy_loss" in r for r in train_records(records)):     # a run with a policy head
            plots["policy_loss"] = plot_per_gpu(records, "policy_loss", out / "policy_loss.png",
                                                "training policy loss per {kind}",
                                                "policy loss (cross-entropy of the move played, nats)")
            plots["policy_accuracy"] = plot_per_gpu(records, "policy_acc", out / "policy_accuracy.png",
                                                    "training policy top-1 per {kind}",
                                                    "policy top-1 (argmax over all 2187 labels)")
        plots["throughput"] = plot_per_gpu(train_records(records), "positions_per_s", out / "throughput.png",
                                           "positions/s per {kind}", "positions/s")
        plots["lr"] = plot_series(records, "lr", out / "lr.png", "learning rate")
    if validation_records(records):
        plots["validation"] = plot_validation(records, out / "validation.png")
    if evals:
        plots["calibration"] = plot_calibration(evals, out / "calibration.png")
    return plots


def _save(fig: Any, path: Path) -> Path:
    """Write `fig` as a PNG at `path` atomically; returns path."""
    with run_files.atomic_path(path) as tmp:      # a full disk: one line, no partial plot left
        fig.savefig(tmp, format="png", dpi=plotting.DPI)
    return path


def _figure(title: str, ylabel: str, xlabel: str = SAMPLES_LABEL) -> tuple[Any, Any]:
    """A new (figure, axes) of the report's size with its title, axis labels and grid."""
    fig = plotting.new_figure((8, 4.5), tight_layout=True)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if xlabel == SAMPLES_LABEL:
        plotting.count_axis(ax.xaxis)              # 150k, 1.2M: full numbers ran together
    return fig, ax


def plot_per_gpu(records: Sequence[dict[str, Any]], key: str, path: Path, title: str,
                 ylabel: str | None = None) -> Path:
    """One line per tower of a per-tower training metric over samples, plus validation points if any;
    `{kind}` in the title becomes GPU, CPU or device (device_kind)."""
    samples, values, devices = per_gpu_series(train_records(records), key)
    fig, ax = _figure(title.format(kind=device_kind(devices)), ylabel or key.replace("_", " "))
    for g in range(values.shape[1]):
        ax.plot(samples, values[:, g], lw=1.2, label=device_label(devices[g]))
    validation = [r for r in validation_records(records) if r.get(key) is not None]
    if validation:
        ax.plot([r["samples"] for r in validation], [r[key] for r in validation], "ko--", ms=4,
                label="validation")
    if values.shape[1] or validation:
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_series(records: Sequence[dict[str, Any]], key: str, path: Path, title: str) -> Path:
    """A whole-run training metric (e.g. lr) over samples."""
    fig, ax = _figure(title, key)
    points = [(r["samples"], r[key]) for r in train_records(records) if r.get(key) is not None]
    ax.plot([p[0] for p in points], [p[1] for p in points])
    return _save(fig, path)


def plot_validation(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """validation_figure as a PNG."""
    return _save(validation_figure(records), path)


def validation_figure(records: Sequence[dict[str, Any]]) -> Any:
    """Validation loss and accuracy at the end of each stage: points marked `e<epoch> s<stage>`, a dotted
    line where each epoch after the first begins (halfway between the validations around it)."""
    validation = validation_records(records)
    fig = plotting.new_figure((10, 4.5), tight_layout=True)
    fig.suptitle("validation at the end of each stage (e = epoch, s = stage)", fontsize=11)
    starts = _epoch_starts(validation)
    for i, (key, ylabel) in enumerate(VALIDATION_PANELS):
        ax = fig.add_subplot(1, 2, i + 1)
        points = [(r["samples"], r[key], r.get("epoch"), r.get("stage")) for r in validation
                  if r.get(key) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-")
        ys = [p[1] for p in points]
        for i, (x, y, epoch, stage) in enumerate(points):
            dx, dy, ha, va = _point_label_offset(ys, i)
            ax.annotate(f"e{epoch} s{stage}", (x, y), fontsize=7, xytext=(dx, dy), textcoords="offset points",
                        ha=ha, va=va)
        for epoch, x in starts:
            ax.axvline(x, color="grey", ls=":", lw=0.8)
            ax.annotate(f"epoch {epoch}", (x, 1), xycoords=("data", "axes fraction"), xytext=(2, -10),
                        textcoords="offset points", fontsize=7, color="grey")
        ax.set_title(f"validation {key}")
        ax.set_xlabel(SAMPLES_LABEL)
        plotting.count_axis(ax.xaxis, max_ticks=5)     # a half-width panel: 150k, 1.2M, few ticks
        ax.set_ylabel(ylabel)
        ax.margins(x=0.08, y=0.15)                 # room for the labels inside the frame
        ax.grid(alpha=0.3)
    return fig


def _point_label_offset(ys: Sequence[float], i: int) -> tuple[int, int, str, str]:
    """(dx, dy, ha, va) of point i's label, on the side its line leaves free: above a peak, below a
    trough, above-left on a rise and above-right on a fall (the line runs down-left, or down-right)."""
    before = ys[i - 1] if i > 0 else None
    after = ys[i + 1] if i + 1 < len(ys) else None
    before = after if before is None else before
    after = before if after is None else after
    y = ys[i]
    if before is None or (y >= before and y >= after):
        return 0, 5, "center", "bottom"
    if y <= before and y <= after:
        return 0, -6, "center", "top"
    return (-4, 3, "right", "bottom") if before < y else (4, 3, "left", "bottom")


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


def plot_calibration(evals: dict[str, dict[str, Any]], path: Path) -> Path:
    """Reliability curves (mean predicted win probability vs observed score) of every evaluated split."""
    return _save(calibration_figure(evals), path)


def calibration_points(result: dict[str, Any]) -> list[tuple[float, float, int, bool]]:
    """(mean predicted, observed, positions, small) of each non-empty reliability bin of an eval result."""
    return [(float(r["mean_prob"]), float(r["mean_label"]), int(r.get("positions", 0)),
             int(r.get("positions", 0)) < SMALL_BIN) for r in result.get("reliability", [])
            if r.get("positions", 1) and r.get("mean_prob") is not None]


def calibration_figure(evals: dict[str, dict[str, Any]]) -> Any:
    """Reliability curves of every evaluated split (top), bins of fewer than SMALL_BIN positions hollow (and
    named in the legend); below, a bar per bin and split with its count of positions, so that no count
    sits on a curve or on the diagonal."""
    fig = plotting.new_figure((8, 5.5), tight_layout=True)
    grid = fig.add_gridspec(2, 1, height_ratios=(3, 1))
    ax = fig.add_subplot(grid[0])
    counts = fig.add_subplot(grid[1], sharex=ax)
    ax.set_title("calibration")
    ax.set_ylabel("observed score (win 1, draw 0.5)")
    ax.grid(alpha=0.3)
    ax.plot([0, 1], [0, 1], color="grey", ls=":", label="perfect")
    for i, (split, result) in enumerate(evals.items()):
        color = _draw_calibration(ax, split, result)
        _draw_bin_counts(counts, result, color, i, len(evals))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.tick_params(labelbottom=False)
    counts.set_xlabel("predicted win probability")
    counts.set_ylabel("positions")
    counts.grid(alpha=0.3, axis="y")
    plotting.count_axis(counts.yaxis, max_ticks=3)
    counts.set_ylim(0, max([1, *(h.get_height() for h in counts.patches)]) * 1.35)   # room for the counts
    return fig


def _draw_calibration(ax: Any, split: str, result: dict[str, Any]) -> str:
    """One split's reliability curve on `ax`: filled points, hollow small bins. Returns its colour."""
    points = calibration_points(result)
    line, = ax.plot([p[0] for p in points], [p[1] for p in points], "-",
                    label=f"{split} (ECE {result.get('ece') or 0:.3f})")
    big = [p for p in points if not p[3]]
    small = [p for p in points if p[3]]
    ax.plot([p[0] for p in big], [p[1] for p in big], "o", color=line.get_color())
    if small:
        ax.plot([p[0] for p in small], [p[1] for p in small], "o", mfc="none", color=line.get_color(),
                label=f"{split}: bin of < {SMALL_BIN} positions")
    return line.get_color()


def _draw_bin_counts(ax: Any, result: dict[str, Any], color: str, index: int, splits: int) -> None:
    """Split `index` of `splits`: a bar per reliability bin (side by side within the bin), its count of
    positions on top; bins of fewer than SMALL_BIN positions hollow."""
    for row in result.get("reliability", []):
        n, lo, hi = int(row.get("positions", 0)), row.get("lo"), row.get("hi")
        if not n or lo is None or hi is None:
            continue
        width = (hi - lo) * 0.8 / splits
        x = lo + (hi - lo) * 0.1 + width * (index + 0.5)
        small = n < SMALL_BIN
        ax.bar(x, n, width, color="none" if small else color, edgecolor=color, alpha=1 if small else 0.6)
        ax.annotate(f"{n:,}", (x, n), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=6, color=color)
