"""Faults of real filesystems, injected through a FUSE passthrough (tests/faultfs.py): short reads,
EIO and slow reads. Every engine (and what ``auto`` picks), with O_DIRECT on and off, must deliver
exactly the bytes of the plain file, take no short read for the end of the file, and name the file
and offset of a failed read.
"""
from __future__ import annotations

import errno
import os
import re
import warnings

import numpy as np
import pytest

import lirs
from conftest import engines_here
from faultfs import FaultFS, fuse_missing
from lirs.engines import BLOCK, ReadError, aligned_empty, open_engine
from lirs.errors import UsageError
from lirs.loader import Loader

MISSING = fuse_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"FUSE unavailable: {MISSING}")

ENGINES = [*engines_here(), "auto"]
# (engine, direct): buffered never uses O_DIRECT, so it runs once
ENGINE_MODES = [pytest.param(e, d, id=f"{e}-{'direct' if d else 'cached'}")
                for e in ENGINES for d in (True, False) if not (e == "buffered" and d)]
N_FEATURES = 50
END = 1 << 62


# --------------------------------------------------------------------------- data and the mount


def _write_libsvm(path, n, seed):
    """Seeded LIBSVM text, records of ~5 B to ~3 KB, with blank lines mixed in."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            k = int(rng.choice([0, 2, 10, 200], p=[0.05, 0.4, 0.45, 0.1]))
            cols = np.sort(rng.choice(N_FEATURES, min(k, N_FEATURES), replace=False)) + 1
            vals = rng.integers(-999, 999, len(cols)) / 8
            f.write(f"{rng.choice([-1, 1])}" + "".join(f" {c}:{v:g}" for c, v in zip(cols, vals)))
            f.write("\n\n" if i % 41 == 0 else "\n")


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    """The data files (LIBSVM, .npy, lines, raw bytes) indexed in ``src`` and seen through the
    fault-injecting mount: ``(fs, {name: (plain path, mounted path)})``. Unmounted at teardown,
    whatever the tests did."""
    root = tmp_path_factory.mktemp("faults")
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    rng = np.random.default_rng(7)
    _write_libsvm(src / "train.svm", 1500, seed=3)
    np.save(src / "dense.npy", rng.standard_normal((1200, 5)).astype(np.float32))
    lines = [b"x" * int(rng.integers(0, 700)) + b"%d" % i for i in range(800)]
    (src / "text.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    rng.integers(0, 256, 37 * BLOCK + 123, dtype=np.uint8).tofile(src / "raw.bin")
    for name, fmt in (("train.svm", "libsvm"), ("dense.npy", "npy"), ("text.jsonl", "lines")):
        lirs.build_index(str(src / name), format=fmt, progress=False)
    files = {p.name: (str(p), str(mnt / p.name)) for p in src.iterdir() if not p.name.endswith(".lirs")}
    with FaultFS(src, mnt) as fs:
        yield fs, files
    assert not os.path.ismount(mnt)


@pytest.fixture
def fs(mounted):
    """The mount with no faults before and after the test."""
    fs, _ = mounted
    fs.set_rules([])
    yield fs
    if fs.proc is not None:
        fs.set_rules([])


def _short_rules(name, size):
    """Short answers of three kinds over a file: under a block (continued through the page cache),
    past a block boundary but off one (re-aligned), and whole blocks (O_DIRECT continues)."""
    third = size // 3
    return [{"file": name, "start": 0, "end": third, "kind": "short", "n": 1000},
            {"file": name, "start": third, "end": 2 * third, "kind": "short", "n": 5000},
            {"file": name, "start": 2 * third, "end": END, "kind": "short", "n": 8192}]


def _loader(path, engine, direct, **kw):
    kw.setdefault("n_features", N_FEATURES if path.endswith(".svm") else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a page-cache fallback warns; not tested here
        return Loader(path, kw.pop("batch_size", 64), engine=engine, direct=direct, seed=5, **kw)


def _epoch(path, engine="buffered", direct=False, **kw):
    with _loader(path, engine, direct, **kw) as loader:
        return list(loader.epoch(0))


def _assert_same(got, want):
    """Batches equal byte for byte: ids, labels, and the CSR arrays / dense rows / record bytes."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.index == w.index and np.array_equal(g.ids, w.ids)
        assert (g.y is None and w.y is None) or np.array_equal(g.y, w.y)
        if hasattr(w.X, "indptr"):
            assert np.array_equal(g.X.indptr, w.X.indptr) and np.array_equal(g.X.indices, w.X.indices)
            assert g.X.data.tobytes() == w.X.data.tobytes()
        elif isinstance(w.X, np.ndarray):
            assert g.X.dtype == w.X.dtype and g.X.tobytes() == w.X.tobytes()
        else:
            assert g.X == w.X


