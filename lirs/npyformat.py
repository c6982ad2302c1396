"""The ``.npy`` format's details lirs reads itself: a file's header (every version, a 3.0 one in
UTF-8) and a record dtype's description as a sidecar's JSON gives it back."""
from __future__ import annotations

import ast
import contextlib
import math
import os
import stat
import struct

import numpy as np

from .errors import DataError
from .preads import pread_full, pread_into

# a header's most bytes: numpy refuses more than 10,000 by default (a structured dtype of many fields
# passes it); this bounds what ast.literal_eval is given, as numpy's limit does
MAX_HEADER_BYTES = 1 << 20


def npy_header(f, version: tuple) -> tuple:
    """``(shape, fortran_order, dtype)`` of the header at ``f`` (after the magic of ``version``):
    latin-1 before 3.0, UTF-8 in 3.0 (numpy's reader of 2.0 headers decodes a 3.0 one as latin-1,
    so a field name such as '温度' came back garbled). ValueError for a header that is none."""
    wide = version != (1, 0)
    raw = f.read(4 if wide else 2)
    if len(raw) < (4 if wide else 2):
        raise ValueError("the file ends inside the header's length")
    size = struct.unpack("<I" if wide else "<H", raw)[0]
    if size > MAX_HEADER_BYTES:
        raise ValueError(f"a header of {size} bytes; at most {MAX_HEADER_BYTES} are read")
    text = f.read(size)
    if len(text) < size:
        raise ValueError(f"the file ends inside the {size}-byte header")
    try:
        d = ast.literal_eval(text.decode("utf8" if version == (3, 0) else "latin1"))
    except (SyntaxError, ValueError, UnicodeDecodeError, MemoryError, RecursionError) as e:
        raise ValueError(f"the header {text[:80].decode('latin1').rstrip()!r} is no Python literal "
                         f"({type(e).__name__})") from None
    if not isinstance(d, dict) or sorted(d) != ["descr", "fortran_order", "shape"]:
        raise ValueError(f"the header is not a dict of descr, fortran_order and shape: {text[:80]!r}")
    shape, fortran = d["shape"], d["fortran_order"]
    # type(): a bool is an int to isinstance, and numpy refuses (True, 3) as a shape
    if not isinstance(shape, tuple) or not all(type(s) is int for s in shape) or not isinstance(fortran, bool):
        raise ValueError(f"the header's shape {shape!r} or fortran_order {fortran!r} is not a tuple of ints and a bool")
    try:
        dtype = np.lib.format.descr_to_dtype(d["descr"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"the header's descr {d['descr']!r} is no dtype ({e})") from None
    return shape, fortran, dtype


class _PreadFile:
    """The ``read``/``tell`` of a file object over ``fd`` by pread, for a header: a failed read names
    ``path`` and the byte (:func:`lirs.inputs.pread_into`), and reads no more than asked."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path, self.pos = fd, path, 0

    def read(self, n: int) -> bytes:
        b = pread_full(self.fd, n, self.pos, self.path)
        self.pos += len(b)
        return b

    def tell(self) -> int:
        return self.pos


class NpyRows:
    """The array of the ``.npy`` file ``path`` read by pread, never memory-mapped: a file truncated
    under a map (``np.save`` rewriting it in place) kills the process with SIGBUS, where a short
    read here is a DataError naming the file. ``rows[a:b]`` reads those rows alone (memory bounded
    by the slice), ``np.asarray(rows)`` the whole array. No descriptor is held between reads (an
    index of a directory of many labelled ``.npy`` files holds one of these a file): each read
    opens the file and checks it still has the size whose header was read, else a DataError (its
    values no longer where the header says). A file only touched reads on, as a data file does (a
    fingerprint, :func:`lirs.freshness.fingerprint`, tells a rewrite of the same size: the index's
    build and open check one; an inode is not compared: some FUSE and network filesystems change it
    for an unchanged file). ValueError or EOFError (as
    ``np.load``) for a file that is no ``.npy`` array of plain values, or not the size its header
    promises (bytes after the values are refused, as ``lirs index`` refuses them after a data
    file's records); DataError for one that is not a regular file (a FIFO, device, socket or
    directory), before a read that would block on it."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        with self._opened() as fd:
            f = _PreadFile(fd, self.path)  # not a buffered file: its 8 KiB reads' errors named no file
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0), (3, 0)):
                raise ValueError(f"format version {version[0]}.{version[1]}; expected 1.0, 2.0 or 3.0")
            shape, fortran, self.dtype = npy_header(f, version)
            self.offset = f.tell()
            st = os.fstat(fd)
        self._size = st.st_size
        self._whole = None  # a Fortran-order array, read once (its rows are not contiguous)
        if self.dtype.hasobject:
            raise ValueError("it holds Python objects (pickled), not plain values")
        if any(s < 0 for s in shape):
            raise ValueError(f"a negative dimension in its shape {shape}")
        self.shape, self.ndim = tuple(shape), len(shape)
        self._fortran = fortran and self.ndim > 1  # rows not contiguous: read whole, then indexed
        self._row = self.dtype.itemsize * math.prod(self.shape[1:])
        need = self.offset + self.dtype.itemsize * math.prod(self.shape)
        size = st.st_size
        if size < need:
            raise ValueError(f"the file has {size} bytes, its header promises {need}")
        if size > need:  # values appended without a new header would never be read
            raise ValueError(f"the file has {size} bytes, its header promises {need} (shape {self.shape}, dtype "
                             f"{self.dtype}): {size - need} bytes after its values, never read (save it again)")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        a = self._whole
        if a is None:
            a = self._read(0, math.prod(self.shape) * self.dtype.itemsize)
            a = a.reshape(self.shape, order="F" if self._fortran else "C")
            if self._fortran:  # sliced a chunk at a time (lirs shuffle): read once, not once a chunk
                self._whole = a
        return a if dtype is None else a.astype(dtype)

    @contextlib.contextmanager
    def _opened(self):
        # O_NONBLOCK: opening a FIFO put in the file's place would otherwise wait for a writer, forever
        # (a regular file's reads ignore the flag); the fstat then refuses what is not a regular file
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise DataError(f"{self.path}: not a regular file (a FIFO, device, socket or directory); "
                                "expected a .npy file")
            yield fd
        finally:
            os.close(fd)

    def __getitem__(self, key):
        if self.ndim and not self._fortran:
            if isinstance(key, slice) and key.step in (None, 1):
                a, b, _ = key.indices(self.shape[0])
                return self._read(a * self._row, max(0, b - a) * self._row).reshape((-1,) + self.shape[1:])
            if isinstance(key, (int, np.integer)):
                i = range(self.shape[0])[key]  # IndexError past either end, as an array's
                return self[i:i + 1][0]
        return np.asarray(self)[key]

    def _read(self, at: int, nbytes: int) -> np.ndarray:
        """``nbytes`` from byte ``at`` of the data as values; DataError on a short read (the file
        was cut since its header was read: a rewrite in place)."""
        buf = np.empty(nbytes, np.uint8)
        with self._opened() as fd:
            st = os.fstat(fd)
            if st.st_size != self._size:
                raise DataError(f"{self.path}: its size changed since its header was read ({self._size} -> "
                                f"{st.st_size} bytes): rewritten or replaced; expected the values its header promises")
            got = pread_into(fd, memoryview(buf), self.offset + at, self.path)
        if got < nbytes:
            raise DataError(f"{self.path}: byte {self.offset + at + got}: the file ends inside the values its header "
                            "promises; it was cut while it was read (rewritten in place?)")
        return buf.view(self.dtype)


