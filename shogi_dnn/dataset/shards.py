"""HDF5 shards: the on-disk training format written by `convert` and read by the trainer.

Shard file `<split>-NNNNN.h5` (SCHEMA_VERSION = 3), N positions, G games:

  dataset              shape     dtype    meaning
  pieces               [N, 40]   uint8    one slot per piece of a set: square or hand, owner (features.py)
  promoted             [N, 5]    uint8    bit i (little-endian bit order) set: slot i's piece is promoted
  turn                 [N]       uint8    colour to move, 0 black 1 white (to decode the real position)
  ply                  [N]       int16    moves played before the position (0 = start position)
  move                 [N]       uint16   the move played next (features.encode_move; 65535 = none)
  win                  [N]       float32  side to move: 1 win, 0 loss, 0.5 draw, NaN no result (below)
  game                 [N]       int32    dataset-wide game id (row of games/game_id)
  eval                 [N]       int16    optional: engine eval, cp, side to move (-32768 none)
  games/game_id        [G]       int32    dataset-wide game id
  games/source         [G]       string   file (or archive:member) the game was read from
  games/line           [G]       int32    1-based line where the game starts
  games/black, white   [G]       string   player names
  games/black_rating   [G]       float32  rating (NaN when the record has none), likewise white_rating
  games/winner         [G]       string   'black', 'white' or 'draw'
  games/ending         [G]       string   kifu.Ending value ('resign', 'checkmate', ...)
  games/num_moves      [G]       int16    moves in the main line
  games/start_sfen     [G]       string   start position
  games/source_raw     [G]       string   optional: hex of the bytes of `source` when they are not UTF-8
  attrs: schema_version, split, num_positions, num_games

Readers get `board` [N, 81] and `hands` [N, 14] uint8 back (POSITION_SCHEMA; read_rows unpacks); another
SCHEMA_VERSION is refused. `games/source` is always text (kifu/names.py, else `\\xNN` escapes);
`games/source_raw` and `eval` are written only in a shard where some row needs them (absent `eval`
reads as EVAL_NONE). Position datasets are chunked in CHUNK_ROWS rows, compressed (COMPRESSIONS: zstd
via hdf5plugin by default, gzip, lzf or none) and fletcher32-checksummed: a damaged chunk raises
ShardFormatError (read_error), never data. `manifest.json` (MANIFEST_NAME) lists per shard its path,
split, positions, games, sha256, bytes, first_game/last_game, and `no_result` (positions with `win`
NaN, written only by annotate's off-path shards); verify_shards checks shards against it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from shogi_dnn.dataset import features
from shogi_dnn.errors import ShardFormatError
from shogi_dnn.folders import run_files


def _register_plugin_filters() -> bool:
    """Import hdf5plugin (registers Zstd with h5py's HDF5); False when it is not installed."""
    try:
        import hdf5plugin  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


PLUGIN_LOADED = _register_plugin_filters()
PLUGIN_HINT = "pip install hdf5plugin"

SCHEMA_VERSION = 3
ZSTD_FILTER = 32015                # HDF5's registered id of the Zstandard filter (hdf5plugin.Zstd)
GZIP_LEVEL, ZSTD_LEVEL = 4, 1
# Chunk filters of the position datasets by `convert --compression` name (fletcher32 always added). Their
# name in a manifest's settings ("compression"; a manifest without it: UNNAMED_COMPRESSION).
COMPRESSIONS: dict[str, dict[str, Any]] = {
    "zstd": {"compression": ZSTD_FILTER, "compression_opts": (ZSTD_LEVEL,), "shuffle": True},
    "gzip": {"compression": "gzip", "compression_opts": GZIP_LEVEL, "shuffle": True},
    "lzf": {"compression": "lzf"},
    "none": {},
}
DEFAULT_COMPRESSION = "zstd"
UNNAMED_COMPRESSION = "gzip"       # a manifest's without a "compression" setting
# Compression filters by HDF5 filter id: shard_compression's names (shuffle and fletcher32 are not named).
FILTER_NAMES = {h5py.h5z.FILTER_DEFLATE: "gzip", h5py.h5z.FILTER_LZF: "lzf", ZSTD_FILTER: "zstd"}
_LEVELS = {"gzip": GZIP_LEVEL, "zstd": ZSTD_LEVEL}
_UNNAMED_FILTERS = (h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32)
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "validation", "test")
CHUNK_ROWS = 4096
PACK_ROWS = 4096          # rows packed at a time by write_shard (bounded temporaries, cache-sized)
KEY_BOARD, KEY_HANDS, KEY_TURN, KEY_PLY, KEY_MOVE, KEY_WIN, KEY_GAME = (
    "board", "hands", "turn", "ply", "move", "win", "game")
