"""How convert uses processes (worker.plan_workers) and that every plan writes the same bytes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from shogi_dnn.convert import run as convert_run
from shogi_dnn.convert import worker as convert_worker
from shogi_dnn.convert.run import REPORT_NAME, ConvertSettings, run_convert
from shogi_dnn.convert.worker import POOL_MIN_BYTES, WorkerPlan, plan_workers
from shogi_dnn.errors import ShogiDnnError
from tests.support.kifugen import write_corpus

BIG = POOL_MIN_BYTES


@pytest.mark.parametrize("requested,cores,size,plan", [
    (None, 1, 10 * BIG, WorkerPlan(0, False)),          # one core: in-process
    (None, 2, BIG - 1, WorkerPlan(0, False)),            # small input: a pool does not pay
    (None, 2, BIG, WorkerPlan(1, True)),                 # two cores: parse here, one shard writer
    (None, 8, BIG, WorkerPlan(7, False)),                # more: cores - 1 workers, the parent assembles
    (1, 8, 10 * BIG, WorkerPlan(0, False)),              # --workers 1 is in-process, whatever the size
    (3, 2, 0, WorkerPlan(3, False)),                     # --workers N is N, even on a small input
])
def test_plan_workers(requested: int | None, cores: int, size: int, plan: WorkerPlan) -> None:
    assert plan_workers(requested, cores, size) == plan


def test_describe_says_where_the_work_runs() -> None:
    assert WorkerPlan(0, False).describe() == "in-process"
    assert WorkerPlan(1, True).describe() == "parsed here, shards written by 1 worker"
    assert WorkerPlan(4, False).describe() == "4 workers"


def test_archives_count_as_their_expanded_size(tmp_path: Path) -> None:
    (tmp_path / "a.csa").write_bytes(b"x" * 100)
    (tmp_path / "b.tar.xz").write_bytes(b"x" * 100)
    assert convert_run._input_bytes([tmp_path]) == 100 + 100 * convert_worker.ARCHIVE_EXPANSION


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root, seed=11, files=5, per_file=6)
    return root


@pytest.mark.parametrize("plan", [WorkerPlan(1, True), WorkerPlan(2, True), WorkerPlan(2, False)])
def test_every_plan_writes_the_in_process_bytes(corpus: Path, tmp_path: Path, plan: WorkerPlan,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ConvertSettings(val_fraction=0.2, shard_size=150)
    run_convert([corpus], tmp_path / "here", settings, workers=1)
    monkeypatch.setattr(convert_run, "plan_workers", lambda *args: plan)
    report = run_convert([corpus], tmp_path / "pool", settings)
    assert report.worker_plan == plan.describe()
    assert json.loads((tmp_path / "pool" / REPORT_NAME).read_text())["worker_plan"] == plan.describe()
    here = {p.name: p.read_bytes() for p in sorted((tmp_path / "here").glob("*.h5"))}
    assert len(here) >= 4 and {p.name: p.read_bytes() for p in sorted((tmp_path / "pool").glob("*.h5"))} == here
    assert (tmp_path / "pool" / "manifest.json").read_text() == (tmp_path / "here" / "manifest.json").read_text() \
        .replace(str(tmp_path / "here"), str(tmp_path / "pool"))


def test_a_shard_writer_that_dies_stops_the_run_with_a_message(corpus: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard job whose worker is killed never completes (Pool replaces the worker): the wait notices."""
    monkeypatch.setattr(convert_run, "plan_workers", lambda *args: WorkerPlan(1, True))
    monkeypatch.setattr(convert_worker.Workers, "submit", lambda self, fn, *args: self.pool.apply_async(_die))
    with pytest.raises(ShogiDnnError, match="a worker process died"):
        run_convert([corpus], tmp_path / "out", ConvertSettings(shard_size=150))


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
