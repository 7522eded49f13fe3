"""The HDF5 shard format is pinned here: changing it must bump SCHEMA_VERSION and this test."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from shogi_dnn.dataset import features, shards
from shogi_dnn.errors import ShardFormatError
from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
from tests.support.kifugen import random_moves

PINNED_STORED = {
    "pieces": ((40,), "uint8"), "promoted": ((5,), "uint8"), "turn": ((), "uint8"), "ply": ((), "int16"),
    "move": ((), "uint16"), "win": ((), "float32"), "game": ((), "int32"),
}
PINNED_POSITIONS = {
    "board": ((81,), "uint8"), "hands": ((14,), "uint8"), "turn": ((), "uint8"), "ply": ((), "int16"),
    "move": ((), "uint16"), "win": ((), "float32"), "game": ((), "int32"), "eval": ((), "int16"),
}
PINNED_OPTIONAL = {"eval": ((), "int16", -32768)}
PINNED_GAMES = ["game_id", "source", "line", "black", "white", "black_rating", "white_rating", "winner",
                "ending", "num_moves", "start_sfen"]


def make_shard_inputs(num_games: int = 3, seed: int = 0) -> tuple[dict, dict]:
    """Positions and games columns of a few random games, as convert would pass them."""
    encoded, games = [], {key: [] for key in shards.GAME_SCHEMA}
    for g in range(num_games):
        moves = random_moves(seed + g, max_plies=40)
        rec = GameRecord(STANDARD_START_SFEN, tuple(moves), Winner.BLACK, Ending.RESIGN,
                         SourceLine(f"g{g}.csa", 1), "csa", black="b", white="w", black_rating=1500.0)
        enc = features.encode_game(rec)
        encoded.append((g, enc))
        row = dict(game_id=g, source=f"g{g}.csa", line=1, black="b", white="w", black_rating=1500.0,
                   white_rating=np.nan, winner="black", ending="resign", num_moves=len(moves),
                   start_sfen=STANDARD_START_SFEN)
        for key, value in row.items():
            games[key].append(value)
    positions = {key: np.concatenate([getattr(e, key) for _, e in encoded])
                 for key in ("board", "hands", "turn", "ply", "move", "win")}
    positions["game"] = np.concatenate([np.full(len(e), g, np.int32) for g, e in encoded])
    return positions, games


def test_schema_is_pinned() -> None:
    assert shards.SCHEMA_VERSION == 3
    got = {k: (shape, dtype.name) for k, (shape, dtype) in shards.STORED_SCHEMA.items()}
    assert got == PINNED_STORED
    got = {k: (shape, dtype.name) for k, (shape, dtype) in shards.POSITION_SCHEMA.items()}
    assert got == PINNED_POSITIONS
    got = {k: (shape, dtype.name, absent) for k, (shape, dtype, absent) in shards.OPTIONAL_SCHEMA.items()}
    assert got == PINNED_OPTIONAL and features.EVAL_NONE == -32768
    assert list(shards.GAME_SCHEMA) == PINNED_GAMES
    assert shards.CHUNK_ROWS == 4096


def test_written_file_matches_schema(tmp_path) -> None:
    positions, games = make_shard_inputs()
    n = len(positions["win"])
    digest = shards.write_shard(tmp_path / "train-00000.h5", "train", positions, games)
    assert digest == shards.file_sha256(tmp_path / "train-00000.h5")
    assert not list(tmp_path.glob("*.tmp"))
    with h5py.File(tmp_path / "train-00000.h5", "r") as f:
        assert dict(f.attrs) == {"schema_version": 3, "split": "train", "num_positions": n, "num_games": 3}
        assert sorted(k for k in f if k != "games") == sorted(PINNED_STORED)
        for key, (shape, dtype) in PINNED_STORED.items():
            assert f[key].shape == (n, *shape) and f[key].dtype == np.dtype(dtype)
            # shuffle, zstd, fletcher32
            assert [code for code, _ in shards.filter_pipeline(f[key])] == [2, 32015, 3]
        assert sorted(f["games"]) == sorted(PINNED_GAMES)
    back = shards.read_positions(tmp_path / "train-00000.h5")
    for key in PINNED_STORED.keys() & PINNED_POSITIONS.keys() | {"board", "hands"}:
        assert np.array_equal(back.arrays[key], positions[key])
    assert (back.arrays["eval"] == features.EVAL_NONE).all() and back.arrays["eval"].dtype == np.int16
    table = shards.read_games(tmp_path / "train-00000.h5")
    assert list(table["source"]) == ["g0.csa", "g1.csa", "g2.csa"]
    assert np.isnan(table["white_rating"]).all() and (table["black_rating"] == 1500).all()


# The chunk filters of each `convert --compression`, as written in the file: the HDF5 filter ids in pipeline
# order (2 shuffle, 1 deflate, 32000 lzf, 32015 zstd, 3 fletcher32) and the compressor's level. Pinned, as
# the bytes are.
PINNED_COMPRESSIONS = {"zstd": ((2, 32015, 3), 1), "gzip": ((2, 1, 3), 4), "lzf": ((32000, 3), None),
                       "none": ((3,), None)}


def test_every_compression_reads_back_the_same_rows_checksummed(tmp_path) -> None:
    """zstd (the default), gzip, lzf and none: the filters written, fletcher32 on every position dataset,
    the same rows through every reader, ordered by size; a shard's compression is read back from its file."""
    positions, games = make_shard_inputs()
    positions["eval"] = np.arange(len(positions["win"]), dtype=np.int16)
    assert shards.DEFAULT_COMPRESSION == "zstd"
    assert list(shards.COMPRESSIONS) == list(PINNED_COMPRESSIONS)
    size = {}
    for name, (pipeline, level) in PINNED_COMPRESSIONS.items():
        path = tmp_path / f"{name}.h5"
        digest = shards.write_shard(path, "train", positions, games, chunk_rows=16, compression=name)
        assert digest == shards.file_sha256(path)
        with shards.open_shard(path) as f:
            size[name] = sum(f[key].id.get_storage_size() for key in PINNED_STORED)    # the chunks' bytes
            assert shards.shard_compression(f) == name
            for key in (*PINNED_STORED, "eval"):
                filters = shards.filter_pipeline(f[key])
                assert tuple(code for code, _ in filters) == pipeline, (name, key)
                if level is not None:
                    assert filters[1][1] == (level,), (name, key)
                assert f[key].fletcher32 and f[key].chunks[0] == 16
        back = shards.read_positions(path)
        for key in PINNED_POSITIONS:
            assert np.array_equal(back.arrays[key], positions[key]), (name, key)
    assert size["zstd"] < size["lzf"] < size["none"] and size["gzip"] < size["lzf"]
    with pytest.raises(ValueError, match="compression 'xz': expected one of zstd, gzip, lzf, none"):
        shards.write_shard(tmp_path / "x.h5", "train", positions, games, compression="xz")
    assert not (tmp_path / "x.h5").exists()


