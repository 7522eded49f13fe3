"""Cluster description for multi-machine training: flags, TF_CONFIG, chief, names, one-line errors; the
start-up wait for the other workers (its address, its messages, its timeout, a signal ending it)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.training import cluster
from shogi_dnn.training.interrupts import StopFlag
from tests.support.paths import REPO
from tests.support.sockets import free_ports, listening_hosts

TWO = "10.0.0.1:2222,10.0.0.2:2222"


def test_flags_give_a_worker_cluster() -> None:
    spec = cluster.parse_workers(TWO, 1)
    assert spec.addresses == ("10.0.0.1:2222", "10.0.0.2:2222") and spec.num_workers == 2
    assert spec.worker_id == 1 and not spec.is_chief and cluster.parse_workers(TWO, 0).is_chief
    assert spec.tf_config() == {"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},
                                "task": {"type": "worker", "index": 1}}
    assert spec.worker_name(0) == "worker0@10.0.0.1:2222"
    assert cluster.parse_tf_config(json.dumps(spec.tf_config())) == spec     # round trip


def test_tf_config_with_a_chief_job_puts_the_chief_first() -> None:
    text = json.dumps({"cluster": {"worker": ["b:1", "c:1"], "chief": ["a:1"]}, "task": {"type": "worker",
                                                                                    "index": 0}})
    spec = cluster.parse_tf_config(text)
    assert spec.addresses == ("a:1", "b:1", "c:1") and spec.worker_id == 1 and not spec.is_chief
    chief = cluster.parse_tf_config(text.replace('"type": "worker"', '"type": "chief"'))
    assert chief.is_chief and chief.worker_id == 0


def test_resolve_prefers_flags_then_tf_config_then_single_machine() -> None:
    env = {cluster.TF_CONFIG: json.dumps(cluster.parse_workers("x:1,y:2", 1).tf_config())}
    assert cluster.resolve_cluster(TWO, 0, env).addresses[0] == "10.0.0.1:2222"
    assert cluster.resolve_cluster(None, None, env).addresses == ("x:1", "y:2")
    assert cluster.resolve_cluster(None, None, {}) is None
    assert cluster.resolve_cluster(None, None, {cluster.TF_CONFIG: "  "}) is None


@pytest.mark.parametrize("workers, index, message", [
    (TWO, None, "--workers needs --worker-index"),
    (None, 1, "--worker-index needs --workers"),
    (TWO, 2, "--worker-index 2: must be 0..1 for 2 workers"),
    ("10.0.0.1,10.0.0.2:2222", 0, "'10.0.0.1' is not host:port"),
    ("a:70000", 0, "'a:70000' is not host:port"),
    ("a:1,a:1", 0, "listed twice"),
    (" , ", 0, "expected host:port,host:port"),
])
def test_bad_flags(workers, index, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        cluster.resolve_cluster(workers, index, {})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, message", [
    ("{oops", "TF_CONFIG: invalid JSON"),
    ('{"cluster": {"worker": ["a:1"]}}', "TF_CONFIG: expected"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "job 'ps' is not supported"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}', "is not a task of the cluster"),
    ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}', "non-empty list"),
    ('{"cluster": {"worker": ["nohost"]}, "task": {"type": "worker", "index": 0}}', "is not host:port"),
])
def test_bad_tf_config(text, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        cluster.resolve_cluster(None, None, {cluster.TF_CONFIG: text})
    assert "\n" not in str(info.value)


def test_only_the_chief_writes_into_the_run_dir() -> None:
    run = Path("/runs/a")
    assert cluster.worker_dir(run, None) == run
    assert cluster.worker_dir(run, cluster.parse_workers(TWO, 0)) == run
    assert cluster.worker_dir(run, cluster.parse_workers(TWO, 1)) == run / "worker1"


def fake_strategy(workers: int, task: int = 0) -> SimpleNamespace:
    """Just what device_names reads from a MultiWorkerMirroredStrategy."""
    spec = cluster.parse_workers(TWO, 0).tf_config()["cluster"]
    resolver = SimpleNamespace(cluster_spec=lambda: SimpleNamespace(as_dict=lambda: spec), task_type="worker",
                               task_id=task)
    devices = tuple(f"/job:worker/replica:0/task:{task}/device:GPU:{i}" for i in range(2))
    return SimpleNamespace(extended=SimpleNamespace(worker_devices=devices, _num_workers=workers),
                           cluster_resolver=resolver)


def test_device_names_cover_every_worker() -> None:
    names = cluster.device_names(fake_strategy(2, task=1))
    assert names == ["worker0@10.0.0.1:2222/GPU:0", "worker0@10.0.0.1:2222/GPU:1",
                     "worker1@10.0.0.2:2222/GPU:0", "worker1@10.0.0.2:2222/GPU:1"]
    assert cluster.cluster_of(fake_strategy(2, task=1)) == cluster.parse_workers(TWO, 1)
    single = fake_strategy(1)
    assert cluster.device_names(single) == ["GPU:0", "GPU:1"]
    assert cluster.cluster_of(single) is None and cluster.num_workers(single) == 1


def test_workers_that_differ_are_refused_naming_the_first_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    """check_agreement with the other worker's values as the collective would gather them (no TF)."""
    config = {"model": {"filters": 16, "blocks": 1}, "optim": {"lr": 0.05, "momentum": 0.9}}
    dataset = {"data_dir": "/a", "manifest": "m" * 64, "splits": {"train": {"digest": "d"}}}
    mine = cluster.agreement_items(config, dataset)
    assert [name for name, _ in mine[2:]] == ["config model.blocks", "config model.filters",
                                              "config optim.lr", "config optim.momentum"]
    assert cluster.agreement_items(config, {**dataset, "data_dir": "/elsewhere"}) == mine  # the folder may differ
    two = SimpleNamespace(extended=SimpleNamespace(_num_workers=2))
    monkeypatch.setattr(cluster, "cluster_of", lambda strategy: cluster.parse_workers("a:1,b:2", 1))

    def agreeing_except(theirs: list[tuple[str, str]]):
        """The gather of two workers, worker 0 holding `theirs`: its head first, then its config values."""
        rows = iter([[cluster._digest(theirs[0][1]), cluster._digest(theirs[1][1]),
                      cluster._digest(json.dumps([n for n, _ in theirs])), len(theirs)],
                     [cluster._digest(v) for _, v in theirs[2:]]])
        return lambda strategy, values: [next(rows), list(values)]

    monkeypatch.setattr(cluster, "_gather_ints", agreeing_except(mine))
    cluster.check_agreement(two, mine)                                   # the same everywhere: no error
    other_lr = cluster.agreement_items({**config, "optim": {"lr": 0.001, "momentum": 0.9}}, dataset)
    monkeypatch.setattr(cluster, "_gather_ints", agreeing_except(other_lr))
    with pytest.raises(RunError, match=r"^the workers disagree on config optim.lr: worker 1 has 0.05, worker 0 "
                                       r"another; start every worker with the same --config, --set, --data"):
        cluster.check_agreement(two, mine)
    other_data = cluster.agreement_items(config, {**dataset, "manifest": "n" * 64})
    monkeypatch.setattr(cluster, "_gather_ints", agreeing_except(other_data))
    with pytest.raises(RunError, match=r"^the workers disagree on the dataset: worker 1 has manifest mmmm"):
        cluster.check_agreement(two, mine)


