"""Comparing record orders on a real file: the same SVM (:class:`lirs.eval.train.LinearSVM`)
trained through a lirs :class:`~lirs.loader.Loader` and through BMF, a shuffle buffer and the file
order, each with its own real I/O pattern. Used by ``lirs demo`` and benchmarks/train_svm.py.

The baselines draw their orders from :mod:`lirs.eval.reference` and read with
:mod:`lirs.eval.spans`, as the peers of ``lirs bench`` do.
"""
from __future__ import annotations

import math
import os
import time

import numpy as np
import scipy.sparse as sp

from .. import seeds
from ..constants import DEFAULT_GROUP_BYTES, DEFAULT_WINDOW
from ..decode import resolve_libsvm_params
from ..errors import UsageError
from ..litter import clean_dead_litter, temp_name
from ..loader import Loader
from ..cores import usable_cores
from ..policies import steps_in_flight, windows_in_flight
from .reference import bmf_block_order, bmf_blocks, buffer_batches, shuffle_buffer_order
from .spans import Ahead, Records, SpanReader, records_per_run, run_ranges, write_blocks
from .train import LinearSVM, as_pm1, reference_objective, relative_difference
from ..policies import POLICIES
from ..svmlight import line_number
from ..windows import group_span

LIRS_METHODS = ("lirs-instance", "lirs-page", "lirs-group", "lirs-window")
BASELINES = ("bmf", "shuffle_buffer", "sequential")
METHODS = LIRS_METHODS + BASELINES


def load_all(index, *, engine: str = "auto", dtype=np.float32, run_bytes: int = 8 << 20):
    """The whole (single-file LIBSVM) data set in memory, read in file order: (X csr (n, d) of
    ``dtype``, y float64 (n,))."""
    _check_single_libsvm(index)
    rd = SpanReader(Records(index, dtype=dtype), engine)
    try:
        parts = [rd.read(a, b) for a, b in run_ranges(index.n, records_per_run(index, run_bytes))]
    finally:
        rd.close()
    return sp.vstack([p[0] for p in parts], format="csr"), np.concatenate([p[1] for p in parts])


def line_of_record(index):
    """``where(j)`` for :func:`~lirs.eval.train.as_pm1`'s errors on :func:`load_all`'s labels: "line M" of record
    ``j`` in the file (blank and comment lines skip records, so M is counted, not j + 1)."""
    def where(j):
        line = line_number(index.paths[0], int(index.spans([j])[1][0]))
        return f"record {j}" if line is None else f"line {line}"
    return where


def _check_single_libsvm(index):
    if index.format != "libsvm":
        raise UsageError(f"SVM training needs LIBSVM data; {index.paths[0]} is {index.format}")
    if index.nfiles != 1:
        raise UsageError("the baselines (BMF, shuffle buffer, sequential) read one file; this index has "
                         f"{index.nfiles} files")


