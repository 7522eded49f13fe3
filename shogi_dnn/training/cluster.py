"""Multi-machine training on tf.distribute's MultiWorkerMirroredStrategy (no home-made engine).

A cluster is W worker processes (one per machine), each driving all of its local GPUs; every update is
one collective all-reduce over all W x GPUs towers. It is described either by the command line,

    shogi-dnn train ... --workers 10.0.0.1:2222,10.0.0.2:2222 --worker-index 0     (on 10.0.0.1)
    shogi-dnn train ... --workers 10.0.0.1:2222,10.0.0.2:2222 --worker-index 1     (on 10.0.0.2)

or by a TF_CONFIG already in the environment (jobs "chief" and/or "worker"). Worker 0 (or the "chief"
task) is the chief: it alone writes into the run directory (metrics, TensorBoard, checkpoints, the final
model). Every worker must take part in each checkpoint save (TensorFlow's rule), so the others write
their copies into RUN/workerI (worker_dir): each worker can then resume from its own disk.

Before the model is built the workers compare what they will train (check_agreement, one collective): the
shogi-dnn code, the dataset's identity and every resolved config key; the first difference is one line on
every worker (`the workers disagree on config optim.lr: ...`), before any step.

`--simulate-devices N` with a cluster gives each worker process N logical CPU devices, so a two-machine,
two-GPU-each run can be rehearsed as two processes on one laptop. TensorFlow's strategy uses a single
CPU device per worker, so the simulation swaps in a strategy subclass whose local devices are the N
logical CPUs (a TensorFlow-internal hook; GPU machines use the public strategy unchanged).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import re
import signal
import socket
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.training import bind_shim
from shogi_dnn.training.interrupts import StopFlag

log = logging.getLogger(__name__)

TF_CONFIG = "TF_CONFIG"
JOBS = ("chief", "worker")            # jobs a training cluster may have; the chief trains too
_ADDRESS = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
# Errors that mean a peer worker is gone (crashed, killed, reclaimed spot machine, network cut).
PEER_LOST_ERRORS = ("UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError")
DEFAULT_TIMEOUT_S = 600.0           # --cluster-timeout: how long a worker waits for the others to start


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The tasks of a multi-worker run and this process's place among them.

    Attributes:
        jobs: (job name, host:port addresses) in TF_CONFIG order, e.g. (("worker", ("a:2222", "b:2222")),).
        task_type: this process's job ("worker" or "chief").
        task_index: this process's index within its job.
    """

    jobs: tuple[tuple[str, tuple[str, ...]], ...]
    task_type: str
    task_index: int

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every training task, chief first: position i is worker i in logs and per_gpu."""
        order = sorted(self.jobs, key=lambda job: JOBS.index(job[0]))
        return tuple(address for _, addresses in order for address in addresses)

    @property
    def num_workers(self) -> int:
        return len(self.addresses)

    @property
    def worker_id(self) -> int:
        """This process's position in `addresses`."""
        offset = 0
        for job, addresses in sorted(self.jobs, key=lambda job: JOBS.index(job[0])):
            if job == self.task_type:
                return offset + self.task_index
            offset += len(addresses)
        raise ConfigError(f"{TF_CONFIG}: task type {self.task_type!r} is not in the cluster")

    @property
    def is_chief(self) -> bool:
        """The chief writes checkpoints, metrics and TensorBoard: the chief task, else worker 0."""
        return self.worker_id == 0

    def worker_name(self, worker_id: int) -> str:
        """e.g. 'worker1@10.0.0.2:2222'."""
        return f"worker{worker_id}@{self.addresses[worker_id]}"

    def tf_config(self) -> dict:
        """The TF_CONFIG dict TensorFlow reads."""
        return {"cluster": {job: list(addresses) for job, addresses in self.jobs},
                "task": {"type": self.task_type, "index": self.task_index}}


