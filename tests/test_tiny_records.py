"""Tiny records (a .npy of uint8 or float32 token IDs): the auto window and the steps of several
batches hold a bounded number of records, since each record of a step costs arrays of its own
(:data:`lirs.constants.STEP_RECORD_COST`), while records of 32 B or more plan as by bytes alone."""
from __future__ import annotations

import numpy as np
import pytest

import lirs
from lirs.constants import (BLOCK, DEFAULT_GROUP_BYTES, STEP_MIN_BYTES, STEP_RECORD_COST, WINDOW_AUTO_MIN,
                            WINDOW_HELD_RATIO)
from lirs.errors import UsageError
from lirs.eval.gen import generate
from lirs.plan import plan_epoch
from lirs.policies import POLICIES, batch_bytes
from lirs.windows import group_span, window_groups

GB = DEFAULT_GROUP_BYTES


def _npy(path, array) -> str:
    np.save(path, array)
    lirs.build_index(str(path), progress=False)
    return str(path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """2 MiB of 1-byte records: the old auto window (16 MiB) took them all as one window, 256
    groups; a group step 2048 batches (STEP_MIN_BYTES of 1 KiB batches, the whole epoch)."""
    rng = np.random.default_rng(3)
    return _npy(tmp_path_factory.mktemp("tiny") / "u1.npy", rng.integers(0, 255, 2 << 20, dtype=np.uint8))


@pytest.fixture(scope="module")
def floats(tmp_path_factory):
    """4-byte records (1-D float32): also capped."""
    return _npy(tmp_path_factory.mktemp("tiny") / "f4.npy", np.arange(1 << 19, dtype=np.float32))


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """Records of exactly 32 B (8 float32 columns) and kdd-like LIBSVM (~360 B): planned as before."""
    d = tmp_path_factory.mktemp("wide")
    npy = _npy(d / "f32x8.npy", np.random.default_rng(5).random((20_000, 8), dtype=np.float32))
    svm = str(d / "kdd.svm")
    generate("kdd", svm, records=6000, seed=11, progress=False)
    lirs.build_index(svm, progress=False)
    return {"npy": npy, "kdd": svm}


def _old_window(index) -> int:
    """The auto window by bytes alone (before records were counted)."""
    return window_groups("auto", group_span(GB, index.payload_bytes, index.n), index.payload_bytes)


def _unit_batches(plan) -> int:
    """Batches a window epoch's consumer takes as one item (a step's worth)."""
    return POLICIES[plan.granularity].batches_per_unit(plan)


def _old_step_batches(plan) -> int:
    """Batches of a step of several by bytes alone (before records were counted)."""
    return max(1, min(plan.num_batches, -int(-STEP_MIN_BYTES // max(batch_bytes(plan), 1.0))))


@pytest.mark.parametrize("name", ["tiny", "floats"])
def test_auto_window_and_steps_of_tiny_records_hold_a_bounded_record_count(name, request):
    path = request.getfixturevalue(name)
    with lirs.Loader(path, 1024, seed=1) as ld:  # window="auto", the default
        idx = ld.index
        size = idx.payload_bytes // idx.n
        most = int(WINDOW_AUTO_MIN * WINDOW_HELD_RATIO) // STEP_RECORD_COST  # 16 MiB x 7.5 / per-record cost
        assert _old_window(idx) == 256
        # a window of records whose arrays stay within the documented 7.5x of its 16 MiB (a group rounding)
        assert ld.window == -(-most * size // GB) < 256
        assert ld.window * GB // size <= most + GB // size
        plan = ld.plan(0)
        assert plan.window == ld.window
        assert _unit_batches(plan) == -(-(int(STEP_MIN_BYTES * WINDOW_HELD_RATIO) // STEP_RECORD_COST) // 1024) \
            < _old_step_batches(plan)
    group = plan_epoch(idx, 1024, "group", seed=1)
    assert group.batches_per_step == _unit_batches(plan) < _old_step_batches(group)
    instance = plan_epoch(idx, 1024, "instance", seed=1, align=1)  # reads that are copies: steps of batches
    assert instance.batches_per_step == _unit_batches(plan)


@pytest.mark.parametrize("granularity", ["window", "group"])
def test_an_epoch_of_tiny_records_serves_every_record_once(tiny, granularity):
    with lirs.Loader(tiny, 1024, granularity=granularity, seed=2, engine="buffered") as ld:
        data = np.load(tiny)
        seen, values = [], []
        for b in ld.epoch(0):
            seen.append(b.ids)
            values.append(np.asarray(b.X).reshape(-1))
        ids = np.concatenate(seen)
        window = ld.window
    assert np.array_equal(np.sort(ids), np.arange(len(data)))
    assert np.array_equal(np.concatenate(values), data[ids])
    if granularity == "window":
        assert window * GB * 3 < len(data)  # several windows, not one of the whole data


@pytest.mark.parametrize("which", ["npy", "kdd"])
def test_records_of_32_bytes_or_more_plan_as_by_bytes_alone(wide, which):
    path = wide[which]
    with lirs.Loader(path, 256, seed=4) as ld:
        idx = ld.index
        assert idx.payload_bytes >= 32 * idx.n
        assert ld.window == _old_window(idx)
        plan = ld.plan(0)
        assert _unit_batches(plan) == _old_step_batches(plan)
        by_count = plan_epoch(idx, 256, "window", seed=4, window=_old_window(idx))
        assert np.array_equal(plan.order(), by_count.order())
    for g, align in (("group", BLOCK), ("instance", 1)):
        p = plan_epoch(idx, 256, g, seed=4, align=align)
        assert p.batches_per_step == _old_step_batches(p)


def test_a_state_saved_under_the_old_auto_window_is_refused_naming_the_window_that_resumes(tiny):
    """A state keeps the window's group count: one saved where "auto" was 256 groups of these
    records does not resume under today's auto window (other windows, other batches), and the
    message names the window= that does; given it, the saved batches come again."""
    old = _old_window(lirs.open_index(tiny))
    with lirs.Loader(tiny, 1024, seed=7, window=old) as ld:
        it = ld.epoch(0)
        for _ in range(3):
            next(it)
        state = ld.state_dict()
        want = [b.ids for b, _ in zip(it, range(3))]
        it.close()
    with lirs.Loader(tiny, 1024, seed=7) as ld:
        with pytest.raises(UsageError, match=rf"window: saved {old}, now {ld.window}\); window={old} \(the "
                                             rf"saved group count\) plans the saved windows"):
            ld.load_state_dict(state)
    with lirs.Loader(tiny, 1024, seed=7, window=old) as ld:
        ld.load_state_dict(state)
        got = [b.ids for b, _ in zip(ld.epoch(0), range(3))]
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)
