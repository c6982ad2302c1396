"""Engine contract: every engine that works here reads exactly what a plain Python read returns."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import open_fds
from lirs.engines import (BLOCK, ReadError, aligned_empty, available_engines, open_engine, probe_direct)
from lirs.errors import UsageError

SIZES = (5 * BLOCK * 64 + 1234, 3 * BLOCK + 17)  # neither a multiple of the block size


def _files(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    paths, datas = [], []
    for i, size in enumerate(SIZES):
        d = rng.integers(0, 256, size, dtype=np.uint8)
        p = tmp_path / f"data{i}.bin"
        d.tofile(p)
        paths.append(str(p))
        datas.append(d)
    return paths, datas


def _random_extents(rng, sizes, count, max_blocks=5, past_end=True):
    """Aligned extents over several files, some running past the end of their file."""
    f = rng.integers(0, len(sizes), count).astype(np.int32)
    nblocks = np.array([-(-s // BLOCK) for s in sizes])
    off = (rng.integers(0, nblocks[f]) * BLOCK).astype(np.int64)
    nb = (rng.integers(1, max_blocks + 1, count) * BLOCK).astype(np.int64)
    if past_end:
        last = rng.random(count) < 0.1
        off[last] = (nblocks[f[last]] - 1) * BLOCK
    pos = np.concatenate([[0], np.cumsum(nb)[:-1]]).astype(np.int64)
    return f, off, nb, pos


def _expected(datas, f, off, nb):
    return [datas[fi][o:o + n] for fi, o, n in zip(f, off, nb)]


def _check(buf, pos, got, expected):
    assert got.dtype == np.int64 and got.shape == (len(expected),)
    for i, want in enumerate(expected):
        assert got[i] == len(want), f"extent {i}: read {got[i]} bytes, file has {len(want)}"
        assert bytes(buf[pos[i]:pos[i] + got[i]]) == want.tobytes(), f"extent {i} differs"


@pytest.mark.parametrize("depth", [None, 1, 3])
def test_batches_match_plain_read(tmp_path, engine_name, depth):
    paths, datas = _files(tmp_path)
    rng = np.random.default_rng(1)
    with open_engine(paths, engine_name, depth=depth) as eng:
        assert eng.name == engine_name
        for count in (1, 7, 300):  # fewer and more extents than reads in flight
            f, off, nb, pos = _random_extents(rng, SIZES, count)
            buf = aligned_empty(int(nb.sum()))
            got = eng.read(f, off, nb, buf, pos)
            _check(buf, pos, got, _expected(datas, f, off, nb))


def test_extent_wholly_past_end_reads_nothing(tmp_path, engine_name):
    paths, datas = _files(tmp_path)
    with open_engine(paths, engine_name) as eng:
        end = -(-SIZES[1] // BLOCK) * BLOCK
        buf = aligned_empty(3 * BLOCK)
        got = eng.read([1, 1, 0], [end, end + BLOCK, 0], [BLOCK, BLOCK, BLOCK], buf, [0, BLOCK, 2 * BLOCK])
        assert got.tolist() == [0, 0, BLOCK]
        assert bytes(buf[2 * BLOCK:]) == datas[0][:BLOCK].tobytes()


def test_empty_batch(tmp_path, engine_name):
    paths, _ = _files(tmp_path)
    with open_engine(paths, engine_name) as eng:
        got = eng.read(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64),
                       aligned_empty(0), np.zeros(0, np.int64))
        assert got.shape == (0,)


def test_aread_from_a_coroutine(tmp_path, engine_name):
    paths, datas = _files(tmp_path)
    rng = np.random.default_rng(2)
    f, off, nb, pos = _random_extents(rng, SIZES, 50)
    buf = aligned_empty(int(nb.sum()))
    with open_engine(paths, engine_name) as eng:
        got = asyncio.run(eng.aread(f, off, nb, buf, pos))
    _check(buf, pos, got, _expected(datas, f, off, nb))


def test_concurrent_callers(tmp_path, engine_name):
    # the loader reads several batches at once from one engine
    paths, datas = _files(tmp_path)
    errors = []
    with open_engine(paths, engine_name) as eng:
        def work(seed):
            try:
                rng = np.random.default_rng(seed)
                for _ in range(5):
                    f, off, nb, pos = _random_extents(rng, SIZES, 64)
                    buf = aligned_empty(int(nb.sum()))
                    _check(buf, pos, eng.read(f, off, nb, buf, pos), _expected(datas, f, off, nb))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors[0]


def test_failed_read_names_file_and_offset(tmp_path, engine_name):
    paths, _ = _files(tmp_path)
    eng = open_engine(paths, engine_name)
    real = int(eng.fds[1])
    eng.fds[1] = 1 << 20  # not an open descriptor: every read of file 1 fails with EBADF
    try:
        buf = aligned_empty(2 * BLOCK)
        # read from a thread that has not read yet: the uring engine sets up a ring per thread and
        # registers the descriptors it finds then (here the bad one: registration is refused too)
        caught = []

        def work():
            try:
                eng.read([0, 1], [0, BLOCK], [BLOCK, BLOCK], buf, [0, BLOCK])
            except ReadError as e:
                caught.append(e)
        t = threading.Thread(target=work)
        t.start()
        t.join()
        assert caught, "the read of a bad descriptor did not raise ReadError"
        err = caught[0]
        assert err.errno == errno.EBADF
        assert err.filename == paths[1]
        assert f"offset {BLOCK}" in str(err) and paths[1] in str(err)
    finally:
        eng.fds[1] = real
        eng.close()


def test_truncated_file_reads_short(tmp_path, engine_name):
    from lirs.errors import StaleIndexError

    paths, datas = _files(tmp_path)
    with open_engine(paths, engine_name) as eng:
        os.truncate(paths[0], 2 * BLOCK + 5)
        buf = aligned_empty(4 * BLOCK)
        # a file that changed since the engine opened it: the read says so, naming it
        with pytest.raises(StaleIndexError, match=f"{paths[0]} changed while it was being read"):
            eng.read([0, 0], [0, 2 * BLOCK], [2 * BLOCK, 2 * BLOCK], buf, [0, 2 * BLOCK])
        eng.check_changes = False  # the reads themselves: short only at the (new) end of the file
        got = eng.read([0, 0], [0, 2 * BLOCK], [2 * BLOCK, 2 * BLOCK], buf, [0, 2 * BLOCK])
        assert got.tolist() == [2 * BLOCK, 5]
        assert bytes(buf[2 * BLOCK:2 * BLOCK + 5]) == datas[0][2 * BLOCK:2 * BLOCK + 5].tobytes()


def test_bad_arguments(tmp_path, engine_name):
    paths, _ = _files(tmp_path)
    with open_engine(paths, engine_name) as eng:
        buf = aligned_empty(2 * BLOCK)
        with pytest.raises(ValueError, match="fit the buffer"):
            eng.read([0], [0], [4 * BLOCK], buf, [0])
        with pytest.raises(ValueError, match="ext_file out of range"):
            eng.read([2], [0], [BLOCK], buf, [0])
        with pytest.raises(ValueError, match="equal length"):
            eng.read([0, 0], [0], [BLOCK], buf, [0])
        with pytest.raises(ValueError, match="uint8"):
            eng.read([0], [0], [BLOCK], np.zeros(BLOCK, np.int32), [0])
        if eng.direct:
            with pytest.raises(ValueError, match="aligned"):
                eng.read([0], [100], [BLOCK], buf, [0])
            with pytest.raises(ValueError, match="aligned"):
                eng.read([0], [0], [BLOCK], buf[1:], [0])
    with pytest.raises(ValueError, match="closed"):
        eng.read([0], [0], [BLOCK], buf, [0])


def test_buffered_reads_unaligned(tmp_path):
    paths, datas = _files(tmp_path)
    with open_engine(paths, "buffered") as eng:
        assert not eng.direct
        off = np.array([3, 4097, 10], np.int64)
        nb = np.array([100, 5000, 7], np.int64)
        pos = np.array([1, 200, 6000], np.int64)
        buf = np.zeros(7000, np.uint8)
        got = eng.read([0, 0, 1], off, nb, buf, pos)
        _check(buf, pos, got, _expected(datas, [0, 0, 1], off, nb))


def test_close_leaves_no_threads_or_fds(tmp_path, engine_name):
    paths, datas = _files(tmp_path)
    before_fds, before_threads = open_fds(), set(threading.enumerate())
    eng = open_engine(paths, engine_name)
    f, off, nb, pos = _random_extents(np.random.default_rng(3), SIZES, 200)
    buf = aligned_empty(int(nb.sum()))
    eng.read(f, off, nb, buf, pos)
    eng.close()
    eng.close()  # idempotent
    assert set(threading.enumerate()) - before_threads == set()
    assert set(open_fds().items()) - set(before_fds.items()) == set()


_CLOSE_RACE = """
import sys, threading, time, numpy as np
from lirs.engines import open_engine, aligned_empty
eng = open_engine([sys.argv[1]], sys.argv[2], direct=False, depth=64)
n, out = 500, []
off = (np.random.default_rng(0).integers(0, 200, n) * 4096).astype(np.int64)
nb, f, pos = np.full(n, 4096, np.int64), np.zeros(n, np.int32), np.arange(n, dtype=np.int64) * 4096
buf = aligned_empty(n * 4096)
def reader():
    try:
        while True:
            eng.read(f, off, nb, buf, pos)
    except ValueError as e:
        out.append(str(e))
