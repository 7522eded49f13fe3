"""Win probabilities from a trained run: of one position, or after every move of a game.

A position is given as USI/SFEN text (`startpos moves 7g7f ...`, `sfen <sfen> [moves ...]`, or a bare
SFEN); the probability is for the side to move. A game record (any format kifu reads) gives a curve:
the probability before the first move and after every move, turned to Black's view as shogi GUIs draw
it, with the moves where it swings most marked. `model` is anything called as a Keras model is; `predict
--mirror-average` passes training.model.mirror_averaged(model) (this module stays free of TensorFlow).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from shogi_dnn import features, kifu, rules
from shogi_dnn.analysis import scoring
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu.record import GameRecord
from shogi_dnn.kifu.sfen import parse_line

PREDICT_BATCH = 512
SWINGS = 3
POSITION_NAME = "<position>"


def read_position(text: str) -> GameRecord:
    """A position argument as a record without result.

    A position given by hand gets the full check of rules/validity.py (both kings required: a record
    file may hold a mate problem, a position to score may not).

    Raises:
        KifuError: a bad token, an impossible position (naming the rule broken) or an illegal move.
    """
    record = parse_line(text.strip(), 1, POSITION_NAME)
    try:
        rules.check_sfen(record.start_sfen)
    except rules.IllegalPositionError as exc:
        raise KifuError(POSITION_NAME, 1, str(exc)) from exc
    return record


def read_game(path: str | Path, game: int = 1) -> GameRecord:
    """The `game`-th (1-based) game of a record file.

    Raises:
        KifuError: the file has fewer games, or that game cannot be read.
    """
    found = 0
    for item in kifu.read_record_file(path):
        found += 1
        if found == game:
            if isinstance(item, KifuError):
                raise item
            return item
    raise KifuError(str(path), 0, f"no game {game} in the file ({found} found)")


@dataclasses.dataclass(frozen=True)
class GamePositions:
    """Every position of a game from its start: P = len(moves) + 1.

    Attributes:
        board: [P, 81] uint8 and hands: [P, 14] uint8 (features.encode_position, side to move's view).
        turn: [P] uint8 side to move. moves: the USI move that led to each position ('' for the start).
        sfens: the SFEN of each position.
    """

    board: np.ndarray
    hands: np.ndarray
    turn: np.ndarray
    moves: tuple[str, ...]
    sfens: tuple[str, ...]


def game_positions(record: GameRecord) -> GamePositions:
    """Replay a record's moves (already checked legal by the reader) and encode every position."""
    position = rules.new_position(record.start_sfen)
    boards, hands, turns, sfens = [], [], [], []
    for move in ("",) + tuple(record.moves):
        if move:
            position.push_usi(move)
        board, hand = features.encode_position(position)
        boards.append(board)
        hands.append(hand)
        turns.append(position.turn)
        sfens.append(position.sfen())
    return GamePositions(np.stack(boards), np.stack(hands), np.asarray(turns, np.uint8),
                         ("",) + tuple(record.moves), tuple(sfens))


def predict_logits(model, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
    """Win logits of the side to move: [N, 81] uint8 boards, [N, 14] uint8 hands -> [N] float64."""
    out = [np.asarray(model({"board": board[i:i + PREDICT_BATCH], "hands": hands[i:i + PREDICT_BATCH]},
                            training=False)).reshape(-1)
           for i in range(0, len(board), PREDICT_BATCH)]
    return np.concatenate(out).astype(np.float64)


def predict_position(model, text: str) -> tuple[str, float]:
    """(SFEN of the final position, win probability of its side to move) of a USI/SFEN position."""
    positions = game_positions(read_position(text))
    logit = predict_logits(model, positions.board[-1:], positions.hands[-1:])
    return positions.sfens[-1], float(scoring.sigmoid(logit)[0])


@dataclasses.dataclass(frozen=True)
class GameCurve:
    """Win probabilities over a game. ply [P] int; p_to_move and p_black [P] float64."""

    positions: GamePositions
    p_to_move: np.ndarray
    p_black: np.ndarray

    def swings(self, count: int = SWINGS) -> list[int]:
        """Indices of the `count` positions whose move changed Black's probability most (by size)."""
        change = np.abs(np.diff(self.p_black))
        return sorted((np.argsort(-change, kind="stable")[:count] + 1).tolist())


def game_curve(model, record: GameRecord) -> GameCurve:
    """Probability before the first move and after every move, for the side to move and for Black."""
    positions = game_positions(record)
    p = scoring.sigmoid(predict_logits(model, positions.board, positions.hands))
    p_black = np.where(positions.turn == rules.BLACK, p, 1.0 - p)
    return GameCurve(positions, p, p_black)


def format_curve(curve: GameCurve) -> str:
    """Table: ply, move, side to move, p(side to move), p(Black), change, a mark on the big swings."""
    swings = set(curve.swings())
    lines = [f"{'ply':>4}  {'move':<7} {'to move':<7} {'p(to move)':>10} {'p(black)':>9} {'change':>7}"]
    for i, move in enumerate(curve.positions.moves):
        change = curve.p_black[i] - curve.p_black[i - 1] if i else 0.0
        side = "black" if curve.positions.turn[i] == rules.BLACK else "white"
        mark = "  <- swing" if i in swings else ""
        lines.append(f"{i:>4}  {move or '-':<7} {side:<7} {curve.p_to_move[i]:>10.3f} {curve.p_black[i]:>9.3f} "
                     f"{change:>+7.3f}{mark}")
    return "\n".join(lines)


def plot_curve(curve: GameCurve, path: str | Path, title: str = "") -> Path:
    """The game's win-rate graph from Black's view (0..100%), big swings marked; PNG written atomically."""
    path = Path(path)
    fig = curve_figure(curve, title)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=100)
    os.replace(tmp, path)
    return path


# Offsets (points) tried in turn for a swing's label until it overlaps no label placed before it.
_LABEL_OFFSETS = [(4, 6), (4, -16), (4, 20), (4, -30), (4, 34), (4, -44), (-60, 6), (-60, -16), (4, 48), (4, -58)]


def curve_figure(curve: GameCurve, title: str = ""):
    """The graph of plot_curve as a matplotlib Figure: the swings' labels placed so that none overlaps
    another (each tries the offsets of _LABEL_OFFSETS in turn; a line joins a moved label to its point)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import (
        Figure,  # only for a record's graph: a position's answer does not wait for it
    )

    fig = Figure(figsize=(9, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    plies = np.arange(len(curve.p_black))
    ax.fill_between(plies, 50, 100 * curve.p_black, color="tab:blue", alpha=0.25, lw=0)
    ax.plot(plies, 100 * curve.p_black, color="tab:blue", lw=1.5)
    ax.axhline(50, color="grey", lw=0.8, ls=":")
    ax.set_ylim(0, 100)
    ax.set_xlim(0, max(1, len(plies) - 1))
    ax.set_xlabel("ply")
    ax.set_ylabel("Black's win probability (%)")
    ax.set_title(title or "win rate")
    ax.grid(alpha=0.3)
    fig.tight_layout()                    # fixed before the labels are placed, so their pixels stay put
    renderer = fig.canvas.get_renderer()
    placed = []
    for i in curve.swings():
        ax.plot(i, 100 * curve.p_black[i], "o", color="tab:red", ms=5)
        for offset in _LABEL_OFFSETS:
            text = ax.annotate(f"{i}. {curve.positions.moves[i]}", (i, 100 * curve.p_black[i]), fontsize=8,
                               xytext=offset, textcoords="offset points", color="tab:red",
                               arrowprops=None if offset == _LABEL_OFFSETS[0] else
                               {"arrowstyle": "-", "color": "tab:red", "lw": 0.5})
            box = text.get_window_extent(renderer).expanded(1.05, 1.1)
            if not any(box.overlaps(other) for other in placed) or offset == _LABEL_OFFSETS[-1]:
                placed.append(box)
                break
            text.remove()
    return fig