def compare_svm(index, methods=("lirs-group", "lirs-window", "bmf", "shuffle_buffer", "sequential"), *,
                epochs: int = 5, batch_size: int = 1024, C: float = 1.0, loss: str = "squared_hinge",
                seed: int = 0, bmf_blocks_n: int = 40, bmf_passes: int = 3, buffer_records: int = 10_000,
                group_bytes: int | None = DEFAULT_GROUP_BYTES, window=DEFAULT_WINDOW, prefetch: int = 4,
                engine: str = "auto",
                workdir: str | None = None, f_star: float | None = None, reference_epochs: int = 200,
                reference_tol: float = 1e-3, data=None, index_s: float | None = None, progress=None,
                log_fn=None, epoch_budget_s: float | None = None, stop_objective: float | None = None,
                test=None) -> dict:
    """Train the same SVM under several record orders, each read from the file with its own I/O
    pattern, and record the objective after every epoch.

    Methods: ``lirs-instance|page|group|window`` (a :class:`lirs.Loader` of that granularity),
    ``bmf`` (pre-processing rewrites the file with ``bmf_blocks_n`` random blocks laid out one
    after the other; every epoch reads the blocks in a fresh order, one direct read each, and
    trains each whole with ``bmf_passes`` inner passes in random order, as LIBLINEAR cdblock),
    ``shuffle_buffer`` (file order through a buffer of ``buffer_records``), ``sequential`` (file
    order). The baselines read runs of ``batch_size`` records (BMF: whole blocks) with one aligned
    direct read each, ``prefetch`` runs ahead on a thread, so loading overlaps compute for all.

    ``data``: (X, y) of the whole set in memory (read here when None) for the objective; ``f_star``:
    the optimum (from :func:`reference_objective` with ``reference_epochs``/``reference_tol`` when
    None). ``index_s``: time the index took (lirs's pre-processing). ``epoch_budget_s``: stop an
    epoch after that many seconds and extrapolate its time from the records it trained on (entries
    then say ``"extrapolated": true``; for slow device envelopes, where only the time is wanted).
    ``stop_objective``: a lirs method stops after the first epoch whose objective is at or below it
    (the target is known from an earlier BMF run: the epochs past it cost time and tell nothing).
    ``test``: (X csr, y) held out; each method's ``test_accuracy`` is taken after its last epoch.
    Returns a JSON-able dict.
    """
    _check_single_libsvm(index)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"unknown methods {unknown}; expected some of {', '.join(METHODS)}")
    say = log_fn or (lambda msg: None)
    n = index.n
    nf, zb = resolve_libsvm_params(index)
    t = time.perf_counter()
    X, y = data if data is not None else load_all(index, engine=engine)
    load_all_s = time.perf_counter() - t
    y = as_pm1(y, index.paths[0], line_of_record(index))
    ref_s = 0.0
    if f_star is None:
        t = time.perf_counter()
        f_star = reference_objective(X, y, C, loss, epochs=reference_epochs, tol=reference_tol, seed=seed)
        ref_s = time.perf_counter() - t
        say(f"reference objective f* = {f_star:.6g} ({ref_s:.1f}s)")
    out = {"n": int(n), "n_features": int(nf), "payload_bytes": int(index.payload_bytes), "C": C, "loss": loss,
           "batch_size": batch_size, "seed": seed, "f_star": f_star, "reference_s": ref_s,
           "load_all_s": load_all_s, "methods": {}}
    run = _Run(index=index, X=X, y=y, f_star=f_star, epochs=epochs, batch_size=batch_size, seed=seed,
               engine=engine, prefetch=prefetch, budget=epoch_budget_s, mean_rec=index.payload_bytes / max(n, 1),
               stop=stop_objective)
    for m in methods:
        svm = LinearSVM(nf, n, C, loss)
        rec = {"per_epoch": [], "pre_s": 0.0}
        say(f"{m}: training {epochs} epochs")
        if m.startswith("lirs-"):
            _run_lirs(run, rec, svm, m.split("-", 1)[1], index_s, group_bytes, window, nf, zb)
        elif m == "bmf":
            _run_bmf(run, rec, svm, bmf_blocks_n, bmf_passes, workdir)
        else:
            _run_sequential(run, rec, svm, buffer_records if m == "shuffle_buffer" else None)
        rec["final_objective"] = rec["per_epoch"][-1]["objective"]
        rec["train_accuracy"] = svm.score(X, y)
        if test is not None:
            rec["test_accuracy"] = svm.score(test[0], as_pm1(test[1], "the test set"))
        out["methods"][m] = rec
        say(f"{m}: objective {rec['final_objective']:.6g}, rel. diff {rec['per_epoch'][-1]['rel_diff']:.3g}")
    _summarize(out)
    return out


