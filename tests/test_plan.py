"""The planner: every epoch a permutation over the union of ranks, balanced ranks, exact extents,
resume, determinism across processes, the seed scheme, and the permutation kernels."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lirs.errors import UsageError
from lirs.index import Index
from lirs.plan import (GRANULARITIES, Permutation, plan_epoch, rank_slice, unit_bytes_of, unit_table)

BLOCK = 4096


def _variable_index(n, seed, files=1, mean=300, big=0.0):
    """An in-memory LIBSVM-like index: record lengths ~ mean bytes (a share ``big`` of 5-20 KB)."""
    rng = np.random.default_rng(seed)
    counts = np.diff(np.sort(np.concatenate([[0, n], rng.integers(0, n + 1, files - 1)])))
    offsets, ends, starts = [], [], [0]
    for c in counts:
        lens = rng.integers(20, 2 * mean, c)
        if big:
            lens = np.where(rng.random(c) < big, rng.integers(5000, 20000, c), lens)
        pos = int(rng.integers(0, 5000))  # a header before the first record
        offs = pos + np.concatenate([[0], np.cumsum(lens[:-1])]) if c else np.empty(0, np.int64)
        offsets.append(offs.astype(np.int64))
        ends.append(int(pos + lens.sum()) if c else pos)
        starts.append(starts[-1] + int(c))
    labels = rng.choice([-1.0, 1.0], n)
    return Index.from_arrays([f"/nonexistent/part{i}.svm" for i in range(files)], "libsvm",
                             offsets=np.concatenate(offsets), data_ends=ends, file_starts=starts, labels=labels)


def _fixed_index(n, record_size, header=128, files=1):
    per = [n // files + (1 if i < n % files else 0) for i in range(files)]
    return Index.from_arrays([f"/nonexistent/f{i}.npy" for i in range(files)], "npy", record_size=record_size,
                             header_sizes=[header] * files,
                             data_ends=[header + c * record_size for c in per], record_dtype=np.uint8,
                             record_shape=(record_size,))


def _all_orders(idx, B, g, W, **kw):
    plans = [plan_epoch(idx, B, g, rank=r, world_size=W, **kw) for r in range(W)]
    return plans, [p.order() for p in plans]


def _check_step_extents(idx, step, align=BLOCK):
    f, s, e = idx.spans(step.ids)
    assert np.all(step.ext_offset % align == 0) and np.all(step.ext_nbytes % align == 0)
    assert np.all(step.ext_nbytes > 0)
    # sorted by (file, offset), disjoint and not touching (touching ones would have merged)
    for a in range(len(step.ext_file) - 1):
        if step.ext_file[a] == step.ext_file[a + 1]:
            assert step.ext_offset[a] + step.ext_nbytes[a] < step.ext_offset[a + 1]
        else:
            assert step.ext_file[a] < step.ext_file[a + 1]
    x = step.rec_extent
    assert np.array_equal(step.ext_file[x], f)
    assert np.array_equal(step.ext_offset[x] + step.rec_pos, s)
    assert np.array_equal(step.rec_len, e - s)
    assert np.all(step.rec_pos >= 0) and np.all(step.rec_pos + step.rec_len <= step.ext_nbytes[x])
    # exactly the needed bytes: every block (every byte, for align 1) of every extent holds part of
    # some record
    needed = set()
    for fi, a, b in zip(f, s, e):
        needed.update((int(fi), blk) for blk in range(int(a) // align, -(-int(b) // align)))
    have = set()
    for fi, o, nb in zip(step.ext_file, step.ext_offset, step.ext_nbytes):
        have.update((int(fi), blk) for blk in range(int(o) // align, int(o + nb) // align))
    assert have == needed


# --------------------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 700), B=st.integers(1, 90), W=st.integers(1, 8), seed=st.integers(0, 2**32),
       epoch=st.integers(0, 50), g=st.sampled_from(GRANULARITIES), perm=st.sampled_from(["table", "stateless"]),
       files=st.integers(1, 3), drop_last=st.booleans(), gb=st.sampled_from([4096, 8192, 16384]),
       window=st.integers(1, 5))
def test_epoch_is_permutation_over_ranks(n, B, W, seed, epoch, g, perm, files, drop_last, gb, window):
    idx = _variable_index(n, seed % 1000, files=files)
    plans, orders = _all_orders(idx, B, g, W, seed=seed, epoch=epoch, drop_last=drop_last, group_bytes=gb,
                                window=window, permutation=perm)
    nbs = {p.num_batches for p in plans}
    assert len(nbs) == 1, "every rank gets the same number of batches"
    nb = nbs.pop()
    allids = np.concatenate(orders)
    assert len(np.unique(allids)) == len(allids), "no record twice"
    if drop_last:
        assert nb == n // (W * B) and all(len(o) == nb * B for o in orders)
    else:
        assert np.array_equal(np.sort(allids), np.arange(n)), "every record exactly once"
        assert nb == -(-n // (W * B))
        lasts = [p.batch_size_of(nb - 1) for p in plans]
        assert max(lasts) - min(lasts) <= 1, "last batches balanced"
    for p in plans:
        sizes = [len(b.ids) for b in p.batches()]
        assert len(sizes) == nb and all(s == B for s in sizes[:-1])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 500), B=st.integers(1, 60), W=st.integers(1, 4), seed=st.integers(0, 10**6),
       g=st.sampled_from(GRANULARITIES), perm=st.sampled_from(["table", "stateless"]),
       start=st.integers(0, 30), fixed=st.booleans())
def test_resume_equals_uninterrupted_tail(n, B, W, seed, g, perm, start, fixed):
    idx = _fixed_index(n, 97, files=2) if fixed else _variable_index(n, seed % 997, files=2)
    for r in range(W):
        p = plan_epoch(idx, B, g, seed=seed, epoch=3, rank=r, world_size=W, group_bytes=8192, window=3,
                       permutation=perm)
        whole = list(p.batches())
        s = min(start, p.num_batches)
        tail = list(p.batches(s))
        assert len(tail) == len(whole) - s
        for a, b in zip(tail, whole[s:]):
            assert a.index == b.index and np.array_equal(a.ids, b.ids)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 400), B=st.integers(1, 50), seed=st.integers(0, 10**6), g=st.sampled_from(GRANULARITIES),
       big=st.sampled_from([0.0, 0.3]), fixed_size=st.sampled_from([0, 50, 5000]), files=st.integers(1, 3))
def test_extents_cover_exactly_the_needed_blocks(n, B, seed, g, big, fixed_size, files):
    idx = _fixed_index(n, fixed_size, files=files) if fixed_size else _variable_index(n, seed, files=files, big=big)
    p = plan_epoch(idx, B, g, seed=seed, group_bytes=8192, window=2)
    steps = {}
    for b in p.batches():
        got = []
        for step, lo, hi, last in b.parts:
            steps[id(step)] = step
            got.append(step.ids[lo:hi])
        assert np.array_equal(np.concatenate(got) if got else np.empty(0, np.int64), b.ids)
    for step in steps.values():
        _check_step_extents(idx, step)
    st_ = p.stats()
    assert st_["records"] == n and st_["payload_bytes"] == idx.payload_bytes
    assert st_["bytes_read"] >= st_["payload_bytes"]


def _delivered(step):
    """Per record of a step, in delivery order: (id, extent file, absolute offset, length)."""
    x = step.rec_extent
    return step.ids, step.ext_file[x], step.ext_offset[x] + step.rec_pos, step.rec_len


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("pieces", [1, 7, 10**9])
def test_a_step_found_in_pieces_of_runs_equals_the_one_pass_step(fixed, pieces):
    from lirs.windows import window_records

    idx = _fixed_index(4000, 50, files=3) if fixed else _variable_index(4000, 5, files=3, big=0.05)
    p = plan_epoch(idx, 64, "window", seed=2, group_bytes=8192, window=9)
    ids, o = window_records(p, 1)
    rng = np.random.default_rng(0)
    cases = [(ids, o), (ids[o[:300]], None), (rng.permutation(idx.n)[:500], None)]  # whole window, parts
    for case_ids, order in cases:
        one = p.step(0, case_ids, order=order)
        got = p.step(0, case_ids, order=order, piece_runs=pieces)
        assert len(np.unique(one.rec_extent)) > 2 and len(np.unique(one.ext_file)) == 3
        for a, b in zip(_delivered(one), _delivered(got)):
            assert np.array_equal(a, b)
        # a run continues the previous piece's extent: the pieces read exactly the one pass's bytes
        assert np.array_equal(one.ext_offset, got.ext_offset) and np.array_equal(one.ext_nbytes, got.ext_nbytes)
        _check_step_extents(idx, got)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 300), B=st.integers(1, 40), seed=st.integers(0, 10**6), g=st.sampled_from(GRANULARITIES),
       stride=st.integers(1, 3), files=st.integers(1, 3), align=st.sampled_from([BLOCK, 1]))
def test_deferred_extents_are_the_planned_ones(n, B, seed, g, stride, files, align):
    """The Loader plans with extents="defer" (its pool threads find the extents of a batch's step
    when they read it): the same steps, records and order, and once ready the same extents as
    planned at once."""
    idx = _variable_index(n, seed, files=files, big=0.1)
    p = plan_epoch(idx, B, g, seed=seed, group_bytes=8192, window=2, align=align)
    now, later = list(p.batches(stride=stride)), list(p.batches(extents="defer", stride=stride))
    assert len(now) == len(later)
    seen = set()
    for a, b in zip(now, later):
        assert a.index == b.index and np.array_equal(a.ids, b.ids)
        assert [(pa.step.number, pa.lo, pa.hi, pa.last) for pa in a.parts] == \
               [(pb.step.number, pb.lo, pb.hi, pb.last) for pb in b.parts]
        for pa, pb in zip(a.parts, b.parts):
            if id(pb.step) not in seen:  # a step several batches share is made ready once
                # a batch's own step is deferred (a step of many runs may not be)
                assert pb.step.fill is not None or g not in ("instance", "page") or len(pb.step.ids) == 0 \
                    or p.batches_per_step > 1
                seen.add(id(pb.step))
            assert pb.step.ready() is pb.step and pb.step.fill is None
            for x, y in zip(_delivered(pa.step), _delivered(pb.step)):
                assert np.array_equal(x, y)
            assert np.array_equal(pa.step.ext_nbytes, pb.step.ext_nbytes)


# --------------------------------------------------------------------------- units and granularity


@pytest.mark.parametrize("ub", [4096, 8192, 65536])
def test_units_are_records_starting_in_one_aligned_span(ub):
    idx = _variable_index(3000, 4, files=3, big=0.1)
    table = unit_table(idx, ub)
    f, s, _ = idx.spans(np.arange(idx.n))
    key = [(int(a), int(b) // ub) for a, b in zip(f, s)]
    want = [i for i in range(idx.n) if i == 0 or key[i] != key[i - 1]] + [idx.n]
    assert table is not None and table.tolist() == want


@pytest.mark.parametrize("rs,header", [(100, 128), (4096, 0), (3000, 80), (1, 5)])
def test_fixed_units_match_the_variable_rule(rs, header):
    fixed = _fixed_index(5000, rs, header=header, files=2)
    f, s, e = fixed.spans(np.arange(fixed.n))
    ds = [int(fixed.data_ends[i]) for i in range(2)]
    var = Index.from_arrays(["/x/a", "/x/b"], "lines", offsets=s, data_ends=ds,
                            file_starts=np.asarray(fixed.file_starts))
    for ub in (4096, 16384):
        a, b = unit_table(fixed, ub), unit_table(var, ub)
        if a is None or b is None:
            assert a is None and b is None  # every record its own unit
        else:
            assert np.array_equal(a, b)


def test_page_and_group_units_stay_together_in_a_batch():
    idx = _variable_index(4000, 7)
    for g, ub in (("page", 4096), ("group", 16384)):
        table = unit_table(idx, ub)
        unit_of = np.searchsorted(table, np.arange(idx.n), side="right") - 1
        p = plan_epoch(idx, 256, g, seed=2, group_bytes=16384)
        batch_of = np.empty(idx.n, np.int64)
        for b in p.batches():
            batch_of[b.ids] = b.index
        # a unit may be cut only where a batch ends: at most one unit straddles each batch boundary
        split = [u for u in range(len(table) - 1) if len(set(batch_of[table[u]:table[u + 1]])) > 1]
        assert len(split) <= p.num_batches - 1


def test_window_deals_a_group_over_several_batches(monkeypatch):
    """Window mode keeps group-sized reads but records of a group rarely share a batch."""
    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", 1)  # group mode with a read step per batch
    idx = _variable_index(20000, 8)
    table = unit_table(idx, 16384)
    unit_of = np.searchsorted(table, np.arange(idx.n), side="right") - 1

    def same_group_pairs(g):
        p = plan_epoch(idx, 64, g, seed=5, group_bytes=16384, window=16)
        tot = 0
        for b in p.batches():
            _, c = np.unique(unit_of[b.ids], return_counts=True)
            tot += int((c * (c - 1) // 2).sum())
        return tot, p.stats()

    grp, sg = same_group_pairs("group")
    win, sw = same_group_pairs("window")
    assert win < grp / 4
    # one window read once, whatever number of batches it feeds: about as many bytes as group mode
    assert sw["bytes_read"] < 1.2 * sg["bytes_read"]
    assert sw["reads"] <= sg["reads"] * 1.2


def test_amplification_of_page_and_group_on_small_records():
    """The paper's page granularity reads ~2 pages per unit of small records; groups cut that to ~1 + 4K/G."""
    idx = _variable_index(60000, 9, mean=180)
    amp = {g: plan_epoch(idx, 512, g, seed=1, group_bytes=65536).stats()["amplification"]
           for g in ("instance", "page", "group")}
    assert 1.6 < amp["page"] < 2.2
    assert amp["group"] < 1 + 2 * 4096 / 65536
    assert amp["instance"] > amp["page"]


