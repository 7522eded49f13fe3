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

Tactic planes (attack_planes(..., tactics=True), model.features = "tactics": appended after those, so
[B, 9, 9, NUM_ATTACK_PLANES + NUM_TACTIC_PLANES = 39]), each 1 at a square holding a piece that is not
a king (a king attacked is a check, already a plane) when:
  PLANE_OWN_HANGING      35          1      an own piece there is attacked by the opponent and not
                                            defended (no own piece attacks the square)
  PLANE_OPP_HANGING      36          1      an opponent piece there is attacked by us and not defended
  PLANE_OWN_CHEAPER      37          1      an own piece there is attacked by an opponent piece of lower
                                            value (rules.PIECE_VALUES), defended or not
  PLANE_OPP_CHEAPER      38          1      an opponent piece there is attacked by an own piece of lower
                                            value
  NUM_TACTIC_PLANES      4
"Hanging" is the planes' pseudo-legal view: an attacked, undefended piece may still be safe (the
attacker is pinned) and a defended one may not be (the defender is pinned); analysis/tactics.py's free
captures are the exact, legal-move version, measured on data. Both sets come from the same attack bits
and counts: hanging compares the two counts, cheaper looks the square's code up in a table of the
attacker bits that are cheaper than it (CHEAPER_ATTACKERS) and ands it with the bits.

"Attacks" are pseudo-legal, as python-shogi's `Board.attackers` and dlshogi's planes: a pinned piece
still attacks, the king attacks defended squares, and an attacked square may hold a piece of either
colour (an own piece there is "defended"). Sliders (lance, bishop, rook, horse, dragon) reach along
each ray through empty squares and stop at the first occupied one, which they attack.

The attacker count is a thermometer of MAX_ATTACK_COUNT_PLANES planes (plane k is 1 when at least
k + 1 pieces attack the square), as dlshogi encodes its MAX_ATTACK_NUM = 3 "number of attacks"
planes: an exchange on a square is decided by who has more attackers, and beyond three the
difference rarely changes the outcome, while a thermometer keeps every plane binary like the others
(a raw count would need scaling and would let one square dominate a convolution).

Implementation, on [B, 9, 9] int32 code maps rather than 28 one-hot planes per direction (far less
memory traffic): for each of the 12 directions a piece can move (8 king directions, 4 knight jumps),
shift the board one step (zero filled at the edges, so nothing wraps from one file to the next) and,
for the slides, find the first piece met looking back along the ray (the ray passes only through
empty squares; three doubling steps cover its 8 squares). Tables indexed by piece code turn "the
piece that could reach this square from that direction" into an attack bit (bit code - 1) when that
piece really moves that way; bits are OR-ed and attackers counted over the directions, and the
planes are expanded from the bits once at the end. Every op is static-shape and element-wise over
the whole batch (no loop over positions), so the function works eagerly, in tf.function and under XLA.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from shogi_dnn.dataset import features
from shogi_dnn.rules import MOVES, NUM_PIECE_TYPES, PIECE_VALUES, PieceType

BOARD_SIDE = features.FEATURE_SHAPE[0]            # 9
MAX_ATTACK_COUNT_PLANES = 3                       # thermometer ">=1", ">=2", ">=3" (dlshogi's MAX_ATTACK_NUM)
PLANE_OWN_ATTACKS = 0
PLANE_OPP_ATTACKS = PLANE_OWN_ATTACKS + NUM_PIECE_TYPES
PLANE_OWN_ATTACK_COUNT = PLANE_OPP_ATTACKS + NUM_PIECE_TYPES
PLANE_OPP_ATTACK_COUNT = PLANE_OWN_ATTACK_COUNT + MAX_ATTACK_COUNT_PLANES
PLANE_IN_CHECK = PLANE_OPP_ATTACK_COUNT + MAX_ATTACK_COUNT_PLANES
NUM_ATTACK_PLANES = PLANE_IN_CHECK + 1             # 35
ATTACK_FEATURE_SHAPE = (BOARD_SIDE, BOARD_SIDE, NUM_ATTACK_PLANES)
PLANE_OWN_HANGING = NUM_ATTACK_PLANES              # 35: tactic planes follow the attack planes
PLANE_OPP_HANGING = PLANE_OWN_HANGING + 1
PLANE_OWN_CHEAPER = PLANE_OPP_HANGING + 1
PLANE_OPP_CHEAPER = PLANE_OWN_CHEAPER + 1
NUM_TACTIC_PLANES = PLANE_OPP_CHEAPER + 1 - NUM_ATTACK_PLANES               # 4
TACTIC_FEATURE_SHAPE = (BOARD_SIDE, BOARD_SIDE, NUM_ATTACK_PLANES + NUM_TACTIC_PLANES)


