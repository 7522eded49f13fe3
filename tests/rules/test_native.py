"""The compiled CSA move checker (rules/native.py, play_csa in shogi_dnn/dataset/_encode.c) is never
more lenient than the reference rules (python-shogi): on real positions, every candidate move it accepts
is legal, and it accepts every legal move of a position with both kings (pawn-drop checks included, when
the king has an escape). What it leaves to the reference reads exactly as before."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
import shogi

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import GameRecord, read_record_bytes
from shogi_dnn.kifu.csa import parse
from shogi_dnn.kifu.csa_board import CSA_PIECES
from shogi_dnn.kifu.csa_writer import usi_to_csa_move
from shogi_dnn.rules import PROMOTED, ShogiPosition, native
from tests.support.paths import DATA, SHARED

pytestmark = pytest.mark.skipif(not native.enabled(), reason="the C extension is not built")
play_csa = native._play_csa
SQUARES = [f"{f}{r}" for f in range(1, 10) for r in range(1, 10)]


@functools.lru_cache(maxsize=4)
def _state(sfen: str) -> tuple[np.ndarray, np.ndarray, int]:
    position = ShogiPosition(sfen)
    black, white = position.hand_counts()
    return np.array(position.piece_codes(), np.uint8), np.array(black + white, np.uint8), position.turn


def _accepts(sfen: str, token: str) -> bool:
    board, hands, turn = _state(sfen)
    board, hands = board.copy(), hands.copy()
    return play_csa(board, hands, turn, (token + "\n").encode(), np.zeros(1, np.int64)) == 1


def _candidates(sfen: str) -> set[str]:
    """Moves of the side to move from each of its pieces to every square (with its own name, its
    promoted name and two wrong ones), drops of every piece name anywhere, and some by the other side."""
    board, _, turn = _state(sfen)
    sign, other = ("+", "-") if turn == 0 else ("-", "+")
    tokens = set()
    for origin in SQUARES:
        code = int(board[(int(origin[1]) - 1) * 9 + 9 - int(origin[0])])
        if code == 0 or (code > 14) != (turn == 1):
            continue
        kind = code - 14 if code > 14 else code
        promoted = {CSA_PIECES[PROMOTED[kind] - 1]} if kind in PROMOTED else set()
        names = {CSA_PIECES[kind - 1], "KI", "FU"} | promoted
        tokens |= {sign + origin + to + name for to in SQUARES for name in names}
    tokens |= {sign + "00" + to + name for to in SQUARES for name in CSA_PIECES}
    return tokens | {other + token[1:] for token in sorted(tokens)[:60]}


def _real_positions(limit: int) -> list[str]:
    files = sorted((DATA / "csa").rglob("*.csa"))
    rate = 0.2          # without ../shared (a user's checkout) the bundled records alone give enough
    if SHARED.is_dir():
        files += sorted((SHARED / "kifu-gnushogi").glob("gnushogi-000*.csa"))[:2]
        rate = 0.08
    rng = random.Random(7)
    positions = []
    for path in files:
        for record in read_record_bytes(path.read_bytes(), str(path)):
            if isinstance(record, KifuError):
                continue
            board = shogi.Board(record.start_sfen)
            for usi in record.moves:
                if rng.random() < rate:
                    positions.append(board.sfen())
                board.push_usi(usi)
    rng.shuffle(positions)
    return positions[:limit]


def test_never_more_lenient_than_the_reference_and_accepts_every_legal_move() -> None:
    positions = _real_positions(120)
    assert len(positions) >= 60
    accepted = pawn_drop_checks = 0
    for sfen in positions:
        board = shogi.Board(sfen)
        reference = ShogiPosition(sfen)
        legal = {usi_to_csa_move(reference, move.usi()) for move in board.legal_moves}
        both_kings = "K" in sfen.split()[0] and "k" in sfen.split()[0]
        for token in _candidates(sfen) | legal:
            ok = _accepts(sfen, token)
            accepted += ok
            assert not ok or token in legal, f"{sfen}: accepted the illegal {token}"
            if both_kings and token in legal:
                assert ok, f"{sfen}: refused the legal {token}"
            if ok and token[1:3] == "00" and token[5:] == "FU":
                board.push_usi(f"P*{token[3]}{'abcdefghi'[int(token[4]) - 1]}")
                pawn_drop_checks += board.is_check()
                board.pop()
    assert accepted > 1000


@pytest.mark.parametrize("sfen,token,legal", [
    ("k8/9/1GN6/9/9/9/9/9/8K b P 1", "+0092FU", False),          # pawn-drop mate: left to the reference
    ("k8/9/2N6/9/9/9/9/9/8K b P 1", "+0092FU", True),            # the king takes the pawn: not mate
    ("k8/9/1G7/9/9/9/9/9/8K b P 1", "+0092FU", True),            # the king escapes to 8a
    ("k8/9/9/9/9/9/P8/9/8K b P 1", "+0095FU", False),            # two pawns on a file
    ("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1", "+7776TO", False),   # zone
    ("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1", "+2898HI", False),  # blocked
    ("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1", "+8822UM", False),  # blocked
    ("k8/9/9/9/9/9/9/9/8K b P 1", "+0051FU", False),              # a pawn that could never move
    ("k8/9/9/2N6/9/9/9/9/8K b - 1", "+7462KE", False),            # a knight stuck on rank b
    ("4k4/9/9/9/4r4/9/9/4B4/4K4 b - 1", "+5849KA", False),        # a pinned bishop
])
def test_decided_cases(sfen: str, token: str, legal: bool) -> None:
    reference = {usi_to_csa_move(ShogiPosition(sfen), m) for m in ShogiPosition(sfen).legal_usi()}
    assert (token in reference) is legal
    assert _accepts(sfen, token) is legal or (not legal and not _accepts(sfen, token))
    assert not _accepts(sfen, token) or legal


def test_a_pawn_drop_mate_reads_as_the_reference_says(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "V2.2\nN+a\nN-b\nP1-OU * * * * * * * * \nP2 * * * * * * * * * \nP3 * +KI+KE * * * * * * \n" \
           "P4 * * * * * * * * * \nP5 * * * * * * * * * \nP6 * * * * * * * * * \nP7 * * * * * * * * * \n" \
           "P8 * * * * * * * * * \nP9 * * * * * * * * +OU\nP+00FU\n+\n+0092FU\n%TORYO\n"
    native_result = list(parse(text, "mate.csa"))
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    reference_result = list(parse(text, "mate.csa"))
    assert [str(r) for r in native_result] == [str(r) for r in reference_result]
    assert isinstance(native_result[0], KifuError) and native_result[0].line == 15


def test_records_read_the_same_with_and_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted((DATA / "csa").rglob("*.csa"))
    assert files
    for path in files:
        data = path.read_bytes()
        with_native = [str(r) if isinstance(r, KifuError) else r for r in read_record_bytes(data, str(path))]
        monkeypatch.setenv(native.NATIVE_ENV, "0")
        without = [str(r) if isinstance(r, KifuError) else r for r in read_record_bytes(data, str(path))]
        monkeypatch.delenv(native.NATIVE_ENV)
        assert with_native == without, path


def test_records_carry_the_move_codes_the_encoder_would_compute() -> None:
    """The checker's move codes travel with the record (GameRecord.move_codes) and encode the same
    positions as the moves' USI do, a move played through the reference included."""
    import dataclasses

    from shogi_dnn.dataset.features import absolute_move_code, encode_game

    records = [r for path in sorted((DATA / "csa").rglob("*.csa"))
               for r in read_record_bytes(path.read_bytes(), str(path))
               if not isinstance(r, KifuError) and r.has_result]
    carrying = [r for r in records if r.move_codes is not None]
    assert len(carrying) >= 5
    for record in carrying:
        assert record.move_codes.tolist() == [absolute_move_code(m) for m in record.moves]
        with_codes, without = encode_game(record), encode_game(dataclasses.replace(record, move_codes=None))
        for field in dataclasses.fields(with_codes):
            a, b = getattr(with_codes, field.name), getattr(without, field.name)
            assert (a is None and b is None) or np.array_equal(a, b), field.name
    game = native.NativeGame("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1")
    game.push_csa_moves(["+7776FU", "-3334FU"])
    game.push_usi("8h2b+")                         # a move through the reference keeps its code too
    assert game.move_codes().tolist() == [absolute_move_code(m) for m in ("7g7f", "3c3d", "8h2b+")]


