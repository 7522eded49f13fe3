"""The rows both evaluation tables show, report.md's and `report --summary`'s (no TensorFlow): the model
and each baseline of an eval-<split>.json, numbers with their interval over games, the paired
comparisons of the model with each baseline, and the line naming the scored data (evaluate's table too)."""

from __future__ import annotations

import math
from typing import Any

from shogi_dnn.analysis import scoring

# (label in report.md, label in --summary, key of eval-<split>.json "baselines"); "engine" also has its
# evaluated-positions rows. Files written before a baseline existed simply lack its row.
BASELINE_ROWS = (("material baseline", "material", "material"),
                 ("piece-square baseline", "piece-square", "piece_square"),
                 ("side-to-move baseline", "side to move", "side_to_move"),
                 ("engine baseline", "engine", "engine"))
COMPARISON_LABELS = {"material": "material", "piece_square": "piece-square", "side_to_move": "side to move",
                     "engine": "engine", "engine_evaluated": "engine on evaluated positions"}
REPORT_LABELS, SUMMARY_LABELS = 0, 1      # which label of BASELINE_ROWS a table uses
OTHER_DATA = ("foreign", "overlap", "changed")     # data_check statuses of data other than the run's own


def format_number(value: Any, fmt: str = ".4f") -> str:
    """`value` formatted with `fmt`, or scoring.UNDEFINED for a missing or non-finite one."""
    missing = value is None or (isinstance(value, float) and not math.isfinite(value))
    return scoring.UNDEFINED if missing else format(value, fmt)


def format_with_interval(row: dict[str, Any], metric: str) -> str:
    """'0.6600' or, when the row has its bootstrap interval, '0.6600 (0.6400..0.6800)'."""
    pair = (row.get("intervals") or {}).get(metric)
    text = format_number(row.get(metric))
    return f"{text} ({pair[0]:.4f}..{pair[1]:.4f})" if pair and text != scoring.UNDEFINED else text


def predictor_rows(result: dict[str, Any], model: str, labels: int) -> list[tuple[str, dict[str, Any]]]:
    """(label, row) of the model and every baseline present; with the engine, the evaluated-only rows.

    Args:
        result: the content of an eval-<split>.json.
        model: the model's label.
        labels: REPORT_LABELS for report.md's labels, SUMMARY_LABELS for --summary's.
    """
    b = result.get("baselines", {})
    rows = [(model, result)] + [(names[labels], b[key]) for *names, key in BASELINE_ROWS if b.get(key)]
    evaluated = (b.get("engine") or {}).get("evaluated") or {}
    if evaluated.get("model") and evaluated.get("engine"):
        rows += [(f"{model}, evaluated positions" if labels == REPORT_LABELS else "model, evaluated",
                  evaluated["model"]),
                 (("engine baseline, evaluated positions", "engine, evaluated")[labels], evaluated["engine"])]
    return rows


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """One line per paired comparison of the model with a baseline (scoring.comparison_text), then what
    the intervals are; empty for a file written before the intervals."""
    boot = result.get("bootstrap")
    comparisons = result.get("comparisons")
    if not boot or not comparisons:
        return []
    level = boot.get("level", scoring.BOOTSTRAP_LEVEL)
    lines = [scoring.comparison_text(COMPARISON_LABELS.get(k, k), c, level) for k, c in comparisons.items()]
    lines.append(f"({level:.0%} intervals: bootstrap over {format_number(boot.get('games'), ',')} games, "
                 f"{boot.get('resamples', '?')} resamples; not resolved: the interval contains 0)")
    return lines


def data_line(result: dict[str, Any]) -> str:
    """'data DIR (another dataset: none of its 185 games is one the run trained on)': the scored dataset and
    how it relates to the games the run trained on (its "data_check", data_check.check_data)."""
    check = result.get("data_check") or {}
    games = {k: f"{v:,}" if isinstance(v, int) else "?" for k, v in (check.get("games") or {}).items()}
    scored, trained = games.get("games", "?"), games.get("trained_games", "?")
    say = {"same": "the run's own data",
           "foreign": f"another dataset: none of its {scored} games is one the run trained on",
           "overlap": f"the run trained on {trained} of its {scored} games: labelled",
           "changed": "other data than the run's: labelled"}.get(str(check.get("status")))
    return f"data {result.get('data_dir', '?')}" + (f" ({say})" if say else "")

