"""Recycled memory (lirs.memory.Recycler): a block goes back only when its last view is gone,
is taken again by the next array of about its size, and a window epoch whose batches are all
kept still hands out the right rows."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import lirs
from lirs import assemble, memory, svmdecode
from lirs.loader import Loader
from lirs.memory import Recycler


def test_a_block_comes_back_only_when_its_last_view_is_gone():
    r = Recycler(keep=4, min_bytes=1 << 16)
    a = r.empty(1 << 16, np.float32)
    assert a.flags.writeable and a.flags.c_contiguous and a.ctypes.data % 4096 == 0 and a.dtype == np.float32
    addr = a.ctypes.data
    a[:] = 7
    view = a[100:200][10:20].view(np.int32)  # a view of a view, reinterpreted
    del a
    gc.collect()
    assert r.free_bytes == 0  # the view still holds the block
    b = r.empty(1 << 16, np.float32)
    assert b.ctypes.data != addr and r.reused == 0
    assert (view.view(np.float32) == 7).all()
    del view
    assert r.free_bytes >= (1 << 18)
    c = r.empty((1 << 16) - 5, np.float32)  # about the same size: the same block, pages in place
    assert c.ctypes.data == addr and r.reused == 1 and r.made == 2


def test_arrays_made_together_share_one_block_that_comes_back_with_the_last_of_them():
    r = Recycler(keep=4, min_bytes=1 << 16)
    idx, val = r.empties(1 << 15, (np.int32, np.float32))
    assert (idx.dtype, val.dtype, idx.shape, val.shape) == (np.int32, np.float32, (1 << 15,), (1 << 15,))
    assert idx.flags.writeable and val.flags.writeable and r.made == 1
    assert val.ctypes.data == idx.ctypes.data + idx.nbytes and val.ctypes.data % 64 == 0  # back to back
    idx[:] = 3
    val[:] = 2.5
    assert (idx == 3).all() and (val == 2.5).all()  # neither overwrote the other
    addr = idx.ctypes.data
    kept = val[5:9]
    del idx, val
    gc.collect()
    assert r.free_bytes == 0  # a view of either holds the block
    del kept
    assert r.free_bytes >= 1 << 18
    a, b = r.empties((1 << 15) - 3, (np.int32, np.float32))  # about the same size: the same block
    assert a.ctypes.data == addr and r.reused == 1 and r.made == 1
    assert b.ctypes.data % 64 == 0 and b.ctypes.data >= a.ctypes.data + a.nbytes
    small = r.empties(10, (np.int64, np.uint8))  # below min_bytes: numpy's, one array each
    assert [x.base for x in small] == [None, None] and [x.dtype for x in small] == [np.int64, np.uint8]


def test_small_arrays_are_numpys_and_the_pool_keeps_the_largest_blocks():
    r = Recycler(keep=2, min_bytes=1 << 20)
    small = r.empty(100, np.int64)
    assert small.base is None and r.made == 0
    arrays = [r.empty(n << 18, np.uint8) for n in (4, 5, 6, 8)]
    del arrays
    assert r.free_bytes >= (6 + 8) << 18 and len(r._free) == 2  # the two largest stayed
    held = r.empty(1 << 21, np.uint8)
    assert held.size == 1 << 21 and r.reused == 1  # the 8-unit block (2 MiB and headroom)
    assert r.trim() == 1 and r.free_bytes == 0


def _thp_eligible(addr: int):
    """The ``THPeligible`` of the mapping holding ``addr`` in /proc/self/smaps (None: not there)."""
    try:
        text = open("/proc/self/smaps").read()
    except OSError:
        return None
    hit = False
    for line in text.splitlines():
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            hit = lo <= addr < hi
        elif hit and head == "THPeligible:":
            return line.split()[1] == "1"
    return None


def test_huge_pages_only_for_blocks_of_a_windows_size():
    """A read step's decoded arrays (under ``min_bytes``) lie in blocks of small pages: sized by a
    bound on them, they are partly used, and a huge page would bring 2 MiB in around each end. A
    window's blocks (``min_bytes`` and up) ask for huge pages, as before."""
    try:
        mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        pytest.skip("no transparent huge pages here")
    if "[madvise]" not in mode:
        pytest.skip(f"transparent huge pages not in madvise mode ({mode.strip()}): the advice changes nothing")
    r = Recycler(keep=4, min_bytes=8 << 20)
    step = r.empty(4 << 20, np.uint8, 1 << 20)
    window = r.empty(8 << 20, np.uint8)
    if _thp_eligible(window.ctypes.data) is None:
        pytest.skip("no THPeligible in /proc/self/smaps")
    assert _thp_eligible(window.ctypes.data) is True
    assert _thp_eligible(step.ctypes.data) is False


