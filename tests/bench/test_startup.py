"""`shogi-dnn bench startup`: the refusals are timed, and each says TensorFlow stayed unloaded."""

from __future__ import annotations

import pytest

from shogi_dnn.bench import startup


def test_bench_startup_times_the_refusals_without_tensorflow(capsys: pytest.CaptureFixture) -> None:
    assert startup.main(["--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["case=missing_data", "case=finished_run",
                                                 "case=evaluate_missing_data"]
    for line in lines:
        fields = dict(item.split("=", 1) for item in line.split(" message=")[0].split())
        assert fields["rc"] == "2" and fields["tensorflow_loaded"] == "False", line
        assert float(fields["wall_s"]) > 0 and float(fields["cpu_s"]) > 0
    assert "no manifest" in lines[0] and "already has checkpoints (latest ckpt-00000008)" in lines[1]
    assert "shogi-dnn evaluate: error: " in lines[2] and "no manifest" in lines[2]


def test_bench_startup_wants_data_and_run_dir_together() -> None:
    with pytest.raises(SystemExit):
        startup.main(["--data", "somewhere"])


def test_bench_startup_help_says_its_whole_first_paragraph(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        startup.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "so a refusal should take about a second, not a TensorFlow start-up)." in text, text
