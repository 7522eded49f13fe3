"""The start of a run: fresh, or resumed from the newest checkpoint that reads back on every worker;
the data check on resume; config.json and run.json.

Exact resume: a checkpoint stores the weights, the optimizer state (so the lr schedule and momentum
continue) and the data position (epoch, stage, group, positions consumed in the group, seeds). The
stream of a stage depends only on its shards and seed, so skipping the consumed prefix continues it
with no position skipped or repeated, with any number of towers at the same global batch.

The data a run trains on is recorded (run.json and every checkpoint: identity.py); `--resume` on other
data (another --data, or the same folder converted again) is refused unless `data_changed` is given,
which is then appended to run.json's "history" (the entry: run_files.py). The chief records the keys of
the games it trains on in RUN/trained-games.npz (game_keys.py: evaluate counts the scored games among them).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from shogi_dnn import __version__
from shogi_dnn import config as config_mod
from shogi_dnn.dataset import game_keys, identity
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.folders import run_files
from shogi_dnn.training import cluster
from shogi_dnn.training.assembly import RunParts
from shogi_dnn.training.checkpoints import list_checkpoints, read_dataset, read_state
from shogi_dnn.training.stages import TrainState
from shogi_dnn.wording import plural

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StartOptions:
    """How a run starts: the command's flags that are not in the config.

    resume: continue from the newest readable checkpoint (--resume); strict: refuse a corrupt newest one
    instead of falling back (--resume-strict); data_changed: accept other data (--data-changed);
    resume_command: the command line that continues the run; command: the one that started it;
    price_per_hour: the machines' price per hour, for the logged cost (--price-per-hour; 0: none).
    """

    resume: bool = False
    strict: bool = False
    data_changed: bool = False
    resume_command: str = ""
    command: str = ""
    price_per_hour: float = 0.0


def start_run(parts: RunParts, options: StartOptions) -> TrainState:
    """Restore the latest checkpoint (--resume) or start fresh; write config.json and run.json."""
    strategy, run_dir = parts.steps.strategy, parts.run_dir
    existing = cluster.agreed_checkpoints(strategy, list_checkpoints(run_dir))   # same on every worker
    if existing and not options.resume:
        raise RunError(run_files.existing_run_message(run_dir, existing[-1]))
    history_entry = None
    if existing:
        state, history_entry = _restore_newest_valid(parts, options, existing)
    else:
        if options.resume:
            log.warning("--resume: no checkpoint in %s yet, starting from the beginning", run_dir)
        state = parts.plan.initial_state()
    parts.metrics.truncate_after(state.step)
    run_files.write_json_atomic(run_dir / run_files.CONFIG_JSON, parts.config.to_dict(), sort_keys=True)
    run_files.write_json_atomic(run_dir / run_files.RUN_JSON, run_info(parts, options, history_entry),
                                sort_keys=True)
    if parts.is_chief:
        record_trained_games(parts)
    steps = parts.steps
    log.info("%s %s, global batch %d x %s = %d per update, lr %.4g, %s, %s",
             plural(len(parts.devices), "tower"), ",".join(parts.devices), steps.global_batch,
             plural(steps.micro_batches, "micro-batch", "micro-batches"), steps.update_batch,
             config_mod.scaled_lr(parts.config.optim, steps.update_batch),
             plural(parts.plan.num_groups, "sample group"), plural(parts.plan.epochs, "epoch"))
    log.info("%s", parts.eval_target.describe())
    fit = parts.eval_target.fit
    if fit is not None and not parts.eval_target.set_scale and fit.warning():
        log.warning("%s", fit.warning())
    return state


def record_trained_games(parts: RunParts) -> None:
    """RUN/trained-games.npz: the keys of the training split's games, added to those already recorded
    (game_keys.py), so that evaluate can tell the games a run trained on in any dataset."""
    start = time.perf_counter()
    trained = game_keys.write_trained_games(parts.run_dir, parts.manifest)
    log.info("%s: %s trained on (%.2f s)", run_files.TRAINED_GAMES, plural(trained.games, "game"),
             time.perf_counter() - start)


def _restore_newest_valid(parts: RunParts, options: StartOptions,
                          existing: list[Path]) -> tuple[TrainState, dict[str, Any] | None]:
    """Restore the newest checkpoint that reads back on every worker: a corrupt newest one (damaged
    state.json or weights) is reported and the previous one used, unless --resume-strict refuses.
    Returns the state and run.json's new "history" entry (--data-changed) or None."""
    candidates = list(existing)
    while candidates:
        path = candidates.pop()
        try:
            (state, entry), ok, error = _restore(parts, options, path), True, None
        except RunError as exc:            # unreadable; a config mismatch (ConfigError) is not retried
            state, entry, ok, error = None, None, False, exc
        if cluster.agree_on(parts.steps.strategy, ok, cluster.checkpoint_step(path)):
            assert state is not None               # agreed: this worker restored it too
            return state, entry
        reason = error or RunError(f"{path}: another worker could not restore it")
        if options.strict or not candidates:
            raise RunError(f"{reason}" + (" (--resume-strict: no fallback to an older checkpoint)"
                                          if candidates else " (no older checkpoint to fall back to)"))
        log.warning("%s: resuming from the previous checkpoint, %s", reason, candidates[-1].name)
    raise RunError(f"{parts.run_dir}: no checkpoint to resume from")


