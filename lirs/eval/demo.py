"""The story `lirs demo` tells: one linear SVM trained on a label-sorted file under lirs and under
the usual alternatives, each reading the file with its own I/O pattern, compared per epoch and
against the seconds spent, pre-processing included.

:func:`run_demo` does the work and returns a JSON-able dict; :mod:`lirs.eval.demo_report` turns it
into tables, a verdict and a plot. The training and the baselines are those of
:func:`lirs.eval.compare.compare_svm` (BMF and the shuffle buffer draw their orders from
:mod:`lirs.eval.reference`).
"""
from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from ..cachedir import cache_dir
from ..errors import DataError, LirsError, UsageError
from ..units import parse_size

# compare/train load scipy, numba kernels and the Loader: imported where used, so that building the
# `lirs` command line (which reads METHODS and DEFAULT_SIZE) stays light

METHODS = ("lirs-instance", "lirs-window", "bmf", "shuffle_buffer", "sequential")
# 30 MB (~85,000 records) keeps the demo near half a minute with warm kernels on 2 cores, and about
# a minute when numba compiles them first (a fresh install)
DEFAULT_SIZE = "30MB"
BMF_BLOCKS = 40
BMF_PASSES = 3
BUFFER_RECORDS = 10_000
WARMUP_RECORDS = 600  # enough for a few batches of every method: every kernel compiles before timing
# the paper's comparison at full size, measured once by benchmarks/bench_paper.py and shipped as
# package data: the demo's 30 MB cannot show it, and a pip install has no benchmarks/ folder
PAPER_SUMMARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "paper_summary.json")


def default_out() -> str:
    """Where the demo writes when not told: ``demo`` in lirs's per-user cache
    (:func:`lirs.cachedir.cache_dir`: ``$LIRS_CACHE_DIR``, ``$XDG_CACHE_HOME/lirs``,
    ``~/.cache/lirs``, or ``$TMPDIR/lirs-UID`` with no home); never the current directory."""
    return os.path.join(cache_dir(), "demo")


def explain(method: str, res: dict) -> str:
    """One line saying what ``method`` does, with the settings of this run."""
    lo = res["methods"].get(method, {}).get("loader") or {}
    win = (f"{lo['window']} random {lo['group_bytes'] // 1024} KiB groups"
           if lo else "a few random groups")
    s = res["settings"]
    return {
        "lirs-instance": "a fresh uniform permutation of all records every epoch, one small direct read per "
                         "record",
        "lirs-window": f"a fresh permutation every epoch, read {win} at a time (the Loader's default window), "
                       "their records dealt at random over the next batches",
        "bmf": f"block minimization (LIBLINEAR cdblock): the file rewritten once into {s['bmf_blocks']} random "
               f"blocks; each epoch reads the blocks in a fresh order and trains each whole block "
               f"({s['bmf_passes']} passes)",
        "shuffle_buffer": f"the file read in order through a buffer of {s['buffer_records']:,} records; each "
                          "step emits a random record of the buffer (tf.data's shuffle)",
        "sequential": "the file read front to back every epoch, no shuffling",
    }.get(method, method)