# --------------------------------------------------------------------------- the harness itself


@pytest.mark.parametrize("flags", [0, os.O_DIRECT], ids=["cached", "direct"])
def test_short_reads_reach_the_caller(fs, mounted, flags):
    # the premise of every test below: FUSE (direct_io) hands the short answer to the application
    _, files = mounted
    fs.set_rules([{"file": "raw.bin", "start": 0, "end": END, "kind": "short", "n": 1000}])
    fd = os.open(files["raw.bin"][1], os.O_RDONLY | flags)
    try:
        buf = aligned_empty(2 * BLOCK)
        assert os.preadv(fd, [memoryview(buf)], BLOCK) == 1000
        plain = np.fromfile(files["raw.bin"][0], np.uint8)
        assert bytes(buf[:1000]) == plain[BLOCK:BLOCK + 1000].tobytes()
    finally:
        os.close(fd)
    assert fs.counts()["short"] >= 1


def test_eio_reaches_the_caller(fs, mounted):
    _, files = mounted
    fs.set_rules([{"file": "raw.bin", "start": 3 * BLOCK, "end": 3 * BLOCK + 1, "kind": "eio"}])
    fd = os.open(files["raw.bin"][1], os.O_RDONLY)
    try:
        assert len(os.pread(fd, BLOCK, 0)) == BLOCK
        with pytest.raises(OSError) as ei:
            os.pread(fd, BLOCK, 3 * BLOCK)
        assert ei.value.errno == errno.EIO
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- engine level


