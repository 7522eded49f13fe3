"""sources.iter_sources: files, folders (recursive, sorted), zip/tar/tar.gz/tar.xz/7z, errors as items."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from shogi_dnn.convert.sources import SourceFile, is_archive, iter_sources, list_files
from shogi_dnn.errors import KifuError

FILES = {"b/2.csa": b"PI\n+\n+7776FU\n%TORYO\n", "a.kif": b"kif bytes", "b/1.KI2": b"ki2 bytes",
         "b/c/deep.sfen": b"startpos moves 7g7f\n"}
EXPECTED_ORDER = ["a.kif", "b/1.KI2", "b/2.csa", "b/c/deep.sfen"]


def _tree(root: Path) -> Path:
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "README.md").write_text("not a record")
    (root / "b" / "SUMMARY.tsv").write_text("x\ty")
    return root


def _names_data(items) -> list[tuple[str, bytes]]:
    assert all(isinstance(i, SourceFile) for i in items), items
    return [(i.name, i.data) for i in items]


def test_folder_recursive_sorted_records_only(tmp_path: Path) -> None:
    root = _tree(tmp_path / "corpus")
    got = _names_data(list(iter_sources([root])))
    assert got == [(str(root / rel), FILES[rel]) for rel in EXPECTED_ORDER]
    assert list_files([root]) == [root / rel for rel in EXPECTED_ORDER]


def test_explicit_file_any_suffix_and_missing_input(tmp_path: Path) -> None:
    odd = tmp_path / "game.txt"
    odd.write_bytes(b"PI\n+\n")
    items = list(iter_sources([odd, tmp_path / "nope.csa"]))
    assert items[0] == SourceFile(str(odd), b"PI\n+\n")
    assert isinstance(items[1], KifuError) and "nope.csa:0: no such file" in str(items[1])


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for rel in reversed(EXPECTED_ORDER):
            z.writestr(rel, FILES[rel])
        z.writestr("README.md", "x")
    return path


def _tar(path: Path, mode: str) -> Path:
    with tarfile.open(path, mode) as t:
        for rel in EXPECTED_ORDER:
            info = tarfile.TarInfo(rel)
            info.size = len(FILES[rel])
            t.addfile(info, io.BytesIO(FILES[rel]))
        info = tarfile.TarInfo("README.md")
        info.size = 1
        t.addfile(info, io.BytesIO(b"x"))
    return path


@pytest.mark.parametrize("suffix,mode", [(".tar", "w"), (".tar.gz", "w:gz"), (".tar.xz", "w:xz")])
def test_tar_archives(tmp_path: Path, suffix: str, mode: str) -> None:
    archive = _tar(tmp_path / f"games{suffix}", mode)
    assert is_archive(archive.name)
    got = _names_data(list(iter_sources([archive])))
    assert got == [(f"{archive}:{rel}", FILES[rel]) for rel in EXPECTED_ORDER]


def test_zip_members_sorted(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "games.zip")
    got = _names_data(list(iter_sources([archive])))
    assert got == [(f"{archive}:{rel}", FILES[rel]) for rel in EXPECTED_ORDER]


def test_7z_archive(tmp_path: Path) -> None:
    py7zr = pytest.importorskip("py7zr")
    root = _tree(tmp_path / "src")
    archive = tmp_path / "games.7z"
    with py7zr.SevenZipFile(archive, "w") as z:
        for rel in EXPECTED_ORDER:
            z.write(root / rel, rel)
        z.write(root / "README.md", "README.md")
    got = _names_data(list(iter_sources([archive])))
    assert sorted(got) == [(f"{archive}:{rel}", FILES[rel]) for rel in EXPECTED_ORDER]


def test_7z_consumer_can_stop_early(tmp_path: Path) -> None:
    py7zr = pytest.importorskip("py7zr")
    archive = tmp_path / "many.7z"
    with py7zr.SevenZipFile(archive, "w") as z:
        for i in range(50):
            z.writestr(b"PI\n+\n", f"g{i:03d}.csa")
    gen = iter_sources([archive])
    first = next(gen)
    gen.close()   # must not hang on the extraction thread
    assert isinstance(first, SourceFile) and first.name.endswith(".csa")


def test_folder_with_archive_inside(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    root.mkdir()
    _zip(root / "z.zip")
    (root / "y.csa").write_bytes(b"PI\n+\n")
    names = [i.name for i in iter_sources([root])]
    assert names[0] == str(root / "y.csa") and names[1:] == [f"{root / 'z.zip'}:{r}" for r in EXPECTED_ORDER]


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz", ".7z"])
def test_corrupt_archive_is_one_error_item(tmp_path: Path, suffix: str) -> None:
    if suffix == ".7z":
        pytest.importorskip("py7zr")
    bad = tmp_path / f"bad{suffix}"
    bad.write_bytes(b"\x00garbage" * 10)
    items = list(iter_sources([bad, _zip(tmp_path / "good.zip")]))
    assert isinstance(items[0], KifuError) and str(items[0]).startswith(f"{bad}:0: ")
    assert len([i for i in items if isinstance(i, SourceFile)]) == len(EXPECTED_ORDER)


def test_truncated_tar_gz_yields_members_then_error(tmp_path: Path) -> None:
    big = {f"g{i:03d}.csa": bytes(range(256)) * 40 for i in range(40)}
    archive = tmp_path / "big.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for rel, data in big.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    raw = archive.read_bytes()
    archive.write_bytes(raw[: len(raw) // 2])
    items = list(iter_sources([archive]))
    assert isinstance(items[-1], KifuError) and str(archive) in str(items[-1])
    good = [i for i in items if isinstance(i, SourceFile)]
    assert all(i.data == big[i.name.split(":")[-1]] for i in good)


# -- hostile inputs: decompression bombs and bad symlinks --------------------------------------------

GOOD = b"PI\n+\n+7776FU\n-3334FU\n%TORYO\n"


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Caps lowered 64x (4 MiB members, ratio 100 past 64 KiB) so a bomb takes a few MiB, not a GiB."""
    from shogi_dnn.convert import sources

    monkeypatch.setattr(sources, "MAX_MEMBER_BYTES", 4 << 20)
    monkeypatch.setattr(sources, "RATIO_FLOOR_BYTES", 64 << 10)
    monkeypatch.setattr(sources, "_BLOCK", 64 << 10)


