"""Multi-machine training rehearsed on one machine: two worker processes on 127.0.0.1, each with 2
simulated devices (MultiWorkerMirroredStrategy). A worker is killed after the first checkpoint: the other
stops with one line; the cluster resumes and ends with identical weights on both workers, equal to an
uninterrupted 4-tower run on one machine. Bounded in time; every process is killed in `finally`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.training import bind_shim
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset
from tests.support.sockets import free_ports, listening_hosts

PRESET = REPO / "train" / "cpu-smoke.toml"
# Whole groups (no step cap), a checkpoint every 4 updates: 40 updates, long enough to kill a worker mid-run.
# The cluster sums gradients in another order than one machine (a ring across workers), a float32 rounding
# difference (1e-8); cpu-smoke's lr 0.05 with momentum amplifies it to 1e-2 within 40 steps, so the
# comparison with one machine uses a calmer optimizer (with it both agree to 3e-8 after 40 steps).
# float32: the runs are compared with one machine's to float32's rounding (bfloat16's would be 1e-2)
SETTINGS = ["train.max_steps_per_stage=0", "train.checkpoint_every_steps=4", "train.log_every_steps=8",
            "optim.lr=0.01", "optim.momentum=0.0", "model.mixed_precision=none"]
TIMEOUT_S = 240
SHIM = bind_shim.library_path() is not None and sys.platform.startswith("linux")


def start_workers(data: Path, run: Path, logs: Path, resume: bool,
                  ports: list[int]) -> list[subprocess.Popen]:
    """Two workers: the first run described by --workers/--worker-index (and given a --scaling-fit),
    the resumed one by a TF_CONFIG in the environment, as a cluster manager would set it."""
    addresses = [f"127.0.0.1:{port}" for port in ports]
    procs = []
    for index in range(2):
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"} | {"TF_CPP_MIN_LOG_LEVEL": "2"}
        argv = [sys.executable, "-m", "shogi_dnn", "train", "--config", str(PRESET), "--data", str(data),
                "--run-dir", str(run), "--simulate-devices", "2"]
        argv += [item for s in SETTINGS for item in ("--set", s)]
        if resume:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": addresses},
                                           "task": {"type": "worker", "index": index}})
            argv += ["--resume"]
        else:
            argv += ["--workers", ",".join(addresses), "--worker-index", str(index),
                     "--scaling-fit", "v0=8000,t=0.004,devices=4"]
        log = (logs / f"worker{index}-{'resume' if resume else 'first'}.log").open("w")
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                      start_new_session=True))
        log.close()
    return procs


def wait_all(procs: list[subprocess.Popen], deadline: float) -> list[int]:
    return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]


def kill_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)


def wait_for_checkpoints(dirs: list[Path], procs: list[subprocess.Popen], deadline: float) -> None:
    """Until every dir holds a checkpoint (both workers saved one), or a worker exits, or time runs out."""
    while not all(any(d.glob("ckpt-*")) for d in dirs if d.is_dir()) or not all(d.is_dir() for d in dirs):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            codes = [p.poll() for p in procs]
            raise AssertionError(f"no checkpoint in both workers' dirs (exit codes {codes})")
        time.sleep(0.1)


def weights(path: Path) -> list[np.ndarray]:
    from shogi_dnn.training.model import load_model
    return load_model(path).get_weights()


def one_machine_run(data: Path, run: Path) -> list[np.ndarray]:
    """The same training on one process with 4 towers (conftest's logical CPUs), uninterrupted."""
    from shogi_dnn.config import load_config
    from shogi_dnn.training.assembly import assemble_run
    from shogi_dnn.training.devices import make_strategy
    from shogi_dnn.training.trainer import Trainer

    # The cluster reads 2 lanes (data.read_lanes = 0: one per worker); one machine reads the same 2 lanes.
    config = load_config(PRESET, SETTINGS + ["data.read_lanes=2"])
    Trainer(assemble_run(config, data, run, make_strategy(simulate_devices=4))).run()
    return weights(run / "model.keras")


@pytest.mark.slow
def test_two_workers_survive_a_dead_worker_and_match_one_machine(tmp_path: Path) -> None:
    data, run, logs = tmp_path / "data", tmp_path / "run", tmp_path / "logs"
    make_dataset(data, train=[640, 640, 640, 640], validation=[128], chunk_rows=128)
    logs.mkdir()
    deadline = time.monotonic() + TIMEOUT_S
    ports = free_ports(2)
    procs = start_workers(data, run, logs, resume=False, ports=ports)
    try:
        wait_for_checkpoints([run / "checkpoints", run / "worker1" / "checkpoints"], procs, deadline)
        # TensorFlow binds "0.0.0.0:" + port; the bind shim (training/bind_shim.py) keeps it on 127.0.0.1.
        # Without the shim (not built), every interface, as the start-up line then says.
        bound = [listening_hosts(port) for port in ports]
        if SHIM:
            assert bound == [{"127.0.0.1"}, {"127.0.0.1"}], bound
        else:
            assert all(hosts and hosts <= {"::", "0.0.0.0"} for hosts in bound), bound
        procs[1].send_signal(signal.SIGKILL)                    # worker 1's machine dies
        codes = wait_all(procs, deadline)
    finally:
        kill_all(procs)
    chief_log = (logs / "worker0-first.log").read_text()
    assert codes[0] == 2, chief_log[-3000:]
    warning = f"worker0@127.0.0.1:{ports[0]}: TensorFlow's gRPC server listens on port {ports[0]} of every " \
              f"interface (0.0.0.0 and ::), not only 127.0.0.1"
    assert (warning in chief_log) != SHIM, chief_log[-3000:]
    assert "lost contact with another worker" in chief_log and "--resume" in chief_log
    assert "per-GPU batch 16 reaches 67% of the fitted v0 (8000 positions/s on 4 device(s)" in chief_log
    assert not (run / "model.keras").exists()

    procs = start_workers(data, run, logs, resume=True, ports=free_ports(2))
    try:
        codes = wait_all(procs, deadline)
    finally:
        kill_all(procs)
    resumed = [(logs / f"worker{i}-resume.log").read_text() for i in range(2)]
    assert codes == [0, 0], resumed[0][-3000:] + resumed[1][-3000:]
    assert all("resumed from ckpt-" in text for text in resumed)
    assert "model saved to" in resumed[0] and "model saved to" not in resumed[1]   # only the chief saves it
    assert "the chief saves the model" in resumed[1]

    from shogi_dnn.training.checkpoints import restore_model
    chief = weights(run / "model.keras")
    other = restore_model(run / "worker1").get_weights()     # worker 1's final (end-of-run) checkpoint
    assert all(np.array_equal(a, b) for a, b in zip(chief, other))          # bit-identical on both workers
    # The chief alone writes the run's metrics, TensorBoard and final model; worker 1 only its checkpoints.
    assert not any((run / "worker1" / name).exists() for name in ("metrics.jsonl", "tb", "model.keras"))
    single = one_machine_run(data, tmp_path / "single")
    assert max(float(np.abs(a - b).max()) for a, b in zip(chief, single)) < 1e-5

    info = json.loads((run / "run.json").read_text())
    assert info["num_workers"] == 2 and info["num_replicas"] == 4
    assert info["read_lanes"] == 2                              # auto: one lane per worker
    assert info["devices"][2].startswith("worker1@127.0.0.1:") and info["devices"][2].endswith("/CPU:0")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r["kind"] == "train"]
    assert steps == sorted(set(steps)), "a step logged twice or out of order after the resume"
    assert all(len(r["per_gpu"]) == 4 for r in records)
    assert [g["device"] for g in records[-1]["per_gpu"]] == info["devices"]