# --------------------------------------------------------------------------- seeds, determinism


def test_epochs_and_seeds_differ_and_do_not_collide():
    idx = _variable_index(2000, 1)
    for g in GRANULARITIES:
        o = {(s, e): plan_epoch(idx, 100, g, seed=s, epoch=e, group_bytes=8192).order()
             for s, e in ((0, 0), (0, 1), (1, 0), (1, 1))}
        assert not np.array_equal(o[0, 0], o[0, 1]), g
        # seed + epoch would make (0, 1) and (1, 0) equal
        assert not np.array_equal(o[0, 1], o[1, 0]), g
        assert np.array_equal(o[0, 1], plan_epoch(idx, 100, g, seed=0, epoch=1, group_bytes=8192).order())


_CHILD = """
import json, sys, numpy as np
sys.path.insert(0, {tests!r})
from test_plan import _variable_index
from lirs.plan import plan_epoch
idx = _variable_index(1500, 3, files=2)
out = {{}}
for g in ("instance", "page", "group", "window"):
    for perm in ("table", "stateless"):
        p = plan_epoch(idx, 77, g, seed=12, epoch=4, rank=1, world_size=3, group_bytes=8192, window=3,
                       permutation=perm)
        out[g + perm] = p.order().tolist()
print(json.dumps(out))
"""


def test_same_inputs_same_order_in_a_fresh_process():
    import os

    tests = os.path.dirname(os.path.abspath(__file__))
    code = _CHILD.format(tests=tests)
    a = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    b = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert a == b
    idx = _variable_index(1500, 3, files=2)
    here = plan_epoch(idx, 77, "window", seed=12, epoch=4, rank=1, world_size=3, group_bytes=8192, window=3,
                      permutation="stateless").order().tolist()
    assert a["windowstateless"] == here


# --------------------------------------------------------------------------- permutations