def _bomb_zip(path: Path, zeros: int) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.csa", GOOD)
        z.writestr("bomb.csa", bytes(zeros))            # zeros compress ~1000x
        z.writestr("c.csa", GOOD)
    return path


def _reasons(items) -> dict[str, str]:
    return {item.path if isinstance(item, KifuError) else item.name:
            item.reason if isinstance(item, KifuError) else "ok" for item in items}


def test_zip_bomb_is_skipped_with_a_reason_after_bounded_work(tmp_path: Path, small_caps: None) -> None:
    import tracemalloc

    path = _bomb_zip(tmp_path / "bomb.zip", 64 << 20)         # 64 MiB of zeros in a ~65 KB zip
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    got = _reasons(iter_sources([path]))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got[f"{path}:a.csa"] == got[f"{path}:c.csa"] == "ok"
    assert got[f"{path}:bomb.csa"].startswith("skipped: decompresses to more than")
    assert peak < 16 << 20                       # the member's 64 MiB were never held


def test_zip_member_over_the_size_cap_is_skipped_and_lying_headers_too(tmp_path: Path, small_caps: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from shogi_dnn.convert import sources

    monkeypatch.setattr(sources, "MAX_RATIO", 10**9)              # only the size cap
    path = _bomb_zip(tmp_path / "big.zip", 5 << 20)
    got = _reasons(iter_sources([path]))
    assert got[f"{path}:bomb.csa"] == ("skipped: decompresses to more than 4,194,304 bytes "
                                       "(sources.MAX_MEMBER_BYTES)")
    assert got[f"{path}:c.csa"] == "ok"
    # a header declaring a small size does not help: the stream is counted as it is read
    monkeypatch.setattr(sources, "_check_size", lambda size, compressed, real=sources._check_size:
                        None if size == 5 << 20 else real(size, compressed))
    assert _reasons(iter_sources([path]))[f"{path}:bomb.csa"].startswith("skipped: decompresses to more than")


def test_tar_gz_bomb_stops_the_archive_and_big_plain_tar_members_are_skipped(tmp_path: Path,
                                                                           small_caps: None) -> None:
    def tar(path: Path, mode: str) -> Path:
        with tarfile.open(path, mode) as t:
            for name, data in (("a.csa", GOOD), ("bomb.csa", bytes(8 << 20)), ("c.csa", GOOD)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        return path

    gz = tar(tmp_path / "bomb.tar.gz", "w:gz")
    got = _reasons(iter_sources([gz]))
    assert got[f"{gz}:a.csa"] == "ok" and f"{gz}:c.csa" not in got
    assert got[f"{gz}:bomb.csa"].endswith("the rest of the archive is not read")
    plain = tar(tmp_path / "big.tar", "w")
    got = _reasons(iter_sources([plain]))
    assert got[f"{plain}:a.csa"] == got[f"{plain}:c.csa"] == "ok"
    assert got[f"{plain}:bomb.csa"].startswith("skipped: decompresses to more than 4,194,304 bytes")


def test_7z_bomb_is_skipped(tmp_path: Path, small_caps: None) -> None:
    py7zr = pytest.importorskip("py7zr")
    path = tmp_path / "bomb.7z"
    with py7zr.SevenZipFile(path, "w") as z:
        z.writestr(GOOD, "a.csa")
        z.writestr(bytes(8 << 20), "bomb.csa")
    got = _reasons(iter_sources([path]))
    assert got[f"{path}:a.csa"] == "ok"
    assert got[f"{path}:bomb.csa"].startswith("skipped: decompresses to more than")


def test_looping_and_dangling_symlinks_are_skipped_while_the_rest_converts(tmp_path: Path) -> None:
    from shogi_dnn.convert.run import run_convert

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.csa").write_bytes(GOOD)
    (folder / "dangling.csa").symlink_to(folder / "nowhere.csa")
    (folder / "loop.csa").symlink_to(folder / "loop.csa")
    (folder / "link.csa").symlink_to(folder / "good.csa")          # a good link is read
    assert [p.name for p in list_files([folder])] == ["good.csa", "link.csa"]
    got = _reasons(iter_sources([folder]))
    assert got[str(folder / "dangling.csa")].startswith("skipped: dangling symlink")
    assert got[str(folder / "loop.csa")].startswith("skipped: symlink loop")
    assert got[str(folder / "good.csa")] == got[str(folder / "link.csa")] == "ok"
    assert _reasons(iter_sources([folder / "loop.csa"]))[str(folder / "loop.csa")].startswith("skipped: symlink")
    report = run_convert([folder], tmp_path / "out", workers=1)
    # good.csa and link.csa hold the same game: one converted, the copy dropped as a duplicate (--dedup)
    assert report.converted == 1 and report.skipped == {"duplicate": 1} and report.files_unreadable == 2
    assert any("dangling symlink" in e for e in report.errors) and any("symlink loop" in e for e in report.errors)


def test_a_folder_symlinked_inside_an_input_is_reported_not_followed(tmp_path: Path) -> None:
    # It was skipped without a word (os.walk does not follow it); a folder given as an input still is.
    from shogi_dnn.convert.run import run_convert

    folder, elsewhere = tmp_path / "in", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "good.csa").write_bytes(GOOD)
    (elsewhere / "more.csa").write_bytes(GOOD)
    (folder / "linked").symlink_to(elsewhere)
    assert [p.name for p in list_files([folder])] == ["good.csa"]
    reason = _reasons(iter_sources([folder]))[str(folder / "linked")]
    assert reason == (f"skipped: a symlink to a folder ({elsewhere}), not followed; give the folder as an "
                      "input to convert it")
    assert _reasons(iter_sources([folder / "linked"]))[str(folder / "linked" / "more.csa")] == "ok"
    report = run_convert([folder], tmp_path / "out", workers=1)
    assert report.converted == 1 and report.files_unreadable == 1
    assert report.inputs_skipped == {"bad_symlink": 1} and any(reason in e for e in report.errors)


# -- archives inside archives ---------------------------------------------------------------------------


def _zip_bytes(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buffer.getvalue()


def _tar_bytes(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_nested_zip_and_tar_members_are_read_in_order(tmp_path: Path) -> None:
    inner_zip = _zip_bytes({"z2.csa": b"z2", "z1.kif": b"z1", "README.md": b"x"})
    inner_tgz = _tar_bytes({"t1.csa": b"t1", "deeper.zip": _zip_bytes({"d.csa": b"d"})})
    path = tmp_path / "outer.zip"
    path.write_bytes(_zip_bytes({"a.csa": b"a", "in/b.zip": inner_zip, "c.tar.gz": inner_tgz}))
    got = _names_data(list(iter_sources([path])))
    assert got == [(f"{path}:a.csa", b"a"), (f"{path}:c.tar.gz:t1.csa", b"t1"),
                   (f"{path}:c.tar.gz:deeper.zip:d.csa", b"d"),
                   (f"{path}:in/b.zip:z1.kif", b"z1"), (f"{path}:in/b.zip:z2.csa", b"z2")]
    outer_tar = tmp_path / "outer.tar"
    outer_tar.write_bytes(_tar_bytes({"b.zip": inner_zip}, "w"))
    assert _names_data(list(iter_sources([outer_tar]))) == [(f"{outer_tar}:b.zip:z1.kif", b"z1"),
                                                             (f"{outer_tar}:b.zip:z2.csa", b"z2")]


def test_nested_7z_both_ways(tmp_path: Path) -> None:
    py7zr = pytest.importorskip("py7zr")
    seven = tmp_path / "inner.7z"
    with py7zr.SevenZipFile(seven, "w") as z:
        z.writestr(b"s", "s.csa")
        z.writestr(_zip_bytes({"q.csa": b"q"}), "q.zip")
    outer = tmp_path / "outer.zip"
    outer.write_bytes(_zip_bytes({"inner.7z": seven.read_bytes()}, zipfile.ZIP_STORED))
    assert sorted(_names_data(list(iter_sources([outer])))) == [(f"{outer}:inner.7z:q.zip:q.csa", b"q"),
                                                                (f"{outer}:inner.7z:s.csa", b"s")]
    assert sorted(_names_data(list(iter_sources([seven])))) == [(f"{seven}:q.zip:q.csa", b"q"),
                                                                (f"{seven}:s.csa", b"s")]


def test_an_archive_nested_too_deep_is_skipped_with_a_reason_the_report_counts(tmp_path: Path) -> None:
    from shogi_dnn.convert import sources
    from shogi_dnn.convert.run import run_convert

    level4 = _zip_bytes({"deep.csa": GOOD})
    level3 = _zip_bytes({"l4.zip": level4, "three.csa": GOOD.replace(b"3334", b"8384")})
    level2 = _zip_bytes({"l3.zip": level3})
    path = tmp_path / "l1.zip"
    path.write_bytes(_zip_bytes({"l2.zip": level2}))
    assert sources.MAX_NESTING == 3
    got = _reasons(iter_sources([path]))
    assert got == {f"{path}:l2.zip:l3.zip:three.csa": "ok",
                   f"{path}:l2.zip:l3.zip:l4.zip":
                       "skipped: an archive nested 4 deep (sources.MAX_NESTING is 3)"}
    report = run_convert([path], tmp_path / "out", workers=1)
    assert report.converted == 1 and report.files_unreadable == 1
    assert report.inputs_skipped == {sources.SKIP_NESTED_TOO_DEEP: 1}
    assert report.errors == [(f"{path}:l2.zip:l3.zip:l4.zip:0: skipped: an archive nested 4 deep "
                              "(sources.MAX_NESTING is 3)")]
    assert "1 unreadable: nested_too_deep 1" in report.summary()


def test_nested_member_caps_apply(tmp_path: Path, small_caps: None) -> None:
    path = tmp_path / "outer.zip"
    path.write_bytes(_zip_bytes({"inner.zip": _bomb_zip(tmp_path / "bomb.zip", 3 << 20).read_bytes()},
                                zipfile.ZIP_STORED))
    got = _reasons(iter_sources([path]))
    assert got[f"{path}:inner.zip:a.csa"] == got[f"{path}:inner.zip:c.csa"] == "ok"
    assert got[f"{path}:inner.zip:bomb.csa"].startswith("skipped: decompresses to more than 100 times")


def _ratio_78(seed: int) -> bytes:
    """640 KiB that deflate packs about 78x: under MAX_RATIO alone, and past the 64 KiB floor."""
    import random

    rnd = random.Random(seed)
    return b"".join(bytes([rnd.randrange(256)]) + bytes(300) for _ in range(640 * 1024 // 301))


def test_nesting_does_not_multiply_the_ratio_cap(tmp_path: Path, small_caps: None) -> None:
    """40 copies of one 8 KB tar.gz, each 640 KiB inside (78x), in a tar.gz that packs the copies 30x:
    no member passes MAX_RATIO, yet 25 MiB would come out of 12 KB. The input's budget stops it."""
    inner = _tar_bytes({"g.csa": _ratio_78(1)})
    path = tmp_path / "top.tar.gz"
    path.write_bytes(_tar_bytes({f"in-{i:02d}.tar.gz": inner for i in range(40)}))
    assert path.stat().st_size < 20_000 and len(inner) * 40 < 100 * path.stat().st_size
    got = _reasons(iter_sources([path]))
    read = [name for name, reason in got.items() if reason == "ok"]
    assert 1 <= len(read) <= 3 and len(got) == 40
    first_refused = f"{path}:in-{len(read):02d}.tar.gz:g.csa"
    assert got[first_refused].startswith(f"skipped: the archives nested in {path} decompress to more "
                                         "than 100")
    assert got[first_refused].endswith(f"the rest of {path}:in-{len(read):02d}.tar.gz is not read")
    assert got[f"{path}:in-39.tar.gz"].endswith("; not read")


def test_tar_links_devices_and_fifos_are_skipped_with_a_reason(tmp_path: Path) -> None:
    """Tar members with a record's name that are not regular files are items with a reason (counted and
    listed by convert), not dropped without a word; folders and non-record names stay silent."""
    archive = tmp_path / "games.tar"
    game = FILES["b/2.csa"]
    special = {"sym.csa": (tarfile.SYMTYPE, "a.csa"), "hard.csa": (tarfile.LNKTYPE, "a.csa"),
               "fifo.csa": (tarfile.FIFOTYPE, ""), "tty.kif": (tarfile.CHRTYPE, ""),
               "disk.ki2": (tarfile.BLKTYPE, ""), "link-to-readme": (tarfile.SYMTYPE, "README.md")}
    with tarfile.open(archive, "w") as t:
        info = tarfile.TarInfo("a.csa")
        info.size = len(game)
        t.addfile(info, io.BytesIO(game))
        folder = tarfile.TarInfo("sub.csa")
        folder.type = tarfile.DIRTYPE
        t.addfile(folder)
        for name, (kind, target) in special.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            t.addfile(info)
    items = list(iter_sources([archive]))
    assert items[0] == SourceFile(f"{archive}:a.csa", game)
    reasons = {e.path: e.reason for e in items[1:] if isinstance(e, KifuError)}
    assert len(reasons) == len(items) - 1 == 5, items
    assert reasons == {
        f"{archive}:sym.csa": "skipped: a symbolic link to 'a.csa' in the archive, not a regular file",
        f"{archive}:hard.csa": "skipped: a hard link to 'a.csa' in the archive (read there, if a record), "
                               "not a regular file",
        f"{archive}:fifo.csa": "skipped: a FIFO (named pipe) in the archive, not a regular file",
        f"{archive}:tty.kif": "skipped: a character device in the archive, not a regular file",
        f"{archive}:disk.ki2": "skipped: a block device in the archive, not a regular file"}


def test_tar_special_members_are_counted_and_named_in_the_report(tmp_path: Path) -> None:
    import json

    from shogi_dnn.convert.run import ConvertSettings, run_convert

    archive = tmp_path / "games.tar"
    game = FILES["b/2.csa"]
    with tarfile.open(archive, "w") as t:
        info = tarfile.TarInfo("a.csa")
        info.size = len(game)
        t.addfile(info, io.BytesIO(game))
        link = tarfile.TarInfo("b.csa")
        link.type, link.linkname = tarfile.SYMTYPE, "a.csa"
        t.addfile(link)
    out = tmp_path / "out"
    run_convert([archive], out, ConvertSettings(val_fraction=0.0), workers=1)
    report = json.loads((out / "convert-report.json").read_text(encoding="utf-8"))
    assert report["files_read"] == 1 and report["files_unreadable"] == 1 and report["converted"] == 1
    expected = f"{archive}:b.csa:0: skipped: a symbolic link to 'a.csa' in the archive, not a regular file"
    assert report["errors"] == [expected]
