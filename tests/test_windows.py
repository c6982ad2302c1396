"""Windows sized by memory: the spec (group count, size, share of the data), what it plans, and the
number of windows the loader holds at once."""
from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np
import pytest

import lirs
from lirs import pipeline
from lirs.cli import main as cli_main
from lirs.constants import DEFAULT_WINDOW
from lirs.errors import UsageError
from lirs.eval.gen import generate
from lirs.plan import plan_epoch
from lirs.plan import unit_table
from lirs.units import format_bytes
from lirs.windows import window_bounds, window_count, window_groups


@pytest.fixture(scope="module")
def kdd(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("windows") / "kdd.svm")
    generate("kdd", p, records=6000, seed=11, progress=False)
    lirs.build_index(p, progress=False)
    return p


@pytest.mark.parametrize("spec,groups", [
    (16, 16), ("16", 16), ("1M", 16), ("1MiB", 16), ("64M", 1024), ("1.5M", 24), ("100K", 1),
    ("1K", 1), ("5%", 77), ("100%", 1526), ("0.0001%", 1), ("auto", 256),
])
def test_window_spec_to_groups(spec, groups):
    assert window_groups(spec, 65536, 100_000_000) == groups


@pytest.mark.parametrize("data_bytes,window_bytes", [(10**6, 16 << 20), (10**9, 5 * 10**7), (10**12, 256 << 20)])
def test_auto_window_is_five_percent_within_bounds(data_bytes, window_bytes):
    assert window_groups("auto", 65536, data_bytes) == -(-window_bytes // 65536)


@pytest.mark.parametrize("spec", [0, -3, "0", "0M", "x", "64Q", "0%", "150%", "-5%", True, "", None, 1.5, "1.5", "2.0"])
def test_bad_window_spec_names_what_works(spec):
    with pytest.raises(UsageError, match="window must be a group count >= 1, a size like '64M', a share like '5%' of the data or 'auto'"):
        window_groups(spec, 65536, 10**9)


def test_size_spec_plans_like_its_group_count(kdd):
    idx = lirs.open_index(kdd)
    by_count = plan_epoch(idx, 256, "window", seed=5, epoch=1, group_bytes=16384, window=8)
    by_size = plan_epoch(idx, 256, "window", seed=5, epoch=1, group_bytes=16384, window="128K")
    assert by_size.window == by_count.window == 8
    for a, b in zip(by_count.batches(extents=False), by_size.batches(extents=False), strict=True):
        np.testing.assert_array_equal(a.ids, b.ids)


def test_share_spec_follows_the_data_size(kdd):
    idx = lirs.open_index(kdd)
    with lirs.Loader(kdd, 256, granularity="window", group_bytes=16384, window="25%") as ld:
        assert ld.window == -(-int(0.25 * idx.payload_bytes) // 16384)
        seen = np.concatenate([b.ids for b in ld.epoch(0)])
    assert np.array_equal(np.sort(seen), np.arange(idx.n))


def test_default_window_is_a_memory_budget(kdd):
    with lirs.Loader(kdd, 256, granularity="window") as ld:
        assert ld.window == window_groups(DEFAULT_WINDOW, 65536, ld.index.payload_bytes)
        assert ld.plan(0).window == ld.window


def _max_steps_in_flight(monkeypatch, loader, epoch=0):
    """Run an epoch; the most read steps that were in flight at once, and the records seen."""
    most = [0]
    real_next = pipeline.EpochRun.next

    def next_(self):
        out = real_next(self)
        most[0] = max(most[0], len(self.steps))
        return out

    monkeypatch.setattr(pipeline.EpochRun, "next", next_)
    ids = np.concatenate([b.ids for b in loader.epoch(epoch)])
    return most[0], ids


@pytest.mark.parametrize("window", ["256K", "512K"])
@pytest.mark.parametrize("engine,cores,held", [("buffered", 2, 2), ("buffered", 8, 3), ("auto", 2, 3)])
def test_large_windows_hold_two_or_three_at_a_time(kdd, monkeypatch, window, engine, cores, held):
    # prefetch 8 would be 9 steps in flight; a large window step feeds many batches, so only the
    # window being consumed and the next one are held, and the one after where the reads wait for
    # a device (O_DIRECT, the default engine on this disk) or on 8 cores or more
    monkeypatch.setattr(pipeline, "usable_cores", lambda: cores)
    with lirs.Loader(kdd, 64, granularity="window", group_bytes=16384, window=window, prefetch=8,
                     engine=engine) as ld:
        assert ld.window * 16384 * 3 < ld.index.payload_bytes  # several windows in the epoch
        ld._ensure_started()
        if engine == "auto" and not ld._pipeline.engine.direct:
            pytest.skip("this filesystem refuses O_DIRECT")
        most, ids = _max_steps_in_flight(monkeypatch, ld)
    assert most == held
    assert np.array_equal(np.sort(ids), np.arange(len(ids)))


def test_small_windows_still_prefetch_batches(kdd, monkeypatch):
    # one 4 KiB group is a fraction of a batch: prefetch counts batches, so more steps are in flight
    with lirs.Loader(kdd, 256, granularity="window", group_bytes=4096, window=1, prefetch=4) as ld:
        plan = ld.plan(0)
        want = pipeline.steps_in_flight(plan, 4)
        most, _ = _max_steps_in_flight(monkeypatch, ld)
    assert want > 5
    assert 5 < most <= want + max(len(bp.parts) for bp in plan.batches(extents=False))


def test_windows_of_records_larger_than_a_group_count_their_bytes_in_flight():
    """A window of 3 groups of one 256 KiB record each holds 768 KiB, not 3 x group_bytes: the
    windows that prefetch + 1 batches span are counted by those bytes (60 records, batch 2: about
    5 windows in flight, where 3 x 64 KiB windows made it 15, 12 MB of a 16 MB dataset)."""
    from lirs.index import Index
    from lirs.plan import plan_epoch

    n, size = 60, 256 << 10
    idx = Index.from_arrays(["/nonexistent/big.svm"], "libsvm", offsets=np.arange(n, dtype=np.int64) * size,
                            data_ends=[n * size], file_starts=[0, n])
    plan = plan_epoch(idx, 2, "window", group_bytes=65536, window=3)
    window_bytes = plan.window * size
    assert pipeline.steps_in_flight(plan, 8) == max(2, -(-9 * 2 * size // window_bytes) + 1) == 7


def test_cli_takes_window_sizes(kdd, capsys):
    assert cli_main(["order", kdd, "--granularity", "window", "--window", "5%", "--batch-size", "128",
                     "--group-bytes", "16K"]) == 0
    out = capsys.readouterr().out
    assert "window" in out
    assert cli_main(["epoch", kdd, "--granularity", "window", "--window", "lots"]) == 2
    assert "--window: must be a group count" in capsys.readouterr().err


def test_pool_follows_the_usable_cores(kdd, monkeypatch):
    # the pool sizes itself by the affinity mask (what taskset sets), not by prefetch
    from lirs import loader as loader_mod

    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", 1)  # a step per batch
    for cores in (1, 7):
        monkeypatch.setattr(loader_mod, "usable_cores", lambda c=cores: c)
        with lirs.Loader(kdd, 64, granularity="group", prefetch=2) as ld:
            ld._ensure_started()
            assert ld._pipeline.workers == cores + 1
            most, ids = _max_steps_in_flight(monkeypatch, ld)
        assert most == max(2, cores) + 1  # every thread has a step, and prefetch batches at least
        assert np.array_equal(np.sort(ids), np.arange(len(ids)))


@pytest.mark.parametrize("window", ["100%", "30%", 7])
def test_windows_are_balanced(kdd, window):
    # ceil(units / window) windows of equal size (+-1 unit): no small last window whose few groups
    # would fill the epoch's last batches
    plan = plan_epoch(lirs.open_index(kdd), 128, "window", group_bytes=16384, window=window, seed=2)
    sizes = np.diff([window_bounds(plan, w)[0] for w in range(window_count(plan))] + [plan.perm.n])
    assert sizes.sum() == plan.perm.n and sizes.max() <= plan.window and sizes.max() - sizes.min() <= 1
    if window == "100%":
        assert window_count(plan) == 1


def test_whole_data_window_is_uniform_in_batch(kdd):
    # a window over all the data deals every record at random: neighbours inside a batch share a
    # group as often as under a uniform order (a remainder window made this 2x)
    idx = lirs.open_index(kdd)
    uf = unit_table(idx, 16384)
    g = np.repeat(np.arange(len(uf) - 1), np.diff(uf))
    c = np.bincount(g).astype(float)
    ideal = (c * (c - 1)).sum() / (len(g) * (len(g) - 1))
    rates = []
    for seed in range(4):
        plan = plan_epoch(idx, 128, "window", group_bytes=16384, window="100%", seed=seed)
        o = np.concatenate([b.ids for b in plan.batches(extents=False)])
        t = np.arange(1, len(o))
        t = t[t % 128 != 0]
        rates.append((g[o[t]] == g[o[t - 1]]).mean() / ideal)
    assert 0.7 < np.mean(rates) < 1.3


def test_auto_granularity_takes_the_memory_budget(kdd):
    # a saved `lirs bench --auto` choice of window: the window a caller gives (its memory budget)
    # wins over the saved one; without one the saved window is used
    from lirs.recommendation import save_recommendation

    idx = lirs.open_index(kdd)
    rec = {"granularity": "window", "group_bytes": 16384, "window": 40, "config": "lirs-window-16Kx40",
           "epoch_s": 1.0, "extrapolated": False}
    saved = save_recommendation({"recommendation": {"nvme": rec}, "settings": {"devices": ["nvme"], "batch_size": 64}},
                                idx)
    try:
        with lirs.Loader(kdd, 64, granularity="auto") as ld:
            assert (ld.granularity, ld.group_bytes, ld.window) == ("window", 16384, 40)
        with lirs.Loader(kdd, 64, granularity="auto", window="160K") as ld:
            assert (ld.granularity, ld.group_bytes, ld.window) == ("window", 16384, 10)
    finally:
        os.remove(saved)  # the module's other tests use this file without a recommendation


def test_quality_and_bench_refuse_a_bad_window_before_any_work(kdd, capsys):
    assert cli_main(["quality", "--records", "1000", "--window", "0M"]) == 2
    assert "--window: must be a group count" in capsys.readouterr().err
    assert cli_main(["bench", kdd, "--window=-5%", "--granularity", "window", "--peers", "none"]) == 2
    assert "--window: must be a group count" in capsys.readouterr().err



@pytest.mark.parametrize("transform", [None, lambda b: b])
def test_next_window_is_read_while_the_batch_ending_one_waits(kdd, monkeypatch, transform):
    # a batch that ends window k also needs window k + 1: window k's rows are copied out as soon
    # as that batch is taken, so window k + 2 is submitted before that batch is delivered (not
    # once window k + 1 is decoded); two windows are still held at most (reads that are copies, on
    # fewer than 8 cores), and rows stay exact
    X, y = lirs.load_svmlight(kdd, dtype=np.float32)
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 2)
    with lirs.Loader(kdd, 64, granularity="window", group_bytes=16384, window="256K", engine="buffered",
                     n_features=X.shape[1], transform=transform) as ld:
        ends = {bp.parts[0][0].number: bp.index for bp in ld.plan(0).batches(extents=False)
                if len(bp.parts) > 1}
        assert len(ends) >= 3
        delivered, submitted_at, most = [0], {}, [0]
        real_submit, real_next = pipeline.Pipeline.submit, pipeline.EpochRun.next

        def submit(self, step, then=None, **kw):
            submitted_at[step.number] = delivered[0]
            return real_submit(self, step, then, **kw)

        def next_(self):
            out = real_next(self)
            most[0] = max(most[0], len(self.steps))
            return out

        monkeypatch.setattr(pipeline.Pipeline, "submit", submit)
        monkeypatch.setattr(pipeline.EpochRun, "next", next_)
        ids = []
        for b in ld.epoch(0):
            assert (b.X != X[b.ids]).nnz == 0 and np.array_equal(b.y, y[b.ids])
            ids.append(b.ids)
            delivered[0] += 1
    assert most[0] == 2
    assert all(submitted_at[k + 2] <= b for k, b in ends.items() if k + 2 in submitted_at)
    assert sum(k + 2 in submitted_at for k in ends) >= 2
    ids = np.concatenate(ids)
    assert np.array_equal(np.sort(ids), np.arange(len(ids)))


def test_wide_steps_are_decoded_one_at_a_time(kdd, monkeypatch):
    # a window decoded by every core at once waits for the one before it: two windows decoded
    # together would finish together and leave the cores idle while the next two are read
    from lirs import assemble, svmdecode

    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1 << 16)
    monkeypatch.setattr(svmdecode, "usable_cores", lambda: 2)
    monkeypatch.setattr(assemble, "usable_cores", lambda: 3)  # a core for the consumer, two decoding
    real = assemble.StepDecoder.__call__
    lock, now, most, wide = threading.Lock(), [0], [0], [0]

    def call(self, step, *args):
        if not self.wide(step):
            return real(self, step, *args)
        with lock:
            now[0] += 1
            most[0], wide[0] = max(most[0], now[0]), wide[0] + 1
        try:
            time.sleep(0.05)  # long enough for a second window to be read meanwhile
            return real(self, step, *args)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(assemble.StepDecoder, "__call__", call)
    with lirs.Loader(kdd, 64, granularity="window", group_bytes=16384, window="256K") as ld:
        assert ld._decoder.wide(next(iter(ld.plan(0).batches())).parts[0][0])
        ids = np.concatenate([b.ids for b in ld.epoch(0)])
    assert wide[0] >= 3 and most[0] == 1
    assert np.array_equal(np.sort(ids), np.arange(len(ids)))


def test_a_window_is_decoded_by_the_loaders_cores_but_one(kdd, monkeypatch):
    # the core left over is the consumer's: it delivers the last window's batches meanwhile
    from lirs import assemble, svmdecode

    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1 << 16)
    monkeypatch.setattr(assemble, "usable_cores", lambda: 8)
    seen = []
    real = assemble.decode_libsvm

    def spy(*a, **kw):
        seen.append(kw["threads"])
        return real(*a, **kw)

    monkeypatch.setattr(assemble, "decode_libsvm", spy)
    with lirs.Loader(kdd, 64, granularity="window", group_bytes=16384, window="256K") as ld:
        assert ld._decoder.decode_threads() == 7
        ids = np.concatenate([b.ids for b in ld.epoch(0)])
    assert np.array_equal(np.sort(ids), np.arange(len(ids)))
    assert 7 in seen and set(seen) <= {1, 7}  # 1: a window's last, small step
    with lirs.Loader(kdd, 64, granularity="window", threads=4) as ld:  # a DataLoader worker's share: 3 cores
        assert ld._decoder.decode_threads() == 2
    monkeypatch.setattr(assemble, "usable_cores", lambda: 1)
    with lirs.Loader(kdd, 64, granularity="window") as ld:
        assert ld._decoder.decode_threads() == 1
    seen.clear()
    monkeypatch.setattr(assemble, "usable_cores", lambda: 8)
    with lirs.Loader(kdd, 64, granularity="window", group_bytes=16384, window="256K", decode_threads=3) as ld:
        assert ld._decoder.decode_threads() == 3  # set by hand (a DataLoader worker's share)
        assert np.array_equal(np.sort(np.concatenate([b.ids for b in ld.epoch(0)])), np.arange(len(ids)))
    assert 3 in seen and set(seen) <= {1, 3}
    with pytest.raises(lirs.UsageError, match="decode_threads"):
        lirs.Loader(kdd, 64, decode_threads=0)


def test_detached_rows_share_nothing_with_their_step(kdd):
    from lirs.assemble import detached

    X, y = lirs.load_svmlight(kdd, dtype=np.float32)
    dX, dy = detached((X, y), 5, 9)
    assert (dX != X[5:9]).nnz == 0 and np.array_equal(dy, y[5:9])
    assert not any(np.shares_memory(a, b) for a, b in [(dX.data, X.data), (dX.indices, X.indices),
                                                       (dX.indptr, X.indptr), (dy, y)])


def test_a_transform_does_not_keep_the_next_window_waiting(kdd, monkeypatch):
    # with a transform, batches are assembled on the pool once their windows are decoded: no pool
    # thread waits for them meanwhile, so window k + 2 is read while window k + 1 is decoded
    from lirs import assemble

    real_call, real_read = assemble.StepDecoder.__call__, pipeline.Pipeline._read_decode
    read_start, decode_end = {}, {}

    def call(self, step, *args):
        time.sleep(0.05)  # a decode long enough to read the next window meanwhile
        out = real_call(self, step, *args)
        decode_end[step.number] = time.perf_counter()
        return out

    def read_decode(self, step):
        read_start[step.number] = time.perf_counter()
        return real_read(self, step)

    monkeypatch.setattr(assemble.StepDecoder, "__call__", call)
    monkeypatch.setattr(pipeline.Pipeline, "_read_decode", read_decode)
    with lirs.Loader(kdd, 64, granularity="window", group_bytes=16384, window="256K",
                     transform=lambda b: b) as ld:
        ids = np.concatenate([b.ids for b in ld.epoch(0)])
    assert np.array_equal(np.sort(ids), np.arange(len(ids)))
    overlapped = [k for k in decode_end if k + 2 in read_start and read_start[k + 2] < decode_end[k + 1]]
    assert len(overlapped) >= 2, (read_start, decode_end)


def _policies():
    """The module whose STEP_MIN_BYTES sizes a group read step."""
    from lirs import policies
    return policies


@pytest.mark.parametrize("workers", [2, 3])
def test_a_strided_walk_reads_each_window_once_for_its_batches(kdd, workers):
    """A DataLoader worker's walk (a stride) shares one read step per window among its batches, as
    the plain walk does for all of them: reading a window per batch made workers 16x slower."""
    plan = plan_epoch(lirs.open_index(kdd), 64, "window", group_bytes=16384, window=16, seed=3)
    whole = list(plan.batches())
    nw = window_count(plan)
    assert plan.num_batches >= 3 * workers * nw  # several of a worker's batches per window
    for w in range(workers):
        mine = list(plan.batches(w, stride=workers))
        steps = {id(part.step) for b in mine for part in b.parts}
        assert len(steps) <= nw
        read = sum(len(s.ids) for s in {id(p.step): p.step for b in mine for p in b.parts}.values())
        assert read == sum(len(b.ids) for b in mine)  # each of its records once, no other batch's
        for a, b in zip(mine, whole[w::workers]):
            assert np.array_equal(a.ids, b.ids)
        last = [p.last for b in mine for p in b.parts]
        assert sum(last) == len(steps)  # every step's last part marked once


def _joined(walks: list) -> dict:
    """batch -> ids of the pieces the walks took of it, joined in the order of their windows."""
    got = {}
    for bps in walks:
        for bp in bps:
            key = -1 if bp.piece is None else bp.piece[0]
            got.setdefault(bp.index, []).append((key, bp))
    return {j: sorted(ps, key=lambda p: p[0]) for j, ps in got.items()}


@pytest.mark.parametrize("workers,start", [(2, 0), (3, 0), (2, 7)])
def test_walks_over_some_windows_take_every_record_once_reading_each_window_once(kdd, workers, start):
    """W walks with windows=(w, W) (DataLoader workers): each reads only its windows (one step
    each), between them every record of batches start.. once, and the pieces of a batch, joined
    in the order of their first windows, are that batch."""
    plan = plan_epoch(lirs.open_index(kdd), 100, "window", group_bytes=8192, window=3, seed=3)
    whole = list(plan.batches(start))
    walks = [list(plan.batches(start, windows=(w, workers))) for w in range(workers)]
    read = 0
    for w, bps in enumerate(walks):
        steps = {id(p.step): p.step for b in bps for p in b.parts}
        read += sum(len(s.ids) for s in steps.values())
        # a step per window of its own (its rows from where the walk starts)
        assert len(steps) == len({s.number for s in steps.values()})
        for b in bps:
            if b.piece is not None:
                assert b.piece[1] == plan.batch_size_of(b.index)
    assert read == sum(len(b.ids) for b in whole), "every window read once between the walks"
    got = _joined(walks)
    assert sorted(got) == [b.index for b in whole]
    pieces = 0
    for b in whole:
        ps = got[b.index]
        pieces += len(ps) > 1
        assert np.array_equal(np.concatenate([bp.ids for _, bp in ps]), b.ids)
        assert (len(ps) == 1) == (ps[0][1].piece is None)
    assert pieces > len(whole) // 4, "the small windows cut many batches"


def test_a_loader_over_some_windows_delivers_pieces_that_join_into_its_batches(kdd):
    import scipy.sparse as sp

    kw = dict(granularity="window", group_bytes=8192, window=3, seed=5)
    with lirs.Loader(kdd, 100, **kw) as loader:
        whole = list(loader.epoch(1))
        one = loader.stats.payload_bytes
    with lirs.Loader(kdd, 100, **kw) as loader:
        pieces = [list(loader.epoch(1, windows=(w, 2))) for w in range(2)]
        assert loader.stats.payload_bytes == one, "the two walks read each record once between them"

        async def second():
            return [b async for b in loader.aepoch(1, windows=(1, 2))]
        again = asyncio.run(second())
    assert [(b.index, b.piece) for b in again] == [(b.index, b.piece) for b in pieces[1]]
    assert all(np.array_equal(a.ids, b.ids) for a, b in zip(again, pieces[1]))
    got = {}
    for ps in pieces:
        for b in ps:
            got.setdefault(b.index, []).append(b)
    for b in whole:
        ps = sorted(got[b.index], key=lambda p: -1 if p.piece is None else p.piece[0])
        assert np.array_equal(np.concatenate([p.ids for p in ps]), b.ids)
        assert np.array_equal(np.concatenate([p.y for p in ps]), b.y)
        assert (sp.vstack([p.X for p in ps]) != b.X).nnz == 0
    assert "piece=" in repr(next(p for ps in pieces for p in ps if p.piece is not None))
    with pytest.raises(UsageError, match="windows= needs window steps and stride 1"):
        next(lirs.Loader(kdd, 100, granularity="group").epoch(0, windows=(0, 2)))
    with pytest.raises(UsageError, match="0 <= w < W"):
        list(plan_epoch(lirs.open_index(kdd), 100, "window", window=3).batches(windows=(2, 2)))


def test_with_ranks_a_window_is_read_by_each_rank_its_records_reach(kdd):
    """What docs/granularity.md says of ranks: each rank reads the windows its slice of the epoch
    touches. A window larger than a rank's share (here the whole file) is read whole by every rank;
    small windows are read about once, the few that straddle two ranks' slices by both."""
    index = lirs.open_index(kdd)
    data = index.payload_bytes

    def read(window, world):
        return [plan_epoch(index, 64, "window", window=window, group_bytes=4096, seed=3, epoch=1, rank=r,
                           world_size=world).stats()["bytes_read"] for r in range(world)]

    one = read("100%", 1)[0]
    assert one < 1.2 * data
    assert all(r == pytest.approx(one, rel=0.02) for r in read("100%", 3))  # every rank reads all of it
    whole, world, window = read(4, 1)[0], 4, 4 * 4096
    per_rank = read(4, world)
    assert sum(per_rank) <= whole + 2 * (world - 1) * window  # a straddling window at each boundary
    assert max(per_rank) < 0.35 * whole


@pytest.mark.parametrize("granularity", ["window", "group", "instance"])
def test_a_ranks_empty_last_batch_comes_through_a_transform(kdd, granularity):
    """6000 records, batch 857, 7 ranks: 6000 % 5999 = 1 record left over, so six ranks' last batch
    holds no record. An empty window batch has no read step to wait for: with a transform its finish
    task never ran and the rank waited for ever (a DDP hang)."""
    got = {}

    def each(rank):
        with lirs.Loader(kdd, 857, granularity=granularity, window=4, seed=2, rank=rank, world_size=7,
                         transform=lambda b: len(b.ids)) as loader:
            got[rank] = list(loader.epoch(0))

    threads = [threading.Thread(target=each, args=(r,), daemon=True) for r in range(7)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert sorted(got) == list(range(7)), "a rank never finished its epoch"
    assert len({len(v) for v in got.values()}) == 1  # every rank steps as often
    assert 0 in [v[-1] for v in got.values()] and sum(map(sum, got.values())) == 6000


def test_rank_zero_is_told_when_windows_make_each_rank_read_more_than_its_share(kdd, caplog):
    """The estimate the warning gives holds against the plans (rank_reads), and only rank 0 of
    several, with windows large against its share, says it."""
    from lirs.windows import rank_reads

    index = lirs.open_index(kdd)
    for window, world in (("100%", 3), (4, 4)):
        with lirs.Loader(kdd, 64, window=window, group_bytes=4096, rank=0, world_size=world) as ld:
            said = rank_reads(ld.window, 4096, index.payload_bytes, world)
            def read(rank, ranks):
                return plan_epoch(index, 64, "window", window=ld.window, group_bytes=4096, seed=0, epoch=0,
                                  rank=rank, world_size=ranks).stats()["bytes_read"]
            # against one rank's read of it all (group reads read past their group: amplification)
            assert max(read(r, world) for r in range(world)) <= 1.1 * said * read(0, 1) / world
    assert rank_reads(1, 4096, index.payload_bytes, 3) < 1.1 and rank_reads(10**6, 4096, index.payload_bytes, 3) == 3
    for rank, world, window, warned in ((0, 3, "100%", True), (1, 3, "100%", False), (0, 1, "100%", False),
                                        (0, 3, 4, False)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="lirs.loader"):
            lirs.Loader(kdd, 64, window=window, group_bytes=4096, rank=rank, world_size=world).close()
        assert ("each rank reads up to 3.0x its share" in caplog.text) == warned, (rank, world, window)
    caplog.clear()
    with caplog.at_level("WARNING", logger="lirs.loader"):  # a window past the data is said as the data's size
        lirs.Loader(kdd, 64, window="1G", group_bytes=4096, world_size=3).close()
    assert f"windows of {format_bytes(index.payload_bytes)}, each rank" in caplog.text, caplog.text


def test_a_window_budget_counts_records_larger_than_a_group_at_their_size(tmp_path, caplog):
    """Records larger than a group are each a group of their own: a "64K" window of 16 KiB records
    over 4 KiB groups is 4 groups (64 KiB held), not 16 (256 KiB); the quality tool's frontier and
    CorgiPile's blocks count them so too. Small records keep the group's bytes."""
    p = tmp_path / "big.bin"
    p.write_bytes(np.random.default_rng(0).integers(0, 255, 32 * 16384, dtype=np.uint8).tobytes())
    idx = lirs.build_index(str(p), record_size=16384, progress=False)
    with lirs.Loader(idx, 4, granularity="window", group_bytes=4096, window="64K") as L:
        assert L.window == 4
        assert sorted(np.concatenate([b.ids for b in L.epoch(0)])) == list(range(32))
    assert plan_epoch(idx, 4, granularity="window", group_bytes=4096, window="64K").window == 4
    import logging
    with caplog.at_level(logging.WARNING, logger="lirs"):  # the ranks warning counts the same bytes
        lirs.Loader(idx, 4, granularity="window", group_bytes=4096, window="64K", world_size=8).close()
    assert "windows of 65.5 KB" in caplog.text
    from lirs.eval.quality.frontier import budget_groups
    from lirs.eval.strategies.base import as_source
    from lirs.eval.strategies.corgi import _buffer_blocks
    from lirs.windows import group_span

    assert group_span(65536, 200 << 20, 200) == 1 << 20 and group_span(65536, 10 << 20, 10 ** 5) == 65536
    assert budget_groups(8 << 20, 65536, 200 << 20, 200) == 8 and budget_groups(8 << 20, 65536) == 128
    assert _buffer_blocks(as_source(200, 1 << 20), 65536, None, 8 << 20) == 8