@pytest.mark.parametrize("engine,direct", ENGINE_MODES)
def test_engine_read_continues_short_reads(fs, mounted, engine, direct):
    _, files = mounted
    plain_path, path = files["raw.bin"]
    plain = np.fromfile(plain_path, np.uint8)
    size = plain.size
    fs.set_rules(_short_rules("raw.bin", size))
    nblocks = -(-size // BLOCK)
    rng = np.random.default_rng(11)
    count = 40
    off = (rng.integers(0, nblocks, count) * BLOCK).astype(np.int64)
    nb = (rng.integers(1, 6, count) * BLOCK).astype(np.int64)
    off[:3] = [(nblocks - 1) * BLOCK, (nblocks - 2) * BLOCK, nblocks * BLOCK]  # true ends of file
    nb[:3] = [2 * BLOCK, 3 * BLOCK, BLOCK]
    pos = np.concatenate([[0], np.cumsum(nb)[:-1]]).astype(np.int64)
    buf = aligned_empty(int(nb.sum()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        eng = open_engine([path], engine, direct=direct)
    with eng:
        assert eng.direct == (direct and eng.name != "buffered")
        got = eng.read(np.zeros(count, np.int32), off, nb, buf, pos)
        want = np.minimum(nb, np.maximum(size - off, 0))
        assert got.tolist() == want.tolist(), "full counts mid-file, the short count only at the end"
        assert got[0] == size - (nblocks - 1) * BLOCK and got[2] == 0
        for i in range(count):
            assert bytes(buf[pos[i]:pos[i] + got[i]]) == plain[off[i]:off[i] + got[i]].tobytes(), f"extent {i}"
        if eng.direct:
            assert eng.cfds[0] >= 0, "the short O_DIRECT reads went on through the page cache"
    assert fs.counts()["short"] > 0


@pytest.mark.parametrize("engine,direct", ENGINE_MODES)
def test_engine_read_error_names_file_and_offset(fs, mounted, engine, direct):
    _, files = mounted
    path = files["raw.bin"][1]
    bad = 20 * BLOCK + 100
    fs.set_rules([{"file": "raw.bin", "start": 0, "end": END, "kind": "short", "n": 3000},
                  {"file": "raw.bin", "start": bad, "end": bad + 1, "kind": "eio"}])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        eng = open_engine([path], engine, direct=direct)
    with eng:
        buf = aligned_empty(8 * BLOCK)
        with pytest.raises(ReadError) as ei:
            eng.read([0, 0], [0, 18 * BLOCK], [4 * BLOCK, 4 * BLOCK], buf, [0, 4 * BLOCK])
    err = ei.value
    assert err.errno == errno.EIO and err.filename == path and path in str(err)
    m = re.search(r"at offset (\d+)", str(err))
    assert m and 18 * BLOCK <= int(m.group(1)) <= bad, str(err)


# --------------------------------------------------------------------------- index level


SCANS = ["direct", "cached"]  # how `lirs index` reads: O_DIRECT pieces, or the page-cache fallback


def _scan_mode(monkeypatch, scan):
    if scan == "cached":
        import lirs.inputs as I

        monkeypatch.setattr(I, "_scan_engine", lambda path: None)


@pytest.mark.parametrize("scan", SCANS)
def test_index_through_short_reads_is_identical(fs, mounted, tmp_path, monkeypatch, scan):
    from lirs.index import open_index

    _, files = mounted
    plain, path = files["train.svm"]
    _scan_mode(monkeypatch, scan)
    fs.set_rules(_short_rules("train.svm", os.path.getsize(plain)))
    got = lirs.build_index(path, progress=False, out=str(tmp_path / "m.lirs"), chunk_bytes=50000)
    want = open_index(plain + ".lirs")
    assert got.n == want.n and np.array_equal(got.offsets, want.offsets)
    assert np.array_equal(got.label_values[got.label_codes], want.label_values[want.label_codes])
    assert fs.counts()["short"] > 0


def _failed_at(err) -> int:
    """The byte offset a read error names: ``lirs_offset`` (page-cache reads), else the engine's
    message ("... at offset N")."""
    off = getattr(err, "lirs_offset", None)
    if off is not None:
        return int(off)
    m = re.search(r"at offset (\d+)", str(err))
    assert m, str(err)
    return int(m.group(1))


@pytest.mark.parametrize("scan", SCANS)
def test_eio_during_a_scan_names_file_and_offset(fs, mounted, monkeypatch, scan):
    from lirs.inputs import read_chunks

    _, files = mounted
    plain, path = files["train.svm"]
    size = os.path.getsize(plain)
    bad = size // 2 + 77
    _scan_mode(monkeypatch, scan)
    fs.set_rules([{"file": "train.svm", "start": 0, "end": END, "kind": "short", "n": 2000},
                  {"file": "train.svm", "start": bad, "end": bad + 1, "kind": "eio"}])
    seen = 0
    with pytest.raises(OSError) as ei:
        for _, nb, off in read_chunks(path, 0, size, 1 << 16, direct=scan == "direct"):
            seen = off + nb
    err = ei.value
    assert err.errno == errno.EIO and err.filename == path and seen <= bad
    assert bad - (1 << 20) <= _failed_at(err) <= bad, str(err)


@pytest.mark.parametrize("scan", SCANS)
def test_eio_during_index_names_file_and_offset(fs, mounted, tmp_path, monkeypatch, capsys, scan):
    from lirs.cli import main

    _, files = mounted
    plain, path = files["train.svm"]
    bad = os.path.getsize(plain) // 2 + 77
    _scan_mode(monkeypatch, scan)
    fs.set_rules([{"file": "train.svm", "start": 0, "end": END, "kind": "short", "n": 2000},
                  {"file": "train.svm", "start": bad, "end": bad + 1, "kind": "eio"}])
    assert main(["index", path, "-o", str(tmp_path / "m.lirs"), "--quiet", "--chunk", "64K"]) == 1
    err = capsys.readouterr().err.strip()
    assert path in err and "Input/output error" in err and "Traceback" not in err, err
    m = re.search(r"(?:byte|at offset) (\d+)", err)
    assert m and bad - (1 << 20) <= int(m.group(1)) <= bad, err
    assert len(err.splitlines()) == 1 and not os.path.exists(tmp_path / "m.lirs")


@pytest.mark.parametrize("cmd", [["index", "{p}", "-o", "{out}/m.lirs"],
                                 ["index", "{p}", "--format", "libsvm", "-o", "{out}/m.lirs"],
                                 ["shuffle", "{p}", "-o", "{out}/s.svm", "--memory", "2M"]])
def test_eio_in_the_first_bytes_names_file_and_byte(fs, mounted, tmp_path, capsys, cmd):
    """The bytes read before a scan (the format's sniff, shuffle's sample of the mean record) said
    "Input/output error" and nothing else."""
    from lirs.cli import main

    _, files = mounted
    path = files["train.svm"][1]
    fs.set_rules([{"file": "train.svm", "start": 1000, "end": 1001, "kind": "eio"}])
    assert main([a.format(p=path, out=tmp_path) for a in cmd] + ["--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    m = re.search(rf"{re.escape(path)}: byte (\d+): Input/output error", err)
    assert m and int(m.group(1)) <= 1000 and len(err.splitlines()) == 1, err


def test_eio_in_npy_labels_names_file_and_byte(fs, mounted, tmp_path):
    """numpy's read of a labels file (where it cannot be mapped) lost the file and the byte."""
    import shutil
    import subprocess
    import sys

    _, files = mounted
    src, mnt = (os.path.join(os.path.dirname(files["dense.npy"][i]), "labelled") for i in (0, 1))
    os.makedirs(src)
    try:
        np.save(os.path.join(src, "x.npy"), np.ones((300, 4), np.float32))
        np.save(os.path.join(src, "x.labels.npy"), np.arange(300.0))
        fs.set_rules([{"file": "labelled/x.labels.npy", "start": 500, "end": 501, "kind": "eio"}])
        for cmd in (["index", "-o", str(tmp_path / "x.lirs")], ["shuffle", "-o", str(tmp_path / "s.npy")]):
            r = subprocess.run([sys.executable, "-m", "lirs.cli", cmd[0], os.path.join(mnt, "x.npy"), *cmd[1:],
                                "--quiet"], capture_output=True, text=True, timeout=300)
            lab = re.escape(os.path.join(mnt, "x.labels.npy"))
            assert r.returncode == 1 and re.search(rf"{lab}: byte \d+: Input/output error", r.stderr), r.stderr
    finally:
        shutil.rmtree(src)


def test_auto_engine_passes_a_device_error_on(fs, mounted):
    """A device error in the probe read of ``auto`` is the device's, not an engine that cannot
    work: it came as "no engine works" (errno and file lost), now as the engine's ReadError."""
    _, files = mounted
    path = files["train.svm"][1]
    fs.set_rules([{"file": "train.svm", "start": 0, "end": BLOCK, "kind": "eio"}])
    with pytest.raises(ReadError) as ei:
        open_engine([path], "auto", direct=False)
    assert ei.value.errno == errno.EIO and ei.value.filename == path and "at offset 0" in str(ei.value)


# --------------------------------------------------------------------------- loader level


FORMATS = [("train.svm", ("instance", "group", "window")), ("dense.npy", ("page", "group")),
           ("text.jsonl", ("instance", "window"))]


@pytest.fixture(scope="module")
def reference(mounted):
    """Epoch 0 of every (file, granularity) read from the plain files."""
    _, files = mounted
    out = {}
    for name, grans in FORMATS:
        for g in grans:
            out[name, g] = _epoch(files[name][0], granularity=g, group_bytes=8192, window=3)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("engine,direct", ENGINE_MODES)
@pytest.mark.parametrize("name,grans", FORMATS, ids=[f for f, _ in FORMATS])
def test_short_reads_give_identical_epochs(fs, mounted, reference, engine, direct, name, grans):
    _, files = mounted
    path = files[name][1]
    fs.set_rules(_short_rules(name, os.path.getsize(files[name][0])))
    for g in grans:
        got = _epoch(path, engine, direct, granularity=g, group_bytes=8192, window=3)
        _assert_same(got, reference[name, g])
    assert fs.counts()["short"] > 0


@pytest.mark.parametrize("engine,direct", ENGINE_MODES)
def test_eio_stops_the_epoch_naming_file_and_offset(fs, mounted, reference, engine, direct):
    _, files = mounted
    plain, path = files["train.svm"]
    size = os.path.getsize(plain)
    bad = size // 2 + 77
    want = reference["train.svm", "instance"]
    delivered = []
    with _loader(path, engine, direct, granularity="instance") as loader:
        fs.set_rules([{"file": "train.svm", "start": 0, "end": END, "kind": "short", "n": 2000},
                      {"file": "train.svm", "start": bad, "end": bad + 1, "kind": "eio"}])
        with pytest.raises(OSError) as ei:
            for b in loader.epoch(0):
                delivered.append(b)
    err = ei.value
    assert err.errno == errno.EIO and err.filename == path and path in str(err), str(err)
    m = re.search(r"reading (\d+) bytes at offset (\d+)", str(err))
    assert m, str(err)
    nbytes, off = int(m.group(1)), int(m.group(2))
    assert off <= bad < off + nbytes + BLOCK, "the offset is that of the failed read"
    assert len(delivered) < len(want), "the bad range is read by some batch"
    _assert_same(delivered, want[:len(delivered)])  # nothing missing, nothing foreign before it


@pytest.mark.parametrize("engine", ENGINES)
def test_slow_out_of_order_reads_keep_batches_in_order(fs, mounted, reference, engine):
    _, files = mounted
    fs.set_rules([{"file": "train.svm", "start": 0, "end": END, "kind": "delay", "seconds": 0.004,
                   "jitter": True}])
    got = _epoch(files["train.svm"][1], engine, None, granularity="window", group_bytes=8192, window=3)
    _assert_same(got, reference["train.svm", "window"])
    assert fs.counts()["delay"] > 0


@pytest.mark.parametrize("engine", ENGINES)
def test_aepoch_with_short_reads(fs, mounted, reference, engine):
    import asyncio

    _, files = mounted
    fs.set_rules(_short_rules("train.svm", os.path.getsize(files["train.svm"][0])))

    async def collect():
        with _loader(files["train.svm"][1], engine, None, granularity="group", group_bytes=8192) as loader:
            return [b async for b in loader.aepoch(0)]

    _assert_same(asyncio.run(collect()), reference["train.svm", "group"])


# --------------------------------------------------------------------------- the sidecar fails, the data changes


@pytest.fixture(scope="module")
def cached_mount(mounted, tmp_path_factory):
    """The same source mounted without direct_io: reads go through the kernel's page cache (where
    a memory map's failed page is a SIGBUS)."""
    _, files = mounted
    src = os.path.dirname(files["train.svm"][0])
    mnt = tmp_path_factory.mktemp("cached")
    with FaultFS(src, mnt, direct_io=False) as fs2:
        yield fs2, str(mnt)
    assert not os.path.ismount(mnt)


def _sidecar_byte(plain: str, where: str) -> int:
    """A byte of the sidecar of ``plain``: inside array ``where``, or its JSON header."""
    from lirs import sidecar as S

    header, _ = S.read_header(plain + ".lirs")
    if where == "header":
        with open(plain + ".lirs", "rb") as f:
            return S._PREAMBLE.unpack_from(f.read(S._PREAMBLE.size))[3] + 5
    spec = header["arrays"][where]
    return spec["offset"] + spec["count"] * np.dtype(spec["dtype"]).itemsize // 2


@pytest.mark.parametrize("mode", ["direct_io", "page_cache"])
@pytest.mark.parametrize("where,cmd", [("label_codes", "info"), ("label_codes", "epoch"), ("offsets_rel", "epoch"),
                                       ("header", "info")])
def test_eio_in_the_sidecar_is_one_line_naming_it(mounted, cached_mount, tmp_path, mode, where, cmd):
    import subprocess
    import sys

    fs, files = mounted
    plain = files["train.svm"][0]
    path = files["train.svm"][1]
    if mode == "page_cache":
        fs, mnt = cached_mount
        path = os.path.join(mnt, "train.svm")
    bad = _sidecar_byte(plain, where)
    fs.set_rules([{"file": "train.svm.lirs", "start": bad, "end": bad + 1, "kind": "eio"}])
    try:
        r = subprocess.run([sys.executable, "-m", "lirs.cli", cmd, path], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "LIRS_CACHE_DIR": str(tmp_path)})
    finally:
        fs.set_rules([])
    assert r.returncode == 1, (r.returncode, r.stderr)  # never SIGBUS (-7), never a count printed
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and path + ".lirs" in err[0] and "Input/output error" in err[0], r.stderr
    m = re.search(r"\.lirs: byte (\d+): Input/output error", err[0])  # the header's read named its byte too
    assert m and int(m.group(1)) // BLOCK <= bad // BLOCK, err[0]  # (a page-cache read fails a whole page)
    assert fs.counts()["eio"] > 0


def test_a_file_that_changes_mid_epoch_fails_at_the_next_step(fs, mounted):
    import time

    _, files = mounted
    plain, path = files["train.svm"]
    before = open(plain, "rb").read()
    st = os.stat(plain)
    try:
        with _loader(path, "buffered", False, granularity="instance", batch_size=16) as loader:
            it = loader.epoch(0)
            next(it)
            with open(plain, "ab") as f:  # the source under the mount grows
                f.write(b"1 1:1\n")
            time.sleep(1.2)  # past FUSE's attribute cache (1 s)
            with pytest.raises(lirs.StaleIndexError, match="changed while it was being read"):
                for _ in it:
                    pass
    finally:
        with open(plain, "wb") as f:
            f.write(before)
        os.utime(plain, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_check_on_a_read_only_mount_verifies_and_records_elsewhere(fs, mounted, tmp_path):
    import subprocess
    import sys
    import time

    _, files = mounted
    plain, path = files["train.svm"]
    st = os.stat(plain)
    env = {**os.environ, "LIRS_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "lirs.cli", "index", "--check", path]
    with open(plain, "rb") as f:
        b = f.read(1)
    try:
        os.utime(plain, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched under the mount
        time.sleep(1.2)  # past FUSE's attribute cache (1 s)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr  # verified, though the sidecar cannot be rewritten
        assert os.listdir(tmp_path / "verified")
        with open(plain, "r+b") as f:  # now a real change, same size
            f.write(b"1" if b != b"1" else b"-")
        os.utime(plain, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
        time.sleep(1.2)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 1 and "content changed at bytes 0-" in r.stderr, r.stderr
    finally:
        with open(plain, "r+b") as f:
            f.write(b)
        os.utime(plain, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_unindexed_file_on_a_read_only_mount_names_where_to_put_the_index(fs, mounted):
    """Index on first use where the directory cannot take the sidecar (a read-only mount): one
    UsageError naming the sidecar and the `-o` way out, nothing left behind."""
    _, files = mounted
    plain, _ = files["train.svm"]
    src, mnt = os.path.dirname(plain), os.path.dirname(files["train.svm"][1])
    name = "first-use.svm"
    _write_libsvm(os.path.join(src, name), 40, seed=9)
    try:
        with pytest.raises(UsageError, match=r"first-use\.svm\.lirs cannot be written .*lirs index .* -o"):
            Loader(os.path.join(mnt, name), 8)
        assert not [n for n in os.listdir(src) if n.startswith(name + ".lirs")]
    finally:
        os.remove(os.path.join(src, name))


def _tagged(batch: dict) -> dict:
    """A user transform (module level: workers of any start method can take it)."""
    return {**batch, "tag": 1}


@pytest.mark.parametrize("granularity,transform", [("window", None), ("group", None), ("window", _tagged)])
def test_eio_under_dataloader_workers_comes_at_its_batch(fs, mounted, granularity, transform):
    """make_dataloader's workers read ahead of the consumer in bundles of batches, yet an I/O error
    reaches the loop at the batch it belongs to (the first of the read step that failed; for window
    steps, where a DataLoader without workers stops), after every batch before it, with its errno
    and file; the state names that batch, and a DataLoader resumed there delivers the rest: the
    epoch is whole, in order, once. With a transform (each batch an item of its own through torch)
    as well."""
    pytest.importorskip("torch")
    from lirs.torch import make_dataloader

    _, files = mounted
    plain, path = files["train.svm"]
    kw = dict(granularity=granularity, group_bytes=8192, window=4, seed=5, n_features=N_FEATURES, engine="buffered",
              transform=transform)
    want = [b["ids"].tolist() for b in make_dataloader(plain, 32, num_workers=0, **kw)]
    size = os.path.getsize(plain)
    fs.set_rules([{"file": "train.svm", "start": size // 2, "end": size // 2 + 1, "kind": "eio"}])
    heads = {}
    for workers in (0, 2):
        dl = make_dataloader(path, 32, num_workers=workers, **kw)
        head = heads[workers] = []
        with pytest.raises(OSError, match="train.svm") as ei:
            for b in dl:
                head.append(b["ids"].tolist())
        assert ei.value.errno == errno.EIO and ei.value.filename == path, repr(ei.value)
        assert dl.state_dict()["next_batch"] == len(head) < len(want)
    # an error reading a step belongs to the step's first batch; a window worker reads whole windows,
    # the steps of a DataLoader without workers, while a group worker's steps hold its own batches
    assert 0 < len(heads[2]) <= len(heads[0])
    if granularity == "window":
        assert len(heads[2]) == len(heads[0]), "the error comes at its batch, with workers as without"
    fs.set_rules([])
    again = make_dataloader(path, 32, num_workers=2, **kw)
    again.load_state_dict(dl.state_dict())
    assert heads[2] + [b["ids"].tolist() for b in again] == want