t = threading.Thread(target=reader)
t.start()
time.sleep(0.3)
eng.close()
t.join(30)
print(out)
"""


def test_close_from_another_thread_waits_for_its_read(tmp_path, engine_name):
    """A Loader closed by another thread while its consumer ran a step itself (page-cache reads on
    few cores): uring unmapped the ring the read was using (the process died of SIGSEGV), aiofiles
    closed the loop that was running it (RuntimeError). close() waits for the reads of other
    threads; the reader's next read is refused. In a subprocess: a crash fails here, not the run."""
    path = tmp_path / "d.bin"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 200 * 4096 + 4096, np.uint8).tobytes())
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", _CLOSE_RACE, str(path), engine_name], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
        assert r.stdout.strip() == f"['{engine_name} engine is closed']", r.stdout


def test_auto_prefers_uring_and_says_why(tmp_path, monkeypatch, caplog):
    paths, _ = _files(tmp_path)
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    here = available_engines(paths[0])
    with caplog.at_level(logging.INFO, logger="lirs.engines"):
        with open_engine(paths) as eng:
            want = next(n for n in ("uring", "threads", "buffered") if n in here)
            assert eng.name == want
            assert eng.reason and eng.name in eng.reason
    assert any(want in r.getMessage() for r in caplog.records)


