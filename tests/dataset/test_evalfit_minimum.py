"""evalfit: a fitted on too few games or positions falls back to DEFAULT_SCALE with a one-line warning;
the fit carries its games, positions and a bootstrap interval over games, shown by the run's report."""

from __future__ import annotations

import json

import numpy as np

from shogi_dnn.analysis import report
from shogi_dnn.dataset import evalfit
from tests.support.metricsgen import write_metrics


def _games(n_games: int, per_game: int, scale: float, seed: int = 0) -> evalfit.EvalStats:
    """Stats of n_games games whose evaluations predict the result with `scale`; within a game every
    position shares the game's result."""
    rng = np.random.default_rng(seed)
    stats = evalfit.EvalStats()
    for g in range(n_games):
        evals = rng.integers(-1500, 1501, per_game)
        win = float(rng.random() < 1 / (1 + np.exp(-evals.mean() / scale)))
        stats.add(evals.astype(np.int16), np.full(per_game, win, np.float32),
                  np.arange(per_game, dtype=np.int16), np.full(per_game, g, np.int32))
    return stats


def test_a_fit_on_two_games_keeps_the_default_scale_and_says_so() -> None:
    fit = evalfit.fit_stats(_games(2, 1500, 500.0))
    assert fit is not None and fit.games == 2 and fit.positions == 3000
    assert fit.scale == evalfit.DEFAULT_SCALE and fit.fitted != evalfit.DEFAULT_SCALE and not fit.enough
    warning = fit.warning()
    assert warning is not None and "\n" not in warning
    assert "2 games" in warning and "using the default a = 756 cp/logit" in warning
    target = evalfit.EvalTarget(0.67, fit.scale, None, "constant", fit, 0.67)
    assert "a = 756 cp/logit (default: too few games; fitted on results: " in target.describe()


def test_a_fit_on_enough_games_is_used_with_its_interval_over_games() -> None:
    fit = evalfit.fit_stats(_games(400, 20, 500.0))
    assert fit is not None and fit.enough and fit.warning() is None
    assert fit.games == 400 and fit.scale == fit.fitted
    low, high = fit.interval
    assert low < fit.fitted < high and high - low > 20       # games, not positions, are the unit
    again = evalfit.EvalFit.from_dict(json.loads(json.dumps(fit.to_dict())))
    assert again == fit
    text = fit.fit_text()
    assert text.startswith(f"a = {fit.fitted:.0f} cp/logit (95% interval {low:.0f}-{high:.0f} over 400 games")


def test_the_interval_over_games_is_wider_than_one_over_positions() -> None:
    # the same positions as one game each: the interval shrinks, so the unit really is the game
    by_game = evalfit.fit_stats(_games(100, 40, 500.0))
    stats = _games(100, 40, 500.0)
    stats.kept = [(e, w, np.arange(e.size, dtype=np.int64)) for e, w, _ in stats.kept]
    by_position = evalfit.bootstrap_interval(stats)
    assert by_game.interval[1] - by_game.interval[0] > 1.5 * (by_position[1] - by_position[0])


def test_the_report_shows_the_fit_games_and_interval(tmp_path) -> None:
    fit = evalfit.fit_stats(_games(2, 1500, 500.0))
    target = evalfit.EvalTarget(0.67, fit.scale, None, "constant", fit, 0.67)
    write_metrics(tmp_path, gpus=1)
    (tmp_path / "run.json").write_text(json.dumps({"data_dir": "/data", "devices": ["GPU:0"],
                                                   "num_replicas": 1, "eval_target": target.to_dict()}))
    text = report.render_markdown(tmp_path, [], {}, {}, [])
    line = next(x for x in text.splitlines() if x.startswith("- evaluation targets"))
    assert "a = 756 cp/logit (the default: the fit saw fewer than 50 games" in line
    assert f"fitted on results: {fit.fitted:.0f} cp/logit (95% interval " in line
    assert "over 2 games, 3,000 positions)" in line


def test_a_set_scale_is_named_as_set() -> None:
    fit = evalfit.fit_stats(_games(2, 1500, 500.0))
    target = evalfit.EvalTarget(0.5, 600.0, None, "constant", fit, 0.5, True)
    assert "(set; fitted on results:" in target.describe()
