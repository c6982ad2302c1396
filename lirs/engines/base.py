"""What every engine shares: file opening, argument checks, read errors, aligned buffers."""
from __future__ import annotations

import errno as _errno
import logging
import os
import resource
import threading

import numpy as np

from ..constants import BLOCK, FD_MARGIN, TEMP_MARK
from ..kernels import io as K
from ..libc import Libc
from ..memory import zeros_held
from ..samples import same_samples
from ..api import depth_of, maybe_bool
from ..errors import LirsError, StaleIndexError, UsageError

O_DIRECT = getattr(os, "O_DIRECT", 0)
log = logging.getLogger("lirs.engines")

_U8 = np.dtype(np.uint8)
_EXTENT_ERRORS = {  # check_extents' verdicts, as the engines report them
    K.EXTENTS_BAD_FILE: "ext_file out of range [0, {files})",
    K.EXTENTS_NEGATIVE: "negative offset, size or buffer position",
    K.EXTENTS_OVERFLOW: "extents do not fit the buffer of {buf} bytes",
    K.EXTENTS_UNALIGNED: "O_DIRECT reads need 4096-aligned offsets, sizes, buffer and buffer positions",
}


class ReadError(LirsError, OSError):
    """A read failed: the message names the file and the byte offset. ``errno``/``filename`` are set."""


class EngineUnavailable(OSError):
    """This engine cannot work here: the kernel or the process refuses what it needs (not a file's error)."""


class DirectIOUnsupported(OSError):
    """The filesystem refuses ``O_DIRECT`` for this file (at open or at the first aligned read)."""


def aligned_empty(nbytes: int, align: int = BLOCK) -> np.ndarray:
    """Uninitialized uint8 array of ``nbytes`` whose first byte is ``align``-aligned (O_DIRECT needs it).

    The array keeps its over-allocated parent alive through ``.base``.
    """
    nbytes = int(nbytes)
    if nbytes < 0 or align <= 0 or align & (align - 1):
        raise ValueError(f"aligned_empty: need nbytes >= 0 and a power-of-two align, got {nbytes}, {align}")
    raw = np.empty(nbytes + align, np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip:skip + nbytes]


def room_for_files(n: int) -> int | None:
    """Raise this process's soft limit of open files toward its hard limit so that ``n`` more fit
    beside :data:`~lirs.constants.FD_MARGIN` others (a dataset of many files holds one descriptor
    a file); returns the soft limit (None: unlimited)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        open_now = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else FD_MARGIN
        want = n + open_now + FD_MARGIN
        if soft != resource.RLIM_INFINITY and soft < want and (hard == resource.RLIM_INFINITY or hard > soft):
            soft = want if hard == resource.RLIM_INFINITY else min(hard, want)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    except (ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def open_files(paths, direct: bool) -> list[int]:
    """Open every path read-only (with O_DIRECT when ``direct``); closes what it opened on failure.
    The soft limit of open files is raised for them where the hard limit allows (:func:`room_for_files`);
    where it still does not, OSError EMFILE says how many the dataset needs."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (O_DIRECT if direct else 0)
    fds: list[int] = []
    room_for_files(len(paths))
    try:
        for p in paths:
            try:
                fds.append(os.open(p, flags))
            except OSError as e:
                if direct and e.errno == _errno.EINVAL:
                    raise DirectIOUnsupported(e.errno, "the filesystem refuses O_DIRECT", p) from None
                if e.errno in (_errno.EMFILE, _errno.ENFILE):
                    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                    raise OSError(e.errno, f"too many open files: the dataset's {len(paths)} files are read "
                                  f"through a descriptor each, and this process may open {soft} (hard limit "
                                  f"{hard}); raise it (ulimit -n) or join the files into fewer", p) from None
                raise
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def reopen(fd: int, flags: int) -> int:
    """A new descriptor of the file open as ``fd``, with ``flags``: a new open file (its own reference
    count and offset) of the same file whatever happened to its path since (renamed over, removed),
    through ``/proc/self/fd``. OSError where that is not mounted."""
    return os.open(f"/proc/self/fd/{int(fd)}", flags)


