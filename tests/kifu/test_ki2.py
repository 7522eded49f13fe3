"""KI2 reader: moves without origins resolved against legal moves, relative words, errors, fixtures."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import ki2, read_record_bytes, read_record_file
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, Winner

HEADER = "開始日時：2024/01/01\n手合割：平手\n先手：羽生善治\n後手：藤井聡太\n\n"
MOVES = "▲７六歩    △３四歩    ▲２二角成  △同　銀\n▲５五角打  △４二玉    ▲３三角不成  △同　桂\n"
MOVES_USI = ("7g7f", "3c3d", "8h2b+", "3a2b", "B*5e", "5a4b", "5e3c", "2a3c")
GAME = HEADER + MOVES + "まで8手で後手の勝ち\n"


def parse_all(text: str, path: str = "t.ki2") -> list[GameRecord | KifuError]:
    return list(ki2.parse(text, path))


def parse_one(text: str) -> GameRecord:
    items = parse_all(text)
    assert len(items) == 1 and isinstance(items[0], GameRecord), items
    return items[0]


def parse_error(text: str) -> KifuError:
    items = parse_all(text)
    assert len(items) == 1 and isinstance(items[0], KifuError), items
    return items[0]


def test_moves_same_drop_promote_nonpromote_several_per_line() -> None:
    record = parse_one(GAME)
    assert record.moves == MOVES_USI
    assert record.start_sfen == STANDARD_START_SFEN
    assert (record.winner, record.ending, record.format) == (Winner.WHITE, Ending.RESIGN, "ki2")
    assert (record.black, record.white) == ("羽生善治", "藤井聡太")


def test_drop_needs_no_dahi_when_no_board_piece_can_go_there() -> None:
    record = parse_one(GAME.replace("▲５五角打", "▲５五角"))
    assert record.moves == MOVES_USI


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "cp932", "euc-jp"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_encodings_and_line_ends(encoding: str, newline: str) -> None:
    data = GAME.replace("\n", newline).encode(encoding)
    items = list(read_record_bytes(data, "game.ki2"))
    assert len(items) == 1 and isinstance(items[0], GameRecord)
    assert items[0].moves == MOVES_USI and items[0].black == "羽生善治"


def test_format_detected_from_content() -> None:
    (record,) = read_record_bytes(GAME.encode("cp932"), "game.txt")
    assert isinstance(record, GameRecord) and record.format == "ki2"


@pytest.mark.parametrize(("move", "usi"), [("▲５八金右", "4i5h"), ("▲５八金左", "6i5h")])
def test_two_golds_right_left_from_the_start(move: str, usi: str) -> None:
    assert parse_one(HEADER + move + "\n").moves == (usi,)


def test_ambiguous_move_is_an_error_with_line_and_ply() -> None:
    error = parse_error(HEADER + "▲７六歩    △３四歩\n▲５八金\n")
    assert "ambiguous" in error.reason and "4i5h" in error.reason and "6i5h" in error.reason
    assert (error.path, error.line, error.ply) == ("t.ki2", 7, 3)


def test_impossible_move_is_an_error() -> None:
    error = parse_error(HEADER + "▲７六歩    △５五角\n")
    assert "impossible" in error.reason and error.ply == 2


def test_wrong_side_is_an_error() -> None:
    error = parse_error(HEADER + "▲７六歩    ▲２六歩\n")
    assert error.ply == 2 and "▲" in error.reason


def diagram(pieces: dict[str, str], black_hand: str = "なし", white_hand: str = "なし",
            turn: str = "") -> str:
    """A KI2 board diagram; `pieces` maps USI squares to ' 金' (Black) or 'v金' (White)."""
    rows = []
    for rank in "abcdefghi":
        cells = "".join(pieces.get(f"{file}{rank}", " ・") for file in range(9, 0, -1))
        rows.append(f"|{cells}|{'一二三四五六七八九'['abcdefghi'.index(rank)]}")
    lines = [f"後手の持駒：{white_hand}", "  ９ ８ ７ ６ ５ ４ ３ ２ １", "+" + "-" * 27 + "+", *rows,
             "+" + "-" * 27 + "+", f"先手の持駒：{black_hand}"] + ([turn] if turn else [])
    return "\n".join(lines) + "\n"


THREE_GOLDS = diagram({"6h": " 金", "5i": " 金", "4i": " 金", "9i": " 玉", "5a": "v玉"})
# The same position turned 180 degrees, White to move.
THREE_WHITE_GOLDS = diagram({"4b": "v金", "5a": "v金", "6a": "v金", "1a": "v玉", "5i": " 玉"}, turn="後手番")


@pytest.mark.parametrize(("move", "black", "white"), [
    ("金寄", "6h5h", "4b5b"),
    ("金直", "5i5h", "5a5b"),
    ("金右", "4i5h", "6a5b"),
    ("金左", "6h5h", "4b5b"),
    ("金右上", "4i5h", "6a5b"),
])
def test_relative_words_three_golds(move: str, black: str, white: str) -> None:
    assert parse_one(THREE_GOLDS + f"▲５八{move}\n").moves == (black,)
    assert parse_one(THREE_WHITE_GOLDS + f"△５二{move}\n").moves == (white,)


@pytest.mark.parametrize(("move", "reason"), [("金上", "ambiguous"), ("金", "ambiguous"), ("金引", "impossible")])
def test_relative_words_that_do_not_single_out_a_gold(move: str, reason: str) -> None:
    assert reason in parse_error(THREE_GOLDS + f"▲５八{move}\n").reason
    assert reason in parse_error(THREE_WHITE_GOLDS + f"△５二{move}\n").reason


def test_dragons_and_horses() -> None:
    dragons = diagram({"9c": " 龍", "1c": " 龍", "9i": " 玉", "5a": "v玉"})
    assert parse_one(dragons + "▲５三龍右\n").moves == ("1c5c",)
    assert parse_one(dragons + "▲５三竜左\n").moves == ("9c5c",)
    assert "ambiguous" in parse_error(dragons + "▲５三龍\n").reason
    horses = diagram({"2b": " 馬", "8h": " 馬", "9i": " 玉", "5a": "v玉"})
    assert parse_one(horses + "▲５五馬引\n").moves == ("2b5e",)
    assert parse_one(horses + "▲５五馬上\n").moves == ("8h5e",)


def test_drop_versus_board_move() -> None:
    board = diagram({"3i": " 銀", "9i": " 玉", "5a": "v玉"}, black_hand="銀")
    assert parse_one(board + "▲４八銀\n").moves == ("3i4h",)
    assert parse_one(board + "▲４八銀打\n").moves == ("S*4h",)


@pytest.mark.parametrize(("move", "usi"), [("▲２三銀成", "3d2c+"), ("▲２三銀不成", "3d2c"),
                                           ("▲２三銀生", "3d2c"), ("▲２三銀", "3d2c")])
def test_promotion_words(move: str, usi: str) -> None:
    board = diagram({"3d": " 銀", "9i": " 玉", "5a": "v玉"})
    assert parse_one(board + move + "\n").moves == (usi,)


def test_promoted_piece_names() -> None:
    board = diagram({"3d": " 全", "7d": " 圭", "5d": " と", "1d": " 杏", "9i": " 玉", "5a": "v玉"})
    record = parse_one(board + "▲３三成銀    △４一玉    ▲７三圭    △５一玉    ▲５三と    △４一玉    ▲１三成香\n")
    assert record.moves == ("3d3c", "5a4a", "7d7c", "4a5a", "5d5c", "5a4a", "1d1c")


def test_board_without_turn_line_takes_the_first_movers_side() -> None:
    board = diagram({"3d": " 銀", "9i": " 玉", "5a": "v玉"})
    record = parse_one(board + "△４一玉    ▲２三銀成\n")
    assert record.start_sfen.split()[1] == "w" and record.moves == ("5a4a", "3d2c+")


def test_handicap_white_moves_first() -> None:
    text = "手合割：角落ち\n下手：A\n上手：B\n△６二銀    ▲７六歩    △投了\nまで2手で下手の勝ち\n"
    record = parse_one(text)
    assert record.start_sfen.split()[:2] == ["lnsgkgsnl/1r7/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL", "w"]
    assert record.moves == ("7a6b", "7g7f")
    assert (record.black, record.white, record.handicap) == ("A", "B", "角落ち")
    assert (record.winner, record.ending) == (Winner.BLACK, Ending.RESIGN)


@pytest.mark.parametrize(("word", "winner", "ending"), [
    ("不戦勝", Winner.WHITE, Ending.FORFEIT), ("不戦敗", Winner.BLACK, Ending.FORFEIT),
    ("入玉宣言", Winner.WHITE, Ending.ENTERING_KING), ("勝ち宣言", Winner.WHITE, Ending.ENTERING_KING),
    ("トライ", Winner.WHITE, Ending.ENTERING_KING),
])
def test_result_words_shared_with_kif(word: str, winner: Winner, ending: Ending) -> None:
    record = parse_one(HEADER + f"▲７六歩    △{word}\n")        # White to move writes the word
    assert record.moves == ("7g7f",)
    assert (record.winner, record.ending) == (winner, ending)


def test_variations_and_comments_ignored_and_games_split() -> None:
    text = (HEADER + "*コメント\n▲７六歩    △３四歩\n▲２六歩\nまで3手で先手の勝ち\n\n"
            "変化：2手\n△８四歩    ▲２六歩\n\n" + GAME)
    first, second = parse_all(text)
    assert isinstance(first, GameRecord) and isinstance(second, GameRecord)
    assert first.moves == ("7g7f", "3c3d", "2g2f") and first.winner is Winner.BLACK
    assert second.moves == MOVES_USI
    assert second.source.line == text[:text.index(GAME)].count("\n") + 1 > 1


@pytest.mark.parametrize(("line", "winner", "ending"), [
    ("まで3手で千日手", Winner.DRAW, Ending.SENNICHITE),
    ("まで3手で持将棋", Winner.DRAW, Ending.JISHOGI),
    ("まで3手で中断", Winner.UNKNOWN, Ending.INTERRUPTED),
    ("まで3手で後手の反則勝ち", Winner.WHITE, Ending.ILLEGAL_MOVE),
    ("まで3手で時間切れにより後手の勝ち", Winner.WHITE, Ending.TIME_UP),
    ("まで3手で先手の不戦勝", Winner.BLACK, Ending.FORFEIT),
    ("まで3手詰", Winner.BLACK, Ending.CHECKMATE),          # a mate problem's summary (no で)
])
def test_summary_lines(line: str, winner: Winner, ending: Ending) -> None:
    record = parse_one(HEADER + "▲７六歩    △３四歩    ▲２六歩\n" + line + "\n")
    assert (record.winner, record.ending) == (winner, ending)


@pytest.mark.parametrize(("tail", "line", "reason"), [
    ("まで3手で先手の勝ち\nまで3手で中断\n", 8, "'まで3手で中断' (no result) contradicts 'まで3手で先手の勝ち' on line 7"),
    ("△投了 ▲中断\nまで3手で先手の勝ち\n", 7, "'中断' (no result) contradicts '投了' on line 7 (black wins)"),
])
def test_conflicting_end_markers_are_an_error(tail: str, line: int, reason: str) -> None:
    # Lines: 4 header lines, a blank one, the moves on line 6, then the end markers.
    (error,) = parse_all(HEADER + "▲７六歩    △３四歩    ▲２六歩\n" + tail)
    assert isinstance(error, KifuError) and error.line == line and reason in error.reason, error


def test_consistent_end_markers_are_read() -> None:
    record = parse_one(HEADER + "▲７六歩    △３四歩    ▲２六歩\nまで3手で先手の勝ち\nまで3手で先手の勝ち\n")
    assert (record.winner, record.ending) == (Winner.BLACK, Ending.RESIGN)


@pytest.mark.parametrize(("name", "plies", "winner", "ending", "handicap"), [
    ("20091203.ki2", 172, Winner.WHITE, Ending.RESIGN, ""),          # Shift_JIS
    ("7mai.ki2u", 2, Winner.UNKNOWN, Ending.INTERRUPTED, "左七枚落ち"),
    ("fork.ki2", 3, Winner.BLACK, Ending.RESIGN, ""),                # variations
    ("simple.ki2u", 167, Winner.BLACK, Ending.CHECKMATE, ""),       # no result word: mate on the board
    ("mogproject-001.ki2", 111, Winner.BLACK, Ending.RESIGN, ""),
])
def test_real_ki2_fixtures(data_dir: Path, name: str, plies: int, winner: Winner, ending: Ending,
                           handicap: str) -> None:
    items = list(read_record_file(data_dir / "ki2" / name))
    assert len(items) == 1 and isinstance(items[0], GameRecord), items
    record = items[0]
    got = (len(record.moves), record.winner, record.ending, record.handicap)
    assert got == (plies, winner, ending, handicap)


def test_ki2_and_kif_of_the_same_game_agree(data_dir: Path) -> None:
    (from_ki2,) = read_record_file(data_dir / "ki2" / "mogproject-001.ki2")
    (from_kif,) = read_record_file(data_dir / "kif" / "mogproject-001.kif")
    assert isinstance(from_ki2, GameRecord) and isinstance(from_kif, GameRecord)
    assert from_ki2.moves == from_kif.moves and from_ki2.winner is from_kif.winner


def _details(shared_dir: Path) -> list[dict[str, str]]:
    with open(shared_dir / "kifu" / "DETAILS.tsv", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_shared_ki2_games_match_their_kif_twins(shared_dir: Path) -> None:
    """Every KI2 real game parses, and gives the moves and winner of the KIF file of the same game."""
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    rows = _details(shared_dir)
    for row in rows:
        groups[row["game_group"]][row["format"]].append(row["local_path"])
    checked = 0
    for row in rows:
        if row["format"] != "ki2" or row["kind"] != "real_game":
            continue
        items = list(read_record_file(shared_dir / "kifu" / row["local_path"]))
        assert len(items) == 1 and isinstance(items[0], GameRecord), (row["local_path"], items)
        if row["winner"] != "unknown":
            assert items[0].winner.value == row["winner"], row["local_path"]
        for twin in groups[row["game_group"]]["kif"]:
            (kif_record,) = read_record_file(shared_dir / "kifu" / twin)
            assert isinstance(kif_record, GameRecord)
            assert items[0].moves == kif_record.moves, (row["local_path"], twin)
            assert items[0].start_sfen == kif_record.start_sfen
            checked += 1
    assert checked >= 20


def test_euc_jp_that_also_decodes_as_cp932() -> None:
    """These EUC-JP bytes are valid cp932 too (half-width kana, private-use characters)."""
    text = "▲７六歩△８四歩▲５六歩△３四歩▲５五歩△６二銀▲５八飛△５二金右\n"
    (record,) = read_record_bytes(text.encode("euc-jp"), "moves.ki2")
    assert isinstance(record, GameRecord)
    assert record.moves == ("7g7f", "8c8d", "5g5f", "3c3d", "5f5e", "7a6b", "2h5h", "6a5b")


@settings(max_examples=150, deadline=None)
@given(cut=st.integers(0, len(GAME)), junk=st.text(max_size=12), at=st.integers(0, len(GAME)))
def test_truncated_or_garbled_text_never_raises(cut: int, junk: str, at: int) -> None:
    text = (THREE_GOLDS + GAME)[:cut + len(THREE_GOLDS)]
    text = text[:at] + junk + text[at:]
    items = parse_all(text)
    assert items and all(isinstance(x, (GameRecord, KifuError)) for x in items)


# --- round trip: random legal games written as KI2 by an independent writer -> parse ------------

def _usi_file_rank(square: str) -> tuple[int, int]:
    return int(square[0]), ord(square[1]) - ord("a") + 1


def _words(usi: str, turn: int) -> dict[str, bool]:
    """Which relative words describe a board move, from the mover's view (JSA notation rules)."""
    (from_file, from_rank), (to_file, to_rank) = _usi_file_rank(usi[:2]), _usi_file_rank(usi[2:4])
    ahead = (from_rank - to_rank) if turn == 0 else (to_rank - from_rank)
    return {"上": ahead > 0, "引": ahead < 0, "寄": ahead == 0, "直": ahead > 0 and from_file == to_file}


