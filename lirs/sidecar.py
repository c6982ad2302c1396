"""The on-disk index format (``DATA.lirs``): a preamble, named little-endian arrays, a JSON header.

Layout: a 64-byte preamble (magic, version, flags, header offset, header length, CRC-32 of the
header), then arrays aligned to 64 bytes, then the JSON header naming every array (dtype, offset,
count), the data files (absolute and relative path, fingerprint) and what the scan learned.
A sidecar is written to a temporary file beside its destination, fsynced and renamed: a crash
never leaves a half-written index under the final name. This module knows bytes and headers, not
records: :mod:`lirs.index` turns a sidecar into an :class:`~lirs.index.Index`.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import stat
import struct
import weakref
import zlib

import numpy as np

from .errors import IndexFormatError, UsageError
from .inputs import absolute, expand_paths, labels_candidates
from .preads import pread_full, pread_into, read_at
from .litter import (clean_dead_litter, clean_dead_temps, fsync_dir, named, open_locked, release, remove_quietly,
                     temp_name)
from .mounts import map_safe
from .relpaths import beside
from .offsets import OffsetEncoder, OffsetTable

log = logging.getLogger("lirs.index")

MAGIC = b"LIRSIDX\x00"
VERSION = 2  # 2: content checksums per MiB (content_sums), verified when size or mtime move
_PREAMBLE = struct.Struct("<8sIIQQI")  # magic, version, flags, header_off, header_len, header_crc
_PREAMBLE_SIZE = 64
_ALIGN = 64
SIDECAR_SUFFIX = ".lirs"


# --------------------------------------------------------------------------- reads


def belonging(path: str) -> dict:
    """The files that belong to the input ``path`` (whether they exist or not), each with what it
    is: the data, its index, its labels files, the granularity `lirs bench --auto` saved for it. An
    output written over one would be taken for it."""
    from .recommendation import RECOMMENDATION_SUFFIX

    path = os.fspath(path)
    return {path: "the data", sidecar_path(path): "the index", **{c: "the labels file" for c in labels_candidates(path)},
            sidecar_path(path) + RECOMMENDATION_SUFFIX: "the bench recommendation (lirs bench --auto)"}


def belonging_to(inputs) -> dict:
    """{path: "the data of the input P", ...}: what :func:`belonging` names for every path of
    ``inputs``, as :func:`lirs.litter.out_dir` takes the files an output may not replace."""
    return {q: f"{kind} of the input {os.fspath(p)}" for p in inputs for q, kind in belonging(p).items()}


def belonging_to_input(path) -> dict:
    """:func:`belonging_to` of a command's input ``path`` and of every data file it names: the
    files of a directory, or those a sidecar indexes (read from its header); an output may replace
    none of them."""
    path = os.fspath(path)
    files, dirs = [], [path] if os.path.isdir(path) else []
    if os.path.isdir(path):
        files = expand_paths(path)
    elif is_sidecar_path(path) and os.path.isfile(path):
        try:
            header, _ = read_header(path)
            base = os.path.dirname(absolute(path))
            files = beside(base, [fi["relpath"] for fi in header["files"]])
            dirs = beside(base, header.get("meta", {}).get("directories", []))
        except (OSError, IndexFormatError):
            pass  # not an index: the command itself says so
    # a new file in a directory given as data joins the dataset (its next open refuses it as new)
    return {**belonging_to([path, *files]), **{d: f"a directory of the input {path}" for d in dirs}}


def is_sidecar_path(path) -> bool:
    """Whether ``path`` names a sidecar (``*.lirs``, not a directory: a data directory may be
    named so, and its sidecar is ``DIR.lirs.lirs``)."""
    path = os.fspath(path)
    return path.endswith(SIDECAR_SUFFIX) and not os.path.isdir(path)


def sidecar_path(paths) -> str:
    """Default sidecar path: ``DATA.lirs`` for one file, ``DIR.lirs`` beside a directory."""
    if isinstance(paths, (str, bytes, os.PathLike)):  # one path (bytes too: not a sequence of ints)
        paths = [paths]
    paths = [os.fsdecode(p) for p in paths]
    if len(paths) != 1:
        raise UsageError("several data files form one dataset: name its sidecar with -o NAME.lirs")
    p = paths[0].rstrip(os.sep) or paths[0]
    if os.path.basename(p) == "." or ".." in p.split(os.sep):  # DIR.lirs beside the directory, not "..lirs"
        p = absolute(p)  # inside it; and where the kernel finds the data (abspath folds "LINK/.." by text)
    return p + SIDECAR_SUFFIX


def check_replaceable(dest: str) -> None:
    """UsageError when ``dest`` is a file that is not a lirs index (its first bytes are not
    :data:`MAGIC`): every index lirs writes starts so (renamed in whole), so such a file is
    someone's data named like a sidecar, which writing the index would replace."""
    if os.path.isfile(dest) and read_at(dest, len(MAGIC)) != MAGIC:
        raise UsageError(f"{dest} exists and is not a lirs index (its first bytes are not an index's); "
                         "move it away, or name the sidecar elsewhere with -o NAME.lirs")


