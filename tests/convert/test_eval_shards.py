"""Engine evaluations through convert: the optional `eval` shard dataset, and shards of records without
evaluations byte-identical to those written before the dataset existed."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from shogi_dnn import kifu
from shogi_dnn.convert.run import REPORT_NAME, ConvertSettings, run_convert
from shogi_dnn.dataset import features, shards
from tests.support.evalrecords import EVAL_CSA_EXPECTED, write_eval_csa
from tests.support.paths import REPO

CSA = REPO / "tests" / "data" / "csa"
NO_EVAL_FILES = ("mogproject_001.csa", "ending_toryo.csa", "wars_October_J-michael_sun.csa")
# sha256 of the one shard `shogi-dnn convert --compression gzip` writes from NO_EVAL_FILES, under this
# HDF5/h5py version. The writer before evaluations existed (commit f0449e9, schema 2) gave
# ad72e7fb6914126632872df513a0e0461e02af8df1670a44d45337c2a28b83c8, and the schema-2 writer with evaluations
# gave the same bytes; schema 3 (fletcher32 chunk checksums) changes the bytes, so this is the schema-3
# writer's hash, unchanged by evaluations all the same (while HDF5 wrote the file itself:
# 3d0d39d6578052627dd6df41ff25a0e869a005d949a8d5f03c69a29cb5252cbb). Since shards are built in memory
# (shards._shard_image: a full disk crashed HDF5's own writes), this file ends with 1,024 unused bytes of
# HDF5's metadata block, which a close on disk gave back, and its superblock's end-of-file address says
# so: every object and byte before is as it was.
OLD_WRITER_SHA256 = "7feaa2ee6f01dfe8df6c94a3631f3671790ea22431c6554bf02718230cf72449"
OLD_WRITER_VERSIONS = ("1.14.6", "3.14.0")


def _expected(values) -> np.ndarray:
    return np.asarray([features.EVAL_NONE if v is None else v for v in values], np.int16)


def test_encode_game_carries_evals_from_the_side_to_move(tmp_path: Path) -> None:
    (record,) = kifu.read_record_file(write_eval_csa(tmp_path / "e.csa"))
    assert record.evals == EVAL_CSA_EXPECTED
    encoded = features.encode_game(record)
    assert encoded.eval.dtype == np.int16 and encoded.eval.tolist() == _expected(EVAL_CSA_EXPECTED).tolist()
    no_evals = features.encode_game(dataclasses.replace(record, evals=()))
    assert (no_evals.eval == features.EVAL_NONE).all() and len(no_evals.eval) == len(record.moves) + 1


def test_game_evals_clips_and_checks_the_length() -> None:
    assert features.game_evals((None, 40000, -40000, 7), 4).tolist() == [-32768, 32000, -32000, 7]
    assert features.game_evals((), 3).tolist() == [-32768] * 3
    assert features.game_evals((10 ** 30, None, -10 ** 30, 12.7), 4).tolist() == [32000, -32768, -32000, 12]
    assert features.game_evals((-(1 << 62), None), 2).tolist() == [-32000, -32768]
    with pytest.raises(ValueError, match="2 evaluations for 3 positions"):
        features.game_evals((1, 2), 3)


def test_evals_by_position_turns_black_view_scores_to_the_side_to_move() -> None:
    from shogi_dnn.kifu.evals import evals_by_position
    black_first, white_first = "9/9/9/9/9/9/9/9/9 b - 1", "9/9/9/9/9/9/9/9/9 w - 1"
    scores = {0: 10, 1: 20, 3: -5, 4: None, 9: 99}                    # 9: beyond the last position
    assert evals_by_position(scores, black_first, 4) == (10, -20, None, 5, None)
    assert evals_by_position(scores, white_first, 4) == (-10, 20, None, -5, None)
    assert evals_by_position({9: 1}, black_first, 4) == () and evals_by_position({}, black_first, 4) == ()


@pytest.mark.parametrize("row_order", ["game", "shuffled"])
def test_convert_stores_side_to_move_evals(tmp_path: Path, row_order: str) -> None:
    source = write_eval_csa(tmp_path / "eval.csa")
    shutil.copy(CSA / "ending_toryo.csa", tmp_path / "plain.csa")        # a game without evaluations
    out = tmp_path / "out"
    report = run_convert([source, tmp_path / "plain.csa"], out,
                         ConvertSettings(val_fraction=0.0, row_order=row_order), workers=1)
    (info,) = shards.read_manifest(out).shards
    path = out / info.path
    with h5py.File(path, "r") as f:
        stored = f["eval"]
        assert stored.dtype == np.int16 and stored.shape == (info.positions,)
        assert stored.chunks == f["win"].chunks and shards.shard_compression(f) == "zstd"
        codes = [[code for code, _ in shards.filter_pipeline(f[key])] for key in ("eval", "win")]
        assert codes[0] == codes[1]
    data = shards.read_positions(path).arrays
    table = shards.read_games(path)
    by_source = {Path(s).name: g for s, g in zip(table["source"], table["game_id"])}
    rows = np.flatnonzero(data["game"] == by_source["eval.csa"])
    rows = rows[np.argsort(data["ply"][rows])]
    assert data["eval"][rows].tolist() == _expected(EVAL_CSA_EXPECTED).tolist()
    assert data["win"][rows].tolist() == [0, 1, 0, 1, 0, 1, 0]            # White wins; Black to move at even plies
    plain = data["eval"][data["game"] == by_source["plain.csa"]]
    assert len(plain) == 3 and (plain == features.EVAL_NONE).all()
    evaluated = sum(v is not None for v in EVAL_CSA_EXPECTED)
    assert report.positions_with_eval == {"train": evaluated}
    assert json.loads((out / REPORT_NAME).read_text())["positions_with_eval"] == {"train": evaluated}


def test_records_without_evals_give_unchanged_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `eval` dataset, every other dataset as before, and (same HDF5) the very bytes pinned above.
    The inputs are named relative to tests/data (shards store each game's source path), so the hash does not
    depend on where the repository is. Until schema 2 the old writer (commit f0449e9) gave the pinned bytes
    for the same command; since schema 3 (fletcher32) the hash is the schema-3 writer's (see above)."""
    monkeypatch.chdir(CSA.parent)
    out = tmp_path / "out"
    report = run_convert([Path("csa") / name for name in NO_EVAL_FILES], out,
                         ConvertSettings(compression="gzip"), workers=1)
    (info,) = shards.read_manifest(out).shards
    with h5py.File(out / info.path, "r") as f:
        assert sorted(k for k in f if k != "games") == sorted(shards.STORED_SCHEMA)
    assert report.positions_with_eval == {"train": 0}
    assert (shards.read_positions(out / info.path, keys=["eval"]).arrays["eval"] == features.EVAL_NONE).all()
    if (h5py.version.hdf5_version, h5py.__version__) != OLD_WRITER_VERSIONS:
        pytest.skip(f"the old writer's sha256 was taken with HDF5/h5py {OLD_WRITER_VERSIONS}")
    assert info.sha256 == shards.file_sha256(out / info.path) == OLD_WRITER_SHA256
