"""lirs.libc: a file's size and modification time read with the GIL held (statx), as os.fstat reads them."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from lirs import libc as L
from lirs.engines import aligned_empty, open_engine
from lirs.errors import StaleIndexError


def _statx_here():
    if L.Libc.get()._statx is None:
        pytest.skip("statx(2) is not used on this machine (architecture or kernel): os.fstat serves")


def test_size_mtime_is_what_fstat_says_and_follows_the_file(tmp_path):
    _statx_here()
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 5000)
    lc = L.Libc.get()
    fd = os.open(p, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        assert lc.size_mtime(fd) == (st.st_size, st.st_mtime_ns) == (5000, st.st_mtime_ns)
        with open(p, "ab") as f:
            f.write(b"y" * 123)
        os.utime(p, ns=(1, 1_234_567_891_987_654_321))
        assert lc.size_mtime(fd) == (5123, 1_234_567_891_987_654_321)
        assert lc.size_mtime(fd) == (os.fstat(fd).st_size, os.fstat(fd).st_mtime_ns)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as e:  # a closed descriptor: os.fstat's error; statx stays in use
        lc.size_mtime(fd)
    assert e.value.errno == errno.EBADF and lc._statx is not None


def test_a_read_step_checks_its_file_without_os_fstat(tmp_path, monkeypatch):
    # os.fstat lets the GIL go around its microsecond: a pool thread then waits behind the others
    _statx_here()
    p = tmp_path / "d.bin"
    p.write_bytes(np.arange(3 * 4096, dtype=np.uint8).tobytes())
    calls = []
    real = os.fstat
    with open_engine([str(p)], "threads") as eng:
        monkeypatch.setattr(L.os, "fstat", lambda fd: calls.append(fd) or real(fd))
        buf = aligned_empty(2 * 4096)
        assert eng.read([0], [0], [4096], buf, [0]).tolist() == [4096]
        os.truncate(p, 4096)
        with pytest.raises(StaleIndexError, match="changed while it was being read"):
            eng.read([0], [0], [4096], buf, [0])
    assert calls == []


def test_without_statx_it_falls_back_to_os_fstat(tmp_path, monkeypatch):
    lc = L.Libc()
    # a syscall number no kernel has: ENOSYS, as on a kernel without statx
    monkeypatch.setattr(lc, "_statx", 1 << 20)
    monkeypatch.setattr(lc, "_statx_args", (L.ctypes.c_long(1 << 20), *lc._statx_args[1:]))
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    fd = os.open(p, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        assert lc.size_mtime(fd) == (3, st.st_mtime_ns)
        assert lc._statx is None  # os.fstat from now on
        assert lc.size_mtime(fd) == (3, st.st_mtime_ns)
    finally:
        os.close(fd)


def _reads_by_fstat(lc, tmp_path, data: bytes) -> None:
    """``lc.size_mtime`` of a new file holding ``data`` is what os.fstat says."""
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert lc.size_mtime(fd) == (len(data), os.fstat(fd).st_mtime_ns)
    finally:
        os.close(fd)


@pytest.mark.parametrize("machine,pointer", [("mips64", 8), ("i686", 4), ("x86_64", 4)])
def test_an_architecture_without_a_known_statx_number_uses_os_fstat(tmp_path, monkeypatch, machine, pointer):
    # a wrong syscall number would run another syscall: only the listed 64-bit tables are used (a
    # 32-bit process on an x86_64 kernel reports x86_64 and has the i386 table)
    sizeof = L.ctypes.sizeof
    monkeypatch.setattr(L.platform, "machine", lambda: machine)
    monkeypatch.setattr(L.ctypes, "sizeof", lambda t: pointer if t is L.ctypes.c_void_p else sizeof(t))
    lc = L.Libc()
    assert lc._statx is None
    _reads_by_fstat(lc, tmp_path, b"abcd")


class _OtherLibc:
    """This process's C library as another platform's would present it: ``__errno_location``
    under another name (macOS and FreeBSD call it ``__error``), and without ``madvise``."""

    def __init__(self, real, renamed=("__error",)):
        self._real, self._renamed = real, renamed
        for name in renamed:
            setattr(self, name, getattr(real, "__errno_location"))

    def __getattr__(self, name):
        if name in ("__errno_location", "madvise"):
            raise AttributeError(name)
        return getattr(self._real, name)


def _as_other_platform(monkeypatch, renamed=("__error",)):
    """This process made to look like a non-Linux system to lirs: its libc as :class:`_OtherLibc`,
    ``LINUX`` false where lirs reads it (``sys.platform`` itself is left alone: the rest of the
    process reads it too), and the process-wide answers (libc, io_uring) asked afresh."""
    from lirs import pages
    from lirs.engines import uring

    real_cdll = L.ctypes.CDLL
    monkeypatch.setattr(L.ctypes, "CDLL", lambda name, **kw: _OtherLibc(real_cdll(name, **kw), renamed))
    monkeypatch.setattr(L, "LINUX", False)
    monkeypatch.setattr(uring, "LINUX", False)
    monkeypatch.setattr(L.Libc, "_inst", None)
    monkeypatch.setattr(pages, "_MADVISE", [])
    uring.uring_allowed.cache_clear()
    monkeypatch.setattr(uring, "uring_allowed", uring.uring_allowed)  # asked afresh after the test too


# the other platforms are made from glibc's own errno function under another name
needs_glibc = pytest.mark.skipif(not hasattr(L.ctypes.CDLL(None), "__errno_location"),
                                 reason="this C library has no __errno_location to rename")


@pytest.fixture
def other_platform(monkeypatch):
    _as_other_platform(monkeypatch)
    yield
    from lirs.engines import uring
    uring.uring_allowed.cache_clear()


@needs_glibc
def test_a_libc_naming_its_errno_function_otherwise_is_used(other_platform, tmp_path):
    # macOS and FreeBSD: `__error`; there was an AttributeError at the first epoch
    lc = L.Libc.get()
    real = L.ctypes.CDLL(None)._real
    assert lc.errno_location == L.ctypes.cast(real.__errno_location, L.ctypes.c_void_p).value
    assert lc.madvise is None
    assert lc._statx is None and lc._held is None  # Linux's statx number is another call elsewhere
    _reads_by_fstat(lc, tmp_path, b"abcdef")


@needs_glibc
def test_a_libc_without_any_errno_function_is_said_by_name(monkeypatch):
    _as_other_platform(monkeypatch, renamed=())
    with pytest.raises(OSError, match="none of __errno_location, __error, ___errno") as e:
        L.Libc.get()
    assert e.value.errno == errno.ENOSYS


@needs_glibc
def test_io_uring_is_not_set_up_off_linux(other_platform):
    from lirs.engines import uring

    assert uring.uring_allowed() is False
    with pytest.raises(uring.UringSetupError, match="io_uring is Linux-only") as e:
        uring._setup(L.Libc.get(), 1, (0,))
    assert e.value.errno == errno.ENOSYS


@needs_glibc
def test_an_epoch_off_linux_reads_through_pread_and_serves_the_same_batches(other_platform, tmp_path):
    # end to end as a macOS user runs it: engine auto passes io_uring by and the pread kernels read
    import lirs

    p = tmp_path / "d.svm"
    rng = np.random.default_rng(7)
    p.write_text("".join(f"{i % 2} {1 + i % 9}:{rng.random():.4f} {20 + i % 5}:1\n" for i in range(3000)))
    lirs.build_index(str(p))
    with lirs.Loader(str(p), batch_size=128, seed=3) as ld:
        got = [(b.ids.tolist(), b.y.tolist(), b.X.indices.tolist(), b.X.data.tolist()) for b in ld.epoch(0)]
        assert ld.engine.name != "uring" and "io_uring is Linux-only" in ld.engine.reason
    assert sorted(i for g in got for i in g[0]) == list(range(3000))
    with lirs.Loader(str(p), batch_size=128, seed=3, engine="buffered") as ld:
        expect = [(b.ids.tolist(), b.y.tolist(), b.X.indices.tolist(), b.X.data.tolist()) for b in ld.epoch(0)]
    assert got == expect