KEY_PIECES, KEY_PROMOTED = "pieces", "promoted"
KEY_EVAL = "eval"
GAMES_GROUP = "games"
KEY_SOURCE_RAW = "source_raw"
# Position datasets on disk: name -> (row shape, dtype). Pinned by tests/dataset/test_shards.py.
STORED_SCHEMA: dict[str, tuple[tuple[int, ...], np.dtype]] = {
    KEY_PIECES: ((features.NUM_SLOTS,), np.dtype(np.uint8)),
    KEY_PROMOTED: ((features.PROMOTED_BYTES,), np.dtype(np.uint8)),
    KEY_TURN: ((), np.dtype(np.uint8)),
    KEY_PLY: ((), np.dtype(np.int16)),
    KEY_MOVE: ((), np.dtype(np.uint16)),
    KEY_WIN: ((), np.dtype(np.float32)),
    KEY_GAME: ((), np.dtype(np.int32)),
}
# Optional position datasets: name -> (row shape, dtype, the value a reader gives when it is absent).
OPTIONAL_SCHEMA: dict[str, tuple[tuple[int, ...], np.dtype, int]] = {
    KEY_EVAL: ((), np.dtype(np.int16), features.EVAL_NONE),
}
_PACKED = (KEY_PIECES, KEY_PROMOTED)
_UNPACKED = (KEY_BOARD, KEY_HANDS)
# Positions as writers pass them and readers get them (board and hands unpacked): name -> (row shape, dtype).
POSITION_SCHEMA: dict[str, tuple[tuple[int, ...], np.dtype]] = {
    KEY_BOARD: ((81,), np.dtype(np.uint8)),
    KEY_HANDS: ((14,), np.dtype(np.uint8)),
    KEY_TURN: ((), np.dtype(np.uint8)),
    KEY_PLY: ((), np.dtype(np.int16)),
    KEY_MOVE: ((), np.dtype(np.uint16)),
    KEY_WIN: ((), np.dtype(np.float32)),
    KEY_GAME: ((), np.dtype(np.int32)),
    KEY_EVAL: ((), np.dtype(np.int16)),
}
_STR = h5py.string_dtype("utf-8")
GAME_SCHEMA: dict[str, np.dtype] = {
    "game_id": np.dtype(np.int32), "source": _STR, "line": np.dtype(np.int32), "black": _STR, "white": _STR,
    "black_rating": np.dtype(np.float32), "white_rating": np.dtype(np.float32), "winner": _STR,
    "ending": _STR, "num_moves": np.dtype(np.int16), "start_sfen": _STR,
}
# Optional games-table columns, written only when some game of the shard has a value (module docstring).
OPTIONAL_GAME_SCHEMA: dict[str, np.dtype] = {KEY_SOURCE_RAW: _STR}


@dataclasses.dataclass(frozen=True)
class ShardData:
    """Positions of a shard (or a slice of one) in memory: arrays keyed as POSITION_SCHEMA."""

    arrays: dict[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.arrays[KEY_WIN].shape[0])


