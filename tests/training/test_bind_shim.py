"""The bind(2) shim that keeps a cluster worker's TensorFlow server on its given host: the C library in a
subprocess (wildcard binds to the named port redirected, everything else untouched), the environment the
worker re-executes itself with, and the exposure warning it replaces. Skipped where the library is not
built (no C compiler) or not on Linux."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from shogi_dnn.training import bind_shim, cluster
from tests.support.paths import REPO
from tests.support.sockets import free_ports

# Binds each (family, address, port) given as JSON in argv[1]; prints [bound address, port] or the errno.
PROBE = """
import errno, json, socket, sys
out = []
for family, address, port in json.loads(sys.argv[1]):
    s = socket.socket(getattr(socket, family), socket.SOCK_STREAM)
    if family == "AF_INET6":
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)     # as gRPC sets it
    try:
        s.bind((address, port))
        out.append(list(s.getsockname()[:2]))
    except OSError as exc:
        out.append(errno.errorcode[exc.errno])
    s.close()
print(json.dumps(out))
"""


def shim_binds(address: str, port: int, binds: list[tuple[str, str, int]]) -> list:
    library = bind_shim.library_path()
    if library is None or not sys.platform.startswith("linux"):
        pytest.skip("the bind shim is not built (setup.py build_ext) or this is not Linux")
    env = os.environ | {"LD_PRELOAD": str(library), bind_shim.PORT_VAR: str(port),
                        bind_shim.ADDRESS_VAR: address}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(binds)], env=env, capture_output=True,
                          text=True, timeout=30, check=True)
    return json.loads(done.stdout)


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_wildcard_binds_to_the_named_port_go_to_the_given_ipv4_address() -> None:
    port, other = free_ports(2)
    binds = [("AF_INET", "0.0.0.0", port), ("AF_INET", "0.0.0.0", other), ("AF_INET", "127.0.0.1", port)]
    if has_ipv6_loopback():
        binds.append(("AF_INET6", "::", port))
    got = shim_binds("127.0.0.1", port, binds)
    assert got[:3] == [["127.0.0.1", port], ["0.0.0.0", other], ["127.0.0.1", port]]
    if has_ipv6_loopback():
        assert got[3] == ["::ffff:127.0.0.1", port]      # gRPC's dual-stack socket: IPv4 127.0.0.1 only


def test_an_ipv6_address_is_bound_as_given_and_never_widened_to_ipv4() -> None:
    if not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    port, other = free_ports(2)
    got = shim_binds("::1", port, [("AF_INET6", "::", port), ("AF_INET", "0.0.0.0", port),
                                   ("AF_INET6", "::", other)])
    assert got == [["::1", port], "EADDRNOTAVAIL", ["::", other]]


def test_the_worker_environment_names_a_local_address_only() -> None:
    if bind_shim.library_path() is None or not sys.platform.startswith("linux"):
        pytest.skip("the bind shim is not built (setup.py build_ext) or this is not Linux")
    env = bind_shim.preload_environment("127.0.0.1", 23456, {"LD_PRELOAD": "/opt/other.so", "HOME": "/h"})
    assert env == {"LD_PRELOAD": f"{bind_shim.library_path()} /opt/other.so", "HOME": "/h",
                   bind_shim.PORT_VAR: "23456", bind_shim.ADDRESS_VAR: "127.0.0.1"}
    assert bind_shim.local_address("localhost") in ("127.0.0.1", "::1")
    # A public address reached through NAT is no address of this machine: TensorFlow keeps the wildcard.
    assert bind_shim.preload_environment("203.0.113.7", 23456, {}) is None
    # Re-executed already (or set by the user): never a second time.
    assert bind_shim.preload_environment("127.0.0.1", 23456, {bind_shim.PORT_VAR: "23456"}) is None


def test_the_exposure_warning_stays_unless_the_shim_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = cluster.parse_workers("127.0.0.1:23456,127.0.0.1:23457", 0)
    # The variables alone (the library not in this process's memory) do not silence it.
    monkeypatch.setenv(bind_shim.PORT_VAR, "23456")
    monkeypatch.setenv(bind_shim.ADDRESS_VAR, "127.0.0.1")
    assert bind_shim.active_address(23456) is None
    assert "of every interface" in cluster.exposure_warning(spec)


def test_a_process_started_with_the_shim_knows_it_and_drops_the_warning() -> None:
    library = bind_shim.library_path()
    if library is None or not sys.platform.startswith("linux"):
        pytest.skip("the bind shim is not built (setup.py build_ext) or this is not Linux")
    code = ("from shogi_dnn.training import bind_shim, cluster\n"
            "spec = cluster.parse_workers('127.0.0.1:23456,127.0.0.1:23457', 0)\n"
            "print(bind_shim.active_address(23456), bind_shim.active_address(23457), "
            "cluster.exposure_warning(spec))\n")
    env = os.environ | {"LD_PRELOAD": str(library), bind_shim.PORT_VAR: "23456",
                        bind_shim.ADDRESS_VAR: "127.0.0.1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30,
                          check=True)
    assert done.stdout.split() == ["127.0.0.1", "None", "None"]


def test_train_re_executes_only_its_own_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from shogi_dnn.commands import train

    args = ["--config", "c.toml", "--workers", "127.0.0.1:1,127.0.0.1:2", "--worker-index", "0"]
    monkeypatch.setattr(sys, "argv", ["shogi-dnn", "train", "--verbose", *args])
    assert train._is_process_command(args)
    assert not train._is_process_command(args[:-1]) and not train._is_process_command(None)
    monkeypatch.setattr(sys, "argv", ["pytest", "-q", *args])     # train.main called from Python
    assert not train._is_process_command(args)


# In a process with the shim preloaded: what SIGTERM's action is at the OS level (/proc/self/status) after
# Python's signal.signal (sigaction(2)) and libc's signal(2) try to change it, with the shim's
# keep_sigterm on and then off.
KEEP = """
import ctypes, signal
from shogi_dnn.training import bind_shim
def action(signum=signal.SIGTERM):
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    bit = 1 << (signum - 1)
    return "caught" if int(fields["SigCgt"], 16) & bit else "ignored" if int(fields["SigIgn"], 16) & bit else "default"