def test_no_map_to_be_had_gives_numpys_memory(monkeypatch):
    # a map refused (address space, vm.max_map_count): the array comes from numpy, sized and usable
    import mmap as mmap_mod

    r = Recycler(keep=4, min_bytes=1 << 16)

    def refuse(*a, **k):
        raise OSError(12, "Cannot allocate memory")
    monkeypatch.setattr(mmap_mod, "mmap", refuse)
    a = r.empty(1 << 16, np.float32)
    a[:] = 3
    assert a.shape == (1 << 16,) and a.dtype == np.float32 and a.base is None and r.made == 0
    b, c = r.empties(1 << 16, (np.int32, np.float64))  # arrays made together: the same way out
    assert (b.dtype, c.dtype, b.shape, c.shape) == (np.int32, np.float64, (1 << 16,), (1 << 16,))
    assert b.base is None and c.base is None and r.made == 0


def test_a_huge_request_never_takes_a_block_twice_its_size():
    r = Recycler(keep=4, min_bytes=1 << 16)
    big = r.empty(1 << 22, np.uint8)
    del big
    small = r.empty(1 << 17, np.uint8)  # would waste 4 MiB: a new block
    assert r.reused == 0 and r.made == 2 and small.size == 1 << 17


@pytest.fixture()
def recycled_everything(monkeypatch):
    """Every loader buffer and every window's decoded arrays recycled, and windows decoded by
    several threads, on small data."""
    rec = Recycler(keep=4, min_bytes=1 << 14)
    monkeypatch.setattr(memory, "RECYCLER", rec)
    monkeypatch.setattr(memory, "OUTPUTS", rec)  # a step's decoded arrays: the pool's (a worker's arena aside)
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1 << 12)
    monkeypatch.setattr(svmdecode, "usable_cores", lambda: 2)
    monkeypatch.setattr(assemble, "usable_cores", lambda: 3)  # two decoding, one for the consumer
    return rec


def _write(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            k = int(rng.integers(1, 40))
            cols = np.sort(rng.choice(500, k, replace=False)) + 1
            f.write(f"{rng.choice([-1, 1])}" + "".join(f" {c}:{v}" for c, v in zip(cols, rng.integers(1, 99, k))) + "\n")
    return str(path)


def test_kept_batches_of_a_window_epoch_are_never_overwritten(tmp_path, recycled_everything):
    from sklearn.datasets import load_svmlight_file

    p = _write(tmp_path / "d.svm", 6000, 3)
    idx = lirs.build_index(p, progress=False)
    X, y = load_svmlight_file(p, dtype=np.float32, n_features=500)
    loader = Loader(idx, 64, granularity="window", group_bytes=4096, window=12, n_features=500, seed=1)
    kept = [b for e in range(2) for b in loader.epoch(e)]  # every batch held while later windows decode
    for b in kept:
        assert np.array_equal(b.X.toarray(), X[b.ids].toarray()) and np.array_equal(b.y, y[b.ids])
    assert recycled_everything.made > 10  # (windows and buffers did come from the pool)
    loader.close()


def test_a_window_epoch_takes_its_memory_again(tmp_path, recycled_everything):
    p = _write(tmp_path / "d.svm", 6000, 4)
    idx = lirs.build_index(p, progress=False)
    loader = Loader(idx, 64, granularity="window", group_bytes=4096, window=12, n_features=500, seed=1)
    for e in range(2):
        for _ in loader.epoch(e):
            pass
    rec = recycled_everything
    assert rec.reused > rec.made  # most windows took the blocks of those before them
    assert rec.free_bytes > 0
    loader.close()
    assert rec.free_bytes == 0  # a closed loader keeps no block waiting


def test_group_steps_take_their_memory_again_and_kept_batches_stay_intact(tmp_path, recycled_everything,
                                                                          monkeypatch):
    # a group step's decoded arrays come from the pool (small ones here) and go back when its last
    # batch is gone: batches kept meanwhile still hold their rows
    from sklearn.datasets import load_svmlight_file

    monkeypatch.setattr(svmdecode, "RECYCLE_STEP_MIN_BYTES", 1 << 12)
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1 << 30)  # each step decoded by one thread, as a group step is
    p = _write(tmp_path / "d.svm", 6000, 5)
    idx = lirs.build_index(p, progress=False)
    X, y = load_svmlight_file(p, dtype=np.float32, n_features=500)
    rec = recycled_everything
    with Loader(idx, 64, granularity="group", group_bytes=4096, n_features=500, seed=1) as loader:
        kept = [b for i, b in enumerate(loader.epoch(0)) if i % 7 == 0]
        reused = rec.reused
        for e in (1, 2):
            for _ in loader.epoch(e):
                pass
        assert rec.reused > reused  # later steps took blocks that earlier ones gave back
        for b in kept:
            assert _pool_block(b.X.data) and _pool_block(b.X.indices)
            assert np.array_equal(b.X.toarray(), X[b.ids].toarray()) and np.array_equal(b.y, y[b.ids])


