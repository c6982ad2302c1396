"""Reads of a file that continue short reads (FUSE and network filesystems return them mid-file)
and whose I/O errors name the file and the byte they failed at (``lirs_offset``: the CLI prints it)."""
from __future__ import annotations

import os


def pread_into(fd: int, mv: memoryview, off: int, path: str) -> int:
    """Read into all of ``mv`` (a writable byte view) from byte ``off`` of ``fd``, continuing short
    reads; returns the bytes read (fewer only at the end of the file). An OSError (EIO and kin)
    names ``path`` and carries the byte (``lirs_offset``) it failed at: the CLI prints both."""
    got = 0
    while got < len(mv):
        try:
            r = os.preadv(fd, [mv[got:]], off + got)
        except OSError as e:
            e.filename, e.lirs_offset = path, off + got
            raise
        if r == 0:
            break
        got += r
    return got


def pread_full(fd: int, nbytes: int, offset: int, path: str | None = None) -> bytes:
    """``nbytes`` from ``offset``, continuing short reads (FUSE and network filesystems return
    them mid-file); shorter only at end of file. A failed read's OSError names ``path`` and the
    byte (``lirs_offset``, which the CLI prints). The bytes form of :func:`pread_into`."""
    buf = bytearray(nbytes)
    return bytes(buf[:pread_into(fd, memoryview(buf), offset, path)])


def read_at(path: str, nbytes: int = -1, offset: int = 0) -> bytes:
    """``nbytes`` of the file ``path`` from ``offset`` (-1: to its end; fewer at its end), as
    :func:`pread_full` reads them: an I/O error names the file and the byte."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if nbytes < 0:
            nbytes = max(0, os.fstat(fd).st_size - offset)
        return pread_full(fd, nbytes, offset, path)
    finally:
        os.close(fd)
