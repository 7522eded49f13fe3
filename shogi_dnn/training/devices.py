"""Devices and the tf.distribute strategy: which towers a run trains on, and whether a model fits them.

One code path for 1..N devices: training always runs under a tf.distribute strategy and the same
step (steps.py: strategy.run, a replica-context all-reduce, experimental_local_results) is compiled
everywhere: a `MirroredStrategy` over two or more devices, a `OneDeviceStrategy` on one (tf.distribute's
strategy for a single device: it pins the listed device, its all-reduce is the identity, and it skips
the mirrored-variable machinery a one-replica MirroredStrategy would carry), a
`MultiWorkerMirroredStrategy` across machines (cluster.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import tensorflow as tf

from shogi_dnn.config import Config
from shogi_dnn.errors import RunError
from shogi_dnn.training import memory
from shogi_dnn.training.cluster import DEFAULT_TIMEOUT_S, Cluster, replica_values, split_cpu
from shogi_dnn.training.cluster import make_multi_worker_strategy as multi_worker_strategy
from shogi_dnn.training.interrupts import StopFlag

log = logging.getLogger(__name__)


def make_strategy(simulate_devices: int | None = None, devices: Sequence[str] | None = None,
                  cluster: Cluster | None = None, cluster_timeout: float = DEFAULT_TIMEOUT_S,
                  stop: StopFlag | None = None) -> tf.distribute.Strategy:
    """A MirroredStrategy over the chosen devices; a OneDeviceStrategy when there is one (same step).

    Args:
        simulate_devices: split the CPU into this many logical devices and use them as towers (to
            rehearse a multi-GPU run). If TF is already initialised with >= N logical CPUs, the first
            N are used.
        devices: explicit device names ("/gpu:0", "GPU:1", ...); default: every visible GPU, else the CPU.
        cluster: several machines (shogi_dnn.training.cluster): a MultiWorkerMirroredStrategy over
            every GPU of every worker (with simulate_devices: that many logical CPUs per worker).
            Create it before anything else touches TensorFlow. It first waits for every other worker
            to start: up to cluster_timeout seconds, stopped by a SIGINT/SIGTERM that `stop` catches.
    Raises:
        RunError: both options given, fewer logical CPUs than requested, or an unknown device.
    """
    if simulate_devices is not None and devices:
        raise RunError("--simulate-devices and --devices are exclusive")
    if cluster is not None:
        if devices:
            raise RunError("--devices with --workers: each worker uses all its GPUs (limit them with "
                           "CUDA_VISIBLE_DEVICES)")
        return multi_worker_strategy(cluster, simulate_devices, cluster_timeout, stop)
    if simulate_devices is not None:
        names = split_cpu(simulate_devices)
    elif devices:
        names = _check_devices(devices)
    else:
        gpus = tf.config.list_logical_devices("GPU")
        names = [d.name for d in gpus] or [tf.config.list_logical_devices("CPU")[0].name]
    if len(names) == 1:
        return tf.distribute.OneDeviceStrategy(names[0])
    # Logical CPUs: reduce on one device. The default (collective ops) keys its groups per process, so a
    # second strategy over a different CPU set in the same process (tests, bench) would collide.
    cpu_only = all("CPU" in name.upper() for name in names)
    cross_ops = tf.distribute.ReductionToOneDevice() if cpu_only else None
    return tf.distribute.MirroredStrategy(devices=names, cross_device_ops=cross_ops)


def fix_cpu_threads(threads: int) -> None:
    """Run each TensorFlow op on the CPU on `threads` threads (train.cpu_threads; 0: TensorFlow's default).

    Call before TensorFlow initialises (before any strategy, device list or op); later, a warning says
    that the process keeps the threads it started with.
    """
    if threads <= 0 or tf.config.threading.get_intra_op_parallelism_threads() == threads:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:      # the runtime already started in this process (a test, a notebook)
        log.warning("train.cpu_threads = %d: TensorFlow already runs in this process with its own thread "
                    "count, so CPU numbers may differ in the last digits from a fresh process", threads)


def benchmark_devices(max_devices: int) -> list[str]:
    """The devices a benchmark measures on: the first max_devices GPUs, else max_devices logical CPUs
    (split now: call before TensorFlow initialises, i.e. before any model or strategy is built).

    Raises:
        RunError: fewer GPUs than max_devices, or the CPU cannot be split any more.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < max_devices:
            raise RunError(f"--devices asks for {max_devices} devices but {len(gpus)} GPU(s) are visible")
        return [f"/gpu:{i}" for i in range(max_devices)]
    split_cpu(max_devices)
    return [f"/cpu:{i}" for i in range(max_devices)]


def _check_devices(devices: Sequence[str]) -> list[str]:
    known = {d.name.lower(): d.name for d in tf.config.list_logical_devices()}
    names = []
    for device in devices:
        key = device.strip().lower()
        key = key if key.startswith("/") else "/device:" + key
        key = key.replace("/gpu:", "/device:gpu:").replace("/cpu:", "/device:cpu:")
        match = [name for k, name in known.items() if k.endswith(key.removeprefix("/"))]
        if not match:
            raise RunError(f"--devices: unknown device {device!r} (have: {', '.join(known.values())})")
        names.append(match[0])
    return names


def device_memory(strategy: tf.distribute.Strategy) -> tuple[int, str, int]:
    """(bytes, words, towers sharing them) of the memory one tower of this machine trains in: the
    smallest memory limit TensorFlow reports for its GPUs (device_lib; the towers have one each), else
    the host's RAM (memory.host_memory), which every local CPU tower shares. (0, ...) when unknown."""
    names = [name.upper() for name in strategy.extended.worker_devices]
    gpus = [name for name in names if "GPU" in name]
    if gpus:
        try:
            from tensorflow.python.client import device_lib

            limits = {d.name.upper().rsplit("DEVICE:", 1)[-1]: int(d.memory_limit)
                      for d in device_lib.list_local_devices() if d.device_type == "GPU"}
        except Exception as exc:                     # noqa: BLE001 - the check is advice: never fail on it
            log.debug("GPU memory unknown: %s", exc)
            return 0, "GPU memory (unknown)", 1
        known = [limits[key] for key in (name.rsplit("DEVICE:", 1)[-1] for name in gpus) if key in limits]
        if not known:
            return 0, "GPU memory (unknown)", 1
        return min(known), f"{gpus[0].rsplit('DEVICE:', 1)[-1]} (TensorFlow's memory limit)", 1
    available, words = memory.host_memory()
    return available, words, len(names)


def check_model_fits(config: Config, strategy: tf.distribute.Strategy, per_device_batch: int) -> None:
    """ConfigError (one line) when config.model cannot train on this machine's towers (memory.check_fits);
    call before the model is built. Only the parameter limit is checked when the memory is unknown."""
    available, where, sharing = device_memory(strategy)
    if available <= 0:
        memory.check_model_size(config.model)
        return
    estimate = memory.check_fits(config, per_device_batch, available, where, sharing)
    log.debug("memory: %s per tower, %s has %s", estimate.breakdown(), where, memory.gib(available))


def local_values(strategy: tf.distribute.Strategy, per_replica: tf.Tensor) -> list[float]:
    """One Python float per tower (experimental_local_results), in device order; with several workers,
    every tower of the cluster (a collective all-gather that every worker makes at the same point)."""
    return replica_values(strategy, per_replica)
