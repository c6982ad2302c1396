"""Shuffle strategies: every one a permutation per epoch, deterministic, reshuffling where it
should; each one's defining structure; costs from record sizes; `lirs order --strategy`."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lirs.errors import UsageError
from lirs.eval.strategies import (LIRS_STRATEGIES, STRATEGIES, run_strategy, strategy_params, synthetic_index)

ALL = list(STRATEGIES)
ONE_OFF = ("two_pass", "terashuf", "chunk_roundrobin")


def _variable_index(n, seed, mean=300):
    """An in-memory LIBSVM-like index with record lengths from 20 to 2*mean bytes."""
    from lirs.index import Index

    rng = np.random.default_rng(seed)
    lens = rng.integers(20, 2 * mean, n)
    offs = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.int64)
    return Index.from_arrays(["/nonexistent/v.svm"], "libsvm", offsets=offs, data_ends=[int(lens.sum())],
                             labels=rng.choice([-1.0, 1.0], n))


def _is_perm(order, n):
    return order.dtype == np.int64 and order.shape == (n,) and np.array_equal(np.sort(order), np.arange(n))


# --------------------------------------------------------------------------- properties of all


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**31), epoch=st.integers(0, 50),
       batch=st.integers(1, 300), mem=st.integers(1, 200_000), shard=st.integers(1, 400),
       nodes=st.integers(1, 4))
def test_every_strategy_is_a_permutation(name, n, seed, epoch, batch, mem, shard, nodes):
    params = dict(memory_bytes=mem, shard_records=shard, canonical_nodes=min(nodes, n), group_bytes=8192, window=3)
    r = run_strategy(name, n, seed=seed, epoch=epoch, batch_size=batch, **params)
    assert _is_perm(r.order, n)
    again = run_strategy(name, n, seed=seed, epoch=epoch, batch_size=batch, **params)
    assert np.array_equal(r.order, again.order)  # same inputs, same order
    c = r.cost
    assert c.payload_bytes == 360 * n and c.memory_bytes >= 0
    assert c.read_bytes >= c.payload_bytes  # every record is read at least once per epoch (or once per run)
    assert c.read_amplification >= 1.0


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=6, deadline=None)
@given(n=st.integers(400, 4000), seed=st.integers(0, 2**31), epoch=st.integers(0, 50))
def test_variable_records_from_an_index(name, n, seed, epoch):
    idx = _variable_index(n, seed % 1000)
    r = run_strategy(name, idx, seed=seed, epoch=epoch, batch_size=64, group_bytes=16384)
    assert _is_perm(r.order, n)
    assert r.cost.payload_bytes == idx.payload_bytes


@pytest.mark.parametrize("name", ALL)
def test_epochs_differ_where_the_strategy_reshuffles(name):
    n = 5000
    a = run_strategy(name, n, seed=7, epoch=0, batch_size=100)
    b = run_strategy(name, n, seed=7, epoch=1, batch_size=100)
    c = run_strategy(name, n, seed=8, epoch=0, batch_size=100)
    if name == "sequential":
        assert not a.reshuffles and np.array_equal(a.order, b.order) and np.array_equal(a.order, np.arange(n))
    else:
        assert a.reshuffles
        assert not np.array_equal(a.order, b.order)
        assert not np.array_equal(a.order, c.order)


@pytest.mark.parametrize("name", ONE_OFF)
def test_one_off_rewrites_keep_their_order(name):
    n = 3000
    orders = [run_strategy(name, n, seed=2, epoch=e, reshuffle_every_epoch=False).order for e in range(3)]
    assert all(np.array_equal(orders[0], o) for o in orders[1:])
    assert np.array_equal(orders[0], run_strategy(name, n, seed=2, epoch=0).order)  # epoch 0 is the one-off
    fresh = run_strategy(name, n, seed=2, epoch=1)
    once = run_strategy(name, n, seed=2, epoch=1, reshuffle_every_epoch=False)
    P = 360 * n
    assert fresh.cost.write_bytes == 2 * P and fresh.cost.oneoff_write_bytes == 0
    assert once.cost.write_bytes == 0 and once.cost.oneoff_write_bytes == 2 * P and once.cost.seq_read_bytes == P
    assert not once.exact and not once.reshuffles


def test_a_count_is_a_synthetic_index():
    n = 4000
    idx = synthetic_index(n, 200)
    for name in ALL:
        a = run_strategy(name, n, seed=3, epoch=2, batch_size=50, record_bytes=200)
        b = run_strategy(name, idx, seed=3, epoch=2, batch_size=50)
        assert np.array_equal(a.order, b.order), name
        assert a.cost == b.cost, name


def test_lirs_strategies_are_the_planner():
    from lirs.plan import plan_epoch

    idx = _variable_index(3000, 1)
    for g in LIRS_STRATEGIES:
        r = run_strategy(g, idx, seed=4, epoch=3, batch_size=128, group_bytes=8192, window=3)
        plan = plan_epoch(idx, 128, g, seed=4, epoch=3, group_bytes=8192, window=3)
        assert np.array_equal(r.order, plan.order())
        st_ = plan.stats()
        assert r.cost.rand_reads == st_["reads"] and r.cost.rand_read_bytes == st_["bytes_read"]
        assert r.cost.memory_bytes >= 8 * idx.n  # the offset index at least
    assert run_strategy("instance", idx).exact and not run_strategy("group", idx).exact


# --------------------------------------------------------------------------- each one's structure


def test_sequential_and_shuffle_buffer():
    from lirs.eval.reference import shuffle_buffer_order

    assert np.array_equal(run_strategy("sequential", 100).order, np.arange(100))
    n, Q = 5000, 37
    r = run_strategy("shuffle_buffer", n, seed=5, epoch=2, buffer_records=Q)
    assert np.array_equal(r.order, shuffle_buffer_order(n, Q, seed=5, epoch=2))
    # the buffer has only read records 0 .. j+Q-1 when it delivers position j
    assert (r.order <= np.arange(n) + Q - 1).all()
    assert r.cost.memory_bytes == Q * 360 and r.cost.seq_read_bytes == n * 360 and r.cost.rand_reads == 0
    # the default buffer fills the memory budget
    assert run_strategy("shuffle_buffer", n, memory_bytes=3600).params["buffer_records"] == 10


def test_bmf_blocks_are_fixed_for_the_run_and_trained_whole():
    from lirs.eval.reference import bmf_blocks

    n, B = 3000, 6
    layout = [set(b.tolist()) for b in bmf_blocks(n, B, seed=9)]
    starts = []
    for e in range(3):
        r = run_strategy("bmf", n, seed=9, epoch=e, blocks=B)
        o = r.order
        pos = 0
        first_blocks = []
        while pos < n:  # the order is the blocks back to back, each whole
            blk = next(b for b in layout if o[pos] in b)
            assert set(o[pos:pos + len(blk)].tolist()) == blk
            first_blocks.append(min(blk))
            pos += len(blk)
        starts.append(tuple(first_blocks))
    assert len(set(starts)) > 1  # the block order changes between epochs
    f = run_strategy("bmf", n, seed=9, epoch=1, blocks=B, inner="file").order
    cuts = np.flatnonzero(np.diff(f) < 0) + 1  # inside a block file, IDs ascend
    assert len(cuts) == B - 1
    c = run_strategy("bmf", n, seed=9, blocks=B).cost
    assert c.oneoff_write_bytes == n * 360 and c.seq_read_bytes == n * 360
    assert c.memory_bytes == max(len(b) for b in layout) * 360
    with pytest.raises(UsageError):
        run_strategy("bmf", n, inner="sideways")


def test_deeplake_buffer_of_one_chunk_emits_chunks_whole():
    n = 4000
    r = run_strategy("deeplake", n, seed=1, epoch=0, chunk_bytes=360 * 50, buffer_bytes=1)
    chunks = r.order // 50
    runs = np.flatnonzero(np.diff(chunks)) + 1
    assert len(runs) == n // 50 - 1  # each chunk delivered whole before the next is loaded
    assert sorted(chunks[np.concatenate([[0], runs])].tolist()) == list(range(n // 50))
    big = run_strategy("deeplake", n, seed=1, chunk_bytes=360 * 50, buffer_bytes=360 * 1000)
    assert big.params["chunks"] == n // 50
    # the buffer holds whole chunks: at most one chunk past its size
    assert 360 * 1000 <= big.cost.memory_bytes < 360 * 1050
    assert big.cost.rand_reads == n // 50 and big.cost.read_bytes >= n * 360


def _runs_of(order, unit):
    u = order // unit
    return len(np.flatnonzero(np.diff(u))) + 1


def test_streaming_intra_shard_algorithms_deliver_shards_whole():
    n, shard = 6000, 250
    for algo in ("streaming_py1s", "streaming_py2s"):
        r = run_strategy(algo, n, seed=3, epoch=1, shard_records=shard, canonical_nodes=1)
        assert _runs_of(r.order, shard) == n // shard  # one run per shard
        assert r.cost.rand_reads == n // shard
        assert r.cost.memory_bytes == shard * 360  # one live shard at a time
    # py1b: a block of the stream holds the records of a few consecutive shard parts only
    r = run_strategy("streaming_py1b", n, seed=3, epoch=1, shard_records=shard, block_records=1000)
    for lo in range(0, n, 1000):
        assert len(np.unique(r.order[lo:lo + 1000] // shard)) <= 1000 // shard + 1


def test_streaming_canonical_nodes_keep_their_records():
    n = 6000
    nodes = [set(run_strategy("streaming_py1e", n, seed=3, epoch=e, shard_records=100, canonical_nodes=2,
                              block_records=500).order[0::2].tolist()) for e in range(3)]
    # the shard-to-node split is once per run: node 0 (even positions) owns the same records every epoch
    assert nodes[0] == nodes[1] == nodes[2] and len(nodes[0]) == n // 2
    other = set(run_strategy("streaming_py1e", n, seed=4, epoch=0, shard_records=100, canonical_nodes=2,
                             block_records=500).order[0::2].tolist())
    assert other != nodes[0]


def test_streaming_py1e_spreads_shards_over_about_a_block():
    n, shard, block = 8000, 100, 400
    r = run_strategy("streaming_py1e", n, seed=5, epoch=0, shard_records=shard, block_records=block)
    spans = []
    for s in range(n // shard):
        p = np.flatnonzero(r.order // shard == s)
        spans.append(p.max() - p.min())
    # every sample moves less than half the largest block (0.625 x block), so a shard's samples end up
    # among the samples that started within 1.25 x block + shard of each other
    assert max(spans) < shard + 2.5 * block
    assert np.mean(spans) > 2 * shard  # ... and they do spread beyond their shard


def test_streaming_py1br_blocks_are_staggered():
    n, shard = 20000, 500
    # blocks as large as shards: py1b's blocks line up with the shard parts, so shards stay whole
    b = run_strategy("streaming_py1b", n, seed=6, epoch=0, shard_records=shard, block_records=shard)
    assert _runs_of(b.order, shard) == n // shard
    # py1br's staggered blocks of random size straddle shard boundaries
    r = run_strategy("streaming_py1br", n, seed=6, epoch=0, shard_records=shard, block_records=shard)
    assert _runs_of(r.order, shard) > 1.5 * n // shard


def test_ffcv_one_active_page_delivers_pages_whole():
    n = 5000
    r = run_strategy("ffcv_quasi_random", n, seed=2, page_bytes=360 * 40, active_pages=1)
    assert _runs_of(r.order, 40) == -(-n // 40)
    assert not np.array_equal(r.order[:40], np.sort(r.order[:40]))  # shuffled inside the page
    d = run_strategy("ffcv_quasi_random", n, seed=2, batch_size=16)
    assert d.params["active_pages"] == 32  # FFCV: 2 x batch size


def test_chunk_roundrobin_rounds_take_one_record_of_every_chunk():
    n, c = 3000, 250
    r = run_strategy("chunk_roundrobin", n, seed=1, epoch=4, chunk_records=c)
    m = n // c
    for k in range(c):
        assert sorted((r.order[k * m:(k + 1) * m] // c).tolist()) == list(range(m))
    short = run_strategy("chunk_roundrobin", 2100, seed=1, chunk_records=500)  # last chunk of 100
    last = np.flatnonzero(short.order >= 2000)
    assert last.max() < 100 * 5  # its records all come in the first 100 rounds


def test_two_pass_and_terashuf_sizes():
    n = 10000
    tp = run_strategy("two_pass", n, seed=1, memory_bytes=360 * 1000)
    assert tp.params["piles"] == 13 and tp.exact  # expected pile 80% of the budget
    assert tp.cost.memory_bytes > 360 * n / 13  # the largest pile is above the mean
    ts = run_strategy("terashuf", n, seed=1, memory_bytes=360 * 1000)
    assert ts.params["runs"] == 10 and ts.exact and ts.cost.memory_bytes == 360 * 1000
    one = run_strategy("terashuf", n, seed=1, run_bytes=10**9)  # one run: a plain in-RAM shuffle
    assert one.params["runs"] == 1 and _is_perm(one.order, n)


# --------------------------------------------------------------------------- API and errors


def test_registry_and_parameters():
    import lirs
    import lirs.eval

    assert lirs.eval.STRATEGIES is STRATEGIES and not hasattr(lirs, "STRATEGIES")
    assert "buffer_records" in strategy_params("shuffle_buffer")
    assert "buffer_records" not in strategy_params("bmf")
    # one shared dict drives every strategy; a parameter meant for another one is ignored
    shared = dict(buffer_records=10, shard_records=7, blocks=3, memory_bytes=5000)
    for name in ALL:
        assert _is_perm(run_strategy(name, 500, **shared).order, 500)
    with pytest.raises(UsageError, match="unknown strategy parameter"):
        run_strategy("bmf", 100, bloks=3)
    with pytest.raises(UsageError, match="unknown strategy"):
        run_strategy("random_walk", 100)
    for bad in (dict(seed=-1), dict(batch_size=0), dict(epoch=-2)):
        with pytest.raises(UsageError):
            run_strategy("two_pass", 100, **bad)
    for bad_n in (0, -5, 2.5, "x"):
        with pytest.raises(UsageError):
            run_strategy("sequential", bad_n)
    with pytest.raises(UsageError):
        run_strategy("shuffle_buffer", 100, buffer_records=0)
    with pytest.raises(UsageError):
        run_strategy("streaming_py1s", 10, canonical_nodes=11)


# --------------------------------------------------------------------------- lirs order --strategy


@pytest.fixture(scope="module")
def kdd_file(tmp_path_factory):
    from lirs.eval.gen import generate
    from lirs.build import build_index

    p = str(tmp_path_factory.mktemp("strat") / "k.svm")
    generate("kdd", p, records=3000, seed=2, order="sorted", progress=False)
    build_index(p, progress=False)
    return p


def test_order_command_with_a_strategy(kdd_file, tmp_path, capsys):
    from lirs.cli import main
    from lirs.index import open_index
    from lirs.plan import plan_epoch

    idx = open_index(kdd_file)
    out = str(tmp_path / "o.npy")
    assert main(["order", kdd_file, "--strategy", "bmf", "--seed", "3", "--epoch", "2", "--param", "blocks=4",
                 "-o", out, "--json"]) == 0
    st_ = json.loads(capsys.readouterr().out)
    want = run_strategy("bmf", idx, seed=3, epoch=2, blocks=4).order
    assert np.array_equal(np.load(out), want)
    assert st_["params"]["blocks"] == 4 and st_["cost"]["oneoff_write_bytes"] == idx.payload_bytes
    assert main(["order", kdd_file, "--strategy", "deeplake", "--memory", "20%"]) == 0
    text = capsys.readouterr().out
    assert "memory" in text and "random" in text
    # a lirs strategy is the granularity of the same name
    assert main(["order", kdd_file, "--strategy", "window", "--group-bytes", "8K", "--window", "4", "-o", out]) == 0
    assert np.array_equal(np.load(out), plan_epoch(idx, 1024, "window", group_bytes=8192, window=4).order())
    assert main(["order", kdd_file, "--strategy", "bmf", "--world-size", "2"]) == 2
    assert main(["order", kdd_file, "--strategy", "group", "--granularity", "page"]) == 2
    assert main(["order", kdd_file, "--strategy", "nope"]) == 2
    assert main(["order", kdd_file, "--strategy", "bmf", "--param", "blocks"]) == 2
    assert main(["order", kdd_file, "--strategy", "bmf", "--param", "colour=3"]) == 2
    assert main(["order", kdd_file, "--strategy", "terashuf", "-o", str(tmp_path / "o.txt")]) == 2
    assert main(["order", kdd_file, "--param", "blocks=2"]) == 2
    capsys.readouterr()
    for memory in (["--memory", "3%"], ["--strategy", "window", "--memory", "3%"]):  # not ignored
        assert main(["order", kdd_file, *memory]) == 2
        assert "--memory goes with a --strategy" in capsys.readouterr().err
    assert main(["order", kdd_file]) == 0  # the planner's default path is unchanged
    assert "amplification" in capsys.readouterr().out


@pytest.mark.parametrize("given, refused", [
    (["--strategy", "bmf", "--param", "buffer_records=10"], "--param buffer_records"),
    (["--strategy", "sequential", "--memory", "1M"], "--memory"),
    (["--strategy", "bmf", "--window", "3"], "--window"),
    (["--strategy", "bmf", "--permutation", "stateless"], "--permutation"),
    (["--strategy", "shuffle_buffer", "--group-bytes", "8K"], "--group-bytes"),
    (["--strategy", "sequential", "--param", "record_bytes=10"], "--param record_bytes"),  # sizes come from the index
])
def test_order_refuses_an_option_the_strategy_does_not_take(kdd_file, tmp_path, capsys, given, refused):
    """An option the strategy does not take is refused, before any work, naming what it takes:
    it was ignored (exit 0, the same order)."""
    from lirs.cli import main

    out = tmp_path / "o.npy"
    assert main(["order", kdd_file, *given, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--strategy {given[1]} does not take {refused}; it takes " in err, err
    assert not out.exists()
    # options the strategy takes, and the defaults of those it does not, still run
    for ok in (["--strategy", "corgipile", "--group-bytes", "8K", "--memory", "10%"],
               ["--strategy", "bmf", "--param", "blocks=3"], ["--strategy", "sequential"]):
        assert main(["order", kdd_file, *ok]) == 0, ok


# --------------------------------------------------------------------------- CorgiPile and Corgi²


def _chunks(order, sizes):
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [set(order[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:])]


def test_corgipile_buffers_hold_whole_blocks():
    # records of 1 KiB, blocks of 8 KiB: block k holds records 8k .. 8k+7
    n, per = 3000, 8
    r = run_strategy("corgipile", n, seed=3, epoch=1, group_bytes=8192, buffer_blocks=5, record_bytes=1024)
    assert _is_perm(r.order, n) and r.params["blocks"] == n // per
    seen = set()
    for chunk in _chunks(r.order, [5 * per] * (n // (5 * per))):
        blocks = {i // per for i in chunk}
        assert len(blocks) == 5 and chunk == {i for b in blocks for i in range(b * per, b * per + per)}
        assert not blocks & seen
        seen |= blocks
    one = run_strategy("corgipile", n, seed=3, epoch=1, group_bytes=8192, buffer_blocks=1, record_bytes=1024)
    for chunk in _chunks(one.order, [per] * (n // per)):
        assert max(chunk) - min(chunk) == per - 1 and min(chunk) % per == 0  # one whole block
    # the default buffer holds as many whole blocks as the memory budget
    assert run_strategy("corgipile", n, group_bytes=8192, memory_bytes=8192 * 7 + 100,
                        record_bytes=1024).params["buffer_blocks"] == 7
    b = run_strategy("corgipile", n, seed=3, epoch=2, group_bytes=8192, buffer_blocks=5, record_bytes=1024)
    assert not np.array_equal(r.order, b.order)


def test_corgipile_spread_remainder_gives_equal_buffers():
    n, per = 8 * 23, 8  # 23 blocks, buffers of 5: 4 buffers of 5, 6, 6, 6 blocks (not 5, 5, 5, 5, 3)
    r = run_strategy("corgipile", n, seed=1, group_bytes=8192, buffer_blocks=5, remainder="spread", record_bytes=1024)
    assert _is_perm(r.order, n)
    starts = (np.arange(4) * 23) // 4
    sizes = np.diff(np.concatenate([starts, [23]])) * per
    for chunk in _chunks(r.order, sizes):
        assert len({i // per for i in chunk}) * per == len(chunk)
    with pytest.raises(UsageError, match="remainder"):
        run_strategy("corgipile", n, remainder="middle")


def test_corgipile_io_accounting_on_a_tiny_file():
    # 100 records of 4 KiB in blocks of 64 KiB: 6 full blocks and one of 4 records, each one aligned read
    n = 100
    r = run_strategy("corgipile", n, seed=2, group_bytes=65536, buffer_blocks=2, record_bytes=4096)
    c = r.cost
    assert c.rand_reads == 7 and c.rand_read_bytes == n * 4096 and c.seq_read_bytes == 0
    assert c.median_read_bytes == 65536 and c.large_rand_read_bytes == 6 * 65536
    assert c.large_read_share == pytest.approx(96 / 100) and c.read_amplification == 1.0
    assert c.memory_bytes == 2 * 65536 and c.oneoff_read_bytes == 0 and c.write_bytes == 0
    # variable records: every block read whole, aligned to 4 KiB at both ends
    idx = _variable_index(4000, 5)
    v = run_strategy("corgipile", idx, group_bytes=16384, buffer_blocks=3).cost
    assert idx.payload_bytes <= v.rand_read_bytes <= idx.payload_bytes + v.rand_reads * 2 * 4096
    assert v.large_rand_read_bytes == 0  # 16 KiB blocks: no read reaches 64 KiB


def test_corgi2_rewrites_once_and_counts_the_rewrite_apart():
    n, per, m = 2400, 8, 4
    kw = dict(group_bytes=8192, buffer_blocks=1, offline_blocks=m, record_bytes=1024)
    epochs = [run_strategy("corgi2", n, seed=6, epoch=e, **kw) for e in range(3)]
    for r in epochs:
        assert _is_perm(r.order, n)
    # with a one-block online buffer every epoch delivers blocks of the rewritten file whole: the same
    # sets of records every epoch (the rewrite is once per run), each from m whole blocks' records
    sets = [sorted(tuple(sorted(c)) for c in _chunks(r.order, [per] * (n // per))) for r in epochs]
    assert sets[0] == sets[1] == sets[2]
    assert not np.array_equal(epochs[0].order, epochs[1].order)
    assert max(len({i // per for i in c}) for c in sets[0]) > 1  # new blocks mix old ones
    c = epochs[0].cost
    assert c.oneoff_read_bytes == n * 1024 and c.oneoff_write_bytes == n * 1024
    assert c.rand_reads == n // per and c.rand_read_bytes == n * 1024 and c.write_bytes == 0
    assert c.memory_bytes == m * 8192  # the offline buffer is the larger one here
    # offline buffers of m blocks: every run of m new blocks holds the records of m whole old blocks
    assert len(_offline_runs(sets[0], m, per)) == n // per // m
    other = run_strategy("corgi2", n, seed=7, epoch=0, **kw)
    assert not np.array_equal(other.order, epochs[0].order)


def _offline_runs(new_blocks, m, per):
    """Group the new blocks by the old blocks they draw from: the records of the old blocks of one
    offline buffer are exactly the records of m new blocks."""
    old_of = {}
    for t in new_blocks:
        old_of[t] = frozenset(i // per for i in t)
    groups = []
    pending = list(new_blocks)
    while pending:
        t = pending.pop()
        olds = set(old_of[t])
        members = [t]
        grown = True
        while grown:
            grown = False
            for u in list(pending):
                if old_of[u] & olds:
                    olds |= old_of[u]
                    members.append(u)
                    pending.remove(u)
                    grown = True
        assert len(olds) == len(members) == m  # m new blocks <-> m whole old blocks
        assert {i for t_ in members for i in t_} == {i for b in olds for i in range(b * per, b * per + per)}
        groups.append(members)
    return groups
