"""Keeps a cluster worker's TensorFlow server on the host it was given (Linux; no TensorFlow here).

TensorFlow's GrpcServer::Init binds "0.0.0.0:" + port, so with `--workers 127.0.0.1:23456,...` its server
would listen on port 23456 of every interface. The C library _bindshim.c (built by setup.py) wraps bind(2):
with SHOGI_DNN_BIND_PORT=23456 and SHOGI_DNN_BIND_ADDR=127.0.0.1 in the environment, a bind of the
wildcard to that port becomes a bind of that address (see its header). A library must be preloaded when the
process starts, so `shogi-dnn train` re-executes itself once with LD_PRELOAD and those variables set
(reexec_with_shim) before anything else happens; the re-executed process sees SHOGI_DNN_BIND_PORT and does
not do it again. Where the library is not built, not Linux, or the host is not an address of this machine
(a cloud machine's public address reached through NAT), nothing changes: the server listens on every
interface and the worker's first line says so (cluster.exposure_warning).

The same library keeps SIGTERM's action while TensorFlow forms the cluster (keep_sigterm, called by
cluster.py): TensorFlow installs a SIGTERM handler there that would swallow the signal for the run."""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

PORT_VAR = "SHOGI_DNN_BIND_PORT"       # the port whose wildcard binds are redirected
ADDRESS_VAR = "SHOGI_DNN_BIND_ADDR"    # the numeric address they go to
PRELOAD_VAR = "LD_PRELOAD"
LIBRARY_NAME = "_bindshim"             # shogi_dnn/training/_bindshim<extension suffix>.so


def library_path() -> Path | None:
    """The built shim next to this module, None when setup.py could not build it (no C compiler)."""
    folder = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = folder / f"{LIBRARY_NAME}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def local_address(host: str) -> str | None:
    """The numeric address of this machine that `host` names (the first of its addresses that a socket
    can bind), None when it names none (a public address reached through NAT, an unknown name) or only a
    scoped IPv6 one (fe80::1%eth0, which the shim does not parse)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        if "%" in address:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, 0))
            except OSError:
                continue
        return address
    return None


def preload_environment(host: str, port: int, environ: Mapping[str, str]) -> dict[str, str] | None:
    """`environ` plus LD_PRELOAD (the shim first) and the shim's two variables for `host`:`port`; None
    where the shim cannot serve: not Linux, not built, `host` not an address of this machine, or the
    variables already set (this process was re-executed already, or the user set them)."""
    if not sys.platform.startswith("linux") or PORT_VAR in environ:
        return None
    library = library_path()
    address = local_address(host)
    if library is None or address is None:
        return None
    preload = " ".join(part for part in (str(library), environ.get(PRELOAD_VAR, "")) if part)
    return dict(environ) | {PRELOAD_VAR: preload, PORT_VAR: str(port), ADDRESS_VAR: address}


def reexec_with_shim(host: str, port: int) -> None:
    """Replace this process by the same command with the shim preloaded for `host`:`port` (the
    interpreter, its options and the arguments of sys.orig_argv); return when preload_environment says
    the shim cannot serve. Call it before TensorFlow is imported and before any file is opened or
    locked (this process's state is gone after it)."""
    environment = preload_environment(host, port, os.environ)
    if environment is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
    except OSError:             # the interpreter cannot be run again: go on without (the warning says so)
        return


def active_address(port: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """The address TensorFlow's server will bind for `port` in this process: the shim's address when
    the shim is loaded (in /proc/self/maps: LD_PRELOAD took effect) and set for that port; None
    otherwise (the server listens on every interface)."""
    address = environ.get(ADDRESS_VAR)
    library = library_path()
    if environ.get(PORT_VAR) != str(port) or not address or library is None:
        return None
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    return address if os.path.realpath(library) in maps else None


def keep_sigterm(on: bool) -> bool:
    """While `on`, the preloaded shim keeps SIGTERM's action as it is (TensorFlow's attempt to install
    its own handler while the cluster forms changes nothing; see _bindshim.c). True where the shim is
    loaded in this process and did it, False otherwise (not preloaded, not built, not Linux)."""
    library = library_path()
    if library is None or not hasattr(os, "RTLD_NOLOAD"):
        return False
    try:                                    # RTLD_NOLOAD: only the copy LD_PRELOAD already loaded
        shim = ctypes.CDLL(str(library), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        switch = shim.shogi_dnn_keep_sigterm
    except (OSError, AttributeError):       # not loaded, or built before this function existed
        return False
    switch.argtypes, switch.restype = [ctypes.c_int], ctypes.c_int
    switch(1 if on else 0)
    return True
