"""Which filesystem holds a file, and whether its pages may be memory-mapped safely."""
from __future__ import annotations

import os

# filesystems where a failed read of a mapped page kills the process (SIGBUS): their arrays are read
_NO_MAP_FS = ("fuse", "nfs", "cifs", "smb", "9p", "ceph", "glusterfs", "lustre", "sshfs", "virtiofs")


def fs_type(path: str) -> str | None:
    """The filesystem type of the mount holding ``path`` (from /proc/self/mountinfo), or None."""
    try:
        dev = os.stat(path).st_dev
        want = f"{os.major(dev)}:{os.minor(dev)}"
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 3 and parts[2] == want and " - " in line:
                    return line.split(" - ", 1)[1].split()[0]
    except OSError:
        pass
    return None


# filesystems whose files are always in memory: a read is a copy, never a wait for a device
MEMORY_FS = ("tmpfs", "ramfs")


def in_memory(path: str) -> bool:
    """Whether ``path`` lies on a filesystem held in memory (tmpfs, ramfs: /dev/shm)."""
    return (fs_type(path) or "") in MEMORY_FS


def held_in_memory(paths) -> str | None:
    """Why ``paths`` (str or path-like) are best read through the page cache: every one lies on a
    filesystem held in memory (tmpfs, ramfs), said as ``"PATH is held in memory (tmpfs)"``; None when
    some file does not or cannot be looked at (one file of each filesystem is: a dataset of many
    files). :func:`lirs.engines.open_engine` reads such files without O_DIRECT unless asked for it."""
    paths = [os.fspath(p) for p in paths]
    if not paths or not in_memory(paths[0]):
        return None  # the common case (a dataset on a device) decided by its first file alone
    one_per_fs = {}
    for p in paths:
        try:
            one_per_fs.setdefault(os.stat(p).st_dev, p)
        except OSError:
            return None  # left to the engine's open to report
    if not all(in_memory(p) for p in one_per_fs.values()):
        return None
    return f"{paths[0]} is held in memory ({fs_type(paths[0])})"


def map_safe(path: str) -> bool:
    """Whether the arrays of ``path`` may be memory-mapped: not on FUSE or network filesystems,
    where an I/O error under a mapped page is a SIGBUS instead of an exception."""
    fs = fs_type(path) or ""
    return not any(fs.startswith(k) for k in _NO_MAP_FS)
