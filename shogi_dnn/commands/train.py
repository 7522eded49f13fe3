"""`shogi-dnn train --config train/X.toml --data DIR --run-dir RUN [--set k=v ...] [--simulate-devices N]
[--devices LIST] [--resume [--data-changed]] [--workers H:P,H:P --worker-index I [--cluster-timeout S]]
[--scaling-fit FILE]`: staged multi-GPU training (see shogi_dnn.training.trainer and assembly; several
machines: shogi_dnn.training.cluster).

The run directory has one writer: this process holds RUN/writer.lock (run_files.lock_run_dir) from before
TensorFlow starts to its exit, so a second `train` there is refused at once; a cluster's chief holds RUN's,
each other worker that of the folder it writes, RUN/workerI (cluster.worker_dir). It also holds the
dataset's readers' lock (DATA/readers.lock, locks.read_dataset) shared: a `convert` of DATA is refused
while it trains, and it is refused while one writes DATA."""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import sys
from pathlib import Path

from shogi_dnn import config as config_mod
from shogi_dnn.config import Config, load_config
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.folders import locks, run_files
from shogi_dnn.training import bind_shim, cluster, memory, stages, throughput

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shogi-dnn train",
        description="Train the value network on a dataset written by `shogi-dnn convert`, on every local GPU "
                    "(or --devices / --simulate-devices). Ctrl-C or SIGTERM saves a checkpoint and exits 0; "
                    "--resume continues exactly where the run stopped.")
    parser.add_argument("--config", required=True, metavar="TOML",
                        help="preset: a name (cpu-small, home-1gpu, ...: train/NAME.toml) or a .toml file")
    parser.add_argument("--data", required=True, metavar="DIR", help="dataset folder (with manifest.json)")
    parser.add_argument("--run-dir", required=True, metavar="RUN",
                        help="where checkpoints, metrics and the model go")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value (repeatable), e.g. --set train.seed=3")
    parser.add_argument("--simulate-devices", type=int, default=None, metavar="N",
                        help="split the CPU into N logical devices and train on them as N towers")
    parser.add_argument("--devices", default=None, metavar="LIST",
                        help="comma-separated devices to use, e.g. /gpu:0,/gpu:1 (default: every GPU)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run's newest readable checkpoint (a corrupt newest one is "
                             "reported and the previous one used)")
    parser.add_argument("--data-changed", action="store_true",
                        help="with --resume: continue even though the data differs from the checkpoint's "
                             "(another --data, or the folder converted again); recorded in RUN/run.json's "
                             "history")
    parser.add_argument("--resume-strict", action="store_true",
                        help="with --resume: stop with the error when the newest checkpoint is corrupt")
    parser.add_argument("--price-per-hour", type=float, default=0.0, metavar="PRICE",
                        help="what the machine costs an hour (any currency): the console line and "
                             "metrics.jsonl then carry the cost so far and at the end, beside the ETA")
    parser.add_argument("--verify-shards", action="store_true",
                        help="check every shard's sha256 against the manifest at start-up (always checked: "
                             "size, schema, split, row and game counts, shapes)")
    parser.add_argument("--workers", default=None, metavar="HOST:PORT,...",
                        help="multi-machine run: every worker's address, the chief first (same list on each "
                             "machine); a TF_CONFIG in the environment is used when this is absent")
    parser.add_argument("--worker-index", type=int, default=None, metavar="I",
                        help="this machine's position in --workers (0 = chief)")
    parser.add_argument("--cluster-timeout", type=float, default=cluster.DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="multi-machine run: how long a worker waits for the others to start before it "
                             "gives up (default %(default)g; Ctrl-C or SIGTERM stops the wait at once)")
    parser.add_argument("--scaling-fit", default=None, metavar="FILE|v0=..,t=..",
                        help="throughput fit (from `shogi-dnn bench scaling`, or declared inline): say at "
                             "start-up how close the per-GPU batch keeps the devices to their ideal rate")
    return parser


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run (printed when it stops on a signal)."""
    parts = ["shogi-dnn", "train", "--config", args.config, "--data", args.data, "--run-dir", args.run_dir]
    for item in args.set:
        parts += ["--set", item]
    if args.simulate_devices is not None:
        parts += ["--simulate-devices", str(args.simulate_devices)]
    if args.devices:
        parts += ["--devices", args.devices]
    if args.workers:
        parts += ["--workers", args.workers, "--worker-index", str(args.worker_index)]
    if args.cluster_timeout != cluster.DEFAULT_TIMEOUT_S:
        parts += ["--cluster-timeout", f"{args.cluster_timeout:g}"]
    if args.price_per_hour:
        parts += ["--price-per-hour", f"{args.price_per_hour:g}"]
    return shlex.join(parts + ["--resume"])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = load_config(Path(args.config), args.set)      # config errors before TensorFlow starts
    memory.check_model_size(config.model)                  # a model over the parameter limit, likewise
    memory.check_address_space("train")                     # a `ulimit -v` TensorFlow aborts under, likewise
    run_files.check_writable(args.run_dir, "--run-dir")    # a read-only folder, likewise
    if not (args.price_per_hour >= 0 and math.isfinite(args.price_per_hour)):
        raise ConfigError(f"--price-per-hour {args.price_per_hour}: must be a number >= 0")
    cluster_spec = cluster.resolve_cluster(args.workers, args.worker_index)
    if not (args.cluster_timeout > 0 and math.isfinite(args.cluster_timeout)):
        raise ConfigError(f"--cluster-timeout {args.cluster_timeout}: must be a number of seconds > 0")
    fits = throughput.load_fits(args.scaling_fit) if args.scaling_fit else None
    if args.data_changed and not args.resume:
        raise ConfigError("--data-changed goes with --resume (a new run records the data it starts on)")
    if cluster_spec is not None and _is_process_command(argv):
        # Before any lock or TensorFlow: keep TensorFlow's server on this worker's host (bind_shim.py).
        bind_shim.reexec_with_shim(*cluster.split_address(cluster_spec.addresses[cluster_spec.worker_id]))
    run_dir = cluster.worker_dir(Path(args.run_dir), cluster_spec)
    if args.resume and cluster_spec is None:
        refuse_nothing_to_resume(run_dir)               # a mistyped --run-dir: no new run from zero
    run_files.refuse_foreign_folder(run_dir)            # run files among others (/etc): none written
    created = [d for d in (run_dir, *run_dir.parents) if not d.exists()]   # the folders this run makes
    try:
        code = _locked_train(args, argv, config, cluster_spec, fits, run_dir)
    except BaseException:
        for folder in created:                          # a refused run leaves no empty folder behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    if cluster_spec is not None and _is_process_command(argv):
        # Every worker has left the run together (cluster.leave_together); TensorFlow's teardown is skipped:
        # its coordination client aborts the process (SIGABRT) once the leader has exited first.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    return code


def _locked_train(args: argparse.Namespace, argv: list[str] | None, config: Config,
                  cluster_spec: cluster.Cluster | None, fits: dict[int, throughput.ThroughputFit] | None,
                  run_dir: Path) -> int:
    """main's work under the run directory's writer lock and as one of the dataset's readers."""
    with run_files.lock_run_dir(run_dir, "train"):      # one writer; refused before TensorFlow starts
        if not args.resume and cluster_spec is None:    # a finished run: likewise (a cluster's workers
            run_files.refuse_existing_run(run_dir)      # must agree: resume.start_run checks that)
        manifest = shards.read_manifest(args.data)      # batch and group problems: one line, no folder
        stages.check_before_start(config, sum(s.positions for s in manifest.split("train")),
                                  stages.towers_without_tensorflow(args.simulate_devices, args.devices,
                                                                   None if cluster_spec is None else
                                                                   len(cluster_spec.addresses)))
        command = shlex.join(["shogi-dnn", "train", *(sys.argv[1:] if argv is None else argv)])
        try:
            # One of the dataset's readers until the end: `convert --overwrite` of it is refused, naming us.
            with locks.read_dataset(args.data, "train"):
                return _train(args, config, cluster_spec, fits, run_dir, command)
        except cluster.WaitStopped as exc:      # a stop, not an error: one line, the shell's signal code
            print(f"shogi-dnn train: {exc}", file=sys.stderr)
            return 128 + exc.signum