def descr_from_json(d):
    """A dtype description (:func:`numpy.lib.format.dtype_to_descr`) as JSON gives it back, lists
    where numpy wrote tuples, made tuples again at every level: a field's ``(title, name)``, a
    nested record's fields, a sub-array's shape."""
    if not isinstance(d, list):
        return d  # a type string, such as "<f4"
    out = []
    for name, typ, *shape in d:
        item = (tuple(name) if isinstance(name, list) else name, descr_from_json(typ))
        out.append(item + ((tuple(shape[0]) if isinstance(shape[0], list) else shape[0],) if shape else ()))
    return out


def header_bytes(dtype, shape) -> bytes:
    """The ``.npy`` header of a C-order array of ``dtype`` and ``shape``, byte for byte as
    :func:`numpy.save` writes it: format 1.0, 2.0 when it does not fit, 3.0 (UTF-8) when a field
    name is not latin-1 (numpy's writers of 1.0 and 2.0 refuse such a name)."""
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
         "shape": tuple(int(x) for x in shape)}
    text = "{" + "".join(f"'{k}': {d[k]!r}, " for k in sorted(d)) + "}"
    text += " " * (21 - len(repr(d["shape"][0]))) if d["shape"] else ""  # room to grow, as numpy leaves
    for version, fmt in (((1, 0), "<H"), ((2, 0), "<I"), ((3, 0), "<I")):
        try:
            raw = text.encode("utf8" if version == (3, 0) else "latin1")
        except UnicodeEncodeError:
            continue
        pad = 64 - (8 + struct.calcsize(fmt) + len(raw) + 1) % 64
        if len(raw) + 1 + pad < 1 << (8 * struct.calcsize(fmt)):
            return np.lib.format.magic(*version) + struct.pack(fmt, len(raw) + 1 + pad) + raw + b" " * pad + b"\n"
    raise ValueError(f"a .npy header of {len(text)} characters")
