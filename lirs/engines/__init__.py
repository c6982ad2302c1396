"""Engines: read a batch of aligned extents into a caller-owned buffer with one call.

=========  =====================================================================================
uring      io_uring through raw syscalls; a whole batch submitted and reaped in native code
threads    ``pread`` from a pool of threads running a nogil kernel (no GIL held while reading)
aiofiles   the asyncio baseline: one awaited ``preadv`` per read (for comparison)
buffered   page-cache ``pread`` (no O_DIRECT): tmpfs, some overlays, warm-cache use
=========  =====================================================================================

:func:`open_engine` with ``engine="auto"`` takes the first that works here, in the order
uring, threads (or buffered when the filesystem refuses O_DIRECT), and logs which one and why.
The environment variable ``LIRS_ENGINE`` replaces ``"auto"``.

Every engine returns full extents except where a file really ends: a short answer before the end
(FUSE and network filesystems give them, also to ``O_DIRECT`` reads) is continued, never taken for
the end of the file (see :mod:`lirs.kernels.io`).

Every engine has the same small protocol::

    eng = open_engine(paths)                 # opens the files
    got = eng.read(ext_file, ext_offset, ext_nbytes, buf, buf_pos)   # int64 bytes per extent
    got = await eng.aread(...)               # same, from a coroutine
    eng.close()
"""
from __future__ import annotations

import errno
import logging
import os
import warnings

from ..api import depth_of, maybe_bool
from ..errors import UsageError
from ..mounts import held_in_memory
from .base import (BLOCK, DirectIOUnsupported, Engine, EngineUnavailable, ReadError, aligned_empty, as_indexed,
                   check_unmoved, probe_direct, stale_error)

log = logging.getLogger("lirs.engines")

ENGINE_NAMES = ("uring", "threads", "aiofiles", "buffered")
AUTO_ORDER = ("uring", "threads")
ENV = "LIRS_ENGINE"
# a probe read failing with these is the device's answer, not an engine that cannot work here
DEVICE_ERRNOS = (errno.EIO, errno.EREMOTEIO, errno.ENOMEDIUM, errno.ETIMEDOUT)

__all__ = ["open_engine", "open_indexed", "check_indexed", "as_indexed", "available_engines", "engine_class", "aligned_empty",
           "probe_direct", "Engine", "ReadError", "DirectIOUnsupported", "EngineUnavailable", "ENGINE_NAMES", "BLOCK",
           "reads_are_copies", "requested_engine"]


def engine_class(name: str) -> type:
    """The class of engine ``name`` (imported on demand)."""
    if name == "uring":
        from .uring import UringEngine
        return UringEngine
    if name == "threads":
        from .threads import ThreadsEngine
        return ThreadsEngine
    if name == "buffered":
        from .threads import BufferedEngine
        return BufferedEngine
    if name == "aiofiles":
        from .aio import AiofilesEngine
        return AiofilesEngine
    raise UsageError(f"unknown engine {name!r}; expected auto or one of {', '.join(ENGINE_NAMES)}")


def _probe_read(eng: Engine) -> None:
    """One aligned read of the first block of the first file: some setups fail only here."""
    buf = aligned_empty(BLOCK)
    eng.read([0], [0], [BLOCK], buf, [0])


def _open(name: str, paths, direct: bool, depth) -> Engine:
    eng = engine_class(name)(paths, direct=direct, depth=depth)
    try:
        if paths:
            _probe_read(eng)
    except BaseException:
        eng.close()
        raise
    return eng


def _open_requested(name: str, asked_by: str, paths, direct: bool, depth) -> Engine:
    """:func:`_open` of the engine ``name`` asked for by ``asked_by`` (``$LIRS_ENGINE='uring'``,
    ``engine='uring'``): where it cannot work here (io_uring refused, aiofiles not installed), the
    same class of error, naming the request and the way out: its bare error named neither."""
    try:
        return _open(name, paths, direct, depth)
    except (EngineUnavailable, ImportError) as e:
        way_out = ("unset it (auto: the first engine that works here) or set it to threads" if asked_by.startswith("$")
                   else "pass engine='auto' (the first engine that works here; --engine auto in the CLI) or 'threads'")
        msg = f"{asked_by}: engine {name} cannot work here ({e.strerror if isinstance(e, OSError) else e}); {way_out}"
        if isinstance(e, ImportError):
            raise ImportError(msg, name=e.name) from e
        raise type(e)(e.errno, msg) from e