def write_shard(path: str | Path, split: str, positions: dict[str, np.ndarray],
                games: Mapping[str, Sequence[Any]], chunk_rows: int = CHUNK_ROWS,
                compression: str = DEFAULT_COMPRESSION) -> str:
    """Write one shard atomically and return its sha256.

    Args:
        positions: arrays keyed as POSITION_SCHEMA with one first dimension N (or already packed
            `pieces` / `promoted`, as pack_stored gives them); `eval` is optional.
        games: columns keyed as GAME_SCHEMA, all of length G, and optionally OPTIONAL_GAME_SCHEMA ones.
        compression: a COMPRESSIONS name.
    Raises:
        ValueError: a position holds more pieces of a kind than one set, or an unknown `compression`.
    """
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression {compression!r}: expected one of {', '.join(COMPRESSIONS)}")
    if not compression_available(compression):
        raise ValueError(f"compression {compression!r}: {missing_filter_hint(compression)}")
    path = Path(path)
    n = len(positions[KEY_WIN])
    stored = pack_stored(positions)
    image = _shard_image(path, split, n, stored, positions, games, chunk_rows, COMPRESSIONS[compression])
    # One plain write of known bytes: a full disk is an OSError here, and atomic_path makes it one line
    # with the exact size needed (never a partial file: a `.tmp` is never valid).
    run_files.write_atomic(path, image)
    return hashlib.sha256(image).hexdigest()