def test_env_overrides_auto(tmp_path, monkeypatch):
    paths, _ = _files(tmp_path)
    monkeypatch.setenv("LIRS_ENGINE", "buffered")
    with open_engine(paths) as eng:
        assert eng.name == "buffered" and "LIRS_ENGINE" in eng.reason
    with open_engine(paths, "threads") as eng:  # an explicit name wins over the variable
        assert eng.name == "threads"
    monkeypatch.setenv("LIRS_ENGINE", "nonsense")
    with pytest.raises(UsageError, match=r"\$LIRS_ENGINE='nonsense': unknown engine"):  # the variable named
        open_engine(paths)
    with pytest.raises(UsageError, match=r"^unknown engine 'bogus'"):  # an engine given: not the variable
        open_engine(paths, "bogus")


@pytest.mark.parametrize("env, engine, asked_by", [("uring", "auto", r"\$LIRS_ENGINE='uring'"),
                                                   (None, "uring", r"engine='uring'")])
def test_an_engine_asked_for_that_cannot_work_here_is_named_with_the_request(tmp_path, monkeypatch, env, engine,
                                                                              asked_by):
    """io_uring refused (a seccomp filter: EPERM): the error names the engine, where it was asked for and
    the way out, as an unknown name does; still the UringSetupError (an OSError) it was."""
    import lirs.engines.uring as U

    paths, _ = _files(tmp_path)
    if env:
        monkeypatch.setenv("LIRS_ENGINE", env)
    else:
        monkeypatch.delenv("LIRS_ENGINE", raising=False)

    def refused(*a):
        raise U.UringSetupError(errno.EPERM, "io_uring_setup failed: Operation not permitted")
    monkeypatch.setattr(U, "_setup", refused)
    with pytest.raises(U.UringSetupError, match=asked_by + r": engine uring cannot work here \(io_uring_setup "
                       r"failed: Operation not permitted\); .*auto.*threads") as got:
        open_engine(paths, engine)
    assert got.value.errno == errno.EPERM and isinstance(got.value.__cause__, U.UringSetupError)
    monkeypatch.setitem(sys.modules, "aiofiles", None)  # aiofiles not installed: ImportError, named the same way
    monkeypatch.setitem(sys.modules, "aiofiles.os", None)
    with pytest.raises(ImportError, match=r"engine='aiofiles': engine aiofiles cannot work here"):
        open_engine(paths, "aiofiles")


