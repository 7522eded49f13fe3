"""What a picture must say first (analysis/predict.caveats, report.md): a model at chance, the packaged
network's one engine, a handicap game."""

from __future__ import annotations

import json
from pathlib import Path

from shogi_dnn.analysis import predict, report
from shogi_dnn.folders import run_files
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner


def _record(start: str = STANDARD_START_SFEN, handicap: str = "") -> GameRecord:
    return GameRecord(start, ("7g7f",), Winner.BLACK, Ending.RESIGN, SourceLine("x", 1), "csa",
                      handicap=handicap)


def _run(tmp_path: Path, accuracies: list[float]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"kind": "validation", "step": i, "samples": i, "loss": 0.69, "accuracy": a}) + "\n"
        for i, a in enumerate(accuracies)))
    return run


def test_a_model_at_chance_is_said_so(tmp_path: Path) -> None:
    chance = _run(tmp_path, [0.55, 0.49])
    notes = predict.caveats(_record(), chance)
    assert notes == ["the model is at chance (validation accuracy 0.490): this curve is noise"]
    lines = report._validation_lines(run_files.read_metrics(chance))
    assert any("WARNING**: the model is at chance (last validation accuracy 0.490" in line for line in lines)


def test_a_model_that_learned_says_nothing(tmp_path: Path) -> None:
    learned = _run(tmp_path, [0.49, 0.68])
    assert predict.caveats(_record(), learned) == []
    assert not any("WARNING" in line for line in report._validation_lines(run_files.read_metrics(learned)))


def test_the_packaged_network_and_a_handicap_game() -> None:
    two_piece = "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"
    notes = predict.caveats(_record(two_piece, "二枚落ち"), None, "one engine's self-play")
    assert notes == ["trained on one engine's self-play only", "a handicap game (二枚落ち)"]
    assert predict.caveats(_record(two_piece), None) == ["not from the standard start position"]
