"""What an open samples of a data file: a hash of 16 of its 4 KiB blocks, spread evenly, and of its
size (:func:`lirs.freshness.fingerprint` keeps it). Apart from the freshness checks so that the
engines' check of the files they open can compare it too."""
from __future__ import annotations

import hashlib
import os
import stat

import numpy as np

from .constants import BLOCK
from .preads import pread_full

SAMPLE_BLOCKS = 16


def sample_hash(fd: int, size: int, blocks: int = SAMPLE_BLOCKS, path: str | None = None) -> str:
    """BLAKE2b (hex, 32 characters) of ``size`` and of ``blocks`` 4 KiB blocks spread evenly over the
    open file ``fd`` (``path``: named in a read's error)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(size.to_bytes(8, "little"))
    if size:
        last = max(0, size - BLOCK)
        for off in sorted(set(int(x) for x in np.linspace(0, last, blocks))):
            h.update(pread_full(fd, BLOCK, off, path))
    return h.hexdigest()


def same_samples(path: str, size: int, expected: str | None) -> bool:
    """Whether ``path`` holds, where an open samples it, the bytes of a file of ``size`` bytes whose
    fingerprint's hash is ``expected`` (:func:`sample_hash`): a file found under another inode number with its size and
    mtime kept (a FUSE or network filesystem renumbers inodes: a remount, an inode evicted) is the
    same file to lirs when it does, as it is to an open. An I/O error reading it is raised as it is
    (naming the file and byte), not taken for another file."""
    if expected is None:
        return False
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO's open would block
            return False
        with open(path, "rb") as f:
            return sample_hash(f.fileno(), int(size), SAMPLE_BLOCKS, path) == expected
    except FileNotFoundError:  # gone since: not the file checked
        return False
