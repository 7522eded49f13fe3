"""Game record readers: CSA (multi-game), KIF, KI2 and SFEN/USI lines -> GameRecord.

Each format module exposes `parse(text, path) -> Iterator[GameRecord | KifuError]`: good games are
yielded as records, bad ones as (yielded, not raised) KifuErrors naming file, line and ply.
`read_record_bytes` picks the format from the file name, then from the content (board_end: mate decides).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import names
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from shogi_dnn.kifu.text import decode_record

RECORD_SUFFIXES = {
    ".csa": "csa",
    ".kif": "kif",
    ".kifu": "kif",
    ".ki2": "ki2",
    ".ki2u": "ki2",
    ".sfen": "sfen",
    ".usi": "sfen",
}


def detect_format(name: str, text: str) -> str:
    """'csa', 'kif', 'ki2' or 'sfen' from the file suffix, else from the content.

    Raises:
        KifuError: when neither the name nor the content looks like a record.
    """
    suffix = Path(name).suffix.lower()
    if suffix in RECORD_SUFFIXES:
        return RECORD_SUFFIXES[suffix]
    stripped = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = stripped[:60]
    if any(ln.startswith(("startpos", "sfen ", "position ")) for ln in head[:3]):
        return "sfen"
    if any(ln.startswith(("V2", "PI", "P1", "N+", "N-")) or ln[:1] in "+-" and ln[1:5].isdigit()
           for ln in head):
        return "csa"
    if any("手数" in ln and "指手" in ln for ln in head):
        return "kif"
    if any(ln[:1] in "▲△☗☖" for ln in head):
        return "ki2"
    raise KifuError(name, 0, "not a game record (unknown format)")


def read_record_bytes(data: bytes, name: str, fmt: str | None = None) -> Iterator[GameRecord | KifuError]:
    """Parse one record file's bytes. Yields records and (not raised) KifuErrors, in file order."""
    text = decode_record(data)
    try:
        fmt = fmt or detect_format(name, text)
    except KifuError as exc:
        yield exc
        return
    from shogi_dnn.kifu.board_end import settle_board_mate

    for item in _parser(fmt)(text, name):
        yield item if isinstance(item, KifuError) else settle_board_mate(item)


def read_record_file(path: str | Path) -> Iterator[GameRecord | KifuError]:
    """Parse one record file from disk (read_record_bytes), named by names.from_path."""
    path = Path(path)
    yield from read_record_bytes(path.read_bytes(), names.from_path(path).text)


def _parser(fmt: str):
    if fmt == "csa":
        from shogi_dnn.kifu import csa
        return csa.parse
    if fmt == "kif":
        from shogi_dnn.kifu import kif
        return kif.parse
    if fmt == "ki2":
        from shogi_dnn.kifu import ki2
        return ki2.parse
    if fmt == "sfen":
        from shogi_dnn.kifu import sfen
        return sfen.parse
    raise ValueError(f"unknown record format {fmt!r}")


__all__ = [
    "RECORD_SUFFIXES",
    "STANDARD_START_SFEN",
    "Ending",
    "GameRecord",
    "KifuError",
    "SourceLine",
    "Winner",
    "decode_record",
    "detect_format",
    "read_record_bytes",
    "read_record_file",
]