libc = ctypes.CDLL(None)
libc.signal.restype = ctypes.c_void_p
libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
out = [bind_shim.keep_sigterm(True)]
signal.signal(signal.SIGTERM, lambda *a: None)
out.append(action())
libc.signal(signal.SIGTERM, 1)                             # SIG_IGN, as TensorFlow's std::signal would
out.append(action())
signal.signal(signal.SIGINT, signal.SIG_IGN)               # other signals are not held
out.append(action(signal.SIGINT))
out.append(bind_shim.keep_sigterm(False))
signal.signal(signal.SIGTERM, lambda *a: None)
out.append(action())
print(*out)
"""


def test_the_shim_keeps_sigterm_while_the_cluster_forms() -> None:
    """TensorFlow installs a SIGTERM handler while the cluster forms that swallows the signal for the whole
    run (an acceptance check: SIGTERM 4 s after the server was up, the worker trained on to the end).
    With keep_sigterm on, neither sigaction(2) nor signal(2) changes SIGTERM's action; off, both do.
    Without the shim loaded keep_sigterm says so."""
    library = bind_shim.library_path()
    if library is None or not sys.platform.startswith("linux"):
        pytest.skip("the bind shim is not built (setup.py build_ext) or this is not Linux")
    env = os.environ | {"LD_PRELOAD": str(library), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", KEEP], env=env, capture_output=True, text=True, timeout=30,
                          check=True)
    assert done.stdout.split() == ["True", "default", "default", "ignored", "True", "caught"], done.stdout
    assert bind_shim.keep_sigterm(True) is False and bind_shim.keep_sigterm(False) is False    # not loaded
