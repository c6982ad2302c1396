"""Disk helpers of `lirs shuffle`: whole writes and reads, O_DIRECT or not, free space, fsync."""
from __future__ import annotations

import os

import numpy as np

from ..engines import aligned_empty
from ..engines.base import probe_direct_write
from ..errors import LirsError
from ..units import format_bytes

DIRECT = True                  # O_DIRECT for piles and output where the filesystem allows it


def direct_ok(dirpath: str) -> bool:
    """Whether the shuffle writes and reads files in ``dirpath`` with O_DIRECT: asked for
    (``DIRECT``) and taken by the filesystem (:func:`lirs.engines.base.probe_direct_write`)."""
    return DIRECT and probe_direct_write(dirpath) is None


def round_up(n: int, block: int) -> int:
    """``n`` rounded up to a multiple of ``block``."""
    return -(-int(n) // block) * block


def alloc(nbytes: int, direct: bool) -> np.ndarray:
    """Uninitialized uint8 (nbytes,), block-aligned when it takes part in O_DIRECT I/O."""
    return aligned_empty(nbytes) if direct else np.empty(nbytes, np.uint8)


def create(path: str, direct: bool, mode: int = 0o644) -> int:
    """A new (truncated) file for writing, with O_DIRECT when ``direct``; returns its descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | (os.O_DIRECT if direct else 0)
    return os.open(path, flags, mode)


def _named(e: OSError, fd: int) -> OSError:
    """``e`` naming the file of ``fd`` (ENOSPC and EIO of a write carry no name by themselves)."""
    if e.errno is not None and not e.filename:
        try:
            e.filename = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return e


def write_all(fd: int, data) -> None:
    """Append all of ``data`` (bytes or a uint8 array) at the file position of ``fd``."""
    mv = memoryview(data).cast("B")
    while mv.nbytes:
        try:
            n = os.write(fd, mv)
        except OSError as e:
            raise _named(e, fd)
        mv = mv[n:]


def pwrite_all(fd: int, data, off: int) -> None:
    """Write all of ``data`` (bytes or a uint8 array) at byte ``off`` of ``fd``."""
    mv = memoryview(data).cast("B")
    while mv.nbytes:
        try:
            n = os.pwrite(fd, mv, off)
        except OSError as e:
            raise _named(e, fd)
        mv = mv[n:]
        off += n


def read_all(path: str, nbytes: int, out: np.ndarray, block: int = 1) -> None:
    """Read the first ``nbytes`` of ``path`` into ``out`` (uint8); with ``block`` > 1 by O_DIRECT in
    whole blocks (``out`` aligned, room for ``nbytes`` rounded up to a block)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if block > 1 else 0))
    try:
        mv = memoryview(out)[:round_up(nbytes, block)]
        got = 0
        while got < nbytes:
            r = os.preadv(fd, [mv[got:]], got)
            if r == 0:
                raise LirsError(f"{path}: pile file is shorter than written ({got} of {nbytes} bytes)")
            got += r
    finally:
        os.close(fd)


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``path``."""
    st = os.statvfs(path)
    return int(st.f_bavail * st.f_frsize)


def check_space(pile_dir: str, out_dir: str, pile_bytes: int, out_bytes: int, sidecar_bytes: int = 0) -> None:
    """Raise when the pile and output directories cannot hold the piles and the output (and its
    sidecars, ``sidecar_bytes``); the message says what each filesystem needs and has."""
    outs = f"output {format_bytes(out_bytes)}" + (f" + sidecar {format_bytes(sidecar_bytes)}" if sidecar_bytes else "")
    if os.stat(pile_dir).st_dev == os.stat(out_dir).st_dev:
        need, free = pile_bytes + out_bytes + sidecar_bytes, free_bytes(out_dir)
        if free < need:
            raise LirsError(f"not enough free disk space on {out_dir}: the shuffle needs about {format_bytes(need)} "
                            f"there (piles {format_bytes(pile_bytes)} + {outs}, sharing its filesystem), "
                            f"{format_bytes(free)} free; use --tmpdir for the piles elsewhere")
        return
    short = []
    for what, d, b, fix in (("the output", out_dir, out_bytes + sidecar_bytes, "write it elsewhere"),
                            ("the piles (--tmpdir)", pile_dir, pile_bytes, "name another --tmpdir")):
        free = free_bytes(d)
        if free < b:
            short.append(f"{what} on {d} needs about {format_bytes(b)}"
                         f"{f' ({outs})' if d == out_dir and sidecar_bytes else ''}, {format_bytes(free)} free: {fix}")
    if short:
        raise LirsError("not enough free disk space: " + "; ".join(short))
