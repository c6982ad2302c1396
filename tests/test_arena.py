"""DataLoader workers decode their windows into a shared arena (lirs.arena): the batches' values and
indices cross without a copy, a block is written again only once nothing can read it, and where
the arena runs out (a consumer keeping its batches) or is not made, batches are copied as before."""
from __future__ import annotations

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import lirs  # noqa: E402
from conftest import kdd_indexed  # noqa: E402

KW = dict(granularity="window", group_bytes=8192, window=12, seed=3)


@pytest.fixture(scope="module")
def kdd_file(tmp_path_factory):
    return kdd_indexed(tmp_path_factory, 2500)


@pytest.fixture()
def small_arena(monkeypatch):
    """A test file's windows (a few hundred kB each) go into the arena; ``blocks``: its blocks a worker."""
    from lirs import arena

    monkeypatch.setattr(arena, "ARENA_MIN_BYTES", 4096)
    # the shared memory as on a machine with room in /dev/shm (a small one makes no arena: tested apart)
    monkeypatch.setattr(arena, "shm_budget", lambda: 1 << 30)
    return arena


def _loader_batches(path, batch_size, epochs):
    with lirs.Loader(path, batch_size, **KW) as ld:
        return {e: [(b.ids.copy(), b.X.copy(), b.y.copy()) for b in ld.epoch(e)] for e in epochs}


def _same(got, want):
    assert len(got) == len(want)
    for g, (ids, X, y) in zip(got, want):
        assert np.array_equal(g["ids"].numpy(), ids)
        x = g["X"]
        assert np.array_equal(x.crow_indices().numpy(), X.indptr)
        assert np.array_equal(x.col_indices().numpy(), X.indices)
        assert np.array_equal(x.values().numpy(), X.data)
        assert np.array_equal(g["y"].numpy(), y.astype(np.float32))


def _counts(dl):
    a = dl._arena
    return a.sent.copy(), a.freed.copy()


