"""kifu/names.py: names that are not UTF-8 (cp932, EUC-JP, undecodable), on disk and in zip files
written as Windows in Japan writes them (cp932, no UTF-8 flag), down to the games table and the report."""

from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from shogi_dnn.convert.run import REPORT_NAME, ConvertSettings, run_convert
from shogi_dnn.convert.sources import SourceFile, iter_sources
from shogi_dnn.dataset import shards
from shogi_dnn.kifu import names

DATA = Path(__file__).resolve().parents[1] / "data" / "csa"
GAMES = [DATA / "ending_toryo.csa", DATA / "mogproject_001.csa", DATA / "ending_tsumi.csa",
         DATA / "wars_tatara122-michael_sun.csa", DATA / "wars_October_J-michael_sun.csa"]
SETTINGS = ConvertSettings(val_fraction=0.0, test_fraction=0.0)
# Real names: 棋譜 (kifu), a player pairing, katakana whose cp932 bytes hold 0x5C ('\\'), a year.
JAPANESE = ["棋譜", "羽生善治対藤井聡太", "ソフトウェア対局", "将棋の棋譜2024年"]


@pytest.mark.parametrize("encoding", ["cp932", "euc_jp"])
@pytest.mark.parametrize("text", JAPANESE)
def test_japanese_components_decode_and_keep_their_bytes(text: str, encoding: str) -> None:
    raw = f"{text}.csa".encode(encoding)
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    assert names.from_bytes(raw) == names.Name(f"{text}.csa", raw)


def test_utf8_is_kept_as_it_is_and_bytes_nothing_decodes_are_escaped() -> None:
    assert names.from_bytes("棋譜/a.csa".encode()) == names.Name("棋譜/a.csa")       # raw b"": UTF-8
    assert names.from_bytes(b"a\xff\xfe.csa") == names.Name("a\\xff\\xfe.csa", b"a\xff\xfe.csa")
    assert names.from_str("a\udcff\udcfe.csa") == names.Name("a\\xff\\xfe.csa", b"a\xff\xfe.csa")
    # each component alone: a UTF-8 folder holding a cp932 file
    raw = "対局/".encode() + "棋譜.kif".encode("cp932")
    assert names.from_bytes(raw) == names.Name("対局/棋譜.kif", raw)
    joined = names.Name("a.zip").join(names.Name("棋譜.csa", "棋譜.csa".encode("cp932")))
    assert joined == names.Name("a.zip:棋譜.csa", b"a.zip:" + "棋譜.csa".encode("cp932"))


def windows_zip(path: Path, members: list[tuple[bytes, bytes]],
                extras: dict[bytes, bytes] | None = None, flags: int = 0) -> Path:
    """A zip as Explorer on Japanese Windows writes one (PKWARE APPNOTE 6.3.x, 4.3.7/4.3.12/4.3.16):
    names stored in cp932 bytes, general purpose flag bit 11 (UTF-8) clear, version made by 2.0 on
    MS-DOS (FAT), deflated members. `extras`: a member's extra field, by its name; `flags`: the general
    purpose flags (0x800 claims UTF-8 names)."""
    local, central, offset = b"", b"", 0
    for raw, data in members:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = packer.compress(data) + packer.flush()
        extra = (extras or {}).get(raw, b"")
        fields = struct.pack("<HHHHIIIHH", flags, 8, 0x6000, 0x5A21, zlib.crc32(data), len(body), len(data),
                             len(raw), len(extra))      # flags 0 (bit 11 clear), deflate, a DOS time and date
        local_header = struct.pack("<IH", 0x04034B50, 20) + fields + raw + extra
        central += (struct.pack("<IHH", 0x02014B50, 0x0014, 20) + fields
                    + struct.pack("<HHHII", 0, 0, 0, 0x20, offset) + raw + extra)
        local += local_header + body
        offset += len(local_header) + len(body)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), offset, 0)
    path.write_bytes(local + central + end)
    return path


def _cp932(text: str) -> bytes:
    return text.encode("cp932")


def test_a_zip_from_japanese_windows_gives_readable_member_names(tmp_path: Path) -> None:
    game = GAMES[0].read_bytes()
    members = [(_cp932("棋譜/先手勝ち.csa"), game), (b"plain.csa", game)]
    path = windows_zip(tmp_path / "kifu.zip", members)
    with zipfile.ZipFile(path) as z:
        first = z.infolist()[0]
        assert not first.flag_bits & 0x800 and first.create_system == 0 and z.testzip() is None
        assert first.filename != "棋譜/先手勝ち.csa"           # zipfile alone: cp437 mojibake
    items = list(iter_sources([path]))
    assert items == [SourceFile(f"{path}:plain.csa", game),
                     SourceFile(f"{path}:棋譜/先手勝ち.csa", game,
                                str(path).encode() + b":" + _cp932("棋譜/先手勝ち.csa"))]


def test_a_zip_claiming_utf8_names_it_does_not_have_is_one_error_not_a_crash(tmp_path: Path) -> None:
    game = GAMES[0].read_bytes()
    liar = windows_zip(tmp_path / "liar.zip", [(_cp932("棋譜.csa"), game)], flags=0x800)
    good = windows_zip(tmp_path / "good.zip", [(_cp932("棋譜.csa"), game)])
    items = list(iter_sources([liar, good]))
    assert [type(i).__name__ for i in items] == ["KifuError", "SourceFile"]
    assert str(items[0]).startswith(f"{liar}:0: not a readable zip archive (")


def _unicode_path_field(text: str, raw: bytes) -> bytes:
    body = struct.pack("<BI", 1, zlib.crc32(raw)) + text.encode()
    return struct.pack("<HH", 0x7075, len(body)) + body


