"""Which data a run may be scored on, checked before TensorFlow loads (evaluate's refusals are quick).

check_data: the run's own split (same games digest) is "same". Other data is checked game by game
against RUN/trained-games.npz: no scored game trained on is "foreign"; some is refused unless
allow_changed_data, then "overlap" (TRAINED GAMES). data_check.games holds {games, positions,
trained_games, trained_positions, run_games, run_digest}. A run without trained-games.npz reads its
trained games from its unchanged datasets, else other data is refused unless the flag ("changed", DATA
CHANGED); a run without a recorded identity is scored with one line saying so.

checked_split holds the dataset as a reader (locks.read_dataset) and yields the run folder, the dataset
folder, the split's shard paths and the data check, after checking the run folder is writable and has a
model. The split: the one asked for, else validation, else the only one (pick_split).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from shogi_dnn.dataset import game_keys, identity, shards
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.folders import locks, run_files
from shogi_dnn.wording import plural

log = logging.getLogger(__name__)

SPLITS = (*shards.SPLITS, "all")


@dataclasses.dataclass(frozen=True)
class CheckedSplit:
    """What checked_split found: the run and dataset folders, the split's shards, the data check."""

    run_dir: Path
    data_dir: Path
    paths: list[Path]
    check: identity.DataCheck
    split: str = "validation"       # the split scored (pick_split: the one asked for, or the default)

    def result_path(self, split: str | None = None) -> Path:
        """Where the evaluation of `split` (default: the one checked) goes: RUN/eval-<split>.json, or its
        name for other data."""
        other = None if run_files.is_own_data(self.run_dir, self.data_dir) else self.data_dir
        return run_files.eval_path(self.run_dir, split or self.split, other)


@contextlib.contextmanager
def checked_split(run_dir: str | Path, data: str | Path | None, split: str | None,
                  checkpoint: str | None = None, verify_full: bool = False,
                  allow_trained: bool = False) -> Iterator[CheckedSplit]:
    """The run, its model, the dataset (`data`, else the run's) and its split (None: pick_split), checked; the
    dataset held as a reader for the block.

    Raises:
        RunError / ConfigError / ShardFormatError / OutputError: one line.
    """
    run = run_files.check_run_dir(run_dir)
    run_files.check_writable(run, "--run-dir")              # eval-<split>.json goes there
    if checkpoint is not None or not (run / run_files.MODEL_FILE).is_file():
        run_files.find_checkpoint(run, checkpoint)          # what load_run_model would refuse, said now
    data_dir = run_files.data_dir(run, data)
    with locks.read_dataset(data_dir, "evaluate"):
        split = pick_split(data_dir, split)
        paths = split_paths(data_dir, split, verify_full=verify_full)
        yield CheckedSplit(run, data_dir, paths, check_data(run, data_dir, split, allow_trained), split)


DEFAULT_SPLIT = "validation"


def pick_split(data_dir: Path, split: str | None) -> str:
    """The split to score: `split` when given; else validation, or the dataset's only split (a test-only
    set: test).

    Raises:
        ConfigError: unknown split. RunError: the dataset lacks that split, or (no `split`) has several
            but no validation: one line naming the splits it has and the flag to pass.
    """
    if split is not None and split not in SPLITS:
        raise ConfigError(f"--split {split!r}: must be one of {', '.join(SPLITS)}")
    manifest = shards.read_manifest(data_dir)
    have = [name for name in shards.SPLITS if manifest.split(name)]
    if split is None and (DEFAULT_SPLIT in have or len(have) != 1):
        split = DEFAULT_SPLIT
    elif split is None:
        split = have[0]
        log.info("%s holds only the %s split: scoring it", data_dir, split)
    if split == "all" or split in have:
        return split
    counts = ", ".join(f"{name} ({plural(sum(s.games for s in manifest.split(name)), 'game')})"
                       for name in have)
    flags = ", ".join(f"--split {name}" for name in have) + " or --split all"
    raise RunError(f"{data_dir}: the dataset has no {split!r} shards; it has {counts}: pass {flags}")


def split_paths(data_dir: Path, split: str, verify_full: bool = False) -> list[Path]:
    """Shard paths of a split of a dataset folder ("all": every shard), checked against the manifest
    (shards.verify_shards; `verify_full`: with their sha256).

    Raises:
        ConfigError: unknown split. RunError: the dataset has no shard in that split.
        ShardFormatError: a shard differs from its manifest entry.
    """
    if split not in SPLITS:
        raise ConfigError(f"--split {split!r}: must be one of {', '.join(SPLITS)}")
    manifest = shards.read_manifest(data_dir)
    infos = manifest.shards if split == "all" else manifest.split(split)
    if not infos:
        raise RunError(f"{data_dir}: the dataset has no {split!r} shards")
    shards.verify_shards(manifest, infos, full=verify_full)
    return [manifest.shard_path(s) for s in infos]