class _Run:
    """What every method of one :func:`compare_svm` call shares: the data in memory (for the
    objective), the optimum and the settings."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def objective(self, rec: dict, svm: LinearSVM) -> None:
        """The objective of the whole data set after the epoch just recorded in ``rec``."""
        f = svm.objective(self.X, self.y)
        rec["per_epoch"][-1]["objective"] = f
        rec["per_epoch"][-1]["rel_diff"] = float(relative_difference(f, self.f_star))


def _run_lirs(run: _Run, rec, svm, gran, index_s, group_bytes, window, nf, zb):
    """A lirs Loader of granularity ``gran``: its epochs, and the memory it holds."""
    index, n = run.index, run.index.n
    rec["pre_s"] = index_s
    rec["pre_what"] = "lirs index (scan once)"
    # None: the Loader's own default (what a user who does not set it gets)
    shape = {k: v for k, v in (("group_bytes", group_bytes), ("window", window)) if v is not None}
    with Loader(index, run.batch_size, granularity=gran, seed=run.seed, engine=run.engine, prefetch=run.prefetch,
                n_features=nf, zero_based=zb, **shape) as ld:
        for e in range(run.epochs):
            ld.stats.reset()
            t = time.perf_counter()
            comp = 0.0
            done = 0
            for b in ld.epoch(e):
                c = time.perf_counter()
                svm.partial_fit(b.ids, b.X, b.y)
                comp += time.perf_counter() - c
                done += len(b.ids)
                if run.budget is not None and time.perf_counter() - t > run.budget:
                    break
            wall = time.perf_counter() - t
            st = ld.stats.as_dict()
            rec["per_epoch"].append({"epoch": e, "epoch_s": wall, "compute_s": comp, "wait_s": st["wait_s"],
                                     "bytes_read": st["bytes_read"], "amplification": st["amplification"]})
            _extrapolate(rec["per_epoch"][-1], done, n)
            run.objective(rec, svm)
            if run.stop is not None and rec["per_epoch"][-1]["objective"] <= run.stop * (1 + 1e-12):
                break
        last_plan = ld.plan(run.epochs - 1)
        plan_bytes = last_plan.nbytes
        in_flight = steps_in_flight(last_plan, run.prefetch, windows=windows_in_flight(ld.engine.direct, usable_cores()))
        # a window holds at most the data's groups (a small file's default window is larger than it)
        span = group_span(int(ld.group_bytes), index.payload_bytes, n)  # a group's bytes, as the Loader counts them
        window = min(int(ld.window), -(-index.payload_bytes // span))
        rec["loader"] = {"granularity": gran, "group_bytes": int(ld.group_bytes), "window": window}
    idx_bytes = index.index_bytes()  # compact offsets + label codes
    # a window is read once and feeds several batches: it is the unit held in memory; no step holds
    # more than the data, and no more steps are in flight than an epoch has
    step = min(run.batch_size * run.mean_rec, index.payload_bytes)
    if POLICIES[gran].uses_window:
        step = max(step, min(window * span, index.payload_bytes))
    in_flight = min(in_flight, max(1, math.ceil(index.payload_bytes / max(step, 1))))
    rec["memory_bytes"] = int(idx_bytes + plan_bytes + in_flight * step *
                              (rec["per_epoch"][-1]["amplification"] or 1.0))
    rec["memory_what"] = (f"index ({idx_bytes / n:.1f} B/record) + plan ({plan_bytes / n:.2f} B/record) "
                          f"+ {in_flight} read steps in flight")


def _run_bmf(run: _Run, rec, svm, blocks, passes, workdir):
    """BMF: the file rewritten once into random blocks; every epoch the blocks in a fresh order,
    one direct read each, each block trained whole with ``passes`` inner passes."""
    if workdir is None:
        raise UsageError("BMF needs a workdir for its block file")
    index, seed = run.index, run.seed
    t = time.perf_counter()
    layout = bmf_blocks(index.n, blocks, seed=seed)
    os.makedirs(workdir, exist_ok=True)
    clean_dead_litter(workdir)  # block files of killed runs (each one a copy of the data)
    # a name of this process: runs sharing a workdir (`lirs demo`'s default --out) each have their
    # own block file, and one a killed run leaves carries its PID for the line above to remove
    bpath = temp_name(os.path.join(workdir, os.path.basename(index.paths[0]) + ".bmf-blocks"))
    _, recs = write_blocks(index, layout, bpath, run.engine)
    rec["pre_s"] = time.perf_counter() - t
    rec["pre_what"] = f"rewrite the file as {blocks} random blocks (read + write + fsync)"
    rec["blocks"] = blocks
    rec["inner_passes"] = passes
    first = np.concatenate([[0], np.cumsum([len(b) for b in layout])])
    largest = 0
    for a, b in zip(first[:-1].tolist(), first[1:].tolist()):
        if b > a:
            lo, hi = recs.span(a, b)
            largest = max(largest, hi - lo)
    rec["memory_bytes"] = int(largest)
    rec["memory_what"] = "the largest block (raw bytes)"
    rd = SpanReader(recs, run.engine)
    try:
        for e in range(run.epochs):
            rng = seeds.rng(seed, e, seeds.TRAIN_INNER)
            order = bmf_block_order(blocks, seed=seed, epoch=e)

            def task(bi):
                return (layout[bi], *rd.read(int(first[bi]), int(first[bi + 1]), layout[bi]))

            # one block ahead: BMF holds one block while the next one loads
            src = Ahead((lambda bi=bi: task(bi) for bi in order if first[bi + 1] > first[bi]), 2, 1)
            _epoch_loop(run, rec, svm, src, src, rd, passes, rng)
    finally:
        rd.close()
        try:
            os.unlink(bpath)
        except OSError:
            pass


def _run_sequential(run: _Run, rec, svm, buffer_records):
    """The file read in order in runs of ``batch_size`` records, delivered as read
    (``buffer_records`` None) or through a shuffle buffer of that many records."""
    n, B = run.index.n, run.batch_size
    rec["pre_what"] = "none"
    workers = max(2, run.prefetch)  # as many decoding threads as the Loader's pool
    rd = SpanReader(Records(run.index), run.engine)
    if buffer_records is None:  # neither the runs nor the buffer hold more records than the data has
        rec["memory_bytes"] = int(min((run.prefetch + 1) * B, n) * run.mean_rec)
        rec["memory_what"] = "(prefetch+1) read runs"
    else:
        rec["buffer_records"] = buffer_records
        rec["memory_bytes"] = int(min(buffer_records + (run.prefetch + 1) * B, n) * run.mean_rec)
        rec["memory_what"] = "shuffle buffer + (prefetch+1) read runs (raw bytes)"
    try:
        for e in range(run.epochs):
            if buffer_records is None:
                src = Ahead((lambda a=a, b=b: _with_ids(a, b, rd.read(a, b)) for a, b in run_ranges(n, B)),
                            workers, run.prefetch)
                _epoch_loop(run, rec, svm, src, src, rd, 1, None)
            else:
                order = shuffle_buffer_order(n, buffer_records, seed=run.seed, epoch=e)
                src = Ahead((lambda a=a, b=b: rd.read(a, b) for a, b in run_ranges(n, B)), workers, run.prefetch)
                _epoch_loop(run, rec, svm, buffer_batches(iter(src), order, B, B), src, rd, 1, None)
    finally:
        rd.close()


def _with_ids(a: int, b: int, Xy) -> tuple:
    """``(ids int64 (b-a,), X, y)`` of the run of records a..b-1 read as ``Xy``."""
    return (np.arange(a, b, dtype=np.int64), *Xy)


def _extrapolate(entry: dict, done: int, n: int) -> None:
    """An epoch cut short by its time budget: scale its time to the whole epoch (and say so)."""
    entry["records"] = int(done)
    entry["extrapolated"] = bool(0 < done < n)
    if entry["extrapolated"]:
        entry["measured_s"] = entry["epoch_s"]
        entry["epoch_s"] = entry["epoch_s"] * n / done


def _epoch_loop(run: _Run, rec, svm, batches, waiter, rd, passes, rng):
    """One epoch of a baseline: train on every ``(ids, X, y)`` of ``batches`` (``passes`` inner
    passes in orders drawn from ``rng``), then record its times, bytes and objective."""
    b0 = rd.bytes_read
    t = time.perf_counter()
    comp = 0.0
    done = 0
    for ids, Xb, yb in batches:
        c = time.perf_counter()
        svm.partial_fit(ids, Xb, yb, passes=passes, rng=rng)
        comp += time.perf_counter() - c
        done += len(ids)
        if run.budget is not None and time.perf_counter() - t > run.budget:
            break
    if hasattr(batches, "close"):
        batches.close()  # a generator left early: stop its reads now
    wall = time.perf_counter() - t
    rd_bytes = rd.bytes_read - b0
    rec["per_epoch"].append({"epoch": len(rec["per_epoch"]), "epoch_s": wall, "compute_s": comp,
                             "wait_s": waiter.wait_s, "bytes_read": rd_bytes, "amplification": None})
    _extrapolate(rec["per_epoch"][-1], done, len(svm.alpha))
    run.objective(rec, svm)


def _summarize(out: dict) -> None:
    """Table 3 analog: epochs each method needs to reach BMF's best objective (or, without BMF,
    the best of the shuffle buffer), and the total time T_pre + epochs x mean epoch time."""
    ms = out["methods"]
    base = "bmf" if "bmf" in ms else ("shuffle_buffer" if "shuffle_buffer" in ms else None)
    out["target_method"] = base
    if base is None:
        return
    target = min(r["objective"] for r in ms[base]["per_epoch"])
    out["target_objective"] = target
    out["target_rel_diff"] = float(relative_difference(target, out["f_star"]))
    for m, r in ms.items():
        objs = [p["objective"] for p in r["per_epoch"]]
        hit = next((i + 1 for i, f in enumerate(objs) if f <= target * (1 + 1e-12)), None)
        r["epochs_to_target"] = hit
        mean_epoch = float(np.mean([p["epoch_s"] for p in r["per_epoch"]]))
        r["mean_epoch_s"] = mean_epoch
        r["total_to_target_s"] = None if hit is None else float((r["pre_s"] or 0.0) + hit * mean_epoch)
