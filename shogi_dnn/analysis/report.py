"""RUN/report.md from RUN/metrics.jsonl and RUN/eval-*.json, with its plots (no TensorFlow).

report.md: the run, the last training record, the towers (unbalanced ones flagged), validation per
stage, one section per evaluated split (labelled when its data changed), the plots, and the plan against
the measured rate. The one-table summary is summary.py.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shogi_dnn.analysis import scoring
from shogi_dnn.analysis.eval_rows import (
    OTHER_DATA,
    REPORT_LABELS,
    comparison_lines,
    data_line,
    format_with_interval,
    predictor_rows,
)
from shogi_dnn.analysis.eval_rows import format_number as _n
from shogi_dnn.analysis.report_checks import check_evals, plan_check
from shogi_dnn.analysis.report_plots import make_plots
from shogi_dnn.analysis.tower_diagnosis import (
    LAST_WINDOW,
    TowerFlag,
    device_kind,
    device_label,
    find_unbalanced_towers,
    per_gpu_series,
    train_records,
    validation_records,
)
from shogi_dnn.dataset import evalfit, identity
from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files
from shogi_dnn.training import throughput


def write_report(run_dir: str | Path, fits: dict[int, throughput.ThroughputFit] | None = None,
                 allow_changed_data: bool = False) -> Path:
    """Plots plus RUN/report.md (written atomically); with throughput fits (`bench scaling`) also the
    plan-vs-measured section.

    Returns:
        The path of report.md.

    Raises:
        RunError: a missing or corrupt run, or an evaluation of data other than the run's (check_evals)
            unless `allow_changed_data`.
    """
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
              f"({', '.join(device_label(d) for d in run.get('devices', [])) or '?'})"),
             *_eval_scale_lines(run),
             *_progress_lines(run_dir)]
    lines += _training_lines(records)
    lines += _tower_lines(records, flags)
    lines += _validation_lines(records)
    for split, result in evals.items():
        lines += _eval_lines(split, result, (labels or {}).get(split, []))
    lines += ["", "## Plots", ""]
    lines += [f"![{name}]({path.relative_to(run_dir).as_posix()})" for name, path in plots.items()]
    return "\n".join(lines) + "\n"


def unfinished_line(run_dir: Path) -> str | None:
    """'UNFINISHED RUN: checkpoint ... : the run is unfinished (`train --resume` continues it)' for a run
    without model.keras whose latest checkpoint is short of its end; None otherwise."""
    try:
        progress = run_files.unfinished_checkpoint(run_dir)
    except RunError:                   # an unreadable checkpoint state: evaluate names it
        return None
    return None if progress is None else f"UNFINISHED RUN: {progress.text()} (`train --resume` continues it)"


def _progress_lines(run_dir: Path) -> list[str]:
    line = unfinished_line(run_dir)
    return [] if line is None else [f"- **{line.replace(':', '**:', 1)}"]


def _dataset_text(run: dict[str, Any]) -> str:
    """' (manifest 1a2b3c4d, train 1,574 games, validation 174 games)', or '' for a run without an
    identity."""
    try:
        return f" ({identity.DatasetIdentity.from_dict(run[run_files.KEY_DATASET]).describe()})"
    except (KeyError, ValueError):
        return ""


def _eval_scale_lines(run: dict[str, Any]) -> list[str]:
    """The evaluation target's line: a as trained, and the fit on results with its interval, games and
    positions (none for a run without evaluation targets)."""
    target = run.get("eval_target") or {}
    if not target.get("fit"):
        return []
    fit = evalfit.EvalFit.from_dict(target["fit"])
    how = ("set by train.eval_scale" if target.get("set_scale") else "the fit" if fit.enough else
           f"the default: the fit saw fewer than {evalfit.MIN_FIT_GAMES} games or "
           f"{evalfit.MIN_FIT_POSITIONS:,} positions")
    return [(f"- evaluation targets: λ = {target.get('weight', 0):g}, a = {target.get('scale', 0):.0f} "
             f"cp/logit ({how}); fitted on results: {fit.fit_text()[len('a = '):]}")]


def _history_lines(run: dict[str, Any]) -> list[str]:
    """One line per data change recorded on resume (run.json "history")."""
    lines = []
    for entry in run.get(run_files.KEY_HISTORY) or []:
        old, new = entry.get("from") or {}, entry.get("to") or {}
        lines.append(f"- {entry.get('event', 'change')} at {entry.get('time', '?')} (resumed from "
                     f"{entry.get('checkpoint', '?')}): `{old.get('data_dir', '?')}` manifest "
                     f"{str(old.get('manifest', '?'))[:identity.SHORT]} -> `{new.get('data_dir', '?')}` "
                     f"manifest {str(new.get('manifest', '?'))[:identity.SHORT]}")
    return lines


def _training_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """Samples seen and the last training record's loss, accuracy, lr and rate (or one line: none)."""
    train = train_records(records)
    if not train:
        return ["", "No training records in metrics.jsonl."]
    last = train[-1]
    lines = [(f"- samples seen: {last.get('samples', 0):,} in {last.get('step', '?')} steps "
              f"(epoch {last.get('epoch', '?')}, stage {last.get('stage', '?')})"),
             (f"- last training loss {_n(last.get('loss'))}, accuracy {_n(last.get('accuracy'))}, "
              f"lr {_n(last.get('lr'), '.3g')}, {_n(last.get('positions_per_s'), ',.0f')} positions/s")]
    if "policy_loss" in last:       # a run with a policy head
        lines.append(f"- last training policy loss {_n(last.get('policy_loss'))}, policy top-1 "
                     f"{_n(last.get('policy_acc'))} (argmax over all 2187 labels; evaluate's top-1 is over "
                     "the legal moves)")
    return lines


