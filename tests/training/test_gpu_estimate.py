"""`plan --gpu NAME`: FLOPs per position from the model (against a hand count), the published-peaks
rule as an interval, the input pipeline's ceiling, time and cost before any fit, and one line for an
unknown GPU."""

from __future__ import annotations

import json

import pytest

from shogi_dnn import cli
from shogi_dnn.config import ModelConfig, load_config
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import gpus, memory, plan
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset


@pytest.fixture
def dataset(tmp_path):
    # 5,000 training positions: data.num_groups = 2 cuts them into 2 groups of 2,500
    make_dataset(tmp_path / "ds", train=[3000, 2000], validation=[200])
    return tmp_path / "ds"


def test_forward_macs_against_a_hand_count() -> None:
    small = ModelConfig(filters=4, blocks=1, value_hidden=8)
    # stem 81 x 9 x 42 x 4 + one block's two convs 2 x 81 x 9 x 4 x 4; head: 1x1 conv 81 x 4, dense
    # 81 x 8, dense 8 x 1
    assert memory.forward_macs(small) == 81 * 9 * 42 * 4 + 2 * 81 * 9 * 16 + 81 * 4 + 81 * 8 + 8 == 146_780
    pooled = ModelConfig(filters=4, blocks=1, value_hidden=8, value_head="pool", block="se", se_ratio=2)
    # pool head: dense 4 x 8, dense 8 x 1; se: dense 4 x 2, dense 2 x 8
    assert memory.forward_macs(pooled) == 81 * 9 * 42 * 4 + 2 * 81 * 9 * 16 + (4 * 2 + 2 * 8) + 4 * 8 + 8
    policy = ModelConfig(filters=4, blocks=1, value_hidden=8, policy_head=True)
    assert memory.forward_macs(policy) - memory.forward_macs(small) == 81 * (4 * 4 + 4 * 27)
    assert memory.training_flops(small) == 6 * 146_780
    preset = load_config(REPO / "train" / "cloud-8gpu.toml").model      # 10 x 192: about 3.3 GFLOP
    assert 3.2e9 < memory.training_flops(preset) < 3.4e9


def test_the_rate_interval_follows_the_stated_rule() -> None:
    t4 = gpus.find_gpu("t4")
    flops = 3.29e9
    low, high = gpus.gpu_rate(t4, flops, "mixed_float16")
    assert low == pytest.approx(0.2 * 65e12 / flops) and high == pytest.approx(0.4 * 65e12 / flops)
    assert gpus.gpu_rate(t4, flops, "none")[1] == pytest.approx(0.4 * 8.1e12 / flops)
    low8, high8 = gpus.gpu_rate(t4, flops, "mixed_float16", 8)
    assert high8 == pytest.approx(8 * high) and low8 == pytest.approx(8 * low * gpus.MULTI_GPU_LOW)
    assert gpus.find_gpu("GeForce RTX 4090") is gpus.GPUS["rtx4090"]
    assert all(g.source.startswith("https://") for g in gpus.GPUS.values())


def test_an_unknown_gpu_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        gpus.find_gpu("V100")
    message = str(info.value)
    assert "\n" not in message and "'V100'" in message
    for name in ("T4", "A10G", "L4", "A100", "H100", "RTX4090"):
        assert name in message


def test_estimate_times_and_costs_are_intervals(dataset) -> None:
    cfg = load_config(REPO / "train" / "home-1gpu.toml",
                      ["train.epochs=3", "data.num_groups=2", "train.global_batch=0",
                       "train.per_replica_batch=500"])
    manifest = shards.read_manifest(dataset)
    e = plan.estimate_plan(manifest, cfg, gpus.find_gpu("L4"), devices=2, price_per_hour=1.5)
    assert e.update_batch == 1000 and e.updates_per_epoch == 2 + 2        # 2,500 // 1,000 per group
    low, high = gpus.gpu_rate(gpus.find_gpu("L4"), memory.training_flops(cfg.model), "mixed_float16", 2)
    assert e.rate == (low, high)
    assert e.epoch_seconds == pytest.approx((4000 / high, 4000 / low))
    assert e.run_seconds == pytest.approx((3 * 4000 / high, 3 * 4000 / low))
    assert e.run_cost == pytest.approx((1.5 * e.run_seconds[0] / 3600, 1.5 * e.run_seconds[1] / 3600))
    bound = plan.estimate_plan(manifest, cfg, gpus.find_gpu("H100"), devices=2, cpus=1)
    assert bound.rate[1] == gpus.PIPELINE_PER_CORE < bound.gpu_rate[1]       # the input pipeline caps it


def test_plan_gpu_prints_time_and_cost_before_any_fit(dataset, capsys) -> None:
    args = ["plan", "--data", str(dataset), "--config", str(REPO / "train" / "home-1gpu.toml"),
            "--set", "data.num_groups=2", "--set", "train.global_batch=500"]
    assert cli.main([*args, "--gpu", "A100", "--gpus", "1", "--price-per-hour", "2", "--cpus", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 x A100 (312.0 TFLOP/s peak, mixed precision; https://")
    assert "positions/s: " in out and "cost: " in out and "at 2.00/hour" in out and "bench scaling" in out
    assert cli.main([*args, "--gpu", "A100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu"]["name"] == "A100" and data["run_cost"] is None and len(data["run_seconds"]) == 2
    assert cli.main([*args, "--gpu", "V100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "known: T4, A10G, L4, A100, H100, RTX4090" in err
    assert cli.main(args) == 2
    assert "--gpu NAME" in capsys.readouterr().err
