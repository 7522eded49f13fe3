"""Attack and check input planes, computed on the device from the compact board (keras.ops only).

The board is features' compact form: [B, 81] piece codes in the *side to move's view* (own pieces
1..14 move toward row 0, opponent pieces 15..28 toward row 8; square = row * 9 + col, SFEN order).

Planes (attack_planes), [B, 9, 9, NUM_ATTACK_PLANES] float32 (or the dtype asked for):
  plane                              count  meaning at square s
  PLANE_OWN_ATTACKS      0..13       14     1 if an own piece of type t (1..14, rules' numbering,
                                            plane PLANE_OWN_ATTACKS + t - 1) attacks s
  PLANE_OPP_ATTACKS      14..27      14     likewise for the opponent's pieces
  PLANE_OWN_ATTACK_COUNT 28..30      3      own attackers of s, thermometer: ">=1", ">=2", ">=3"
  PLANE_OPP_ATTACK_COUNT 31..33      3      likewise for the opponent's attackers
  PLANE_IN_CHECK         34          1      1 on every square when the side to move is in check
  NUM_ATTACK_PLANES      35

"Attacks" are pseudo-legal, as python-shogi's `Board.attackers` and dlshogi's planes: a pinned piece
still attacks, the king attacks defended squares, and an attacked square may hold a piece of either
colour (an own piece there is "defended"). Sliders (lance, bishop, rook, horse, dragon) reach along
each ray through empty squares and stop at the first occupied one, which they attack.

The attacker count is a thermometer of MAX_ATTACK_COUNT_PLANES planes (plane k is 1 when at least
k + 1 pieces attack the square), as dlshogi encodes its MAX_ATTACK_NUM = 3 "number of attacks"
planes: an exchange on a square is decided by who has more attackers, and beyond three the
difference rarely changes the outcome, while a thermometer keeps every plane binary like the others
(a raw count would need scaling and would let one square dominate a convolution).

Implementation: the one-hot piece planes are shifted by each move direction (zero filled at the
edges, so nothing wraps from one file to the next); a slider's ray is extended up to 8 times and
propagates only through empty squares. Every step is a static-shape element-wise op over the whole
batch (no loop over positions), so the function works eagerly, inside tf.function and under XLA.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from shogi_dnn import features
from shogi_dnn.rules import NUM_PIECE_TYPES

BOARD_SIDE = features.FEATURE_SHAPE[0]            # 9
MAX_ATTACK_COUNT_PLANES = 3                       # thermometer ">=1", ">=2", ">=3" (dlshogi's MAX_ATTACK_NUM)
PLANE_OWN_ATTACKS = 0
PLANE_OPP_ATTACKS = PLANE_OWN_ATTACKS + NUM_PIECE_TYPES
PLANE_OWN_ATTACK_COUNT = PLANE_OPP_ATTACKS + NUM_PIECE_TYPES
PLANE_OPP_ATTACK_COUNT = PLANE_OWN_ATTACK_COUNT + MAX_ATTACK_COUNT_PLANES
PLANE_IN_CHECK = PLANE_OPP_ATTACK_COUNT + MAX_ATTACK_COUNT_PLANES
NUM_ATTACK_PLANES = PLANE_IN_CHECK + 1             # 35
ATTACK_FEATURE_SHAPE = (BOARD_SIDE, BOARD_SIDE, NUM_ATTACK_PLANES)

# Piece types (rules' numbering) and move directions (row step, column step) for an own piece; own
# pieces move toward row 0, so "forward" is row step -1. Opponent pieces use the 180-degree rotation.
PAWN, LANCE, KNIGHT, SILVER, GOLD, BISHOP, ROOK, KING = range(1, 9)
PROM_PAWN, PROM_LANCE, PROM_KNIGHT, PROM_SILVER, HORSE, DRAGON = range(9, 15)
_FORWARD = -1
_UP, _DOWN = (_FORWARD, 0), (-_FORWARD, 0)
_LEFT, _RIGHT = (0, -1), (0, 1)
_UP_LEFT, _UP_RIGHT = (_FORWARD, -1), (_FORWARD, 1)
_DOWN_LEFT, _DOWN_RIGHT = (-_FORWARD, -1), (-_FORWARD, 1)
_ORTHOGONAL = (_UP, _DOWN, _LEFT, _RIGHT)
_DIAGONAL = (_UP_LEFT, _UP_RIGHT, _DOWN_LEFT, _DOWN_RIGHT)
_GOLD_STEPS = (_UP_LEFT, _UP, _UP_RIGHT, _LEFT, _RIGHT, _DOWN)
_STEPS = {
    PAWN: (_UP,),
    KNIGHT: ((2 * _FORWARD, -1), (2 * _FORWARD, 1)),
    SILVER: (_UP_LEFT, _UP, _UP_RIGHT, _DOWN_LEFT, _DOWN_RIGHT),
    GOLD: _GOLD_STEPS, PROM_PAWN: _GOLD_STEPS, PROM_LANCE: _GOLD_STEPS,
    PROM_KNIGHT: _GOLD_STEPS, PROM_SILVER: _GOLD_STEPS,
    KING: _ORTHOGONAL + _DIAGONAL,
    HORSE: _ORTHOGONAL,            # plus the bishop's rays
    DRAGON: _DIAGONAL,             # plus the rook's rays
}
_SLIDES = {LANCE: (_UP,), BISHOP: _DIAGONAL, ROOK: _ORTHOGONAL, HORSE: _DIAGONAL, DRAGON: _ORTHOGONAL}


def _move_groups(table: dict[int, tuple[tuple[int, int], ...]]) -> list[tuple[tuple[int, int], np.ndarray]]:
    """[(direction, piece channels)]: for each board direction, the channels (0..27: own type t is
    t - 1, opponent type t is 13 + t) of the pieces that move that way; opponents' moves rotated."""
    groups: dict[tuple[int, int], list[int]] = {}
    for piece_type, directions in table.items():
        for dr, dc in directions:
            groups.setdefault((dr, dc), []).append(piece_type - 1)
            groups.setdefault((-dr, -dc), []).append(NUM_PIECE_TYPES + piece_type - 1)
    return [(d, np.asarray(sorted(ch), np.int32)) for d, ch in sorted(groups.items())]


