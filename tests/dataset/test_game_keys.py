"""The games a run trained on (dataset/game_keys.py): one key per game from its start position and moves,
the same whatever the split, row order or folder; RUN/trained-games.npz's format (the module's table), the
union on a change of data, and a damaged file refused in one line. No TensorFlow."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import features, game_keys, identity, shards
from shogi_dnn.errors import RunError
from shogi_dnn.kifu.record import GameRecord
from tests.support.kifugen import write_corpus


def convert(records: Path, out: Path, val_fraction: float, row_order: str = "game") -> shards.Manifest:
    run_convert([records], out, ConvertSettings(val_fraction=val_fraction, row_order=row_order), workers=1,
                overwrite=True)
    return shards.read_manifest(out)


def record_key(record: GameRecord) -> int:
    """The key from the record itself (not the shards): its moves encoded from the mover's view, then
    MOVE_NONE for the final position, as convert writes the `move` column."""
    turn = 0 if record.start_sfen.split()[1] == "b" else 1
    codes = []
    for ply, usi in enumerate(record.moves):
        codes.append(features.encode_move(usi, (turn + ply) % 2))
    codes.append(int(features.MOVE_NONE))
    payload = record.start_sfen.encode() + b"\n" + np.array(codes, dtype="<u2").tobytes()
    return int.from_bytes(hashlib.sha1(payload).digest()[:8], "big")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("keys")
    games = write_corpus(root / "records", seed=4, files=2, per_file=10)            # 20 games
    other = write_corpus(root / "other", seed=5, files=1, per_file=6)               # 6 other games
    return {"games": games, "other": other, "a": convert(root / "records", root / "a", 0.25),
            "b": convert(root / "records", root / "b", 0.5, "shuffled"),
            "c": convert(root / "other", root / "c", 0.25)}


def keyset(manifest: shards.Manifest, splits: tuple[str, ...] = shards.SPLITS) -> set[int]:
    return set(game_keys.split_keys(manifest, splits).keys.tolist())


def test_a_game_has_one_key_whatever_its_split_order_or_folder(corpora: dict) -> None:
    a, b, c = corpora["a"], corpora["b"], corpora["c"]
    every = game_keys.split_keys(a, shards.SPLITS)
    assert every.games == 20 and len(set(every.keys.tolist())) == 20
    assert int(every.positions.sum()) == sum(s.positions for s in a.shards)
    # The keys are those of the records (start position and moves), not of the shards' layout.
    assert set(every.keys.tolist()) == {record_key(g) for g in corpora["games"]}
    # The same records with another split and a shuffled row order: the same 20 keys, split differently.
    assert keyset(b) == keyset(a) and keyset(b, ("validation",)) != keyset(a, ("validation",))
    moved = keyset(b, ("validation",)) & keyset(a, ("train",))
    assert 0 < len(moved) == len(keyset(b, ("validation",)) - keyset(a, ("validation",)))
    # Other records: no key in common.
    assert keyset(c) and not keyset(c) & keyset(a)


def test_trained_games_file(corpora: dict, tmp_path: Path) -> None:
    a, c = corpora["a"], corpora["c"]
    run = tmp_path / "run"
    run.mkdir()
    assert game_keys.read_trained_games(run) is None                       # a run from before the file
    trained = game_keys.write_trained_games(run, a)
    path = run / "trained-games.npz"
    with np.load(path, allow_pickle=False) as data:                        # the module docstring's table
        assert sorted(data.files) == ["keys", "manifests", "version"]
        keys = data["keys"]
        assert keys.dtype == np.uint64 and keys.ndim == 1 and data["version"] == 1
        assert list(data["manifests"]) == [identity.manifest_digest(a)]
    assert keys.tolist() == sorted(keyset(a, ("train",))) == trained.keys.tolist()
    # A resume on the same data writes nothing; on other data (--data-changed) the union is recorded.
    before = path.stat().st_mtime_ns
    assert game_keys.write_trained_games(run, a).digest() == trained.digest()
    assert path.stat().st_mtime_ns == before
    both = game_keys.write_trained_games(run, c)
    assert both.keys.tolist() == sorted(keyset(a, ("train",)) | keyset(c, ("train",)))
    assert game_keys.read_trained_games(run).manifests == (identity.manifest_digest(a), identity.manifest_digest(c))
    # The overlap of a scored split with them: games and positions.
    scored = game_keys.split_keys(corpora["b"], ("validation",))
    hit = game_keys.overlap(scored, trained)
    assert hit.games == scored.games and hit.trained_games == len(keyset(corpora["b"], ("validation",))
                                                                  & keyset(a, ("train",)))
    assert 0 < hit.trained_positions < hit.positions == int(scored.positions.sum())
    # A damaged file: one line naming it.
    for damaged in (b"not a zip", b""):                  # b"": numpy's EOFError, a traceback before
        path.write_bytes(damaged)
        with pytest.raises(RunError, match=f"^{path}: not a trained-games file .*delete it to check by data"):
            game_keys.read_trained_games(run)


def test_a_run_without_the_file_reads_its_games_from_unchanged_data(corpora: dict, tmp_path: Path) -> None:
    a, c = corpora["a"], corpora["c"]
    ident_a, ident_c = (identity.dataset_identity(m).to_dict() for m in (a, c))
    trained = game_keys.trained_games_from_datasets([ident_a, ident_c])        # resumed from a onto c
    assert trained is not None and trained.keys.tolist() == sorted(keyset(a, ("train",)) | keyset(c, ("train",)))
    assert trained.manifests == (ident_a["manifest"], ident_c["manifest"])
    changed = {**ident_a, "manifest": "0" * 64}                                 # converted again since
    assert game_keys.trained_games_from_datasets([changed]) is None
    assert game_keys.trained_games_from_datasets([{**ident_a, "data_dir": str(tmp_path / "gone")}]) is None
    assert game_keys.trained_games_from_datasets([None]) is None                # no identity recorded
    assert game_keys.trained_games_from_datasets([{"data_dir": "/old"}, ident_c]) is None