@pytest.fixture
def zstd_shard(tmp_path_factory: pytest.TempPathFactory):
    """A shard written with --compression zstd (make_shard_inputs)."""
    path = tmp_path_factory.mktemp("zstd") / "train-00000.h5"
    shards.write_shard(path, "train", *make_shard_inputs(), compression="zstd")
    return path


@pytest.fixture
def without_zstd(monkeypatch: pytest.MonkeyPatch):
    """This process's HDF5 without the Zstd filter, as when hdf5plugin is not installed."""
    import hdf5plugin
    monkeypatch.setattr(shards, "PLUGIN_LOADED", False)
    h5py.h5z.unregister_filter(shards.ZSTD_FILTER)
    try:
        yield
    finally:
        assert hdf5plugin.register("zstd", force=True)


def test_a_zstd_shard_without_the_plugin_is_one_line_saying_how_to_fix_it(tmp_path, zstd_shard,
                                                                          without_zstd) -> None:
    """Not "damaged": open_shard names the missing filter and the package; writing zstd is refused, gzip
    shards are written and read."""
    positions, games = make_shard_inputs()
    expected = (f"{zstd_shard}: dataset 'pieces' is compressed with zstd, which cannot be read here: its "
                "HDF5 filter comes with hdf5plugin, which is not installed (pip install hdf5plugin)")
    with pytest.raises(ShardFormatError) as caught:
        shards.read_positions(zstd_shard)
    assert str(caught.value) == expected
    with pytest.raises(ValueError, match=r"compression 'zstd': .*\(pip install hdf5plugin\)"):
        shards.write_shard(tmp_path / "x.h5", "train", positions, games, compression="zstd")
    shards.write_shard(tmp_path / "gzip.h5", "train", positions, games, compression="gzip")
    assert np.array_equal(shards.read_positions(tmp_path / "gzip.h5").arrays["board"], positions["board"])