def test_peer_lost_message_is_one_line() -> None:
    class UnavailableError(Exception):
        pass

    exc = UnavailableError("Graph execution error:\n\nDetected at node CollectiveReduceV2_1 defined at (most "
                           "recent call last):\n  File \"x.py\", line 3\nCollective ops is aborted by: "
                           "recvmsg:Connection reset by peer\nThe error could be from a previous operation. "
                           "Restart your program to reset.")
    assert cluster.is_peer_lost(exc) and not cluster.is_peer_lost(ValueError("x"))
    text = cluster.peer_lost_message(exc, cluster.parse_workers(TWO, 1))
    assert "\n" not in text and text.startswith("worker1@10.0.0.2:2222: lost contact with another worker")
    assert "(UnavailableError: recvmsg:Connection reset by peer)" in text and "--resume" in text
    assert "lost contact" in cluster.peer_lost_message(UnavailableError(""), cluster.parse_workers(TWO, 0))


# --- the start-up wait (plain sockets on 127.0.0.1, no TensorFlow) ---

def local_cluster(index: int = 0) -> tuple[cluster.Cluster, list[int]]:
    ports = free_ports(2)
    return cluster.parse_workers(",".join(f"127.0.0.1:{p}" for p in ports), index), ports


def test_the_wait_ends_when_every_other_worker_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    spec, ports = local_cluster(0)
    polls: list[float] = []
    monkeypatch.setattr(cluster.time, "sleep", polls.append)
    with socket.create_server(("127.0.0.1", ports[1])):         # worker 1 has started
        cluster.wait_for_workers(spec, timeout_s=5)
    assert polls == []                                           # found at the first look: no poll waited
    with pytest.raises(OSError):                                 # its socket is closed: TensorFlow's turn
        socket.create_connection(("127.0.0.1", ports[0]), timeout=1).close()


