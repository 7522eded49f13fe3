"""attack_planes against python-shogi's `Board.attackers` / `is_check` on thousands of real positions
(tests/data and, when present, a sample of ../shared/kifu-gnushogi), plus hand-made positions.

Positions are encoded with features.encode_position (side to move's view), so White-to-move positions
exercise the rotation; the reference maps python-shogi's squares into that view itself.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest
import shogi

from shogi_dnn.dataset import features
from shogi_dnn.kifu import RECORD_SUFFIXES, GameRecord, read_record_file
from shogi_dnn.rules import NUM_PIECE_TYPES, NUM_SQUARES, PieceType, ShogiPosition, attacks, square_index
from shogi_dnn.training import attack_planes as ap
from tests.support.paths import DATA, SHARED

GNUSHOGI = SHARED / "kifu-gnushogi"
GNUSHOGI_GAMES_PER_FILE = 8       # the first games of each file ...
GNUSHOGI_POSITION_STRIDE = 5      # ... every 5th position (offset per game): about 4,700 positions
SLIDERS = (shogi.LANCE, shogi.BISHOP, shogi.ROOK, shogi.PROM_BISHOP, shogi.PROM_ROOK)


@dataclasses.dataclass
class Sample:
    """Positions with their python-shogi reference planes and what they contain."""

    sfens: list[str] = dataclasses.field(default_factory=list)
    boards: list[np.ndarray] = dataclasses.field(default_factory=list)      # [81] uint8, encode_position
    expected: list[np.ndarray] = dataclasses.field(default_factory=list)    # [9, 9, NUM_ATTACK_PLANES]
    white_to_move: int = 0
    checks: int = 0
    promoted: int = 0
    after_drop: int = 0
    pins: int = 0

    def add(self, board: shogi.Board, after_drop: bool = False) -> None:
        sfen = board.sfen()
        self.sfens.append(sfen)
        self.boards.append(features.encode_position(ShogiPosition(sfen))[0])
        self.expected.append(reference_planes(board))
        self.white_to_move += board.turn == shogi.WHITE
        self.checks += bool(board.is_check())
        self.promoted += any(p is not None and p.piece_type >= shogi.PROM_PAWN
                             for p in map(board.piece_at, range(NUM_SQUARES)))
        self.after_drop += after_drop
        self.pins += has_pin(board)


def view_square(square: int, turn: int) -> int:
    """python-shogi square -> square index in the side to move's view (rotated when White moves)."""
    return square if turn == shogi.BLACK else NUM_SQUARES - 1 - square


def reference_planes(board: shogi.Board) -> np.ndarray:
    """[9, 9, NUM_ATTACK_PLANES] float32 from python-shogi's `attackers`, in the side to move's view."""
    planes = np.zeros((NUM_SQUARES, ap.NUM_ATTACK_PLANES), np.float32)
    for colour in (shogi.BLACK, shogi.WHITE):
        own = colour == board.turn
        type_plane = ap.PLANE_OWN_ATTACKS if own else ap.PLANE_OPP_ATTACKS
        count_plane = ap.PLANE_OWN_ATTACK_COUNT if own else ap.PLANE_OPP_ATTACK_COUNT
        for square in range(NUM_SQUARES):
            attackers = list(board.attackers(colour, square))
            v = view_square(square, board.turn)
            for attacker in attackers:
                piece = board.piece_at(attacker)
                assert piece.color == colour
                planes[v, type_plane + piece.piece_type - 1] = 1
            planes[v, count_plane:count_plane + min(len(attackers), ap.MAX_ATTACK_COUNT_PLANES)] = 1
    planes[:, ap.PLANE_IN_CHECK] = float(board.is_check())
    return planes.reshape(ap.ATTACK_FEATURE_SHAPE)


