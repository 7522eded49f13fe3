"""The C allocator's settings for TensorFlow on the CPU: freed tensor memory is kept for the next update.

TensorFlow's CPU kernels take every activation, gradient and im2col buffer from malloc, and XLA one temporary
buffer per call for all of a cluster's intermediates; all are freed within the update. With glibc's defaults
a block of more than 128 KiB (a threshold that only grows as far as the largest block freed, 32 MiB at most)
is its own mmap, and the top of each heap is handed back to the kernel once more than twice that threshold
is free, so the same megabytes are mapped, faulted in page by page and unmapped every update: 10,000 to
100,000 minor page faults an update and up to 45% of a training's CPU time in the kernel
(docs/benchmarks.md, "Memory churn"). keep_freed_memory() sets, through mallopt(3):

  M_MMAP_MAX         0      no block is its own mmap: every block comes from the heaps (a block larger
                            than a thread's heap, 64 MiB, is still mapped: glibc's fallback)
  M_TRIM_THRESHOLD   1 GiB  free memory at a heap's top is kept until this much has gathered
  M_TOP_PAD         64 MiB  each growth of the main heap takes this much extra

so freed memory is reused by the next update instead of returned (resident memory stays near the peak of
the run). Importing shogi_dnn.training applies it once, before TensorFlow loads through this package.
SHOGI_DNN_MALLOC=system leaves the C library's defaults. Other C libraries than glibc (musl, macOS) are
left as they are. TensorFlow-free.
"""

from __future__ import annotations

import ctypes
import os
import platform

ENV = "SHOGI_DNN_MALLOC"            # "system": leave the C library's defaults
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4     # glibc's malloc.h parameter numbers
SETTINGS = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Apply SETTINGS with glibc's mallopt (once per process). Returns whether they are in force: False
    with SHOGI_DNN_MALLOC=system, on another C library, or where mallopt refused a value."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get(ENV, "").strip().lower() == "system" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all([mallopt(param, value) == 1 for param, value in SETTINGS])
