"""Which games a conversion keeps and which split each goes to.

`GameFilter` holds the opt-in filters users of dlshogi's converter rely on (rating, moves, endings,
draws); by default every finished game with a result is kept. `ConvertSettings` is everything that
decides a dataset's bytes. The split is drawn from a stable hash of the game (`game_key`), so a rerun
gives the same split and duplicate records of one game land in the same split.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterable
from typing import Any

from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.kifu.record import Ending, GameRecord, Winner
from shogi_dnn.wording import plural

RATING_OF = ("both", "loser")
DRAWS = ("keep", "drop")
# Skip reasons, in report order.
SKIP_ERROR, SKIP_NO_RESULT, SKIP_RATING, SKIP_MOVES, SKIP_ENDING, SKIP_DRAW = (
    "error", "no_result", "min_rating", "min_moves", "ending", "draw")
SKIP_DUPLICATE = "duplicate"       # the start position and moves of an earlier kept game (--dedup)
SKIP_PROBLEM = "mate_problem"      # a start with one king: a tsume problem and its solution, not a game


@dataclasses.dataclass(frozen=True)
class GameFilter:
    """Which games with a result become training data. Defaults keep every one of them."""

    min_rating: float | None = None    # minimum rating (of both players or of the loser); None = off
    rating_of: str = "both"            # 'both' or 'loser' (a draw has no loser: both then)
    min_moves: int = 0                 # minimum moves in the main line
    endings: frozenset[str] | None = None   # Ending values to keep; None = all endings with a result
    draws: str = "keep"                # 'keep' (label 0.5) or 'drop'

    def __post_init__(self) -> None:
        if self.rating_of not in RATING_OF:
            raise ConfigError(f"--rating-of {self.rating_of!r}: choose from {', '.join(RATING_OF)}")
        if self.draws not in DRAWS:
            raise ConfigError(f"--draws {self.draws!r}: choose from {', '.join(DRAWS)}")
        if self.min_moves < 0:
            raise ConfigError(f"--min-moves {self.min_moves}: must be >= 0")
        known = {e.value for e in Ending}
        unknown = sorted(set(self.endings or ()) - known)
        if unknown:
            raise ConfigError(f"--endings: unknown {', '.join(unknown)} (known: {', '.join(sorted(known))})")

    def skip_reason(self, record: GameRecord) -> str | None:
        """The reason a game is not kept (a SKIP_* name), or None when it is kept."""
        if not has_both_kings(record.start_sfen):
            return SKIP_PROBLEM
        if not record.has_result:
            return SKIP_NO_RESULT
        if self.draws == "drop" and record.winner is Winner.DRAW:
            return SKIP_DRAW
        if self.endings is not None and record.ending.value not in self.endings:
            return SKIP_ENDING
        if len(record.moves) < self.min_moves:
            return SKIP_MOVES
        if self.min_rating is not None and not self._rated_enough(record):
            return SKIP_RATING
        return None

    def _rated_enough(self, record: GameRecord) -> bool:
        minimum = self.min_rating
        if minimum is None:                 # the filter is off
            return True
        ratings = {Winner.BLACK: record.black_rating, Winner.WHITE: record.white_rating}
        if self.rating_of == "loser" and record.winner in ratings:
            loser = Winner.WHITE if record.winner is Winner.BLACK else Winner.BLACK
            rating = ratings[loser]
            return rating is not None and rating >= minimum
        return all(r is not None and r >= minimum for r in ratings.values())


def has_both_kings(sfen: str) -> bool:
    """Whether the board of an SFEN holds both kings (a tsume problem's holds the defender's alone)."""
    board = sfen.split(" ", 1)[0]
    return "K" in board and "k" in board


ROW_ORDERS = ("game", "shuffled")


@dataclasses.dataclass(frozen=True)
class ConvertSettings:
    """Everything that decides the output bytes (the worker count and the rules backend do not)."""

    filters: GameFilter = GameFilter()
    val_fraction: float = 0.05         # share of games in the validation split
    test_fraction: float = 0.0         # share of games in the test split (0: none; 1: a test-only set)
    shard_size: int = 100_000          # positions per shard (a shard holds whole games: at least this)
    row_order: str = "game"            # "game": rows in game order (compresses 2.2x better; the pipeline
                                       # shuffles chunks and buffers) or "shuffled": seeded row shuffle
    seed: int = 0                      # seed of the within-shard shuffle (row_order "shuffled" only)
    dedup: bool = True                 # drop a game whose start position and moves equal an earlier one's
    compression: str = shards.DEFAULT_COMPRESSION   # shards.COMPRESSIONS name: the shards' chunk filter

    def __post_init__(self) -> None:
        if not (0 <= self.val_fraction and 0 <= self.test_fraction
                and self.val_fraction + self.test_fraction <= 1):
            raise ConfigError(f"--val-fraction {self.val_fraction:g} + --test-fraction "
                              f"{self.test_fraction:g}: each must be >= 0 and their sum <= 1 (1: no train "
                              "split; a test-only set: --test-fraction 1)")
        if self.row_order not in ROW_ORDERS:
            raise ConfigError(f"--row-order {self.row_order!r}: must be one of {', '.join(ROW_ORDERS)}")
        if self.compression not in shards.COMPRESSIONS:
            raise ConfigError(f"--compression {self.compression!r}: must be one of "
                              f"{', '.join(shards.COMPRESSIONS)}")
        if self.shard_size < 1:
            raise ConfigError(f"--shard-size {self.shard_size}: must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (manifest settings, state fingerprint)."""
        data = dataclasses.asdict(self)
        endings = self.filters.endings
        data["filters"]["endings"] = None if endings is None else sorted(endings)
        return data


