"""`shogi-dnn plan`: the table's numbers against a hand computation on a small dataset and the published
fits, prices, flags, JSON, the plot, and no TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shogi_dnn import cli
from shogi_dnn.config import load_config
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import plan, throughput
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset

ONE_GPU = (258.0, 0.054)            # (v0 positions/s, t seconds): a small GPU
TWO_GPUS_NO_P2P = (514.0, 0.15)     # two of them with a slow all-reduce

PUBLISHED = {1: throughput.ThroughputFit(1, *ONE_GPU),
             2: throughput.ThroughputFit(2, *TWO_GPUS_NO_P2P)}
SETS = ["train.per_replica_batch=100", "train.micro_batches=2", "train.epochs=3", "data.num_groups=4",
        "optim.lr=0.02", "optim.base_global_batch=256", "optim.lr_scaling=linear"]


@pytest.fixture
def dataset(tmp_path):
    # 4 training shards -> 4 sample groups (stages) of 3000, 2000, 2500, 2500 positions.
    return make_dataset(tmp_path / "ds", train=[3000, 2000, 2500, 2500], validation=[200])


def test_table_matches_a_hand_computation(dataset) -> None:
    cfg = load_config(REPO / "train" / "base.toml", SETS)
    result = plan.make_plan(dataset, cfg, PUBLISHED, devices=[1, 2], price_per_device_hour=0.9,
                            machine_prices={2: 1.5})
    one, two = result.rows
    assert result.train_positions == 10000 and result.group_positions == (2500, 2500, 2500, 2500)   # cut by rows
    # 1 device: B = 100, update = 200 positions; updates 12 + 12 + 12 + 12 = 48 per epoch.
    rate1 = 100 / (100 / 258 + 0.054)                       # 226.45 positions/s
    epoch1 = 48 * 200 / rate1
    assert (one.global_batch, one.per_gpu_batch, one.update_batch, one.updates_per_epoch) == (100, 100, 200, 48)
    assert one.rate == pytest.approx(rate1) and one.epoch_seconds == pytest.approx(epoch1)
    assert one.stage_seconds == pytest.approx(epoch1 / 4) and one.run_seconds == pytest.approx(3 * epoch1)
    assert one.per_gpu_b90 == pytest.approx(9 * 258 * 0.054) and one.fraction_v0 == pytest.approx(100 / (100 + 258 * 0.054))
    assert one.epoch_cost == pytest.approx(0.9 * epoch1 / 3600) and one.run_cost == pytest.approx(2.7 * epoch1 / 3600)
    assert one.lr == pytest.approx(0.02 * 200 / 256) and one.speedup == 1.0 and one.efficiency == 1.0
    # 2 devices: B = 200, update = 400; updates 6 + 6 + 6 + 6 = 24.
    rate2 = 200 / (200 / 514 + 0.15)                        # 371.0 positions/s
    epoch2 = 24 * 400 / rate2
    assert (two.global_batch, two.per_gpu_batch, two.update_batch, two.updates_per_epoch) == (200, 100, 400, 24)
    assert two.rate == pytest.approx(rate2) and two.epoch_seconds == pytest.approx(epoch2)
    assert two.per_gpu_b90 == pytest.approx(9 * 514 * 0.15 / 2)
    assert two.price_per_hour == 1.5 and two.run_cost == pytest.approx(1.5 * 3 * epoch2 / 3600)
    assert two.speedup == pytest.approx(epoch1 / epoch2) and two.efficiency == pytest.approx(epoch1 / epoch2 / 2)
    assert two.lr == pytest.approx(0.02 * 400 / 256)
    assert one.flags == two.flags == (plan.FLAG_BATCH,)        # 100 < 125.4 and 100 < 347.0
    print("\n" + plan.format_plan(result))


def test_pipeline_flag_and_core_scaling(dataset) -> None:
    cfg = load_config(REPO / "train" / "base.toml", SETS + ["train.per_replica_batch=400"])
    slow = plan.make_plan(dataset, cfg, PUBLISHED, devices=[1, 2], pipeline=plan.Pipeline(300.0))
    # GPUs: 1 device 400 / (400/258 + 0.054) = 249 < 300; 2 devices 800 / (800/514 + 0.15) = 468 > 300.
    assert slow.rows[0].flags == () and slow.rows[1].flags == (plan.FLAG_INPUT,)
    assert slow.rows[1].rate == 300.0 and slow.rows[1].gpu_rate == pytest.approx(800 / (800 / 514 + 0.15))
    scaled = plan.make_plan(dataset, cfg, PUBLISHED, devices=[2], pipeline=plan.Pipeline(300.0, 4, 2))
    assert scaled.rows[0].pipeline_rate == 600.0 and scaled.rows[0].flags == ()


def test_unmeasured_device_count_scales_the_nearest_fit(dataset) -> None:
    cfg = load_config(REPO / "train" / "base.toml", ["train.per_replica_batch=32", "data.num_groups=2"])
    row = plan.make_plan(dataset, cfg, PUBLISHED, devices=[8]).rows[0]
    assert row.fit_devices == 2 and row.v0 == pytest.approx(514 * 4) and row.t == 0.15
    assert row.epoch_cost is None and "~2" in plan.format_plan(plan.make_plan(dataset, cfg, PUBLISHED, devices=[8]))


def test_prices_parse() -> None:
    assert plan.parse_prices(["0.9", "8=7.2,2=1.9"]) == (0.9, {8: 7.2, 2: 1.9})
    with pytest.raises(ConfigError, match="8=x"):
        plan.parse_prices(["8=x"])
    with pytest.raises(ConfigError, match="non-negative"):
        plan.parse_prices(["-1"])


def test_command_json_plot_and_fit_file_without_tensorflow(dataset, tmp_path) -> None:
    fit_file = tmp_path / "fit.json"
    fit_file.write_text(json.dumps({"fits": [f.to_dict() for f in PUBLISHED.values()]}))
    png = tmp_path / "plan.png"
    code = ("import sys\nfrom shogi_dnn import cli\n"
            f"rc = cli.main(['plan', '--data', {str(dataset.root)!r}, '--config', {str(REPO / 'train/base.toml')!r},"
            " '--set', 'train.per_replica_batch=64', '--set', 'data.num_groups=2',"
            f" '--scaling-fit', {str(fit_file)!r}, '--price-per-hour', '8=7.2', '--devices', '1,2,8',"
            f" '--json', '--plot', {str(png)!r}])\n"
            "assert rc == 0\nassert not {'tensorflow', 'keras'} & set(sys.modules), 'TF imported'\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["devices"] for r in data["rows"]] == [1, 2, 8]
    assert data["rows"][2]["price_per_hour"] == 7.2 and data["rows"][0]["run_cost"] is None
    assert png.stat().st_size > 1000


def test_command_needs_a_fit(dataset, capsys) -> None:
    assert cli.main(["plan", "--data", str(dataset.root), "--config", str(REPO / "train/base.toml")]) == 2
    assert "--scaling-fit" in capsys.readouterr().err


def test_plan_says_what_it_leaves_out_and_what_to_change(dataset, capsys, tmp_path) -> None:
    cfg = load_config(REPO / "train/base.toml", SETS)
    text = plan.format_plan(plan.make_plan(dataset, cfg, PUBLISHED, devices=[1]))
    assert "not counted: start-up" in text and "validation passes" in text
    big = load_config(REPO / "train/base.toml", [*SETS, "train.per_replica_batch=4000"])
    with pytest.raises(ConfigError, match="fewer than one update .*: lower data.num_groups"):
        plan.make_plan(dataset, big, PUBLISHED, devices=[1])
    assert cli.main(["plan", "--data", str(dataset.root), "--config", str(REPO / "train/base.toml"),
                     "--gpu", "T4", "--plot", str(tmp_path / "p.png")]) == 2
    assert "--plot draws a measured fit's curve" in capsys.readouterr().err and not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("epoch_seconds, unit, first", [(21 * 60, "minutes", 21.0), (6 * 3600, "hours", 6.0),
                                                        (3 * 86400, "days", 3.0)])
def test_plot_reads_in_the_unit_that_fits(dataset, epoch_seconds: float, unit: str, first: float) -> None:
    """plan.png's axis is in minutes, hours or days as the longest epoch needs; each point says its time."""
    import dataclasses

    from shogi_dnn.wording import duration_unit, format_duration

    cfg = load_config(REPO / "train" / "base.toml", SETS)
    result = plan.make_plan(dataset, cfg, PUBLISHED, devices=[1, 2], price_per_device_hour=0.9)
    scale = epoch_seconds / result.rows[0].epoch_seconds
    rows = tuple(dataclasses.replace(r, epoch_seconds=r.epoch_seconds * scale) for r in result.rows)
    fig = plan.plan_figure(dataclasses.replace(result, rows=rows))
    ax = fig.axes[0]
    assert ax.get_ylabel() == f"{unit} per epoch" and duration_unit(epoch_seconds)[0] == unit
    assert ax.lines[0].get_ydata()[0] == pytest.approx(first)
    assert [t.get_text() for t in ax.texts] == [format_duration(r.epoch_seconds) for r in rows]
    assert fig.axes[1].get_ylabel() == "cost per run (3 epoch(s))"
    assert duration_unit(2 * 3600 - 1)[0] == "minutes" and duration_unit(2 * 86400)[0] == "days"