def _direction_tables() -> list[tuple[tuple[int, int], np.ndarray, np.ndarray]]:
    """[(direction, step bits, slide bits)]: for each board direction d, two int32 [29] tables indexed
    by piece code, holding the code's attack bit (code - 1) when that piece steps (slides) along d,
    else 0. Own pieces (codes 1..14) move as rules.MOVES says (Black's view, (row step, column step):
    forward is row step -1, toward row 0); opponent pieces (codes 15..28) by its 180-degree rotation."""
    tables: dict[tuple[int, int], np.ndarray] = {}
    for piece_type, piece_moves in MOVES.items():
        for kind, directions in enumerate((piece_moves.steps, piece_moves.slides)):
            for dr, dc in directions:
                for direction, code in (((dr, dc), piece_type), ((-dr, -dc), NUM_PIECE_TYPES + piece_type)):
                    table = tables.setdefault(direction, np.zeros((2, features.NUM_PIECE_CODES), np.int32))
                    table[kind, code] = 1 << (code - 1)
    return [(d, table[0], table[1]) for d, table in sorted(tables.items())]


_DIRECTION_TABLES = _direction_tables()
_OWN_BITS = (1 << NUM_PIECE_TYPES) - 1                          # attack bits 0..13: own piece types
_OPP_BITS = _OWN_BITS << NUM_PIECE_TYPES                        # bits 14..27: the opponent's


def _cheaper_attackers() -> np.ndarray:
    """[29] int32 by piece code: the attack bits of the other side's piece types worth less than the
    piece of that code (rules.PIECE_VALUES); 0 for empty squares and kings."""
    table = np.zeros(features.NUM_PIECE_CODES, np.int32)
    for target in PieceType:
        if target == PieceType.KING:
            continue
        cheaper = [t for t in PieceType if PIECE_VALUES[t] < PIECE_VALUES[target]]
        table[target] = sum(1 << (NUM_PIECE_TYPES + t - 1) for t in cheaper)            # opponent attackers
        table[NUM_PIECE_TYPES + target] = sum(1 << (t - 1) for t in cheaper)            # own attackers
    return table


CHEAPER_ATTACKERS = _cheaper_attackers()
# [29] int32 by piece code: 1 for an own piece (not the king), 2 for an opponent piece (not the king).
_TARGET_SIDE = np.array([0] + [1 * (t != PieceType.KING) for t in PieceType]
                        + [2 * (t != PieceType.KING) for t in PieceType], np.int32)


def _shift(x, dr: int, dc: int):
    """[B, 9, 9] -> [B, 9, 9]: y[r, c] = x[r - dr, c - dc], zero where that is off the board (so
    nothing wraps from one file to the next)."""
    pad = max(abs(dr), abs(dc))
    padded = ops.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    return padded[:, pad - dr:pad - dr + BOARD_SIDE, pad - dc:pad - dc + BOARD_SIDE]


def _first_piece(adjacent, dr: int, dc: int):
    """Code of the first piece met looking from each square against (dr, dc), 0 if none.

    Args:
        adjacent: [B, 9, 9] int32 codes shifted by (dr, dc): the square one step back along the ray.
    Returns:
        [B, 9, 9] int32: the only piece that can slide along (dr, dc) onto the square, since the ray
        stops at the first occupied square. By doubling: `seen` holds the first piece within `span`
        squares back, and the first within 2 * span is it, or else the one `span` squares further
        back; three doublings cover the longest ray (8 squares).
    """
    seen, span = adjacent, 1
    while span < BOARD_SIDE - 1:
        seen = ops.where(seen != 0, seen, _shift(seen, span * dr, span * dc))
        span *= 2
    return seen


def attack_bits(board):
    """Attackers of every square as bits and counts (int32, no planes yet).

    Args:
        board: [B, 81] integer piece codes (features' side-to-move view).
    Returns:
        (codes [B, 9, 9] int32 the board; bits [B, 9, 9] int32, bit code - 1 set when a piece of that
        code attacks the square; own and opponent attacker counts, [B, 9, 9] int32 each.)
    """
    codes = ops.reshape(ops.cast(board, "int32"), (-1, BOARD_SIDE, BOARD_SIDE))
    bits = own_count = opp_count = ops.zeros_like(codes)
    for (dr, dc), step_bits, slide_bits in _DIRECTION_TABLES:
        adjacent = _shift(codes, dr, dc)
        # At most one piece attacks a square from each direction: the adjacent one (a step, or the
        # first square of a slide) or the first one along the ray, and no type both steps and slides
        # one way. So a direction adds at most one bit, and the counts are exact.
        hit = ops.zeros_like(codes)
        if step_bits.any():
            hit = ops.take(ops.convert_to_tensor(step_bits), adjacent)
        if slide_bits.any():
            slider = _first_piece(adjacent, dr, dc)
            hit = ops.bitwise_or(hit, ops.take(ops.convert_to_tensor(slide_bits), slider))
        bits = ops.bitwise_or(bits, hit)
        own_count = own_count + ops.cast(ops.bitwise_and(hit, _OWN_BITS) != 0, "int32")
        opp_count = opp_count + ops.cast(ops.bitwise_and(hit, _OPP_BITS) != 0, "int32")
    return codes, bits, own_count, opp_count