class SidecarWriter:
    """Streams arrays into a temp file next to the destination, then fsyncs and renames.

    ``begin(name, dtype)`` / ``append(chunk)`` ... then ``end()`` (or the next ``begin``,
    ``add`` or ``commit``) write one array. The array ``"offsets"`` is stored compactly (see
    :class:`OffsetTable`): as ``offsets_rel`` (streamed), ``offsets_base`` and ``offsets_wide``.
    """

    def __init__(self, dest: str):
        self.dest = absolute(dest)
        if os.path.isdir(self.dest):
            raise UsageError(f"{self.dest}: the index path is a directory; remove it, or name the sidecar "
                             "elsewhere with -o NAME.lirs")
        check_replaceable(self.dest)
        clean_dead_litter(os.path.dirname(self.dest))  # what a killed `lirs index` or shuffle left here
        self.tmp = temp_name(self.dest)
        try:  # held: live to the cleaner of another host, until renamed or removed
            self.f, self.tmp, self._held = open_locked(self.dest)
        except OSError as e:  # a directory that cannot take it: name the index, not a temporary
            raise self._named(e)
        self.f.write(b"\0" * _PREAMBLE_SIZE)
        self.arrays: dict = {}
        self._cur: str | None = None
        self._enc: OffsetEncoder | None = None
        self._offset_view: tuple | None = None

    @property
    def _open(self) -> str | None:
        return self._cur

    @_open.setter
    def _open(self, name) -> None:
        if name is None:
            self._finish()
        self._cur = name

    def end(self) -> None:
        """Close the array being streamed by ``begin``/``append``."""
        self._open = None

    def _finish(self) -> None:
        """Close the array being streamed (the compact offsets need their last block and bases)."""
        enc, self._enc = self._enc, None
        if enc is None:
            return
        self._cur = "offsets_rel"
        self._write(enc.encode(np.empty(0, np.int64), final=True))
        rel = self.arrays["offsets_rel"]
        bases, wides = enc.bases(), enc.wides()
        self._cur = None
        self.add("offsets_base", bases)
        self.add("offsets_wide", wides)
        self._offset_view = (rel["offset"], rel["count"], bases, wides)

    def _pad(self):
        pos = self.f.tell()
        if pos % _ALIGN:
            self._put(b"\0" * (_ALIGN - pos % _ALIGN))

    def begin(self, name: str, dtype) -> None:
        self._open = None
        self._pad()
        if name == "offsets":
            self._enc = OffsetEncoder()
            name, dtype = "offsets_rel", np.uint32
        dt = np.dtype(dtype).newbyteorder("<")
        self.arrays[name] = {"dtype": dt.str, "offset": self.f.tell(), "count": 0, "crc32": 0}
        self._cur = name

    def _write(self, arr: np.ndarray) -> None:
        spec = self.arrays[self._cur]
        a = np.ascontiguousarray(arr, dtype=np.dtype(spec["dtype"]))
        b = a.tobytes() if a.size < 4096 else memoryview(a).cast("B")
        self._put(b)
        spec["crc32"] = zlib.crc32(b, spec["crc32"])  # checked by `lirs info --verify`
        spec["count"] += int(a.size)

    def _put(self, b) -> None:
        """Write ``b`` to the temp file; an OSError (ENOSPC, EDQUOT, EIO) names the index."""
        try:
            self.f.write(b)
        except OSError as e:
            named(e, self.dest)
            raise

    def append(self, arr: np.ndarray) -> None:
        if self._enc is not None:
            arr = self._enc.encode(np.ascontiguousarray(arr, np.int64))
        self._write(arr)

    def append_blocks(self, bases: np.ndarray, rel: np.ndarray) -> None:
        """Stream whole blocks of offsets as they are compacted (``bases`` int64 (k,), ``rel``
        uint32 (1024 k,); see :meth:`lirs.offsets.OffsetEncoder.take_blocks`)."""
        self._enc.take_blocks(bases)
        self._write(rel)

    def add(self, name: str, arr: np.ndarray) -> None:
        self.begin(name, np.asarray(arr).dtype)
        self.append(np.asarray(arr))
        self._open = None

    def add_offsets(self, offsets) -> None:
        """Write an :class:`OffsetTable` (or int64 offsets) as the index's offsets."""
        if isinstance(offsets, OffsetTable):
            self.add("offsets_rel", np.asarray(offsets.rel, np.uint32))
            self.add("offsets_base", np.asarray(offsets.base, np.int64))
            self.add("offsets_wide", np.asarray(offsets.wide, np.int64))
            self._offset_view = None
        else:
            self.add("offsets", np.asarray(offsets, np.int64))

    def offsets_view(self) -> OffsetTable:
        """The offsets streamed so far, read back from the temp file (after the stream closed)."""
        self._open = None
        self.f.flush()
        off, count, bases, wides = self._offset_view
        rel = np.memmap(self.tmp, dtype=np.uint32, mode="r", offset=off, shape=(count,)) if count else \
            np.empty(0, np.uint32)
        return OffsetTable(bases, rel, wides)

    def commit(self, header: dict) -> str:
        """Write ``header`` and put the sidecar under its name, durably; returns that name."""
        self.seal(header)
        return self.publish()

    def seal(self, header: dict) -> None:
        """Write ``header`` and make the temp file durable, still under its temp name (a build
        may yet throw it away: :meth:`abort`)."""
        self._open = None
        header = dict(header)
        header["arrays"] = self.arrays
        blob = json.dumps(header, sort_keys=True).encode()
        self._pad()
        hoff = self.f.tell()
        try:
            self.f.write(blob)
            self.f.seek(0)
            self.f.write(_PREAMBLE.pack(MAGIC, VERSION, 0, hoff, len(blob), zlib.crc32(blob)))
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
        except OSError as e:  # ENOSPC at the flush: say which index
            raise self._named(e)

    def publish(self) -> str:
        """Rename the sealed temp file to the sidecar's name, durably; returns that name."""
        try:
            os.replace(self.tmp, self.dest)
        except OSError as e:  # EISDIR at the rename: say which index
            raise self._named(e)
        finally:
            release(self._held)
            self._held = None
        fsync_dir(os.path.dirname(self.dest))
        return self.dest

    def _named(self, e: OSError) -> OSError:
        return named(e, self.dest, self.tmp)

    def abort(self) -> None:
        try:
            self.f.close()
        finally:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
            release(self._held)
            self._held = None