def test_reads_are_copies_where_no_engine_may_use_o_direct(tmp_path, monkeypatch):
    # the planner reads exact bytes (no block around a record) only where this holds: it must
    # agree with the engine open_engine gives for the same arguments
    from lirs.engines import reads_are_copies

    paths, _ = _files(tmp_path)
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    cases = [("buffered", None), ("auto", False), ("threads", False), ("auto", None), ("threads", None)]
    for engine, direct in cases:
        with open_engine(paths, engine, direct=direct) as eng:
            assert not (reads_are_copies(engine, direct) and eng.direct)
    assert reads_are_copies("buffered") and reads_are_copies("uring", direct=False)
    assert not reads_are_copies("auto") and not reads_are_copies("threads", direct=True)
    monkeypatch.setenv("LIRS_ENGINE", "buffered")
    assert reads_are_copies("auto") and not reads_are_copies("threads")
    # a probe that fails for another reason (the device's EIO) plans aligned reads, which every
    # engine takes; the engine's own open reports the error
    import lirs.engines as engines

    def eio(path):
        raise OSError(errno.EIO, "Input/output error", path)

    monkeypatch.setattr(engines, "probe_direct", eio)
    assert not reads_are_copies("threads", None, paths) and reads_are_copies("threads", False, paths)


def _refuse_o_direct(monkeypatch):
    """Make every O_DIRECT open fail as tmpfs or an overlay filesystem does."""
    import lirs.engines.base as base

    real_open = os.open

    def fake_open(path, flags, *a, **k):
        if flags & base.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(base.os, "open", fake_open)


def test_o_direct_refused_falls_back_to_page_cache(tmp_path, monkeypatch, caplog):
    paths, datas = _files(tmp_path)
    _refuse_o_direct(monkeypatch)
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    assert probe_direct(paths[0]) is not None
    with caplog.at_level(logging.WARNING, logger="lirs.engines"):
        with open_engine(paths) as eng:
            assert eng.name == "buffered" and not eng.direct
            assert "O_DIRECT" in eng.reason
    assert any("O_DIRECT" in r.getMessage() for r in caplog.records)
    with pytest.warns(RuntimeWarning, match="O_DIRECT"):
        eng = open_engine(paths, "threads")
    with eng:
        assert not eng.direct
        f, off, nb, pos = _random_extents(np.random.default_rng(4), SIZES, 20)
        buf = aligned_empty(int(nb.sum()))
        _check(buf, pos, eng.read(f, off, nb, buf, pos), _expected(datas, f, off, nb))
    with pytest.raises(UsageError, match="O_DIRECT"):
        open_engine(paths, "threads", direct=True)


def test_tmpfs(shm_dir, engine_name):
    # tmpfs refuses O_DIRECT on older kernels and takes it on newer ones: either way reads are exact,
    # through the page cache unless O_DIRECT is asked for (test_memfs.py)
    paths, datas = _files(__import__("pathlib").Path(shm_dir))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        eng = open_engine(paths, engine_name)
    with eng:
        assert not eng.direct
        f, off, nb, pos = _random_extents(np.random.default_rng(5), SIZES, 40)
        buf = aligned_empty(int(nb.sum()))
        _check(buf, pos, eng.read(f, off, nb, buf, pos), _expected(datas, f, off, nb))


def test_aligned_empty():
    assert aligned_empty(0).shape == (0,)  # numpy gives empty views no meaningful address
    for n in (1, 4096, 10_000):
        a = aligned_empty(n)
        assert a.dtype == np.uint8 and a.shape == (n,) and a.ctypes.data % 4096 == 0
    assert aligned_empty(100, align=512).ctypes.data % 512 == 0
    with pytest.raises(ValueError):
        aligned_empty(10, align=3)


