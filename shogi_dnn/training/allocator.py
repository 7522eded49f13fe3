"""The C allocator's settings for TensorFlow on the CPU: freed tensor memory is kept for the next update.

TensorFlow's CPU kernels take every activation, gradient and im2col buffer from malloc and free it within
the update. With glibc's defaults a block of more than 128 KiB (a threshold that only grows as far as the
largest block freed) is its own mmap, and the top of each heap is handed back to the kernel once more
than twice that threshold is free, so the same megabytes are mapped, faulted in page by page and unmapped
every update: about 100,000 minor page faults and 40% of a cpu-small training's CPU time in the kernel
(docs/benchmarks.md, "The allocator"). keep_freed_memory() sets, through mallopt(3):

  M_MMAP_THRESHOLD  32 MiB  blocks below it come from the heaps (glibc's largest allowed value; setting
                            it also fixes it: no dynamic threshold)
  M_TRIM_THRESHOLD   1 GiB  free memory at a heap's top is kept until this much has gathered
  M_TOP_PAD         64 MiB  each growth of the main heap takes this much extra

so a process keeps up to about its peak of freed memory instead of returning it (resident memory stays
near the peak of the run). Importing shogi_dnn.training applies it once, before TensorFlow loads through
this package. SHOGI_DNN_MALLOC=system leaves the C library's defaults. Other C libraries than glibc (musl,
macOS) are left as they are. TensorFlow-free.
"""

from __future__ import annotations

import ctypes
import os
import platform

ENV = "SHOGI_DNN_MALLOC"            # "system": leave the C library's defaults
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3     # glibc's malloc.h parameter numbers
SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))

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
