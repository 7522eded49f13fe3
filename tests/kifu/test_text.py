"""Decoding record bytes (kifu/text.py): a bad byte stays in its own line."""

from __future__ import annotations

import pytest

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import read_record_bytes
from shogi_dnn.kifu.record import GameRecord
from shogi_dnn.kifu.text import decode_record

KIF = """手合割：平手
先手：甲
後手：乙
手数----指手---------消費時間--
   1 ７六歩(77)   ( 0:00/00:00:00)
*これはコメント
   2 ３四歩(33)   ( 0:00/00:00:00)
   3 ２六歩(27)   ( 0:00/00:00:00)
   4 投了
まで3手で先手の勝ち
"""
INVALID = b"\x81\x7f"          # a lead byte followed by a byte no encoding accepts after it


def spoil(data: bytes, before: str, encoding: str) -> bytes:
    i = data.index(before.encode(encoding))
    return data[:i] + INVALID + data[i:]


@pytest.mark.parametrize("encoding", ["cp932", "euc-jp", "utf-8"])
def test_bad_bytes_in_a_comment_leave_the_moves_intact(encoding: str) -> None:
    data = spoil(KIF.encode(encoding), "これは", encoding)
    with pytest.raises(UnicodeDecodeError):
        data.decode(encoding)                      # the file as a whole does not decode
    (record,) = read_record_bytes(data, "game.kif")
    assert isinstance(record, GameRecord)
    assert record.moves == ("7g7f", "3c3d", "2g2f") and record.black == "甲" and record.white == "乙"
    text = decode_record(data)
    assert text.count("\ufffd") >= 1 and "\ufffd" not in text.replace(text.splitlines()[5], "")


@pytest.mark.parametrize("encoding", ["cp932", "euc-jp"])
def test_bad_bytes_in_a_move_line_name_that_line(encoding: str) -> None:
    data = spoil(KIF.encode(encoding), "３四歩", encoding)
    (error,) = read_record_bytes(data, "game.kif")
    assert isinstance(error, KifuError) and str(error).startswith("game.kif:7:")


def test_origin_square_with_a_zero_is_a_record_error() -> None:
    for origin in ("09", "90", "70"):
        (error,) = read_record_bytes(KIF.replace("７六歩(77)", f"７六歩({origin})").encode(), "game.kif")
        assert isinstance(error, KifuError) and "game.kif:5:" in str(error) and f"({origin})" in str(error)


def test_non_ascii_usi_move_is_a_record_error() -> None:
    (item,) = read_record_bytes("startpos moves 7g7f ３c3d\n".encode(), "games.sfen")
    assert isinstance(item, KifuError)