@pytest.mark.slow
def test_workers_with_different_configs_are_refused_before_training(tmp_path: Path) -> None:
    """`--set optim.lr=0.05` on one worker, 0.001 on the other: both refuse in one line naming the key,
    before the first step (both used to train to the end on different models)."""
    data, run = tmp_path / "data", tmp_path / "run"
    make_dataset(data, train=[640], validation=[128], chunk_rows=128)
    addresses = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"} | {"TF_CPP_MIN_LOG_LEVEL": "2"}
    procs = [subprocess.Popen([sys.executable, "-m", "shogi_dnn", "train", "--config", str(PRESET), "--data",
                               str(data), "--run-dir", str(run), "--simulate-devices", "2", "--set", f"optim.lr={lr}",
                               "--workers", addresses, "--worker-index", str(index)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
                              start_new_session=True)
             for index, lr in enumerate(("0.05", "0.001"))]
    try:
        codes = wait_all(procs, time.monotonic() + TIMEOUT_S)
    finally:
        kill_all(procs)
    outputs = [p.stdout.read() for p in procs if p.stdout is not None]
    assert codes == [2, 2], outputs
    for index, (output, lr) in enumerate(zip(outputs, ("0.05", "0.001"))):
        errors = [line for line in output.splitlines() if line.startswith("shogi-dnn train: error:")]
        assert errors == [f"shogi-dnn train: error: the workers disagree on config optim.lr: worker {index} has "
                          f"{lr}, worker {1 - index} another; start every worker with the same --config, --set, "
                          "--data and shogi-dnn version"], output[-3000:]
        assert "Traceback" not in output
    assert not list(run.rglob("ckpt-*")) and not (run / "metrics.jsonl").exists()


@pytest.mark.slow
def test_sigterm_on_one_worker_stops_every_worker_at_the_same_step(tmp_path: Path) -> None:
    """A reclaimed spot machine gets SIGTERM: every worker stops after the same update and saves it."""
    data, run, logs = tmp_path / "data", tmp_path / "run", tmp_path / "logs"
    make_dataset(data, train=[640, 640, 640, 640], validation=[128], chunk_rows=128)
    logs.mkdir()
    deadline = time.monotonic() + TIMEOUT_S
    procs = start_workers(data, run, logs, resume=False, ports=free_ports(2))
    try:
        wait_for_checkpoints([run / "checkpoints", run / "worker1" / "checkpoints"], procs, deadline)
        procs[1].send_signal(signal.SIGTERM)
        codes = wait_all(procs, deadline)
    finally:
        kill_all(procs)
    texts = [(logs / f"worker{i}-first.log").read_text() for i in range(2)]
    assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
    assert "stopped (SIGTERM)" in texts[1] and "stopped (stop requested by another worker)" in texts[0]
    dirs = (run / "checkpoints", run / "worker1" / "checkpoints")
    newest = [max(p.name for p in d.glob("ckpt-*")) for d in dirs]
    assert newest[0] == newest[1], newest
    assert not (run / "model.keras").exists()


def start_alone(data: Path, run: Path, log: Path, ports: list[int], *extra: str) -> subprocess.Popen:
    """Worker 0 of a two-worker cluster whose worker 1 is never started."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"} | {"TF_CPP_MIN_LOG_LEVEL": "2"}
    argv = [sys.executable, "-m", "shogi_dnn", "train", "--config", str(PRESET), "--data", str(data),
            "--run-dir", str(run), "--simulate-devices", "2", "--worker-index", "0",
            "--workers", ",".join(f"127.0.0.1:{port}" for port in ports), *extra]
    with log.open("w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                start_new_session=True)


@pytest.mark.slow
def test_a_waiting_worker_stops_on_a_signal_and_gives_up_after_the_timeout(tmp_path: Path) -> None:
    """Worker 1 never starts. Worker 0 says what it waits for, listens on 127.0.0.1 only, ends on SIGTERM
    or SIGINT within seconds (TensorFlow's exit: ~3 s measured on 2 busy cores) with one line, and gives
    up after --cluster-timeout, also inside TensorFlow's wait when worker 1's port answers but no TensorFlow
    does. (TensorFlow's own wait ignored both signals: 14 minutes, until kill -9.)"""
    data = tmp_path / "data"
    make_dataset(data, train=[128, 128], validation=[64], chunk_rows=64)
    clusters = {name: free_ports(2) for name in ("SIGTERM", "SIGINT", "timeout", "mute peer")}
    logs = {name: tmp_path / f"{name}.log" for name in clusters}
    limits = {"timeout": ["--cluster-timeout", "4"], "mute peer": ["--cluster-timeout", "10"]}
    # "mute peer": worker 1's port accepts connections but no TensorFlow answers there (a worker that
    # answered, then hung or died): worker 0 moves on into TensorFlow's wait, which the watchdog ends.
    mute = socket.create_server(("127.0.0.1", clusters["mute peer"][1]))
    procs = {name: start_alone(data, tmp_path / f"run-{name}", logs[name], ports, *limits.get(name, []))
             for name, ports in clusters.items()}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        exits = {}
        for name in ("SIGTERM", "SIGINT"):
            while "waiting for worker 1" not in logs[name].read_text():
                assert procs[name].poll() is None and time.monotonic() < deadline, logs[name].read_text()
                time.sleep(0.1)
            assert listening_hosts(clusters[name][0]) == {"127.0.0.1"}       # loopback stays loopback
            sent = time.monotonic()
            procs[name].send_signal(signal.Signals[name])
            procs[name].wait(timeout=30)
            exits[name] = time.monotonic() - sent
        for name in ("timeout", "mute peer"):
            procs[name].wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        kill_all(list(procs.values()))
        mute.close()
    for name, code in (("SIGTERM", 143), ("SIGINT", 130)):
        text = logs[name].read_text()
        ports = clusters[name]
        assert procs[name].returncode == code and exits[name] < 10, (exits, text[-2000:])
        assert text.splitlines()[-1].startswith(
            f"shogi-dnn train: worker0@127.0.0.1:{ports[0]}: {name} while waiting for worker 1 at "
            f"127.0.0.1:{ports[1]} (") and text.splitlines()[-1].endswith("s): stopped before training, "
                                                                          "nothing written"), text[-2000:]
        assert f"waiting for worker 1 at 127.0.0.1:{ports[1]} (2 s; gives up after 600 s" in text
        assert "Traceback" not in text and "saving a checkpoint" not in text
    text, ports = logs["timeout"].read_text(), clusters["timeout"]
    assert procs["timeout"].returncode == 2 and "Traceback" not in text, text[-2000:]
    assert text.splitlines()[-1].startswith(f"shogi-dnn train: error: worker0@127.0.0.1:{ports[0]}: worker 1 "
                                            f"at 127.0.0.1:{ports[1]} did not start within 4 s "
                                            f"(--cluster-timeout)"), text[-2000:]
    text, ports = logs["mute peer"].read_text(), clusters["mute peer"]
    assert procs["mute peer"].returncode == -signal.SIGKILL, text[-2000:]
    assert text.splitlines()[-1] == (
        f"shogi-dnn train: error: worker0@127.0.0.1:{ports[0]}: TensorFlow did not form the cluster "
        f"within 10 s (--cluster-timeout): a worker answered, then stopped or became unreachable; start "
        f"every worker again"), text[-2000:]
    assert "waiting for" not in text                    # worker 1's port answered at once
    assert not any((tmp_path / f"run-{name}" / "checkpoints").exists() for name in clusters)


def sigterm_action(pid: int) -> str:
    """SIGTERM's action in process `pid` at the OS level: "caught" (a handler), "ignored" or "default"."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":" in line)
    bit = 1 << (signal.SIGTERM - 1)
    return ("caught" if int(fields["SigCgt"], 16) & bit else
            "ignored" if int(fields["SigIgn"], 16) & bit else "default")


@pytest.mark.slow
@pytest.mark.skipif(not SHIM, reason="the bind shim is not built (setup.py build_ext) or this is not Linux")
def test_sigterm_while_tensorflow_forms_the_cluster_ends_the_worker(tmp_path: Path) -> None:
    """TensorFlow installs a SIGTERM handler of its own while it forms the cluster, which swallowed a
    SIGTERM sent then for the whole run (an acceptance check: the worker trained on to the end). The shim
    keeps SIGTERM's default action there: worker 0 in TensorFlow's wait (worker 1's port answers, no
    TensorFlow behind it) ends at once, killed by the signal, nothing written."""
    data = tmp_path / "data"
    make_dataset(data, train=[128, 128], validation=[64], chunk_rows=64)
    ports = free_ports(2)
    mute = socket.create_server(("127.0.0.1", ports[1]))
    log = tmp_path / "worker0.log"
    proc = start_alone(data, tmp_path / "run", log, ports, "--cluster-timeout", "60")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        # In the window: TensorFlow's server is up on port 0 and SIGTERM is at its default action (the
        # Python wait before it listens on that port too, with a handler for SIGTERM).
        while not (listening_hosts(ports[0]) and sigterm_action(proc.pid) == "default"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        time.sleep(3.0)                        # TensorFlow's handler would be installed by now
        assert sigterm_action(proc.pid) == "default", log.read_text()[-2000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        kill_all([proc])
        mute.close()
    assert proc.returncode == -signal.SIGTERM, log.read_text()[-2000:]
    assert "Traceback" not in log.read_text()
    assert not (tmp_path / "run" / "checkpoints").exists()