_STEP_GROUPS = _move_groups(_STEPS)
_SLIDE_GROUPS = _move_groups(_SLIDES)
# Sums each group's reach planes back into one plane per piece channel: [K, 28], K = all group channels.
_GROUP_CHANNELS = np.concatenate([ch for _, ch in _STEP_GROUPS + _SLIDE_GROUPS])
_TO_PIECE_CHANNEL = np.eye(2 * NUM_PIECE_TYPES, dtype=np.float32)[_GROUP_CHANNELS]


def _shift(x, dr: int, dc: int):
    """[B, 9, 9, C] -> [B, 9, 9, C]: y[r, c] = x[r - dr, c - dc], zero where that is off the board."""
    pad = max(abs(dr), abs(dc))
    padded = ops.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    return padded[:, pad - dr:pad - dr + BOARD_SIDE, pad - dc:pad - dc + BOARD_SIDE, :]


def _ray(pieces, empty, dr: int, dc: int):
    """Squares a slider reaches along (dr, dc): [B, 9, 9, C] pieces, [B, 9, 9, 1] empty -> [B, 9, 9, C].

    The front moves one square per iteration; the square it lands on is attacked, and the front goes
    on only if that square is empty. BOARD_SIDE - 1 iterations cover the longest ray.
    """
    front = _shift(pieces, dr, dc)
    reach = front
    for _ in range(BOARD_SIDE - 2):
        front = _shift(front * empty, dr, dc)
        reach = reach + front
    return reach


def attack_counts(board, dtype: str = "float32"):
    """Attackers of each square per piece channel.

    Args:
        board: [B, 81] integer piece codes (features' side-to-move view).
        dtype: float dtype of the result (counts are small integers, exact in float16).
    Returns:
        ([B, 9, 9, 28] counts: channel t - 1 the own pieces of type t attacking the square, channel
        13 + t the opponent's; [B, 9, 9, 28] the one-hot piece planes of the board.)
    """
    codes = ops.reshape(ops.cast(board, "int32"), (-1, BOARD_SIDE, BOARD_SIDE))
    onehot = ops.one_hot(codes, features.NUM_PIECE_CODES, dtype=dtype)     # [B, 9, 9, 29]
    empty, pieces = onehot[..., :1], onehot[..., 1:]
    reach = [_shift(ops.take(pieces, channels, axis=-1), dr, dc) for (dr, dc), channels in _STEP_GROUPS]
    reach += [_ray(ops.take(pieces, channels, axis=-1), empty, dr, dc) for (dr, dc), channels in _SLIDE_GROUPS]
    # A piece reaches a square by at most one direction, so summing the groups counts attackers exactly.
    counts = ops.matmul(ops.concatenate(reach, axis=-1), ops.convert_to_tensor(_TO_PIECE_CHANNEL, dtype=dtype))
    return counts, pieces


def attack_planes(board, dtype: str = "float32"):
    """Attack, attacker-count and in-check planes of compact boards (see the module docstring).

    Args:
        board: [B, 81] integer piece codes, side to move's view (uint8 from the pipeline).
        dtype: float dtype of the planes.
    Returns:
        [B, 9, 9, NUM_ATTACK_PLANES] tensor of `dtype`, every value 0 or 1.
    """
    counts, pieces = attack_counts(board, dtype)
    own_count = ops.sum(counts[..., :NUM_PIECE_TYPES], axis=-1, keepdims=True)     # [B, 9, 9, 1]
    opp_count = ops.sum(counts[..., NUM_PIECE_TYPES:], axis=-1, keepdims=True)
    thresholds = ops.convert_to_tensor(np.arange(1, MAX_ATTACK_COUNT_PLANES + 1), dtype=dtype)
    own_thermometer = ops.cast(own_count >= thresholds, dtype)                      # [B, 9, 9, 3]
    opp_thermometer = ops.cast(opp_count >= thresholds, dtype)
    # In check: the own king stands on a square the opponent attacks (no king, as in tsume: never).
    own_king = pieces[..., KING - 1:KING]
    in_check = ops.max(own_king * opp_thermometer[..., :1], axis=(1, 2), keepdims=True)   # [B, 1, 1, 1]
    in_check = ops.ones_like(own_king) * in_check
    attacked = ops.minimum(counts, ops.cast(1, dtype))
    return ops.concatenate([attacked, own_thermometer, opp_thermometer, in_check], axis=-1)


@keras.saving.register_keras_serializable(package="shogi_dnn")
class AttackPlanes(layers.Layer):
    """Keras layer: board [B, 81] uint8 -> [B, 9, 9, NUM_ATTACK_PLANES] attack planes in the layer's
    compute dtype (float16/bfloat16 under mixed precision). No weights."""

    def call(self, board):
        return attack_planes(board, dtype=self.compute_dtype)

    def compute_output_shape(self, board_shape):
        return (board_shape[0], *ATTACK_FEATURE_SHAPE)