def _restore(parts: RunParts, options: StartOptions, path: Path) -> tuple[TrainState, dict[str, Any] | None]:
    saved_state, saved_config = read_state(path)
    mismatch = config_mod.architecture_mismatch(saved_config, parts.config)
    if mismatch:
        raise ConfigError(f"{path}: the model differs from the checkpoint's: {'; '.join(mismatch)}")
    entry = _check_data(parts, options, path)
    parts.plan.check_resume(saved_state)
    _warn_changed_stream(parts, previous_run_info(parts.run_dir))
    state = parts.checkpoints.restore(path)
    log.info("resumed from %s: step=%d samples=%d epoch=%d stage=%d group=%d position=%d", path.name,
             state.step, state.samples, state.epoch, state.stage, state.group, state.position)
    return state, entry


def _warn_changed_stream(parts: RunParts, info: dict[str, Any]) -> None:
    """Warn when the update batch or the read lanes differ from the last start's: the data stream
    continues at the same position, but no longer as an uninterrupted run would have it."""
    if not info:
        return
    before, update_batch, lanes = info.get("update_batch"), parts.steps.update_batch, parts.plan.lanes
    if before not in (None, update_batch):
        log.warning("the update batch changes from %s to %d: the data stream continues at the same "
                    "position, but the run is no longer identical to an uninterrupted one",
                    before, update_batch)
    previous_lanes = info.get("read_lanes", 1)        # runs before read lanes read one stream: one lane
    if previous_lanes != lanes:
        log.warning("the read lanes change from %s to %d (data.read_lanes; 0 = one per worker): the "
                    "stage continues at the same position of another sample order, so the run is no "
                    "longer identical to an uninterrupted one; set data.read_lanes=%s to keep it",
                    previous_lanes, lanes, previous_lanes)


def _check_data(parts: RunParts, options: StartOptions, path: Path) -> dict[str, Any] | None:
    """Refuse to resume a checkpoint on data other than its own (another --data, or the folder converted
    again), unless --data-changed: then the change is returned as run.json's next "history" entry.

    Raises:
        ConfigError: one line naming both datasets (not RunError: no fallback to an older checkpoint).
    """
    previous = previous_run_info(parts.run_dir)
    recorded = read_dataset(path)
    recorded = recorded if recorded is not None else previous.get(run_files.KEY_DATASET)
    try:
        check = identity.compare(recorded, parts.dataset)
    except ValueError as exc:
        raise ConfigError(f"{path / run_files.CHECKPOINT_STATE}: dataset: {exc}") from exc
    old_dir = previous.get("data_dir")
    if check.status == "unknown":
        if not old_dir or Path(old_dir).resolve() == parts.data_dir:
            log.warning("%s records no dataset identity (saved before runs recorded one): cannot check "
                        "that %s still holds the data it was trained on", path, parts.data_dir)
            return None
        check = identity.DataCheck("changed", f"dataset {old_dir} (its identity not recorded); --data "
                                              f"{parts.data_dir} is another folder", None, parts.dataset)
    if check.status == "same":
        return None
    if not options.data_changed:
        raise ConfigError(identity.refusal(str(path), check, "--data-changed",
                                           "continue it on this data (recorded in run.json's history)"))
    log.warning("--data-changed: continuing %s on other data: %s", path.name, check.detail)
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "event": "data changed", "checkpoint": path.name,
            "command": options.command or options.resume_command,
            "from": recorded if recorded is not None else {"data_dir": old_dir},
            "to": parts.dataset.to_dict()}


def previous_run_info(run_dir: Path) -> dict[str, Any]:
    """RUN/run.json as the last start wrote it ({} when there is none)."""
    path = run_dir / run_files.RUN_JSON
    return run_files.read_json(path) if path.is_file() else {}


def run_info(parts: RunParts, options: StartOptions, history_entry: dict[str, Any] | None) -> dict[str, Any]:
    """RUN/run.json of this start: the data, its history (kept across resumes), towers, batches, versions."""
    history = previous_run_info(parts.run_dir).get(run_files.KEY_HISTORY, [])
    history = [*(history if isinstance(history, list) else []), *filter(None, [history_entry])]
    steps = parts.steps
    return {"data_dir": str(parts.data_dir), run_files.KEY_DATASET: parts.dataset.to_dict(),
            run_files.KEY_HISTORY: history, "devices": parts.devices, "num_replicas": len(parts.devices),
            "num_workers": cluster.num_workers(steps.strategy),
            "global_batch": steps.global_batch, "micro_batches": steps.micro_batches,
            "update_batch": steps.update_batch, "num_groups": parts.plan.num_groups,
            run_files.KEY_PLANNED_STEPS: parts.plan.total_updates(),
            "read_lanes": parts.plan.lanes,
            "peak_lr": config_mod.scaled_lr(parts.config.optim, steps.update_batch),
            "resume_command": options.resume_command, "shogi_dnn": __version__,
            "tensorflow": tf.__version__, "keras": keras.__version__,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "eval_target": parts.eval_target.to_dict(),
            "precision": parts.precision.to_dict()}
