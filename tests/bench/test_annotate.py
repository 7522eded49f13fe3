"""`shogi-dnn bench annotate`: the summary's medians and ratios, and one round end to end on the fake engine."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from shogi_dnn.bench import annotate as bench
from shogi_dnn.bench.annotate import Measurement
from shogi_dnn.convert.run import ConvertSettings, run_convert
from tests.annotate import fake_usi
from tests.support.kifugen import write_corpus


def test_summary_takes_each_cases_median_and_its_ratio_to_the_engine_alone() -> None:
    measurements = [Measurement(bench.ENGINE_ALONE, 1, 100, 1.0), Measurement(bench.ANNOTATE, 1, 100, 4.0),
                    Measurement(bench.ANNOTATE, 2, 100, 2.0), Measurement(bench.ENGINE_ALONE, 2, 100, 1.0),
                    Measurement(bench.ANNOTATE, 3, 100, 3.0), Measurement(bench.ENGINE_ALONE, 3, 100, 2.0)]
    rows = bench.summarize(measurements)
    assert [row.case for row in rows] == [bench.ANNOTATE, bench.ENGINE_ALONE]     # CASES order
    annotate, alone = rows
    assert (annotate.rounds, annotate.cpu_s, annotate.positions_per_cpu_s) == (3, 3.0, pytest.approx(100 / 3))
    assert (alone.cpu_s, alone.positions_per_cpu_s, alone.ratio) == (1.0, 100.0, 1.0)
    assert annotate.ratio == pytest.approx(1 / 3)
    table = bench.format_table(rows).splitlines()
    assert table[0].split() == ["case", "rounds", "CPU-s", "positions/CPU-s", "vs", "engine_alone"]
    assert table[1].split() == ["annotate", "3", "3.00", "33.3", "0.33"]
    assert table[2].split() == ["engine_alone", "3", "1.00", "100.0", "1.00"]


def test_per_position_splits_annotates_cpu_between_search_usinewgame_and_the_rest() -> None:
    rows = bench.summarize([Measurement(bench.ANNOTATE, 1, 1000, 8.0), Measurement(bench.ENGINE_NEWGAME, 1, 1000, 6.5),
                            Measurement(bench.ENGINE_ALONE, 1, 1000, 2.5)])
    assert bench.per_position(rows) == ("ms_per_position: search=2.50 usinewgame=4.00 annotate_rest=1.50 "
                                        "annotate=8.00")
    assert bench.per_position(rows[:2]) == ""


def test_summary_without_the_engine_alone_has_no_ratio() -> None:
    (row,) = bench.summarize([Measurement(bench.ANNOTATE, 1, 10, 2.0)])
    assert row.positions_per_cpu_s == 5.0 and math.isnan(row.ratio)


def test_one_round_on_the_fake_engine(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_corpus(tmp_path / "records", seed=5, files=1, per_file=2)
    run_convert([tmp_path / "records"], tmp_path / "data", ConvertSettings(val_fraction=0.5), workers=1)
    engine = fake_usi.write_engine(tmp_path / "engine")
    assert bench.main([str(tmp_path / "data"), "--engine", engine, "--repeats", "1", "--nodes", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rounds = [dict(item.split("=") for item in line.split()) for line in lines[:3]]
    assert [r["case"] for r in rounds] == list(bench.CASES)
    assert len({r["positions"] for r in rounds}) == 1 and int(rounds[0]["positions"]) > 0
    assert all(float(r["cpu_s"]) > 0 for r in rounds)
    assert [line.split()[0] for line in lines[4:7]] == list(bench.CASES)
    assert lines[7].startswith("ms_per_position: search=")
    assert lines[8].startswith(f"nodes=10 workers=1 positions={rounds[0]['positions']} load_avg_1min=")
