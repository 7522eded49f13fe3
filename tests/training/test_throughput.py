"""The throughput model time = B / v0 + t: fit, saturation batch, speed-up, trainer advice, fit files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shogi_dnn.errors import ConfigError
from shogi_dnn.training import throughput

ONE_GPU = (258.0, 0.054)            # (v0 positions/s, t seconds): a small GPU
TWO_GPUS_NO_P2P = (514.0, 0.15)     # two of them with a slow all-reduce

BATCHES = np.array([8, 16, 32, 64, 128, 256, 512], dtype=np.float64)


def timings(v0: float, t: float, batches=BATCHES, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """Seconds per step from the model, with multiplicative noise of relative size `noise`."""
    rng = np.random.default_rng(seed)
    return (batches / v0 + t) * (1.0 + noise * rng.standard_normal(batches.shape))


@pytest.mark.parametrize("v0, t", [(258.0, 0.054), (514.0, 0.15), (40000.0, 0.002), (1000.0, 0.0)])
def test_fit_recovers_exact_parameters(v0: float, t: float) -> None:
    fit = throughput.fit_throughput(BATCHES, timings(v0, t), devices=3)
    assert fit.v0 == pytest.approx(v0, rel=1e-9)
    assert fit.t == pytest.approx(t, abs=1e-12)
    assert fit.devices == 3 and fit.num_points == BATCHES.size
    assert fit.rel_rms < 1e-9 and fit.r2 == pytest.approx(1.0)


def test_fit_with_noise_and_repeats() -> None:
    batches = np.repeat(BATCHES, 3)                  # three timings per batch, 3% noise each
    fit = throughput.fit_throughput(batches, timings(258.0, 0.054, batches, noise=0.03, seed=5))
    assert fit.v0 == pytest.approx(258.0, rel=0.05)
    assert fit.t == pytest.approx(0.054, rel=0.15)
    assert 0.01 < fit.rel_rms < 0.06 and fit.r2 > 0.99


def test_noise_can_not_make_the_fixed_cost_negative() -> None:
    seconds = timings(1000.0, 0.0) * np.array([0.97, 0.98, 1.0, 1.0, 1.0, 1.01, 1.0])
    unconstrained = np.polyfit(BATCHES, seconds, 1, w=1 / seconds)[1]
    assert unconstrained < 0                          # the free relative line would give t < 0 here
    fit = throughput.fit_throughput(BATCHES, seconds)
    assert fit.t == 0.0 and fit.v0 == pytest.approx(1000.0, rel=0.02)


def test_published_figures_reproduce() -> None:
    one = throughput.fit_throughput(BATCHES, timings(*ONE_GPU), devices=1)
    two = throughput.fit_throughput(2 * BATCHES, timings(*TWO_GPUS_NO_P2P, 2 * BATCHES), devices=2)
    assert (one.v0, one.t) == pytest.approx((258.0, 0.054))
    assert (two.v0, two.t) == pytest.approx((514.0, 0.15))
    assert one.b90 == pytest.approx(9 * 258 * 0.054)          # 125.4 positions
    assert one.throughput(one.b90) == pytest.approx(0.9 * 258)
    assert two.per_replica_b90 == pytest.approx(9 * 514 * 0.15 / 2)   # 346.95 per GPU
    assert one.throughput(1e9) == pytest.approx(258.0, rel=1e-6)       # v -> v0 as B grows
    gain = throughput.scaling(one, two)                   # at 2 GPUs' per-GPU b90
    v1 = 346.95 / (346.95 / 258 + 0.054)
    v2 = 693.9 / (693.9 / 514 + 0.15)
    assert gain.throughput_1 == pytest.approx(v1) and gain.throughput_n == pytest.approx(v2)
    assert gain.speedup == pytest.approx(v2 / v1) and gain.efficiency == pytest.approx(v2 / v1 / 2)
    assert 0.93 < gain.efficiency < 0.94
    small = throughput.scaling(one, two, per_replica_batch=32)   # small batches: t dominates, poor scaling
    assert small.efficiency < gain.efficiency


@pytest.mark.parametrize("batches, seconds, message", [
    ([64, 64, 64], [0.3, 0.31, 0.29], "at least 2 distinct batch sizes"),
    ([64], [0.3], "at least 2 distinct batch sizes"),
    ([8, 16], [0.1, 0.0], "seconds per step must be positive"),
    ([8, 16], [0.1, -1.0], "seconds per step must be positive"),
    ([8, 16], [0.1, float("nan")], "seconds per step must be positive"),
    ([0, 16], [0.1, 0.2], "batch sizes must be positive"),
    ([8, 16, 32], [0.1, 0.2], "3 batch sizes but 2 times"),
    ([8, 16, 32], [0.3, 0.2, 0.1], "does not grow with the batch"),
])
def test_bad_points_give_one_line_config_error(batches, seconds, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        throughput.fit_throughput(batches, seconds, devices=2)
    assert "\n" not in str(info.value) and str(info.value).startswith("2 device(s)")


def test_batch_advice_below_and_at_saturation() -> None:
    fit = throughput.ThroughputFit(devices=1, v0=258.0, t=0.054)
    low = throughput.batch_advice(16, fit)
    assert low.fraction == pytest.approx(16 / (16 + 258 * 0.054)) and not low.saturated
    assert "per-GPU batch 16 reaches 53% of the fitted v0" in low.text
    assert "~126 per GPU needed for 90%" in low.text
    high = throughput.batch_advice(126, fit)
    assert high.saturated and "kept busy" in high.text
    two = throughput.ThroughputFit(devices=2, v0=514.0, t=0.15)
    assert throughput.batch_advice(64, two).fraction == pytest.approx(128 / (128 + 514 * 0.15))
    assert "~347 per GPU" in throughput.batch_advice(64, two).text
    exact = throughput.ThroughputFit(devices=4, v0=8000.0, t=0.004)          # b90 = 288 = 4 x 72
    assert "~72 per GPU needed" in throughput.batch_advice(16, exact).text
    with pytest.raises(ConfigError, match="must be positive"):
        throughput.batch_advice(0, fit)


def test_fit_files_inline_and_selection(tmp_path) -> None:
    one = throughput.fit_throughput(BATCHES, timings(258.0, 0.054))
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"fits": [one.to_dict(), {"devices": 4, "v0": 900, "t": 0.2}]}))
    fits = throughput.load_fits(path)
    assert sorted(fits) == [1, 4] and fits[1].v0 == pytest.approx(258.0) and fits[4].t == 0.2
    assert fits[1].r2 == pytest.approx(1.0)
    assert throughput.select_fit(fits, 1).devices == 1 and throughput.select_fit(fits, 3).devices == 4
    assert throughput.select_fit(fits, 2).devices == 1 and throughput.select_fit(fits, 8).devices == 4
    inline = throughput.load_fits("v0=514, t=0.15, devices=2")
    assert inline[2] == throughput.ThroughputFit(devices=2, v0=514.0, t=0.15)


@pytest.mark.parametrize("content, message", [
    (None, "no such scaling fit file"),
    ("{not json", "not a readable JSON"),
    ('{"fits": []}', 'non-empty "fits" list'),
    ('{"fits": [{"devices": 1, "v0": 258}]}', "fits\\[0\\]: missing key 't'"),
    ('{"fits": [{"devices": 1, "v0": -1, "t": 0.1}]}', "v0 > 0"),
    ('{"fits": [{"devices": 1, "v0": "fast", "t": 0.1}]}', "must be numbers"),
])
def test_bad_fit_files(tmp_path, content, message) -> None:
    path = tmp_path / "fit.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        throughput.load_fits(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_bad_inline_fit() -> None:
    with pytest.raises(ConfigError, match="expected v0=POSITIONS_PER_S"):
        throughput.load_fits("v0=258,speed=3")


def test_advise_picks_the_fit_for_the_tower_count(tmp_path) -> None:
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"fits": [{"devices": 1, "v0": 258, "t": 0.054},
                                         {"devices": 2, "v0": 514, "t": 0.15}]}))
    advice = throughput.advise(path, 64, 2)
    assert advice.fit.devices == 2 and advice.fraction == pytest.approx(128 / (128 + 514 * 0.15))
    assert throughput.advise("v0=258,t=0.054", 200, 1).saturated
    with pytest.raises(ConfigError, match="no such scaling fit file"):
        throughput.advise(tmp_path / "missing.json", 64, 1)
