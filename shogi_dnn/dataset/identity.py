"""A dataset's identity: which shards it holds and which games each split holds. TensorFlow-free.

A run records it (RUN/run.json and every checkpoint's state.json "dataset"); `evaluate`, `report` and
`train --resume` compare it with the data given now.

  key                          meaning
  data_dir                     the dataset folder, absolute (said in messages; not part of the identity)
  manifest                     sha256 of the manifest's shard list: every shard's path, split and sha256
  splits.<split>.games         games in the split (manifest counts)
  splits.<split>.positions     positions in the split
  splits.<split>.digest        sha256 over the split's games: each game's source, line, moves, winner and
                               start position (GAME_KEYS), sorted, so neither the shard boundaries, the
                               game ids nor the row order change it

Two identities are the same data when their manifest digests match (what train --resume needs); a
split is the same when its digest matches (what evaluate needs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from shogi_dnn.dataset import shards

GAME_KEYS = ("source", "line", "num_moves", "winner", "start_sfen")   # a game, as its split digest sees it
SHORT = 8                     # hex digits of a digest in messages


@dataclasses.dataclass(frozen=True)
class SplitIdentity:
    """One split: its game and position counts, and the digest of its games."""

    games: int
    positions: int
    digest: str


@dataclasses.dataclass(frozen=True)
class DatasetIdentity:
    """The identity of a dataset folder (the module docstring's table)."""

    data_dir: str
    manifest: str
    splits: dict[str, SplitIdentity]

    def to_dict(self) -> dict[str, Any]:
        return {"data_dir": self.data_dir, "manifest": self.manifest,
                "splits": {name: dataclasses.asdict(s) for name, s in self.splits.items()}}

    @classmethod
    def from_dict(cls, data: Any) -> DatasetIdentity:
        """An identity read back from to_dict()'s JSON. Raises ValueError when it is not one."""
        try:
            splits = {str(name): SplitIdentity(int(s["games"]), int(s["positions"]), str(s["digest"]))
                      for name, s in data["splits"].items()}
            return cls(str(data["data_dir"]), str(data["manifest"]), splits)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a dataset identity ({type(exc).__name__}: {exc})") from exc

    def describe(self, splits: Iterable[str] = shards.SPLITS) -> str:
        """e.g. 'manifest 1a2b3c4d, validation 118 games'."""
        counts = [f"{name} {self.splits[name].games:,} games" if name in self.splits else f"no {name} split"
                  for name in splits]
        return ", ".join([f"manifest {self.manifest[:SHORT]}", *counts])


def manifest_digest(manifest: shards.Manifest) -> str:
    """sha256 of the manifest's shard list (path, split, sha256 of each shard, sorted by path)."""
    rows = sorted((s.path, s.split, s.sha256) for s in manifest.shards)
    return hashlib.sha256(json.dumps(rows).encode("utf-8")).hexdigest()


def split_identity(manifest: shards.Manifest, split: str) -> SplitIdentity:
    """The games digest of one split, from its shards' games tables.

    Raises:
        ShardFormatError: a shard cannot be read.
    """
    infos = manifest.split(split)
    games: list[str] = []
    for info in infos:
        table = shards.read_games(manifest.shard_path(info))
        games += ["\t".join(str(value) for value in row) for row in zip(*(table[key] for key in GAME_KEYS))]
    digest = hashlib.sha256("\n".join(sorted(games)).encode("utf-8")).hexdigest()
    return SplitIdentity(sum(s.games for s in infos), sum(s.positions for s in infos), digest)


def dataset_identity(manifest: shards.Manifest, splits: Sequence[str] = shards.SPLITS) -> DatasetIdentity:
    """The identity of a dataset: its manifest digest and the digest of each of `splits` it has."""
    present = [name for name in splits if manifest.split(name)]
    return DatasetIdentity(str(manifest.root.resolve()), manifest_digest(manifest),
                           {name: split_identity(manifest, name) for name in present})


@dataclasses.dataclass(frozen=True)
class DataCheck:
    """How the data given now compares with the data a run was trained on.

    status: "same", "unknown" (no identity recorded), "changed", and from evaluate "foreign" or "overlap"
    (with `games`); detail: what changed ("" unless changed).
    """

    status: str
    detail: str = ""
    recorded: DatasetIdentity | None = None
    current: DatasetIdentity | None = None
    games: dict[str, Any] | None = None

    @property
    def changed(self) -> bool:
        return self.status == "changed"

    def to_dict(self) -> dict[str, Any]:
        """The label an output carries (eval-<split>.json "data_check")."""
        return {"status": self.status, "detail": self.detail,
                "trained_on": None if self.recorded is None else self.recorded.to_dict(),
                "scored_on": None if self.current is None else self.current.to_dict()}


def compare(recorded: Any, current: DatasetIdentity, splits: Sequence[str] | None = None) -> DataCheck:
    """Compare a recorded identity (its JSON dict, or None) with the data given now.

    splits: the splits that must hold the same games; None: the whole manifest must match.
    Raises:
        ValueError: `recorded` is not an identity's JSON.
    """
    if recorded is None:
        return DataCheck("unknown", current=current)
    before = DatasetIdentity.from_dict(recorded)
    if splits is None:
        same = before.manifest == current.manifest
        shown = tuple(name for name in shards.SPLITS if name in before.splits or name in current.splits)
    else:
        same = all(_split_digest(before, name) == _split_digest(current, name) for name in splits)
        shown = tuple(splits)
    if same:
        return DataCheck("same", recorded=before, current=current)
    return DataCheck("changed", _what_changed(before, current, shown), before, current)


def _split_digest(identity: DatasetIdentity, split: str) -> str | None:
    return identity.splits[split].digest if split in identity.splits else None


def _what_changed(before: DatasetIdentity, now: DatasetIdentity, splits: Sequence[str]) -> str:
    """'dataset A (manifest 1a2b3c4d, validation 118 games); A now has ...: its validation split changed'."""
    moved = before.data_dir != now.data_dir
    where = f"{now.data_dir} has" if moved else f"{now.data_dir} now has"
    changed = [name for name in splits if _split_digest(before, name) != _split_digest(now, name)]
    if moved:
        verdict = "another dataset" + (f", or its {_names(changed)} changed" if changed else "")
    elif changed:
        verdict = f"its {_names(changed)} changed (re-converted?)"
    else:
        verdict = "its shards changed, the same games in each split (re-converted with other shard settings?)"
    return (f"dataset {before.data_dir} ({before.describe(splits)}); {where} {now.describe(splits)}: "
            f"{verdict}")


def _names(splits: Sequence[str]) -> str:
    text = " and ".join(splits)
    return f"{text} split" + ("s" if len(splits) > 1 else "")


def refusal(who: str, check: DataCheck, flag: str, proceed: str) -> str:
    """The one-line refusal of a changed dataset (_what_changed and the --allow-changed-data hint)."""
    return f"{who} was trained on {check.detail}. Pass {flag} to {proceed}."