@pytest.mark.parametrize("context", [None, "spawn"])
def test_window_workers_batches_cross_through_the_arena(kdd_file, small_arena, context):
    """Each pass's batches are the Loader's; their values and indices crossed in the arena (no
    copy); once the consumer let them go every block is free again (sent == freed), and the
    workers took their blocks again from window to window rather than new ones."""
    from lirs.torch import make_dataloader
    from lirs.workers import CROSSED

    want = _loader_batches(kdd_file, 16, (1, 2, 3))
    dl = make_dataloader(kdd_file, 16, num_workers=2, multiprocessing_context=context, **KW)
    try:
        for e in (1, 2, 3):
            dl.dataset.set_epoch(e)
            before = CROSSED["arena"]
            got = list(dl)
            _same(got, want[e])
            assert CROSSED["arena"] - before >= 10, "the bundles' values and indices were left in the arena"
            del got
            gc.collect()
            sent, freed = _counts(dl)
            assert (sent == freed).all() and sent.sum() > 0
        windows = -(-dl.dataset.loader().plan(1).perm.n // 12)
        used = (sent > 0).sum(axis=1)  # blocks a worker carved, against the ~1.5 * windows it decoded
        assert windows >= 8 and (used < windows).all(), "blocks taken again from window to window"
    finally:
        dl.dataset.close()


def test_kept_batches_are_never_overwritten_and_a_full_arena_copies(kdd_file, small_arena, monkeypatch):
    """A consumer keeping every batch of three passes holds every block it was sent: the workers
    take no block in use (sent != freed) and, the arena full, copy their later batches into the
    ring; every kept batch still holds its values at the end."""
    from lirs.torch import make_dataloader
    from lirs.workers import CROSSED

    monkeypatch.setattr(small_arena, "ARENA_BLOCKS", 3)
    want = _loader_batches(kdd_file, 16, (1, 2, 3))
    dl = make_dataloader(kdd_file, 16, num_workers=2, **KW)
    try:
        kept = {}
        arena0 = CROSSED["arena"]
        for e in (1, 2, 3):
            dl.dataset.set_epoch(e)
            kept[e] = list(dl)
        sent, freed = _counts(dl)
        assert sent.shape == (2, 3) and (sent > freed).any(), "kept batches hold their blocks"
        assert CROSSED["arena"] - arena0 < sum(len(k) for k in kept.values()) // 4, "the arena ran out: copies"
        for e in (1, 2, 3):
            _same(kept[e], want[e])
        del kept
        gc.collect()
        sent, freed = _counts(dl)
        assert (sent == freed).all()
    finally:
        dl.dataset.close()


def test_no_arena_without_room_or_window_workers(kdd_file, small_arena, monkeypatch):
    """No arena when the shared memory left would not hold a few windows' outputs a worker, for
    group steps, or with one worker: the batches are copied into the ring, and are the Loader's."""
    from lirs.torch import make_dataloader
    from lirs.workers import CROSSED

    monkeypatch.setattr(small_arena, "shm_budget", lambda: 64 << 10)  # 128 KiB free in /dev/shm
    want = _loader_batches(kdd_file, 16, (1,))
    dl = make_dataloader(kdd_file, 16, num_workers=2, **KW)
    try:
        dl.dataset.set_epoch(1)
        before = CROSSED["arena"]
        _same(list(dl), want[1])
        assert dl._arena is None and CROSSED["arena"] == before
    finally:
        dl.dataset.close()
    monkeypatch.undo()
    for kw in (dict(num_workers=2, granularity="group"), dict(num_workers=1, granularity="window"),
               dict(num_workers=2, persistent_workers=False)):  # workers started anew each pass: none
        dl = make_dataloader(kdd_file, 16, **{**KW, **kw})
        try:
            next(iter(dl))
            assert dl._arena is None
        finally:
            dl.dataset.close()


def test_arena_blocks_are_reused_only_when_nothing_views_them():
    """ArenaOutputs: a block comes back when the worker's arrays are gone and the main process has
    let go of every item that referred to it; where() names an array's block and place; small
    outputs and a full part go to the fallback."""
    from lirs.arena import Arena, ArenaOutputs
    from lirs.memory import Recycler

    pair = (np.int32, np.float32)
    arena = Arena(2, 1 << 20, blocks=2, min_bytes=4096)
    out = ArenaOutputs(arena, 1, Recycler(keep=1, min_bytes=1 << 30))
    a, b = out.empties(10_000, pair)
    assert out.where(a) == (0, arena.region) and out.where(b)[0] == 0 and out.where(np.empty(4)) is None
    assert out.where(b[5:])[1] == out.where(b)[1] + 20
    arena.sent[1, 0] += 1                      # an item refers to block 0
    del a, b
    gc.collect()
    c = out.empties(10_000, pair)              # block 0 is in use in the main process: a new block
    assert out.where(c[0])[0] == 1 and out.made == 2 and out.reused == 0
    view = arena.view(1, 0, arena.region, arena.region + 64)
    del view
    gc.collect()                               # the main process let go of its view of the item
    assert arena.freed[1, 0] == 1
    d = out.empties(10_000, pair)
    assert out.where(d[0])[0] == 0 and out.reused == 1
    e = out.empties(10_000, pair)              # both blocks held, no third one: the fallback's memory
    assert out.where(e[0]) is None and out.made == 2
    assert out.where(out.empties(100, pair)[0]) is None  # small outputs: the fallback's
    f = d[1][100:200]
    del d
    gc.collect()                               # a view of an array keeps its block held
    assert out.where(out.empties(10_000, pair)[0]) is None and out.where(f)[0] == 0
    del f
    gc.collect()
    assert out.where(out.empties(10_000, pair)[0])[0] == 0 and out.reused == 2


def test_two_dataloaders_over_one_dataset_have_an_arena_each(kdd_file, small_arena):
    """Each DataLoader's persistent workers decode into an arena of their own, kept by that
    DataLoader: a second DataLoader over the same dataset, its workers running beside the first
    one's, never writes where the first one's do; both deliver the Loader's batches in turns."""
    from lirs.torch import LirsDataLoader, LirsIterableDataset

    want = _loader_batches(kdd_file, 16, (1, 2, 3))
    ds = LirsIterableDataset(kdd_file, 16, **KW)
    one = LirsDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    two = LirsDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    try:
        kept = []
        for dl, e in ((one, 1), (two, 2), (one, 3), (two, 1)):
            ds.set_epoch(e)
            got = list(dl)
            _same(got, want[e])
            kept.append((got, e))
        assert one._arena is not None and two._arena is not None and one._arena is not two._arena
        for got, e in kept:  # every batch kept: none was written over by the other DataLoader's workers
            _same(got, want[e])
    finally:
        ds.close()


def test_no_arena_where_the_shared_memory_cannot_be_read_nor_for_a_worker_without_a_part(kdd_file, monkeypatch):
    """No /dev/shm to read (statvfs fails: not Linux): no arena, batches copied. A worker the arena
    has no part for (a dataset reused by more workers) installs nothing: its outputs stay the pool's."""
    from lirs import arena, memory
    from lirs.torch import make_dataloader

    monkeypatch.setattr(arena, "shm_budget", lambda: None)
    dl = make_dataloader(kdd_file, 16, num_workers=2, **KW)
    try:
        want = _loader_batches(kdd_file, 16, (1,))
        dl.dataset.set_epoch(1)
        _same(list(dl), want[1])
        assert dl._arena is None
    finally:
        dl.dataset.close()
    a = arena.Arena(2, 1 << 20, blocks=2, min_bytes=4096)
    monkeypatch.setattr(memory, "OUTPUTS", memory.RECYCLER)
    arena.install(a, 2)
    assert a.outputs is None and memory.OUTPUTS is memory.RECYCLER
    arena.install(a, 1)
    assert a.outputs is memory.OUTPUTS and a.outputs.worker == 1


def test_a_bundle_with_arena_parts_unpacks_from_a_misaligned_buffer():
    """A bundle that found no free slot crosses in the pickle stream, its buffer maybe not on a
    64-byte boundary: with parts left in the arena it is copied onto one first, and every part,
    packed or viewed in the arena, is what was sent."""
    from lirs import tensors

    ids, y = np.arange(4, dtype=np.int64), np.ones(4, np.float32)
    indptr, ind, val = np.arange(5, dtype=np.int32), np.array([5, 6, 7, 8], np.int32), np.array([.5, .6, .7, .8], np.float32)
    spans, end = tensors.array_spans([ids, y, indptr])
    host = np.zeros(end, np.uint8)
    tensors.pack_arrays(host, [ids, y, indptr], spans)
    mem = np.zeros(256, np.uint8)   # an arena's view from its byte 1000 on
    mem[64:80], mem[128:144] = ind.view(np.uint8), val.view(np.uint8)
    left = [(1064, 16, torch.int32, (4,), 3), (1128, 16, torch.float32, (4,), 3)]
    meta = ("csr", (4, 10), True, "dict", spans + left)
    buf = torch.from_numpy(host)
    off = torch.zeros(end + 1, dtype=torch.uint8)
    off[1:] = buf
    assert off[1:].storage_offset() % tensors.ALIGN
    for b in (buf, off[1:]):
        out, = tensors.unpack_many(b, [meta], {3: (torch.from_numpy(mem), 1000)})
        assert np.array_equal(out["ids"].numpy(), ids) and np.array_equal(out["y"].numpy(), y)
        X = out["X"]
        assert np.array_equal(X.crow_indices().numpy(), indptr) and np.array_equal(X.col_indices().numpy(), ind)
        assert np.array_equal(X.values().numpy(), val) and X.shape == (4, 10)


def test_passes_left_midway_lose_no_block_and_the_next_pass_is_whole(kdd_file, small_arena):
    """A loop that breaks out of a pass (an evaluation every few hundred steps, an exception) leaves
    items in flight: torch drops them as the next pass starts. Their blocks come back once let go,
    and every batch handed out, in the passes left midway and in the next whole one, is the Loader's."""
    from lirs.torch import LirsDataLoader, LirsIterableDataset

    want = _loader_batches(kdd_file, 16, range(7))
    ds = LirsIterableDataset(kdd_file, 16, **KW)
    dl = LirsDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    try:
        for e in range(6):
            ds.set_epoch(e)
            got = []
            for b in dl:
                got.append(b)
                if len(got) == 4 + 7 * e:
                    break
            _same(got, want[e][:len(got)])
        del got, b
        ds.set_epoch(6)
        _same(list(dl), want[6])
        gc.collect()
        sent, freed = _counts(dl)
        assert sent.sum() > 0 and np.array_equal(sent, freed), "every block sent came back"
    finally:
        ds.close()