def test_engine_refuses_use_after_fork(tmp_path):
    paths, _ = _files(tmp_path)
    with open_engine(paths, "buffered") as eng:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: the parent's engine must refuse to run here
            try:
                eng.read([0], [0], [BLOCK], aligned_empty(BLOCK), [0])
                os.write(w, b"read")
            except RuntimeError:
                os.write(w, b"refused")
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        assert os.read(r, 16) == b"refused"
        os.close(r)


def _short_pread(limit):
    """A libc ``pread`` stand-in that reads what was asked but reports at most ``limit`` bytes, as
    FUSE and network filesystems answer: for the nogil kernel, through a ctypes callback."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    real = libc.pread
    real.restype, real.argtypes = ctypes.c_ssize_t, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                                     ctypes.c_int64]
    proto = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64)
    calls = []

    def pread(fd, buf, n, off):
        r = real(fd, buf, n, off)
        calls.append((fd, n, off, r))
        return min(r, limit) if r > 0 else r

    cb = proto(pread)
    return cb, ctypes.cast(cb, ctypes.c_void_p).value, calls


@pytest.mark.parametrize("limit", [1000, 5000, 8192])
@pytest.mark.parametrize("name", ["threads", "buffered"])
def test_short_reads_mid_file_are_continued(tmp_path, name, limit):
    # short answers before the end of the file are no end of file (the FUSE tests cover every engine),
    # continued in the file the engine opened, whatever its path names since
    paths, datas = _files(tmp_path)
    with open_engine(paths, name) as eng:
        for p, size in zip(paths, SIZES):
            np.zeros(size, np.uint8).tofile(p + ".new")
            os.replace(p + ".new", p)
        cb, addr, calls = _short_pread(limit)

        class Libc:  # the engine's libc, with pread answering short
            pread = addr
            errno_location = eng._libc.errno_location

        eng._libc = Libc
        rng = np.random.default_rng(7)
        f, off, nb, pos = _random_extents(rng, SIZES, 60)
        buf = aligned_empty(int(nb.sum()))
        got = eng.read(f, off, nb, buf, pos)
        _check(buf, pos, got, _expected(datas, f, off, nb))
        assert calls and any(r > limit for *_, r in calls), "the stand-in cut reads short"
        if eng.direct and limit % BLOCK:
            assert (eng.cfds >= 0).any(), "O_DIRECT short reads went on through the page cache"
        del cb


def test_a_continuation_descriptor_is_opened_by_path_where_there_is_no_proc(tmp_path, monkeypatch):
    """Without /proc a continuation descriptor cannot reopen the open file: it is opened by its path,
    as it was before (the reads stay whole)."""
    import lirs.engines.base as base

    paths, datas = _files(tmp_path)
    monkeypatch.setattr(base, "reopen", lambda fd, flags: (_ for _ in ()).throw(FileNotFoundError(2, "no /proc")))
    with open_engine(paths, "threads") as eng:
        cfds = eng.continuation_fds(np.arange(len(paths)))
        assert (cfds >= 0).all()
        for fd, p in zip(cfds, paths):
            assert os.read(int(fd), 64) == open(p, "rb").read(64)


def test_aiofiles_from_a_running_event_loop(tmp_path):
    # the loader opens (and probes) its engine inside aepoch, i.e. inside the caller's event loop
    paths, datas = _files(tmp_path)
    f, off, nb, pos = _random_extents(np.random.default_rng(8), SIZES, 30)
    buf = aligned_empty(int(nb.sum()))

    async def main():
        with open_engine(paths, "aiofiles") as eng:
            return eng.read(f, off, nb, buf, pos)

    _check(buf, pos, asyncio.run(main()), _expected(datas, f, off, nb))


class _LoopFailingToStart:
    """An event loop whose start fails part way, as uvloop's does with no descriptor left (EMFILE in
    its signal socketpair): left marked running, so that closing it raises."""

    running = False

    def run_until_complete(self, coro):
        self.running = True
        raise OSError(errno.EMFILE, "Too many open files")

    def is_running(self):
        return self.running

    def close(self):
        if self.running:
            raise RuntimeError("Cannot close a running event loop")


def test_aiofiles_whose_loop_fails_to_start_says_why_and_reads_with_the_next(tmp_path, monkeypatch):
    """The loop's error (EMFILE) is the one raised, naming the limit, not the close's of a loop left
    running; the broken loop is dropped, and the thread's next read gets a new one."""
    pytest.importorskip("aiofiles")
    import lirs.engines.aio as A

    paths, datas = _files(tmp_path)
    monkeypatch.setattr(A, "_new_loop", _LoopFailingToStart)
    with pytest.raises(OSError, match=r"Too many open files \(starting the aiofiles engine's event loop; raise the "
                       r"limit of open files \(ulimit -n\)\)") as got:  # the engine's probe read, then its close
        open_engine(paths, "aiofiles")
    assert got.value.errno == errno.EMFILE
    f, off, nb, pos = _random_extents(np.random.default_rng(9), SIZES, 20)
    buf = aligned_empty(int(nb.sum()))
    eng = A.AiofilesEngine(paths, direct=False)
    with pytest.raises(OSError, match="Too many open files"):
        eng.read(f, off, nb, buf, pos)
    monkeypatch.setattr(A, "_new_loop", asyncio.new_event_loop)
    _check(buf, pos, eng.read(f, off, nb, buf, pos), _expected(datas, f, off, nb))  # the thread's next loop
    eng.close()


