"""Scores on constructed cases with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shogi_dnn.analysis import scoring


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_loss_matches_the_definition_including_draws() -> None:
    x = np.array([2.0, -1.0, 0.5, -30.0, 40.0])
    y = np.array([1.0, 0.0, 0.5, 1.0, 0.0])
    p = 1 / (1 + np.exp(-x))
    with np.errstate(divide="ignore"):
        expected = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    expected[4] = 40.0          # log(1 - p) underflows for p = 1 - 4e-18; the true loss is ~x
    np.testing.assert_allclose(scoring.cross_entropy(x, y), expected, rtol=1e-9)
    assert math.isfinite(scoring.log_loss(x, y))


def test_accuracy_counts_decisive_positions_only() -> None:
    x = np.array([1.0, 1.0, -1.0, -1.0, 3.0, -3.0])
    y = np.array([1.0, 0.0, 0.0, 0.0, 0.5, 0.5])      # 3 of 4 decisive right; two draws
    assert scoring.accuracy(x, y) == pytest.approx(0.75)
    s = scoring.Scorer()
    s.add(x, y)
    out = s.summary()
    assert out["positions"] == 6 and out["decisive"] == 4 and out["accuracy"] == pytest.approx(0.75)
    assert out["draws"]["positions"] == 2
    assert out["draws"]["mean_prob"] == pytest.approx(0.5)
    assert math.isnan(scoring.accuracy(x[4:], y[4:]))


def test_ece_on_a_constructed_case() -> None:
    # 400 positions at p = 0.25 of which 100 won (calibrated); 400 at p = 0.75 of which 200 won (gap 0.25).
    x = np.concatenate([np.full(400, logit(0.25)), np.full(400, logit(0.75))])
    y = np.concatenate([np.repeat([1.0, 0.0], [100, 300]), np.repeat([1.0, 0.0], [200, 200])])
    rows, ece = scoring.reliability_table(x, y, bins=10)
    assert ece == pytest.approx(0.5 * 0.0 + 0.5 * 0.25)
    assert [(r["lo"], r["positions"]) for r in rows] == [(0.2, 400), (0.7, 400)]
    assert rows[0]["mean_label"] == pytest.approx(0.25) and rows[1]["mean_label"] == pytest.approx(0.5)
    # Brier: group 1 0.25*0.75^2 + 0.75*0.25^2 = 0.1875; group 2 0.5*0.25^2 + 0.5*0.75^2 = 0.3125.
    assert scoring.brier(x, y) == pytest.approx((0.1875 + 0.3125) / 2)


def test_perfect_calibration_has_zero_ece() -> None:
    x = np.concatenate([np.full(10, logit(0.1)), np.full(10, logit(0.9))])
    y = np.array([1.0] + [0.0] * 9 + [1.0] * 9 + [0.0])
    assert scoring.reliability_table(x, y)[1] == pytest.approx(0.0, abs=1e-12)


def test_merged_scorers_equal_one_scorer_and_buckets_partition() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000)
    y = rng.choice([0.0, 0.5, 1.0], size=1000, p=[0.45, 0.1, 0.45])
    ply = rng.integers(0, 200, size=1000)
    rating = np.where(rng.random(1000) < 0.2, np.nan, rng.uniform(500, 4000, size=1000))
    whole = scoring.Scorer()
    whole.add(x, y, ply, rating)
    parts = [scoring.Scorer() for _ in range(3)]
    for i, part in enumerate(parts):
        part.add(x[i::3], y[i::3], ply[i::3], rating[i::3])
    merged = scoring.Scorer()
    for part in parts:
        merged.merge(part)
    a, b = whole.summary(), merged.summary()
    for key in ("positions", "loss", "accuracy", "brier", "ece"):
        assert a[key] == pytest.approx(b[key])
    assert a["loss"] == pytest.approx(scoring.log_loss(x, y))
    assert sum(r["positions"] for r in a["by_ply"]) == 1000
    assert sum(r["positions"] for r in a["by_rating"]) == int(np.isfinite(rating).sum())
    early = next(r for r in a["by_ply"] if r["lo"] == 0)
    assert early["positions"] == int((ply < 20).sum())
    assert early["loss"] == pytest.approx(scoring.log_loss(x[ply < 20], y[ply < 20]))
    # Positions-weighted mean of the parts' losses is the total loss.
    weighted = sum(p.summary()["loss"] * p.summary()["positions"] for p in parts) / 1000
    assert weighted == pytest.approx(a["loss"])


def test_empty_scorer_gives_nulls_and_spread() -> None:
    out = scoring.Scorer().summary()
    assert out["positions"] == 0 and out["loss"] is None and out["ece"] is None
    assert scoring.spread([0.5, None, 0.7]) == pytest.approx(0.2)
    assert scoring.spread([None]) is None


# ---------------------------------------------------------------------------------------------------
# per-game sums and the bootstrap over games


def test_game_sums_are_the_per_game_scores() -> None:
    games = np.array([5, 5, 2, 2, 2, 9])
    x = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 0.2])
    y = np.array([1.0, 1.0, 0.0, 0.5, 0.0, 1.0])
    sums = scoring.GameSums()
    sums.add(games[:3], x[:3], y[:3])
    other = scoring.GameSums()
    other.add(games[3:], x[3:], y[3:])
    sums.merge(other)                                       # two towers' parts add up
    np.testing.assert_array_equal(sums.game_ids(), [2, 5, 9])
    game2 = games == 2
    assert sums.sums[scoring.POSITIONS, 2] == 3 and sums.sums[scoring.DECISIVE, 2] == 2
    assert sums.sums[scoring.CORRECT, 2] == 1               # 0.5 -> "wins" but lost; -1 -> "loses" and lost
    assert sums.sums[scoring.LOSS, 2] == pytest.approx(scoring.cross_entropy(x[game2], y[game2]).sum())
    summary = sums.summary()
    assert summary["positions"] == 6 and summary["games"] == 3
    assert summary["loss"] == pytest.approx(scoring.log_loss(x, y))
    assert summary["accuracy"] == pytest.approx(scoring.accuracy(x, y))
    assert summary["brier"] == pytest.approx(scoring.brier(x, y))
    masked = scoring.GameSums()
    masked.add(games, x, y, mask=games != 5, predicted_win=np.ones(6, bool))
    assert masked.summary()["positions"] == 4 and masked.summary()["accuracy"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="ids must be >= 0"):
        masked.add(np.array([-1]), np.zeros(1), np.ones(1))
    with pytest.raises(ValueError, match="2 game ids, 1 logits"):
        masked.add(np.array([1, 2]), np.zeros(1), np.ones(1))


def one_game_per_accuracy(correct: list[int], decisive: list[int]) -> scoring.GameSums:
    """Games with the given correct/decisive counts (no draws): logit +1 for a right call, -1 for a wrong
    one."""
    games, x = [], []
    for g, (c, d) in enumerate(zip(correct, decisive)):
        games += [g] * d
        x += [1.0] * c + [-1.0] * (d - c)
    sums = scoring.GameSums()
    sums.add(np.array(games), np.array(x), np.ones(len(x)))
    return sums


def test_bootstrap_interval_is_the_exact_resampling_distributions_percentiles() -> None:
    # 4 games; the bootstrap distribution of the pooled accuracy is enumerable: 4^4 equally likely draws.
    correct, decisive = [0, 2, 2, 2], [5, 3, 3, 3]
    sums = one_game_per_accuracy(correct, decisive)
    values = np.round([sum(correct[g] for g in draw) / sum(decisive[g] for g in draw)
                       for draw in np.ndindex(4, 4, 4, 4)], 12)
    distinct = np.unique(values)
    below = np.array([np.mean(values < v) for v in distinct])       # P(X < atom), P(X <= atom)
    upto = np.array([np.mean(values <= v) for v in distinct])
    lo_exact, hi_exact = distinct[np.searchsorted(upto, 0.025)], distinct[np.searchsorted(upto, 0.975)]
    assert (lo_exact, hi_exact) == (pytest.approx(1 / 9), pytest.approx(2 / 3))
    # the sampled percentiles land on the same atoms unless the CDF sits near 2.5% / 97.5% at a jump
    edges = np.concatenate([below, upto])
    assert np.all(np.abs(edges - 0.025) > 0.008) and np.all(np.abs(edges - 0.975) > 0.008)
    boot = scoring.bootstrap_games({"model": sums}, resamples=20000, seed=7)
    accuracy = boot.intervals["model"]["accuracy"]
    assert accuracy.estimate == pytest.approx(6 / 14)
    assert accuracy.lo == pytest.approx(lo_exact) and accuracy.hi == pytest.approx(hi_exact)
    assert boot.games == 4 and boot.describe() == {"unit": "game", "games": 4, "resamples": 20000, "seed": 7,
                                                   "level": 0.95}


def test_resample_counts_draw_games_with_replacement() -> None:
    blocks = list(scoring.resample_counts(5, resamples=12, seed=3))
    counts = np.concatenate(blocks)
    assert counts.shape == (12, 5) and np.all(counts.sum(axis=1) == 5) and np.all(counts >= 0)
    np.testing.assert_array_equal(counts, np.concatenate(list(scoring.resample_counts(5, 12, 3))))
    assert not np.array_equal(counts, np.concatenate(list(scoring.resample_counts(5, 12, 4))))
    # blocks stay within RESAMPLE_CELLS: many games, fewer resamples a block
    big = scoring.RESAMPLE_CELLS // 4 + 1
    first = next(scoring.resample_counts(big, resamples=10))
    assert first.shape == (3, big)


def test_paired_differences_by_hand_and_identical_predictors() -> None:
    rng = np.random.default_rng(0)
    games = np.repeat(np.arange(40), 25)
    y = (rng.random(games.size) < 0.5).astype(np.float64)
    strength = rng.normal(0, 2, 40)[games]                 # some games easy, some hard: shared by both
    model_x = (2 * y - 1) * strength + rng.normal(0, 1, games.size)
    base_x = model_x - 0.3 * (2 * y - 1) * (rng.random(games.size) < 0.2)
    sums = {}
    for name, x in (("model", model_x), ("baseline", base_x), ("same", model_x.copy())):
        sums[name] = scoring.GameSums()
        sums[name].add(games, x, y)
    boot = scoring.bootstrap_games(sums, [("model", "baseline"), ("model", "same")], resamples=500, seed=11)
    # by hand: the same resamples, totals per resample, the difference of the ratios
    per_game = {n: np.stack([np.bincount(games, weights=w, minlength=40) for w in (
        scoring.cross_entropy(x, y), np.ones_like(y))])
        for n, x in (("model", model_x), ("baseline", base_x))}
    counts = np.concatenate(list(scoring.resample_counts(40, 500, 11)))
    loss = {n: (counts @ s[0]) / (counts @ s[1]) for n, s in per_game.items()}
    lo, hi = np.percentile(loss["model"] - loss["baseline"], [2.5, 97.5])
    diff = boot.differences[("model", "baseline")]["loss"]
    assert diff.lo == pytest.approx(lo) and diff.hi == pytest.approx(hi)
    assert diff.estimate == pytest.approx(scoring.log_loss(model_x, y) - scoring.log_loss(base_x, y))
    assert diff.resolved and diff.hi < 0                    # the baseline's extra error shows through pairing
    own = boot.intervals["model"]["loss"]
    assert own.lo <= own.estimate <= own.hi and (hi - lo) < (own.hi - own.lo) / 3
    for metric in ("accuracy", "loss"):
        same = boot.differences[("model", "same")][metric]
        assert (same.estimate, same.lo, same.hi, same.resolved) == (0.0, 0.0, 0.0, False)
        interval = boot.intervals["model"][metric]
        assert interval.lo <= interval.estimate <= interval.hi
    same_pair = boot.differences[("model", "same")]
    text = scoring.comparison_text("same", {m: i.to_dict() for m, i in same_pair.items()})
    assert text == ("model vs same: accuracy +0.0000 (95% +0.0000..+0.0000 over games: not resolved), "
                    "log loss +0.0000 (95% +0.0000..+0.0000 over games: not resolved)")


def test_bootstrap_refuses_different_positions_and_nothing() -> None:
    a, b = scoring.GameSums(), scoring.GameSums()
    a.add(np.array([0, 1, 1]), np.zeros(3), np.ones(3))
    b.add(np.array([0, 1]), np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="different positions"):
        scoring.bootstrap_games({"model": a, "material": b})
    with pytest.raises(ValueError, match="no positions"):
        scoring.bootstrap_games({"model": scoring.GameSums()})


def test_comparison_wording() -> None:
    def diff(estimate: float, lo: float, hi: float) -> dict[str, float]:
        return {"estimate": estimate, "lo": lo, "hi": hi}

    ahead = {"accuracy": diff(0.021, 0.004, 0.038), "loss": diff(-0.05, -0.07, -0.03)}
    assert scoring.comparison_text("material", ahead) == (
        "model ahead of material: accuracy +0.0210 (95% +0.0040..+0.0380 over games), "
        "log loss -0.0500 (95% -0.0700..-0.0300 over games)")
    behind = {"accuracy": diff(-0.02, -0.03, -0.01), "loss": diff(0.04, 0.01, 0.07)}
    assert scoring.comparison_text("engine", behind).startswith("model behind engine: accuracy -0.0200")
    mixed = {"accuracy": diff(0.004, -0.010, 0.018), "loss": diff(-0.05, -0.07, -0.03)}
    assert scoring.comparison_text("piece-square", mixed) == (
        "model vs piece-square: accuracy +0.0040 (95% -0.0100..+0.0180 over games: not resolved), "
        "log loss -0.0500 (95% -0.0700..-0.0300 over games)")
    assert scoring.interval_text(0.6, 0.7, signed=False) == "95% 0.6000..0.7000 over games"


# policy: top-k accuracy over the legal moves, per game

# 3 games (ids 0, 4, 2), 7 positions with a move played and a final one (label -1), 6 move labels.
POLICY_GAMES = np.array([0, 0, 0, 0, 4, 4, 2, 2])
POLICY_LOGITS = np.array([
    [5, 1, 0, 0, 0, 0],           # played 0: the first choice                           rank 0
    [9, 1, 2, 3, 4, 0],           # played 1; 0 is illegal; 2, 3, 4 score higher           rank 3
    [1, 1, 1, 1, 1, 1],           # played 2; five ties, all counted against it            rank 5
    [0, 0, 0, 0, 0, 0],           # final position: skipped
    [0, 3, 3, 0, 0, 0],           # played 1; tied with 2 (3, 4, 5 illegal)                rank 1
    [0, 0, 0, 0, 0, 7],           # played 5; only 0 and 5 legal                          rank 0
    [6, 5, 4, 3, 2, 1],           # played 5                                              rank 5
    [6, 5, 4, 3, 2, 1],           # played 4                                              rank 4
], np.float64)
POLICY_LABELS = np.array([0, 1, 2, -1, 1, 5, 5, 4])
POLICY_LEGAL = np.ones((8, 6), bool)
POLICY_LEGAL[1, 0] = False
POLICY_LEGAL[4, 3:] = False
POLICY_LEGAL[5, 1:5] = False


def test_move_ranks_by_hand() -> None:
    scored = POLICY_LABELS >= 0
    ranks = scoring.move_ranks(POLICY_LOGITS[scored], POLICY_LABELS[scored], POLICY_LEGAL[scored])
    np.testing.assert_array_equal(ranks, [0, 3, 5, 1, 0, 5, 4])
    assert scoring.move_ranks(POLICY_LOGITS[1:2], [1]).tolist() == [4]         # unmasked: 9 counts too
    with pytest.raises(ValueError, match="position 0: the move played .label 0. is not among"):
        scoring.move_ranks(POLICY_LOGITS[1:2], [0], POLICY_LEGAL[1:2])
    with pytest.raises(ValueError, match="labels must lie in 0..5"):
        scoring.move_ranks(POLICY_LOGITS[:1], [6])
    nan_illegal = POLICY_LOGITS[1:2].copy()
    nan_illegal[0, 0] = np.nan                                                   # ignored: illegal
    assert scoring.move_ranks(nan_illegal, [1], POLICY_LEGAL[1:2]).tolist() == [3]
    with pytest.raises(ValueError, match="not finite"):
        scoring.move_ranks(nan_illegal, [1])


def test_policy_sums_per_game_by_hand() -> None:
    sums = scoring.PolicySums()
    sums.add(POLICY_GAMES[:5], POLICY_LOGITS[:5], POLICY_LABELS[:5], POLICY_LEGAL[:5])
    other = scoring.PolicySums()
    other.add(POLICY_GAMES[5:], POLICY_LOGITS[5:], POLICY_LABELS[5:], POLICY_LEGAL[5:])
    sums.merge(other)                                                            # two towers' parts
    np.testing.assert_array_equal(sums.game_ids(), [0, 2, 4])
    np.testing.assert_array_equal(sums.sums[:, [0, 2, 4]], [[3, 2, 2], [1, 0, 1], [2, 1, 2]])
    assert sums.summary() == {"positions": 7, "games": 3, "top1": pytest.approx(2 / 7),
                              "top5": pytest.approx(5 / 7)}
    with pytest.raises(ValueError, match="ids must be >= 0"):
        sums.add(np.array([-1]), POLICY_LOGITS[:1], np.array([0]))
    with pytest.raises(ValueError, match="2 game ids, 1 logit rows"):
        sums.add(np.array([0, 1]), POLICY_LOGITS[:1], np.array([0]))


def test_policy_block_and_its_interval_over_games() -> None:
    sums = scoring.PolicySums()
    sums.add(POLICY_GAMES, POLICY_LOGITS, POLICY_LABELS, POLICY_LEGAL)
    block = scoring.policy_block(sums, resamples=400, seed=5)
    # by hand: the same resamples of the games 0, 2, 4 (positions, top-1, top-5 per game)
    per_game = np.array([[3, 2, 2], [1, 0, 1], [2, 1, 2]], np.float64)
    counts = np.concatenate(list(scoring.resample_counts(3, 400, 5)))
    for row, name in ((1, "top1"), (2, "top5")):
        expected = np.percentile((counts @ per_game[row]) / (counts @ per_game[0]), [2.5, 97.5])
        assert block["intervals"][name] == pytest.approx(list(expected))
        assert block["intervals"][name][0] <= block[name] <= block["intervals"][name][1]
    assert block["intervals"]["top1"] == pytest.approx([0.0, 0.5])     # all-game-2 draws vs. 2 of 4
    assert (block["positions"], block["games"], block["top1"], block["top5"]) == (7, 3, 2 / 7, 5 / 7)
    assert block["bootstrap"] == {"unit": "game", "games": 3, "resamples": 400, "seed": 5, "level": 0.95}
    lo1, hi1 = block["intervals"]["top1"]
    lo5, hi5 = block["intervals"]["top5"]
    assert scoring.policy_text(block) == (f"policy: top-1 0.2857 (95% {lo1:.4f}..{hi1:.4f} over games), "
                                          f"top-5 0.7143 (95% {lo5:.4f}..{hi5:.4f} over games) "
                                          "on 7 positions of 3 games")
    empty = scoring.policy_block(scoring.PolicySums())
    assert empty == {"positions": 0, "games": 0, "top1": None, "top5": None}
    assert scoring.policy_text(empty) == "policy: no positions with a move played"
    with pytest.raises(ValueError, match="no positions"):
        scoring.bootstrap_policy(scoring.PolicySums())


def test_policy_sums_on_encoded_games_with_a_fake_predictor() -> None:
    from shogi_dnn.dataset import features, policy
    from shogi_dnn.kifu.record import STANDARD_START_SFEN, Ending, GameRecord, SourceLine, Winner
    from tests.support.kifugen import random_moves

    record = GameRecord(STANDARD_START_SFEN, tuple(random_moves(4, max_plies=40)), Winner.DRAW,
                        Ending.JISHOGI, SourceLine("test", 1), "csa")
    game = features.encode_game(record)
    labels = policy.move_labels(game.move)
    legal = policy.legal_label_masks(game.board, game.hands)
    logits = np.zeros((len(game), policy.NUM_MOVE_LABELS), np.float32)
    played = labels >= 0
    logits[np.flatnonzero(played), labels[played]] = 1.0        # a predictor that knows the move played
    sums = scoring.PolicySums()
    sums.add(np.zeros(len(game), np.int64), logits, labels, legal)
    assert sums.summary() == {"positions": len(game) - 1, "games": 1, "top1": 1.0, "top5": 1.0}
    constant = scoring.PolicySums()                              # every legal move tied: never a hit
    constant.add(np.zeros(len(game), np.int64), np.zeros_like(logits), labels, legal)
    assert constant.summary()["top5"] == 0.0
