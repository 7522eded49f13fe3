"""The one comparison table of `shogi-dnn report --summary` (the end of `make demo`; no TensorFlow): the
model against the baselines on one evaluated split, then the paired comparisons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shogi_dnn.analysis import scoring
from shogi_dnn.analysis.eval_rows import (
    OTHER_DATA,
    SUMMARY_LABELS,
    comparison_lines,
    data_line,
    format_number,
    format_with_interval,
    predictor_rows,
)
from shogi_dnn.analysis.report_checks import check_evals
from shogi_dnn.dataset import shards
from shogi_dnn.errors import RunError, ShogiDnnError
from shogi_dnn.folders import run_files

COLUMNS = ("predictor", "accuracy", "log loss", "ECE", "positions", "games")


def summary_table(run_dir: str | Path, split: str = "validation", allow_changed_data: bool = False) -> str:
    """Model vs the baselines on one evaluated split: accuracy, log loss (with intervals when present), ECE,
    positions, games, then one line per paired comparison.

    Raises:
        RunError: the split was not evaluated, or its data changed without allow_changed_data.
    """
    run_dir = Path(run_dir)
    path = run_files.eval_path(run_dir, split)
    if not path.is_file():
        others = sorted(p.name for p in run_dir.glob(f"{path.stem}{run_files.EVAL_OTHER_DATA}*.json"))
        elsewhere = (f" (--summary shows the run's own dataset; other datasets' {split} evaluations are in "
                     f"{', '.join(others)})" if others else "")
        raise RunError(f"{path}: not found: run `shogi-dnn evaluate --run-dir {run_dir} --split {split}` "
                       f"first{elsewhere}")
    result = json.loads(path.read_text(encoding="utf-8"))
    labels = check_evals(run_dir, {split: result}, allow_changed_data, say_unknown=False)[split]
    intervals = "; in brackets the 95% interval over games" if result.get("intervals") else ""
    lines = [f"WARNING: {line}" for line in labels]
    lines += [(f"{split} split: model vs baselines (accuracy over decisive positions; lower log loss and ECE "
               f"are better{intervals})")]
    if (result.get("data_check") or {}).get("status") in OTHER_DATA:
        lines.append(data_line(result))
    lines += _aligned(_table(result, _games_text(run_dir, split, result)))
    if "policy" in result:          # a model with a policy head: top-1/top-5 over the legal moves
        lines.append(scoring.policy_text(result["policy"]) + " (over the legal moves)")
    return "\n".join(lines + _comparison_tail(result))


def _games_text(run_dir: Path, split: str, result: dict[str, Any]) -> str:
    """The split's games: recorded by evaluate, or for older files counted in the dataset's manifest now;
    '?' when the dataset moved."""
    games: Any = result.get("games")
    if not isinstance(games, int):
        games = "?"
        try:
            data_dir = result.get("data_dir") or run_files.read_run_json(run_dir)["data_dir"]
            manifest = shards.read_manifest(Path(data_dir))
            games = sum(s.games for s in (manifest.split(split) if split != "all" else manifest.shards))
        except (ShogiDnnError, OSError, KeyError):
            pass                                        # the dataset moved: games unknown, the rest stands
    return f"{games:,}" if isinstance(games, int) else games


def _table(result: dict[str, Any], games_text: str) -> list[list[str]]:
    """The header and one row of cells per predictor (predictor_rows with --summary's labels)."""
    table = [list(COLUMNS)]
    for name, row in predictor_rows(result, "model", SUMMARY_LABELS):
        row_games = row.get("games")
        table.append([name, format_with_interval(row, "accuracy"), format_with_interval(row, "loss"),
                      format_number(row.get("ece")), f"{row.get('positions', result.get('positions', 0)):,}",
                      f"{row_games:,}" if isinstance(row_games, int) else games_text])
    return table


def _aligned(table: list[list[str]]) -> list[str]:
    """The rows as lines of columns two spaces apart: the first column left-aligned, the others right."""
    widths = [max(len(r[c]) for r in table) for c in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                      for c, (cell, w) in enumerate(zip(r, widths))) for r in table]


def _comparison_tail(result: dict[str, Any]) -> list[str]:
    """The paired comparisons (comparison_lines), or for a file written before them one line of the
    model's difference from the material baseline; empty when neither can be said."""
    comparisons = comparison_lines(result)
    material = result.get("baselines", {}).get("material")
    if comparisons:
        return comparisons
    if material and result.get("accuracy") is not None and material.get("accuracy") is not None:
        d_acc, d_loss = result["accuracy"] - material["accuracy"], result["loss"] - material["loss"]
        ahead = d_acc > 0 and d_loss < 0
        return [(f"model {'ahead of' if ahead else 'NOT ahead of'} material: accuracy {d_acc:+.4f}, "
                 f"log loss {d_loss:+.4f}")]
    return []
