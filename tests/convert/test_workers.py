"""How convert uses processes (worker.plan_workers) and that every plan writes the same bytes."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import h5py
import numpy as np
import pytest

from shogi_dnn.convert import run as convert_run
from shogi_dnn.convert import worker as convert_worker
from shogi_dnn.convert.run import REPORT_NAME, ConvertSettings, run_convert
from shogi_dnn.convert.worker import POOL_MIN_BYTES, capped_workers_note, describe_workers, plan_workers
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ShogiDnnError
from tests.support.kifugen import write_corpus

BIG = POOL_MIN_BYTES


@pytest.mark.parametrize("requested,cores,size,count", [
    (None, 1, 10 * BIG, 0),          # one core: in-process
    (None, 2, 10 * BIG, 0),          # two: in-process (a pool measured no faster there)
    (None, 8, BIG - 1, 0),           # small input: a pool does not pay
    (None, 8, BIG, 7),               # more cores: cores - 1 workers, the parent assembles
    (1, 8, 10 * BIG, 0),             # --workers 1 is in-process, whatever the size
    (3, 4, 0, 3),                    # --workers N is N, even on a small input
    (2, 2, 0, 2),                    # ... up to the cores
    (64, 2, 10 * BIG, 2),            # more than the cores: capped at the cores
])
def test_plan_workers(requested: int | None, cores: int, size: int, count: int) -> None:
    assert plan_workers(requested, cores, size) == count


def test_workers_over_the_cores_are_capped_with_one_line(corpus: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """`convert --workers 64` on this machine's cores: as many workers as cores, and a line saying so."""
    import os

    cores = len(os.sched_getaffinity(0))
    assert capped_workers_note(cores, cores) is None and capped_workers_note(None, cores) is None
    with caplog.at_level("WARNING"):
        report = run_convert([corpus], tmp_path / "out", ConvertSettings(val_fraction=0.2), workers=64)
    assert report.worker_plan == describe_workers(cores if cores > 1 else 0)
    lines = [r.getMessage() for r in caplog.records if "capped" in r.getMessage()]
    assert lines == [(f"convert: --workers 64 capped at {cores}, the CPU cores this process may use (more "
                      "processes than cores only take turns on them, each with its own memory)")]


def test_describe_says_where_the_work_runs() -> None:
    assert [describe_workers(n) for n in (0, 1, 4)] == ["in-process", "1 worker", "4 workers"]


def test_archives_count_as_their_expanded_size(tmp_path: Path) -> None:
    (tmp_path / "a.csa").write_bytes(b"x" * 100)
    (tmp_path / "b.tar.xz").write_bytes(b"x" * 100)
    assert convert_run._input_bytes([tmp_path]) == 100 + 100 * convert_worker.ARCHIVE_EXPANSION


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root, seed=11, files=5, per_file=6)
    return root


def shard_content(path: Path) -> list[tuple[str, str, bytes]]:
    """Every object of a shard (name, attributes, values as bytes), not its file layout."""
    out = []
    with h5py.File(path, "r") as f:
        def visit(name: str, item: h5py.HLObject) -> None:
            attrs = repr(sorted((k, repr(v)) for k, v in item.attrs.items()))
            values = np.asarray(item[()]) if isinstance(item, h5py.Dataset) else np.zeros(0)
            values = repr(values.tolist()).encode() if values.dtype == object else values.tobytes()
            out.append((name, attrs, values))
        visit("/", f)
        f.visititems(visit)
    return out


@pytest.mark.parametrize("count,compression",
                         [(1, "gzip"), (2, "gzip"), (1, "zstd"), (2, "zstd"), (2, "lzf")])
def test_every_plan_writes_the_in_process_bytes(corpus: Path, tmp_path: Path, count: int, compression: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers parse the pieces and write the shards (the parent assembles them): same bytes with zstd,
    gzip and none; with lzf the same datasets, attributes and games, not always the same bytes
    (h5py's LZF compressor leaves its hash table uninitialised: seen in 7 of 10 pool runs, one chunk 3
    bytes shorter, every value equal)."""
    settings = ConvertSettings(val_fraction=0.2, shard_size=150, compression=compression)
    run_convert([corpus], tmp_path / "here", settings, workers=1)
    monkeypatch.setattr(convert_run, "plan_workers", lambda *args: count)
    report = run_convert([corpus], tmp_path / "pool", settings)
    assert report.worker_plan == describe_workers(count)
    assert json.loads((tmp_path / "pool" / REPORT_NAME).read_text())["worker_plan"] == describe_workers(count)
    here = {p.name: p.read_bytes() for p in sorted((tmp_path / "here").glob("*.h5"))}
    pool = {p.name: p.read_bytes() for p in sorted((tmp_path / "pool").glob("*.h5"))}
    assert len(here) >= 4 and sorted(pool) == sorted(here)
    if compression == "lzf":
        for name in here:
            assert shard_content(tmp_path / "pool" / name) == shard_content(tmp_path / "here" / name), name
    else:
        assert pool == here
    layout = (lambda info: dataclasses.replace(info, sha256="", bytes=0)) if compression == "lzf" else None
    assert ([layout(s) if layout else s for s in shards.read_manifest(tmp_path / "pool").shards]
            == [layout(s) if layout else s for s in shards.read_manifest(tmp_path / "here").shards])
    with shards.open_shard(next((tmp_path / "pool").glob("*.h5"))) as f:
        assert shards.shard_compression(f) == compression


def test_a_shard_writer_that_dies_stops_the_run_with_a_message(corpus: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard job whose worker is killed never completes (Pool replaces the worker): the wait notices."""
    monkeypatch.setattr(convert_run, "plan_workers", lambda *args: 1)
    monkeypatch.setattr(convert_worker.Workers, "submit", lambda self, fn, *args: self.pool.apply_async(_die))
    with pytest.raises(ShogiDnnError, match="a worker process died"):
        run_convert([corpus], tmp_path / "out", ConvertSettings(shard_size=150))


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