def _tower_lines(records: Sequence[dict[str, Any]], flags: Sequence[TowerFlag]) -> list[str]:
    """The towers' table (median rate, recent loss and accuracy per tower), then the flags or one line
    saying the towers are balanced, and how to time each tower when the run did not."""
    train = train_records(records)
    _, speed, devices = per_gpu_series(train, "positions_per_s")
    _, loss, _ = per_gpu_series(train, "loss")
    _, acc, _ = per_gpu_series(train, "accuracy")
    if not devices:
        return []
    kind = device_kind(devices)
    window = max(1, math.ceil(LAST_WINDOW * len(loss)))
    header = f"| {_index_header(kind)} | device | median positions/s | recent loss | recent accuracy |"
    lines = ["", "## Towers", "", header, "|---|---|---|---|---|"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # all-NaN columns: shown as "-"
        for g, device in enumerate(devices):
            lines.append(f"| {g} | `{device_label(device)}` | "
                         f"{_n(float(np.nanmedian(speed[:, g])), ',.0f')} | "
                         f"{_n(float(np.nanmean(loss[-window:, g])))} | "
                         f"{_n(float(np.nanmean(acc[-window:, g])))} |")
    lines.append("")
    lines += [f"- **UNBALANCED TOWER**: {f.message}" for f in flags] or [
        f"- towers balanced: no slow {kind} and no diverging loss"]
    timed = any("busy_s" in g for r in train for g in r["per_gpu"])
    if len(devices) > 1 and not timed:
        lines.append(f"- each tower's own compute time was not logged, so a slow {kind} shows only in the "
                     f"total throughput: train with `--set train.time_towers=true` for the per-{kind} check")
    return lines


def _index_header(kind: str) -> str:
    """The header of a table's tower-index column: the device kind, or 'tower' when the kinds are mixed."""
    return "tower" if kind == "device" else kind


def _validation_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """The validation table (one row per stage's end) and the best validation loss."""
    validation = validation_records(records)
    if not validation:
        return []
    with_policy = any("policy_loss" in r for r in validation)     # a run with a policy head
    lines = ["", "## Validation per stage", "", "| epoch | stage | samples | loss | accuracy |"
             + (" policy loss | policy top-1 |" if with_policy else ""),
             "|---|---|---|---|---|" + ("---|---|" if with_policy else "")]
    lines += [f"| {r.get('epoch', '-')} | {r.get('stage', '-')} | {r.get('samples', 0):,} | "
              f"{_n(r.get('loss'))} | {_n(r.get('accuracy'))} |"
              + (f" {_n(r.get('policy_loss'))} | {_n(r.get('policy_acc'))} |" if with_policy else "")
              for r in validation]
    best = min((r for r in validation if r.get("loss") is not None), key=lambda r: r["loss"], default=None)
    if best:
        lines.append(f"\nBest validation loss {_n(best['loss'])} at {best.get('samples', 0):,} samples.")
    last = validation[-1].get("accuracy")
    if isinstance(last, (int, float)) and last <= scoring.CHANCE_ACCURACY:
        lines.append(f"\n> **WARNING**: the model is at chance (last validation accuracy {last:.3f}, a coin "
                     "is 0.5): it has learned nothing yet, and its curves and evaluations show noise.")
    return lines


def _eval_lines(split: str, result: dict[str, Any], labels: Sequence[str] = ()) -> list[str]:
    """One evaluated split's section: its warnings, the predictors' table, the engine line and paired
    comparisons, and the per-tower table."""
    intervals = " (95% interval over games)" if result.get("intervals") else ""
    lines = ["", f"## Evaluation: {split}", "", *(f"> **WARNING**: {line}\n" for line in labels),
             (f"{result.get('positions', 0):,} positions ({_n(result.get('decisive'), ',')} decisive, "
              f"{_n(result.get('draws', {}).get('positions'), ',')} draws); accuracy over decisive "
              "positions."), *_data_lines(result), "",
             f"| predictor | loss{intervals} | accuracy{intervals} | Brier | ECE |", "|---|---|---|---|---|"]
    model = "model (mirror-averaged)" if result.get("mirror_average") else "model"
    for name, row in predictor_rows(result, model, REPORT_LABELS):
        lines.append(f"| {name} | {format_with_interval(row, 'loss')} | "
                     f"{format_with_interval(row, 'accuracy')} | {_n(row.get('brier'))} | "
                     f"{_n(row.get('ece'))} |")
    extra = _engine_line(result) + comparison_lines(result)
    if "policy" in result:          # a model with a policy head: top-1/top-5 over the legal moves
        extra.append(scoring.policy_text(result["policy"]) + " (over the legal moves)")
    if extra:
        lines += [""] + [f"- {line}" for line in extra]
    return lines + _eval_tower_lines(result)


def _data_lines(result: dict[str, Any]) -> list[str]:
    """Scored on data other than the run's own: the line naming it (eval_rows.data_line)."""
    status = (result.get("data_check") or {}).get("status")
    return ["", f"Scored on {data_line(result)[len('data '):]}."] if status in OTHER_DATA else []


def _engine_line(result: dict[str, Any]) -> list[str]:
    """One line on the engine baseline's scale and coverage, or none without engine evaluations."""
    engine = result.get("baselines", {}).get("engine")
    if not engine or "evaluated" not in engine:
        return []
    evaluated = engine["evaluated"]
    fit = engine.get("fit")
    how = ("fitted on the training split" if fit is None else
           f"fitted on the training split: {fit}" if engine.get("fit_used") else
           f"the default: too few games in the training split for its fit, {fit}")
    return [(f"engine: sigmoid(eval / a), a = {engine.get('scale', 0):.0f} cp/logit {how}; evaluations on "
             f"{engine.get('coverage', 0):.1%} of these positions "
             f"({evaluated.get('positions', 0):,} positions, {evaluated.get('games', '?')} games: the "
             "evaluated rows), p = 0.5 elsewhere")]


def _eval_tower_lines(result: dict[str, Any]) -> list[str]:
    """An evaluation's per-tower table and the spread between towers, named by the kind of device that
    evaluate ran on; none for an evaluation without per-tower numbers."""
    towers = result.get("per_gpu", [])
    if not towers:
        return []
    kind = device_kind([t.get("device", i) for i, t in enumerate(towers)])
    spread = result.get("per_gpu_spread", {})
    lines = ["", f"| {_index_header(kind)} | positions | loss | accuracy |", "|---|---|---|---|"]
    lines += [f"| `{device_label(t.get('device', i))}` | {_n(t.get('positions'), ',')} | "
              f"{_n(t.get('loss'))} | {_n(t.get('accuracy'))} |" for i, t in enumerate(towers)]
    lines.append(f"\nSpread between {'towers' if kind == 'device' else kind + 's'}: loss "
                 f"{_n(spread.get('loss'))}, accuracy {_n(spread.get('accuracy'))}.")
    return lines
