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


@pytest.mark.parametrize("machine,pointer", [("mips64", 8), ("i686", 4), ("x86_64", 4)])
def test_an_architecture_without_a_known_statx_number_uses_os_fstat(tmp_path, monkeypatch, machine, pointer):
    # a wrong syscall number would run another syscall: only the listed 64-bit tables are used (a
    # 32-bit process on an x86_64 kernel reports x86_64 and has the i386 table)
    sizeof = L.ctypes.sizeof
    monkeypatch.setattr(L.platform, "machine", lambda: machine)
    monkeypatch.setattr(L.ctypes, "sizeof", lambda t: pointer if t is L.ctypes.c_void_p else sizeof(t))
    lc = L.Libc()
    assert lc._statx is None
    p = tmp_path / "f.bin"
    p.write_bytes(b"abcd")
    fd = os.open(p, os.O_RDONLY)
    try:
        assert lc.size_mtime(fd) == (4, os.fstat(fd).st_mtime_ns)
    finally:
        os.close(fd)