def probe_direct(path: str) -> str | None:
    """None when ``path`` can be read with O_DIRECT, else the reason it cannot.

    Some filesystems accept ``O_DIRECT`` at open and refuse only the first read, so this does one
    real aligned read of the first block.
    """
    if not O_DIRECT:
        return "this platform has no O_DIRECT"
    try:
        fd = os.open(path, os.O_RDONLY | O_DIRECT | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == _errno.EINVAL:
            return f"the filesystem of {path} refuses O_DIRECT at open"
        raise
    try:
        buf = aligned_empty(BLOCK)
        try:
            os.preadv(fd, [memoryview(buf)], 0)
        except OSError as e:
            if e.errno in (_errno.EINVAL, _errno.EOPNOTSUPP, _errno.ENOTSUP):
                return f"an aligned O_DIRECT read of {path} failed ({os.strerror(e.errno)})"
            # EIO and kin are the device's answer, not a refusal of O_DIRECT: said as such
            e.filename, e.lirs_offset = path, 0
            raise
    finally:
        os.close(fd)
    return None


def probe_direct_write(dirpath: str) -> str | None:
    """None when files in the directory ``dirpath`` take O_DIRECT writes and reads, else the reason.

    For writers (``lirs shuffle``'s piles and output): writes one aligned block to a temporary file
    with O_DIRECT, then reads it back with :func:`probe_direct`, since tmpfs and some overlay
    filesystems refuse O_DIRECT only at the first real I/O. The file is removed.
    """
    if not O_DIRECT:
        return "this platform has no O_DIRECT"
    # named as lirs.litter.temp_name names temporaries (PID and thread id): one a killed run leaves
    # is removed by the next run's crash cleaner (lirs.litter.clean_dead_litter), which a random
    # name escaped (litter itself is not imported: it imports what imports the engines)
    probe = os.path.join(dirpath, f".lirs-direct{TEMP_MARK}{os.getpid()}-{threading.get_native_id()}")
    # a new file of its own: a name known in advance is never followed (a planted link, whose target
    # the aligned write would overwrite) nor reused; what is there is a leftover or a link, removed
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            fd = os.open(probe, flags, 0o600)
        except FileExistsError:
            os.unlink(probe)
            fd = os.open(probe, flags, 0o600)
    except OSError as e:
        return f"cannot create a file in {dirpath} ({os.strerror(e.errno)})"
    try:
        os.close(fd)
        fd = os.open(probe, os.O_WRONLY | O_DIRECT | getattr(os, "O_CLOEXEC", 0))
        try:
            buf = aligned_empty(BLOCK)
            buf[:] = 7
            if os.pwrite(fd, buf, 0) != BLOCK:
                return f"an aligned O_DIRECT write in {dirpath} came back short"
        finally:
            os.close(fd)
        return probe_direct(probe)
    except OSError as e:
        return f"O_DIRECT in {dirpath} failed ({os.strerror(e.errno)})"
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


class Engine:
    """Reads a batch of extents into a caller-owned buffer with one call.

    Subclasses implement :meth:`_read` (and may override :meth:`aread`). An engine opens its files
    at construction and belongs to the process that made it (rings and threads do not survive fork).

    Parameters
    ----------
    paths : sequence of str
        Data files; ``ext_file`` values index this list.
    direct : bool
        Open with ``O_DIRECT`` (offsets, sizes and buffer positions must then be 4096-aligned).
    depth : int or None
        Reads in flight (ring entries, threads, concurrent tasks); None for the engine's default.
    """

    name = "engine"
    default_depth = 32
    # every read checks that its files kept the size and mtime they had at open (StaleIndexError)
    check_changes = True

    def __init__(self, paths, *, direct: bool = True, depth: int | None = None):
        self.paths = tuple(os.fspath(p) for p in paths)
        self.direct = bool(maybe_bool("direct", direct) and O_DIRECT)
        self.depth = self.default_depth if depth is None else depth_of(depth)
        self.pid = os.getpid()
        self.reason = ""
        self.reindex = None  # the command that rebuilds the files' index, named in a StaleIndexError
        self.closed = False
        self.fds = np.asarray(open_files(self.paths, self.direct), np.int32)
        try:
            st = [os.fstat(int(fd)) for fd in self.fds]
            self.sizes = np.asarray([s.st_size for s in st], np.int64)
            # what the files were at open: a step that finds one moved raises StaleIndexError
            self.mtimes = np.asarray([s.st_mtime_ns for s in st], np.int64)
            self.idents = [(int(s.st_dev), int(s.st_ino)) for s in st]  # the files opened (as_indexed)
        except BaseException:
            for fd in self.fds:
                os.close(int(fd))
            raise
        # page-cache descriptors that continue short O_DIRECT reads (FUSE, network filesystems);
        # opened on first need, so a dataset of many files does not hold two descriptors per file
        self.cfds = np.full(len(self.fds), -1, np.int32)
        self._cfd_lock = threading.Lock()
        # reads in flight by thread: close() from another thread waits for them (unmapping a ring or
        # closing a loop a read is using crashed the process)
        self._readers, self._use = {}, threading.Condition()

    # ---- public ---------------------------------------------------------------------------
    def read(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos) -> np.ndarray:
        """Read extent i (``ext_nbytes[i]`` bytes at ``ext_offset[i]`` of file ``ext_file[i]``) into
        ``buf[buf_pos[i]:]``, all extents of the batch in one call.

        ``ext_file`` int32 (e,), ``ext_offset``/``ext_nbytes``/``buf_pos`` int64 (e,), ``buf`` a
        writable C-contiguous uint8 array (4096-aligned for O_DIRECT, see :func:`aligned_empty`).
        Returns int64 (e,): the bytes read per extent, short only where the file ends. Short answers
        before the end (FUSE, network filesystems) are continued; an ``O_DIRECT`` one that stops off
        a block boundary is continued through a page-cache descriptor of the file (:attr:`cfds`)
        up to the next boundary. Raises :class:`ReadError` naming the file and offset when a read
        fails.
        """
        args = self._check(ext_file, ext_offset, ext_nbytes, buf, buf_pos)
        if args[0].shape[0] == 0:
            return np.zeros(0, np.int64)
        me = threading.get_ident()
        with self._use:
            if self.closed:
                raise ValueError(f"{self.name} engine is closed")
            self._readers[me] = self._readers.get(me, 0) + 1
        try:
            got = self._read(*args)
            # after the read: a change before it or during it is caught before the bytes are decoded
            if self.check_changes:
                self.check_unchanged(args[0])
            return got
        finally:
            with self._use:
                left = self._readers.pop(me) - 1
                if left:
                    self._readers[me] = left
                self._use.notify_all()

    def stale(self, f: int, what: str, when: str = "while it was being read") -> StaleIndexError:
        """The error of file ``f`` found changed (``what``: how; ``when``)."""
        return changed_error(self.paths[f], what, when, self.reindex)

    def check_unchanged(self, ext_file) -> None:
        """Raise StaleIndexError when a file of ``ext_file`` (int32 file numbers) changed size or
        modification time since the engine opened it: one ``statx`` (:meth:`lirs.libc.Libc.size_mtime`) per distinct file. A dataset
        rewritten while it is read fails at the next step, naming the file, instead of decoding
        a mix of old offsets and new bytes into a DataError at a random batch."""
        n = len(self.fds)
        if n == 1 or ext_file.shape[0] == 1:
            files = [0] if n == 1 else [int(ext_file[0])]
        elif n <= 4096:  # a count over the dataset's files: linear, where unique sorts every extent
            files = np.flatnonzero(np.bincount(ext_file, minlength=n)).tolist()
        else:
            files = np.unique(ext_file).tolist()
        libc = Libc.get()
        for f in files:
            size, mtime_ns = libc.size_mtime(int(self.fds[f]))  # with the GIL held (os.fstat lets it go)
            if size != self.sizes[f] or mtime_ns != self.mtimes[f]:
                raise self.stale(f, f"its size changed ({int(self.sizes[f])} -> {size})" if size != self.sizes[f]
                                 else "its modification time moved")

    async def aread(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos, executor=None) -> np.ndarray:
        """:meth:`read` from a coroutine: the native call runs in ``executor`` (threads)."""
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, self.read, ext_file, ext_offset, ext_nbytes, buf, buf_pos)

    def close(self) -> None:
        """Close the files and stop any threads, once the reads other threads are running end (no
        read starts after). Safe to call twice."""
        me = threading.get_ident()
        with self._use:
            if self.closed:
                return
            self.closed = True
            self._use.wait_for(lambda: all(t == me for t in self._readers))
        try:
            self._close()
        finally:
            if os.getpid() == self.pid:
                for fd in (*self.fds, *self.cfds[self.cfds >= 0]):
                    try:
                        os.close(int(fd))
                    except OSError:
                        pass
                self.cfds[:] = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<{type(self).__name__} {self.name} direct={self.direct} depth={self.depth}>"

    # ---- for subclasses --------------------------------------------------------------------
    def _read(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos) -> np.ndarray:
        """Checked arguments in, int64 (e,) bytes read out: one :meth:`_batch` call, and another on
        the extents whose short ``O_DIRECT`` reads waited for a continuation descriptor."""
        e = ext_file.shape[0]
        got = zeros_held(e, np.int64)  # with the GIL held: a step of many extents (instance) made
        stall = zeros_held(e, np.uint8)  # each a GIL hand-off on the pool thread reading it
        stalled = self._batch(ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall)
        if stalled or (stalled is None and stall.any()):
            self._finish_stalled(ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall)
        return got

    def _batch(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall) -> bool | None:
        """Read the extents from ``got`` (int64 (e,), in/out) on; set ``stall`` (uint8 (e,)) where a
        continuation descriptor (:attr:`cfds`) is needed but not open; raise :class:`ReadError`.
        Returns whether an extent stalled, or None when the caller must look at ``stall``."""
        raise NotImplementedError

    def _pread_batch(self, fds, ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall, lc=None,
                     share=None) -> bool:
        """:meth:`_batch` by the nogil ``pread`` kernel (:func:`lirs.kernels.io.pread_worker`) through
        ``fds`` (int32 (files,): descriptors of this engine's files) with ``lc``'s pread (None:
        :meth:`Libc.get`'s): in the calling thread, or through ``share(args)``, which runs the kernel
        with ``args`` on several threads. The threads engine's reads, and a uring thread's without a ring."""
        e = ext_file.shape[0]
        errs = zeros_held(e, np.int32)
        counter = np.zeros(3, np.int64)  # next extent, failed extents, stalled extents
        lc = lc or Libc.get()
        args = (lc.pread, lc.errno_location, fds, self.cfds, self.sizes, ext_file, ext_offset, ext_nbytes,
                buf, buf_pos, self.direct, got, errs, stall, counter)
        if share is None:
            K.pread_worker(*args)
        else:
            share(args)
        if counter[1]:
            i = int(np.flatnonzero(errs)[0])
            raise self._error(errs[i], i, ext_offset[i] + got[i], ext_file, ext_nbytes)
        return bool(counter[2])

    def _finish_stalled(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall) -> None:
        # rare path (a filesystem that answers O_DIRECT reads short mid-file): open the page-cache
        # descriptors the stalled extents need, then resume them where they stopped
        while True:
            s = np.flatnonzero(stall)
            if not s.size:
                return
            self.continuation_fds(np.unique(ext_file[s]))
            sub_got = got[s]
            sub_stall = np.zeros(s.size, np.uint8)
            try:
                self._batch(ext_file[s], ext_offset[s], ext_nbytes[s], buf, buf_pos[s], sub_got, sub_stall)
            finally:
                got[s] = sub_got
            stall[:] = 0
            stall[s] = sub_stall

    def _page_cache_fd(self, f: int) -> int:
        """A page-cache descriptor of file ``f``: the file this engine opened, even where its path now
        names another; by its path where ``/proc`` is not mounted."""
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        try:
            return reopen(self.fds[f], flags)
        except FileNotFoundError:
            return os.open(self.paths[f], flags)

    def continuation_fds(self, files) -> np.ndarray:
        """Open (once) the page-cache descriptors of ``files`` (int array of file numbers) that
        continue short ``O_DIRECT`` reads; returns :attr:`cfds`, int32 (files,), -1 where not open."""
        with self._cfd_lock:
            if self.closed:
                raise ValueError(f"{self.name} engine is closed")
            for f in np.asarray(files, np.int64).tolist():
                if self.cfds[f] < 0:
                    try:
                        self.cfds[f] = self._page_cache_fd(f)
                    except OSError as e:
                        raise ReadError(e.errno, f"{os.strerror(e.errno)} ({self.name} engine) opening a "
                                                 "page-cache descriptor to continue a short O_DIRECT read",
                                        self.paths[f]) from None
                    log.info("%s: O_DIRECT reads came back short before the end of the file; "
                             "continuing them through the page cache", self.paths[f])
        return self.cfds

    def _close(self) -> None:
        pass

    def _check(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos):
        if self.closed:
            raise ValueError(f"{self.name} engine is closed")
        if os.getpid() != self.pid:
            raise RuntimeError(f"{self.name} engine was created in process {self.pid}; "
                               "create a new engine after fork")
        ext_file = np.ascontiguousarray(ext_file, np.int32)
        ext_offset = np.ascontiguousarray(ext_offset, np.int64)
        ext_nbytes = np.ascontiguousarray(ext_nbytes, np.int64)
        buf_pos = np.ascontiguousarray(buf_pos, np.int64)
        e = ext_file.shape[0]
        if not (ext_offset.shape == ext_nbytes.shape == buf_pos.shape == (e,)) or ext_file.ndim != 1:
            raise ValueError("ext_file, ext_offset, ext_nbytes and buf_pos must be 1-D of equal length")
        flags = buf.flags if isinstance(buf, np.ndarray) else None
        if flags is None or buf.dtype != _U8 or buf.ndim != 1 or not (flags.c_contiguous and flags.writeable):
            raise ValueError("buf must be a writable, C-contiguous 1-D uint8 array")
        if e == 0:
            return ext_file, ext_offset, ext_nbytes, buf, buf_pos
        if self.direct and buf.ctypes.data % BLOCK:
            raise ValueError(_EXTENT_ERRORS[K.EXTENTS_UNALIGNED])
        # the kernels write into buf at these positions: every extent checked, in one native pass
        bad = K.check_extents(ext_file, ext_offset, ext_nbytes, buf_pos, len(self.fds), buf.shape[0], self.direct)
        if bad != K.EXTENTS_OK:
            raise ValueError(_EXTENT_ERRORS[bad].format(files=len(self.fds), buf=buf.shape[0]))
        return ext_file, ext_offset, ext_nbytes, buf, buf_pos

    def _error(self, en: int, i: int, offset: int, ext_file, ext_nbytes) -> ReadError:
        f = int(ext_file[i])
        return ReadError(int(en), f"{os.strerror(int(en))} ({self.name} engine) reading "
                                  f"{int(ext_nbytes[i])} bytes at offset {int(offset)}", self.paths[f])