def game_key(record: GameRecord) -> bytes:
    """sha1 of the start position and the moves: equal for duplicate games, stable across runs."""
    return hashlib.sha1((record.start_sfen + "\n" + " ".join(record.moves)).encode("utf-8")).digest()


class Deduplicator:
    """`--dedup`: which kept games repeat an earlier one (same `game_key`: start position and moves),
    across files and formats (the CSA and KIF copies of one game, a file copied twice).

    Only the parent asks, in input order, so the first copy is kept and the result is the same for any
    number of workers. 8 bytes of each key are remembered (about 100 bytes a game in a Python set; two
    different games share them with odds of about n^2 / 2^65, 1e-7 for 2 million games).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.seen: set[int] = set()
        self.new: list[int] = []        # remembered since the last take_new (resume checkpoints)

    def is_duplicate(self, key: bytes) -> bool:
        """True when a game with this key was seen before (always False when disabled); remembers it."""
        if not self.enabled:
            return False
        short = int.from_bytes(key[:8], "big")
        if short in self.seen:
            return True
        self.seen.add(short)
        self.new.append(short)
        return False

    def take_new(self) -> list[int]:
        """The keys remembered since the last call, in order (a resume checkpoint appends them)."""
        new, self.new = self.new, []
        return new

    def restore(self, keys: Iterable[int]) -> None:
        """Remember `keys` (from a resume checkpoint) as already seen."""
        self.seen.update(keys)


def assign_split(key: bytes, val_fraction: float, test_fraction: float) -> str:
    """'train', 'validation' or 'test' from the game key: a uniform number in [0, 1) from its first
    8 bytes."""
    u = int.from_bytes(key[:8], "big") / 2.0 ** 64
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "validation"
    return "train"


MIN_SPLIT_GAMES = 100            # fewer games in validation or test: too few to tell two models apart
MAX_SUGGESTED_FRACTION = 0.3     # the largest share of games small_split_warnings suggests holding out


def small_split_warnings(games: dict[str, int], positions: dict[str, int],
                         settings: ConvertSettings) -> list[str]:
    """One line per held-out split (validation, test) asked for but given fewer than MIN_SPLIT_GAMES games,
    with the fraction that would give enough, from the number of games converted: e.g. "validation: 3 games
    (313 positions): too few to compare models (want >= 100); only 88 games in all: --val-fraction 0.3 would
    give ~26 (more games are needed for ~100: about 334)". When the flag already asks for that fraction (or
    more), the line says that only more games help. A split's share of games is drawn per game
    (assign_split), so the counts are expectations."""
    total = sum(games.values())
    lines = []
    for split, fraction, flag in (("validation", settings.val_fraction, "--val-fraction"),
                                  ("test", settings.test_fraction, "--test-fraction")):
        count = games.get(split, 0)
        if fraction <= 0 or not total or count >= MIN_SPLIT_GAMES:
            continue
        head = (f"{split}: {plural(count, 'game')} ({plural(positions.get(split, 0), 'position')}): "
                f"too few to compare models (want >= {MIN_SPLIT_GAMES})")
        wanted = math.ceil(100 * 1.2 * MIN_SPLIT_GAMES / total) / 100     # 20% above: the share is drawn
        suggested = min(wanted, MAX_SUGGESTED_FRACTION)
        if suggested <= fraction:              # the flag already asks for as much: a larger one cannot help
            lines.append(f"{head}; {more_games_help(flag, fraction, total)}")
        elif wanted <= MAX_SUGGESTED_FRACTION:
            lines.append(f"{head}; {flag} {wanted:g} would give ~{round(wanted * total):,} "
                         f"of the {total:,} games")
        else:
            lines.append(f"{head}; only {total:,} games in all: {flag} {suggested:g} would give "
                         f"~{round(suggested * total):,} (more games are needed for ~{MIN_SPLIT_GAMES}: "
                         f"about {math.ceil(MIN_SPLIT_GAMES / suggested):,})")
    return lines


def more_games_help(flag: str, fraction: float, total: int) -> str:
    """The end of a small-split warning when `flag` already asks for the fraction a larger split needs."""
    needed = math.ceil(MIN_SPLIT_GAMES / fraction)
    if needed > total:
        return (f"{flag} {fraction:g} is already given: only more games help (about {needed:,} in all for "
                f"~{MIN_SPLIT_GAMES}; {total:,} now)")
    return (f"{flag} {fraction:g} is already given and should hold ~{round(fraction * total):,} of the "
            f"{total:,} games (the split is drawn per game): only more games help")