def check_data(run_dir: Path, data_dir: Path, split: str, allow_trained: bool = False) -> identity.DataCheck:
    """The scored split against the data the run was trained on (module docstring).

    Raises:
        RunError: scored games the run trained on (or other data, for a run without trained games) and
            not `allow_trained`.
    """
    splits = shards.SPLITS if split == "all" else (split,)
    manifest = shards.read_manifest(data_dir)
    current = identity.dataset_identity(manifest, splits)
    info = run_files.read_run_json(run_dir)
    try:
        check = identity.compare(info.get(run_files.KEY_DATASET), current, splits)
    except ValueError as exc:
        raise RunError(f"{run_dir / run_files.RUN_JSON}: {run_files.KEY_DATASET}: {exc}") from exc
    if check.status == "same":
        return check
    trained = game_keys.read_trained_games(run_dir) or _trained_from_datasets(run_dir, info)
    if trained is None:
        return _check_by_identity(run_dir, data_dir, split, check, allow_trained)
    return _check_by_games(run_dir, manifest, current, splits, trained, allow_trained)


def _trained_from_datasets(run_dir: Path, info: dict[str, Any]) -> game_keys.TrainedGames | None:
    """A run without RUN/trained-games.npz: its trained games from the datasets it trained on (run.json
    "dataset" and the "from" of each data change), when they are all still there, unchanged."""
    history = info.get(run_files.KEY_HISTORY)
    identities = [entry.get("from") for entry in (history if isinstance(history, list) else [])
                  if isinstance(entry, dict)]
    trained = game_keys.trained_games_from_datasets([*identities, info.get(run_files.KEY_DATASET)])
    if trained is not None:
        log.info("%s has no %s (trained before runs recorded their games): its %s read from the data it "
                 "trained on, unchanged since", run_dir, run_files.TRAINED_GAMES,
                 plural(trained.games, "trained game"))
    return trained


def _check_by_games(run_dir: Path, manifest: shards.Manifest, current: identity.DatasetIdentity,
                    splits: Sequence[str], trained: game_keys.TrainedGames,
                    allow_trained: bool) -> identity.DataCheck:
    """Another dataset (or the run's, converted again) against the games the run trained on."""
    start = time.perf_counter()
    overlap = game_keys.overlap(game_keys.split_keys(manifest, splits), trained)
    where = f"the {' and '.join(splits)} split{'s' if len(splits) > 1 else ''} of dataset {current.data_dir}"
    counts = {"games": overlap.games, "positions": overlap.positions, "trained_games": overlap.trained_games,
              "trained_positions": overlap.trained_positions, "run_games": trained.games,
              "run_digest": trained.digest()}
    log.info("%s: %s checked against the run's %s (%.2f s)", current.data_dir,
             plural(overlap.games, "game"), plural(trained.games, "trained game"),
             time.perf_counter() - start)
    if not overlap.trained_games:
        return identity.DataCheck("foreign", f"{where} ({current.describe(splits)}): none of its "
                                  f"{plural(overlap.games, 'game')} is one the run trained on", None, current,
                                  counts)
    detail = f"the run trained on {overlap.text()} of {where} ({current.describe(splits)})"
    if not allow_trained:
        raise RunError(f"{run_dir}: {detail}. Pass {run_files.ALLOW_TRAINED_GAMES} to score anyway (the "
                       "output is labelled)")
    log.warning("TRAINED GAMES scored: %s (%s: the output is labelled)", detail,
                run_files.ALLOW_TRAINED_GAMES)
    return identity.DataCheck("overlap", detail, None, current, counts)


def _check_by_identity(run_dir: Path, data_dir: Path, split: str, check: identity.DataCheck,
                       allow_changed: bool) -> identity.DataCheck:
    """A run without RUN/trained-games.npz whose training data is gone or changed: its own data only (the
    data identity), as before."""
    old = (f"; {run_dir} has no {run_files.TRAINED_GAMES} (trained before runs recorded their games) and "
           "the data it trained on changed or moved since, so it cannot tell another dataset's games from "
           "those it trained on")
    if check.status == "unknown":
        log.warning("%s records no dataset identity (trained before runs recorded one): cannot check that %s "
                    "holds the %s split it was trained with", run_dir, data_dir, split)
    elif check.changed and not allow_changed:
        raise RunError(f"{run_dir} was trained on {check.detail}{old}. Pass {run_files.ALLOW_CHANGED_DATA} "
                       "to score anyway (the output is labelled).")
    elif check.changed:
        log.warning("DATA CHANGED since training: %s%s (%s: the output is labelled)", check.detail, old,
                    run_files.ALLOW_CHANGED_DATA)
    return check
