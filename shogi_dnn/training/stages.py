"""Staged training bookkeeping: sample groups, the stage order of each epoch, and the run's progress.

The training split is cut by rows into G sample groups of equal size, whatever the number of shards
(schedule.split_groups). A *stage* is one pass
over one group; an *epoch* visits every group once, in an order shuffled per epoch by the run seed
(schedule.group_order). Progress (TrainState) is counted in optimizer steps and in samples, and the
data position is (epoch, stage index in the epoch's order, samples consumed in the group): with the
stage's stream seed that is everything needed to resume the data stream exactly, because the
stream of a stage is a function of (group shards and rows, stream seed) and the read lanes only
(pipeline.make_train_dataset; lanes: data.read_lanes, or one per worker; saved in run.json).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from shogi_dnn.config import Config
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.training import schedule


@dataclasses.dataclass(frozen=True)
class TrainState:
    """Where a run is. Saved in every checkpoint (state.json).

    Attributes:
        step: optimizer updates done.
        samples: training positions consumed (samples seen) over the whole run.
        epoch: current epoch (0-based); == train.epochs when the run is complete.
        stage: index of the current stage in the epoch's group order (0-based).
        group: sample group of the current stage.
        position: positions of the current group's stream already consumed (resume skips them).
        seed: the run seed (train.seed) the group orders and stream seeds derive from.
        stage_seed: stream seed of the current stage (schedule.stage_seed(seed, epoch, group)).
    """

    step: int = 0
    samples: int = 0
    epoch: int = 0
    stage: int = 0
    group: int = 0
    position: int = 0
    seed: int = 0
    stage_seed: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], origin: str) -> TrainState:
        """Read a state.json entry back; RunError naming the file on a missing or bad field."""
        try:
            return cls(**{f.name: int(raw[f.name]) for f in dataclasses.fields(cls)})
        except (KeyError, TypeError, ValueError) as exc:
            problem = f"no field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise RunError(f"{origin}: corrupt train state ({problem})") from exc

    def advance(self, updates: int, samples: int) -> TrainState:
        """After `updates` optimizer steps that consumed `samples` positions of the current group."""
        return dataclasses.replace(self, step=self.step + updates, samples=self.samples + samples,
                                   position=self.position + samples)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One pass over one sample group.

    Attributes:
        epoch, index: the epoch and the stage's index in that epoch's group order.
        group: the sample group; paths: its shard files; rows: its rows [start, stop) of them.
        seed: the stream seed; updates: optimizer steps of the whole stage (capped by
            train.max_steps_per_stage); update_batch: positions per update.
        shuffle_buffer, lanes: data.shuffle_buffer and the effective read lanes (the stream's shape).
    """

    epoch: int
    index: int
    group: int
    paths: tuple[Path, ...]
    seed: int
    updates: int
    update_batch: int
    shuffle_buffer: int = 0
    lanes: int = 1
    rows: tuple[int, int] | None = None

    def remaining(self, position: int) -> int:
        """Updates left after `position` positions of the stream were consumed."""
        available = schedule.count_batches(self.paths, self.update_batch, position, lanes=self.lanes,
                                           seed=self.seed, shuffle_buffer=self.shuffle_buffer, rows=self.rows)
        return max(0, min(self.updates - position // self.update_batch, available))


def check_group_size(positions: int, num_groups: int, update_batch: int) -> None:
    """Every sample group must hold at least one update: one line saying what to change otherwise."""
    problem = group_size_problem(positions, num_groups, update_batch)
    if problem:
        raise ConfigError(problem)


def group_size_problem(positions: int, num_groups: int, update_batch: int, towers: int = 1,
                       micro_batches: int = 1) -> str | None:
    """What to change so that every sample group holds at least one update (None: nothing). Each way out
    it names is complete: applied alone, the check passes (the global batch a multiple of `towers`)."""
    if num_groups < 1 or positions // num_groups >= update_batch:
        return None
    need = (f"data.num_groups = {num_groups} sample groups of at least one update ({update_batch:,} "
            f"positions = global batch x micro-batches) need {num_groups * update_batch:,} training "
            f"positions, the dataset has {positions:,}")
    fixes = []
    if positions // update_batch >= 1:
        fixes.append(f"set data.num_groups to at most {positions // update_batch}")
    for groups in sorted({num_groups, 1}, reverse=True):
        batch = positions // groups // micro_batches // towers * towers   # a multiple of the towers
        if batch < towers:
            continue
        change = f"set train.global_batch = {batch}"
        if micro_batches > 1:
            change += f" (x {micro_batches} micro-batches = {batch * micro_batches:,} positions an update)"
        if groups != num_groups:
            if fixes and fixes[0].startswith("set data.num_groups"):
                continue                  # data.num_groups alone already does it
            change = f"set data.num_groups = 1 and {change[len('set '):]}"
        fixes.append(change)
    fixes.append("convert more games")
    return f"{need}: {', or '.join(fixes)}"


def check_before_start(config: Config, positions: int, towers: int | None) -> None:
    """Every batch and sample-group problem of a run on `positions` training positions over `towers`
    towers (None: unknown, only what holds for any count is checked), in one ConfigError line naming
    every change, before TensorFlow loads."""
    problems = []
    train = config.train
    if towers is not None and train.global_batch and train.global_batch % towers:
        fixed = max(towers, train.global_batch // towers * towers)
        problems.append(f"train.global_batch = {train.global_batch} is not divisible by {towers} towers: "
                        f"set it to a multiple of {towers} (e.g. {fixed})")
    if train.global_batch:
        global_batch = train.global_batch if towers is None or not train.global_batch % towers else \
            max(towers, train.global_batch // towers * towers)
    else:
        global_batch = train.per_replica_batch * (towers or 1)
    problem = group_size_problem(positions, config.data.num_groups, global_batch * train.micro_batches,
                                 towers or 1, train.micro_batches)
    if problem:
        problems.append(problem)
    if problems:
        raise ConfigError("; and ".join(problems))


# Stages a run with more than one read lane may plan: their updates depend on each stage's seed (the
# buffers dealt to the lanes), so the plan counts every one of them (about 0.1-1 ms each); one lane's
# counts are the same in every epoch and the plan is O(groups) whatever the epochs.
MAX_LANED_STAGES = 20_000


class StagePlan:
    """The stages of a run: groups of the training split, per-epoch order, stream seeds.

    The planned updates (updates, updates_left, total_updates) are arithmetic over the groups, never a
    list per epoch: with one read lane a group's count is the same in every epoch (its rows over the
    update batch, capped by train.max_steps_per_stage); with several it depends on the stage's seed and
    is counted per stage from the chunk lists read once (at most MAX_LANED_STAGES stages).
    """

    def __init__(self, manifest: shards.Manifest, config: Config, update_batch: int,
                 num_workers: int = 1) -> None:
        # Effective read lanes: data.read_lanes, or one per worker (pipeline.make_train_dataset reads them).
        self.lanes = schedule.resolve_lanes(config.data.read_lanes, num_workers, update_batch)
        self.shuffle_buffer = config.data.shuffle_buffer
        train_shards = manifest.split("train")
        if not train_shards:
            raise ConfigError(f"{manifest.root}: the dataset has no training shards")
        check_group_size(sum(s.positions for s in train_shards), config.data.num_groups, update_batch)
        self.groups = schedule.split_groups(train_shards, config.data.num_groups)
        self.paths = [tuple(manifest.shard_path(s) for s in group.shards) for group in self.groups]
        self.rows = [group.rows for group in self.groups]
        self.epochs = config.train.epochs
        self.seed = config.train.seed
        self.max_steps = config.train.max_steps_per_stage
        self.update_batch = update_batch
        stages = self.epochs * self.num_groups
        if self.lanes > 1 and stages > MAX_LANED_STAGES:
            raise ConfigError(f"train.epochs = {self.epochs} x {self.num_groups} sample groups = {stages:,} "
                              f"stages, more than the {MAX_LANED_STAGES:,} a run with {self.lanes} read "
                              f"lanes may plan (each stage's updates are counted): lower train.epochs or "
                              f"data.num_groups")
        # Shard metadata read once: one lane's count per group, or each group's chunks (several lanes).
        self._chunks = [schedule.list_chunks(p, r) for p, r in zip(self.paths, self.rows)]
        self._one_lane = ([self._capped(sum(map(len, chunks)) // update_batch) for chunks in self._chunks]
                          if self.lanes == 1 else None)
        self._epoch_totals: list[int] | None = None     # several lanes: each epoch's updates, when asked

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    def group_of(self, epoch: int, index: int) -> int:
        return schedule.group_order(self.seed, epoch, self.num_groups)[index]

    def stage(self, epoch: int, index: int) -> Stage:
        """The stage at position `index` of epoch `epoch`'s group order."""
        group = self.group_of(epoch, index)
        paths, rows = self.paths[group], self.rows[group]
        seed = schedule.stage_seed(self.seed, epoch, group)
        return Stage(epoch, index, group, paths, seed, self.updates(epoch, index), self.update_batch,
                     self.shuffle_buffer, self.lanes, rows)

    def _capped(self, updates: int) -> int:
        return min(updates, self.max_steps) if self.max_steps > 0 else updates

    def updates(self, epoch: int, index: int) -> int:
        """Planned updates of the stage at position `index` of epoch `epoch` (no shard opened)."""
        group = self.group_of(epoch, index)
        if self._one_lane is not None:
            return self._one_lane[group]
        buffers = schedule.cut_buffers(self._chunks[group], schedule.stage_seed(self.seed, epoch, group),
                                       self.shuffle_buffer)
        lane_rows = schedule.lane_rows(buffers, self.lanes)
        return self._capped(schedule.full_batches(lane_rows, self.update_batch, 0))

    def epoch_updates(self, epoch: int) -> int:
        """Planned updates of a whole epoch."""
        if self._one_lane is not None:
            return sum(self._one_lane)
        if self._epoch_totals is None:
            self._epoch_totals = [sum(self.updates(e, i) for i in range(self.num_groups))
                                  for e in range(self.epochs)]
        return self._epoch_totals[epoch]

    def total_updates(self) -> int:
        """Planned updates of the whole run (the lr decay's horizon)."""
        if self._one_lane is not None:
            return self.epochs * sum(self._one_lane)
        return sum(self.epoch_updates(e) for e in range(self.epochs))

    def updates_left(self, state: TrainState) -> tuple[int, int, int]:
        """Updates left in the current stage, epoch and run at `state` (from the plan, no data read)."""
        if self.finished(state):
            return 0, 0, 0
        this_stage = max(0, self.updates(state.epoch, state.stage) - state.position // self.update_batch)
        later = range(state.stage + 1, self.num_groups)
        epoch = this_stage + sum(self.updates(state.epoch, i) for i in later)
        if self._one_lane is not None:
            return this_stage, epoch, epoch + (self.epochs - state.epoch - 1) * sum(self._one_lane)
        return this_stage, epoch, epoch + sum(map(self.epoch_updates, range(state.epoch + 1, self.epochs)))

    def initial_state(self) -> TrainState:
        """The state of a new run: epoch 0, first stage, nothing consumed."""
        return self._at(TrainState(seed=self.seed), 0, 0)

    def next_stage(self, state: TrainState) -> TrainState:
        """The state at the start of the stage after the current one (the next epoch after the last)."""
        index, epoch = state.stage + 1, state.epoch
        if index == self.num_groups:
            index, epoch = 0, epoch + 1
        return self._at(state, epoch, index)

    def finished(self, state: TrainState) -> bool:
        return state.epoch >= self.epochs

    def _at(self, state: TrainState, epoch: int, index: int) -> TrainState:
        group = self.group_of(epoch, index) if epoch < self.epochs else 0
        seed = schedule.stage_seed(self.seed, epoch, group) if epoch < self.epochs else 0
        return dataclasses.replace(state, epoch=epoch, stage=index, group=group, position=0, stage_seed=seed)

    def check_resume(self, state: TrainState) -> None:
        """The saved data position must fit this dataset and seed (else the stream would differ)."""
        if state.seed != self.seed:
            raise ConfigError(f"train.seed = {self.seed}, but the run was started with seed {state.seed} "
                              f"(the data order depends on it)")
        if state.epoch < self.epochs and state.group != self.group_of(state.epoch, state.stage):
            raise RunError(f"checkpoint is at group {state.group}, but this dataset's epoch {state.epoch} "
                           f"stage {state.stage} is group {self.group_of(state.epoch, state.stage)} "
                           f"(different --data or data.num_groups?)")


def towers_without_tensorflow(simulate_devices: int | None, devices: str | None,
                              workers: int | None) -> int | None:
    """The towers make_strategy will build when the command line says (--simulate-devices N, --devices
    LIST); None otherwise (every visible GPU, or several workers): then only what holds for any count is
    checked before TensorFlow, and the rest once the strategy exists."""
    if workers is not None:
        return None
    if simulate_devices is not None:
        return simulate_devices if simulate_devices > 0 else None
    if devices:
        return len([d for d in devices.split(",") if d.strip()]) or None
    return None