def read_header(sidecar: str) -> tuple[dict, int]:
    """Return the JSON header of a sidecar and its file size; raises IndexFormatError."""
    try:
        return _read_header(sidecar)
    except OSError as e:  # EIO in the header: say which index
        e.filename = e.filename or sidecar
        raise


def _read_header(sidecar: str) -> tuple[dict, int]:
    with open(sidecar, "rb") as f:
        header, size, _, _ = _header_of(f.fileno(), sidecar)
    return header, size


def _header_of(fd: int, sidecar: str) -> tuple[dict, int, int, int]:
    """(header, file size, header offset, header CRC-32) of the sidecar open as ``fd``."""
    pre = pread_full(fd, _PREAMBLE_SIZE, 0, sidecar)
    size = os.fstat(fd).st_size
    if len(pre) < _PREAMBLE.size or pre[:8] != MAGIC:
        raise IndexFormatError(f"{sidecar}: not a lirs index (bad magic); build one with `lirs index`")
    magic, version, flags, hoff, hlen, crc = _PREAMBLE.unpack_from(pre)
    if version != VERSION:
        raise IndexFormatError(f"{sidecar}: index version {version}, this lirs reads {VERSION}; "
                               "re-run `lirs index`")
    if hoff + hlen > size:
        raise IndexFormatError(f"{sidecar}: truncated or corrupt index ({size} bytes, header at {hoff}+{hlen}); "
                               "re-run `lirs index`")
    blob = pread_full(fd, hlen, hoff, sidecar)
    if zlib.crc32(blob) != crc:
        raise IndexFormatError(f"{sidecar}: corrupt index header (checksum mismatch); re-run `lirs index`")
    return json.loads(blob), size, hoff, crc


