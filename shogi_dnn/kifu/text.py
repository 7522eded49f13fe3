"""Decoding record bytes: BOM, UTF-8, Shift_JIS/cp932 and EUC-JP, detected automatically."""

from __future__ import annotations

import codecs
import re

_ENCODING_HINT = re.compile(rb"encoding\s*=\s*([A-Za-z0-9_\-]+)", re.IGNORECASE)
_CSA_ENCODING = re.compile(rb"^'CSA encoding=([A-Za-z0-9_\-]+)", re.MULTILINE)


def decode_record(data: bytes) -> str:
    """Decode the bytes of a record file to text with '\\n' line ends.

    Order: a UTF-8 BOM, an `encoding=` header, strict UTF-8, cp932, EUC-JP; when none decodes every byte,
    the one that decodes the most lines, line by line (replacement characters only in bad lines).
    """
    if data.startswith(codecs.BOM_UTF8):
        text = data[len(codecs.BOM_UTF8):].decode("utf-8", errors="replace")
        return _normalise_newlines(text)
    head = data[:512]
    hint = _ENCODING_HINT.search(head) or _CSA_ENCODING.search(head)
    candidates = ["utf-8", "cp932", "euc-jp"]
    if hint:
        name = hint.group(1).decode("ascii").lower().replace("_", "-")
        name = {"shift-jis": "cp932", "sjis": "cp932", "shift_jis": "cp932"}.get(name, name)
        candidates.insert(0, name)
    for encoding in candidates:
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
        if encoding == "cp932" and _odd_chars(text):
            text = _prefer_euc_jp(data, text)
        return _normalise_newlines(text)
    return _normalise_newlines(_decode_by_line(data, candidates))


def _decode_by_line(data: bytes, candidates: list[str]) -> str:
    """Decode line by line with the candidate that decodes the most lines strictly (the first on a tie).
    Splitting at b'\n' is safe in all three encodings: no multi-byte character contains the byte 0x0A."""
    lines = data.split(b"\n")

    def decodable(encoding: str) -> int:
        count = 0
        for line in lines:
            try:
                line.decode(encoding)
            except (UnicodeDecodeError, LookupError):
                continue
            count += 1
        return count

    best = max(candidates, key=decodable)       # max keeps the first of equal counts
    try:
        return "\n".join(line.decode(best, errors="replace") for line in lines)
    except LookupError:                          # an unknown encoding= hint that no line decodes with
        return data.decode("utf-8", errors="replace")


# EUC-JP bytes often decode as cp932 too, into half-width katakana and private-use characters that
# no record uses: when cp932 yields those and EUC-JP decodes with fewer, the file is EUC-JP.
_ODD = re.compile("[\uff61-\uff9f\ue000-\uf8ff]")


def _odd_chars(text: str) -> int:
    return len(_ODD.findall(text))


def _prefer_euc_jp(data: bytes, cp932_text: str) -> str:
    try:
        euc_text = data.decode("euc-jp")
    except UnicodeDecodeError:
        return cp932_text
    return euc_text if _odd_chars(euc_text) < _odd_chars(cp932_text) else cp932_text


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")
