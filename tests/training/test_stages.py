"""The stage plan's arithmetic (stages.StagePlan): planned updates per stage, epoch and run without a list
per epoch (issue 31: train.epochs = 10**12 built per-epoch lists for minutes, deaf to signals)."""

from __future__ import annotations

import tracemalloc

import pytest

from shogi_dnn.config import MAX_EPOCHS, from_dict
from shogi_dnn.dataset.shards import Manifest
from shogi_dnn.errors import ConfigError
from shogi_dnn.training.stages import MAX_LANED_STAGES, StagePlan
from tests.support.shardgen import make_dataset


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    return make_dataset(tmp_path_factory.mktemp("data"), train=[200, 170, 180], chunk_rows=32)


def plan_of(manifest: Manifest, epochs: int, lanes: int = 1, max_steps: int = 0) -> StagePlan:
    data = {"num_groups": 3, "shuffle_buffer": 64, "read_lanes": lanes}
    train = {"epochs": epochs, "max_steps_per_stage": max_steps, "seed": 4}
    return StagePlan(manifest, from_dict({"data": data, "train": train}), 16)


@pytest.mark.parametrize("lanes, max_steps", [(1, 0), (1, 5), (2, 0), (4, 3)])
def test_planned_updates_add_up_stage_by_stage(manifest: Manifest, lanes: int, max_steps: int) -> None:
    plan = plan_of(manifest, 3, lanes, max_steps)
    stages = [[plan.stage(e, i).updates for i in range(plan.num_groups)] for e in range(plan.epochs)]
    assert all(plan.stage(e, i).updates == plan.stage(e, i).remaining(0) for e in range(3) for i in range(3))
    assert plan.total_updates() == sum(map(sum, stages))
    state = plan.initial_state()
    while not plan.finished(state):            # what is left, at the start and one update into each stage
        e, i = state.epoch, state.stage
        later = sum(stages[e][i + 1:]) + sum(map(sum, stages[e + 1:]))
        assert plan.updates_left(state) == (stages[e][i], sum(stages[e][i:]), stages[e][i] + later)
        one_in = state.advance(1, 16)
        left = stages[e][i] - 1
        assert left < 0 or plan.updates_left(one_in) == (left, sum(stages[e][i:]) - 1, left + later)
        state = plan.next_stage(state)
    assert plan.updates_left(state) == (0, 0, 0)


def test_the_largest_plan_is_arithmetic_not_a_list(manifest: Manifest) -> None:
    tracemalloc.start()
    try:
        plan = plan_of(manifest, MAX_EPOCHS, max_steps=1)
        assert plan.total_updates() == 3 * MAX_EPOCHS
        assert plan.updates_left(plan.initial_state()) == (1, 3, 3 * MAX_EPOCHS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak            # a tuple per epoch: over 100 MB for MAX_EPOCHS


def test_absurd_plans_are_refused_in_one_line(manifest: Manifest) -> None:
    with pytest.raises(ConfigError, match=r"train.epochs = 1000000000000 must be in \(0, 1,000,000\]"):
        from_dict({"train": {"epochs": 10 ** 12}})
    epochs = MAX_LANED_STAGES // 3 + 1           # several read lanes: every stage is counted
    with pytest.raises(ConfigError, match=rf"train.epochs = {epochs} x 3 sample groups = .* more than the "
                                          rf"{MAX_LANED_STAGES:,} a run with 2 read lanes may plan"):
        plan_of(manifest, epochs, lanes=2)
