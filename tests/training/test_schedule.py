"""The data plan (training/schedule.py): sample groups, group order, stage seeds, read-lane checks.
The plan's agreement with the stream it describes is tested with the stream, in test_pipeline.py."""

from __future__ import annotations

import pytest

from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import schedule


def test_split_groups_cut_by_rows_whatever_the_shards():
    infos = [shards.ShardInfo(f"s{i}.h5", "train", n, 1, "") for i, n in enumerate([100, 100, 100, 100, 50, 50])]
    groups = schedule.split_groups(infos, 3)                    # 500 rows: [0, 166), [166, 333), [333, 500)
    assert [g.positions for g in groups] == [166, 167, 167]
    assert [[s.path for s in g.shards] for g in groups] == [["s0.h5", "s1.h5"], ["s1.h5", "s2.h5", "s3.h5"],
                                                            ["s3.h5", "s4.h5", "s5.h5"]]
    assert [g.rows for g in groups] == [(0, 166), (66, 233), (33, 200)]
    # More groups than shards: one shard holds several groups (the issue: 4 groups on 2 shards).
    two = [shards.ShardInfo(f"t{i}.h5", "train", 1000, 1, "") for i in range(2)]
    groups = schedule.split_groups(two, 4)
    assert [(tuple(s.path for s in g.shards), g.rows) for g in groups] == [
        (("t0.h5",), (0, 500)), (("t0.h5",), (500, 1000)), (("t1.h5",), (0, 500)), (("t1.h5",), (500, 1000))]
    assert len(schedule.split_groups(infos, 1)) == 1 and schedule.split_groups(infos, 1)[0].rows == (0, 500)
    assert [g.positions for g in schedule.split_groups(infos, 500)] == [1] * 500
    with pytest.raises(ConfigError, match="num_groups = 501, but the training split has 500 positions"):
        schedule.split_groups(infos, 501)


def test_group_size_error_is_one_line_saying_what_to_change():
    from shogi_dnn.training.stages import check_group_size

    check_group_size(4 * 128, 4, 128)
    with pytest.raises(ConfigError) as info:
        check_group_size(4 * 128 - 1, 4, 128)
    message = str(info.value)
    assert "\n" not in message and "data.num_groups = 4" in message and "set data.num_groups to at most 3" in message
    with pytest.raises(ConfigError, match="set train.global_batch = 100, or convert more games"):
        check_group_size(100, 1, 128)


def test_group_order_is_a_seeded_permutation_per_epoch():
    orders = [schedule.group_order(3, epoch, 8) for epoch in range(4)]
    assert all(sorted(o) == list(range(8)) for o in orders)
    assert orders[0] == schedule.group_order(3, 0, 8)
    assert len({tuple(o) for o in orders}) > 1
    assert schedule.stage_seed(1, 0, 0) != schedule.stage_seed(1, 0, 1) != schedule.stage_seed(1, 1, 1)


def test_resolve_lanes_is_the_one_check_of_lanes_workers_batch_and_skip():
    assert schedule.resolve_lanes(0, 2, 64) == 2 and schedule.resolve_lanes(4, 2, 64, skip_samples=8) == 4
    with pytest.raises(ConfigError, match="data.read_lanes = -1 must be >= 0"):
        schedule.resolve_lanes(-1, 1, 64)
    with pytest.raises(ConfigError, match=r"3 read lanes \(data.read_lanes\) are not a multiple of the 2 workers"):
        schedule.resolve_lanes(3, 2, 66)
    with pytest.raises(ConfigError, match="global_batch = 30 is not divisible by 4 read lanes"):
        schedule.resolve_lanes(4, 1, 30)
    with pytest.raises(ConfigError, match="skip_samples = 6 is not a multiple of the 4 read lanes"):
        schedule.resolve_lanes(4, 1, 32, skip_samples=6)


def test_schedule_does_not_import_tensorflow():
    import subprocess
    import sys
    code = "import sys, shogi_dnn.training.schedule, shogi_dnn.training.stages; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_corrupt_train_state_names_the_field_not_a_class() -> None:
    from shogi_dnn.errors import RunError
    from shogi_dnn.training.stages import TrainState

    with pytest.raises(RunError) as info:
        TrainState.from_dict({"step": 1}, "ckpt-1/state.json")
    assert str(info.value).startswith("ckpt-1/state.json: corrupt train state (no field 'samples')")
    assert "KeyError" not in str(info.value)