def _relative_words(usi: str, rivals: list[str], turn: int) -> str:
    """The shortest relative words telling `usi` apart from the other `rivals` (same piece and square)."""
    def files(moves: list[str]) -> list[int]:
        return [int(m[0]) if turn == 0 else -int(m[0]) for m in moves]   # smaller = further right
    for motion in ("", "直", "上", "引", "寄"):
        group = [m for m in rivals if not motion or _words(m, turn)[motion]]
        if usi not in group:
            continue
        for side in ("", "右", "左"):
            pick = {"": min, "右": min, "左": max}[side](files([usi] + group))
            chosen = group if not side else [m for m, f in zip(group, files(group)) if f == pick]
            if chosen == [usi]:
                return side + motion
    raise AssertionError(f"cannot write {usi} apart from {rivals}")


def write_ki2_move(position, usi: str, previous: str) -> str:  # type: ignore[no-untyped-def]
    names = {1: "歩", 2: "香", 3: "桂", 4: "銀", 5: "金", 6: "角", 7: "飛", 8: "玉",
             9: "と", 10: "成香", 11: "成桂", 12: "成銀", 13: "馬", 14: "龍"}
    to = usi[2:4]
    file, rank = _usi_file_rank(to)
    where = "同　" if to == previous else "０１２３４５６７８９"[file] + "〇一二三四五六七八九"[rank]
    legal = position.legal_usi()
    mark = "▲" if position.turn == 0 else "△"
    def piece_of(move: str) -> int:
        return position.piece_type_at((ord(move[1]) - ord("a")) * 9 + 9 - int(move[0]))[0]
    if usi[1] == "*":
        piece = "PLNSGBR".index(usi[0]) + 1
        board_rival = any(m[1] != "*" and m[2:4] == to and piece_of(m) == piece for m in legal)
        return f"{mark}{where}{names[piece]}{'打' if board_rival else ''}"
    piece = piece_of(usi)
    promote = usi.endswith("+")
    rivals = [m for m in legal if m[1] != "*" and m[2:4] == to and m.endswith("+") == promote
              and piece_of(m) == piece]
    words = _relative_words(usi, rivals, position.turn) if len(rivals) > 1 else ""
    suffix = "成" if promote else ("不成" if usi + "+" in legal else "")
    return f"{mark}{where}{names[piece]}{words}{suffix}"


@st.composite
def random_walks(draw: st.DrawFn) -> tuple[str, list[str], str]:
    from shogi_dnn.kifu import japanese as ja
    from shogi_dnn.rules import new_position
    name = draw(st.sampled_from(sorted(ja.HANDICAPS)))
    position = new_position(ja.HANDICAPS[name])
    moves, tokens, previous = [], [], ""
    for _ in range(draw(st.integers(1, 60))):
        legal = sorted(position.legal_usi())
        if not legal:
            break
        usi = legal[draw(st.integers(0, len(legal) - 1))]
        tokens.append(write_ki2_move(position, usi, previous))
        position.push_usi(usi)
        moves.append(usi)
        previous = usi[2:4]
    return name, moves, "\n".join("  ".join(tokens[i:i + 6]) for i in range(0, len(tokens), 6))


@settings(max_examples=40, deadline=None)
@given(random_walks())
def test_round_trip_random_games_written_as_ki2(walk: tuple[str, list[str], str]) -> None:
    name, moves, body = walk
    record = parse_one(f"手合割：{name}\n{body}\nまで{len(moves)}手で中断\n")
    assert list(record.moves) == moves
    assert record.ending is Ending.INTERRUPTED
