"""training/allocator.py: freed memory stays with the process (fewer page faults per repeated
allocation), SHOGI_DNN_MALLOC=system leaves glibc's defaults. Each case in a fresh interpreter: the
settings are process-wide."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

# An update's pattern: a thread takes 16 blocks of 4 MiB (the activations of a forward pass), writes
# them, frees them all; 20 rounds. Prints whether the settings are in force and the minor page faults
# of a round.
PROBE = """
import ctypes, resource, threading
import shogi_dnn.training
from shogi_dnn.training.allocator import keep_freed_memory
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
SIZE, ROUNDS = 4 << 20, 20
def rounds():
    for _ in range(ROUNDS):
        blocks = [libc.malloc(SIZE) for _ in range(16)]
        for block in blocks:
            ctypes.memset(block, 1, SIZE)
        for block in blocks:
            libc.free(block)
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
worker = threading.Thread(target=rounds)
worker.start()
worker.join()
print(keep_freed_memory(), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) // ROUNDS)
"""


def _probe(**env: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}, timeout=120).stdout.split()
    return out[0] == "True", int(out[1])


def test_freed_memory_is_reused_instead_of_faulted_in_again() -> None:
    kept, faults_kept = _probe(SHOGI_DNN_MALLOC="")
    default, faults_default = _probe(SHOGI_DNN_MALLOC="system")
    assert kept and not default
    # 64 MiB a round is 16,384 pages: glibc's defaults hand most of it back each round.
    assert faults_kept * 2 < faults_default, (faults_kept, faults_default)