def _check_address(address: str, origin: str) -> str:
    match = _ADDRESS.match(address.strip())
    if not match or not 0 < int(match["port"]) < 65536:
        raise ConfigError(f"{origin}: {address!r} is not host:port (e.g. 10.0.0.1:2222)")
    return address.strip()


def parse_workers(workers: str, worker_index: int) -> Cluster:
    """The cluster of `--workers host:port,... --worker-index i`.

    Raises:
        ConfigError: an address that is not host:port, a repeated address, or an index out of range.
    """
    addresses = tuple(_check_address(a, "--workers") for a in workers.split(",") if a.strip())
    if not addresses:
        raise ConfigError("--workers: expected host:port,host:port (one per machine, the chief first)")
    if len(set(addresses)) != len(addresses):
        raise ConfigError(f"--workers: an address is listed twice in {workers!r}")
    if not 0 <= worker_index < len(addresses):
        raise ConfigError(f"--worker-index {worker_index}: must be 0..{len(addresses) - 1} for "
                          f"{len(addresses)} workers")
    return Cluster(jobs=(("worker", addresses),), task_type="worker", task_index=worker_index)


def parse_tf_config(text: str) -> Cluster:
    """The cluster of a TF_CONFIG JSON string (jobs "chief" and "worker" only).

    Raises:
        ConfigError: invalid JSON, a missing "cluster"/"task", an unsupported job, a bad address or index.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{TF_CONFIG}: invalid JSON: {exc}") from exc
    if not isinstance(raw, Mapping) or not isinstance(raw.get("cluster"), Mapping) \
            or not isinstance(raw.get("task"), Mapping):
        raise ConfigError(f"{TF_CONFIG}: expected {{\"cluster\": {{\"worker\": [...]}}, \"task\": "
                          f"{{\"type\": \"worker\", \"index\": i}}}}")
    jobs = []
    for job, addresses in raw["cluster"].items():
        if job not in JOBS:
            raise ConfigError(f"{TF_CONFIG}: job {job!r} is not supported "
                              f"(training uses {' and '.join(JOBS)})")
        if not isinstance(addresses, list) or not addresses:
            raise ConfigError(f"{TF_CONFIG}: cluster.{job} must be a non-empty list of host:port")
        jobs.append((job, tuple(_check_address(str(a), f"{TF_CONFIG} cluster.{job}") for a in addresses)))
    task_type, task_index = raw["task"].get("type"), raw["task"].get("index", 0)
    sizes = {job: len(addresses) for job, addresses in jobs}
    if task_type not in sizes or not isinstance(task_index, int) or not 0 <= task_index < sizes[task_type]:
        raise ConfigError(f"{TF_CONFIG}: task {raw['task']} is not a task of the cluster {sizes}")
    return Cluster(jobs=tuple(jobs), task_type=task_type, task_index=task_index)


def resolve_cluster(workers: str | None, worker_index: int | None,
                    environ: Mapping[str, str] = os.environ) -> Cluster | None:
    """The cluster from the flags, else from TF_CONFIG; None for a single-machine run.

    Raises:
        ConfigError: --workers without --worker-index or the reverse, or an invalid description.
    """
    if workers is not None:
        if worker_index is None:
            raise ConfigError("--workers needs --worker-index (this machine's position in the list, "
                              "0 = chief)")
        return parse_workers(workers, worker_index)
    if worker_index is not None:
        raise ConfigError("--worker-index needs --workers host:port,host:port")
    text = environ.get(TF_CONFIG, "").strip()
    return parse_tf_config(text) if text else None


def worker_dir(run_dir: Path, cluster: Cluster | None) -> Path:
    """Where this worker writes: the run directory for the chief (or a single machine), RUN/workerI for
    the others. Every worker must take part in each checkpoint save (TensorFlow's rule); the others'
    checkpoint copies go to their own directory (metrics, TensorBoard and the final model are the
    chief's), so each worker can also resume from its own disk when RUN is not shared between machines."""
    if cluster is None or cluster.is_chief:
        return Path(run_dir)
    return Path(run_dir) / f"worker{cluster.worker_id}"


_PEER_DETAIL = re.compile(r"aborted by|connect|unavailable|heartbeat|socket closed|deadline|peer",
                          re.IGNORECASE)


def peer_lost_message(exc: BaseException, cluster: Cluster) -> str:
    """One line for a collective that failed because another worker is gone, with TensorFlow's cause
    (e.g. 'recvmsg:Connection reset by peer') picked out of its multi-line message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if _PEER_DETAIL.search(line) and not line.startswith("Detected at node")]
    detail = (causes or lines or [type(exc).__name__])[-1]
    detail = detail.split("aborted by:", 1)[-1].strip()
    return (f"{cluster.worker_name(cluster.worker_id)}: lost contact with another worker "
            f"({type(exc).__name__}: {detail[:160]}); restart every worker with --resume to continue "
            f"from the last checkpoint")


def is_peer_lost(exc: BaseException) -> bool:
    """True for the TensorFlow errors a dead or unreachable worker causes in the others."""
    return type(exc).__name__ in PEER_LOST_ERRORS


# --- start-up: each worker waits for the others in Python (interruptible), then enters TensorFlow ---
#
# TensorFlow binds its gRPC server to every interface ("0.0.0.0:" + port in GrpcServer::Init,
# tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc; the host of the task's address is not used;
# `shogi-dnn train` preloads bind_shim's library to keep it on that host where it can), and its own wait
# for the other workers (the strategy's construction: context.ensure_initialized(), the coordination
# service's registration) holds the GIL in C++: no Python signal handler runs, nothing is
# printed, and its SIGTERM handler swallows SIGTERM. So every worker first listens on its own address with
# a plain socket and waits until each other worker's address accepts a connection (its socket, or its
# TensorFlow server once it has moved on), and only then builds the strategy.

PROBE_TIMEOUT_S = 1.0         # one connection attempt to another worker
POLL_S = 0.2                  # between rounds of attempts (and checks of the stop flag)
FIRST_REPORT_S = 2.0          # the first "waiting for" line: not printed when the workers start together
REPORT_EVERY_S = 10.0


class WaitStopped(RunError):
    """SIGINT/SIGTERM while this worker waited for the others: nothing was trained or written.

    Attributes:
        signum: the signal's number (the command exits with 128 + signum, as a shell reports it).
    """

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


def split_address(address: str) -> tuple[str, int]:
    """('10.0.0.1', 2222) of '10.0.0.1:2222'; ('::1', 2222) of '[::1]:2222'."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def exposure_warning(cluster: Cluster) -> str | None:
    """The start-up line saying what TensorFlow's server exposes: its port on every interface. None when
    bind_shim's library keeps it on this worker's host (the re-executed `shogi-dnn train` on Linux)."""
    host, port = split_address(cluster.addresses[cluster.worker_id])
    if bind_shim.active_address(port) is not None:
        return None
    line = (f"{cluster.worker_name(cluster.worker_id)}: TensorFlow's gRPC server listens on port {port} of "
            f"every interface (0.0.0.0 and ::), not only {host}, and has no authentication; keep port "
            f"{port} reachable from the other workers only (docs/multi-machine.md)")
    if all(_is_loopback(split_address(a)[0]) for a in cluster.addresses):
        line += "; to rehearse with nothing exposed, run the workers inside `unshare -rn`"
    return line


def _is_loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or host.startswith("127.")


def wait_for_workers(cluster: Cluster, timeout_s: float = DEFAULT_TIMEOUT_S,
                     stop: StopFlag | None = None) -> float:
    """Until every other worker has started (its address accepts a TCP connection), listening meanwhile
    on this worker's own address (that host only) so that the others see this one. Says what it waits
    for: 'worker0@a:2222: waiting for worker 1 at b:2222 (12 s; ...)', after 2 s, then every 10 s.

    Args:
        timeout_s: give up after this many seconds (--cluster-timeout).
        stop: a StopFlag (shogi_dnn.training.interrupts) whose signal handlers are installed; checked
            every 0.2 s (None: not stoppable but by the timeout).
    Returns:
        the seconds it waited.
    Raises:
        WaitStopped: SIGINT/SIGTERM arrived (one line naming the workers still missing).
        RunError: the others did not all start within timeout_s, or this worker's port is taken.
    """
    me = cluster.worker_name(cluster.worker_id)
    pending = {w: a for w, a in enumerate(cluster.addresses) if w != cluster.worker_id}
    listener = _listen(cluster.addresses[cluster.worker_id], me)
    start = time.monotonic()
    next_report = start + FIRST_REPORT_S
    action = stop.action if stop is not None else ""
    if stop is not None:
        stop.action = ""            # a signal now ends the wait (WaitStopped's line), no checkpoint
    try:
        while True:
            for worker, address in list(pending.items()):
                _drain(listener)
                if _stop_signal(stop):
                    break
                if _reachable(address):
                    del pending[worker]
            elapsed = time.monotonic() - start
            waiting = ", ".join(f"worker {w} at {a}" for w, a in pending.items()) or "the other workers"
            signum = _stop_signal(stop)
            if signum:
                raise WaitStopped(f"{me}: {signal.Signals(signum).name} while waiting for {waiting} "
                                  f"({elapsed:.0f} s): stopped before training, nothing written", signum)
            if not pending:
                return elapsed
            if elapsed > timeout_s:
                raise RunError(f"{me}: {waiting} did not start within {timeout_s:g} s (--cluster-timeout): "
                               f"start every worker with the same --workers (each with its own "
                               f"--worker-index) and check that their ports are open between the machines")
            if time.monotonic() >= next_report:
                log.info("%s: waiting for %s (%.0f s; gives up after %g s, --cluster-timeout)", me, waiting,
                         elapsed, timeout_s)
                next_report += REPORT_EVERY_S
            time.sleep(POLL_S)
    finally:
        listener.close()
        if stop is not None:
            stop.action = action


def _stop_signal(stop: StopFlag | None) -> int:
    """The number of the stop signal `stop` (a StopFlag) received, 0 when none."""
    if stop is None or not stop.requested:
        return 0
    return int(signal.Signals.__members__.get(stop.signal_name, signal.SIGTERM))


def _listen(address: str, me: str) -> socket.socket:
    """A non-blocking listening socket on this worker's address (its host only). The wildcard when the
    host is not an address of this machine (a cloud machine's public address, reached through NAT):
    TensorFlow listens there anyway.

    Raises:
        RunError: the port is taken (another worker or program is on it).
    """
    host, port = split_address(address)
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError:
        family, sockaddr = socket.AF_INET, ("0.0.0.0", port)
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # a previous run's TIME_WAIT
    try:
        try:
            listener.bind(sockaddr)
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
            listener.close()
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("0.0.0.0", port))
        listener.listen(64)
    except OSError as exc:
        listener.close()
        raise RunError(f"{me}: cannot listen on {address} ({exc.strerror}): is another worker or program "
                       f"on port {port}? (`ss -ltnp | grep :{port}`)") from exc
    listener.setblocking(False)
    return listener


def _drain(listener: socket.socket) -> None:
    """Accept and close the other workers' probes (a full backlog would make them time out)."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.close()


def _reachable(address: str) -> bool:
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


# Ends the process when TensorFlow's wait outlasts the timeout: it holds the GIL, so no Python thread, timer
# or signal handler of this process could. Reads stdin (a pipe from this process) until EOF: the wait
# ended (or this process died); none within the time given: print the line, SIGKILL this process. A
# Ctrl-C reaches the whole process group: the watchdog ignores it (this process ends, so does the pipe).
_WATCHDOG = ("import os, select, signal, sys\n"
             "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
             "if not select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:\n"
             "    sys.stderr.write(sys.argv[3] + '\\n'); sys.stderr.flush()\n"
             "    os.kill(int(sys.argv[1]), signal.SIGKILL)\n")


def _form_cluster(build: Callable[[], object], seconds: float, message: str) -> object:
    """build() (TensorFlow forming the cluster) with SIGINT and SIGTERM at their default action (a Python
    handler would not run inside its C++ wait), ended by a watchdog process after `seconds` with `message`
    (a worker that answered and then died leaves TensorFlow waiting for it). TensorFlow installs a
    SIGTERM handler of its own in build() that swallows the signal for the whole run; where the bind
    shim is loaded it keeps SIGTERM's default action meanwhile (bind_shim.keep_sigterm), so a SIGTERM
    then ends the worker at once, as SIGINT does. The previous handlers are put back afterwards."""
    import subprocess
    import sys
    import threading

    watchdog = None
    if os.name == "posix":
        watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()),
                                     f"{max(seconds, 1.0):.1f}", message], stdin=subprocess.PIPE)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGINT, signal.SIGTERM)}
    kept = bool(previous) and bind_shim.keep_sigterm(True)
    try:
        return build()
    finally:
        if kept:
            bind_shim.keep_sigterm(False)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if watchdog is not None:
            assert watchdog.stdin is not None       # opened with stdin=PIPE
            watchdog.stdin.close()
            watchdog.wait()


# --- strategy (TensorFlow from here on) ---

def make_multi_worker_strategy(cluster: Cluster, simulate_devices: int | None = None,
                               timeout_s: float = DEFAULT_TIMEOUT_S, stop: StopFlag | None = None):
    """MultiWorkerMirroredStrategy over the cluster: every local GPU of every worker.

    Sets TF_CONFIG for TensorFlow; must run before TensorFlow initialises (before any op or model).
    With `simulate_devices` and no GPU, each worker gets that many logical CPU devices. Waits first for
    every other worker to start (wait_for_workers: interruptible by `stop`, gives up after timeout_s).

    Raises:
        RunError: TensorFlow was already initialised, so the CPU cannot be split any more; or the wait
            failed (WaitStopped on SIGINT/SIGTERM).
    """
    warning = exposure_warning(cluster)
    if warning is not None:
        log.warning("%s", warning)
    os.environ[TF_CONFIG] = json.dumps(cluster.tf_config())
    import tensorflow as tf

    simulated = bool(simulate_devices) and not tf.config.list_physical_devices("GPU")
    if simulated and simulate_devices:
        configure_cpu_split(simulate_devices)          # TensorFlow not initialised: see _form_cluster
    waited = wait_for_workers(cluster, timeout_s, stop)
    me = cluster.worker_name(cluster.worker_id)
    message = (f"shogi-dnn train: error: {me}: TensorFlow did not form the cluster within {timeout_s:g} s "
               f"(--cluster-timeout): a worker answered, then stopped or became unreachable; start every "
               f"worker again")
    build = (lambda: _simulated_strategy_class()(simulate_devices)) if simulated \
        else tf.distribute.MultiWorkerMirroredStrategy
    return _form_cluster(build, timeout_s - waited, message)


def configure_cpu_split(count: int) -> None:
    """Split the CPU into `count` logical devices without initialising TensorFlow (a multi-worker strategy
    must still configure its collective ops), unless a split made earlier (the test harness's) has enough.

    Raises:
        RunError: count < 1, or TensorFlow is already initialised with fewer logical CPUs.
    """
    import tensorflow as tf

    if count < 1:
        raise RunError(f"--simulate-devices {count}: must be >= 1")
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu) or []
    if len(current) >= count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:   # TF already initialised: split_cpu checks whether what is there is enough
        pass


def split_cpu(count: int) -> list[str]:
    """The names of the first `count` logical CPU devices, the CPU split into `count` first (this
    initialises TensorFlow).

    Raises:
        RunError: count < 1, or TensorFlow is already initialised with fewer logical CPUs.
    """
    import tensorflow as tf

    configure_cpu_split(count)
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < count:
        raise RunError(f"--simulate-devices {count}: TensorFlow is already initialised with "
                       f"{len(logical)} logical CPU device(s); split the CPU before anything else")
    return [d.name for d in logical[:count]]


def _simulated_strategy_class():
    """A MultiWorkerMirroredStrategy whose local devices are N logical CPUs (rehearsal only)."""
    import tensorflow as tf
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars
    from tensorflow.python.distribute import collective_util

    class _LocalCpusExtended(cars.CollectiveAllReduceExtended):
        def __init__(self, container, local_cpus: int) -> None:
            self._local_cpus = local_cpus
            super().__init__(container, cluster_resolver=None,
                             communication_options=collective_util.Options())

        def _initialize_local_devices(self, cluster_resolver, worker_device):
            devices, kind = super()._initialize_local_devices(cluster_resolver, worker_device)
            if kind != "CPU":
                return devices, kind
            return tuple(f"{worker_device}/device:CPU:{i}" for i in range(self._local_cpus)), "CPU"

    class SimulatedMultiWorkerStrategy(tf.distribute.MultiWorkerMirroredStrategy):
        def __init__(self, local_cpus: int) -> None:      # pylint: disable=super-init-not-called
            tf.distribute.Strategy.__init__(self, _LocalCpusExtended(self, local_cpus))

    return SimulatedMultiWorkerStrategy


def cluster_of(strategy) -> Cluster | None:
    """The cluster a MultiWorkerMirroredStrategy spans (None for a single-worker strategy)."""
    if not is_multi_worker(strategy):
        return None
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    jobs = tuple((job, tuple(spec[job])) for job in JOBS if job in spec)
    return Cluster(jobs=jobs, task_type=resolver.task_type, task_index=int(resolver.task_id))


def is_chief(strategy) -> bool:
    """Whether this process writes the run's metrics, TensorBoard and final model: a single machine,
    or worker 0 (the chief) of a cluster."""
    cluster = cluster_of(strategy)
    return cluster is None or cluster.is_chief


def device_names(strategy) -> list[str]:
    """One name per tower of the whole cluster, in global replica order.

    A single worker: "GPU:0", "GPU:1", ... (as devices.make_strategy(devices=...) reads them). Several
    workers: 'worker1@b:2222/GPU:0'; workers have the same device count (MultiWorkerMirroredStrategy's
    assumption), so the other workers' devices are named after this worker's.
    """
    local = [str(d).rsplit("device:", 1)[-1] for d in strategy.extended.worker_devices]
    cluster = cluster_of(strategy)
    if cluster is None:
        return local
    return [f"{cluster.worker_name(w)}/{d}" for w in range(cluster.num_workers) for d in local]


def num_workers(strategy) -> int:
    """Worker processes the strategy spans (1 for MirroredStrategy)."""
    return int(getattr(strategy.extended, "_num_workers", 1))


def replica_values(strategy, per_replica) -> list[float]:
    """One float per tower of the whole cluster (a collective: every worker must call it together).

    Args:
        per_replica: a per-replica scalar (e.g. a tower's loss sum).
    Returns:
        [num_replicas_in_sync] values in global replica order (worker 0's towers first).
    """
    if not is_multi_worker(strategy):
        return [float(v) for v in strategy.experimental_local_results(per_replica)]
    if strategy not in _GATHERS:
        _GATHERS[strategy] = _make_gather(strategy)
    return [float(v) for v in _GATHERS[strategy](per_replica).numpy()]


_GATHERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # one compiled gather per strategy


def _make_gather(strategy):
    """A tf.function: per-replica scalar -> [num_replicas_in_sync] float32 of the whole cluster (eager
    cross-worker collectives are slow: each call would set them up again)."""
    import tensorflow as tf

    @tf.function
    def gather(per_replica):
        vectors = strategy.run(lambda x: tf.reshape(tf.cast(x, tf.float32), [1]), args=(per_replica,))
        return strategy.gather(vectors, axis=0)

    return gather


def any_worker(strategy, flag: bool) -> bool:
    """True when `flag` is set on any worker (a collective on several workers: every worker calls it at
    the same point). Lets a stop request (SIGTERM on one reclaimed machine) stop every worker at the
    same step, so that they all save that checkpoint. One worker: `flag` itself, no collective."""
    if not is_multi_worker(strategy):
        return flag
    import tensorflow as tf

    if strategy not in _ANY_FLAGS:
        _ANY_FLAGS[strategy] = _make_any_flag(strategy)
    return bool(_ANY_FLAGS[strategy](tf.constant(flag)).numpy())


_ANY_FLAGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # one compiled reduction per strategy


def _make_any_flag(strategy):
    import tensorflow as tf

    @tf.function
    def any_flag(flag):
        per_replica = strategy.run(lambda f: tf.reshape(tf.cast(f, tf.int32), [1]), args=(flag,))
        return tf.reduce_max(strategy.gather(per_replica, axis=0)) > 0

    return any_flag


def is_multi_worker(strategy) -> bool:
    """True when the strategy spans more than one worker process."""
    return num_workers(strategy) > 1


def leave_together(strategy) -> None:
    """Every worker waits here for the others (a collective) at the end of a run, so that no worker's
    process exits while another still heartbeats to the coordination service (its C++ client aborts the
    process, SIGABRT, when the leader is gone first)."""
    if is_multi_worker(strategy):
        _gather_int(strategy, 0)


def agreed_checkpoints(strategy, existing: Sequence[Path]) -> list[Path]:
    """On resume, make every worker restore the same step: `existing` cut after the newest checkpoint
    that every worker has (a worker killed during a save may lack the chief's newest one).

    Args:
        existing: this worker's checkpoint directories, oldest first, named ckpt-<step>.
    Returns:
        `existing` unchanged on a single worker; else the prefix ending at the agreed checkpoint
        ([] when no worker has one: a fresh start).
    Raises:
        RunError: some workers have checkpoints and others none, or a worker lacks the agreed one
            (raised on every worker alike, so none is left waiting in a collective).
    """
    if not is_multi_worker(strategy):
        return list(existing)
    steps = [_step_of(path) for path in existing]
    latest = _gather_int(strategy, steps[-1] if steps else -1)
    target = min(latest)
    if target < 0:
        if max(latest) >= 0:
            raise RunError(f"worker(s) {[w for w, s in enumerate(latest) if s < 0]} have no checkpoint while "
                           f"others have (latest steps {latest}): give every worker a copy of the chief's "
                           f"RUN/checkpoints (RUN/workerI/checkpoints on the others), or a shared run dir")
        return []
    has = _gather_int(strategy, int(target in steps))
    if min(has) == 0:
        raise RunError(f"the newest checkpoint every worker has is step {target}, but worker(s) "
                       f"{[w for w, h in enumerate(has) if not h]} no longer keep it: copy it from the "
                       f"chief")
    return list(existing[:steps.index(target) + 1])


def agree_on(strategy, ok: bool, step: int) -> bool:
    """Whether every worker succeeded (`ok`) at the same checkpoint `step` (a collective on several
    workers; `ok` itself on one). Raises RunError when the workers tried different steps."""
    if not is_multi_worker(strategy):
        return ok
    steps = _gather_int(strategy, step)
    if len(set(steps)) != 1:
        raise RunError(f"the workers tried different checkpoints (steps {steps}): give every worker a copy "
                       f"of the chief's RUN/checkpoints")
    return min(_gather_int(strategy, int(ok))) == 1


def agreement_items(config: Mapping[str, object], dataset: Mapping[str, object]) -> list[tuple[str, str]]:
    """What every worker of a run must share, as (name, value) in the order they are compared: the code
    (shogi-dnn's version and a digest of its sources), the dataset (its manifest digest and per-split
    games digests: not its folder, which may differ between machines) and each resolved config key."""
    import hashlib

    from shogi_dnn import __version__

    package = Path(__file__).resolve().parents[1]
    sources = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        sources.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    data = {key: dataset.get(key) for key in ("manifest", "splits")}
    items = [("the shogi-dnn code", f"{__version__} (sources {sources.hexdigest()[:12]})"),
             ("the dataset", f"manifest {str(data['manifest'])[:12]}, splits "
                             f"{hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]}")]
    for section, fields in sorted(config.items()):
        for key, value in sorted(fields.items()) if isinstance(fields, Mapping) else [("", fields)]:
            items.append((f"config {section}.{key}" if key else f"config {section}",
                          json.dumps(value, sort_keys=True)))
    return items


def check_agreement(strategy, items: Sequence[tuple[str, str]]) -> None:
    """Refuse, on every worker alike, a multi-worker run whose workers differ in any of `items`
    (agreement_items): a collective before the model is built, so no worker trains with another config,
    dataset or code. Nothing on a single worker.

    Raises:
        RunError: `the workers disagree on NAME: worker I has VALUE, worker J another; ...` (the first).
    """
    if not is_multi_worker(strategy):
        return
    names = json.dumps([name for name, _ in items])
    head = [_digest(items[0][1]), _digest(items[1][1]), _digest(names), len(items)]
    rows = _gather_ints(strategy, head)
    spec = cluster_of(strategy)
    me = 0 if spec is None else spec.worker_id
    for column, name in enumerate(("the shogi-dnn code", "the dataset", "the config's keys")):
        _refuse_difference(rows, column, me, name, items[column][1] if column < 2 else f"{len(items)} keys")
    rows = _gather_ints(strategy, [_digest(value) for _, value in items[2:]])
    for column, (name, value) in enumerate(items[2:]):
        _refuse_difference(rows, column, me, name, value)


def _refuse_difference(rows: list[list[int]], column: int, me: int, name: str, value: str) -> None:
    """RunError when the workers' `column` differ: names this worker's value and the first other."""
    if len({row[column] for row in rows}) == 1:
        return
    other = next(w for w, row in enumerate(rows) if row[column] != rows[me][column])
    raise RunError(f"the workers disagree on {name}: worker {me} has {value}, worker {other} another; "
                   "start every worker with the same --config, --set, --data and shogi-dnn version")


def _digest(text: str) -> int:
    """A 63-bit digest of `text` (an int64 a collective carries)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def checkpoint_step(path: Path) -> int:
    """The step of a checkpoint directory ckpt-<step>."""
    return _step_of(path)


def _step_of(path: Path) -> int:
    digits = re.search(r"(\d+)$", Path(path).name)
    if not digits:
        raise RunError(f"{path}: not a checkpoint directory name (ckpt-<step>)")
    return int(digits.group(1))


def _gather_ints(strategy, values: Sequence[int]) -> list[list[int]]:
    """`values` (the same length on every worker) of every worker, in worker order (one collective)."""
    import tensorflow as tf

    count = len(values)

    @tf.function
    def gather():
        per_replica = strategy.run(lambda: tf.constant(list(values), tf.int64))
        return tf.reshape(strategy.gather(per_replica, axis=0), [-1, count])

    towers_per_worker = strategy.num_replicas_in_sync // num_workers(strategy)
    return [[int(v) for v in row] for row in gather().numpy()[::towers_per_worker]]


def _gather_int(strategy, value: int) -> list[int]:
    """`value` of every worker, in worker order (a collective)."""
    import tensorflow as tf

    @tf.function
    def gather():
        per_replica = strategy.run(lambda: tf.constant([value], tf.int64))
        return strategy.gather(per_replica, axis=0)

    towers_per_worker = strategy.num_replicas_in_sync // num_workers(strategy)
    return [int(v) for v in gather().numpy()[::towers_per_worker]]

