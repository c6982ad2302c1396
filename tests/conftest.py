"""Shared fixtures: the engines that work on this machine, a tmpfs directory, and a small one to fill."""
from __future__ import annotations

import importlib.util
import errno
import os
import subprocess
import tempfile

import numpy as np
import pytest

_ENGINES = None


def engines_here() -> list[str]:
    """Engines that open and read a small file on the test filesystem here (probed once)."""
    global _ENGINES
    if _ENGINES is None:
        from lirs.engines import available_engines

        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "probe.bin")
            np.arange(3 * 4096, dtype=np.uint8).tofile(p)
            _ENGINES = available_engines(p)
    return _ENGINES


def pytest_generate_tests(metafunc):
    # `engine_name` runs a test once per engine that works on this machine
    if "engine_name" in metafunc.fixturenames:
        metafunc.parametrize("engine_name", engines_here())


@pytest.fixture
def shm_dir():
    """A fresh directory on tmpfs (/dev/shm), where O_DIRECT may be refused; skipped without one."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        yield d



@pytest.fixture
def full_fs(tmp_path):
    """A directory on a 512 KiB tmpfs of its own (:func:`fill_fs` fills it: a full disk); skipped
    where mounting is refused (not root)."""
    d = tmp_path / "small"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)  # lazily: a traceback may hold a file open


def fill_fs(d) -> None:
    """Fill the filesystem of directory ``d`` (a :func:`full_fs`) with a file ``fill``, to ENOSPC."""
    with open(os.path.join(d, "fill"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise


BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def benchmark_module(name: str):
    """The script ``benchmarks/NAME.py`` loaded as a module (its own imports set up as when run)."""
    spec = importlib.util.spec_from_file_location(f"lirs_{name}", os.path.join(BENCHMARKS, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kdd_indexed(tmp_path_factory, records: int, seed: int = 4) -> str:
    """A kdd-like LIBSVM file of ``records`` records (sorted order, seeded), made and indexed in a
    fresh temporary folder: the data of the torch tests' module fixtures."""
    import lirs
    from lirs.eval.gen import generate

    p = str(tmp_path_factory.mktemp("kdd") / "k.svm")
    generate("kdd", p, records=records, seed=seed, order="sorted", progress=False)
    lirs.build_index(p)
    return p


def open_fds() -> dict[int, str]:
    """File descriptors open in this process now and what they point to (Linux)."""
    out = {}
    for x in os.listdir("/proc/self/fd"):
        try:
            out[int(x)] = os.readlink(f"/proc/self/fd/{x}")
        except OSError:  # the descriptor listdir itself used, closed by now
            pass
    return out


@pytest.fixture
def plot_stopped_midway(tmp_path, monkeypatch):
    """A file NAME under tmp_path holding "the previous plot", and every matplotlib save stopped
    midway (a half PNG written straight under the name it is given, then KeyboardInterrupt):
    call it with NAME, get the path."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def stopped(self, fname, *a, **k):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        raise KeyboardInterrupt
    monkeypatch.setattr(Figure, "savefig", stopped)

    def previous(name: str):
        png = tmp_path / name
        png.write_bytes(b"the previous plot")
        return png
    return previous


@pytest.fixture
def matplotlib_broken(monkeypatch):
    """matplotlib found installed but failing to import, as matplotlib 3.7.0-3.7.2 (built for NumPy 1.x,
    no numpy<2 cap) do under NumPy 2: "numpy.core.multiarray failed to import", after NumPy's page."""
    import builtins

    real_import, real_find = builtins.__import__, importlib.util.find_spec

    def failing(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("numpy.core.multiarray failed to import\n(a second line)")
        return real_import(name, *a, **k)

    def found(name, package=None):
        return object() if name == "matplotlib" else real_find(name, package)
    monkeypatch.setattr(builtins, "__import__", failing)
    monkeypatch.setattr(importlib.util, "find_spec", found)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """lirs's per-user cache (the checks recorded for sidecars it could not rewrite) in this test's
    own folder: never the user's, never another test's."""
    monkeypatch.setenv("LIRS_CACHE_DIR", str(tmp_path / "cache"))


def edit_first_byte(path, byte: bytes = b"9") -> None:
    """An edit of ``path`` that keeps its size: its first byte rewritten, its mtime moved a second
    on (a filesystem's coarse clock could otherwise leave it as it was)."""
    with open(path, "r+b") as f:
        f.write(byte)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
