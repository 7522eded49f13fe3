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