def check_engine(engine: str = "auto") -> str:
    """``engine`` after checking that it (or ``$LIRS_ENGINE`` for "auto") names an engine: a
    UsageError naming them at once, not at the first epoch."""
    name = requested_engine(engine)
    if name != "auto":
        try:
            engine_class(name)
        except UsageError as e:
            if name != (engine or "auto"):  # the environment asked for it: say so
                raise UsageError(f"${ENV}={name!r}: {e}; unset it or set it to one of those") from None
            raise
    return engine


def requested_engine(engine: str = "auto") -> str:
    """The engine name ``engine`` asks for: ``$LIRS_ENGINE`` replaces ``"auto"`` when set."""
    engine = engine or "auto"
    return os.environ[ENV].strip() if engine == "auto" and os.environ.get(ENV) else engine


def reads_are_copies(engine: str = "auto", direct: bool | None = None, paths=()) -> bool:
    """Whether an engine opened with these arguments on ``paths`` reads through the page cache
    (``buffered``, ``direct=False``, or, with ``direct=None``, files held in memory
    (:func:`lirs.mounts.held_in_memory`) or a first file whose filesystem refuses O_DIRECT: :func:`open_engine`
    then reads every file that way): its reads are copies, so a read step's extents need no
    alignment (:attr:`lirs.plan.EpochPlan.align`). False where O_DIRECT may be used; a probe that
    fails otherwise is left to the engine's open to report."""
    direct = maybe_bool("direct", direct)
    if direct is False or requested_engine(engine) == "buffered":
        return True
    if direct is None and len(paths):
        if held_in_memory(paths) is not None:
            return True
        try:
            return probe_direct(os.fspath(paths[0])) is not None
        except OSError:
            return False
    return False


def open_engine(paths, engine: str = "auto", *, direct: bool | None = None, depth: int | None = None,
                log_level: int = logging.INFO) -> Engine:
    """Open an engine on ``paths`` (sequence of str; ``ext_file`` indexes it).

    Parameters
    ----------
    engine : str
        ``"auto"`` (``$LIRS_ENGINE`` when set, else the first of uring, threads that works) or
        one of :data:`ENGINE_NAMES`.
    direct : bool or None
        None: O_DIRECT when every file allows it (probed with a real aligned read), else page cache
        with a warning; page cache, without a warning, when every file is held in memory (tmpfs,
        ramfs: :func:`lirs.mounts.held_in_memory`): tmpfs takes O_DIRECT since Linux 6.6, but a
        direct read there is still a copy out of the same memory, of whole blocks around the
        records instead of their own bytes (``benchmarks/results/memfs_engines.json``). True:
        require O_DIRECT (error if refused). False: page cache.
    depth : int or None
        Reads in flight; the engine's default when None.
    log_level : int
        Level of the log lines saying which engine was chosen and why (``-v`` shows INFO). An open
        that reads nothing of the data (the warm-up's, :mod:`lirs.warmup`) passes DEBUG: at INFO its
        choice, on a scratch file, read as the epoch's engine where the epoch's was another.

    The chosen engine carries ``.name``, ``.direct`` and ``.reason`` (why it was chosen).
    """
    paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    direct, depth = maybe_bool("direct", direct), depth_of(depth)
    requested = requested_engine(engine)
    why = [f"{ENV}={requested}"] if requested != (engine or "auto") else []
    if requested != "auto":
        check_engine(engine)  # the name validated early (naming $LIRS_ENGINE where it asked)

    refused = held = None
    if direct is None:
        held = held_in_memory(paths)
    if held is None and (direct is None or direct):
        for p in paths:
            refused = probe_direct(p)
            if refused:
                break
        if refused and direct:
            raise UsageError(f"O_DIRECT was required but {refused}")
    use_direct = refused is None and held is None and not reads_are_copies(requested, direct)

    if requested == "auto":
        if held:  # not a refusal: the right reads for memory, said without a warning
            why.append(f"{held}: page-cache reads")
            log.log(log_level, "%s; reading through the page cache", held)
            order = ("buffered",)
        elif refused:
            why.append(f"{refused}: page-cache reads")
            log.warning("%s; reading through the page cache", refused)
            order = ("buffered",)
        else:
            order = AUTO_ORDER
        last = None
        for name in order:
            try:
                eng = _open(name, paths, use_direct, depth)
            except (OSError, ImportError) as e:
                if isinstance(e, ReadError) and e.errno in DEVICE_ERRNOS or \
                        isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
                    raise  # the device failed the probe's read, or no file could be opened: every engine would
                if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                    # no read says so: the kernels' cache could not be written (numba), for every engine
                    raise OSError(e.errno, f"{e.strerror} (writing numba's cache of the kernels while opening the "
                                           f"{name} engine; free some space, or set NUMBA_CACHE_DIR)") from e
                why.append(f"{name} unavailable ({e})")
                log.log(log_level, "engine %s unavailable: %s", name, e)
                last = e
                continue
            # auto's choice: a uring reading thread whose own ring a process limit refuses reads through pread
            eng.pread_fallback = True
            why.append(f"{name} works" + (" with O_DIRECT" if eng.direct else ""))
            eng.reason = "; ".join(why)
            log.log(log_level, "engine %s chosen: %s", eng.name, eng.reason)
            return eng
        raise OSError(f"no engine works on {paths[0] if paths else 'these files'}: {'; '.join(why)}") from last

    if held and requested != "buffered":
        why.append(f"{held}; engine {requested} reads through the page cache")
    elif refused and requested != "buffered" and direct is None:
        msg = f"{refused}; engine {requested} reads through the page cache"
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
        why.append(msg)
    asked_by = f"${ENV}={requested!r}" if requested != (engine or "auto") else f"engine={requested!r}"
    eng = _open_requested(requested, asked_by, paths, use_direct, depth)
    eng.asked_by = asked_by  # named by a later failure of the engine's own (uring: a thread's ring)
    why.append("requested" if not why else "")
    eng.reason = "; ".join(w for w in why if w)
    log.log(log_level, "engine %s: %s", eng.name, eng.reason)
    return eng


