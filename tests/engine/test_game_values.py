"""predict's curve through a search: an exchange is no sawtooth, its half is no swing, one notation."""

from __future__ import annotations

import numpy as np
import pytest

from shogi_dnn.analysis import predict
from shogi_dnn.engine import game_values, players

# A bishop exchange (plies 3, 4: 8h2b+ then 3a2b takes back), then White drops its bishop where a pawn
# takes it (ply 6: B*7e, ply 7: 7f7e) and nothing takes back.
GAME = "startpos moves 7g7f 3c3d 8h2b+ 3a2b 2g2f B*7e 7f7e 4a3b 6i7h 5a4b"


class MaterialModel:
    """Called as a Keras model is: the value logit of the fixed material evaluator (piece values only)."""

    def __init__(self) -> None:
        self.material = players.fixed_material()

    def __call__(self, inputs, training: bool = False) -> np.ndarray:
        p = self.material.win_probability(inputs["board"], inputs["hands"])
        return np.log(p / (1 - p))[:, None]


def curve(search: str) -> predict.GameCurve:
    model, mode = MaterialModel(), game_values.parse_mode(search)
    values = None if mode.kind == "none" else game_values.curve_values(game_values.ModelEvaluator(model), mode)
    return predict.game_curve(model, predict.read_position(GAME), values, mode.describe())


def test_raw_values_sawtooth_but_the_half_exchange_is_no_swing() -> None:
    raw = curve("none")
    assert raw.p_black[3] > raw.p_black[2] + 0.3 and raw.p_black[4] == pytest.approx(raw.p_black[2])
    assert raw.swings() == [7]                     # the capture that stays, not 3 (taken back) nor 4
    changes = predict.persistent_changes(raw.p_black)
    assert changes[3] == changes[4] == 0 and changes[7] > 0.3


def test_quiescence_changes_the_values_and_smooths_the_exchange() -> None:
    raw, searched = curve("none"), curve("quiescence")
    assert searched.search != raw.search == predict.RAW
    assert searched.p_black[3] == pytest.approx(searched.p_black[2])     # the recapture is in reach
    assert abs(raw.p_black[3] - searched.p_black[3]) > 0.3
    assert searched.p_black[6] > 0.8                # the hanging bishop counts as lost at once
    assert searched.swings() == [6]                 # the blunder itself, not its capture
    assert predict.turns(searched.p_black) < predict.turns(raw.p_black)


def test_a_node_search_gives_values_of_its_own() -> None:
    searched = curve("nodes=16")
    assert searched.search == "a 16-node search per position"
    assert searched.p_black.shape == (11,) and ((0 <= searched.p_black) & (searched.p_black <= 1)).all()


@pytest.mark.parametrize("text", ["nodes=0", "nodes=x", "deep", ""])
def test_bad_search_is_named(text: str) -> None:
    with pytest.raises(ValueError, match="unknown search"):
        game_values.parse_mode(text)


def test_turns_counts_direction_changes() -> None:
    assert predict.turns(np.array([0.5, 0.6, 0.6, 0.7, 0.4, 0.5, 0.5])) == 2
    assert predict.turns(np.array([0.5, 0.5])) == 0


@pytest.mark.parametrize("notation", ["kif", "usi"])
def test_table_and_graph_labels_use_one_notation(notation: str) -> None:
    searched = curve("none")
    table = predict.format_curve(searched, notation=notation)
    labels = [t.get_text() for t in predict.curve_figure(searched, "test", notation=notation).axes[0].texts]
    assert labels == ["7 ▲同　歩(76)" if notation == "kif" else "7 7f7e"]
    row = next(line for line in table.splitlines() if line.split()[:1] == ["7"])
    assert row.split()[1:3] == (["▲同", "歩(76)"] if notation == "kif" else ["7f7e", "white"])
    assert row.endswith("<- swing")
    assert ("▲７六歩(77)" in table) == (notation == "kif")