def test_info_zip_unicode_path_field_is_used_only_when_its_crc_matches(tmp_path: Path) -> None:
    raw_good, raw_stale = b"game1.csa", _cp932("棋譜2.csa")
    extras = {raw_good: _unicode_path_field("対局1.csa", raw_good),
              raw_stale: _unicode_path_field("別名.csa", b"renamed since")}
    game = GAMES[0].read_bytes()
    path = windows_zip(tmp_path / "u.zip", [(raw_good, game), (raw_stale, game)], extras)
    got = [(i.name.split(":", 1)[1], i.raw_name) for i in iter_sources([path])]
    assert got == [("対局1.csa", str(path).encode() + b":" + raw_good),
                   ("棋譜2.csa", str(path).encode() + b":" + raw_stale)]


def _folder(root: Path) -> dict[bytes, Path]:
    """good.csa beside files named in cp932, EUC-JP and bytes no encoding takes; each holds a game."""
    root.mkdir()
    raws = {b"good.csa": GAMES[2], _cp932("棋譜.csa"): GAMES[0], "対局.csa".encode("euc_jp"): GAMES[1],
            b"\xff\xfe.csa": GAMES[3]}
    for raw, game in raws.items():
        with open(os.fsencode(root) + b"/" + raw, "wb") as f:
            f.write(game.read_bytes())
    return raws


def test_convert_names_the_games_readably_and_keeps_the_bytes(tmp_path: Path) -> None:
    root = tmp_path / "in"
    raws = _folder(root)
    windows_zip(root / "windows.zip", [(_cp932("先手/棋譜.csa"), GAMES[4].read_bytes())])
    (root / "broken.csa").write_bytes(b"")
    with open(os.fsencode(root) + b"/" + _cp932("壊れた.csa"), "wb") as f:
        f.write(b"PI\n+\n+9999FU\n")                      # an illegal move: an error naming the file
    out = tmp_path / "out"
    report = run_convert([root], out, SETTINGS, workers=1)
    assert report.converted == 5 and report.skipped == {"error": 2}, report     # broken.csa, 壊れた.csa
    table = shards.read_games(out / "train-00000.h5")
    got = dict(zip(table["source"], table[shards.KEY_SOURCE_RAW]))
    prefix = os.fsencode(root) + b"/"
    assert got == {f"{root}/good.csa": "", f"{root}/棋譜.csa": (prefix + _cp932("棋譜.csa")).hex(),
                   f"{root}/対局.csa": (prefix + "対局.csa".encode("euc_jp")).hex(),
                   f"{root}/\\xff\\xfe.csa": (prefix + b"\xff\xfe.csa").hex(),
                   f"{root}/windows.zip:先手/棋譜.csa":
                       (prefix + b"windows.zip:" + _cp932("先手/棋譜.csa")).hex()}
    for raw in raws:                                      # the bytes find the file again
        assert bytes.fromhex(got[names.from_bytes(prefix + raw).text] or (prefix + raw).hex()) == prefix + raw
        assert os.path.exists(prefix + raw)
    written = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    assert any(e.startswith(f"{root}/壊れた.csa:3: ") for e in written["errors"]), written["errors"]


def test_utf8_names_write_no_source_raw(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    (root / "棋譜.csa").write_bytes(GAMES[0].read_bytes())
    run_convert([root], tmp_path / "out", SETTINGS, workers=1)
    table = shards.read_games(tmp_path / "out" / "train-00000.h5")
    assert shards.KEY_SOURCE_RAW not in table and list(table["source"]) == [f"{root}/棋譜.csa"]


def test_an_input_named_in_cp932_goes_into_the_manifest_readably(tmp_path: Path) -> None:
    path = os.fsencode(tmp_path) + b"/" + _cp932("棋譜.csa")
    with open(path, "wb") as f:
        f.write(GAMES[0].read_bytes())
    run_convert([os.fsdecode(path)], tmp_path / "out", SETTINGS, workers=1)
    manifest = json.loads((tmp_path / "out" / shards.MANIFEST_NAME).read_text(encoding="utf-8"))
    assert manifest["settings"]["inputs"] == [f"{tmp_path}/棋譜.csa"]


def test_tar_member_names_in_euc_jp_are_decoded(tmp_path: Path) -> None:
    import io
    import tarfile

    game = GAMES[0].read_bytes()
    path = tmp_path / "old.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT, encoding="euc_jp") as t:
        info = tarfile.TarInfo("棋譜/対局.csa")
        info.size = len(game)
        t.addfile(info, io.BytesIO(game))
    assert list(iter_sources([path])) == [SourceFile(f"{path}:棋譜/対局.csa", game,
                                                     f"{path}:".encode() + "棋譜/対局.csa".encode("euc_jp"))]


def test_record_files_and_inspect_name_a_cp932_file_readably(tmp_path: Path) -> None:
    from shogi_dnn import kifu
    from shogi_dnn.analysis import inspect

    raw = os.fsencode(tmp_path) + b"/" + _cp932("棋譜.csa")
    with open(raw, "wb") as f:
        f.write(GAMES[0].read_bytes())
    items = list(kifu.read_record_file(os.fsdecode(raw)))
    assert [item.source.path for item in items] == [f"{tmp_path}/棋譜.csa"]
    summary = inspect.format_records_summary(os.fsdecode(raw), items)
    summary.encode("utf-8")                               # printable on a strict UTF-8 console
    assert summary.startswith(f"{tmp_path}/棋譜.csa: 1 game")
    assert inspect.records_summary_dict(os.fsdecode(raw), items)["input"] == f"{tmp_path}/棋譜.csa"