def pack_stored(positions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`positions` with the packed `pieces` and `promoted` added (as they are when already there).

    Raises:
        ValueError: a position holds more pieces of a kind than one set.
    """
    if KEY_PIECES in positions and KEY_PROMOTED in positions:
        return positions
    n = len(positions[KEY_WIN])
    board = np.asarray(positions[KEY_BOARD]).reshape(n, -1)
    hands = np.asarray(positions[KEY_HANDS]).reshape(n, -1)
    packed = [features.pack_positions(board[i:i + PACK_ROWS], hands[i:i + PACK_ROWS])
              for i in range(0, n, PACK_ROWS)] or [features.pack_positions(board, hands)]
    return {**positions, KEY_PIECES: np.concatenate([p for p, _ in packed]),
            KEY_PROMOTED: np.concatenate([q for _, q in packed])}


def _shard_image(path: Path, split: str, n: int, stored: dict[str, np.ndarray],
                 positions: dict[str, np.ndarray], games: Mapping[str, Sequence[Any]], chunk_rows: int,
                 filters: dict[str, Any]) -> bytes:
    """The bytes of one shard file, built in memory (HDF5's core driver, no backing store).

    In memory so that a full disk meets write_shard's one Python write, never HDF5's own flushes (h5py
    cannot raise from those). The image is taken flushed before the close, so it may end with unused
    metadata-block bytes; it is readable by any HDF5 and deterministic.
    """
    with _create_untimed_file(path) as f:
        _fill_file(f, split, n, stored, positions, games, chunk_rows, filters)
        f.flush()
        return bytes(f.id.get_file_image())


def _fill_file(f: h5py.File, split: str, n: int, stored: dict[str, np.ndarray],
               positions: dict[str, np.ndarray], games: Mapping[str, Sequence[Any]], chunk_rows: int,
               filters: dict[str, Any]) -> None:
    """Write the attributes, position datasets (chunk `filters`) and games group of a new shard `f`."""
    f.attrs.update(schema_version=SCHEMA_VERSION, split=split, num_positions=n,
                   num_games=len(games["game_id"]))
    for key, (row_shape, dtype) in STORED_SCHEMA.items():
        data = np.asarray(stored[key], dtype=dtype).reshape((n, *row_shape))
        chunks = (max(1, min(chunk_rows, n)), *row_shape)
        f.create_dataset(key, data=data, chunks=chunks, fletcher32=True, track_times=False, **filters)
    for key, (row_shape, dtype, absent) in OPTIONAL_SCHEMA.items():
        if key not in positions:
            continue
        data = np.asarray(positions[key], dtype=dtype).reshape((n, *row_shape))
        if np.all(data == absent):
            continue
        chunks = (max(1, min(chunk_rows, n)), *row_shape)
        f.create_dataset(key, data=data, chunks=chunks, fletcher32=True, track_times=False, **filters)
    group = _create_untimed_group(f, GAMES_GROUP)
    for key, dtype in {**GAME_SCHEMA, **OPTIONAL_GAME_SCHEMA}.items():
        if key not in games:            # an optional column (absent when no game has a value)
            continue
        group.create_dataset(key, data=np.asarray(games[key], dtype=object if dtype is _STR else dtype),
                             dtype=dtype, track_times=False)


# Byte-identical shards: HDF5 stamps every object header with its creation time unless told not to.
# Datasets take track_times=False; the root group (via the file creation list) and groups need
# the low-level property lists below. Link/attribute creation order is tracked as track_order=True does.
_ORDER = h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED


_IMAGE_BLOCK = 1 << 20             # the core driver's memory growth step (bytes), not the image's length


def _create_untimed_file(path: Path) -> h5py.File:
    """A new HDF5 file held in memory (`path` only names it): see _shard_image."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_link_creation_order(_ORDER)
    fcpl.set_attr_creation_order(_ORDER)
    fcpl.set_obj_track_times(False)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_fapl_core(_IMAGE_BLOCK, False)
    return h5py.File(h5py.h5f.create(os.fsencode(path), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl))


def _create_untimed_group(parent: h5py.Group, name: str) -> h5py.Group:
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_link_creation_order(_ORDER)
    gcpl.set_attr_creation_order(_ORDER)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shard_compression(f: h5py.File) -> str:
    """The COMPRESSIONS name of an open shard's position datasets (else e.g. "zstd 3", "HDF5 filter 307")."""
    compressing = [(code, values) for code, values in filter_pipeline(f[KEY_WIN])
                   if code not in _UNNAMED_FILTERS]
    if not compressing:
        return "none"
    code, values = compressing[0]
    name = FILTER_NAMES.get(code, f"HDF5 filter {code}")
    if name not in _LEVELS:
        return name
    level = values[0] if values else None
    return name if level == _LEVELS[name] else f"{name} {level}"


def filter_pipeline(dataset: h5py.Dataset) -> list[tuple[int, tuple[int, ...]]]:
    """A dataset's chunk filters in the order they are applied on write: (HDF5 filter id, its values)."""
    plist = dataset.id.get_create_plist()
    return [(int(code), tuple(values)) for code, _, values, _ in
            (plist.get_filter(i) for i in range(plist.get_nfilters()))]


def compression_available(name: str) -> bool:
    """Whether this process's HDF5 has the filter of COMPRESSIONS `name` (zstd: hdf5plugin imported)."""
    code = COMPRESSIONS[name].get("compression")
    return not isinstance(code, int) or bool(h5py.h5z.filter_avail(code))


def missing_filter_hint(name: str) -> str:
    """What to do when the HDF5 filter `name` is unavailable."""
    if name == "zstd" and not PLUGIN_LOADED:
        return f"its HDF5 filter comes with hdf5plugin, which is not installed ({PLUGIN_HINT})"
    return (f"this HDF5 has no {name} filter (hdf5plugin {'imported' if PLUGIN_LOADED else 'not installed'};"
            f" {PLUGIN_HINT}, or an HDF5 plugin for it in HDF5_PLUGIN_PATH)")


def open_shard(path: str | Path) -> h5py.File:
    """Open a shard read-only and check its schema version and datasets.

    Raises:
        ShardFormatError: not HDF5, another schema version, or a dataset missing/of the wrong type.
    """
    try:
        f = h5py.File(path, "r")
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        raise ShardFormatError(f"{path}: not a readable HDF5 shard ({_first_line(exc)})") from exc
    try:
        return _check_open(f, path)
    except ShardFormatError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:   # damaged HDF5 metadata
        f.close()
        raise ShardFormatError(f"{path}: damaged HDF5 metadata ({_first_line(exc)}; convert again or copy "
                               "the shard again)") from exc


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _check_open(f: h5py.File, path: str | Path) -> h5py.File:
    """`f` when it is a shard of this schema whose chunk filters this HDF5 has; closed otherwise."""
    version = f.attrs.get("schema_version")
    version = int(version) if isinstance(version, (int, np.integer)) else version
    if version != SCHEMA_VERSION:
        f.close()
        raise ShardFormatError(f"{path}: schema_version {version!r}, this version reads {SCHEMA_VERSION}"
                               f"{_RECONVERT if version in OLD_SCHEMAS else ''}")
    for key, (row_shape, dtype) in STORED_SCHEMA.items():
        if key not in f or f[key].dtype != dtype or f[key].shape[1:] != row_shape:
            f.close()
            raise ShardFormatError(f"{path}: dataset {key!r} missing or not {dtype} {row_shape}")
    for key, (row_shape, dtype, _) in OPTIONAL_SCHEMA.items():
        if key in f and (f[key].dtype != dtype or f[key].shape[1:] != row_shape
                         or f[key].shape[0] != f[KEY_WIN].shape[0]):
            f.close()
            raise ShardFormatError(f"{path}: optional dataset {key!r} is not {dtype} {row_shape} with a row "
                                   "per position")
    for key in (*STORED_SCHEMA, *(k for k in OPTIONAL_SCHEMA if k in f)):
        missing = [code for code, _ in filter_pipeline(f[key]) if not h5py.h5z.filter_avail(code)]
        if missing:
            f.close()
            name = FILTER_NAMES.get(missing[0], f"HDF5 filter {missing[0]}")
            raise ShardFormatError(f"{path}: dataset {key!r} is compressed with {name}, which cannot be read "
                                   f"here: {missing_filter_hint(name)}")
    return f


OLD_SCHEMAS = (1, 2)      # refused with _RECONVERT (2: no chunk checksums)
_RECONVERT = " (written by an older shogi-dnn: run `shogi-dnn convert` on the records again)"


def stored_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """The datasets to read for POSITION_SCHEMA `keys` (board or hands: the packed pieces)."""
    out = [key for key in keys if key not in _UNPACKED]
    if any(key in _UNPACKED for key in keys):
        out[:0] = _PACKED
    return tuple(dict.fromkeys(out))


def unpack_rows(stored: dict[str, np.ndarray], keys: Sequence[str]) -> dict[str, np.ndarray]:
    """POSITION_SCHEMA `keys` from rows read as stored_keys(keys)."""
    out = {key: stored[key] for key in keys if key not in _UNPACKED}
    if any(key in _UNPACKED for key in keys):
        board, hands = features.unpack_positions(stored[KEY_PIECES], stored[KEY_PROMOTED])
        out.update({key: value for key, value in ((KEY_BOARD, board), (KEY_HANDS, hands)) if key in keys})
    return {key: out[key] for key in keys}


def read_stored(f: h5py.File, key: str, start: int, stop: int | None) -> np.ndarray:
    """Rows [start, stop) of one stored dataset of an open shard; an absent optional one reads as absent."""
    if key in OPTIONAL_SCHEMA and key not in f:
        row_shape, dtype, absent = OPTIONAL_SCHEMA[key]
        rows = len(range(*slice(start, stop).indices(int(f[KEY_WIN].shape[0]))))
        return np.full((rows, *row_shape), absent, dtype)
    return f[key][start:stop]


def read_rows(f: h5py.File, start: int, stop: int | None, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """Rows [start, stop) of an open shard: arrays keyed by POSITION_SCHEMA `keys`."""
    return unpack_rows({key: read_stored(f, key, start, stop) for key in stored_keys(keys)}, keys)


def read_positions(path: str | Path, start: int = 0, stop: int | None = None,
                   keys: Sequence[str] = tuple(POSITION_SCHEMA)) -> ShardData:
    """Read rows [start, stop) of a shard's positions (whole chunks are decompressed)."""
    with open_shard(path) as f:
        return ShardData(read_rows(f, start, stop, keys))


def read_games(path: str | Path) -> dict[str, np.ndarray]:
    """The games table of a shard: GAME_SCHEMA columns and the OPTIONAL_GAME_SCHEMA ones it has (decoded)."""
    schema = {**GAME_SCHEMA, **OPTIONAL_GAME_SCHEMA}
    with open_shard(path) as f:
        group = f[GAMES_GROUP]
        return {key: (group[key].asstr()[:] if schema[key] is _STR else group[key][:])
                for key in schema if key in group}


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One manifest entry. `path` is relative to the dataset folder."""

    path: str
    split: str
    positions: int
    games: int
    sha256: str
    bytes: int = -1            # file size (-1: not recorded)
    first_game: int = -1       # smallest and largest game id of the shard (-1: not recorded)
    last_game: int = -1
    no_result: int = 0         # positions without a game result (win NaN: annotate's off-path positions)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A dataset folder's manifest.json: shards, conversion settings and totals."""

    root: Path
    shards: tuple[ShardInfo, ...]
    settings: dict[str, Any]
    totals: dict[str, Any]

    def split(self, name: str) -> tuple[ShardInfo, ...]:
        """Shards of one split, in file-name order."""
        return tuple(s for s in self.shards if s.split == name)

    def shard_path(self, shard: ShardInfo) -> Path:
        """Absolute path of a shard."""
        return self.root / shard.path

    @property
    def compression(self) -> str:
        """The COMPRESSIONS name convert wrote the shards with (UNNAMED_COMPRESSION when not recorded)."""
        name = self.settings.get("compression", UNNAMED_COMPRESSION)
        return name if name in COMPRESSIONS else DEFAULT_COMPRESSION


def read_manifest(root: str | Path) -> Manifest:
    """Read DIR/manifest.json.

    Raises:
        ShardFormatError: missing, not JSON, another schema version or a missing key.
    """
    root = Path(root)
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise ShardFormatError(f"{path}: no manifest (is {root} a dataset folder written by convert?)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ShardFormatError(f"{path}: schema_version {data.get('schema_version')!r}, "
                                   f"this version reads {SCHEMA_VERSION}"
                                   f"{_RECONVERT if data.get('schema_version') in OLD_SCHEMAS else ''}")
        shards = tuple(ShardInfo(**entry) for entry in data["shards"])
        if len({s.path for s in shards}) != len(shards):
            raise ShardFormatError(f"{path}: a shard is listed twice")
        return Manifest(root, shards, data.get("settings", {}), data.get("totals", {}))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ShardFormatError(f"{path}: corrupt manifest ({exc})") from exc


def foreign_manifest(root: str | Path) -> str | None:
    """Why DIR/manifest.json is not a shogi-dnn manifest, or None when it is one or absent."""
    path = Path(root) / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"not readable as JSON: {type(exc).__name__}"
    if not isinstance(data, dict) or data.get("schema_version") not in (SCHEMA_VERSION, *OLD_SCHEMAS):
        version = data.get("schema_version") if isinstance(data, dict) else None
        return f"no shogi-dnn schema_version (it has {version!r})"
    listed = data.get("shards")
    if not isinstance(listed, list) or not all(isinstance(e, dict) and isinstance(e.get("path"), str)
                                               for e in listed):
        return "no list of shards with their paths"
    return None


def write_manifest(root: str | Path, shards: Sequence[ShardInfo], settings: dict[str, Any],
                   totals: dict[str, Any]) -> Path:
    """Write DIR/manifest.json atomically."""
    root = Path(root)
    data = {"schema_version": SCHEMA_VERSION, "shards": [_manifest_entry(s) for s in shards],
            "settings": settings, "totals": totals}
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    run_files.write_atomic(root / MANIFEST_NAME, text)
    return root / MANIFEST_NAME


def _manifest_entry(info: ShardInfo) -> dict[str, Any]:
    """A shard's manifest entry: its fields, `no_result` only when some position has no result."""
    entry = dataclasses.asdict(info)
    if not info.no_result:
        del entry["no_result"]
    return entry


def shard_info(path: str | Path, split: str, positions: int, games: int, sha256: str,
               game_ids: Sequence[int]) -> ShardInfo:
    """The manifest entry of a shard just written."""
    path = Path(path)
    ids = [int(i) for i in game_ids]
    return ShardInfo(path.name, split, int(positions), int(games), sha256, path.stat().st_size,
                     min(ids, default=-1), max(ids, default=-1))


def read_error(path: str | Path, key: str, start: int, stop: int, exc: BaseException,
               chunk_rows: int = CHUNK_ROWS) -> ShardFormatError:
    """The one-line error for a chunk that cannot be read back (checksum mismatch, damaged compression)."""
    return ShardFormatError(f"{path}: rows {start}-{stop - 1} (chunk {start // chunk_rows}) of dataset "
                            f"{key!r} cannot be read: {_first_line(exc)} (the file is damaged: convert "
                            "again, or copy the dataset again)")


def verify_shards(manifest: Manifest, infos: Sequence[ShardInfo], *, full: bool = False,
                  allow_no_result: bool = False) -> None:
    """Check shards against their manifest entries before a job reads them.

    Cheap by default (metadata only: size, schema, split, counts, game ids, shapes, dtypes, checksums);
    `full` also checks the sha256. Shards with `no_result` positions need `allow_no_result`.
    Raises:
        ShardFormatError: one line naming the first shard that differs and what differs.
    """
    for info in infos:
        path = manifest.shard_path(info)
        where = f"{path} (listed in {manifest.root / MANIFEST_NAME})"
        if info.no_result and not allow_no_result:
            raise ShardFormatError(f"{where}: {info.no_result} positions without a game result (win NaN: "
                                   "off-path positions written by `shogi-dnn annotate`); this job reads game "
                                   "results: give it a dataset without them (annotate --off-path 0)")
        if not path.is_file():
            raise ShardFormatError(f"{where}: missing")
        size = path.stat().st_size
        if info.bytes >= 0 and size != info.bytes:
            raise ShardFormatError(f"{where}: {size} bytes, the manifest says {info.bytes} (truncated, or "
                                   "another file)")
        with open_shard(path) as f:
            try:
                _verify_open(f, info)
            except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
                if isinstance(exc, ShardFormatError):
                    raise ShardFormatError(f"{where}: {exc}") from None
                raise ShardFormatError(f"{where}: damaged HDF5 metadata ({_first_line(exc)})") from exc
        if full:
            digest = file_sha256(path)
            if digest != info.sha256:
                raise ShardFormatError(f"{where}: sha256 {digest[:12]}..., the manifest says "
                                       f"{info.sha256[:12]}...")


def _verify_open(f: h5py.File, info: ShardInfo) -> None:
    attrs = {"split": info.split, "num_positions": info.positions, "num_games": info.games}
    for name, expected in attrs.items():
        value = f.attrs.get(name)
        value = value.decode() if isinstance(value, bytes) else value
        value = int(value) if isinstance(value, (int, np.integer)) else value
        if value != expected:
            raise ShardFormatError(f"{name} is {value!r}, the manifest says {expected!r} (a shard of another "
                                   "dataset?)")
    for key in (*STORED_SCHEMA, *(k for k in OPTIONAL_SCHEMA if k in f)):
        dataset = f[key]
        if dataset.shape[0] != info.positions:
            raise ShardFormatError(f"dataset {key!r} has {dataset.shape[0]} rows, the manifest says "
                                   f"{info.positions}")
        if not dataset.fletcher32:
            raise ShardFormatError(f"dataset {key!r} has no chunk checksums (fletcher32){_RECONVERT}")
    group = f[GAMES_GROUP]
    for key, dtype in GAME_SCHEMA.items():
        if key not in group or group[key].shape != (info.games,) or (
                dtype is not _STR and group[key].dtype != dtype):
            raise ShardFormatError(f"games/{key} missing or not {info.games} rows of {dtype}")
    if info.first_game >= 0 and info.games:
        ids = group["game_id"][:]
        if (int(ids.min()), int(ids.max())) != (info.first_game, info.last_game):
            raise ShardFormatError(f"game ids {int(ids.min())}-{int(ids.max())}, the manifest says "
                                   f"{info.first_game}-{info.last_game} (a shard of another dataset?)")