def stale_error(path: str, change: str, reindex: str | None,
                how: str = "its index no longer describes it") -> StaleIndexError:
    """The StaleIndexError of the data file ``path`` found changed after its index was opened:
    ``change`` says what and when (``"changed while it was being read (its size changed ...)"``),
    ``how`` what that does to the index, then the re-index advice (``reindex``, the ``lirs index``
    command; else one for ``path`` alone)."""
    return StaleIndexError(f"{path} {change}; {how}: re-run `{reindex or 'lirs index ' + path}`, then open a new "
                           f"Loader (or DataLoader): this one keeps the index it opened")


def changed_error(path: str, what: str, when: str, reindex: str | None) -> StaleIndexError:
    """The error of the data file ``path`` found changed (``what``: how; ``when``), :func:`stale_error`'s."""
    how = ("if its bytes changed, its index no longer describes it (`lirs index --check` tells)"
           if what.startswith("its modification") else "its index no longer describes it")
    return stale_error(path, f"changed {when} ({what})", reindex, how)


def check_unmoved(paths, found, stats, reindex: str | None) -> None:
    """StaleIndexError for the first of ``paths`` whose ``(size, mtime_ns, st_dev, st_ino)`` found now
    (``found[f]``) is not the one ``stats`` names (what its index's open found unchanged, with the hash
    of its sampled blocks, :attr:`lirs.index.Index.checked`; None: an index opened unchecked, nothing to
    compare). Another inode number alone passes where the sampled blocks are the same."""
    for f, (size, mtime, dev, ino, samples) in enumerate(stats or ()):
        now, now_mtime, *now_ident = (int(x) for x in found[f])
        if now == size and now_mtime == mtime and (now_ident == [dev, ino] or same_samples(paths[f], size, samples)):
            continue  # the file checked; or its inode renumbered (FUSE, a network filesystem), its sampled bytes kept
        why = (f"its size changed ({size} -> {now})" if now != size else "its modification time moved"
               if now_mtime != mtime else "another file was renamed over it (same size and modification time)")
        raise changed_error(paths[f], why, "since its index was checked at the Loader's open", reindex)


def as_indexed(engine: Engine, stats, reindex: str | None = None) -> Engine:
    """``engine``, once each file it opened has the size and modification time ``stats`` names
    ((size, mtime_ns, st_dev, st_ino, sample hash) a file: what its index's open found unchanged, :attr:`lirs.index.Index.checked`;
    None: an index opened unchecked), else StaleIndexError, the engine closed. A Loader opens its files at its
    first epoch: a file rewritten, appended to or renamed over since its index was checked is
    caught here, before an offset of the old file is read in the new one. ``reindex``: the command
    that rebuilds the index (named in this and the engine's later errors)."""
    engine.reindex = reindex
    try:
        check_unmoved(engine.paths, [(s, m, *i) for s, m, i in zip(engine.sizes, engine.mtimes, engine.idents)], stats,
                      reindex)
    except StaleIndexError:
        engine.close()
        raise
    return engine