def open_indexed(paths, stats, reindex: str | None, engine: str | None = "auto", *, direct=None,
                 depth=None) -> Engine:
    """:func:`open_engine` on an index's data files ``paths``, then :func:`as_indexed` (``stats``,
    ``reindex``): what a Loader's first epoch opens. A file removed (or renamed away) since the
    Loader's open is a StaleIndexError naming it with the re-index advice, as an edit is: the
    engine's open fails on it with a bare FileNotFoundError (or, where ``auto`` tried every
    engine, an OSError of them all) that code re-indexing on StaleIndexError would not catch."""
    try:
        eng = open_engine(paths, engine, direct=direct, depth=depth)
    except OSError as e:
        gone = _gone(paths, e)
        if gone is None:
            raise
        when = "since its index was checked at the Loader's open" if stats is not None else "since the Loader's open"
        raise stale_error(gone, f"was removed (or renamed away) {when}", reindex) from e
    return as_indexed(eng, stats, reindex)


def check_indexed(paths, stats, reindex: str | None) -> None:
    """What :func:`open_indexed` checks, by ``os.stat`` without opening the files (a process that
    will not read them: one about to start DataLoader workers, which would each find it): StaleIndexError
    when a data file of ``paths`` was removed or renamed over, or its size or modification time is no longer the one its
    index's open found (``stats``, :attr:`lirs.index.Index.checked`; None: nothing to compare)."""
    if stats is None:
        return
    found = []
    for p in paths:
        try:
            st = os.stat(p)
        except FileNotFoundError as e:
            raise stale_error(p, "was removed (or renamed away) since its index was checked at the Loader's open",
                              reindex) from e
        found.append((st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino))
    check_unmoved(paths, found, stats, reindex)


def _gone(paths, e: OSError) -> str | None:
    """The first of ``paths`` that no longer exists (the one ``e`` names first), else None."""
    named = [e.filename] if e.filename in paths else []
    for p in named + list(paths):
        try:
            os.stat(p)
        except FileNotFoundError:
            return p
        except OSError:
            continue  # not a removal: left to the error ``e`` says
    return None


def available_engines(path: str, *, direct: bool | None = None) -> list[str]:
    """Names of the engines that open and read ``path`` on this machine (for tests and benchmarks)."""
    names = []
    for name in ENGINE_NAMES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                eng = open_engine([path], name, direct=direct)
        except (OSError, ImportError, UsageError) as e:
            log.info("engine %s unavailable on %s: %s", name, path, e)
            continue
        eng.close()
        names.append(name)
    return names