def has_pin(board: shogi.Board) -> bool:
    """Whether a piece of either colour is pinned to its king: taking it off the board (the board is
    restored) gives an opponent slider a new line to that king."""
    for colour in (shogi.BLACK, shogi.WHITE):
        king = board.king_squares[colour]
        if king is None:
            continue
        before = board.attacker_mask(colour ^ 1, king)
        for square in range(NUM_SQUARES):
            piece = board.piece_at(square)
            if piece is None or piece.color != colour or square == king:
                continue
            board.remove_piece_at(square)
            after = board.attacker_mask(colour ^ 1, king)
            board.set_piece_at(square, piece)
            gained = after & ~before
            if gained and any(board.piece_type_at(s) in SLIDERS for s in shogi.SquareSet(gained)):
                return True
    return False


def replay(record: GameRecord, sample: Sample, keep=lambda ply: True) -> None:
    """Add the positions of a game (before each move and the final one) that `keep(ply)` selects."""
    board = shogi.Board(record.start_sfen)
    after_drop = False
    for ply in range(len(record.moves) + 1):
        if keep(ply):
            sample.add(board, after_drop)
        if ply < len(record.moves):
            move = shogi.Move.from_usi(record.moves[ply])
            after_drop = move.drop_piece_type is not None
            board.push(move)


def records(paths) -> list[GameRecord]:
    return [r for path in paths for r in read_record_file(path) if isinstance(r, GameRecord)]


def compute(boards: list[np.ndarray]) -> np.ndarray:
    return np.asarray(ap.attack_planes(np.stack(boards)))


def assert_planes_equal(sample: Sample) -> None:
    """One batch through attack_planes; on a mismatch name the first position, plane and square."""
    got = compute(sample.boards)
    expected = np.stack(sample.expected)
    assert got.shape == expected.shape == (len(sample.sfens), *ap.ATTACK_FEATURE_SHAPE)
    assert got.dtype == np.float32
    bad = np.argwhere(got != expected)
    if len(bad):
        i, row, col, plane = bad[0]
        pytest.fail(f"{len(bad)} values differ; first: {sample.sfens[i]} plane {plane} view square "
                    f"({row}, {col}): got {got[i, row, col, plane]}, "
                    f"python-shogi {expected[i, row, col, plane]}")


@pytest.fixture(scope="module")
def data_sample() -> Sample:
    """Every position of every game in tests/data."""
    sample = Sample()
    paths = sorted(p for p in DATA.rglob("*") if p.suffix.lower() in RECORD_SUFFIXES)
    for record in records(paths):
        replay(record, sample)
    return sample


@pytest.fixture(scope="module")
def gnushogi_sample() -> Sample:
    if not GNUSHOGI.is_dir():
        pytest.skip("../shared/kifu-gnushogi is absent")
    sample = Sample()
    for path in sorted(GNUSHOGI.glob("*.csa")):
        for game, record in enumerate(records([path])[:GNUSHOGI_GAMES_PER_FILE]):
            replay(record, sample, lambda ply, g=game: (ply + g) % GNUSHOGI_POSITION_STRIDE == 0)
    return sample


def test_square_numbering_matches_python_shogi() -> None:
    """python-shogi's square s is the SFEN-order index the boards use: 0 = 9a, 8 = 1a, 80 = 1i."""
    for square, name in enumerate(shogi.SQUARE_NAMES):
        assert square_index(int(name[0]), ord(name[1]) - ord("a") + 1) == square


def test_layout_constants() -> None:
    assert ap.PLANE_OPP_ATTACKS == ap.PLANE_OWN_ATTACKS + NUM_PIECE_TYPES
    assert ap.PLANE_IN_CHECK == ap.NUM_ATTACK_PLANES - 1
    assert ap.NUM_ATTACK_PLANES == 2 * NUM_PIECE_TYPES + 2 * ap.MAX_ATTACK_COUNT_PLANES + 1 == 35


def test_data_positions_match_python_shogi(data_sample: Sample) -> None:
    s = data_sample
    assert len(s.sfens) > 1000
    # Not vacuous: both sides to move, checks, promoted pieces, drops and pins occur.
    assert min(s.white_to_move, len(s.sfens) - s.white_to_move) > 400
    assert s.checks > 20 and s.promoted > 200 and s.after_drop > 50 and s.pins > 20, dataclasses.asdict(
        dataclasses.replace(s, sfens=[], boards=[], expected=[]))
    assert_planes_equal(s)


