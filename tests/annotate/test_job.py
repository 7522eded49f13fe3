"""run_annotate against the fake engine: the labels, determinism over worker counts, a crash or a hang
costs one position, resume after SIGTERM and SIGKILL, and the output read by the existing readers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn import cli
from shogi_dnn.analysis import inspect
from shogi_dnn.annotate.job import run_annotate
from shogi_dnn.annotate.output import CHUNKS_DIR
from shogi_dnn.annotate.plan import AnnotateSettings, draw_off_path
from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import features, identity, shards
from shogi_dnn.errors import ConfigError, ShardFormatError
from shogi_dnn.rules import new_position
from tests.annotate import fake_usi
from tests.support.kifugen import write_corpus

ROOT = Path(__file__).resolve().parents[2]
KEYS = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_TURN, shards.KEY_PLY, shards.KEY_MOVE, shards.KEY_WIN,
        shards.KEY_GAME, shards.KEY_EVAL)


def _sfens(rows: dict[str, np.ndarray]) -> list[str]:
    return [features.decode_position(rows[shards.KEY_BOARD][i], rows[shards.KEY_HANDS][i],
                                     int(rows[shards.KEY_TURN][i]), int(rows[shards.KEY_PLY][i]))
            for i in range(len(rows[shards.KEY_WIN]))]


def _shard_rows(data: Path, name: str) -> dict[str, np.ndarray]:
    return shards.read_positions(data / name, keys=KEYS).arrays


def _digests(out: Path) -> dict[str, str]:
    return {s.path: s.sha256 for s in shards.read_manifest(out).shards}


def test_evaluations_and_off_path_positions(source: Path, fake_engine, tmp_path: Path) -> None:
    settings = AnnotateSettings(nodes=50, off_path=40, plies=2, seed=5, chunk_positions=64)
    report = run_annotate(source, tmp_path / "out", settings, engine=fake_engine(moves=True), workers=2)
    out, manifest = tmp_path / "out", shards.read_manifest(tmp_path / "out")
    src = shards.read_manifest(source)
    for info in src.shards:                           # every split: the same rows, evals filled
        before, after = _shard_rows(source, info.path), _shard_rows(out, info.path)
        for key in KEYS[:-1]:
            np.testing.assert_array_equal(before[key], after[key])
        assert after[shards.KEY_EVAL].tolist() == [fake_usi.score_of(s) for s in _sfens(before)]
        assert shards.read_games(out / info.path)["game_id"].tolist() == \
            shards.read_games(source / info.path)["game_id"].tolist()
    off = manifest.split("train")[-1]
    assert off.path == "offpath-00000.h5" and off.no_result == off.positions == 40 == report.off_path
    rows = _shard_rows(out, off.path)
    assert np.isnan(rows[shards.KEY_WIN]).all()
    train_games = {}
    for info in src.split("train"):
        table = shards.read_games(source / info.path)
        train_games.update({int(g): info for g in table["game_id"]})
    for sfen, turn, move, value, game in zip(_sfens(rows), rows[shards.KEY_TURN], rows[shards.KEY_MOVE],
                                             rows[shards.KEY_EVAL], rows[shards.KEY_GAME]):
        assert value == fake_usi.score_of(sfen)
        assert features.decode_move(int(move), int(turn)) == fake_usi.move_of(sfen)
        assert fake_usi.move_of(sfen) in new_position(sfen).legal_usi()
        assert int(game) in train_games                  # never a validation or test game
    table = shards.read_games(out / off.path)
    assert set(table["game_id"].tolist()) == set(rows[shards.KEY_GAME].tolist())
    record = manifest.settings["annotate"]
    assert record["nodes"] == 50 and record["seed"] == 5 and record["engine_name"] == "FakeUSI 1"
    assert record["source"]["manifest"] == identity.manifest_digest(src)
    assert manifest.totals["annotate"]["off_path"] == 40
    assert not (out / CHUNKS_DIR).exists()


def test_a_datasets_compression_is_kept(fake_engine, tmp_path: Path) -> None:
    """Shards rewritten with evaluations and the off-path shards take the source's --compression."""
    write_corpus(tmp_path / "records", seed=3, files=1, per_file=3)
    run_convert([tmp_path / "records"], tmp_path / "lzf", ConvertSettings(val_fraction=0.0, compression="lzf"),
                workers=1)
    settings = AnnotateSettings(nodes=50, off_path=8, plies=2, seed=5, chunk_positions=64)
    run_annotate(tmp_path / "lzf", tmp_path / "out", settings, engine=fake_engine(), workers=1)
    manifest = shards.read_manifest(tmp_path / "out")
    assert manifest.compression == "lzf" and manifest.split("train")[-1].no_result == 8
    for info in manifest.shards:
        with shards.open_shard(manifest.shard_path(info)) as f:
            assert shards.shard_compression(f) == "lzf" and shards.KEY_EVAL in f


