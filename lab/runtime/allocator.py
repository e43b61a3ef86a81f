"""Keep freed memory for reuse in the processes that train (glibc malloc).

Every step allocates gradient-sized temporaries: a codec's scaled values, random bytes and
codes, a decoded tensor, an averaged gradient. With glibc's defaults a block of more than a few
megabytes is mapped from the kernel when allocated and handed back when freed, so the next
step's block is faulted in again page by page, and the heap's top is trimmed the same way. On
our 2-core CI machine that tripled QSGD's codec time per step (17.8 ms against 5.6 ms for the
VGG-like model on 2 ranks); even the fp32 baseline's copies took 2.1 ms instead of 0.7 ms.

:func:`keep_freed_memory` raises the mmap threshold and turns heap trimming off, so freed blocks
stay in the heap for the next step. PyTorch's CPU performance tuning guide recommends jemalloc
or tcmalloc for the same reason; this does it with the allocator every Linux process has. The
price is that a process keeps its peak memory until it exits, which suits a training rank. So
the ranks :func:`lab.runtime.launch` starts, ``from_env`` under torchrun and
``lab.bench.codecs.run`` (in the process it measures) call it; importing lab never does. Set
``LAB_KEEP_FREED_MEMORY=0`` to keep glibc's defaults.
"""
from __future__ import annotations

import ctypes
import os

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc's malloc.h)
_MMAP_THRESHOLDS = (1 << 30, 32 << 20)  # 1 GiB; older glibc caps it at 32 MiB on 64-bit
_NEVER_TRIM = 2 ** 31 - 1  # the largest value mallopt's int takes


def keep_freed_memory() -> bool:
    """Tune glibc malloc to keep freed blocks; True if it applied (False: turned off by
    ``LAB_KEEP_FREED_MEMORY=0``, or not glibc, e.g. macOS, where nothing changes)."""
    if os.environ.get("LAB_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    if not any(mallopt(_M_MMAP_THRESHOLD, t) for t in _MMAP_THRESHOLDS):
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))