def test_gnushogi_positions_match_python_shogi(gnushogi_sample: Sample) -> None:
    s = gnushogi_sample
    assert len(s.sfens) > 3000
    assert min(s.white_to_move, len(s.sfens) - s.white_to_move) > 1000
    assert s.checks > 50 and s.promoted > 500 and s.after_drop > 100 and s.pins > 50
    assert_planes_equal(s)


def _square(usi: str, turn: int) -> tuple[int, int]:
    """(row, col) in the side to move's view of a USI square such as '5e'."""
    v = view_square(square_index(int(usi[0]), ord(usi[1]) - ord("a") + 1), turn)
    return divmod(v, 9)


def _planes_of(sfen: str) -> tuple[np.ndarray, int]:
    board = shogi.Board(sfen)
    got = compute([features.encode_position(ShogiPosition(sfen))[0]])[0]
    np.testing.assert_array_equal(got, reference_planes(board), err_msg=sfen)
    return got, board.turn


def _attacked(planes: np.ndarray, turn: int, plane: int, squares: str) -> list[int]:
    return [int(planes[(*_square(sq, turn), plane)]) for sq in squares.split()]


OWN, OPP = ap.PLANE_OWN_ATTACKS - 1, ap.PLANE_OPP_ATTACKS - 1     # + piece type


def test_lance_blocked_by_own_pawn() -> None:
    planes, turn = _planes_of("4k4/9/9/9/9/9/4P4/9/4LK3 b - 1")
    assert _attacked(planes, turn, OWN + PieceType.LANCE, "5h 5g 5f 5a") == [1, 1, 0, 0]
    assert _attacked(planes, turn, OWN + PieceType.PAWN, "5f 5h") == [1, 0]


def test_bishop_ray_stops_at_first_piece() -> None:
    planes, turn = _planes_of("4k4/9/6p2/9/4B4/9/9/9/4K4 b - 1")
    assert _attacked(planes, turn, OWN + PieceType.BISHOP, "4d 3c 2b 1a 6d 9a 6f 9i 4f 1i") == \
        [1, 1, 0, 0, 1, 1, 1, 1, 1, 1]
    # The white pawn on 3c attacks 3d (down the board from its side).
    assert _attacked(planes, turn, OPP + PieceType.PAWN, "3d 3b") == [1, 0]


def test_dragon_and_horse_steps() -> None:
    # White's king on 1a: out of both pieces' lines (a position with White, not to move, in check is refused)
    planes, turn = _planes_of("8k/9/9/9/4+R4/9/9/1+B7/4K4 b - 1")
    assert _attacked(planes, turn, OWN + PieceType.DRAGON, "4d 6d 4f 6f 3c 5a 1e 9e 5i") == \
        [1, 1, 1, 1, 0, 1, 1, 1, 1]
    assert _attacked(planes, turn, OWN + PieceType.HORSE, "8g 7h 9h 8i 7g 1a 9i 7i 6h") == \
        [1, 1, 1, 1, 1, 0, 1, 1, 0]


def test_knight_at_the_edge_does_not_wrap() -> None:
    # Black knight on 1e, white knight on 9e: each has one target, nothing appears on the far file.
    planes, turn = _planes_of("4k4/9/9/9/n7N/9/9/9/4K4 b - 1")
    own = planes[..., ap.PLANE_OWN_ATTACKS + PieceType.KNIGHT - 1]
    opp = planes[..., ap.PLANE_OPP_ATTACKS + PieceType.KNIGHT - 1]
    assert own.sum() == 1 and _attacked(planes, turn, OWN + PieceType.KNIGHT, "2c") == [1]
    assert opp.sum() == 1 and _attacked(planes, turn, OPP + PieceType.KNIGHT, "8g") == [1]