def _pool_block(a) -> bool:
    """Whether array ``a`` is a view of a recycled block (an anonymous map) rather than numpy's memory."""
    import mmap

    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(getattr(a, "obj", a), mmap.mmap)  # np.frombuffer's base: a memoryview of the map


@pytest.mark.parametrize("n, dtype", [(0, np.int64), (1, np.uint8), (5000, np.int32), (4097, np.int64)])
def test_held_arrays_are_zeroed_or_copied_writable_and_their_own(n, dtype):
    z = memory.zeros_held(n, dtype)
    assert z.shape == (n,) and z.dtype == dtype and z.flags.writeable and z.flags.c_contiguous
    assert z.flags.aligned and not z.any()
    src = np.arange(n + 3, dtype=dtype)
    c = memory.copy_held(src[2:n + 2])
    assert c.dtype == dtype and c.flags.writeable and np.array_equal(c, src[2:n + 2])
    if n:
        c[0] += 1  # its own memory: the source is untouched
        assert src[2] == 2


def test_held_arrays_above_the_bound_are_numpys(monkeypatch):
    monkeypatch.setattr(memory, "HELD_MAX_BYTES", 64)
    assert isinstance(memory.zeros_held(8, np.int64).base.obj, bytearray)  # 64 bytes: held
    big = memory.zeros_held(9, np.int64)
    assert big.base is None and not big.any()  # numpy's zeros (the GIL goes: worth it for a large array)
    c = memory.copy_held(np.arange(20))
    assert c.base is None and c.tolist() == list(range(20))


def test_a_read_step_makes_its_small_arrays_with_the_gil_held(tmp_path, monkeypatch):
    # an instance step's engine counts (one per extent) are made by zeros_held, not numpy's zeros,
    # which lets the GIL go on the pool thread reading it; its extents are views of the arrays they
    # were found in (no copy at all below EXTENTS_COPY_MIN_BYTES, copy_held from there on)
    from lirs import plan
    from lirs.engines import base

    made = {"zeros": 0, "copies": 0}

    def counted(fn, key):
        def f(*a):
            made[key] += 1
            return fn(*a)
        return f
    monkeypatch.setattr(base, "zeros_held", counted(memory.zeros_held, "zeros"))
    monkeypatch.setattr(plan, "copy_held", counted(memory.copy_held, "copies"))
    p = _write(tmp_path / "d.svm", 3000, 6)
    with Loader(p, 256, granularity="instance", engine="buffered", n_features=500, seed=2) as loader:
        got = sorted(i for b in loader.epoch(0) for i in b.ids.tolist())
    assert got == list(range(3000))
    assert made["copies"] == 0 and made["zeros"] >= 3  # three a read of the engine


def test_a_shared_block_is_shared_with_a_forked_child():
    # its bytes are not promised zero (a block may reuse one freed earlier in this process)
    import os
    block = memory.shared_block(3 << 20)
    a = memory.shared_array(block)
    assert a.shape == (3 << 20,) and a.dtype == np.uint8
    a[12345], a[-1] = 0, 0
    pid = os.fork()
    if pid == 0:  # the child writes where the parent reads
        a[12345] = 7
        memory.shared_array(block, np.int32)[-1] = -2
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert a[12345] == 7 and memory.shared_array(block, np.int32)[-1] == -2
    assert memory.shared_array(memory.shared_block(0)).size >= 1  # never an empty mapping


def test_a_view_of_a_shared_block_keeps_it_from_the_next_block():
    """Batches a consumer kept from a DataLoader it let go view that DataLoader's shared memory:
    once the block object is gone, a later block must not be carved from those bytes."""
    import gc
    import weakref
    block = memory.shared_block((5 << 20) + 100)  # its heap file has room left after it
    beside = memory.shared_block(64)  # carved from that room: the file is never wholly free
    kept = memory.shared_array(block)[:1000]
    kept[:] = 7
    gone = weakref.ref(block)
    del block
    gc.collect()
    assert gone() is not None, "the view keeps the block"
    memory.shared_array(memory.shared_block((5 << 20) + 100))[:] = 1  # the next block
    assert (kept == 7).all() and beside is not None
    del kept
    gc.collect()
    assert gone() is None, "and lets it go with the last view"


def test_a_ring_takes_its_slots_unwritten(monkeypatch):
    # multiprocessing.RawArray writes every byte of its memory (a memset) before returning: 1 GiB,
    # a second before the workers could start, and all of it resident for good; the ring's slots
    # come from a shared block instead (its small busy flags may stay a RawArray)
    pytest.importorskip("torch")
    import multiprocessing

    from lirs.ring import SlotRing
    raw = multiprocessing.RawArray

    def small_only(typecode, n):
        assert n <= 4096, f"a RawArray of {n} items"
        return raw(typecode, n)

    monkeypatch.setattr(multiprocessing, "RawArray", small_only)
    ring = SlotRing(2, 3, 1 << 20)
    assert ring.mem.size == 6 << 20 and ring.busy.size == 6 and not ring.mem.any()
