"""`convert --compression zstd|gzip|lzf|none`: the shards' chunk filter, recorded in the manifest and shown
by inspect; the same rows whichever is chosen (the training stream: tests/training/test_pipeline.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn import cli
from shogi_dnn.convert.run import ConvertSettings
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from tests.support.kifugen import write_corpus
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compression")
    write_corpus(root / "records", seed=21, files=2, per_file=6)
    out = {}
    for name in ("gzip", "zstd", "lzf", "none"):
        out[name] = root / name
        args = ["convert", str(root / "records"), "--out", str(out[name]), "--workers", "1", "--no-progress",
                "--quiet", "--val-fraction", "0.2", *(["--compression", name] if name != "zstd" else [])]
        assert cli.main(args) == 0
    return out


def _rows(out: Path) -> dict[str, np.ndarray]:
    manifest = shards.read_manifest(out)
    parts = [shards.read_positions(manifest.shard_path(s)).arrays for s in manifest.shards]
    return {key: np.concatenate([p[key] for p in parts]) for key in shards.POSITION_SCHEMA}


def test_zstd_is_the_default_and_every_compression_stores_the_same_rows(converted: dict[str, Path]) -> None:
    rows = {name: _rows(out) for name, out in converted.items()}
    for name in ("zstd", "lzf", "none"):
        for key, values in rows["gzip"].items():
            assert np.array_equal(rows[name][key], values, equal_nan=True), (name, key)
    for name, out in converted.items():
        manifest = shards.read_manifest(out)
        assert manifest.settings["compression"] == name == manifest.compression
        shards.verify_shards(manifest, manifest.shards, full=True)          # fletcher32 on every dataset
        for info in manifest.shards:
            with shards.open_shard(manifest.shard_path(info)) as f:
                assert shards.shard_compression(f) == name
    size = {name: sum(s.bytes for s in shards.read_manifest(out).shards) for name, out in converted.items()}
    assert size["gzip"] < size["lzf"] < size["none"] and size["zstd"] < size["lzf"]


def test_inspect_shows_the_compression(converted: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    for name, out in converted.items():
        count = len(shards.read_manifest(out).shards)
        assert cli.main(["inspect", str(out)]) == 0
        assert f"shard compression: {name} ({count} shards)" in capsys.readouterr().out
        assert cli.main(["inspect", str(out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["compression"] == {name: count}


def test_an_unknown_compression_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ConfigError, match="--compression 'xz': must be one of zstd, gzip, lzf, none"):
        ConvertSettings(compression="xz")
    with pytest.raises(SystemExit):
        cli.main(["convert", str(tmp_path), "--out", str(tmp_path / "out"), "--compression", "xz"])
    assert "invalid choice: 'xz'" in capsys.readouterr().err


def _without_hdf5plugin(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`shogi-dnn ARGS` in a Python where hdf5plugin cannot be imported (nor any HDF5 plugin found)."""
    code = "import sys; sys.modules['hdf5plugin'] = None; from shogi_dnn import cli; sys.exit(cli.main())"
    (tmp_path / "no-plugins").mkdir(exist_ok=True)
    env = {**os.environ, "HDF5_PLUGIN_PATH": str(tmp_path / "no-plugins"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def test_without_hdf5plugin_zstd_is_one_line_saying_how_to_fix_it(converted: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """Reading a zstd dataset or writing one: one line naming the package, exit 2; gzip still works."""
    done = _without_hdf5plugin(["inspect", str(converted["zstd"])], tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"{converted['zstd']}/" in done.stderr and "compressed with zstd" in done.stderr
    assert "hdf5plugin, which is not installed (pip install hdf5plugin)" in done.stderr
    assert "damaged" not in done.stderr
    records = converted["zstd"].parent / "records"
    done = _without_hdf5plugin(["convert", str(records), "--out", str(tmp_path / "z"), "--quiet",
                                "--no-progress", "--compression", "zstd"], tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("shogi-dnn convert: error: --compression zstd: ")
    assert "(pip install hdf5plugin); or --compression gzip" in done.stderr
    assert not (tmp_path / "z").exists()
    done = _without_hdf5plugin(["inspect", str(converted["gzip"])], tmp_path)
    assert done.returncode == 0 and "shard compression: gzip" in done.stdout, done.stderr
