"""Disk helpers of `lirs shuffle`: whole writes and reads, the O_DIRECT probe, free space, fsync."""
from __future__ import annotations

import os
import tempfile

import numpy as np

from ..constants import BLOCK
from ..engines import aligned_empty
from ..errors import LirsError
from ..units import format_bytes

DIRECT = True                  # O_DIRECT for piles and output where the filesystem allows it

# --------------------------------------------------------------------------- I/O helpers


def _write_all(fd: int, data) -> None:
    mv = memoryview(data).cast("B")
    while mv.nbytes:
        n = os.write(fd, mv)
        mv = mv[n:]


def _pwrite_all(fd: int, data, off: int) -> None:
    mv = memoryview(data).cast("B")
    while mv.nbytes:
        n = os.pwrite(fd, mv, off)
        mv = mv[n:]
        off += n


def _read_all(path: str, nbytes: int, out: np.ndarray, block: int = 1) -> None:
    """Read the first ``nbytes`` of ``path`` into ``out``; with ``block`` > 1 by O_DIRECT in whole
    blocks (``out`` aligned, room for ``nbytes`` rounded up to a block)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if block > 1 else 0))
    try:
        want = -(-nbytes // block) * block
        mv = memoryview(out)[:want]
        got = 0
        while got < nbytes:
            r = os.preadv(fd, [mv[got:]], got)
            if r == 0:
                raise LirsError(f"{path}: pile file is shorter than written ({got} of {nbytes} bytes)")
            got += r
    finally:
        os.close(fd)


def _direct_ok(dirpath: str) -> bool:
    """Whether files in ``dirpath`` take O_DIRECT writes and reads (tmpfs and some overlay
    filesystems refuse them, sometimes only at the first I/O: probe with a real one)."""
    if not DIRECT or not hasattr(os, "O_DIRECT"):
        return False
    fd = -1
    try:
        tmp_fd, probe = tempfile.mkstemp(prefix=".lirs-direct-", dir=dirpath)
        os.close(tmp_fd)
        fd = os.open(probe, os.O_RDWR | os.O_DIRECT | os.O_CLOEXEC)
        buf = aligned_empty(BLOCK)
        buf[:] = 7
        back = aligned_empty(BLOCK)
        ok = os.pwrite(fd, buf, 0) == BLOCK and os.preadv(fd, [back], 0) == BLOCK and bool((back == 7).all())
    except OSError:
        ok = False
    finally:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(probe)
        except (OSError, UnboundLocalError):
            pass
    return ok


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return int(st.f_bavail * st.f_frsize)


def _check_space(pile_dir: str, out_dir: str, pile_bytes: int, out_bytes: int) -> None:
    """Raise when the pile and output directories cannot hold the piles and the output."""
    need = {}
    for d, b in ((pile_dir, pile_bytes), (out_dir, out_bytes)):
        dev = os.stat(d).st_dev
        need.setdefault(dev, [d, 0])[1] += b
    for dev, (d, b) in need.items():
        free = _free_bytes(d)
        if free < b:
            raise LirsError(f"not enough free disk space on {d}: the shuffle needs about {format_bytes(b)} "
                            f"(piles {format_bytes(pile_bytes)} + output {format_bytes(out_bytes)} "
                            f"where they share a filesystem), {format_bytes(free)} free; use --tmpdir "
                            "for the piles elsewhere")


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