def paper_headline(path: str = PAPER_SUMMARY) -> dict | None:
    """The packaged summary of benchmarks/bench_paper.py (its ``headline``): per part (``svm``,
    ``dnn``) the file, the target and each lirs method's reduction of total time against the
    baseline in % per device; ``paper``: the paper's own figures. None when the file is missing
    (a source tree where the benchmark never ran)."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise LirsError(f"{path}: unreadable packaged results of benchmarks/bench_paper.py ({e}); "
                        "expected the JSON that script writes") from e


def sample(out: str, size: str, seed: int, say) -> tuple[str, dict]:
    """The label-sorted kdd-like sample of ``size`` in ``out`` (generated once, then reused).
    Returns (path, {"generated": bool, "generate_s": float, "records": int or None})."""
    nbytes = parse_size(size)
    path = os.path.join(out, f"kdd-sorted-{size}-s{seed}.svm")
    if os.path.exists(path):
        say(f"data: reusing {path}")
        return path, {"generated": False, "generate_s": 0.0, "records": None}
    from .gen import generate

    say(f"data: generating {size} of label-sorted kdd-like LIBSVM (all -1 labels, then all +1) -> {path}")
    r = generate("kdd", path, size=nbytes, order="sorted", seed=seed, progress=False)
    say(f"  {r['records']:,} records in {r['seconds']:.1f} s")
    return path, {"generated": True, "generate_s": float(r["seconds"]), "records": int(r["records"])}


def ensure_index(path: str, say):
    """The index of ``path`` (a data file, or a sidecar built elsewhere): reused when its sidecar is there and
    current, else built (one sequential scan). Returns (Index, seconds spent indexing now, reused)."""
    import lirs
    from ..firstuse import sidecar_beside
    from ..sidecar import is_sidecar_path

    if is_sidecar_path(path):  # built elsewhere (`lirs index DATA -o`: the data's directory is read-only)
        index = lirs.open_index(path)
        say(f"index: using {path} (0 s to index: built before)")
        return index, 0.0, True
    if os.path.exists(path + ".lirs"):
        try:
            index = lirs.open_index(path)
            say(f"index: reusing {path}.lirs (0 s to index: an earlier run built it)")
            return index, 0.0, True
        except (LirsError, OSError) as e:  # stale or unreadable: build it again
            say(f"index: rebuilding ({e})")
    t = time.perf_counter()
    with sidecar_beside(path, "as --data"):  # --out does not move the index: the advice builds it elsewhere
        index = lirs.build_index(path, progress=False)
    s = time.perf_counter() - t
    say(f"index: {index.n:,} records scanned once in {s:.2f} s -> {path}.lirs")
    return index, s, False


def warm_up(out: str, seed: int, engine: str) -> float:
    """Run every method for one epoch on a tiny sample, so that no method's timing includes
    numba compiling (or loading from its cache) the kernels it uses. Returns the seconds taken."""
    import lirs
    from .compare import compare_svm
    from .gen import generate

    t = time.perf_counter()
    path = os.path.join(out, f"warmup-{WARMUP_RECORDS}-s{seed}.svm")
    if not os.path.exists(path):
        generate("kdd", path, records=WARMUP_RECORDS, order="sorted", seed=seed, progress=False)
    index = lirs.build_index(path, progress=False)
    compare_svm(index, METHODS, epochs=1, batch_size=128, seed=seed, workdir=out, reference_epochs=2,
                engine=engine, bmf_blocks_n=4, buffer_records=200, window=None, group_bytes=None)
    return time.perf_counter() - t


def prime(index, methods, batch_size: int, seed: int, engine: str) -> float:
    """Plan each lirs method's epoch on the data itself and read its first batch: the kernels whose
    variant the data's size selects (a permutation table's dtype, a window's arrays) compile here,
    not inside a timed epoch (the tiny warm-up sample selects smaller ones). Returns the seconds."""
    import lirs

    t = time.perf_counter()
    for m in methods:
        if m.startswith("lirs-"):
            with lirs.Loader(index, batch_size, granularity=m.split("-", 1)[1], seed=seed, engine=engine) as ld:
                next(iter(ld.epoch(0)), None)
    return time.perf_counter() - t


def run_demo(*, data: str | None = None, out: str | None = None, size: str = DEFAULT_SIZE, epochs: int = 5,
             batch_size: int = 1024, C: float = 1.0, seed: int = 0, methods=METHODS, engine: str = "auto",
             reference_epochs: int = 20, say=print) -> dict:
    """Generate (or take ``data``), index, warm the kernels, train every method, and return the
    JSON-able result: :func:`compare_svm`'s dict plus ``settings``, ``data``, ``out``, ``index_s``,
    ``index_reused``, ``warmup_s``, ``f0`` (objective of w = 0), and per method ``elapsed_s``
    (seconds since the method began, pre-processing included, after each epoch), ``reached_s``,
    ``mean_bytes_read``, the steady state (:func:`steady_state`), the ``verdict`` (:func:`verdict`),
    the one-time costs set apart from it (``one_time``, :func:`one_time_costs`) and ``paper_headline`` (the packaged
    full-size comparison, :func:`paper_headline`)."""
    from .compare import compare_svm, line_of_record, load_all
    from .train import as_pm1, primal_objective, relative_difference

    methods = _check_args(data, size, epochs, batch_size, seed, methods, engine)
    out = os.path.abspath(out or default_out())
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out {out} is a file; name a directory for the sample, demo.json and demo.png")
    os.makedirs(out, exist_ok=True)
    t_all = time.perf_counter()
    if data:
        path = os.path.abspath(data)
        say(f"data: {path}")
        gen = {"generated": False, "generate_s": 0.0, "records": None}
    else:
        path, gen = sample(out, size, seed, say)
    warm = warm_up(out, seed, engine)
    index, index_s, reused = ensure_index(path, say)
    if index.format != "libsvm":
        raise UsageError(f"{path} is {index.format} data; the demo trains an SVM on LIBSVM text")
    warm += prime(index, methods, batch_size, seed, engine)
    say(f"kernels: ready in {warm:.1f} s (numba compiles them on first use and caches them; not counted below)")
    X, y = load_all(index, engine=engine)
    y = as_pm1(y, index.paths[0], line_of_record(index))
    f0 = primal_objective(np.zeros(X.shape[1]), X, y, C)
    say(f"training {len(methods)} methods x {epochs} epochs (linear SVM, batch {batch_size}, C={C:g})")
    res = compare_svm(index, methods, epochs=epochs, batch_size=batch_size, C=C, seed=seed, workdir=out,
                      reference_epochs=reference_epochs, reference_tol=1e-4, index_s=index_s, engine=engine,
                      data=(X, y), bmf_blocks_n=BMF_BLOCKS, bmf_passes=BMF_PASSES, buffer_records=BUFFER_RECORDS,
                      window=None, group_bytes=None, log_fn=lambda m: say("  " + m))
    res.update(data=path, out=out, generated=gen, index_s=index_s, index_reused=reused, warmup_s=warm,
               f0=float(f0), f0_rel_diff=float(relative_difference(f0, res["f_star"])), epochs=epochs,
               settings={"bmf_blocks": BMF_BLOCKS, "bmf_passes": BMF_PASSES, "buffer_records": BUFFER_RECORDS,
                         "reference_epochs": reference_epochs, "engine": engine, "min_margin": MIN_MARGIN})
    for r in res["methods"].values():
        _timeline(r, res.get("target_objective"))
    res["verdict"] = verdict(res)
    res["one_time"] = one_time_costs(res)
    res["paper_headline"] = paper_headline()
    res["total_s"] = time.perf_counter() - t_all
    return res


def _check_args(data, size, epochs, batch_size, seed, methods, engine) -> list:
    """The methods to run (list of str), after checking every argument a run would otherwise
    refuse only after the sample is made or the kernels are warm."""
    from ..engines import check_engine
    from ..index import open_index
    from ..inputs import detect_format
    from ..sidecar import is_sidecar_path

    if epochs < 1 or batch_size < 1:
        raise UsageError("--epochs and --batch-size must be >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {seed!r}")
    methods = list(methods)
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise UsageError(f"unknown method(s) {', '.join(map(repr, bad))}; choose from {', '.join(METHODS)}" if bad
                         else f"no method given; choose from {', '.join(METHODS)}")
    check_engine(engine)  # UsageError naming the engines (and $LIRS_ENGINE where it asked)
    if data is None:
        if parse_size(size) <= 0:
            raise UsageError(f"--size must be a positive size, like 30MB; got {size!r}")
        return methods
    if os.path.isdir(data):
        raise UsageError(f"--data {data} is a directory; the demo trains on one LIBSVM file")
    if not os.path.isfile(data):
        raise UsageError(f"--data {data}: no such file")
    if is_sidecar_path(data):  # an index built elsewhere: the data file it names is trained on
        index = open_index(data)
        if index.nfiles != 1:
            raise UsageError(f"--data {data} indexes {index.nfiles} files; the demo trains on one LIBSVM file")
        fmt = index.format
    else:
        try:
            fmt = detect_format(data)
        except DataError as e:
            if "--format" not in str(e) and "--record-size" not in str(e):
                raise
            # its advice is `lirs index`'s options (--format fixed --record-size N), which the demo has not
            why = str(e).removeprefix(f"{data}: ").split("; ")[0]
            raise UsageError(f"--data {data} is not LIBSVM text ({why}); the demo trains an SVM on LIBSVM "
                             "text") from e
    if fmt != "libsvm":
        raise UsageError(f"--data {data} is {fmt} data; the demo trains an SVM on LIBSVM text")
    return methods


def _timeline(r: dict, target) -> None:
    """Seconds since the method began after each epoch (pre-processing first), when it first
    reached ``target`` (None: never), its mean bytes read and seconds per epoch, and its steady
    state (:func:`steady_state`)."""
    pre = r.get("pre_s") or 0.0
    r["elapsed_s"] = (pre + np.cumsum([p["epoch_s"] for p in r["per_epoch"]])).tolist()
    hit = r.get("epochs_to_target")
    r["reached_s"] = None if target is None or hit is None else r["elapsed_s"][hit - 1]
    r["mean_bytes_read"] = float(np.mean([p["bytes_read"] for p in r["per_epoch"]]))
    # compare_svm sets it only when some baseline sets a target
    r.setdefault("mean_epoch_s", float(np.mean([p["epoch_s"] for p in r["per_epoch"]])))
    r.update(steady_state([p["epoch_s"] for p in r["per_epoch"]]))


def steady_state(epoch_s) -> dict:
    """The steady state of a method from its epoch times (seconds, one float per epoch).

    The first epoch carries what happens once per process (numba loading or compiling kernels,
    a pool's threads starting, fresh memory touched for the first time): it differs between a
    first run on an empty numba cache and a second run, so it is set apart. The later epochs give
    the steady epoch time (their median) and the run-to-run spread measured in the same run (their
    min and max). With a single epoch there is no steady state to separate: that epoch stands for
    it, with no spread. Returns ``{"steady_epoch_s", "steady_lo_s", "steady_hi_s",
    "first_epoch_extra_s"}`` (the last: the first epoch's seconds beyond the steady median, >= 0)."""
    t = [float(x) for x in epoch_s]
    if not t:
        raise ValueError("no epochs")
    rest = t[1:] or t
    med = float(np.median(rest))
    return {"steady_epoch_s": med, "steady_lo_s": min(rest), "steady_hi_s": max(rest),
            "first_epoch_extra_s": max(0.0, t[0] - med) if len(t) > 1 else 0.0}


def _to_target(r: dict):
    """(median, lo, hi) seconds of steady-state training to the target, pre-processing apart;
    None when the method never reaches it."""
    hit = r.get("epochs_to_target")
    if hit is None:
        return None
    return hit * r["steady_epoch_s"], hit * r["steady_lo_s"], hit * r["steady_hi_s"]


# (key, what, unit, value of a method's record, (lo, hi) of that value across the run's steady
# epochs or None for a value that does not vary from run to run; a value of None = not reached,
# ranks last). One-time costs are not axes: they are named apart (:func:`one_time_costs`).
AXES = (
    ("objective", "objective after the last epoch, (f-f*)/f*", "", lambda r: r["per_epoch"][-1]["rel_diff"], None),
    ("epochs_to_target", "epochs to reach the target objective", " epochs", lambda r: r.get("epochs_to_target"),
     None),
    ("seconds_to_target", "seconds of training to reach the target, steady state", " s",
     lambda r: (_to_target(r) or (None,))[0], lambda r: (_to_target(r) or (None, None, None))[1:]),
    ("epoch_s", "seconds per epoch, steady state", " s", lambda r: r["steady_epoch_s"],
     lambda r: (r["steady_lo_s"], r["steady_hi_s"])),
    ("memory", "memory held while training", " B", lambda r: r.get("memory_bytes"), None),
    ("bytes_read", "bytes read per epoch", " B", lambda r: r["mean_bytes_read"], None),
)


def _best(ms: dict, names, fn):
    """(name, value) of the smallest value among ``names`` (None ranks last); (None, None) if empty."""
    cand = [(m, fn(ms[m])) for m in names]
    if not cand:
        return None, None
    return min(cand, key=lambda mv: math.inf if mv[1] is None else mv[1])


# a timed side wins only by more than this share beyond the other's range: the epochs of one run
# vary less than two runs do (two fresh-venv demo runs on a shared 2-core machine put the same
# method's steady epoch 10-20% apart, and once called a 0.10 s vs 0.12 s epoch a win, then a tie)
MIN_MARGIN = 0.25


def outcome(lv, ov, lrange=None, orange=None) -> str:
    """"wins", "ties" or "loses" for lirs's value ``lv`` against ``ov`` (smaller is better; None =
    never, ranks last). With ranges ``(lo, hi)`` measured in the same run, a side wins only when
    its whole range, widened by :data:`MIN_MARGIN`, lies below the other's: a margin within the
    run-to-run spread is a tie."""
    inf = math.inf
    lk, ok = (inf if lv is None else lv), (inf if ov is None else ov)
    if lrange is not None and orange is not None and lv is not None and ov is not None:
        (llo, lhi), (olo, ohi) = lrange, orange
        if lhi * (1 + MIN_MARGIN) < olo:
            return "wins"
        return "loses" if llo > ohi * (1 + MIN_MARGIN) else "ties"
    return "ties" if lk == ok else ("wins" if lk < ok else "loses")


def verdict(res: dict) -> list:
    """Per axis of :data:`AXES`, lirs's best method against the best other method (smaller is
    better on every axis), from steady-state epochs: a list of dicts ``{"axis", "what", "unit",
    "lirs", "lirs_value", "lirs_range", "other", "other_value", "other_range", "outcome"
    ("wins"|"ties"|"loses", :func:`outcome`), "other_reaches_target"}`` (ranges: ``[lo, hi]`` across
    the steady epochs, or None for values that do not vary). Axes that need a target are left out
    when no baseline set one, and every axis when either side is absent. Each method record must
    hold :func:`steady_state`'s keys."""
    ms = res["methods"]
    lirs_m = [m for m in ms if m.startswith("lirs-")]
    other = [m for m in ms if not m.startswith("lirs-")]
    out = []
    for key, what, unit, fn, spread in AXES:
        if key in ("epochs_to_target", "seconds_to_target") and res.get("target_method") is None:
            continue
        lm, lv = _best(ms, lirs_m, fn)
        om, ov = _best(ms, other, fn)
        if lm is None or om is None:
            continue
        lr = None if spread is None or lv is None else list(spread(ms[lm]))
        orr = None if spread is None or ov is None else list(spread(ms[om]))
        out.append({"axis": key, "what": what, "unit": unit, "lirs": lm, "lirs_value": lv, "lirs_range": lr,
                    "other": om, "other_value": ov, "other_range": orr, "outcome": outcome(lv, ov, lr, orr),
                    "other_reaches_target": ms[om].get("epochs_to_target") is not None})
    return out


def one_time_costs(res: dict) -> list:
    """What a run pays once, set apart from the verdict: ``[{"what", "methods", "seconds", "note"}]``,
    the kernels' warm-up first (numba compiling them, or loading them from its cache), then the
    pre-processing (``pre_what``; lirs's index is one cost shared by its methods) and each method's
    first epoch beyond its steady state."""
    out = []
    if res.get("warmup_s") is not None:
        out.append({"what": "kernels ready (numba compiles them on first use, then loads them from its cache)",
                    "methods": [], "seconds": float(res["warmup_s"]), "note": "before any method is timed"})
    pre: dict = {}
    for m, r in res["methods"].items():
        if r.get("pre_what") or r.get("pre_s"):
            what = r.get("pre_what") or "pre-processing"
            note = "reused from an earlier run" if m.startswith("lirs-") and res.get("index_reused") else ""
            pre.setdefault((what, float(r.get("pre_s") or 0.0), note), []).append(m)
    out += [{"what": w, "methods": ms, "seconds": s, "note": n} for (w, s, n), ms in pre.items()]
    for m, r in res["methods"].items():
        if r.get("first_epoch_extra_s"):
            out.append({"what": "first epoch beyond the steady state", "methods": [m],
                        "seconds": float(r["first_epoch_extra_s"]), "note": ""})
    return out