def test_the_off_path_positions_leave_their_game_by_the_plies(source: Path, fake_engine,
                                                              tmp_path: Path) -> None:
    settings = AnnotateSettings(evals=False, off_path=30, plies=1, seed=2)
    run_annotate(source, tmp_path / "out", settings, engine=fake_engine(moves=True))
    src = shards.read_manifest(source)
    starts = draw_off_path(sum(s.positions for s in src.split("train")), 30, 2)
    train = [_shard_rows(source, s.path) for s in src.split("train")]
    joined = {k: np.concatenate([t[k] for t in train]) for k in KEYS if k != shards.KEY_EVAL}
    rows = _shard_rows(tmp_path / "out", "offpath-00000.h5")
    np.testing.assert_array_equal(rows[shards.KEY_GAME], joined[shards.KEY_GAME][starts])
    np.testing.assert_array_equal(rows[shards.KEY_PLY], joined[shards.KEY_PLY][starts] + 1)
    for before, after in zip([_sfens({k: v[starts] for k, v in joined.items()})][0], _sfens(rows)):
        position = new_position(before)
        assert any(_after(position, m) == fake_usi.position_key(after) for m in position.legal_usi())
    for info in src.shards:                       # --no-evals: the shards copied as they are
        assert (tmp_path / "out" / info.path).read_bytes() == (source / info.path).read_bytes()


def _after(position, move: str) -> str:
    child = position.copy()
    child.push_usi(move)
    return fake_usi.position_key(child.sfen())


def test_the_output_does_not_depend_on_the_worker_count(source: Path, fake_engine, tmp_path: Path) -> None:
    settings = AnnotateSettings(off_path=25, plies=2, seed=9, chunk_positions=100, shard_size=10)
    engine = fake_engine(moves=True)
    run_annotate(source, tmp_path / "one", settings, engine=engine, workers=1)
    run_annotate(source, tmp_path / "three", settings, engine=engine, workers=3)
    assert _digests(tmp_path / "one") == _digests(tmp_path / "three")
    assert len([p for p in _digests(tmp_path / "one") if p.startswith("offpath-")]) == 3


@pytest.mark.parametrize("kind", ["crash", "hang", "garbage"])
def test_a_crash_a_hang_or_a_garbage_score_costs_one_position(source: Path, fake_engine, tmp_path: Path, kind: str) -> None:
    """A crash, a hang or a garbage score (`score cp -1e5`) leaves that position unlabelled, counted."""
    info = shards.read_manifest(source).split("train")[0]
    sfens = _sfens(_shard_rows(source, info.path))
    victim = fake_usi.position_key(sfens[30])
    lost = sum(fake_usi.position_key(s) == victim for s in sfens)
    settings = AnnotateSettings(timeout=1.0, chunk_positions=128)
    report = run_annotate(source, tmp_path / "out", settings, engine=fake_engine(**{kind: [victim]}))
    evals = _shard_rows(tmp_path / "out", info.path)[shards.KEY_EVAL]
    missing = [i for i, value in enumerate(evals) if value == features.EVAL_NONE]
    assert missing == [i for i, s in enumerate(sfens) if fake_usi.position_key(s) == victim]
    counted = {"crash": "crash", "hang": "timeout", "garbage": "no_score"}[kind]
    assert report.counts[counted] == lost == report.failed
    total = sum(s.positions for s in shards.read_manifest(source).shards)
    assert sum(report.evaluated.values()) == total - lost


def test_overwrite_refuses_a_folder_with_a_foreign_manifest(source: Path, fake_engine, tmp_path: Path) -> None:
    out = tmp_path / "theirs"
    out.mkdir()
    (out / shards.MANIFEST_NAME).write_text('{"name": "my photos"}')
    (out / "train-00000.h5").write_bytes(b"someone's file")
    with pytest.raises(ConfigError, match="manifest.json is not a shogi-dnn dataset's"):
        run_annotate(source, out, AnnotateSettings(), engine=fake_engine(), overwrite=True)
    assert (out / "train-00000.h5").read_bytes() == b"someone's file"