def test_move_lines_are_counted_as_the_reader_regex_matches_them() -> None:
    """_encode.csa_move_lines (the reader's runs of move lines, counted in C) gives exactly the lines
    of csa._MOVE_RUN, on random texts of move lines and near misses (non-ASCII digits and letters too)."""
    from shogi_dnn.kifu.csa import _MOVE_RUN

    count = native.move_line_counter()
    assert count is not None
    rng = random.Random(13)
    good = ["+7776FU\n", "-3334FU\n", "+0055KA\n", "-8822UM\n"]
    alphabet = "+-0123456789AZaz\n\r /%é漢\u0660\uff10"
    for _ in range(20_000):
        text = "".join(rng.choice(good) if rng.random() < 0.8 else
                       "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
                       for _ in range(rng.randint(0, 6)))
        offset = rng.randint(0, len(text))
        run = _MOVE_RUN.match(text, offset)
        assert count(text, offset) == (len(run.group()) // 8 if run else 0), (text, offset)


@pytest.mark.parametrize("comments", [
    ["'** 133", "'**-20 -3334FU", "'**  +7 x", "'** 40000 +2726FU", "'** -99999", "'** 5 ", "'** 0"],
    ["'** 1234567890", "'** abc", "'** ", "'**\t5", "'** 5\t", "'**", "'*** 3", "'** 12-"],
    ["'** 10", "'** 20\n'** 30", "'summary:toryo:a win:b lose", "'black_rate:a:1500", "'** 7 ９", "", "'x"],
])
def test_moves_with_evaluation_comments_read_the_same_with_and_without_it(
        monkeypatch: pytest.MonkeyPatch, comments: list[str]) -> None:
    """The C reader of runs of move lines and `'** 123` comments (csa_eval_run, issue 32) gives the
    records, evaluations and error lines the line-by-line reader gives, odd comments included."""
    moves = ["+7776FU", "-3334FU", "+8822UM", "-3122GI", "+2726FU", "-4132KI", "+0055KA"]
    illegal = moves[:5] + ["+2726FU", "-4132KI"]                      # ply 6: by the side not to move
    texts = []
    for record in (moves, illegal):
        lines = ["V2.2", "N+a", "N-b", "PI", "+", "'** 3"]
        for move, comment in zip(record, comments):
            lines += [move, comment]
        texts += ["\n".join(lines + ["%TORYO"]) + "\n", "\n".join(lines + ["+9796FU"])]   # no "\n" at the end
    for text in texts:
        with_native = [r if isinstance(r, GameRecord) else str(r) for r in parse(text, "e.csa")]
        monkeypatch.setenv(native.NATIVE_ENV, "0")
        without = [r if isinstance(r, GameRecord) else str(r) for r in parse(text, "e.csa")]
        monkeypatch.delenv(native.NATIVE_ENV)
        assert with_native == without
    first = next(parse(texts[0], "e.csa"))
    assert isinstance(first, GameRecord) and len(first.evals) == 8 and first.evals[0] == 3
    if comments[0] == "'** 133":           # side to move's view; clipped; the first comment of a move wins
        assert first.evals == (3, -133, -20, -7, 32000, 32000, 5, 0)
    error = next(parse(texts[2], "e.csa"))
    line = 7 + sum(2 + comment.count("\n") for comment in comments[:5])      # 6 header lines, then pairs
    assert isinstance(error, KifuError) and error.line == line and error.ply == 6