def test_aiofiles_loader_aepoch_first(tmp_path):
    import lirs
    from lirs.loader import Loader

    p = str(tmp_path / "dense.npy")
    np.save(p, np.random.default_rng(9).standard_normal((3000, 6)).astype(np.float32))
    lirs.build_index(p, format="npy", progress=False)

    async def collect():
        with Loader(p, 128, engine="aiofiles", seed=3) as loader:
            return [b async for b in loader.aepoch(0)]

    asyn = asyncio.run(collect())
    with Loader(p, 128, engine="aiofiles", seed=3) as loader:
        sync = list(loader.epoch(0))
    assert len(asyn) == len(sync) > 1
    for a, s in zip(asyn, sync):
        assert a.index == s.index and np.array_equal(a.ids, s.ids) and a.X.tobytes() == s.X.tobytes()


def test_a_read_shared_with_workers_that_were_shut_down_is_read_by_the_caller(tmp_path):
    # at interpreter exit the workers refuse new shares: the calling thread reads them itself
    path = tmp_path / "d.bin"
    data = np.arange(64 * 4096 // 8, dtype=np.int64)
    path.write_bytes(data.tobytes())
    with open_engine([str(path)], "threads", direct=False, depth=4) as e:
        e._workers.shutdown(wait=True)
        n = 64
        buf = aligned_empty(n * 4096)
        offs = np.arange(n, dtype=np.int64) * 4096
        got = e.read(np.zeros(n, np.int32), offs, np.full(n, 4096, np.int64), buf, offs)
        assert (got == 4096).all() and np.array_equal(buf.view(np.int64), data)


def test_the_buffered_engine_shares_in_memory_reads_by_bytes(tmp_path):
    """On tmpfs a read is a copy: a step smaller than IN_MEMORY_PARTY_BYTES is read by the calling
    thread alone, whatever its extents (helpers would only hand the GIL around), a larger one by
    one thread per that many bytes; elsewhere the page cache may be cold and every extent may be
    read by a helper, to keep reads in flight."""
    from lirs.constants import IN_MEMORY_PARTY_BYTES
    from lirs.cores import usable_cores
    from lirs.engines import aligned_empty, open_engine
    from lirs.mounts import in_memory

    disk = tmp_path / "d.bin"
    disk.write_bytes(bytes(8192))
    with open_engine([str(disk)], "buffered", direct=False) as e:
        if not in_memory(str(disk)):
            assert e.depth == 8 and e.party_bytes == 0
    if not os.path.isdir("/dev/shm") or not in_memory("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm")
    shm = f"/dev/shm/lirs-test-{os.getpid()}.bin"
    size = 3 * IN_MEMORY_PARTY_BYTES
    try:
        with open(shm, "wb") as f:
            f.write(np.arange(size // 8, dtype=np.int64).tobytes())
        with open_engine([shm], "buffered", direct=False, depth=4) as e:
            assert e.depth == 4 and e.party_bytes == IN_MEMORY_PARTY_BYTES  # depth as asked
            n = 256  # extents of 4 KiB: many, but few bytes
            small = aligned_empty(n * 4096)
            offs = np.arange(n, dtype=np.int64) * 4096
            got = e.read(np.zeros(n, np.int32), offs, np.full(n, 4096, np.int64), small, offs)
            assert (got == 4096).all() and not e._workers, "a small step: the calling thread alone"
            big = aligned_empty(size)
            n = size // (1 << 20)
            offs = np.arange(n, dtype=np.int64) << 20
            got = e.read(np.zeros(n, np.int32), offs, np.full(n, 1 << 20, np.int64), big, offs)
            assert (got == 1 << 20).all() and e._workers, "a window: helpers share it"
            assert np.array_equal(big.view(np.int64), np.arange(size // 8))
        with open_engine([shm], "buffered", direct=False) as e:
            assert e.depth == max(1, min(8, usable_cores()))
    finally:
        os.unlink(shm)


@pytest.mark.parametrize("name", ["buffered", "threads"])
def test_bad_extents_are_refused_before_any_byte_is_read(tmp_path, name):
    """The read kernels write into the buffer at the extents' positions: every extent is checked
    first (file number, signs, fit in the buffer, O_DIRECT alignment), with a message saying what."""
    from lirs.engines import aligned_empty, open_engine

    p = tmp_path / "d.bin"
    p.write_bytes(bytes(range(256)) * 64)
    direct = name == "threads"
    try:
        e = open_engine([str(p)], name, direct=direct)
    except (OSError, UsageError):
        pytest.skip(f"{name} cannot open here")
    with e:
        buf = aligned_empty(8192)
        i32, i64 = (lambda *v: np.array(v, np.int32)), (lambda *v: np.array(v, np.int64))
        cases = [((i32(1), i64(0), i64(4096), i64(0)), "ext_file out of range"),
                 ((i32(0), i64(-4096), i64(4096), i64(0)), "negative offset"),
                 ((i32(0), i64(0), i64(4096), i64(8192)), "do not fit the buffer of 8192 bytes")]
        if direct:
            cases.append(((i32(0), i64(100), i64(4096), i64(0)), "4096-aligned"))
        for (f, off, nb, pos), what in cases:
            buf[:] = 7
            with pytest.raises(ValueError, match=what):
                e.read(f, off, nb, buf, pos)
            assert (buf == 7).all()  # nothing was written
        got = e.read(i32(0), i64(0), i64(4096), buf, i64(4096))
        assert int(got[0]) == 4096 and bytes(buf[4096:4352]) == bytes(range(256))


@pytest.mark.parametrize("name", ["threads", "buffered"])
def test_each_reading_thread_reads_through_its_own_descriptors_of_the_opened_files(tmp_path, name):
    """The threads and buffered engines give each thread that reads descriptors of its own (a pread on a
    shared one counts references on one open file from every core): of the files the engine opened,
    even once another file was renamed over the path, and closed with the engine."""
    paths, datas = _files(tmp_path)
    eng = open_engine(paths, name, direct=False if name == "buffered" else None)
    mine = eng.fds_here()
    assert eng.fds_here() is mine and not set(mine.tolist()) & set(eng.fds.tolist())
    for a, b in zip(mine, eng.fds):
        sa, sb = os.fstat(int(a)), os.fstat(int(b))
        assert (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    other = tmp_path / "other.bin"
    np.zeros(SIZES[0], np.uint8).tofile(other)
    os.replace(other, paths[0])  # the path now names another file; the engine reads the one it opened
    f, off, nb, pos = _random_extents(np.random.default_rng(4), SIZES, 60, past_end=False)
    got, threads_fds = {}, {}

    def read(k):  # keyed by k: a thread started after another ended may be given its get_ident()
        buf = aligned_empty(int(nb.sum()))
        got[k] = (buf, eng.read(f, off, nb, buf, pos))
        threads_fds[k] = eng.fds_here().tolist()
    ts = [threading.Thread(target=read, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for buf, n in got.values():
        _check(buf, pos, n, _expected(datas, f, off, nb))
    assert len({tuple(v) for v in threads_fds.values()}) == 3
    own = [fd for v in threads_fds.values() for fd in v] + mine.tolist()
    eng.close()
    for fd in own:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_reading_threads_share_the_descriptors_past_the_room_for_their_own(tmp_path, monkeypatch):
    """Many files (or a low limit of open files, or no /proc): the threads read through the engine's
    descriptors, as they did before each had its own."""
    import lirs.engines.threads as T

    paths, datas = _files(tmp_path)
    monkeypatch.setattr(T, "OWN_FDS_MAX_FILES", 1)
    with open_engine(paths, "buffered", direct=False) as eng:
        assert eng.fds_here() is eng.fds
    monkeypatch.setattr(T, "OWN_FDS_MAX_FILES", 16)
    monkeypatch.setattr(T, "reopen", lambda fd, flags: (_ for _ in ()).throw(FileNotFoundError(2, "no /proc")))
    with open_engine(paths, "buffered", direct=False) as eng:
        f, off, nb, pos = _random_extents(np.random.default_rng(5), SIZES, 40, past_end=False)
        buf = aligned_empty(int(nb.sum()))
        _check(buf, pos, eng.read(f, off, nb, buf, pos), _expected(datas, f, off, nb))
        assert eng.fds_here() is eng.fds
    assert T.own_fds_room(17) == 0 and T.own_fds_room(1) > 0


def test_the_room_for_threads_own_descriptors_is_the_whole_processs(tmp_path, monkeypatch):
    """The engines of a process together hold at most an eighth of the limit of open files for
    their reading threads: many Loaders at once leave the rest to the program; closed, an engine
    gives its share back."""
    import resource

    import lirs.engines.threads as T

    paths, datas = _files(tmp_path)  # two files: a thread's own descriptors are two
    held = T._OWN_OPEN[0]  # engines other tests left open
    monkeypatch.setattr(T.resource, "getrlimit", lambda what: (8 * (held + 2), resource.RLIM_INFINITY))
    a = open_engine(paths, "buffered", direct=False)
    b = open_engine(paths, "buffered", direct=False)
    assert a.fds_here() is not a.fds  # room for one thread's two
    assert b.fds_here() is b.fds  # none left for the second engine
    a.close()
    c = open_engine(paths, "buffered", direct=False)
    assert c.fds_here() is not c.fds  # a's share came back
    f, off, nb, pos = _random_extents(np.random.default_rng(6), SIZES, 40, past_end=False)
    for e in (b, c):
        buf = aligned_empty(int(nb.sum()))
        _check(buf, pos, e.read(f, off, nb, buf, pos), _expected(datas, f, off, nb))
        e.close()


def test_direct_and_depth_are_checked_where_an_engine_opens(tmp_path):
    """direct=0 (or np.False_ before) turned O_DIRECT on (`direct is False` tests identity), and a
    depth of 33000 failed io_uring's setup as "Invalid argument" (auto then called uring unavailable)
    or started a thread a read in flight: each is refused, naming the argument."""
    from lirs.errors import UsageError
    from lirs.engines import reads_are_copies

    paths, _ = _files(tmp_path)
    with open_engine(paths, "threads", direct=np.False_) as eng:
        assert eng.direct is False
    assert reads_are_copies("threads", np.False_, paths)
    for kw, said in ((dict(direct=0), "direct must be True, False or None"), (dict(depth=33000), "at most 4096"),
                     (dict(depth=0), "depth must be >= 1")):
        with pytest.raises(UsageError, match=said):
            open_engine(paths, "threads", **kw)


def test_a_full_kernel_cache_is_said_not_taken_for_an_engine_unavailable(tmp_path, monkeypatch):
    """numba writing its cache on a full disk raised ENOSPC while an engine opened: "auto" called
    uring unavailable, took threads (or said "no engine works"), on every run."""
    import lirs.engines as E

    paths, _ = _files(tmp_path)
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    real = E._open

    def full(name, *a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(E, "_open", full)
    with pytest.raises(OSError, match="No space left on device .writing numba's cache of the kernels") as got:
        open_engine(paths)
    assert got.value.errno == errno.ENOSPC
    monkeypatch.setattr(E, "_open", real)
    open_engine(paths).close()
