"""How many cores this process may use (its CPU affinity, as ``taskset`` or a container sets it)."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (>= 1): the affinity mask where the OS has one, else the
    machine's count. The pool of the loader and the index scan size themselves by it."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1
