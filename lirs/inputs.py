"""The inputs of a scan: which files form a dataset, which format they hold, and their bytes read
sequentially in chunks with the next read in flight."""
from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import DataError

_EXT_FORMAT = {
    ".svm": "libsvm", ".libsvm": "libsvm", ".svmlight": "libsvm", ".scale": "libsvm", ".t": "libsvm",
    ".jsonl": "lines", ".ndjson": "lines", ".json": "lines", ".csv": "lines", ".tsv": "lines",
    ".npy": "npy",
}
_LIBSVM_LINE = re.compile(rb"^\s*[-+]?[0-9.eEinfa]+(\s+qid:\S+)?(\s+[-+]?\d+:\S+)*\s*(#.*)?$")


# --------------------------------------------------------------------------- inputs


def labels_path(path: str) -> str:
    """Where the labels of ``X.npy`` live: ``X.npy.labels.npy`` (float64, shape (n,))."""
    return os.fspath(path) + ".labels.npy"


def expand_paths(paths) -> list[str]:
    """Files of a dataset: one file, several files, or the regular files of a directory (sorted).

    Sidecars (``*.lirs``), hidden files and ``*.labels.npy`` label files are not data.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            names = sorted(os.listdir(p))
            for name in names:
                full = os.path.join(p, name)
                if (name.startswith(".") or name.endswith(".lirs") or name.endswith(".labels.npy")
                        or not os.path.isfile(full)):
                    continue
                out.append(os.path.abspath(full))
            if not out:
                raise DataError(f"{p}: directory holds no data files")
        elif os.path.exists(p):
            if not os.path.isfile(p):
                raise DataError(f"{p}: not a regular file")
            out.append(os.path.abspath(p))
        else:
            raise FileNotFoundError(2, "No such file or directory", p)
    return out


def detect_format(path: str) -> str:
    """Guess a file's format from its extension, else from its first lines."""
    ext = os.path.splitext(path)[1].lower()
    if ext in _EXT_FORMAT:
        return _EXT_FORMAT[ext]
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if not head:
        raise DataError(f"{path}: empty file (0 bytes); nothing to index")
    nul = head.find(b"\0")
    if nul >= 0:
        raise DataError(f"{path}: byte {nul}: NUL byte in what should be text; for binary records use "
                        "--format fixed --record-size N")
    lines = [ln for ln in head.split(b"\n")[:-1] if ln.strip() and not ln.lstrip().startswith(b"#")][:20]
    if lines and all(_LIBSVM_LINE.match(ln) for ln in lines):
        return "libsvm"
    return "lines"


# --------------------------------------------------------------------------- chunked reading


def read_chunks(path: str, start: int, end: int, chunk: int):
    """Yield (buf uint8, nbytes, file offset) over [start, end) of ``path``, the next read in flight
    on a thread. Two buffers of ``chunk`` bytes alternate: a yielded buffer stays valid until the
    next one is asked for. A file that ends before ``end`` raises DataError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except (AttributeError, OSError):
            pass
        bufs = [np.empty(chunk, np.uint8), np.empty(chunk, np.uint8)]

        def read(i, off):
            want = min(chunk, end - off)
            mv = memoryview(bufs[i])[:want]
            got = 0
            while got < want:
                try:
                    r = os.preadv(fd, [mv[got:]], off + got)
                except OSError as e:  # EIO and kin: say which file and where (the CLI prints both)
                    e.filename, e.lirs_offset = path, off + got
                    raise
                if r == 0:
                    raise DataError(f"{path}: byte {off + got}: file ended early (expected {end} bytes); "
                                    "did it change while being read?")
                got += r
            return got

        with ThreadPoolExecutor(1) as ex:
            off, i = start, 0
            fut = ex.submit(read, 0, off) if off < end else None
            while fut is not None:
                n = fut.result()
                nxt = off + n
                fut = ex.submit(read, 1 - i, nxt) if nxt < end else None
                yield bufs[i], n, off
                off, i = nxt, 1 - i
    finally:
        os.close(fd)


def file_chunks(path: str, chunk_bytes: int):
    """The whole file in chunks (see :func:`read_chunks`)."""
    return read_chunks(path, 0, os.path.getsize(path), chunk_bytes)