@pytest.mark.parametrize("name", ["zstd", "lzf", "none"])
def test_a_damaged_chunk_is_an_error_with_any_compression(tmp_path, name) -> None:
    """The checksums stay without compression: a flipped byte is refused, never returned as data."""
    positions, games = make_shard_inputs()
    path = tmp_path / "train-00000.h5"
    shards.write_shard(path, "train", positions, games, chunk_rows=16, compression=name)
    flip_chunk_byte(path, "pieces", 1)
    with shards.open_shard(path) as f:
        shards.read_rows(f, 0, 16, ("board",))
        with pytest.raises(OSError, match="filter returned failure"):
            shards.read_rows(f, 16, 32, ("board",))


def test_a_manifest_names_its_compression_gzip_when_it_does_not_say(tmp_path) -> None:
    for settings, expected in (({}, "gzip"), ({"compression": "lzf"}, "lzf"),
                               ({"compression": "zstd"}, "zstd")):
        shards.write_manifest(tmp_path, [], settings, {})
        assert shards.read_manifest(tmp_path).compression == expected


def test_same_input_gives_byte_identical_shards(tmp_path) -> None:
    positions, games = make_shard_inputs()
    a = shards.write_shard(tmp_path / "a.h5", "train", positions, games)
    b = shards.write_shard(tmp_path / "b.h5", "train", positions, games)
    assert a == b


def test_eval_is_optional_and_stored_only_when_some_position_has_one(tmp_path) -> None:
    positions, games = make_shard_inputs()
    n = len(positions["win"])
    plain = shards.write_shard(tmp_path / "plain.h5", "train", positions, games, chunk_rows=16)
    none = np.full(n, features.EVAL_NONE, np.int16)
    assert shards.write_shard(tmp_path / "none.h5", "train", {**positions, "eval": none}, games,
                              chunk_rows=16) == plain             # all EVAL_NONE: not stored, same bytes
    evals = none.copy()
    evals[::3] = np.arange(0, n, 3) - 40
    shards.write_shard(tmp_path / "some.h5", "train", {**positions, "eval": evals}, games, chunk_rows=16)
    with h5py.File(tmp_path / "some.h5", "r") as f:
        assert f["eval"].dtype == np.int16 and f["eval"].chunks == f["win"].chunks == (16,)
        assert [code for code, _ in shards.filter_pipeline(f["eval"])] == [2, 32015, 3]
    with h5py.File(tmp_path / "plain.h5", "r") as f:
        assert "eval" not in f
    for name, want in (("plain.h5", none), ("some.h5", evals)):
        with shards.open_shard(tmp_path / name) as f:
            rows = shards.read_rows(f, 5, 30, ("eval", "win"))
            np.testing.assert_array_equal(rows["eval"], want[5:30])
            assert rows["eval"].dtype == np.int16 and len(shards.read_rows(f, 0, None, ("eval",))["eval"]) == n
            assert len(shards.read_stored(f, "eval", n - 2, n + 5)) == 2
    with h5py.File(tmp_path / "some.h5", "a") as f:
        del f["eval"]
        f.create_dataset("eval", data=np.zeros(n, np.float32))
    with pytest.raises(ShardFormatError, match="some.h5: optional dataset 'eval' is not int16"):
        shards.open_shard(tmp_path / "some.h5")


