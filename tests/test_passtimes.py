"""Where a DataLoader pass with workers spends its time (lirs.passtimes, LirsDataLoader.pass_times)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import kdd_indexed  # noqa: E402
from lirs.passtimes import FIELDS, PassTimes, begun, timed_main, timed_worker  # noqa: E402


@pytest.fixture(scope="module")
def kdd_file(tmp_path_factory):
    return kdd_indexed(tmp_path_factory, 2500)


def _check_row(row, end_by):
    assert 0.0 <= row["start"] <= row["first"] <= row["end"] <= end_by
    for f in ("wait_s", "pack_s", "torch_s", "cpu_s"):
        assert row[f] >= 0.0, f
    # the three parts are disjoint stretches of the pass
    assert row["wait_s"] + row["pack_s"] + row["torch_s"] <= row["end"] - row["start"] + 1e-6


@pytest.mark.parametrize("granularity,spawn", [("group", False), ("window", False), ("group", True)])
def test_a_pass_with_workers_reports_each_process(kdd_file, granularity, spawn):
    from lirs.torch import make_dataloader

    kw = dict(granularity=granularity, group_bytes=8192, seed=3)
    if granularity == "window":
        kw["window"] = 4
    dl = make_dataloader(kdd_file, 100, num_workers=2, multiprocessing_context="spawn" if spawn else None, **kw)
    assert dl.pass_times() == {}, "before any pass"
    for epoch in (0, 1):  # the second pass starts from cleared rows: its counts are its own
        dl.dataset.set_epoch(epoch)
        got = sum(1 for _ in dl)
    t = dl.pass_times()
    assert set(t) == {"main", "workers"} and len(t["workers"]) == 2
    main, workers = t["main"], t["workers"]
    assert main["start"] == 0.0 and set(main) == set(FIELDS)
    _check_row(main, main["end"])
    assert main["items"] == sum(w["items"] for w in workers) > 0
    # what the workers made (pieces of batches split by windows included) reached the main process
    assert main["batches"] == sum(w["batches"] for w in workers) >= got == dl.dataset.num_batches(1)
    if granularity == "group":
        assert main["batches"] == got
    for w in workers:
        _check_row(w, main["end"])
        assert w["batches"] > 0 and w["cpu_s"] > 0.0


def test_no_workers_keep_no_times(kdd_file):
    from lirs.torch import make_dataloader

    dl = make_dataloader(kdd_file, 100, num_workers=0, seed=3)
    assert sum(1 for _ in dl) == dl.dataset.num_batches()
    assert dl.pass_times() == {}


def test_timed_worker_times_each_step_and_sends_the_last_item():
    times = begun(PassTimes(2))
    made = []

    def make(b):
        made.append(b)
        return [("full", b)] if b % 2 else []

    items = list(timed_worker(range(5), make, lambda: ("last",), times, 1))
    assert items == [("full", 1), ("full", 3), ("last",)] and made == [0, 1, 2, 3, 4]
    r = times.report()
    w = r["workers"][1]
    assert (w["batches"], w["items"]) == (5, 3)
    assert r["workers"][0]["start"] is None, "a worker that did not run has no start"
    _check_row(w, w["end"] + 1)
    # untimed: the same items
    assert list(timed_worker(range(5), make, lambda: None, None, 0)) == [("full", 1), ("full", 3)]
    # a worker without a row (a dataset reused by a DataLoader of more workers): untimed, not an error
    assert list(timed_worker(range(5), make, lambda: None, times, 2)) == [("full", 1), ("full", 3)]
    assert times.report()["workers"][1] == w


def test_timed_main_counts_batches_in_bundles():
    from lirs.workers import Unbundled

    times = begun(PassTimes(1))
    # a bundle counts its batches; anything else (a user transform's output: a dict, a sparse
    # tensor, whose ``indices`` is a method) one
    sparse = torch.eye(3).to_sparse()
    items = [Unbundled([0, 1, 2], [None] * 3), Unbundled([3], [None]), {"ids": []}, sparse]
    got = list(timed_main(iter(items), times))
    assert got[:3] == items[:3] and got[3] is sparse
    m = times.report()["main"]
    assert (m["items"], m["batches"]) == (4, 6)
    assert m["end"] is not None and m["first"] is not None


def test_pass_times_pickled_outside_a_process_start_is_a_copy():
    t = begun(PassTimes(2))
    c = pickle.loads(pickle.dumps(t))
    assert c.report() == {}, "a private, cleared block"
    c.a[:] = 1.0
    assert not np.any(t.a[1:]), "nothing written to the original"


def _x_only(out):
    return out["X"]


def test_a_transforms_outputs_pass_through_the_main_process_timed(kdd_file):
    # a transform's output is one batch an item, whatever it is (here a sparse tensor, whose
    # ``indices`` is a method): counted as one, the workers (one batch an item) untimed
    from lirs.torch import make_dataloader

    dl = make_dataloader(kdd_file, 100, num_workers=2, transform=_x_only, granularity="group", seed=3)
    got = [x for x in dl]
    assert len(got) == dl.dataset.num_batches() and all(x.layout == torch.sparse_csr for x in got)
    t = dl.pass_times()
    assert (t["main"]["items"], t["main"]["batches"]) == (len(got), len(got))
    assert all(w["start"] is None for w in t["workers"])