@pytest.mark.parametrize("n", [1, 2, 3, 5, 255, 256, 257, 1000, 65537])
def test_permutations_are_bijections(n):
    for mode in ("table", "stateless"):
        p = Permutation(n, mode, seed=3, epoch=1)
        got = np.asarray(p.take(0, n), np.int64)
        assert np.array_equal(np.sort(got), np.arange(n)), mode
        # any slice equals the same positions of the whole
        a, b = n // 3, 2 * n // 3 + 1
        assert np.array_equal(np.asarray(p.take(a, b), np.int64), got[a:b])


def test_table_dtype_is_the_smallest_that_fits_and_stateless_stores_no_table():
    assert Permutation(256, "table", 0, 0).table.dtype == np.uint8
    assert Permutation(257, "table", 0, 0).table.dtype == np.uint16
    assert Permutation(70000, "table", 0, 0).table.dtype == np.uint32
    s = Permutation(10**9, "stateless", 0, 0)
    assert s.table is None and s.nbytes < 100
    assert Permutation(10, "auto", 0, 0).mode == "table"
    assert Permutation(1 << 25, "auto", 0, 0).mode == "stateless"


def test_stateless_plan_of_a_billion_fixed_records_allocates_nothing_of_size_n():
    import tracemalloc

    n = 10**9
    idx = _fixed_index(n, 200, header=128)
    tracemalloc.start()
    p = plan_epoch(idx, 1024, "instance", seed=1, epoch=2, rank=5, world_size=8, permutation="stateless")
    b = next(iter(p.batches(100)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(b.ids) == 1024 and b.ids.min() >= 0 and b.ids.max() < n
    assert peak < 10 * 2**20
    assert p.nbytes < 1000


@pytest.mark.parametrize("mode", ["table", "stateless"])
def test_positions_are_uniform(mode):
    """Each position of a small permutation takes every value about equally often over seeds."""
    from scipy.stats import chisquare

    n, trials = 7, 3500
    counts = np.zeros((n, n))
    for s in range(trials):
        got = np.asarray(Permutation(n, mode, seed=s, epoch=0).take(0, n), np.int64)
        counts[np.arange(n), got] += 1
    p = chisquare(counts.ravel()).pvalue
    assert p > 1e-4, p
    # every order of 4 units as likely as the others (a Feistel network over 2 bits: p ~ 1e-20)
    seen = collections.Counter(tuple(Permutation(4, mode, seed=3, epoch=e).take(0, 4).tolist()) for e in range(24_000))
    assert len(seen) == 24 and chisquare(list(seen.values())).pvalue > 1e-4, seen


@pytest.mark.parametrize("k", [0, 1, 257])
def test_a_steps_records_move_to_delivery_order_in_one_kernel_call(k):
    from lirs.kernels.plan import gather_records
    rng = np.random.default_rng(k)
    order = rng.permutation(k).astype(np.int64)
    arrays = (rng.integers(0, 10**9, k).astype(np.int64), rng.integers(0, 99, k).astype(np.int32),
              rng.integers(0, 4096, k).astype(np.int64), rng.integers(1, 999, k).astype(np.int64))
    for got, a in zip(gather_records(order, *arrays), arrays):
        assert got.dtype == a.dtype and np.array_equal(got, a[order])


@pytest.mark.parametrize("ids", [[], [7], [3, 4, 5, 9, 10, 2, 40, 41, 42, 43, 0],
                                 np.random.default_rng(3).permutation(600).tolist()])
@pytest.mark.parametrize("sort_max", [0, 3, 256])
def test_run_heads_gives_each_runs_start_first_id_and_order(ids, sort_max):
    from lirs.kernels.plan import run_heads
    ids = np.asarray(ids, np.int64)
    heads, keys = np.full(len(ids), -1, np.int64), np.full(len(ids), -1, np.int64)
    order = np.full(min(len(ids), sort_max), -1, np.int64)
    n = run_heads(ids, heads, keys, order, sort_max)
    want = np.flatnonzero(np.diff(ids, prepend=ids[0] - 2) != 1) if len(ids) else np.empty(0, np.int64)
    assert n == len(want) and np.array_equal(heads[:n], want) and np.array_equal(keys[:n], ids[want])
    if n <= sort_max:  # the runs in the order of their first IDs, as numpy's argsort puts them
        assert np.array_equal(order[:n], np.argsort(keys[:n]))
    else:  # too many to sort here: left to the caller
        assert (order == -1).all()


@pytest.mark.parametrize("g,sorted_by_numpy", [("group", False), ("page", False), ("instance", True)])
def test_a_steps_few_runs_are_sorted_without_numpy(monkeypatch, g, sorted_by_numpy):
    # numpy's argsort lets the GIL go at any size: a group or page step's few dozen runs are put in
    # ID order by the kernel that finds them; an instance step's many runs still go to numpy
    import sys
    from lirs import plan as P
    callers, argsort = [], np.argsort

    def counted(*a, **kw):
        callers.append(sys._getframe(1).f_code.co_name)
        return argsort(*a, **kw)

    monkeypatch.setattr(np, "argsort", counted)
    idx = _variable_index(20000, 5)
    p = plan_epoch(idx, 1000, g, seed=1)  # group steps of 5-39 runs, page steps of ~77
    steps = {id(part[0]): part[0] for b in p.batches() for part in b.parts}
    assert len(steps) > 1
    for step in steps.values():
        _check_step_extents(idx, step)
    assert ("_extents" in callers) == sorted_by_numpy and P.RUNS_SORTED_MAX == 256


# --------------------------------------------------------------------------- rules and errors


def test_rank_slices_rules():
    # drop_last=False: n=2001, 2 ranks of 1000: rank 0 gets 1001, rank 1 1000, both 2 batches
    assert rank_slice(2001, 1000, 0, 2, False) == (2, 0, 1001)
    assert rank_slice(2001, 1000, 1, 2, False) == (2, 1001, 1000)
    assert rank_slice(10, 4, 2, 3, False) == (1, 7, 3)
    assert rank_slice(10, 4, 0, 3, True) == (0, 0, 0)
    assert rank_slice(25, 4, 1, 3, True) == (2, 8, 8)
    assert rank_slice(0, 4, 0, 1, False) == (0, 0, 0)


def test_empty_last_batch_when_fewer_leftovers_than_ranks():
    idx = _variable_index(9, 2)  # 4 ranks x batch 2: two full rounds of 8, one record left
    plans, orders = _all_orders(idx, 2, "instance", 4, seed=0)
    assert [p.num_batches for p in plans] == [2, 2, 2, 2]
    assert [len(o) for o in orders] == [3, 2, 2, 2]
    assert [len(list(p.batches())[-1].ids) for p in plans] == [1, 0, 0, 0]


@pytest.mark.parametrize("kw,match", [
    (dict(batch_size=0), "batch_size"),
    (dict(granularity="pages"), "granularity"),
    (dict(granularity="group", group_bytes=5000), "group_bytes"),
    (dict(granularity="window", window=0), "window"),
    (dict(rank=3, world_size=3), "rank 3 outside"),
    (dict(seed=-1), "seed"),
    (dict(permutation="list"), "permutation"),
])
def test_bad_arguments(kw, match):
    idx = _variable_index(100, 0)
    args = dict(batch_size=10, granularity="instance")
    args.update(kw)
    B = args.pop("batch_size")
    g = args.pop("granularity")
    with pytest.raises(UsageError, match=match):
        plan_epoch(idx, B, g, **args)
    p = plan_epoch(idx, 10, "instance")
    with pytest.raises(UsageError, match="start batch"):
        next(p.batches(11))


def test_unit_bytes_of():
    assert unit_bytes_of("instance", 65536) == 0
    assert unit_bytes_of("page", 65536) == 4096
    assert unit_bytes_of("window", 65536) == 65536


# --------------------------------------------------------------------------- the command


def test_order_command(tmp_path, capsys):
    from lirs.cli import main
    from lirs.eval.gen import generate
    from lirs.build import build_index

    p = str(tmp_path / "k.svm")
    generate("kdd", p, records=3000, seed=2, progress=False)
    idx = build_index(p, progress=False)
    out = str(tmp_path / "o.npy")
    assert main(["order", p, "--granularity", "window", "--group-bytes", "8K", "--window", "4", "--seed", "3",
                 "--epoch", "2", "--rank", "1", "--world-size", "2", "-o", out, "--json"]) == 0
    st_ = json.loads(capsys.readouterr().out)
    order = np.load(out)
    want = plan_epoch(idx, 1024, "window", seed=3, epoch=2, rank=1, world_size=2, group_bytes=8192,
                      window=4).order()
    assert np.array_equal(order, want) and st_["records"] == len(want)
    assert st_["amplification"] >= 1 and st_["batches"] == 2 and st_["window"] == 4
    # a window of more groups than the data has holds the data's groups, as `lirs quality` reports it
    assert main(["order", p, "--granularity", "window", "--group-bytes", "8K", "--window", "256", "--json"]) == 0
    st_ = json.loads(capsys.readouterr().out)
    assert st_["window"] == st_["units"] == plan_epoch(idx, 1024, "window", group_bytes=8192, window=256).units < 256
    assert main(["order", p, "--granularity", "page"]) == 0
    assert "amplification" in capsys.readouterr().out
    assert main(["order", p, "-o", str(tmp_path / "o.txt")]) == 2
    capsys.readouterr()
    assert main(["order", p, "-o", str(tmp_path / "no" / "o.npy")]) == 2  # before the order is made
    err = capsys.readouterr().err
    assert "its directory" in err and "does not exist" in err and "tmp-" not in err, err
    litter = tmp_path / ".o.npy.lirs-tmp-999999"  # a killed run's temporary: removed by the next
    litter.write_bytes(b"x")
    assert main(["order", p, "-o", out]) == 0 and not litter.exists()
    assert main(["order", p, "--group-bytes", "5000"]) == 2
    # an epoch no rank gets a full batch of: refused as the Loader refuses it (an empty order, exit 0)
    assert main(["order", p, "--batch-size", str(10**6), "--drop-last"]) == 2
    assert "leaves every epoch empty" in capsys.readouterr().err
    assert main(["order", str(tmp_path / "missing.svm")]) == 1


def _order_input(tmp_path) -> str:
    from lirs.build import build_index
    from lirs.eval.gen import generate

    p = str(tmp_path / "k.svm")
    generate("kdd", p, records=3000, seed=2, progress=False)
    build_index(p, progress=False)
    return p


def test_order_out_on_a_full_disk_names_the_file_and_the_cause(tmp_path, monkeypatch, capsys):
    """-o on a full disk: the error names the file and "no space left" (it named neither:
    "20000 requested and 8176 written"), and no temporary is left behind."""
    import errno
    import io

    import lirs.commands.order as order_cmd
    from lirs.cli import main

    p = _order_input(tmp_path)
    out = tmp_path / "o.npy"

    class Full(io.RawIOBase):  # a file on a disk with 1000 bytes free
        def __init__(self, f):
            self.f, self.room = f, 1000

        def writable(self):
            return True

        def write(self, b):
            n = min(len(b), self.room)
            if n == 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.room -= n
            return self.f.write(bytes(b)[:n])

        def close(self):
            self.f.close()
            super().close()

    monkeypatch.setattr(order_cmd, "open", lambda path, mode="r": io.BufferedWriter(Full(open(path, mode))),
                        raising=False)
    assert main(["order", p, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert str(out) in err and "No space left on device" in err and "use -o to write elsewhere" in err, err
    assert "tmp-" not in err and sorted(x.name for x in tmp_path.iterdir()) == ["k.svm", "k.svm.lirs"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("cmd", [["order"], ["order", "--json"], ["order", "--strategy", "sequential"], ["info"]])
def test_results_on_a_full_stdout_say_standard_output(tmp_path, cmd):
    """`lirs order DATA > /dev/full` said "error: No space left on device (...; use -o to write
    elsewhere)": neither that it was writing standard output, nor advice that applies (-o moves the
    order, not what is printed). Now one line names standard output, exit 1, no traceback."""
    p = _order_input(tmp_path)
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "lirs", *cmd, p], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"lirs {cmd[0]}: error: standard output: No space left on device " \
                       "(no space left on the device)\n", r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("cmd", [["epoch", "{p}"], ["epoch", "--json", "{p}"], ["index", "{p}"],
                                 ["quality", "{p}", "--strategies", "sequential", "--epochs", "2"],
                                 ["gen", "--profile", "kdd", "--records", "50", "-o", "{d}/g.svm", "--quiet"],
                                 ["shuffle", "{p}", "-o", "{d}/s.svm", "--quiet"]])
def test_every_commands_results_on_a_full_stdout_say_standard_output(tmp_path, cmd):
    """`lirs epoch DATA > /dev/full` said "error: No space left on device (no space left on the
    device)", as if the disk or the cache were full; as `lirs order` and `lirs info`, every command
    that prints its results names standard output."""
    p = _order_input(tmp_path)
    (tmp_path / "out").mkdir()
    args = [a.format(p=p, d=tmp_path / "out") for a in cmd]
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "lirs", *args], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert r.stderr.endswith(f"lirs {cmd[0]}: error: standard output: No space left on device "
                             "(no space left on the device)\n"), r.stderr


def test_order_out_past_the_file_size_limit_names_the_file(tmp_path):
    """A short write of the order on a real file (here past RLIMIT_FSIZE: EFBIG, as ENOSPC on a full
    disk) names the file and the cause, not numpy's "N requested and M written"."""
    p = _order_input(tmp_path)
    out = tmp_path / "o.npy"
    code = (  # the first run compiles and caches what it needs; the second writes under the limit
        "import resource, signal, sys\n"
        "from lirs.cli import main\n"
        "assert main(['order', sys.argv[1]]) == 0\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (16384, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "sys.exit(main(['order', sys.argv[1], '-o', sys.argv[2]]))\n")
    r = subprocess.run([sys.executable, "-c", code, p, str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert f"{out}: File too large" in r.stderr and "requested" not in r.stderr, r.stderr
    assert not out.exists() and not list(tmp_path.glob(".o.npy*"))


@pytest.mark.parametrize("granularity", ["instance", "page", "window"])
def test_order_counts_the_bytes_read_up_to_the_end_of_the_file(tmp_path, capsys, granularity):
    """The extent holding a file's last record runs on to a multiple of the block; `lirs order`
    counted that block whole (a window over this 15,393-byte file: 16,384 bytes read), and said more bytes
    read and a higher amplification than the Loader reads (its reads stop at the file's end)."""
    import lirs
    from lirs.cli import main

    p = tmp_path / "s.svm"
    p.write_bytes(b"".join(b"%d %d:1.5\n" % (i % 2, i + 1) for i in range(1500)))
    size = p.stat().st_size
    assert size % 4096  # the file ends inside a block
    lirs.build_index(str(p), progress=False)
    assert main(["order", str(p), "--granularity", granularity, "--batch-size", "100", "--json"]) == 0
    st_ = json.loads(capsys.readouterr().out)
    with lirs.Loader(str(p), 100, granularity=granularity) as ld:
        for _ in ld.epoch(0):
            pass
        assert st_["bytes_read"] == ld.stats.bytes_read and st_["reads"] == ld.stats.reads
    if granularity == "window":  # one window: the whole file, once
        assert st_["bytes_read"] == size and st_["amplification"] == 1.0


@pytest.mark.parametrize("fixed", [False, True])
def test_batches_sharing_a_read_step_equal_a_step_per_batch(monkeypatch, fixed):
    """Consecutive batches read as one step (STEP_MIN_BYTES) hold the same records, dealt in the
    same order, at the same bytes, as batches each read as a step of their own; from any start."""

    idx = _fixed_index(3000, 50, files=2) if fixed else _variable_index(3000, 3, files=2, big=0.02)

    def walk(step_bytes, start=0):
        monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", step_bytes)
        p = plan_epoch(idx, 70, "group", seed=4, group_bytes=8192)
        out = []
        for bp in p.batches(start):
            ((step, lo, hi, last),) = bp.parts
            out.append((bp.index, [a[lo:hi] for a in _delivered(step)], last, step.number))
            if last:
                _check_step_extents(idx, step)
        return p, out

    p1, one = walk(1)
    assert p1.batches_per_step == 1 and all(last for *_, last, _ in one)
    batch_bytes = 70 * idx.payload_bytes / idx.n
    for step_bytes in (int(2.5 * batch_bytes), int(7 * batch_bytes), 10**12):  # 3, 7 batches; all
        for start in (0, 5):
            p, many = walk(step_bytes, start)
            assert p.batches_per_step > 1
            assert [b[0] for b in many] == [b[0] for b in one[start:]]
            for (_, a, _, _), (_, b, _, _) in zip(one[start:], many):
                for x, y in zip(a, b):
                    assert np.array_equal(x, y)
            # record IDs only (no extents): the same records, dealt the same way
            for (_, a, _, _), bp in zip(one[start:], p.batches(start, extents=False)):
                assert np.array_equal(a[0], bp.ids) and np.array_equal(bp.ids, bp.parts[0].step.ids[
                    bp.parts[0].lo:bp.parts[0].hi])
            # a step feeds batches_per_step consecutive batches (the walk's first steps 1, 2, 4, ..
            # of them: its first batch waits for one batch's read), the last of them marked
            numbers = [b[3] for b in many]
            runs = np.unique(numbers, return_counts=True)[1]
            want, k, left = [], 0, len(many)
            while left > 0:
                want.append(min(p.batches_per_step, 1 << k, left))
                left, k = left - want[-1], k + 1
            assert runs.tolist() == want
            assert [b[2] for b in many] == [i == len(many) - 1 or numbers[i + 1] != numbers[i]
                                            for i in range(len(many))]
    for g in ("page", "instance", "window"):  # the paper's baselines keep a step per batch
        assert plan_epoch(idx, 70, g, seed=4, group_bytes=8192, window=3).batches_per_step == 1


@pytest.mark.parametrize("fixed", [False, True])
def test_instance_steps_of_copied_reads_hold_many_batches_of_the_same_records(monkeypatch, fixed):
    """Where the engine's reads are copies (align 1) an instance step reads its records' bytes
    alone, and so holds STEP_MIN_BYTES of records: several consecutive batches, each with the same
    records, order and bytes as its own step of block-aligned reads (O_DIRECT), from any start."""
    idx = _fixed_index(3000, 50, files=2) if fixed else _variable_index(3000, 3, files=2, big=0.02)
    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", int(5.5 * 70 * idx.payload_bytes / idx.n))
    aligned = plan_epoch(idx, 70, "instance", seed=4)
    assert aligned.align == BLOCK and aligned.batches_per_step == 1
    copied = plan_epoch(idx, 70, "instance", seed=4, align=1)
    assert copied.batches_per_step == 6
    with pytest.raises(UsageError, match="align"):
        plan_epoch(idx, 70, "instance", seed=4, align=512)
    for start in (0, 7):
        one = list(aligned.batches(start))
        many = list(copied.batches(start))
        assert [b.index for b in one] == [b.index for b in many]
        shared = 0
        for a, b in zip(one, many):
            ((sa, la, ha, _),), ((sb, lb, hb, last),) = a.parts, b.parts
            shared += len(sb.ids) > hb - lb
            for x, y in zip(_delivered(sa), _delivered(sb)):
                assert np.array_equal(x[la:ha], y[lb:hb])
            if last:
                _check_step_extents(idx, sb, align=1)
        assert shared > len(many) // 2


@pytest.mark.parametrize("g,align", [("group", None), ("instance", 1), ("instance", None)])
@pytest.mark.parametrize("start,stride,spans", [(0, 1, None), (5, 1, None), (2, 3, None),
                                                (1, 1, [(7, 300), (900, 2500)]), (0, 2, [(40, 2900)])])
def test_a_walk_in_units_gives_the_same_batches_a_shared_step_at_a_time(monkeypatch, g, align, start, stride, spans):
    """``batches(units=True)`` (the Loader's walk): each step that several batches share comes
    once, as a SharedStep holding exactly the plans the plain walk gives for those batches, in the
    same order (from any start, with a stride, over an elastic resume's spans); a step of one
    batch comes as its plan."""
    from lirs.ranges import over_spans
    from lirs.steps import SharedStep

    idx = _variable_index(3000, 3, files=2, big=0.02)
    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", int(5.5 * 70 * idx.payload_bytes / idx.n))
    p = over_spans(plan_epoch(idx, 70, g, seed=4, group_bytes=8192, align=align), spans)
    plain = list(p.batches(start, stride=stride))
    units = list(p.batches(start, stride=stride, units=True))
    flat = []
    for u in units:
        if not isinstance(u, SharedStep):
            flat.append(u)
            continue
        assert all(bp.parts[0].step is u.step for bp in u.plans) and u.parts[0].step is u.step
        (first, *_), (*_, end) = u.plans[0].parts, u.plans[-1].parts
        assert first.lo == 0 and end.hi == len(u.step.ids) and end.last
        assert [bp.parts[0].hi for bp in u.plans[:-1]] == [bp.parts[0].lo for bp in u.plans[1:]]
        flat.extend(u.plans)
    assert [bp.index for bp in flat] == [bp.index for bp in plain] == list(range(start, p.num_batches, stride))
    assert (len(units) < len(flat)) == (p.batches_per_step > 1)
    for a, b in zip(plain, flat):
        assert np.array_equal(a.ids, b.ids)
        ((sa, la, ha, lasta),), ((sb, lb, hb, lastb),) = a.parts, b.parts
        assert (la, ha, lasta) == (lb, hb, lastb) and np.array_equal(sa.ids, sb.ids)
        for x, y in zip(_delivered(sa), _delivered(sb)):
            assert np.array_equal(x, y)


# --------------------------------------------------------------------------- offsets read with pread


def _sidecar_index(tmp_path):
    """A three-file LIBSVM-like index written to a sidecar beside sparse data files: small records,
    then records of ~4.5 MB (a block of 1024 of them spans over 4 GiB: a wide block), then small ones."""
    rng = np.random.default_rng(11)
    lens = [rng.integers(20, 600, 3000), rng.integers(4_400_000, 4_600_000, 1100), rng.integers(20, 600, 5000)]
    offsets, ends, paths = [], [], []
    for i, ln in enumerate(lens):
        head = int(rng.integers(0, 5000))
        offsets.append(head + np.concatenate([[0], np.cumsum(ln[:-1])]))
        ends.append(head + int(ln.sum()))
        paths.append(str(tmp_path / f"part{i}.svm"))
        with open(paths[-1], "wb") as f:
            f.truncate(ends[-1])  # sparse: only the index is read here
    starts = np.concatenate([[0], np.cumsum([len(x) for x in lens])])
    idx = Index.from_arrays(paths, "libsvm", offsets=np.concatenate(offsets), data_ends=ends, file_starts=starts)
    from lirs.index import write_index

    side = write_index(idx, str(tmp_path / "set.lirs"))
    assert (np.asarray(idx.offset_table.base) < 0).any()  # the wide block is there
    return side


@pytest.mark.parametrize("gap,span", [(1024, 1 << 16), (0, 1), (3, 40)])
def test_offsets_read_with_pread_plan_the_steps_of_the_index_in_memory(tmp_path, monkeypatch, gap, span):
    from lirs import plan as P
    from lirs.index import open_index
    from lirs.windows import window_records

    side = _sidecar_index(tmp_path)
    monkeypatch.setattr(P, "INDEX_READ_GAP", gap)
    monkeypatch.setattr(P, "INDEX_READ_SPAN", span)
    mapped = plan_epoch(open_index(side, check=False), 64, "window", seed=3, group_bytes=8192, window=40)
    memory = plan_epoch(open_index(side, check=False, mmap=False), 64, "window", seed=3, group_bytes=8192, window=40)
    assert mapped._rel_file is not None and memory._rel_file is None
    rng = np.random.default_rng(0)
    for w in range(3):
        ids, o = window_records(mapped, w)
        cases = [(ids, o), (np.sort(rng.permutation(mapped.n)[:700]), None), (np.arange(2990, 3010), None),
                 (np.arange(mapped.n), None)]
        for case_ids, order in cases:
            a = memory.step(0, case_ids, order=order, piece_runs=16)
            b = mapped.step(0, case_ids, order=order, piece_runs=16)
            for x, y in zip(_delivered(a), _delivered(b)):
                assert np.array_equal(x, y)
            assert np.array_equal(a.ext_offset, b.ext_offset) and np.array_equal(a.ext_nbytes, b.ext_nbytes)


@pytest.mark.parametrize("gran", ["group", "instance", "window"])
def test_steps_of_many_batches_defer_their_extents_where_they_map_no_index(tmp_path, monkeypatch, gran):
    """extents="defer" (the Loader's walk): a group or instance step of several batches leaves its
    extents to the pool thread that reads it where they are read with pread (no index page is
    mapped), and finds them while planning where the index is mapped; a window step of several
    batches always finds them while planning. Ready, each is the step planned at once."""
    from lirs import policies
    from lirs.index import open_index

    side = _sidecar_index(tmp_path)
    monkeypatch.setattr(policies, "STEP_MIN_BYTES", 1 << 26)  # ~8 of these batches (~0.5 MB records)
    for mmap in (True, False):
        # instance steps hold several batches where reads are copies (align 1)
        kw = {"window": 40} if gran == "window" else {"align": 1} if gran == "instance" else {}
        p = plan_epoch(open_index(side, check=False, mmap=mmap), 16, gran, seed=5, group_bytes=8192, **kw)
        assert (p._rel_file is not None) == mmap and p.batches_per_step > 1 or gran == "window"
        now, later = list(p.batches()), list(p.batches(extents="defer"))
        deferred = {}
        for a, b in zip(now, later, strict=True):
            assert np.array_equal(a.ids, b.ids)
            for pa, pb in zip(a.parts, b.parts, strict=True):
                if id(pb.step) not in deferred:  # before a batch sharing the step made it ready
                    deferred[id(pb.step)] = (pb.step.fill is not None, len(pb.step.ids) > 16)
                pb.step.ready()
                for x, y in zip(_delivered(pa.step), _delivered(pb.step)):
                    assert np.array_equal(x, y)
                assert np.array_equal(pa.step.ext_nbytes, pb.step.ext_nbytes)
        many = [d for d, big in deferred.values() if big]
        assert len(many) > 3
        assert all(many) == (mmap and gran != "window") and any(many) == all(many)


def test_a_step_of_fixed_size_records_maps_no_index_and_releases_none(monkeypatch):
    """Records of a fixed size have their extents by arithmetic: a step of many runs is found in one
    pass with no index page released after each piece (pool threads find them at once), and is
    deferred by the Loader's walk."""
    idx = _fixed_index(4000, 50, files=3)
    p = plan_epoch(idx, 64, "group", seed=2, group_bytes=8192)
    calls = []
    monkeypatch.setattr(type(idx), "release_pages", lambda self: calls.append(1) or 0)
    ids = np.sort(np.random.default_rng(0).permutation(idx.n)[:900])
    got, one = p.step(0, ids, piece_runs=1), p.step(0, ids)
    assert calls == [] and np.array_equal(got.ext_offset, one.ext_offset)
    assert p.step(0, ids, "defer", piece_runs=16).fill is not None


def test_a_failed_offset_read_names_the_index(tmp_path):
    import os

    from lirs.errors import IndexFormatError
    from lirs.index import open_index
    from lirs.sidecar import ArrayFile

    side = _sidecar_index(tmp_path)
    plan = plan_epoch(open_index(side, check=False), 64, "group", seed=3, group_bytes=8192)
    ids = np.arange(100, 400)
    r, w = os.pipe()
    os.close(w)
    plan._rel_file = (ArrayFile("/somewhere/set.lirs", r), 0)  # pread on a pipe: ESPIPE
    with pytest.raises(OSError, match="offset table") as e:
        plan.step(0, ids, piece_runs=16)
    assert e.value.filename == "/somewhere/set.lirs"
    empty = tmp_path / "empty.lirs"
    empty.write_bytes(b"")
    plan._rel_file = (ArrayFile(str(empty), os.open(empty, os.O_RDONLY)), 0)  # the file ends at once
    with pytest.raises(IndexFormatError, match=f"{empty}: the index ends before its offset table"):
        plan.step(0, ids, piece_runs=16)
    assert plan.step(0, ids).reads >= 1  # a batch's step reads the map itself


def test_a_deferred_steps_failed_offset_read_comes_out_at_its_batch(tmp_path, monkeypatch):
    """A group step of several batches finds its extents on the thread that reads it (offsets by
    pread): a failed read of the offset table there is raised in the consumer's loop, naming the
    index, at the step's first batch (here the epoch's first: every step reads the table)."""
    import os

    import lirs
    from lirs import policies
    from lirs.sidecar import ArrayFile

    data = tmp_path / "d.svm"
    data.write_text("".join(f"{i % 2} {i % 7 + 1}:{i}\n" for i in range(6000)))
    lirs.build_index(str(data), progress=False)
    monkeypatch.setattr(policies, "STEP_MIN_BYTES", 1 << 12)  # steps of several 64-record batches
    with lirs.Loader(str(data), 64, granularity="group", group_bytes=4096, seed=1, engine="buffered") as ld:
        plan = ld.plan(0)
        assert plan._rel_file is not None and plan.batches_per_step > 1
        r, w = os.pipe()
        os.close(w)
        plan._rel_file = (ArrayFile("/somewhere/set.lirs", r), 0)  # pread on a pipe: ESPIPE
        got = []
        with pytest.raises(OSError, match="offset table") as e:
            for b in ld.epoch(0):
                got.append(b.index)
        assert e.value.filename == "/somewhere/set.lirs"
        assert got == []


def test_an_offset_table_pickles_without_its_file(tmp_path):
    import pickle

    from lirs.index import open_index

    t = open_index(_sidecar_index(tmp_path), check=False).offset_table
    assert t.rel_file is not None
    back = pickle.loads(pickle.dumps(t))
    assert back.rel_file is None and np.array_equal(back[np.arange(len(t))], t[np.arange(len(t))])


def _policies():
    """The module whose STEP_MIN_BYTES sizes a group read step."""
    from lirs import policies
    return policies


def test_a_large_steps_extents_hold_no_record_sized_arrays_and_a_small_steps_are_cut_in_place():
    """A step's extent arrays are made the size of its records and cut to the extents found: a
    step of many records (a window's) copies the cut (the record-sized arrays go), a small one
    keeps views of them (fewer Python calls a step); either way the extents are exact."""
    from lirs.constants import EXTENTS_COPY_MIN_BYTES

    n = 2 * EXTENTS_COPY_MIN_BYTES // 8
    idx = _variable_index(n, 3, files=2, mean=40)
    p = plan_epoch(idx, 64, "group", seed=1)
    big = p.step(0, np.arange(n, dtype=np.int64))
    small = p.step(0, np.arange(1000, 3000, dtype=np.int64))
    for step in (big, small):
        _check_step_extents(idx, step)
        for a in (step.ext_file, step.ext_offset, step.ext_nbytes):
            assert len(a) == len(np.unique(step.rec_extent)) and a.flags.c_contiguous
    for a in (big.ext_file, big.ext_offset, big.ext_nbytes):
        assert a.base is None or a.base.nbytes == a.nbytes  # its own memory: the record-sized array went
    assert small.ext_offset.base is not None and small.ext_offset.base.nbytes == 2000 * 8


@pytest.mark.parametrize("files,big", [(1, 0.0), (3, 0.05)])
def test_a_window_batch_inside_the_step_it_opened_is_planned_as_the_full_walk_plans_it(files, big):
    """Most window batches take the rows right after the last batch's, inside the window step it
    opened: planned without the walk's loop, they are the batches the loop plans (the same step,
    rows and records), across window ends, for plain walks and over the spans of an elastic resume."""
    from lirs.ranges import rank_spans
    from lirs.walker import WindowSteps

    idx = _variable_index(6000, 4, files=files, big=big)
    for spans in (None, [[0, 900], [1500, 4100], [5000, 6000]]):
        p = plan_epoch(idx, 50, "window", seed=5, group_bytes=8192, window=7, epoch=1)
        if spans is not None:
            from lirs.ranges import over_spans
            p = over_spans(p, np.asarray(spans, np.int64))
        mine = rank_spans(p)
        for own in (None, (0, 2), (1, 3)):  # a plain walk, and DataLoader workers' walks over some windows
            fast, full = WindowSteps(p, mine, 1, False), WindowSteps(p, mine, 1, False)
            if own:
                fast.own(*own)
                full.own(*own)
            took_fast = 0
            for j in range(p.num_batches):
                full.at = None  # the loop's own search, each batch
                took_fast += fast.at is not None and fast.open is not None and fast.at[1] == fast.open[0]
                a, b = fast.batch(j), full.batch(j)
                a, b = (a if isinstance(a, list) else [a]), (b if isinstance(b, list) else [b])
                assert len(a) == len(b)
                for x, y in zip(a, b):
                    assert x.index == y.index == j and np.array_equal(x.ids, y.ids) and x.piece == y.piece
                    assert [(q.step.number, q.lo, q.hi, q.last) for q in x.parts] == \
                        [(q.step.number, q.lo, q.hi, q.last) for q in y.parts]
                    assert all(np.array_equal(q.step.ids, r.step.ids) for q, r in zip(x.parts, y.parts))
                    assert x.ids.base is None  # its own copy, as the loop's concatenation makes it
            assert took_fast > p.num_batches // (2 if own is None else 2 * own[1])


@pytest.mark.parametrize("start,spans,own,rank", [(0, None, None, 0), (7, None, None, 0), (2, None, None, 1),
                                                  (0, [[0, 900], [1500, 4100], [5000, 6000]], None, 0),
                                                  (3, [[100, 4000], [4500, 6000]], None, 0), (0, None, (0, 2), 0),
                                                  (0, None, (1, 3), 0)])
def test_a_window_walk_in_units_gives_the_plain_walks_batches_a_few_at_a_time(monkeypatch, start, spans, own, rank):
    """``batches(units=True)`` over window steps (the Loader's walk): consecutive batches that take
    rows of one window step only come as a SharedStep of at most ``batches_per_unit`` of them,
    back to back, with what they take together (from the first one's rows to the last one's, and
    whether a later batch needs the step); a batch that spans two windows, and a piece of one,
    come alone. Flattened, exactly the plain walk's plans (from any start, over an elastic
    resume's spans, a rank's, for DataLoader workers' walks over some windows)."""
    from lirs.policies import POLICIES
    from lirs.steps import SharedStep

    idx = _variable_index(6000, 4, files=2, big=0.02)
    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", int(3.5 * 50 * idx.payload_bytes / idx.n))
    p = plan_epoch(idx, 50, "window", seed=5, group_bytes=8192, window=7, epoch=1, rank=rank, world_size=1 + rank)
    if spans is not None:
        from lirs.ranges import over_spans
        p = over_spans(p, np.asarray(spans, np.int64))
    windows = own if own is not None else None
    per = POLICIES["window"].batches_per_unit(p)
    plain = list(p.batches(start, windows=windows))
    units = list(p.batches(start, windows=windows, units=True))
    flat, shared = [], 0
    for u in units:
        if not isinstance(u, SharedStep):
            flat.append(u)
            continue
        shared += 1
        assert 1 < len(u.plans) <= per
        assert all(len(bp.parts) == 1 and bp.parts[0].step is u.step for bp in u.plans)
        assert [bp.parts[0].hi for bp in u.plans[:-1]] == [bp.parts[0].lo for bp in u.plans[1:]]
        assert not any(bp.parts[0].last for bp in u.plans[:-1])
        ((step, lo, hi, last),) = u.parts
        assert (step, lo, hi, last) == (u.step, u.plans[0].parts[0].lo, u.plans[-1].parts[0].hi, u.plans[-1].parts[0].last)
        flat.extend(u.plans)
    assert per == 4 and shared > len(plain) // 8 and len(units) < len(plain)
    assert len(flat) == len(plain)
    for a, b in zip(plain, flat):
        assert a.index == b.index and a.piece == b.piece and np.array_equal(a.ids, b.ids)
        assert [(q.step.number, q.lo, q.hi, q.last) for q in a.parts] == [(q.step.number, q.lo, q.hi, q.last) for q in b.parts]


@pytest.mark.parametrize("start,own", [(0, (0, 3)), (0, (2, 3)), (5, (1, 4)), (0, (3, 4))])
def test_a_walk_over_some_windows_steps_over_the_batches_of_the_others(monkeypatch, start, own):
    """A DataLoader worker's walk (``windows=(w, W)``, in units) asks for the batches that take
    rows of its windows, and at most one more a window of the others: not for every batch of the
    epoch. Its batches are the plain walk's, which asks for each (checked above and here)."""
    from lirs.walker import WindowSteps

    idx = _variable_index(6000, 4, files=2)
    p = plan_epoch(idx, 50, "window", seed=5, group_bytes=8192, window=12, epoch=1)
    asked = []
    real = WindowSteps.batch
    monkeypatch.setattr(WindowSteps, "batch", lambda self, j: asked.append(j) or real(self, j))
    got = [bp for u in p.batches(start, windows=own, units=True) for bp in getattr(u, "plans", (u,))]
    asked_units, asked = asked, []
    plain = list(p.batches(start, windows=own))
    assert [(b.index, b.piece) for b in got] == [(b.index, b.piece) for b in plain]
    assert all(np.array_equal(a.ids, b.ids) for a, b in zip(got, plain))
    windows = -(-p.perm.n // p.window)
    assert windows >= 6 and len(asked) == p.num_batches - start
    # every batch asked for holds rows of an owned window, but the first one of each gap
    owned = {b.index for b in got}
    assert len([j for j in asked_units if j not in owned]) <= -(-windows // own[1]) + 1
    assert len(asked_units) < (p.num_batches - start) // 2


def test_a_strided_window_walk_comes_a_batch_at_a_time():
    """A strided window walk (its steps hold the walk's rows only) has no units: its plans as they are."""
    idx = _variable_index(3000, 4)
    p = plan_epoch(idx, 50, "window", seed=5, group_bytes=8192, window=7)
    plain = list(p.batches(1, stride=3))
    units = list(p.batches(1, stride=3, units=True))
    assert [type(u).__name__ for u in units] == ["BatchPlan"] * len(plain)
    assert [u.index for u in units] == [u.index for u in plain]


def test_a_threads_offsets_scratch_is_reused_and_its_bound_guarded(tmp_path, monkeypatch):
    """A step's offsets are gathered in its thread's scratch (lirs.plan.offsets_scratch), kept from
    step to step (a fresh array a step had its pages faulted in and zeroed each time): the same
    array for a step no larger, another thread's its own; the steps planned through it are those
    planned through fresh ones; a scratch smaller than a step's offsets stops with an error instead
    of a write past its end."""
    import threading

    from lirs import plan as P
    from lirs.index import open_index

    side = _sidecar_index(tmp_path)
    p = plan_epoch(open_index(side, check=False), 64, "instance", seed=3, align=1)
    rng = np.random.default_rng(1)
    cases = [np.sort(rng.permutation(p.n)[:700]), np.arange(p.n), np.arange(2990, 3010)]  # the largest bound first
    want = []
    for ids in cases:  # a fresh scratch for each step
        monkeypatch.setattr(P, "_SCRATCH", threading.local())
        want.append(p.step(0, ids, piece_runs=16))
    monkeypatch.setattr(P, "_SCRATCH", threading.local())
    first = None
    for ids, w in zip(cases, want):  # one scratch, written over by each step
        got = p.step(0, ids, piece_runs=16)
        first = P._SCRATCH.a if first is None else first
        assert P._SCRATCH.a is first
        assert np.array_equal(got.ext_offset, w.ext_offset) and np.array_equal(got.rec_pos, w.rec_pos)
    other = []
    t = threading.Thread(target=lambda: other.append(P.offsets_scratch(10)))
    t.start()
    t.join()
    assert other[0] is not first and P.offsets_scratch(10) is first
    monkeypatch.setattr(P, "offsets_scratch", lambda n: np.empty(5, np.uint32))
    with pytest.raises(RuntimeError, match="scratch"):
        p.step(0, cases[1], piece_runs=16)


@pytest.mark.parametrize("gran,sidecar", [("group", True), ("group", False), ("page", False), ("instance", True),
                                          ("window", True)])
def test_a_step_planned_in_one_kernel_call_is_the_step_of_the_calls_one_by_one(tmp_path, monkeypatch, gran,
                                                                               sidecar):
    """A read step's runs, extents and deal found by one kernel call (lirs.kernels.steps, where the
    runs are few) give the same step as run_heads, extents and gather_records called one by one
    (forced by no run counting as few): the same records in the same order, the same extents."""
    from lirs import plan as P
    from lirs.index import open_index

    idx = open_index(_sidecar_index(tmp_path), check=False) if sidecar else _variable_index(20000, 5, files=3)
    p = plan_epoch(idx, 256, gran, seed=9, epoch=2, group_bytes=8192, window=6)
    walks = []
    for few in (P.RUNS_SORTED_MAX, 0):
        monkeypatch.setattr(P, "RUNS_SORTED_MAX", few)
        walks.append([bp.parts[0].step for bp in p.batches(0, extents=True)][:40])
    for a, b in zip(*walks):
        for name in ("ids", "ext_file", "ext_offset", "ext_nbytes", "rec_extent", "rec_pos", "rec_len"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (gran, name)
    assert len(walks[0]) >= 10


@pytest.mark.parametrize("mode,n_units", [("table", 200), ("table", 70_000), ("stateless", 70_000)])
@pytest.mark.parametrize("grouped", [True, False])
def test_a_span_of_the_unit_stream_is_taken_and_dealt_in_one_kernel_call(mode, n_units, grouped):
    # span_records takes the stream's records from any place, as a Cursor takes them (units from a
    # table of 1-4 B units, or computed), and deals each batch as batch_orders does
    from lirs.kernels import plan as K
    from lirs.kernels.steps import span_records
    from lirs.stream import Cursor, Span, UnitStream

    rng = np.random.default_rng(n_units)
    perm = Permutation(n_units, mode, seed=4, epoch=1)
    assert (perm.table is None) == (mode == "stateless")
    ufirst = np.concatenate([[0], np.cumsum(rng.integers(1, 9, n_units))]).astype(np.int64) if grouped else None
    n = n_units if ufirst is None else int(ufirst[-1])
    for lo, k in [(0, 1), (3, min(700, n - 3)), (n - 50, 50), (int(rng.integers(0, n // 2)), min(3000, n // 2))]:
        want = Cursor(UnitStream(perm, ufirst, n)).take(lo, lo + k)
        cuts = np.array([0, k // 3, k // 3 + 1, k], np.int64)
        counters = rng.integers(0, 2**40, 3).astype(np.uint64)
        order, dealt = np.empty(k, np.int64), np.empty(k, np.int64)
        K.batch_orders(order, cuts, np.uint64(77), counters, want, dealt)
        cur = Cursor(UnitStream(perm, ufirst, n))
        span = Span(cur, lo, k, (cuts, 77, counters))
        got = span.take()
        assert np.array_equal(span.ids, want) and np.array_equal(span.order, order) and np.array_equal(got, dealt)
        assert cur.pos == lo + k and (cur.upos, cur.within) == Cursor(UnitStream(perm, ufirst, n)).seek(lo + k)
        assert np.array_equal(Span(Cursor(UnitStream(perm, ufirst, n)), lo, k, None).take(), want)
    with pytest.raises(RuntimeError, match="ended early"):  # asked past the stream's end
        Span(Cursor(UnitStream(perm, ufirst, n)), n - 5, 6, None).take()
    args = Span(Cursor(UnitStream(perm, ufirst, n)), n - 5, 6, None).args
    assert span_records(*args, np.empty(0, np.int64))[2] == 5


@pytest.mark.parametrize("extents", [True, "defer", False])
def test_a_group_step_is_planned_in_one_kernel_call(tmp_path, monkeypatch, extents):
    # a step of consecutive batches: its records taken, dealt and their extents found in one call
    # (three before, each a GIL release and re-take); each batch as the stream and its deal give it
    import lirs
    import lirs.stream as S
    import lirs.walker as Wk
    from lirs.index import open_index
    from lirs.kernels import steps as KS
    from lirs.stream import Cursor

    path = tmp_path / "d.svm"
    rng = np.random.default_rng(8)
    path.write_bytes(b"".join(b"1 3:%d%s\n" % (i, b"1" * int(rng.integers(0, 400))) for i in range(30_000)))
    lirs.build_index(str(path), progress=False)
    idx = open_index(str(path))
    p = plan_epoch(idx, 256, "group", seed=2, epoch=1)
    assert p.batches_per_step > 1
    ref = Cursor(p.stream)
    want = [ref.take(j * 256, j * 256 + p.batch_size_of(j))[p.batch_order(p.batch_size_of(j), j * 256)]
            for j in range(p.num_batches)]
    for _ in plan_epoch(idx, 256, "group", seed=2, epoch=0).batches(extents=extents):
        pass  # the kernels compiled first: numba resolves the names below when it compiles span_step
    calls = collections.Counter()
    for mod, name in [(KS, "span_step"), (KS, "span_records"), (KS, "step_extents"), (S.K, "fill_records"),
                      (Wk, "batch_orders")]:
        monkeypatch.setattr(mod, name, lambda *a, _f=getattr(mod, name), _n=name: calls.update([_n]) or _f(*a))
    steps = {}  # the steps kept: an id is not reused
    for b in p.batches(extents=extents):
        assert np.array_equal(b.ids, want[b.index])
        for part in b.parts:
            if id(part.step) not in steps and extents:
                steps[id(part.step)] = part.step
                _check_step_extents(idx, part.step.ready())
    one = "span_step" if extents is True else "span_records"
    assert calls[one] == len(steps or [0] * calls[one]) >= 5 and not calls["fill_records"] + calls["batch_orders"]
    assert calls["step_extents"] == (calls["span_records"] if extents == "defer" else 0), calls


@pytest.mark.parametrize("extents", [True, "defer"])
def test_a_step_asking_past_the_unit_stream_says_so(tmp_path, extents):
    # the one-call kernel (span_step) and the records-only one (span_records) stop at the stream's
    # end: the step is refused, not planned over records that do not exist
    import lirs
    from lirs.constants import STEP_PIECE_RUNS
    from lirs.index import open_index
    from lirs.stream import Cursor, Span

    path = tmp_path / "d.svm"
    path.write_bytes(b"".join(b"1 3:%d\n" % i for i in range(5000)))
    lirs.build_index(str(path), progress=False)
    p = plan_epoch(open_index(str(path)), 256, "group", seed=2, epoch=1)
    span = Span(Cursor(p.stream), 4990, 11, (np.array([0, 11]), p.batch_key, np.array([4990], np.uint64)))
    with pytest.raises(RuntimeError, match="ended early"):
        p.step(0, span.ids, extents, order=span.order, piece_runs=STEP_PIECE_RUNS, span=span)