def test_bad_files_are_rejected_with_the_path(tmp_path) -> None:
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5")
    with pytest.raises(ShardFormatError, match="junk.h5"):
        shards.open_shard(junk)
    old = tmp_path / "old.h5"
    with h5py.File(old, "w") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(ShardFormatError, match="schema_version 99"):
        shards.read_positions(old)
    with h5py.File(old, "w") as f:
        f.attrs["schema_version"] = 1
    with pytest.raises(ShardFormatError, match="schema_version 1, this version reads 3 .*convert"):
        shards.read_positions(old)
    with h5py.File(old, "w") as f:         # schema 2: no chunk checksums
        f.attrs["schema_version"] = 2
    with pytest.raises(ShardFormatError, match=r"old.h5: schema_version 2, this version reads 3 \(written by an "
                                               r"older shogi-dnn: run `shogi-dnn convert` on the records again\)$"):
        shards.read_positions(old)


def test_stored_row_is_compact_and_reads_back_as_board_and_hands(tmp_path) -> None:
    """58 bytes a position raw (45 of them the packed position, dlshogi's records take 32 for it);
    readers get board and hands back, any subset of keys, in the order asked."""
    raw = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in shards.STORED_SCHEMA.values())
    assert raw == 58
    positions, games = make_shard_inputs(num_games=4, seed=7)
    shards.write_shard(tmp_path / "s.h5", "train", positions, games, chunk_rows=16)
    with shards.open_shard(tmp_path / "s.h5") as f:
        rows = shards.read_rows(f, 20, 50, ("hands", "win", "board"))
        assert list(rows) == ["hands", "win", "board"]
        np.testing.assert_array_equal(rows["board"], positions["board"][20:50])
        np.testing.assert_array_equal(rows["hands"], positions["hands"][20:50])
        assert list(shards.read_rows(f, 0, 3, ("ply",))) == ["ply"]
    assert shards.stored_keys(("board", "ply", "hands")) == ("pieces", "promoted", "ply")


def test_manifest_round_trip_and_errors(tmp_path) -> None:
    info = shards.ShardInfo("train-00000.h5", "train", 10, 2, "ab" * 32)
    shards.write_manifest(tmp_path, [info], {"shard_size": 10}, {"positions": 10})
    manifest = shards.read_manifest(tmp_path)
    assert manifest.shards == (info,) and manifest.split("train") == (info,) and manifest.split("validation") == ()
    assert manifest.shard_path(info) == tmp_path / "train-00000.h5"
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(ShardFormatError, match="corrupt manifest"):
        shards.read_manifest(tmp_path)
    with pytest.raises(ShardFormatError, match="no manifest"):
        shards.read_manifest(tmp_path / "nowhere")
    data = {"schema_version": 4, "shards": []}
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ShardFormatError, match="schema_version 4"):
        shards.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 2, "shards": []}))
    with pytest.raises(ShardFormatError, match="schema_version 2.*convert"):
        shards.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 1, "shards": []}))
    with pytest.raises(ShardFormatError, match="schema_version 1.*convert"):
        shards.read_manifest(tmp_path)


def _dataset(root, sizes=((0, 3), (1, 4))):
    """Two shards of a small dataset with their manifest (entries with size and game ids, as convert writes)."""
    infos, game = [], 0
    for index, (seed, games_count) in enumerate(sizes):
        positions, games = make_shard_inputs(num_games=games_count, seed=seed)
        games["game_id"] = [game + g for g in games["game_id"]]
        positions["game"] = positions["game"] + game
        game += games_count
        path = root / f"train-{index:05d}.h5"
        digest = shards.write_shard(path, "train", positions, games, chunk_rows=16)
        infos.append(shards.shard_info(path, "train", len(positions["win"]), games_count, digest, games["game_id"]))
    shards.write_manifest(root, infos, {}, {})
    return shards.read_manifest(root)


