"""inspect: summary counts, --sfen dump (real un-rotated positions, labels), single shard, errors."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.analysis import inspect
from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import encode_game
from shogi_dnn.kifu.record import STANDARD_START_SFEN, GameRecord, Winner
from shogi_dnn.rules import ShogiPosition
from tests.support.kifugen import HANDICAP_SFEN, write_corpus
from tests.support.paths import DATA

SETTINGS = ConvertSettings(val_fraction=0.3, test_fraction=0.2, shard_size=200)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[GameRecord]]:
    root = tmp_path_factory.mktemp("records")
    games = write_corpus(root, seed=5, files=3, per_file=6)
    out = tmp_path_factory.mktemp("ds") / "data"
    run_convert([root], out, SETTINGS, workers=1)
    return out, games


def _expected_lines(games: list[GameRecord]) -> collections.Counter:
    """(sfen, label, ply) of every position of every game, by replaying the moves with python-shogi."""
    lines: collections.Counter = collections.Counter()
    for game in games:
        position = ShogiPosition(game.start_sfen)
        labels = encode_game(game).win
        for ply in range(len(game.moves) + 1):
            lines[(position.sfen(), f"{float(labels[ply]):g}", str(ply))] += 1
            if ply < len(game.moves):
                position.push_usi(game.moves[ply])
    return lines


def test_sfen_dump_round_trip(dataset, capsys: pytest.CaptureFixture) -> None:
    out, games = dataset
    assert cli.main(["inspect", str(out), "--sfen"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == sum(len(g.moves) + 1 for g in games)
    rows = [line.split("\t") for line in lines]
    assert all(len(r) == 4 for r in rows)
    assert collections.Counter((r[0], r[1], r[3]) for r in rows) == _expected_lines(games)
    starts = [r for r in rows if r[0] == STANDARD_START_SFEN]
    n_standard = sum(g.start_sfen == STANDARD_START_SFEN for g in games)
    assert len(starts) == n_standard > 0 and all(r[3] == "0" for r in starts)
    assert any(line.startswith(STANDARD_START_SFEN + "\t") for line in lines)
    assert STANDARD_START_SFEN == "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1"
    assert any(r[0] == HANDICAP_SFEN for r in rows)                 # White to move: un-rotated in the dump
    # each game's positions carry one game id, and a game id belongs to one game
    by_game = collections.defaultdict(set)
    for r in rows:
        by_game[r[2]].add(r[3])
    assert len(by_game) == len(games)
    assert sorted(len(v) for v in by_game.values()) == sorted(len(g.moves) + 1 for g in games)


def test_summary_counts(dataset, capsys: pytest.CaptureFixture) -> None:
    out, games = dataset
    assert cli.main(["inspect", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["games"] == len(games)
    assert data["positions"] == sum(len(g.moves) + 1 for g in games)
    manifest = shards.read_manifest(out)
    assert set(data["splits"]) == {s.split for s in manifest.shards}
    for name, split in data["splits"].items():
        assert split["positions"] == sum(s.positions for s in manifest.split(name))
        assert split["games"] == sum(s.games for s in manifest.split(name))
        assert sum(split["labels"].values()) == split["positions"]
    labels = collections.Counter()
    for g in games:
        win = encode_game(g).win
        labels.update({"win": int((win == 1).sum()), "loss": int((win == 0).sum()), "draw": int((win == 0.5).sum())})
    total = collections.Counter()
    for split in data["splits"].values():
        total.update(split["labels"])
    assert total == labels
    endings = collections.Counter(g.ending.value for g in games)
    assert sum((collections.Counter(s["endings"]) for s in data["splits"].values()), collections.Counter()) == endings
    draws = sum(g.winner is Winner.DRAW for g in games)
    assert sum(s["winners"].get("draw", 0) for s in data["splits"].values()) == draws

    assert cli.main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"{len(games)} games" in text and "train" in text and "validation" in text and "endings:" in text


def test_one_shard(dataset, capsys: pytest.CaptureFixture) -> None:
    out, _ = dataset
    info = shards.read_manifest(out).split("validation")[0]
    assert cli.main(["inspect", str(out / info.path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["splits"]) == ["validation"] and data["positions"] == info.positions
    assert cli.main(["inspect", str(out / info.path), "--sfen"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == info.positions


def test_several_paths_are_inspected_each_in_turn(dataset, capsys: pytest.CaptureFixture) -> None:
    out, _ = dataset
    shard = out / shards.read_manifest(out).split("test")[0].path
    assert cli.main(["inspect", str(out), str(shard)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{out}: ") and f"\n\n{shard}: " in text
    assert cli.main(["inspect", str(out), str(out / "nope")]) == 2
    assert capsys.readouterr().err.strip() == (f"shogi-dnn inspect: error: {out / 'nope'}: no such dataset folder, "
                                               "shard or record file (one of 2 paths)")
    assert cli.main(["inspect", str(out), str(shard), "--json"]) == 2
    assert "--json takes one PATH (2 given)" in capsys.readouterr().err


def test_errors_are_one_line(dataset, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, _ = dataset
    for target in (tmp_path / "missing", tmp_path):
        assert cli.main(["inspect", str(target)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not hdf5 at all")
    assert cli.main(["inspect", str(bad)]) == 2
    assert "not a readable HDF5 shard" in capsys.readouterr().err
    # --verify notices a shard changed after conversion
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in out.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    assert cli.main(["inspect", str(copy), "--verify"]) == 0
    capsys.readouterr()
    victim = copy / shards.read_manifest(copy).shards[0].path
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert cli.main(["inspect", str(copy), "--verify"]) == 2
    assert "sha256 differs" in capsys.readouterr().err


# --- game records and positions --------------------------------------------------------------------

SFEN_FILE = DATA / "sfen" / "games.sfen"
KIF_FILE = DATA / "kif" / "mogproject-001.kif"     # 111 moves, Black won by 投了


def test_sfen_file_summary_dump_and_bad_lines(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["inspect", str(SFEN_FILE)]) == 0
    captured = capsys.readouterr()
    # two bad lines are reported as file:line: reason; the seven good games are still shown
    assert captured.err.splitlines() == [f"{SFEN_FILE}:7: illegal move 2h2b (ply 3)",
                                         f"{SFEN_FILE}:10: expected 'moves' after the position, got '7g7f'"]
    lines = captured.out.splitlines()
    assert lines[0] == (f"{SFEN_FILE}: 7 games (0 with a result, 2 unreadable), 18 positions, "
                        "as convert trains them (0 kept)")
    assert lines[1].split()[:4] == ["game", "moves", "evals", "winner"]
    assert lines[2].split() == ["1", "5", "0", "unknown", "none", f"{SFEN_FILE}:3", "startpos"]
    assert lines[6].split()[:6] == ["6", "1", "0", "unknown", "none", f"{SFEN_FILE}:8"]
    assert lines[6].endswith("sfen 4k4/9/9/9/9/9/9/9/4K4 b P2p 12")
    assert lines[2 + 7:] == ["convert skips games 1, 2, 3, 4, 6, 7, 9: no result"]

    assert cli.main(["inspect", str(SFEN_FILE), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["games"], data["positions"], data["with_result"], len(data["errors"])) == (7, 18, 0, 2)
    assert [g["game"] for g in data["records"]] == [1, 2, 3, 4, 6, 7, 9]      # numbered as predict --game

    assert cli.main(["inspect", str(SFEN_FILE), "--sfen"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 18 and all(r[1] == "-" for r in rows)                  # no result: label '-'
    assert rows[:2] == [[STANDARD_START_SFEN, "-", "1", "0"],
                        ["lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2", "-", "1", "1"]]
    # a start with move number 12: ply 11, then 12
    assert [r for r in rows if r[2] == "6"] == [["4k4/9/9/9/9/9/9/9/4K4 b P2p 12", "-", "6", "11"],
                                                ["4k4/9/9/9/9/9/9/4K4/9 w P2p 13", "-", "6", "12"]]


def test_position_string_with_moves(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["inspect", "startpos moves 7g7f 3c3d", "--sfen"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [r[3] for r in rows] == ["0", "1", "2"] and {r[1] for r in rows} == {"-"}
    assert rows[-1][0] == "lnsgkgsnl/1r5b1/pppppp1pp/6p2/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL b - 3"
    # unquoted words are joined, as predict takes them; a bare SFEN works too
    words = ["sfen", "4k4/9/4P4/9/9/9/9/9/4K4", "b", "2rG2b3g4s4n4l17p", "moves", "G*5b"]
    assert cli.main(["inspect", *words]) == 0
    out = capsys.readouterr().out
    assert "1 game (0 with a result), 2 positions" in out and "<position>:1" in out
    assert cli.main(["inspect", "4k4/9/4P4/9/9/9/9/9/4K4 w - 7", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["records"][0]["start_sfen"] == "4k4/9/4P4/9/9/9/9/9/4K4 w - 7"


def test_kif_file_labels_from_the_side_to_move(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["inspect", str(KIF_FILE), "--json"]) == 0
    game = json.loads(capsys.readouterr().out)["records"][0]
    got = (game["moves"], game["winner"], game["ending"], game["source"])
    assert got == (111, "black", "resign", f"{KIF_FILE}:1")
    assert cli.main(["inspect", str(KIF_FILE), "--sfen"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 112 and [r[3] for r in rows] == [str(i) for i in range(112)]
    # Black won: 1 when Black is to move (even plies), 0 when White is
    assert all(r[1] == ("1" if int(r[3]) % 2 == 0 else "0") for r in rows)
    assert all(r[0].split()[1] == ("b" if int(r[3]) % 2 == 0 else "w") for r in rows)
    assert rows[0][0] == STANDARD_START_SFEN and {r[2] for r in rows} == {"1"}


CYCLE = ["+5948OU", "-5142OU", "+4859OU", "-4251OU"]       # back to the start position every 4 plies


def test_record_is_shown_as_convert_trains_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # The user's record: a fourfold repetition played through to 200 moves, then Black resigns. Inspect
    # showed 200 moves, White won; convert trains 12 moves, a draw: inspect now shows that, and why.
    path = tmp_path / "rep.csa"
    path.write_text("V2.2\nPI\n+\n" + "\n".join(CYCLE * 50) + "\n%TORYO\n/\n"
                    "V2.2\nPI\n+\n" + "\n".join(CYCLE[:2]) + "\n%SENNICHITE\n/\n"
                    "V2.2\nPI\n+\n+7776FU\n-3334FU\n%CHUDAN\n")
    assert cli.main(["inspect", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}: 3 games (2 with a result), 19 positions, as convert trains them (1 kept)"
    assert lines[2].split()[:5] == ["1", "12", "0", "draw", "sennichite"]
    assert lines[3].split()[:5] == ["2", "2", "0", "draw", "sennichite"]       # skipped: shown as written
    assert lines[5:] == [
        "game 1: cut at move 12 of 200: fourfold repetition (千日手) there, a draw; the record says white "
        "won (resign) after 200 moves",
        "convert skips game 2: unconfirmed_claim: sennichite claimed after 2 moves but no position occurred "
        "four times",
        "convert skips game 3: no result"]

    assert cli.main(["inspect", str(path), "--json"]) == 0
    game = json.loads(capsys.readouterr().out)["records"][0]
    assert (game["moves"], game["winner"], game["ending"]) == (12, "draw", "sennichite")
    assert game["recorded"] == {"moves": 200, "winner": "white", "ending": "resign"}
    assert game["convert"]["kept"] and game["convert"]["repetition"] == "cut_sennichite"
    assert game["convert"]["moves_cut"] == 188

    assert cli.main(["inspect", str(path), "--sfen"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    first_game = [r for r in rows if r[2] == "1"]
    assert len(first_game) == 13 and {r[1] for r in first_game} == {"0.5"}      # a draw: 0.5 throughout

    assert cli.main(["inspect", str(path), "--raw"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("207 positions, as written (--raw)") and len(lines) == 2 + 3
    assert lines[2].split()[:5] == ["1", "200", "0", "white", "resign"]


def test_bad_records_and_positions_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.sfen"
    bad.write_text("startpos moves 7g7f 7g7f\nstartpos moves 9a9b\n")
    cases = [("startpos moves 7g7f 7g7f", "<position>:1: illegal move 7g7f (ply 2)"),
             ("sfen 9/9 b", "<position>:1: SFEN needs board, side to move and hands"),
             (str(bad), f"{bad}:1: illegal move 7g7f (ply 2); no readable game (2 bad)"),
             (str(tmp_path / "missing.kif"), "no such dataset folder, shard or record file")]
    for target, message in cases:
        assert cli.main(["inspect", target, "--sfen"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and message in err, err
    assert cli.main(["inspect", str(SFEN_FILE), "--verify"]) == 2
    assert "--verify needs a dataset folder" in capsys.readouterr().err


def test_engine_evaluations_are_counted_per_game_and_per_split(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    from tests.support.evalrecords import EVAL_CSA_EXPECTED, write_eval_csa

    source = write_eval_csa(tmp_path / "eval.csa")
    evaluated = sum(v is not None for v in EVAL_CSA_EXPECTED)
    assert cli.main(["inspect", str(source)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[:4] == ["1", "6", str(evaluated), "white"]
    assert cli.main(["inspect", str(source), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["positions_with_eval"] == data["records"][0]["positions_with_eval"] == evaluated
    assert tuple(data["records"][0]["evals"]) == EVAL_CSA_EXPECTED
    assert cli.main(["inspect", str(source), "--sfen"]) == 0
    assert all(len(line.split("\t")) == 4 for line in capsys.readouterr().out.splitlines())   # format unchanged
    out = tmp_path / "out"
    run_convert([source, DATA / "csa" / "ending_toryo.csa"], out, ConvertSettings(val_fraction=0.0), workers=1)
    assert cli.main(["inspect", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["positions_with_eval"] == data["splits"]["train"]["positions_with_eval"] == evaluated
    assert data["positions"] == 7 + 3
    assert cli.main(["inspect", str(out)]) == 0
    assert f"engine evaluations: {evaluated} positions (50.0%), train {evaluated}" in capsys.readouterr().out


def test_summary_counts_have_thousands_separators() -> None:
    """The endings, winners and evaluations lines write 1,674 as the table above them does (the demo's
    dataset printed '1,748 games' and then 'checkmate 1674 (95.8%)')."""
    endings = collections.Counter({"checkmate": 1674, "draw": 74})
    split = inspect.SplitSummary(shards=3, games=1748, positions=234558, moves_total=1748 * 130,
                                 evaluated=12345, endings=endings,
                                 winners=collections.Counter({"black": 1001, "white": 747}))
    text = inspect.format_summary("DS", {"train": split})
    assert "endings: checkmate 1,674 (95.8%), draw 74 (4.2%)" in text
    assert "winners: black 1,001 (57.3%), white 747 (42.7%)" in text
    assert "engine evaluations: 12,345 positions (5.3%), train 12,345" in text


def test_several_paths_go_on_past_an_unreadable_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.csa"
    bad.write_text("garbage\n")
    good = tmp_path / "good.csa"
    good.write_text("V2.2\nPI\n+\n+7776FU\n-3334FU\n%TORYO\n")
    assert cli.main(["inspect", str(bad), str(good)]) == 2
    captured = capsys.readouterr()
    assert f"{good}: 1 game (1 with a result)" in captured.out
    assert "bad.csa:1:" in captured.err and "1 of 2 paths could not be inspected" in captured.err


def test_a_folder_of_records_is_each_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "kifu"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.csa").write_text("V2.2\nPI\n+\n+7776FU\n-3334FU\n%TORYO\n")
    (folder / "sub" / "b.csa").write_text("V2.2\nPI\n+\n+2726FU\n%TORYO\n")
    (folder / "notes.txt").write_text("not a record")
    assert cli.main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"{folder / 'a.csa'}: 1 game" in out and f"{folder / 'sub' / 'b.csa'}: 1 game" in out
    (tmp_path / "empty").mkdir()
    assert cli.main(["inspect", str(tmp_path / "empty")]) == 2
    assert "neither a dataset folder (no manifest.json) nor a folder of record files" in capsys.readouterr().err
