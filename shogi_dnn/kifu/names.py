"""Readable names for record files and archive members whose names are not UTF-8.

A `Name` holds `text`, always UTF-8 encodable: each path component decoded as UTF-8, else cp932, else
EUC-JP (the one with fewer half-width katakana when both decode; cp932 on a tie), else with `\\xNN`
escapes; and `raw`, the bytes as found when they are not `text` in UTF-8 (b"" otherwise), kept in the
shards' `games/source_raw`. Files are still opened by the `str` os.listdir gave.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import unicodedata
import zipfile
import zlib

JAPANESE_ENCODINGS = ("cp932", "euc_jp")     # tried in this order after UTF-8 (module docstring)
ZIP_UTF8_FLAG = 0x800                        # zip general purpose bit 11: the name is UTF-8
ZIP_UNICODE_PATH = 0x7075                    # Info-ZIP Unicode Path extra field (APPNOTE 4.6.9)


@dataclasses.dataclass(frozen=True)
class Name:
    """A file or member name: `text` to show (UTF-8 encodable), `raw` its bytes when not text's UTF-8."""

    text: str
    raw: bytes = b""

    @property
    def raw_hex(self) -> str:
        """`raw` in hex ('' for a UTF-8 name): the games table's `source_raw`."""
        return self.raw.hex()

    def join(self, member: Name) -> Name:
        """The name of `member` inside the archive named self: `archive:member` (raw likewise)."""
        text = f"{self.text}:{member.text}"
        if not self.raw and not member.raw:
            return Name(text)
        return Name(text, (self.raw or self.text.encode()) + b":" + (member.raw or member.text.encode()))


def from_bytes(raw: bytes) -> Name:
    """The Name of a name's bytes ('/'-separated components decoded one by one)."""
    text = "/".join(decode_component(part) for part in raw.split(b"/"))
    return Name(text, b"" if text.encode("utf-8") == raw else raw)


def from_str(name: str) -> Name:
    """The Name of a str that may hold surrogate escapes (os.listdir, sys.argv, tarfile's names)."""
    try:
        name.encode("utf-8")
        return Name(name)
    except UnicodeEncodeError:
        pass
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:       # a lone surrogate that is no escaped byte (a bad UTF-16 name)
        return Name(name.encode("utf-8", "backslashreplace").decode("ascii"))
    return from_bytes(raw)


def from_path(path: str | os.PathLike[str]) -> Name:
    """The Name of a file system path (its bytes: os.fsencode)."""
    return from_bytes(os.fsencode(path))


def from_zip(info: zipfile.ZipInfo) -> Name:
    """The Name of a zip member: its raw bytes when not flagged UTF-8 (bit 11), unless an Info-ZIP Unicode
    Path extra field with a matching CRC gives the name.
    """
    if info.flag_bits & ZIP_UTF8_FLAG:
        return from_str(info.filename)
    try:
        raw = info.orig_filename.encode("cp437")
    except UnicodeEncodeError:        # zipfile decoded it some other way (a newer Python): take it
        return from_str(info.filename)
    unicode_path = _unicode_path(info.extra, raw)
    if unicode_path is not None:
        return Name(unicode_path, b"" if unicode_path.encode() == raw else raw)
    return from_bytes(raw)


def _unicode_path(extra: bytes, raw: bytes) -> str | None:
    """The UTF-8 name of an Info-ZIP Unicode Path field (version 1, CRC-32 of `raw`), else None."""
    at = 0
    while at + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, at)
        body = extra[at + 4: at + 4 + size]
        at += 4 + size
        if tag != ZIP_UNICODE_PATH or len(body) < 5 or body[0] != 1:
            continue
        if struct.unpack_from("<I", body, 1)[0] != zlib.crc32(raw):
            return None             # the name was changed after the field was written: not trusted
        try:
            return body[5:].decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def decode_component(raw: bytes) -> str:
    """One path component's bytes as text (UTF-8, cp932, EUC-JP, else `\\xNN` escapes)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    decoded = []
    for encoding in JAPANESE_ENCODINGS:
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError:
            continue
        if not any(unicodedata.category(c) in ("Cc", "Co") for c in text):   # control, private use
            decoded.append(text)
    if decoded:
        return min(decoded, key=_oddness)          # min keeps the first (cp932) on a tie
    return raw.decode("utf-8", "backslashreplace")


def _oddness(text: str) -> int:
    """Half-width katakana: what EUC-JP bytes read as cp932 give, and real names seldom have."""
    return sum(1 for c in text if "\uff61" <= c <= "\uff9f")