def flip_chunk_byte(path, key="pieces", chunk=1) -> None:
    """Flip one byte in the middle of a stored chunk (damage on disk or in a copy)."""
    with h5py.File(path, "r") as f:
        info = f[key].id.get_chunk_info(chunk)
    data = bytearray(path.read_bytes())
    data[info.byte_offset + info.size // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_verify_shards_names_the_shard_and_what_differs(tmp_path) -> None:
    manifest = _dataset(tmp_path)
    shards.verify_shards(manifest, manifest.shards, full=True)
    first, second = (manifest.shard_path(s) for s in manifest.shards)
    keep = first.read_bytes()
    first.write_bytes(second.read_bytes())                 # a shard of the same split copied over another
    with pytest.raises(ShardFormatError, match=r"train-00000.h5 \(listed in .*manifest.json\): \d+ bytes, the "
                                               r"manifest says \d+") as info:
        shards.verify_shards(manifest, manifest.shards)
    assert "\n" not in str(info.value)
    # another dataset's shard of the same size: the counts or game ids differ
    (tmp_path / "other").mkdir()
    other = _dataset(tmp_path / "other", ((5, 3), (6, 4)))
    first.write_bytes(other.shard_path(other.shards[1]).read_bytes())
    # as if the sizes happened to agree: the counts or the game ids tell them apart
    bogus = [shards.ShardInfo(s.path, s.split, s.positions, s.games, s.sha256, -1, s.first_game, s.last_game)
             for s in manifest.shards]
    with pytest.raises(ShardFormatError, match=r"train-00000.h5 .*: (num_positions|num_games|game ids) .*the "
                                               r"manifest says"):
        shards.verify_shards(manifest, bogus)
    first.write_bytes(keep[:len(keep) // 2])               # truncated
    with pytest.raises(ShardFormatError, match="train-00000.h5 .*bytes, the manifest says"):
        shards.verify_shards(manifest, manifest.shards)
    first.unlink()
    with pytest.raises(ShardFormatError, match="train-00000.h5 .*: missing"):
        shards.verify_shards(manifest, manifest.shards)
    first.write_bytes(keep)
    flip_chunk_byte(first)                                 # same size: only the sha256 (--verify-shards) sees it
    shards.verify_shards(manifest, manifest.shards)
    with pytest.raises(ShardFormatError, match="train-00000.h5 .*: sha256 [0-9a-f]{12}..., the manifest says"):
        shards.verify_shards(manifest, manifest.shards, full=True)


def test_a_damaged_chunk_is_an_error_naming_the_shard_and_rows(tmp_path) -> None:
    """fletcher32: a flipped byte inside a compressed chunk is refused when read, never returned as data."""
    manifest = _dataset(tmp_path)
    path = manifest.shard_path(manifest.shards[0])
    flip_chunk_byte(path, "pieces", 1)
    with shards.open_shard(path) as f:
        shards.read_rows(f, 0, 16, ("board",))                  # chunk 0 is intact
        with pytest.raises(OSError, match="filter returned failure"):
            shards.read_rows(f, 16, 32, ("board",))
    error = shards.read_error(path, "pieces", 16, 32, OSError("Can't read data\n(more)"), 16)
    assert str(error).startswith(f"{path}: rows 16-31 (chunk 1) of dataset 'pieces' cannot be read: OSError: "
                                 "Can't read data (the file is damaged")


def test_damaged_metadata_is_a_one_line_shard_error(tmp_path) -> None:
    manifest = _dataset(tmp_path)
    path = manifest.shard_path(manifest.shards[0])
    data = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:                 # the object header of the games group
        offset = f["games"].id.get_info().addr if hasattr(f["games"].id, "get_info") else h5py.h5o.get_info(
            f["games"].id).addr
    data[offset:offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(ShardFormatError, match="train-00000.h5") as info:
        shards.verify_shards(manifest, manifest.shards[:1])
    assert "\n" not in str(info.value)
