"""lirs.sizecounts: an epoch's read sizes counted, not listed (lirs order's median)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import kdd_indexed
from lirs import sizecounts
from lirs.sizecounts import SizeCounts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sum_mean_and_median_are_numpys_over_every_size(seed, monkeypatch):
    monkeypatch.setattr(sizecounts, "PENDING_MAX", 50)  # many merges over a small run
    rng = np.random.default_rng(seed)
    parts = [rng.integers(1, 40, rng.integers(0, 30)) * 4096 for _ in range(40)] + [np.array([7, 7, 9])]
    c = SizeCounts()
    for p in parts:
        c.add(p)
    every = np.concatenate(parts)
    assert c.total == int(every.sum()) and c.n == len(every)
    assert c.mean() == pytest.approx(float(every.mean()))
    assert c.median() == float(np.median(every))
    assert len(c.values) <= 42  # distinct sizes kept, not every read
    c.add(np.array([1]))  # an even count after an odd one: the median of the two middle sizes
    assert c.median() == float(np.median(np.r_[every, 1]))


def test_nothing_added_has_no_mean_or_median():
    c = SizeCounts()
    c.add(np.empty(0, np.int64))
    assert (c.total, c.n, c.mean(), c.median()) == (0, 0, None, None)


def test_a_plans_stats_median_is_the_median_of_its_reads(tmp_path_factory):
    """EpochPlan.stats kept every read's size to take the median: ~24 B a read, GBs for a
    billion-record instance epoch. Its figures are those of the reads it walks."""
    import lirs
    from lirs.plan import plan_epoch
    from lirs.steps import file_ends

    idx = lirs.open_index(kdd_indexed(tmp_path_factory, 3000))
    plan = plan_epoch(idx, 7, "instance", seed=3)
    reads = np.concatenate([s.extents_within(file_ends(idx)) for b in plan.batches() for s in b.new_steps])
    st = plan.stats()
    assert st["bytes_read"] == int(reads.sum())
    assert st["median_read_bytes"] == float(np.median(reads))
    assert st["mean_read_bytes"] == pytest.approx(float(reads.mean()))
