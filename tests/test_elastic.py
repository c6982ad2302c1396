"""Plans over position ranges: every W-th batch equals the plain walk's, and elastic resume (a state
saved with W1 ranks resumed with W2) delivers every remaining record of the epoch exactly once."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lirs.errors import UsageError
from lirs.plan import GRANULARITIES, plan_epoch
from lirs.ranges import cut, merge, over_spans, remainder
from test_plan import _check_step_extents, _fixed_index, _variable_index


def _index(n, seed, fixed):
    return _fixed_index(n, 97, files=2) if fixed else _variable_index(n, seed % 997, files=2)


def _parts_ids(b):
    got = [step.ids[lo:hi] for step, lo, hi, last in b.parts]
    return np.concatenate(got) if got else np.empty(0, np.int64)


def _same(a, b):
    assert a.index == b.index and np.array_equal(a.ids, b.ids), f"batch {a.index}"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 500), B=st.integers(1, 60), W=st.integers(1, 3), workers=st.integers(1, 4),
       seed=st.integers(0, 10**6), g=st.sampled_from(GRANULARITIES), perm=st.sampled_from(["table", "stateless"]),
       start=st.integers(0, 12), fixed=st.booleans())
def test_every_wth_batch_equals_the_plain_walk(n, B, W, workers, seed, g, perm, start, fixed):
    idx = _index(n, seed, fixed)
    for r in range(W):
        p = plan_epoch(idx, B, g, seed=seed, epoch=1, rank=r, world_size=W, group_bytes=8192, window=3,
                       permutation=perm)
        whole = list(p.batches())
        s = min(start, p.num_batches)
        for w in range(workers):
            sub = list(p.batches(min(s + w, p.num_batches), stride=workers))
            want = whole[s + w::workers]
            assert len(sub) == len(want)
            for a, b in zip(sub, want):
                _same(a, b)
                assert np.array_equal(_parts_ids(a), a.ids)
                for step, *_ in a.parts:
                    _check_step_extents(idx, step)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 400), B=st.integers(1, 50), seed=st.integers(0, 10**6), g=st.sampled_from(GRANULARITIES),
       fixed=st.booleans())
def test_one_span_of_everything_is_the_plain_plan(n, B, seed, g, fixed):
    idx = _index(n, seed, fixed)
    kw = dict(seed=seed, epoch=2, group_bytes=8192, window=2)
    plain = list(plan_epoch(idx, B, g, **kw).batches())
    spanned = over_spans(plan_epoch(idx, B, g, **kw), [[0, n]])
    got = list(spanned.batches())
    assert len(got) == len(plain)
    for a, b in zip(got, plain):
        _same(a, b)
        assert np.array_equal(_parts_ids(a), a.ids)
    # a window step is read once for all the batches that take rows of it
    steps = {id(s) for b in got for s, *_ in b.parts}
    if g == "window":
        assert len(steps) <= -(-spanned.units // 2) + 1


def test_span_arithmetic():
    spans = np.array([[0, 5], [10, 20], [30, 31]])
    assert cut(spans, 3, 12).tolist() == [[3, 5], [10, 17]]
    assert cut(spans, 15, 16).tolist() == [[30, 31]]
    assert cut(spans, 0, 16).tolist() == [[0, 5], [10, 20], [30, 31]]
    assert cut(spans, 16, 16).shape == (0, 2)
    assert merge([np.array([[5, 8]]), np.array([[0, 5], [9, 10]])]).tolist() == [[0, 8], [9, 10]]
    assert remainder(10, None, 2, 2, False, [1, 2]).tolist() == [[2, 5], [9, 10]]
    with pytest.raises(UsageError, match="rank 1 consumed 9"):
        remainder(10, None, 2, 2, False, [1, 9])


def _consumed_and_left(idx, B, g, W1, progress, drop_last, kw):
    done, left = [], []
    for r in range(W1):
        p = plan_epoch(idx, B, g, rank=r, world_size=W1, drop_last=drop_last, **kw)
        bs = list(p.batches(extents=False))
        done += [b.ids for b in bs[:progress[r]]]
        left += [b.ids for b in bs[progress[r]:]]
    cat = lambda a: np.concatenate(a) if a else np.empty(0, np.int64)  # noqa: E731
    return cat(done), cat(left)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 400), B1=st.integers(1, 40), W1=st.integers(1, 4), W2=st.integers(1, 5),
       seed=st.integers(0, 10**6), g=st.sampled_from(GRANULARITIES), fixed=st.booleans(),
       drop_last=st.booleans(), frac=st.lists(st.floats(0, 1), min_size=4, max_size=4), twice=st.booleans())
def test_elastic_resume_delivers_the_rest_once(n, B1, W1, W2, seed, g, fixed, drop_last, frac, twice):
    idx = _index(n, seed, fixed)
    kw = dict(seed=seed, epoch=4, group_bytes=8192, window=3)
    nb1 = plan_epoch(idx, B1, g, world_size=W1, drop_last=drop_last, **kw).num_batches
    progress = [int(f * nb1) for f in frac[:W1]]
    done, left = _consumed_and_left(idx, B1, g, W1, progress, drop_last, kw)
    spans = remainder(n, None, B1, W1, drop_last, progress)
    B2 = max(1, B1 * W1 // W2)  # the same global batch where it divides
    plans = [over_spans(plan_epoch(idx, B2, g, rank=r, world_size=W2, drop_last=drop_last, **kw), spans)
             for r in range(W2)]
    assert len({p.num_batches for p in plans}) == 1, "every new rank steps the same number of times"
    if twice and plans[0].num_batches:  # resume the resumed epoch once more, with W1 ranks again
        p2 = [int(f * plans[0].num_batches) for f in frac[:W2]] if W2 <= 4 else [0] * W2
        seen = np.concatenate([b.ids for p, k in zip(plans, p2) for b in list(p.batches(extents=False))[:k]]
                              or [np.empty(0, np.int64)])
        done = np.concatenate([done, seen])
        spans = remainder(n, spans, B2, W2, drop_last, p2)
        plans = [over_spans(plan_epoch(idx, B1, g, rank=r, world_size=W1, drop_last=drop_last, **kw), spans)
                 for r in range(W1)]
    got = np.concatenate([b.ids for p in plans for b in p.batches()] or [np.empty(0, np.int64)])
    assert len(np.unique(got)) == len(got), "no record twice"
    assert not np.intersect1d(got, done).size, "nothing consumed comes back"
    if not drop_last:
        assert np.array_equal(np.sort(np.concatenate([got, done])), np.arange(n)), "every record once"
    else:  # the rest cut again to whole batches of the new ranks: fewer than one global batch skipped
        assert np.isin(got, left).all() or twice
        assert twice or len(left) - len(got) < B2 * W2


def test_lockstep_resume_with_the_same_world_is_the_plain_tail():
    idx = _variable_index(700, 5, files=2)
    kw = dict(seed=3, epoch=1, group_bytes=8192, window=3)
    for g in GRANULARITIES:
        spans = remainder(idx.n, None, 40, 3, False, [4, 4, 4])
        for r in range(3):
            tail = list(plan_epoch(idx, 40, g, rank=r, world_size=3, **kw).batches(4))
            got = list(over_spans(plan_epoch(idx, 40, g, rank=r, world_size=3, **kw), spans).batches())
            assert len(got) == len(tail)
            for a, b in zip(got, tail):
                assert np.array_equal(a.ids, b.ids), (g, r, b.index)


# --------------------------------------------------------------------------- Loaders


@pytest.fixture(scope="module")
def svm(tmp_path_factory):
    import lirs
    from test_loader import _write_libsvm

    p = _write_libsvm(tmp_path_factory.mktemp("el") / "e.svm", 1500, seed=21)
    lirs.build_index(p, progress=False)
    return p


def _run(Loader, p, B, W, takes, kw, states_in=None):
    """Each of W ranks takes ``takes[r]`` batches (None: all); returns their ids and states."""
    ids, states = [], []
    for r in range(W):
        with Loader(p, B, rank=r, world_size=W, **kw) as L:
            if states_in is not None:
                L.load_state_dict(states_in)
            it = L.epoch(1)
            got = [b for _, b in zip(range(takes[r]), it)] if takes[r] is not None else list(it)
            ids += [b.ids for b in got]
            states.append(L.state_dict())
            it.close()
    return (np.concatenate(ids) if ids else np.empty(0, np.int64)), states


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_loader_elastic_2_to_3_ranks(svm, granularity):
    from lirs.loader import Loader

    kw = dict(granularity=granularity, group_bytes=8192, window=3, seed=4, n_features=300)
    n = 1500
    done, states = _run(Loader, svm, 60, 2, [3, 5], kw)
    assert [s["next_batch"] for s in states] == [3, 5]
    rest, states3 = _run(Loader, svm, 40, 3, [None] * 3, kw, states_in=states)
    assert len(np.unique(rest)) == len(rest) and not np.intersect1d(rest, done).size
    assert np.array_equal(np.sort(np.concatenate([done, rest])), np.arange(n)), "every record once"
    assert all(s["spans"] is not None for s in states3)
    # ranks that stepped together: one state stands for all of them
    done, states = _run(Loader, svm, 60, 2, [4, 4], kw)
    rest, _ = _run(Loader, svm, 40, 3, [None] * 3, kw, states_in=states[1])
    assert np.array_equal(np.sort(np.concatenate([done, rest])), np.arange(n))
    # an elastic epoch resumed once more, back on 2 ranks, mid-way
    mid, states3 = _run(Loader, svm, 40, 3, [2, 2, 2], kw, states_in=states[1])
    last, _ = _run(Loader, svm, 60, 2, [None, None], kw, states_in=states3)
    assert np.array_equal(np.sort(np.concatenate([done, mid, last])), np.arange(n))


def test_loader_elastic_refusals(svm):
    from lirs.loader import Loader

    kw = dict(seed=4, n_features=300)
    _, states = _run(Loader, svm, 60, 3, [1, 1, 1], kw)
    with Loader(svm, 60, rank=0, world_size=2, **kw) as L:
        with pytest.raises(UsageError, match=r"every one of 3 old ranks, once; got ranks \[0, 2\]"):
            L.load_state_dict([states[0], states[2]])
        with pytest.raises(UsageError, match="seed: saved 4, now 5"):
            with Loader(svm, 60, seed=5, n_features=300) as other:
                other.load_state_dict(states)
        with pytest.raises(UsageError, match="different epochs"):
            L.load_state_dict([states[0], dict(states[1], epoch=2), states[2]])