def attack_planes(board, dtype: str = "float32", tactics: bool = False):
    """Attack, attacker-count and in-check planes of compact boards (see the module docstring).

    Args:
        board: [B, 81] integer piece codes, side to move's view (uint8 from the pipeline).
        dtype: float dtype of the planes.
        tactics: append the NUM_TACTIC_PLANES tactic planes (hanging, attacked by a cheaper piece).
    Returns:
        [B, 9, 9, NUM_ATTACK_PLANES (+ NUM_TACTIC_PLANES)] tensor of `dtype`, every value 0 or 1.
    """
    codes, bits, own_count, opp_count = attack_bits(board)
    type_bits = ops.convert_to_tensor(np.arange(2 * NUM_PIECE_TYPES, dtype=np.int32))
    attacked = ops.bitwise_and(ops.right_shift(ops.expand_dims(bits, -1), type_bits), 1)   # [B, 9, 9, 28]
    thresholds = ops.convert_to_tensor(np.arange(1, MAX_ATTACK_COUNT_PLANES + 1, dtype=np.int32))
    own_thermometer = ops.expand_dims(own_count, -1) >= thresholds                         # [B, 9, 9, 3]
    opp_thermometer = ops.expand_dims(opp_count, -1) >= thresholds
    # In check: the own king stands on a square the opponent attacks (no king, as in tsume: never).
    king_attacked = ops.logical_and(codes == int(PieceType.KING), opp_count > 0)           # [B, 9, 9]
    in_check = ops.any(king_attacked, axis=(1, 2), keepdims=True)                          # [B, 1, 1]
    in_check = ops.expand_dims(ops.logical_and(ops.ones_like(king_attacked, "bool"), in_check), -1)
    planes = [attacked, own_thermometer, opp_thermometer, in_check]
    if tactics:
        planes += tactic_planes(codes, bits, own_count, opp_count)
    return ops.concatenate([ops.cast(p, dtype) for p in planes], axis=-1)


def tactic_planes(codes, bits, own_count, opp_count) -> list:
    """The NUM_TACTIC_PLANES tactic planes from attack_bits' outputs (module docstring).

    Args:
        codes, bits, own_count, opp_count: attack_bits(board), [B, 9, 9] int32 each.
    Returns:
        [own hanging, opponent hanging, own attacked by a cheaper piece, opponent likewise], each
        [B, 9, 9, 1] bool.
    """
    side = ops.take(ops.convert_to_tensor(_TARGET_SIDE), codes)                             # [B, 9, 9]
    own, opp = side == 1, side == 2
    own_hanging = ops.logical_and(own, ops.logical_and(opp_count > 0, own_count == 0))
    opp_hanging = ops.logical_and(opp, ops.logical_and(own_count > 0, opp_count == 0))
    cheaper = ops.bitwise_and(bits, ops.take(ops.convert_to_tensor(CHEAPER_ATTACKERS), codes)) != 0
    return [ops.expand_dims(p, -1) for p in (own_hanging, opp_hanging, ops.logical_and(own, cheaper),
                                             ops.logical_and(opp, cheaper))]


@keras.saving.register_keras_serializable(package="shogi_dnn")
class AttackPlanes(layers.Layer):
    """Keras layer: board [B, 81] uint8 -> [B, 9, 9, NUM_ATTACK_PLANES] attack planes (with `tactics`:
    [B, 9, 9, NUM_ATTACK_PLANES + NUM_TACTIC_PLANES], the tactic planes appended) in the layer's compute
    dtype (float16/bfloat16 under mixed precision). No weights. A model file saved before `tactics`
    existed reloads with tactics False."""

    def __init__(self, tactics: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tactics = bool(tactics)

    def call(self, board):
        return attack_planes(board, dtype=self.compute_dtype, tactics=self.tactics)

    def compute_output_shape(self, board_shape):
        return (board_shape[0], *(TACTIC_FEATURE_SHAPE if self.tactics else ATTACK_FEATURE_SHAPE))

    def get_config(self) -> dict:
        return {**super().get_config(), "tactics": self.tactics}