def refuse_nothing_to_resume(run_dir: Path) -> None:
    """--resume into a folder that is not a run (missing, or without run files) is refused, nothing written.

    Raises:
        RunError: one line naming the folder.
    """
    markers = (run_files.RUN_JSON, run_files.CHECKPOINTS_DIR, run_files.WRITER_LOCK)  # a run started there
    if not run_dir.is_dir():
        why = "no such run directory"
    elif not any((run_dir / name).exists() for name in markers):
        why = f"not a run (none of {', '.join(markers)})"
    else:
        return
    raise RunError(f"--resume: {run_dir}: {why}: nothing to resume; check the path, or leave out --resume to "
                   "start a new run")


def _is_process_command(argv: list[str] | None) -> bool:
    """Whether `argv` is this process's own command line (`shogi-dnn train ARGS`, `--verbose` aside),
    not a call from Python (a test, a notebook): only then may train re-execute itself."""
    return argv is not None and sys.argv[1:2] == ["train"] \
        and [a for a in sys.argv[2:] if a != "--verbose"] == list(argv)


def _train(args: argparse.Namespace, config: Config, cluster_spec: cluster.Cluster | None,
           fits: dict[int, throughput.ThroughputFit] | None, run_dir: Path, command: str) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")         # before TensorFlow loads: no C++ INFO lines
    from shogi_dnn.training.assembly import assemble_run  # TensorFlow is imported only from here on
    from shogi_dnn.training.devices import fix_cpu_threads, make_strategy
    from shogi_dnn.training.interrupts import StopFlag
    from shogi_dnn.training.resume import StartOptions
    from shogi_dnn.training.trainer import Trainer

    for name in ("tensorflow", "absl"):                    # nor TF's Python INFO lines (after TF set them up)
        logging.getLogger(name).setLevel(logging.WARNING)

    devices = [d for d in args.devices.split(",") if d.strip()] if args.devices else None
    stop = StopFlag()
    # Signals are caught from here on: one while a worker waits for the others ends the wait at once
    # (cluster.WaitStopped); one while the model is built or a checkpoint restored stops the run after
    # its first update, with a checkpoint and the resume command, like any other.
    fix_cpu_threads(config.train.cpu_threads)              # before the strategy starts TensorFlow
    with stop.catch_signals():
        strategy = make_strategy(simulate_devices=args.simulate_devices, devices=devices,
                                 cluster=cluster_spec, cluster_timeout=args.cluster_timeout, stop=stop)
        if fits:
            log_batch_advice(config, strategy.num_replicas_in_sync, fits)
        try:
            parts = assemble_run(config, Path(args.data), run_dir, strategy, verify_shards=args.verify_shards)
            options = StartOptions(args.resume, args.resume_strict, args.data_changed, resume_command(args),
                                   command, args.price_per_hour)
            Trainer(parts, options, stop).run()
            cluster.leave_together(strategy)
        except Exception as exc:      # only a lost peer is translated; everything else propagates unchanged
            if cluster_spec is not None and cluster.is_peer_lost(exc):
                raise RunError(cluster.peer_lost_message(exc, cluster_spec)) from exc
            raise
    return 0


def log_batch_advice(config: Config, num_replicas: int, fits: dict[int, throughput.ThroughputFit]) -> None:
    """Start-up line: how close the per-GPU batch gets to the fitted v0, and the lr for the global batch."""
    from shogi_dnn.training.optimizer import scaled_lr

    global_batch = config_mod.global_batch(config, num_replicas)
    advice = throughput.batch_advice(global_batch // num_replicas, throughput.select_fit(fits, num_replicas))
    update_batch = global_batch * config.train.micro_batches
    lr = scaled_lr(config.optim, update_batch)
    (log.info if advice.saturated else log.warning)(
        "%s; lr %.4g for %d positions per update (optim.lr_scaling = %s from lr %.4g at %d)", advice.text, lr,
        update_batch, config.optim.lr_scaling, config.optim.lr, config.optim.base_global_batch)
