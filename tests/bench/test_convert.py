"""bench convert: one measurement per backend x worker count, in its own process, with JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.bench import convert as bench_convert
from shogi_dnn.dataset import shards
from shogi_dnn.rules import available_backends
from tests.support.kifugen import write_corpus


@pytest.mark.slow
def test_bench_convert_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    games = write_corpus(tmp_path / "corpus", seed=9, files=2, per_file=4)
    out = tmp_path / "bench.json"
    backends = ",".join(available_backends())
    code = cli.main(["bench", "convert", str(tmp_path / "corpus"), "--workers", "1,2,auto", "--backends", backends,
                     "--json", str(out)])
    assert code == 0
    results = json.loads(out.read_text())["results"]
    assert [(r["backend"], r["workers"]) for r in results] == [(b, w) for b in available_backends()
                                                               for w in (1, 2, "auto")]
    assert [r["plan"] for r in results[:3]] == ["in-process", "2 workers", "in-process"]   # a small corpus
    results = [r for r in results if r["workers"] != "auto"]
    positions = sum(len(g.moves) + 1 for g in games)
    for r in results:
        assert r["positions"] == positions and r["games"] == len(games) and r["files"] == 2
        assert r["positions_per_s"] > 0 and r["peak_rss_parent_mib"] > 10
        assert r["positions_per_s_per_worker"] == pytest.approx(r["positions_per_s"] / r["workers"], rel=0.01)
        assert r["parse_s"] > 0 and r["encode_s"] > 0 and r["write_s"] > 0
        assert r["cpu_s"] > 0 and r["positions_per_cpu_s"] == pytest.approx(positions / r["cpu_s"], rel=0.01)
    assert all(r["peak_rss_worker_mib"] > 10 for r in results if r["workers"] == 2)
    assert all(r["peak_rss_worker_mib"] == 0 for r in results if r["workers"] == 1)   # no workers
    assert "pos/s/worker" in capsys.readouterr().out


def test_bench_convert_bad_arguments(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["bench", "convert", "--backends", "gnugo"]) == 2
    err = capsys.readouterr().err
    assert "installed backends" in err and "Traceback" not in err


def test_default_corpus_is_the_bundled_archive() -> None:
    assert bench_convert.DEFAULT_CORPUS.name == "gnushogi.tar.xz" and bench_convert.DEFAULT_CORPUS.is_file()
    assert bench_convert.DEFAULT_CORPUS.parent.name == "datasets"


def test_a_missing_corpus_is_one_line_without_class_names(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    assert cli.main(["bench", "convert", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nowhere'}: no such file or folder" in err
    assert "shogi_dnn." not in err and "ConfigError" not in err and "Traceback" not in err


def test_a_failing_child_is_reported_without_class_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The --one child prints `shogi-dnn bench convert: error: ...`; an unexpected traceback's last line
    loses its class name too."""
    import subprocess

    def fake_run(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "Traceback...\nshogi_dnn.errors.ConfigError: x.csa: bad")
    monkeypatch.setattr(bench_convert.subprocess, "run", fake_run)
    with pytest.raises(bench_convert.ConfigError) as info:
        bench_convert._run_child(["x.csa"], "cshogi", 1, 100)
    assert str(info.value) == "bench convert (cshogi, 1 worker) failed: x.csa: bad"