def test_mutual_attacks_and_counts() -> None:
    # Black gold 5f and white gold 5e attack each other. The black rook on 5i reaches its own gold on
    # 5f (defends it) but not 5e behind it; the black silver on 4g is a second defender of 5f.
    planes, turn = _planes_of("4k4/9/9/9/4g4/4G4/5S3/9/4R3K b - 1")
    assert _attacked(planes, turn, OWN + PieceType.GOLD, "5e") == [1]
    assert _attacked(planes, turn, OPP + PieceType.GOLD, "5f") == [1]
    assert _attacked(planes, turn, OWN + PieceType.ROOK, "5g 5f 5e") == [1, 1, 0]
    own_count = [_attacked(planes, turn, ap.PLANE_OWN_ATTACK_COUNT + k, "5f") for k in range(3)]
    assert own_count == [[1], [1], [0]]          # rook and silver defend 5f: ">=1", ">=2", not ">=3"
    assert planes[..., ap.PLANE_IN_CHECK].max() == 0


def test_in_check_by_a_slider_white_to_move() -> None:
    # White to move: the black rook on 5i checks the white king on 5a down the open file.
    planes, turn = _planes_of("4k4/9/9/9/9/9/9/9/4R3K w - 1")
    assert turn == shogi.WHITE
    assert planes[..., ap.PLANE_IN_CHECK].min() == 1
    # In White's view the rook is the opponent's and the king sits on row 8.
    assert _attacked(planes, turn, OPP + PieceType.ROOK, "5a 5b 1i") == [1, 1, 1]
    blocked, _ = _planes_of("4k4/4p4/9/9/9/9/9/9/4R3K w - 1")
    assert blocked[..., ap.PLANE_IN_CHECK].max() == 0


def test_layer_under_xla_and_mixed_precision() -> None:
    """The AttackPlanes layer in a compiled tf.function (XLA) and in bfloat16 gives the same planes."""
    import tensorflow as tf
    boards = np.stack([features.encode_position(ShogiPosition(s))[0] for s in (
        "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1",
        "4k4/9/9/9/9/9/9/9/4R3K w - 1")])
    eager = compute(list(boards))
    layer = ap.AttackPlanes(dtype="mixed_bfloat16")
    xla = tf.function(lambda b: layer(b), jit_compile=True)(tf.constant(boards))
    assert xla.dtype == tf.bfloat16
    np.testing.assert_array_equal(np.asarray(tf.cast(xla, tf.float32)), eager)
    assert layer.compute_output_shape((None, NUM_SQUARES)) == (None, *ap.ATTACK_FEATURE_SHAPE)
    # Registered for model files: the layer serialises and comes back by name.
    config = keras.saving.serialize_keras_object(layer)
    assert config["registered_name"] == "shogi_dnn>AttackPlanes"
    assert isinstance(keras.saving.deserialize_keras_object(config), ap.AttackPlanes)


# Tactic planes (model.features = "tactics"): hanging pieces and pieces attacked by a cheaper piece, against
# a reference built on rules.moves.attacks (the pure-Python move table) on real and random positions.

RANDOM_GAMES = 24                 # random playouts from the start position ...
RANDOM_PLIES = 150                # ... of at most this many plies, every 3rd position kept
TACTIC_NAMES = ("own hanging", "opponent hanging", "own attacked by a cheaper piece",
                "opponent attacked by a cheaper piece")


