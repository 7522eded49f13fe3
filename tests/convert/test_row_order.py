"""Row order inside shards: game order by default (compact), seeded shuffle on request."""

from __future__ import annotations

import os

import numpy as np
import pytest

from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from tests.support.kifugen import write_corpus


def _train_rows(out) -> dict[str, np.ndarray]:
    manifest = shards.read_manifest(out)
    parts = [shards.read_positions(manifest.shard_path(s)).arrays for s in manifest.split("train")]
    return {key: np.concatenate([p[key] for p in parts]) for key in ("game", "ply")}


def test_game_order_is_default_and_smaller(tmp_path) -> None:
    root = tmp_path / "records"
    root.mkdir()
    write_corpus(root, seed=5, files=3, per_file=10)
    run_convert([root], tmp_path / "game", ConvertSettings(val_fraction=0.0), workers=1)
    run_convert([root], tmp_path / "shuf", ConvertSettings(val_fraction=0.0, row_order="shuffled"), workers=1)
    game, shuf = _train_rows(tmp_path / "game"), _train_rows(tmp_path / "shuf")
    # game order: game ids never decrease and plies rise by one inside a game
    assert (np.diff(game["game"]) >= 0).all()
    same_game = np.diff(game["game"]) == 0
    assert (np.diff(game["ply"].astype(int))[same_game] == 1).all()
    assert not (np.diff(shuf["game"]) >= 0).all()
    # the same rows either way
    assert sorted(zip(game["game"], game["ply"])) == sorted(zip(shuf["game"], shuf["ply"]))
    size = {name: sum(os.path.getsize(p) for p in (tmp_path / name).glob("*.h5")) for name in ("game", "shuf")}
    assert size["game"] < size["shuf"]


def test_unknown_row_order_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--row-order 'random'"):
        ConvertSettings(row_order="random")
