"""Win probabilities from a trained run: of one position, or after every move of a game.

A position (`startpos moves ...`, `sfen <sfen> [moves ...]`, a bare SFEN) gets the side to move's
probability. A game record gives a curve in Black's view, before the first move and after each, with
the largest persistent swings marked (persistent_changes), the game's context (which game, its result,
whether the run trained on it: find_in_dataset). `model` is anything called as a Keras model is (no
TensorFlow here); game_curve's `values` may replace the network's (engine/game_values.py).

With a policy head (output {"value" [B, 1], "policy" [B, 2187]}), each position also lists the network's
TOP_MOVES legal moves with their probability (softmax over the legal moves), the one played marked (*).
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from shogi_dnn import kifu, rules
from shogi_dnn.analysis import scoring
from shogi_dnn.dataset import features, policy, shards
from shogi_dnn.errors import KifuError, ShogiDnnError
from shogi_dnn.folders import run_files
from shogi_dnn.kifu.kif import move_text
from shogi_dnn.kifu.record import GameRecord, Winner
from shogi_dnn.kifu.sfen import parse_line

PREDICT_BATCH = 512
SWINGS = 3
NOTATIONS = ("kif", "usi")        # how moves are written in the table and on the graph (kif: ▲７六歩(77))
RAW = "the network's value (no search)"
TOP_MOVES = 3                     # the network's moves shown per position (a model with a policy head)
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


def side_name(turn: int) -> str:
    """'Black' or 'White' (rules.BLACK / rules.WHITE)."""
    return "Black" if turn == rules.BLACK else "White"


def check_record_path(path: str | Path) -> Path:
    """The record file as a Path. Raises ShogiDnnError "no such file: X" when there is none."""
    path = Path(path)
    if not path.is_file():
        raise ShogiDnnError(f"no such file: {path}" + (" (a directory)" if path.is_dir() else ""))
    return path


@dataclasses.dataclass(frozen=True)
class GameChoice:
    """The game chosen from a record file: `index` (1-based) of `total` games in `path`."""

    record: GameRecord
    index: int
    total: int
    path: Path

    def describe(self) -> str:
        """`game 3 of 12 in file.csa (another: --game N)`; `game 1 of 1 in file.kif`."""
        return (f"game {self.index} of {self.total} in {self.path.name}"
                + (f" (another: --game N, 1 to {self.total})" if self.total > 1 else ""))


def choose_game(path: str | Path, game: int = 1) -> GameChoice:
    """The `game`-th (1-based) game of a record file, and how many games the file holds.

    Raises:
        ShogiDnnError: no such file. KifuError: the file has fewer games, or that game cannot be read.
    """
    path = check_record_path(path)
    found, chosen = 0, None
    for item in kifu.read_record_file(path):
        found += 1
        if found == game:
            if isinstance(item, KifuError):
                raise item
            chosen = item
    if chosen is None:
        raise KifuError(str(path), 0,
                        f"no game {game} in the file ({found} found; --game takes 1 to {found})")
    return GameChoice(chosen, game, found, path)


def read_game(path: str | Path, game: int = 1) -> GameRecord:
    """The `game`-th (1-based) game of a record file (choose_game's record)."""
    return choose_game(path, game).record


def result_text(record: GameRecord) -> str:
    """The recorded result and ending: `Black (渡辺明) won by resign after 107 moves`, `draw (sennichite)
    after 120 moves`, `no result (interrupted) after 40 moves`."""
    ending = record.ending.value.replace("_", " ")
    moves = f"after {len(record.moves)} moves"
    if record.winner in (Winner.BLACK, Winner.WHITE):
        black = record.winner is Winner.BLACK
        name = record.black if black else record.white
        side = ("Black" if black else "White") + (f" ({name})" if name else "")
        return f"{side} won by {ending} {moves}"
    if record.winner is Winner.DRAW:
        return f"draw ({ending}) {moves}"
    return f"no result ({ending}) {moves}"


@dataclasses.dataclass(frozen=True)
class GamePositions:
    """Every position of a game from its start (P = len(moves) + 1): board [P, 81] and hands [P, 14] uint8
    (side to move's view), turn [P] uint8, moves (USI, '' for the start), sfens, notation (KIF, '' at start).
    """

    board: np.ndarray
    hands: np.ndarray
    turn: np.ndarray
    moves: tuple[str, ...]
    sfens: tuple[str, ...]
    notation: tuple[str, ...] = ()


def game_positions(record: GameRecord) -> GamePositions:
    """Replay a record's moves (already checked legal by the reader) and encode every position."""
    position = rules.new_position(record.start_sfen)
    boards, hands, turns, sfens, notation = [], [], [], [], [""]
    previous = ""
    for move in ("",) + tuple(record.moves):
        if move:
            mark = "▲" if position.turn == rules.BLACK else "△"
            notation.append(mark + move_text(position, move, previous))
            previous = move[2:4]
            position.push_usi(move)
        board, hand = features.encode_position(position)
        boards.append(board)
        hands.append(hand)
        turns.append(position.turn)
        sfens.append(position.sfen())
    return GamePositions(np.stack(boards), np.stack(hands), np.asarray(turns, np.uint8),
                         ("",) + tuple(record.moves), tuple(sfens), tuple(notation))


def predict_logits(model, board: np.ndarray, hands: np.ndarray) -> np.ndarray:
    """Win logits of the side to move: [N, 81] uint8 boards, [N, 14] uint8 hands -> [N] float64."""
    return predict_outputs(model, board, hands)[0]


def predict_outputs(model, board: np.ndarray, hands: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(win logits [N] float64, policy logits [N, 2187] float32 or None for a model without a policy head)
    of [N, 81] uint8 boards and [N, 14] uint8 hands."""
    values, policies = [], []
    for i in range(0, len(board), PREDICT_BATCH):
        out = model({"board": board[i:i + PREDICT_BATCH], "hands": hands[i:i + PREDICT_BATCH]},
                    training=False)
        if isinstance(out, dict):
            policies.append(np.asarray(out["policy"], np.float32))
            out = out["value"]
        values.append(np.asarray(out).reshape(-1))
    return (np.concatenate(values).astype(np.float64),
            np.concatenate(policies) if policies else None)


@dataclasses.dataclass(frozen=True)
class TopMove:
    """One of the network's preferred moves: USI, KIF notation with the mover's mark, probability among
    the legal moves."""

    usi: str
    notation: str
    p: float


def top_moves(positions: GamePositions, index: int, logits: np.ndarray, count: int = TOP_MOVES,
              ) -> tuple[TopMove, ...]:
    """Up to `count` most likely legal moves of position `index`, from its [2187] policy `logits` (p: softmax
    over the legal moves).
    """
    board, hands, turn = positions.board[index], positions.hands[index], int(positions.turn[index])
    legal = np.flatnonzero(policy.legal_label_mask(board, hands))
    if not legal.size:
        return ()
    x = np.asarray(logits, np.float64)[legal]
    p = np.exp(x - x.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")[:count]
    position = rules.new_position(positions.sfens[index])
    previous = positions.moves[index][2:4]
    mark = "▲" if turn == rules.BLACK else "△"
    out = []
    for i in order:
        usi = features.decode_move(policy.label_to_move(board, int(legal[i])), turn)
        out.append(TopMove(usi, mark + move_text(position, usi, previous), float(p[i])))
    return tuple(out)


def predict_position(model, text: str) -> tuple[str, float]:
    """(SFEN of the final position, win probability of its side to move) of a USI/SFEN position (the
    side to move is the SFEN's `b` Black or `w` White: position_side)."""
    positions = game_positions(read_position(text))
    logit = predict_logits(model, positions.board[-1:], positions.hands[-1:])
    return positions.sfens[-1], float(scoring.sigmoid(logit)[0])


def position_side(sfen: str) -> int:
    """The side to move of an SFEN (rules.BLACK or rules.WHITE)."""
    return rules.WHITE if sfen.split()[1] == "w" else rules.BLACK


def persistent_changes(p_black: np.ndarray) -> np.ndarray:
    """[P] change of Black's probability by each move that survives the reply (0 at the start).

    Move i's change is the smallest of the four differences from p[i-1], p[i-2] to p[i], p[i+1] when all
    have the same sign, else 0: a capture and its recapture both get 0.
    """
    p = np.asarray(p_black, np.float64)
    out = np.zeros(len(p))
    last = len(p) - 1
    for i in range(1, len(p)):
        diffs = np.array([p[a] - p[b] for a in (i, min(i + 1, last)) for b in (i - 1, max(i - 2, 0))])
        if (diffs > 0).all() or (diffs < 0).all():
            out[i] = diffs[np.argmin(np.abs(diffs))]
    return out


def turns(p_black: np.ndarray) -> int:
    """Times the curve changes direction (up then down, or down then up; flat steps are skipped)."""
    steps = np.sign(np.diff(np.asarray(p_black, np.float64)))
    steps = steps[steps != 0]
    return int(np.count_nonzero(steps[1:] != steps[:-1]))


def move_labels(positions: GamePositions, notation: str = "kif") -> tuple[str, ...]:
    """Each position's move as the table and the graph write it: KIF with the mover's mark (`▲７六歩(77)`)
    or USI (`7g7f`); '' for the start."""
    if notation not in NOTATIONS:
        raise ValueError(f"unknown notation {notation!r} (one of {', '.join(NOTATIONS)})")
    return positions.notation if notation == "kif" and positions.notation else positions.moves


def pad(text: str, width: int) -> str:
    """`text` padded with spaces to `width` terminal columns (a full-width character takes two)."""
    return text + " " * max(0, width - _columns(text))


@dataclasses.dataclass(frozen=True)
class GameCurve:
    """Win probabilities over a game. ply [P] int; p_to_move and p_black [P] float64; top: per position
    the network's preferred moves (top_moves; () for a model without a policy head); search: how the
    values were found (RAW, or the search's description)."""

    positions: GamePositions
    p_to_move: np.ndarray
    p_black: np.ndarray
    top: tuple[tuple[TopMove, ...], ...] = ()
    search: str = RAW

    def swings(self, count: int = SWINGS) -> list[int]:
        """Indices of the (at most) `count` positions whose move changed Black's probability most by a
        change that survives the reply (persistent_changes), in ply order."""
        change = np.abs(persistent_changes(self.p_black))
        order = [int(i) for i in np.argsort(-change, kind="stable")[:count] if change[i] > 0]
        return sorted(order)


def game_curve(model, record: GameRecord,
               values: Callable[[GamePositions], np.ndarray] | None = None, search: str = RAW) -> GameCurve:
    """Probability before the first move and after every move, for the side to move and for Black.

    `values` (the positions -> [P] P(the side to move wins), e.g. a search's; None: the network's own
    value) gives the curve, described by `search`; the top moves are the network's policy either way.
    """
    positions = game_positions(record)
    logits, policy_logits = predict_outputs(model, positions.board, positions.hands)
    p = scoring.sigmoid(logits) if values is None else np.asarray(values(positions), np.float64)
    p_black = np.where(positions.turn == rules.BLACK, p, 1.0 - p)
    top = () if policy_logits is None else tuple(top_moves(positions, i, policy_logits[i])
                                                 for i in range(len(policy_logits)))
    return GameCurve(positions, p, p_black, top, RAW if values is None else search)


@dataclasses.dataclass(frozen=True)
class DatasetMatch:
    """Where a game is in the run's dataset: `split` ('train', 'validation', 'test') or None when no
    shard holds it; `by` says how it was matched ('source file and line' or 'positions')."""

    data_dir: str
    split: str | None
    shard: str = ""
    game_id: int = -1
    by: str = ""

    def describe(self) -> str:
        if self.split is None:
            return f"not in the run's data ({self.data_dir})"
        return (f"in the run's {self.split} split ({self.shard}, game id {self.game_id}, "
                f"matched by {self.by})")

    def short(self) -> str:
        """For the graph: `in the run's train split`, `not in the run's data`."""
        return "not in the run's data" if self.split is None else f"in the run's {self.split} split"


def _same_source(stored: str, record: GameRecord) -> bool:
    """A games/source entry names the record's file (the file name; an archive member's name) and line."""
    def name(text: str) -> str:
        return Path(text.rsplit(":", 1)[-1] if ":" in Path(text).name else text).name
    return name(stored) == name(record.source.path)


def find_in_dataset(data_dir: str | Path, record: GameRecord, positions: GamePositions) -> DatasetMatch:
    """Look the game up in a dataset: a shard's game with the same start and move count matches by source file
    and line, or by every position the shard stored for it.

    Raises:
        ShardFormatError: no manifest, or an unreadable shard.
    """
    manifest = shards.read_manifest(data_dir)
    start = record.start_sfen.split()[:3]
    for info in manifest.shards:
        path = manifest.shard_path(info)
        games = shards.read_games(path)
        rows = [i for i in range(len(games["game_id"]))
                if int(games["num_moves"][i]) == len(record.moves)
                and games["start_sfen"][i].split()[:3] == start]
        if not rows:
            continue
        for i in rows:
            if _same_source(games["source"][i], record) and int(games["line"][i]) == record.source.line:
                return DatasetMatch(str(data_dir), info.split, info.path, int(games["game_id"][i]),
                                    "source file and line")
        ids = {int(games["game_id"][i]) for i in rows}
        for game_id in sorted(ids):
            if _positions_match(path, game_id, positions):
                return DatasetMatch(str(data_dir), info.split, info.path, game_id, "positions")
    return DatasetMatch(str(data_dir), None)


def _positions_match(path: Path, game_id: int, positions: GamePositions) -> bool:
    """Every stored position of game `game_id` in the shard equals the record's at the same ply."""
    column = shards.read_positions(path, keys=[shards.KEY_GAME]).arrays[shards.KEY_GAME]
    where = np.flatnonzero(column == game_id)
    if not where.size:
        return False
    rows = shards.read_positions(path, int(where.min()), int(where.max()) + 1,
                                 keys=[shards.KEY_GAME, shards.KEY_PLY, shards.KEY_BOARD,
                                       shards.KEY_HANDS]).arrays
    mine = rows[shards.KEY_GAME] == game_id
    ply = rows[shards.KEY_PLY][mine].astype(np.int64)
    if ply.min() < 0 or ply.max() >= len(positions.board):
        return False
    return bool(np.array_equal(rows[shards.KEY_BOARD][mine], positions.board[ply])
                and np.array_equal(rows[shards.KEY_HANDS][mine], positions.hands[ply]))


COLUMNS_NOTE = ("each row is the position after its move; p(to move): the model's win probability for the "
                "side to move there (who replies); p(black): the same for Black (1 - p(to move) when White "
                "is to move), "
                "as the graph draws it")


SWING_NOTE = ("swing: the moves whose change of p(black) survives the reply most (a capture and its "
              "recapture do not count)")
TOP_NOTE = (f"next: the move played from the position; network's top {TOP_MOVES}: its most likely "
            "legal moves there with their probability among the legal moves (* = the move played)")


def validation_accuracy(run_dir: str | Path) -> float | None:
    """The last validation accuracy in RUN/metrics.jsonl, None where there is none (or no readable log)."""
    try:
        records = run_files.read_metrics(run_dir)
    except ShogiDnnError:
        return None
    accuracies = [r.get("accuracy") for r in records if r.get("kind") == "validation"]
    return float(accuracies[-1]) if accuracies and isinstance(accuracies[-1], (int, float)) else None


def caveats(record: GameRecord, run_dir: str | Path | None, packaged_source: str = "") -> list[str]:
    """What a reader of the curve must know first, in words: a model at chance (its curve is noise), a
    network that learned one engine's self-play only (`packaged_source`), a handicap game."""
    notes = []
    accuracy = validation_accuracy(run_dir) if run_dir is not None else None
    if accuracy is not None and accuracy <= scoring.CHANCE_ACCURACY:
        notes.append(f"the model is at chance (validation accuracy {accuracy:.3f}): this curve is noise")
    if packaged_source:
        notes.append(f"trained on {packaged_source} only")
    if record.start_sfen.split(" ")[:3] != kifu.STANDARD_START_SFEN.split(" ")[:3]:
        notes.append(f"a handicap game ({record.handicap})" if record.handicap
                     else "not from the standard start position")
    return notes


def format_curve(curve: GameCurve, record: GameRecord | None = None, notes: Sequence[str] = (),
                 notation: str = "kif") -> str:
    """Table: ply, move (in `notation`), side to move, p(side to move), p(Black), change, swing mark; the
    record's result last, `notes` above; with curve.top, the move played next and the network's top moves.
    """
    swings = set(curve.swings())
    labels = move_labels(curve.positions, notation)
    width = max([7] + [_columns(m) for m in labels])
    lines = [*notes, f"values: {curve.search}; the curve turns {turns(curve.p_black)} times", COLUMNS_NOTE,
             SWING_NOTE, *([TOP_NOTE] if curve.top else []), ""]
    head = (f"{'ply':>4}  {pad('move', width)} {'to move':<7} {'p(to move)':>10} {'p(black)':>9} "
            f"{'change':>7}")
    lines.append(head + (f"  {pad('next', width)} network's top {TOP_MOVES}" if curve.top else ""))
    moves = curve.positions.moves
    for i in range(len(moves)):
        change = curve.p_black[i] - curve.p_black[i - 1] if i else 0.0
        side = side_name(curve.positions.turn[i]).lower()
        mark = "  <- swing" if i in swings else ""
        row = (f"{i:>4}  {pad(labels[i] or '-', width)} {side:<7} {curve.p_to_move[i]:>10.3f} "
               f"{curve.p_black[i]:>9.3f} {change:>+7.3f}")
        if curve.top:
            played = moves[i + 1] if i + 1 < len(moves) else ""
            shown = labels[i + 1] if i + 1 < len(moves) else ""
            row += f"  {pad(shown or '-', width)} " + ", ".join(
                f"{m.notation if notation == 'kif' else m.usi}{'*' if m.usi == played else ''} {m.p:.2f}"
                for m in curve.top[i])
        lines.append(row + mark)
    if record is not None:
        lines.append(f"{'end':>4}  result: {result_text(record)}")
    return "\n".join(lines)


def _columns(text: str) -> int:
    """Terminal columns of `text` (a full-width character takes two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def plot_curve(curve: GameCurve, path: str | Path, title: str = "", record: GameRecord | None = None,
               notes: Sequence[str] = (), notation: str = "kif") -> Path:
    """The game's win-rate graph from Black's view (0..100%), big swings marked; PNG written atomically."""
    from shogi_dnn import plotting

    return plotting.save_png(curve_figure(curve, title, record, notes, notation), path)


# Offsets (points) and alignment tried in turn for a swing's label until it lies inside the axes, overlaps
# no label or leader line placed before it, and neither it nor its leader crosses the curve: beside the point
# first (right, then left), then farther above and below, straight and aslant (a leader line joins it).
_LABEL_OFFSETS = [(dx, dy, "left" if dx > 0 else "right")
                  for dy in (6, -16, 20, -30, 34, -44, 48, -58, 66, -76, 90, -100) for dx in (4, -4, 28, -28)]
# The recorded ending's label at the last ply: left of its square, below or above it, then farther away.
_END_OFFSETS = [(-8, -14, "right"), (-8, 8, "right"), (-8, -28, "right"), (-8, 22, "right"),
                (-8, -44, "right"), (-8, 38, "right"), (-8, -62, "right"), (-8, 56, "right"),
                (-8, -84, "right"), (-8, 78, "right"), (-8, -110, "right"), (-8, 104, "right")]


def curve_figure(curve: GameCurve, title: str = "", record: GameRecord | None = None,
                 notes: Sequence[str] = (), notation: str = "kif"):
    """The graph of plot_curve as a matplotlib Figure: title and `notes`, the swings' labels placed clear of
    each other and the curve (_LABEL_OFFSETS), the recorded ending marked at the last ply.
    """
    # matplotlib only for a record's graph: a position's answer does not wait for it
    from shogi_dnn import plotting

    fig = plotting.new_figure((9, 4.5))
    ax = fig.add_subplot()
    plies = np.arange(len(curve.p_black))
    ax.fill_between(plies, 50, 100 * curve.p_black, color="tab:blue", alpha=0.25, lw=0)
    curve_line, = ax.plot(plies, 100 * curve.p_black, color="tab:blue", lw=1.5)
    ax.axhline(50, color="grey", lw=0.8, ls=":")
    ax.set_ylim(0, 100)
    ax.set_xlim(0, max(1, len(plies) - 1) * 1.01)       # room for the last ply's marks
    ax.set_xlabel("ply (moves played)")
    ax.set_ylabel("Black's win probability (%)")
    subtitle = " · ".join(([result_text(record)] if record is not None else []) + list(notes))
    ax.set_title((title or "win rate") + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()                    # fixed before the labels are placed, so their pixels stay put
    marked = [(i, 100 * curve.p_black[i]) for i in [*curve.swings(), len(plies) - 1]]   # swings, the end
    labels = _Labels(fig, ax, curve_line, marked)
    if record is not None:
        _mark_end(ax, labels, record, len(plies) - 1, 100 * curve.p_black[-1])
    _place_swing_labels(ax, labels, curve, notation)
    return fig


def _mark_end(ax, labels: _Labels, record: GameRecord, ply: int, y: float) -> None:
    """The recorded ending at the last ply: a black square and `resign: Black won` inside the axes."""
    winner = {Winner.BLACK: "Black won", Winner.WHITE: "White won", Winner.DRAW: "draw"}.get(record.winner,
                                                                                             "no result")
    ax.plot(ply, y, "s", color="black", ms=5)
    labels.place(f"{record.ending.value.replace('_', ' ')}: {winner}", (ply, y), _END_OFFSETS, color="black")


def _text_box(text, renderer):
    """The pixels of a label's text (without the line an Annotation draws to its point), with a margin."""
    from matplotlib.text import Text

    if hasattr(text, "update_positions"):        # an Annotation: its text's place, from xytext
        text.update_positions(renderer)
    return Text.get_window_extent(text, renderer).expanded(1.05, 1.1)


def _leader(point, box):
    """The line (a Path in pixels) from a label's point to the nearest side of its text's box."""
    from matplotlib.path import Path as LinePath

    x, y = point
    return LinePath([(x, y), (min(max(x, box.x0), box.x1), box.y0 if y < box.y0 else box.y1)])


def _clear_of_point(leader, gap: float = 6.0):
    """The leader without its first `gap` pixels: the part that may not cross the curve (it starts on it)."""
    from matplotlib.path import Path as LinePath

    (x0, y0), (x1, y1) = leader.vertices
    length = max(1e-9, ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5)
    t = min(1.0, gap / length)
    return LinePath([(x0 + t * (x1 - x0), y0 + t * (y1 - y0)), (x1, y1)])


POINT_PX = 5          # half the side of the square around a marked point that no label may cover (pixels)
LEADER_GAP_PX = 4     # a leader line keeps this far from the squares of the other marked points (pixels)


class _Labels:
    """Places text labels at the first offset inside the axes, clear of other labels and the curve, whose
    leader line crosses nothing; else the first offset meeting the fewest conditions dropped last-first.
    """

    def __init__(self, fig, ax, curve, points: Sequence[tuple[float, float]] = ()) -> None:
        from matplotlib.transforms import Bbox

        self.ax, self.renderer = ax, fig.canvas.get_renderer()
        self.frame = ax.get_window_extent(self.renderer)
        self.curve = curve.get_transform().transform_path(curve.get_path())   # in pixels
        marked = ax.transData.transform(np.asarray(points, float).reshape(-1, 2))   # the marked points
        self.placed = [_text_box(t, self.renderer) for t in ax.texts]
        self.placed += [Bbox.from_extents(x - POINT_PX, y - POINT_PX, x + POINT_PX, y + POINT_PX)
                        for x, y in marked]
        self.leaders: list = []                     # the lines joining moved labels to their points (pixels)
        gap = POINT_PX + LEADER_GAP_PX
        self.points = [Bbox.from_extents(x - gap, y - gap, x + gap, y + gap) for x, y in marked]

    def place(self, label: str, xy: tuple[float, float], offsets: Sequence[tuple[int, int, str]],
              color: str) -> None:
        """Annotate `xy` with `label` at the best of `offsets` ((dx, dy, ha) in points)."""
        candidates, point = [], self.ax.transData.transform(xy)
        others = [b for b in self.placed if not b.contains(*point)]     # not the square of its own point
        for dx, dy, ha in offsets:
            beside = abs(dy) < 10 and abs(dx) <= 4          # next to its point: no leader line needed
            text = self.ax.annotate(label, xy, fontsize=8, xytext=(dx, dy), ha=ha, textcoords="offset points",
                                    color=color, arrowprops=None if beside else
                                    {"arrowstyle": "-", "color": color, "lw": 0.5})
            box = _text_box(text, self.renderer)
            leader = None if beside else _leader(point, box)
            f = self.frame
            inside = f.x0 <= box.x0 and box.x1 <= f.x1 and f.y0 <= box.y0 and box.y1 <= f.y1
            free = (not any(box.overlaps(other) for other in others)
                    and not any(line.intersects_bbox(box, filled=False) for line in self.leaders)
                    and not (leader is not None
                             and any(leader.intersects_bbox(b, filled=False) for b in others)))
            clear = not self.curve.intersects_bbox(box, filled=False)
            straight = leader is None or not _clear_of_point(leader).intersects_path(self.curve, filled=False)
            apart = leader is None or not (           # crosses no other leader, keeps off the other points
                any(leader.intersects_path(line, filled=False) for line in self.leaders)
                or any(leader.intersects_bbox(b, filled=False)
                       for b in self.points if not b.contains(*point)))
            placeable = inside and free
            kind = (placeable and clear and straight and apart, placeable and clear and straight,
                    placeable and clear, placeable, inside)
            candidates.append((text, box, leader, kind))
            if kind[0]:
                break
        best = max(candidates, key=lambda c: c[3])        # the first of the best kind (max keeps the first)
        for text, *_ in candidates:
            if text is not best[0]:
                text.remove()
        self.placed.append(best[1])
        if best[2] is not None:
            self.leaders.append(best[2])


def _place_swing_labels(ax, labels: _Labels, curve: GameCurve, notation: str = "kif") -> None:
    """Each swing: a red point and its label (ply and move in `notation`) placed by `labels`."""
    moves = move_labels(curve.positions, notation)
    for i in curve.swings():
        y = 100 * curve.p_black[i]
        ax.plot(i, y, "o", color="tab:red", ms=5)
        labels.place(f"{i} {moves[i]}", (i, y), _LABEL_OFFSETS, color="tab:red")