def test_the_waiting_worker_listens_on_its_own_address_only_and_says_what_it_waits_for(caplog,
                                                                                       monkeypatch) -> None:
    spec, ports = local_cluster(1)
    monkeypatch.setattr(cluster, "FIRST_REPORT_S", 0.0)
    seen: list[set[str]] = []
    timer = threading.Timer(0.5, lambda: seen.append(listening_hosts(ports[1])))
    timer.start()
    with caplog.at_level(logging.INFO, logger="shogi_dnn.training.cluster"), pytest.raises(RunError) as err:
        cluster.wait_for_workers(spec, timeout_s=1.0)
    timer.join()
    assert seen == [{"127.0.0.1"}]                  # loopback stays loopback while it waits
    assert f"worker1@127.0.0.1:{ports[1]}: waiting for worker 0 at 127.0.0.1:{ports[0]} (0 s; gives up " \
           f"after 1 s, --cluster-timeout)" in caplog.text
    assert str(err.value).startswith(f"worker1@127.0.0.1:{ports[1]}: worker 0 at 127.0.0.1:{ports[0]} did "
                                     f"not start within 1 s (--cluster-timeout)")
    assert "\n" not in str(err.value) and listening_hosts(ports[1]) == set()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_wait_at_once(signum: int, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, ports = local_cluster(0)
    stop = StopFlag()
    sleep = time.sleep

    def poll(seconds: float) -> None:
        assert not stop.requested, "polled again after the signal"
        sleep(seconds)
    monkeypatch.setattr(cluster.time, "sleep", poll)
    with stop.catch_signals():
        threading.Timer(0.3, os.kill, (os.getpid(), signum)).start()
        with pytest.raises(cluster.WaitStopped) as err:
            cluster.wait_for_workers(spec, timeout_s=30, stop=stop)
    name = signal.Signals(signum).name
    assert str(err.value) == (f"worker0@127.0.0.1:{ports[0]}: {name} while waiting for worker 1 at "
                              f"127.0.0.1:{ports[1]} (0 s): stopped before training, nothing written")
    assert err.value.signum == signum
    assert stop.action.startswith("saving a checkpoint")       # a signal during training saves again


def test_a_taken_port_is_one_line() -> None:
    spec, ports = local_cluster(0)
    with socket.create_server(("127.0.0.1", ports[0])), pytest.raises(RunError) as err:
        cluster.wait_for_workers(spec, timeout_s=5)
    assert str(err.value).startswith(f"worker0@127.0.0.1:{ports[0]}: cannot listen on 127.0.0.1:{ports[0]} "
                                     f"(Address already in use)")


def test_the_exposure_warning_names_every_interface() -> None:
    remote = cluster.exposure_warning(cluster.parse_workers(TWO, 1))
    assert remote.startswith("worker1@10.0.0.2:2222: TensorFlow's gRPC server listens on port 2222 of every "
                             "interface (0.0.0.0 and ::), not only 10.0.0.2, and has no authentication")
    assert "unshare" not in remote
    local = cluster.exposure_warning(cluster.parse_workers("127.0.0.1:23456,127.0.0.1:23457", 0))
    assert "not only 127.0.0.1" in local and "unshare -rn" in local


def test_only_the_workers_not_yet_started_are_named() -> None:
    ports = free_ports(3)
    spec = cluster.parse_workers(",".join(f"127.0.0.1:{p}" for p in ports), 0)
    with socket.create_server(("127.0.0.1", ports[1])), pytest.raises(RunError) as err:
        cluster.wait_for_workers(spec, timeout_s=0.5)
    assert f": worker 2 at 127.0.0.1:{ports[2]} did not start within 0.5 s" in str(err.value)
    assert "worker 1" not in str(err.value)


def form_cluster_in_a_process(seconds_in_build: float, limit_s: float) -> subprocess.CompletedProcess:
    code = ("import sys, time\n"
            "from shogi_dnn.training.cluster import _form_cluster\n"
            f"build = lambda: time.sleep({seconds_in_build}) or 'formed'\n"
            f"print(_form_cluster(build, {limit_s}, 'gave up'))\n")
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          timeout=30, cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})


def test_tensorflow_forming_the_cluster_is_ended_after_the_time_left() -> None:
    """TensorFlow's own wait holds the GIL, so a watchdog process ends it: the line, then SIGKILL."""
    start = time.monotonic()
    done = form_cluster_in_a_process(30, 1.0)
    assert done.returncode == -signal.SIGKILL and done.stderr == "gave up\n" and done.stdout == ""
    assert time.monotonic() - start < 10
    done = form_cluster_in_a_process(0.1, 20)          # formed in time: the watchdog goes quietly
    assert (done.returncode, done.stdout, done.stderr) == (0, "formed\n", "")
