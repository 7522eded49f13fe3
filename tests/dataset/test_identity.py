"""identity.py: a dataset's identity (manifest digest, games digest per split) from a real convert, and what
compare says when the folder is converted again with other shard settings or another --val-fraction."""

from __future__ import annotations

from pathlib import Path

import pytest

from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import identity, shards
from tests.support.kifugen import write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("records")
    write_corpus(root, seed=5, files=4, per_file=8)          # 32 games
    return root


def convert(records: Path, out: Path, **settings: object) -> identity.DatasetIdentity:
    run_convert([records], out, ConvertSettings(**settings), workers=1, overwrite=True)
    return identity.dataset_identity(shards.read_manifest(out))


def test_identity_of_a_converted_folder(corpus: Path, tmp_path: Path) -> None:
    ident = convert(corpus, tmp_path / "d", val_fraction=0.25, shard_size=200)
    manifest = shards.read_manifest(tmp_path / "d")
    assert ident.data_dir == str((tmp_path / "d").resolve())
    assert set(ident.splits) == {"train", "validation"}                # no test split asked for
    for name, split in ident.splits.items():
        assert split.games == sum(s.games for s in manifest.split(name)) > 0
        assert split.positions == sum(s.positions for s in manifest.split(name))
    assert ident.splits["train"].digest != ident.splits["validation"].digest
    assert identity.DatasetIdentity.from_dict(ident.to_dict()) == ident
    assert ident.describe(["validation"]) == (f"manifest {ident.manifest[:8]}, validation "
                                              f"{ident.splits['validation'].games} games")
    with pytest.raises(ValueError, match="not a dataset identity"):
        identity.DatasetIdentity.from_dict({"manifest": "x"})


def test_other_shard_settings_keep_the_split_other_fraction_changes_it(corpus: Path, tmp_path: Path) -> None:
    first = convert(corpus, tmp_path / "d", val_fraction=0.25, shard_size=200)
    assert identity.compare(first.to_dict(), first).status == "same"
    assert identity.compare(None, first).status == "unknown"
    # The same games in each split, in other shards (smaller, rows shuffled): another manifest, same splits.
    reshaped = convert(corpus, tmp_path / "d", val_fraction=0.25, shard_size=60, row_order="shuffled")
    assert reshaped.manifest != first.manifest
    assert {n: s.digest for n, s in reshaped.splits.items()} == {n: s.digest for n, s in first.splits.items()}
    assert identity.compare(first.to_dict(), reshaped, ["validation"]).status == "same"
    whole = identity.compare(first.to_dict(), reshaped)                  # train --resume: the shards matter
    assert whole.changed and "its shards changed, the same games in each split" in whole.detail
    # Another --val-fraction: other games in validation (and in train).
    refraction = convert(corpus, tmp_path / "d", val_fraction=0.5, shard_size=200)
    check = identity.compare(first.to_dict(), refraction, ["validation"])
    assert check.changed
    d = tmp_path / "d"
    v0, v1 = first.splits["validation"].games, refraction.splits["validation"].games
    assert check.detail == (f"dataset {d.resolve()} (manifest {first.manifest[:8]}, validation {v0} games); "
                            f"{d.resolve()} now has manifest {refraction.manifest[:8]}, validation {v1} games: "
                            "its validation split changed (re-converted?)")
    assert identity.refusal("runs/x", check, "--allow-changed-data", "score anyway").startswith(
        f"runs/x was trained on dataset {d.resolve()} (manifest {first.manifest[:8]}")


def test_another_folder_is_named_as_another_dataset(corpus: Path, tmp_path: Path) -> None:
    a = convert(corpus, tmp_path / "a", val_fraction=0.25)
    b = convert(corpus, tmp_path / "b", val_fraction=0.25)                # a copy: same games, same shards
    assert identity.compare(a.to_dict(), b, ["validation"]).status == "same"
    c = convert(corpus, tmp_path / "c", val_fraction=0.4)
    check = identity.compare(a.to_dict(), c, ["validation"])
    assert check.changed and f"{(tmp_path / 'c').resolve()} has manifest" in check.detail
    assert check.detail.endswith("another dataset, or its validation split changed")