def reference_tactic_planes(board: np.ndarray) -> np.ndarray:
    """[9, 9, NUM_TACTIC_PLANES] float32 of one encoded board (the view read as Black to move), from the
    attackers rules.attacks finds for every occupied square."""
    from shogi_dnn.rules import PIECE_VALUES

    codes = [int(c) for c in board]
    occupied = [s for s, c in enumerate(codes) if c]
    planes = np.zeros((NUM_SQUARES, ap.NUM_TACTIC_PLANES), np.float32)
    for target in occupied:
        colour, kind = divmod(codes[target] - 1, NUM_PIECE_TYPES)
        if kind + 1 == PieceType.KING:
            continue
        attackers = [s for s in occupied if s != target and attacks(codes, s, target)]
        friends = [s for s in attackers if (codes[s] - 1) // NUM_PIECE_TYPES == colour]
        enemies = [s for s in attackers if (codes[s] - 1) // NUM_PIECE_TYPES != colour]
        value = PIECE_VALUES[PieceType(kind + 1)]
        cheaper = any(PIECE_VALUES[PieceType((codes[s] - 1) % NUM_PIECE_TYPES + 1)] < value
                      for s in enemies)
        planes[target, colour] = float(bool(enemies) and not friends)      # own (0) / opponent (1) hanging
        planes[target, 2 + colour] = float(cheaper)
    return planes.reshape(9, 9, ap.NUM_TACTIC_PLANES)


def random_playout_boards(seed: int = 7) -> list[np.ndarray]:
    """Encoded boards of RANDOM_GAMES random games (uniform legal moves, the rules backend), every 3rd
    position: many more hanging and threatened pieces than real games have."""
    import random

    from shogi_dnn.rules import new_position

    rng = random.Random(seed)
    boards = []
    for _ in range(RANDOM_GAMES):
        position = new_position("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1")
        for ply in range(RANDOM_PLIES):
            moves = position.legal_usi()
            if not moves:
                break
            if ply % 3 == 0:
                boards.append(features.encode_position(position)[0])
            position.push_usi(rng.choice(moves))
    return boards


def assert_tactic_planes_equal(boards: list[np.ndarray]) -> np.ndarray:
    """tactics=True planes of a batch against the reference; returns the reference [N, 9, 9, 4]."""
    got = np.asarray(ap.attack_planes(np.stack(boards), tactics=True))
    assert got.shape == (len(boards), *ap.TACTIC_FEATURE_SHAPE) and got.dtype == np.float32
    np.testing.assert_array_equal(got[..., :ap.NUM_ATTACK_PLANES], compute(boards))   # the attack planes stay
    expected = np.stack([reference_tactic_planes(b) for b in boards])
    bad = np.argwhere(got[..., ap.NUM_ATTACK_PLANES:] != expected)
    if len(bad):
        i, row, col, plane = bad[0]
        pytest.fail(f"{len(bad)} values differ; first: board {boards[i].tolist()} {TACTIC_NAMES[plane]} at "
                    f"view square ({row}, {col}): got {got[i, row, col, ap.NUM_ATTACK_PLANES + plane]}, "
                    f"reference {expected[i, row, col, plane]}")
    return expected


def test_tactic_plane_layout() -> None:
    layout = (ap.PLANE_OWN_HANGING, ap.PLANE_OPP_HANGING, ap.PLANE_OWN_CHEAPER, ap.PLANE_OPP_CHEAPER)
    assert layout == (35, 36, 37, 38)
    assert ap.NUM_TACTIC_PLANES == 4 and ap.TACTIC_FEATURE_SHAPE == (9, 9, 39)


def test_tactic_planes_of_data_positions_match_the_move_table(data_sample: Sample) -> None:
    expected = assert_tactic_planes_equal(data_sample.boards)
    counts = expected.sum(axis=(0, 1, 2))
    assert counts.min() > 20, dict(zip(TACTIC_NAMES, counts))       # every plane fires (not vacuous)


def test_tactic_planes_of_random_playouts_match_the_move_table() -> None:
    boards = random_playout_boards()
    assert len(boards) > 800
    expected = assert_tactic_planes_equal(boards)
    counts = expected.sum(axis=(0, 1, 2))
    assert counts.min() > 200, dict(zip(TACTIC_NAMES, counts))


def test_tactic_planes_by_hand() -> None:
    # Black to move. The pawns on 5d and 5e attack each other, neither defended. The black gold on 3e
    # attacks the white pawn on 3d (undefended), which attacks the gold back; the silver on 3f and the
    # knight on 2g defend the gold. Nothing attacks the silver or the knight; kings never count.
    sfen = "4k4/9/9/4p1p2/4P1G2/6S2/7N1/9/4K4 b - 1"
    board = features.encode_position(ShogiPosition(sfen))[0]
    planes = np.asarray(ap.attack_planes(board[None], tactics=True))[0]
    at = {name: _square(name, shogi.BLACK) for name in ("5d", "5e", "3d", "3e", "3f", "2g", "5a", "5i")}
    hanging_opp = {k for k, rc in at.items() if planes[(*rc, ap.PLANE_OPP_HANGING)]}
    hanging_own = {k for k, rc in at.items() if planes[(*rc, ap.PLANE_OWN_HANGING)]}
    cheaper_own = {k for k, rc in at.items() if planes[(*rc, ap.PLANE_OWN_CHEAPER)]}
    cheaper_opp = {k for k, rc in at.items() if planes[(*rc, ap.PLANE_OPP_CHEAPER)]}
    assert hanging_opp == {"5d", "3d"}
    # 5e: attacked by the white pawn on 5d, undefended. 3e: defended by the silver on 3f.
    assert hanging_own == {"5e"}
    assert cheaper_own == {"3e"}                       # gold attacked by a pawn; pawn by pawn is not cheaper
    assert cheaper_opp == set()                        # the gold attacking the pawn on 3d is dearer
    np.testing.assert_array_equal(planes[..., ap.NUM_ATTACK_PLANES:], reference_tactic_planes(board))


def test_tactic_planes_mirror_with_the_board(data_sample: Sample) -> None:
    board = np.stack(data_sample.boards)
    planes = np.asarray(ap.attack_planes(board, tactics=True))
    np.testing.assert_array_equal(np.asarray(ap.attack_planes(features.mirror_board(board), tactics=True)),
                                  planes[:, :, ::-1, :])


def test_tactics_layer_under_xla_and_in_the_model(tmp_path, data_sample: Sample) -> None:
    """AttackPlanes(tactics=True) compiled with XLA in bfloat16; model.features = "tactics": 81 stem planes,
    an architecture key, save and reload with the same outputs; memory.py counts the same planes."""
    import tensorflow as tf

    from shogi_dnn import config as cfg
    from shogi_dnn.training import memory
    from shogi_dnn.training import model as model_lib

    boards = np.stack(data_sample.boards[:64])
    layer = ap.AttackPlanes(tactics=True, dtype="mixed_bfloat16")
    xla = tf.function(lambda b: layer(b), jit_compile=True)(tf.constant(boards))
    np.testing.assert_array_equal(np.asarray(tf.cast(xla, tf.float32)),
                                  np.asarray(ap.attack_planes(boards, tactics=True)))
    assert layer.compute_output_shape((None, NUM_SQUARES)) == (None, *ap.TACTIC_FEATURE_SHAPE)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert restored.tactics and not ap.AttackPlanes().tactics
    tactics = cfg.load_config(None, ["model.features=tactics"])
    assert cfg.architecture_mismatch(cfg.load_config(None, ["model.features=attacks"]), tactics) == [
        "model.features: 'attacks' -> 'tactics'"]
    mc = cfg.ModelConfig(blocks=1, filters=8, value_hidden=8, features="tactics")
    assert model_lib.input_planes(mc) == memory.PLANES["tactics"] == 81
    net = model_lib.build_model(mc, seed=1)
    x = {"board": boards, "hands": np.zeros((len(boards), features.HAND_SIZE), np.uint8)}
    stem_input = np.asarray(keras.Model(net.inputs, net.get_layer("stem_conv").input)(x))
    np.testing.assert_array_equal(stem_input, np.concatenate(
        [features.expand_planes(x["board"], x["hands"]), np.asarray(ap.attack_planes(boards, tactics=True))],
        axis=-1))
    assert memory.parameter_count(mc) == net.count_params()
    net.save(tmp_path / "model.keras")
    reloaded = model_lib.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(np.asarray(reloaded(x)), np.asarray(net(x)))