class ArrayFile:
    """A read-only descriptor of the sidecar whose arrays were mapped through it (the same file,
    even if the path is renamed over meanwhile): a few elements of an array can be read with
    pread instead of through its map. A page of a shared map that a process touched stays in its
    RSS until released, and recent kernels map a whole large page-cache folio (up to 2 MiB) per
    fault. The descriptor is closed when the last reference goes."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = int(fd)
        weakref.finalize(self, os.close, self.fd)


def offsets_of(arrays: dict, header: dict | None = None, file: ArrayFile | None = None) -> OffsetTable | None:
    """The offset table of a sidecar's arrays; with the ``header`` and the :class:`ArrayFile` they
    were mapped through, the table knows where its ``rel`` lies in that file."""
    if "offsets_rel" in arrays:
        rel = arrays["offsets_rel"]
        where = None
        if file is not None and len(rel):  # (a file is given when the arrays are maps of it)
            where = (file, int(header["arrays"]["offsets_rel"]["offset"]))
        return OffsetTable(arrays["offsets_base"], rel, arrays.get("offsets_wide"), where)
    if "offsets" in arrays:  # plain int64 offsets (an index written before the compact form)
        return OffsetTable.from_array(np.asarray(arrays["offsets"]))
    return None


# arrays read whole (never mapped) and checked against their CRC-32 at every open: small, and what
# `lirs info` counts (a short or corrupt read must never become a wrong count), and the offset table's
# block bases (8 B per 1024 records: a flipped base word moved 1024 records' starts within their file,
# which no plausibility check sees) and wide blocks (8 B a record of a block spanning 4 GiB or more);
# its 4 B a record are checked for plausibility alone
_READ_WHOLE = ("label_codes", "label_values", "content_sums", "scan_marks", "file_starts", "data_ends",
               "header_sizes", "offsets_base", "offsets_wide")


def read_sidecar(sidecar: str, *, mmap: bool = True) -> tuple[dict, dict, ArrayFile | None]:
    """(header, arrays, :class:`ArrayFile`) of a sidecar, read through one descriptor: an index
    rebuilt (renamed over) meanwhile is never a new file's arrays checked against the old header
    (a sound index called corrupt). The arrays by name: read-only memory maps (or read into memory
    with ``mmap=False``, on FUSE and network filesystems, and for the small arrays of _READ_WHOLE,
    whose CRC-32 is checked), and the :class:`ArrayFile` they were mapped through (None when
    nothing is mapped). Raises IndexFormatError when one lies past the end of the file, is read
    short or fails its checksum; a failed read raises OSError naming the sidecar and the byte."""
    try:
        with open(sidecar, "rb") as f:
            header, size, _, _ = _header_of(f.fileno(), sidecar)
            return (header, *_arrays_of(sidecar, f, header, size, mmap))
    except OSError as e:  # EIO: say which index
        e.filename = e.filename or sidecar
        raise


def _arrays_of(sidecar: str, f, header: dict, size: int, mmap: bool) -> tuple[dict, ArrayFile | None]:
    arrays, mapped = {}, False
    mmap = mmap and map_safe(sidecar)
    for name, spec in header["arrays"].items():
        dt = np.dtype(spec["dtype"])
        end = spec["offset"] + spec["count"] * dt.itemsize
        if end > size:
            raise IndexFormatError(f"{sidecar}: truncated or corrupt index (array {name} ends at {end}, file has "
                                   f"{size}); re-run `lirs index`")
        if spec["count"] == 0:
            arrays[name] = np.empty(0, dt)
        elif mmap and name not in _READ_WHOLE:
            arrays[name], did = _map_or_read(sidecar, f, dt, spec, name)
            mapped = mapped or did
        else:
            arrays[name] = read_array(sidecar, f.fileno(), dt, spec, name, check=name in _READ_WHOLE)
    return arrays, ArrayFile(sidecar, os.dup(f.fileno())) if mapped else None


def read_array(sidecar: str, fd: int, dt: np.dtype, spec: dict, name: str, check: bool = False) -> np.ndarray:
    """Array ``name`` of the sidecar (``spec``: offset, count, crc32) read into memory with pread,
    every byte accounted for: a short read raises IndexFormatError, a failed one OSError naming the
    sidecar and the byte; with ``check``, its CRC-32 is compared too. Returns ``dt`` (count,)."""
    out = np.empty(int(spec["count"]), dt)
    mv = memoryview(out).cast("B")
    off = int(spec["offset"])
    got = pread_into(fd, mv, off, sidecar)
    if got < len(mv):
        raise IndexFormatError(f"{sidecar}: byte {off + got}: array {name} ends early ({got} of {len(mv)} "
                               "bytes): the index was truncated or replaced; re-run `lirs index`")
    if check and "crc32" in spec and zlib.crc32(mv) != spec["crc32"]:
        raise IndexFormatError(f"{sidecar}: array {name} at byte {off} is corrupt (CRC-32 {zlib.crc32(mv):08x}, "
                               f"written {spec['crc32']:08x}); see `lirs index --check`, or re-run `lirs index`")
    return out


def _map_or_read(sidecar: str, f, dt: np.dtype, spec: dict, name: str) -> tuple[np.ndarray, bool]:
    """A read-only memory map of one array through the open file ``f``, or the array read into
    memory where the filesystem cannot map files (ENODEV, EINVAL, EACCES: some FUSE and network
    filesystems); and whether it is a map."""
    try:
        return np.memmap(f, dtype=dt, mode="r", offset=spec["offset"], shape=(spec["count"],)), True
    except OSError as e:
        if e.errno not in (errno.ENODEV, errno.EINVAL, errno.EACCES, errno.ENOTSUP):
            raise
        log.info("%s: cannot memory-map (%s); reading the index into memory", sidecar, e.strerror)
    return read_array(sidecar, f.fileno(), dt, spec, name), False


def rewrite_header(sidecar: str, update, header_crc: int | None = None) -> int | None:
    """Replace the JSON header of ``sidecar`` by ``update(header)`` (a new dict), atomically: the
    arrays are copied byte for byte into a temp file beside it (the sidecar's mode kept), which is
    fsynced and renamed. Returns the new header's CRC-32. Header and arrays are read through one
    descriptor, and nothing is written (None returned) where the sidecar is not the one whose header
    has CRC ``header_crc`` or was renamed over while copied: another process rebuilt the index, and
    an old header over its arrays would corrupt it. Raises OSError where the directory cannot be
    written (a read-only mount), the sidecar is another user's, or its group is one the new file
    cannot be given (its group's readers would lose it): nothing is replaced then. A symlinked sidecar's target is
    rewritten (the rename would put a file in the link's place, leaving the target stale)."""
    sidecar = os.path.realpath(sidecar)
    with open(sidecar, "rb") as f:
        header, size, hoff, crc = _header_of(f.fileno(), sidecar)
        if header_crc is not None and crc != header_crc:
            return None
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid():  # the new file would be ours, with our umask: others could lose it
            raise PermissionError(errno.EPERM, "the index belongs to another user", sidecar)
        clean_dead_temps(sidecar)
        out, tmp, held = open_locked(sidecar)  # released once renamed (or removed): see SidecarWriter
        try:
            with out:
                if os.fstat(out.fileno()).st_gid != st.st_gid:  # its group keeps reading it (not our group)
                    try:
                        os.fchown(out.fileno(), -1, st.st_gid)
                    except PermissionError:  # a group we are not in: the caller records elsewhere
                        raise PermissionError(errno.EPERM, f"its group ({st.st_gid}) cannot be kept on a rewritten "
                                              "copy (not one of ours)", sidecar) from None
                os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))  # as readable as it was (not our umask's)
                f.seek(0)
                left = hoff
                while left > 0:
                    b = f.read(min(left, 16 << 20))
                    if not b:
                        raise IndexFormatError(f"{sidecar}: truncated or corrupt index (ends before its header "
                                               f"at {hoff}); re-run `lirs index`")
                    out.write(b)
                    left -= len(b)
                blob = json.dumps(update(header), sort_keys=True).encode()
                out.write(blob)
                out.seek(0)
                out.write(_PREAMBLE.pack(MAGIC, VERSION, 0, hoff, len(blob), zlib.crc32(blob)))
                out.flush()
                os.fsync(out.fileno())
            if not _names(sidecar, f.fileno()):
                os.unlink(tmp)
                return None
            os.replace(tmp, sidecar)
        except BaseException as e:
            remove_quietly(tmp)
            if isinstance(e, OSError):  # a write()'s ENOSPC names no file: say which index
                named(e, sidecar, tmp)
            raise
        finally:
            release(held)
    fsync_dir(os.path.dirname(sidecar))
    return zlib.crc32(blob)


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def verify_arrays(sidecar: str, header: dict, arrays: dict) -> list[str]:
    """The arrays whose bytes no longer match the CRC-32 written with them (flipped bits, a torn
    copy): one message per bad array; empty when all match. Arrays of an index written before
    checksums existed are reported as unverifiable."""
    bad = []
    for name, spec in header["arrays"].items():
        if "crc32" not in spec:
            bad.append(f"{sidecar}: array {name} has no checksum (written by an older lirs; re-run `lirs index`)")
            continue
        got = zlib.crc32(np.ascontiguousarray(arrays[name]).view(np.uint8)) if spec["count"] else 0
        if got != spec["crc32"]:
            bad.append(f"{sidecar}: array {name} is corrupt (CRC-32 {got:08x}, written {spec['crc32']:08x}); "
                       "re-run `lirs index`")
    return bad