def test_only_missing_evaluations_are_searched(source: Path, fake_engine, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    infos = []
    for info in shards.read_manifest(source).shards:       # a source whose even rows have evaluations
        rows = _shard_rows(source, info.path)
        rows[shards.KEY_EVAL][::2] = 77
        games = shards.read_games(source / info.path)
        digest = shards.write_shard(src / info.path, info.split, rows, games, chunk_rows=64)
        infos.append(shards.shard_info(src / info.path, info.split, info.positions, info.games, digest,
                                       games["game_id"]))
    shards.write_manifest(src, infos, {}, {})
    run_annotate(src, tmp_path / "out", AnnotateSettings(), engine=fake_engine())
    rows = _shard_rows(tmp_path / "out", infos[0].path)
    sfens = _sfens(rows)
    assert rows[shards.KEY_EVAL][::2].tolist() == [77] * len(sfens[::2])
    assert rows[shards.KEY_EVAL][1::2].tolist() == [fake_usi.score_of(s) for s in sfens[1::2]]


def _command(source: Path, out: Path, engine: str) -> list[str]:
    """Off-path positions only (each chunk starts an engine: few chunks keep the test short)."""
    return [sys.executable, "-m", "shogi_dnn", "annotate", str(source), "--out", str(out), "--engine", engine,
            "--no-evals", "--off-path", "48", "--plies", "2", "--chunk-size", "6", "--shard-size", "20",
            "--no-progress"]


def _stop_after(command: list[str], out: Path, chunks: int, signum: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(list((out / CHUNKS_DIR).glob("*.npz"))) < chunks and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signum)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


@pytest.mark.slow            # spawns annotate three times (about 10 s on a loaded machine)
def test_resume_after_sigterm_and_sigkill_gives_the_uninterrupted_output(source: Path, fake_engine,
                                                                          tmp_path: Path) -> None:
    engine = fake_engine(moves=True, delay=0.01)
    out = tmp_path / "out"
    command = _command(source, out, engine)
    stopped = _stop_after(command, out, 2, signal.SIGTERM)
    assert stopped.returncode == 130, stopped.stderr
    assert "rerun the same command to continue" in stopped.stderr
    killed = _stop_after(command, out, 4, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert not (out / shards.MANIFEST_NAME).exists()
    assert cli.main(command[3:]) == 0
    state = json.loads((out / "annotate-state.json").read_text())
    assert state["complete"]
    reference = tmp_path / "reference"
    run_annotate(source, reference, AnnotateSettings(evals=False, off_path=48, plies=2, chunk_positions=6,
                                                     shard_size=20), engine=engine, workers=2)
    assert _digests(out) == _digests(reference)
    assert json.loads((out / "annotate-report.json").read_text())["chunks_resumed"] >= 4


def test_the_output_is_read_by_inspect_and_refused_by_result_readers(source: Path, fake_engine,
                                                                     tmp_path: Path, capsys) -> None:
    run_annotate(source, tmp_path / "out", AnnotateSettings(off_path=20), engine=fake_engine(moves=True))
    summary = inspect.summary_dict(inspect.summarize(inspect.resolve(tmp_path / "out")))
    before = inspect.summary_dict(inspect.summarize(inspect.resolve(source)))
    assert summary["positions_without_result"] == summary["splits"]["train"]["positions_without_result"] == 20
    assert summary["games"] == before["games"]                # the off-path shard's games are not new games
    assert summary["positions_with_eval"] == summary["positions"] == before["positions"] + 20
    assert cli.main(["inspect", str(tmp_path / "out")]) == 0
    assert "positions without a game result (annotate's off-path positions): 20" in capsys.readouterr().out
    lines = list(inspect.iter_sfen_lines(inspect.resolve(tmp_path / "out" / "offpath-00000.h5")))
    assert len(lines) == 20 and all(line.split("\t")[1] == inspect.NO_LABEL for line in lines)
    manifest = shards.read_manifest(tmp_path / "out")
    with pytest.raises(ShardFormatError, match="without a game result"):
        shards.verify_shards(manifest, manifest.split("train"))
    shards.verify_shards(manifest, manifest.split("train"), allow_no_result=True)
    shards.verify_shards(manifest, manifest.split("validation"))
    assert "no_result" not in json.loads((source / shards.MANIFEST_NAME).read_text())["shards"][0]


def test_bad_inputs_are_one_line_errors(source: Path, fake_engine, tmp_path: Path, capsys) -> None:
    engine = fake_engine()
    out = ["--out", str(tmp_path / "o")]
    cases = [([str(tmp_path / "none"), *out, "--engine", engine], "no manifest"),
             ([str(source), *out, "--engine", "no-such-engine"], "not found"),
             ([str(source), *out, "--engine", engine, "--nodes", "0"], "--nodes"),
             ([str(source), *out, "--engine", engine, "--option", "Hash"], "NAME=VALUE"),
             ([str(source), "--out", str(source), "--engine", engine], "must not be the source")]
    for argv, words in cases:
        assert cli.main(["annotate", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        run_annotate(source, tmp_path / "busy", AnnotateSettings(), engine=engine)


def test_the_source_is_held_as_a_read_dataset(source: Path, fake_engine, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """annotate is one of its source's readers: a writer of the source (convert --overwrite) is refused
    while it runs, and annotate is refused while a writer holds the source."""
    from shogi_dnn.annotate import job
    from shogi_dnn.folders import locks

    seen: list[str] = []

    def label_all(*args: object, **kwargs: object) -> None:
        with pytest.raises(locks.LockedError, match="being read by annotate") as refused:
            locks.replace_dataset(source, "convert").release()
        seen.append(str(refused.value))
        raise KeyboardInterrupt     # enough: the lock was held while labelling

    monkeypatch.setattr(job, "_label_all", label_all)
    with pytest.raises(KeyboardInterrupt):
        run_annotate(source, tmp_path / "out", AnnotateSettings(), engine=fake_engine())
    assert len(seen) == 1 and f"pid {os.getpid()}" in seen[0]
    monkeypatch.undo()
    with locks.replace_dataset(source, "convert"), pytest.raises(locks.LockedError, match="being written"):
        run_annotate(source, tmp_path / "out2", AnnotateSettings(), engine=fake_engine())
    run_annotate(source, tmp_path / "out3", AnnotateSettings(), engine=fake_engine())   # released: runs


@pytest.mark.skipif(not shutil.which("fairy-stockfish") and not Path("/usr/games/fairy-stockfish").is_file(),
                    reason="fairy-stockfish is not installed (apt-get install fairy-stockfish)")
def test_fairy_stockfish_labels_a_few_positions(source: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"                  # the first 40 positions of one training shard
    src.mkdir()
    info = shards.read_manifest(source).split("train")[0]
    rows = {k: v[:40] for k, v in _shard_rows(source, info.path).items()}
    games = shards.read_games(source / info.path)
    keep = np.isin(games["game_id"], rows[shards.KEY_GAME])
    games = {k: v[keep] for k, v in games.items()}
    digest = shards.write_shard(src / info.path, "train", rows, games)
    shards.write_manifest(src, [shards.shard_info(src / info.path, "train", 40, int(keep.sum()), digest,
                                                  games["game_id"])], {}, {})
    settings = AnnotateSettings(nodes=300, off_path=10, chunk_positions=25)
    report = run_annotate(src, tmp_path / "out", settings, workers=2)
    assert report.failed == 0 and report.engine_name.startswith("Fairy-Stockfish")
    evals = _shard_rows(tmp_path / "out", info.path)[shards.KEY_EVAL]
    assert (evals != features.EVAL_NONE).all() and (np.abs(evals) < 3000).mean() > 0.9
    off = _shard_rows(tmp_path / "out", "offpath-00000.h5")
    assert len(off[shards.KEY_WIN]) == 10 and (off[shards.KEY_EVAL] != features.EVAL_NONE).all()
    for sfen, move, turn in zip(_sfens(off), off[shards.KEY_MOVE], off[shards.KEY_TURN]):
        if move != features.MOVE_NONE:         # an illegal best move (uchifuzume) is left out
            assert features.decode_move(int(move), int(turn)) in new_position(sfen).legal_usi()
    again = run_annotate(src, tmp_path / "again", settings, workers=1)      # deterministic at a node budget
    assert _digests(tmp_path / "out") == _digests(tmp_path / "again") and again.failed == 0


def test_file_name_bytes_follow_the_games_into_the_output(fake_engine, tmp_path: Path) -> None:
    """A source converted from a file named in cp932: games/source_raw is kept in the copied shards and
    given to the off-path shard's games (shards.OPTIONAL_GAME_SCHEMA)."""
    from shogi_dnn.convert.run import ConvertSettings, run_convert
    from tests.support.kifugen import write_corpus

    write_corpus(tmp_path / "records", seed=4, files=2, per_file=3)
    raw = os.fsencode(tmp_path / "records") + b"/" + "棋譜.csa".encode("cp932")
    os.rename(tmp_path / "records" / "games-00.csa", raw)
    run_convert([tmp_path / "records"], tmp_path / "data", ConvertSettings(val_fraction=0.0), workers=1)
    source_table = shards.read_games(tmp_path / "data" / "train-00000.h5")
    raw_of = dict(zip(source_table["game_id"].tolist(), source_table[shards.KEY_SOURCE_RAW]))
    assert sorted(set(raw_of.values())) == ["", raw.hex()]
    settings = AnnotateSettings(nodes=10, off_path=30, plies=1, seed=2, chunk_positions=64)
    run_annotate(tmp_path / "data", tmp_path / "out", settings, engine=fake_engine(moves=True), workers=1)
    copied = shards.read_games(tmp_path / "out" / "train-00000.h5")
    assert list(copied[shards.KEY_SOURCE_RAW]) == list(source_table[shards.KEY_SOURCE_RAW])
    off = shards.read_games(tmp_path / "out" / "offpath-00000.h5")
    assert [raw_of[int(g)] for g in off["game_id"]] == list(off[shards.KEY_SOURCE_RAW])
    assert set(off[shards.KEY_SOURCE_RAW]) == {"", raw.hex()}       # games of both files