@pytest.mark.slow          # 13 Python processes (each converter twice a round: the start-up run)
def test_bench_convert_peer_alternates_and_reports_the_ratio(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--peer: the built-in dlshogi-style peer and convert --workers 1 on the same CSA files, a row a run,
    in CPU seconds less a one-game run's; --copies."""
    pytest.importorskip("cshogi")
    games = write_corpus(tmp_path / "corpus", seed=5, files=2, per_file=3)
    out = tmp_path / "peer.json"
    assert cli.main(["bench", "convert", str(tmp_path / "corpus"), "--peer", "--repeats", "2", "--copies", "1",
                     "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["files"] == 2 and len(result["runs"]) == 2
    first = games[0]       # the start-up run: the corpus's first game alone, subtracted from each full run
    for run in result["runs"]:
        # the peer counts the position before each move (dlshogi); ours adds each game's final position
        assert run["peer"]["positions"] == sum(len(g.moves) for g in games) - len(first.moves)
        assert run["ours"]["positions"] == sum(len(g.moves) + 1 for g in games) - len(first.moves) - 1
        for side in ("peer", "ours"):
            net = run[side]
            assert net["startup_cpu_s"] > 0 and net["startup_wall_s"] > 0 and net["positions_per_s"] >= 0
            if net["cpu_s"] > 0:        # a tiny corpus: the difference is noise, maybe below zero
                assert net["positions_per_cpu_s"] == pytest.approx(net["positions"] / net["cpu_s"], rel=1e-3)
    rates = sorted(r["ours"]["positions_per_cpu_s"] for r in result["runs"])
    assert result["ours"]["min"] == rates[0] and result["ours"]["median"] == pytest.approx(sum(rates) / 2)
    peer_median = sum(r["peer"]["positions_per_cpu_s"] for r in result["runs"]) / 2
    if peer_median:
        assert result["ratio_of_medians"] == pytest.approx(result["ours"]["median"] / peer_median, abs=1e-3)
    assert result["ours_bytes_per_position"] > 0      # a tiny corpus: the games table and metadata weigh most
    output = capsys.readouterr().out
    assert "ours / peer in CPU time:" in output
    assert f"its shards {result['ours_bytes_per_position']:.2f} bytes a position" in output
    # --copies 3: both get the files three times; convert keeps every copy (--no-dedup)
    assert cli.main(["bench", "convert", str(tmp_path / "corpus"), "--peer", "--repeats", "1", "--copies", "3",
                     "--json", str(out)]) == 0
    tripled = json.loads(out.read_text())
    assert tripled["copies"] == 3 and tripled["files"] == 2
    assert tripled["runs"][0]["ours"]["positions"] == 3 * sum(len(g.moves) + 1 for g in games) - len(first.moves) - 1
    assert tripled["runs"][0]["peer"]["positions"] == 3 * sum(len(g.moves) for g in games) - len(first.moves)
    assert "each given 3 times (convert with --no-dedup)" in capsys.readouterr().out


def test_bench_convert_peer_that_fails_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("cshogi")
    write_corpus(tmp_path / "corpus", seed=5, files=1, per_file=1)
    broken = tmp_path / "broken_peer.py"
    broken.write_text("import sys\nsys.exit('cannot read the records')\n")
    assert cli.main(["bench", "convert", str(tmp_path / "corpus"), "--peer", "--repeats", "1",
                     "--peer-script", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "the peer failed: cannot read the records" in err and "Traceback" not in err


def test_compression_reaches_convert(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--compression: the `convert --workers 1` of --peer and the --one children run with it."""
    import subprocess
    commands = []

    def fake_usage(cmd):
        commands.append(cmd)
        data = Path(cmd[cmd.index("--out") + 1])
        data.mkdir(parents=True)
        (data / "convert-report.json").write_text(json.dumps({"positions": {"train": 7}}))
        shards.write_manifest(data, [shards.ShardInfo("train-00000.h5", "train", 7, 1, "", 91)], {}, {})
        return subprocess.CompletedProcess(cmd, 0, "", ""), 1.0, 1.0
    monkeypatch.setattr(bench_convert, "_child_usage", fake_usage)
    assert bench_convert._run_convert(["a.csa"], 100, dedup=False, compression="lzf") == {
        "positions": 7, "cpu_s": 1.0, "wall_s": 1.0, "shard_bytes": 91}
    assert bench_convert._run_convert(["a.csa"], 100)["positions"] == 7
    assert commands[0][commands[0].index("--compression") + 1] == "lzf" and "--no-dedup" in commands[0]
    assert commands[1][commands[1].index("--compression") + 1] == "zstd"

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, '{"positions": 1}\n', "")
    monkeypatch.setattr(bench_convert.subprocess, "run", fake_run)
    assert bench_convert._run_child(["x.csa"], "cshogi", 1, 100, "none") == {"positions": 1}
    assert commands[-1][commands[-1].index("--compression") + 1] == "none"
    assert bench_convert.build_parser().parse_args([]).compression == "zstd"
    assert bench_convert.build_parser().parse_args(["--compression", "gzip"]).compression == "gzip"
