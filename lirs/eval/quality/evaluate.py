"""Running every strategy for some epochs and measuring its orders (:func:`evaluate`)."""
from __future__ import annotations

import math
import time

import numpy as np

from ... import seeds
from ...constants import DEFAULT_GROUP_BYTES
from ...errors import UsageError
from ...index import Index
from ..kernels import quality as K
from ..strategies import DEFAULT_RECORD_BYTES, STRATEGIES, run_strategy, synthetic_index
from .metrics import (DEFAULT_CLASSES, DEFAULT_EPOCHS, DEFAULT_SEGMENTS, FAIL_P, PASS_P, UniformityTest,
                      batch_label_entropy, checkpoints_for, displacement, distinct_seen, expected_batch_entropy,
                      expected_distinct_seen, groups_of, ideal_displacement, ideal_repeat_rate,
                      ideal_same_group_rate, label_codes, repeat_pair_rate, same_group_rate, segment_codes,
                      sorted_labels, streaming_entropy)
from .progress import Progress


def evaluate(source, strategies=None, *, epochs: int = DEFAULT_EPOCHS, batch_size: int = 1024, seed: int = 0,
             params: dict | None = None, segments: int = DEFAULT_SEGMENTS, group_bytes: int = DEFAULT_GROUP_BYTES,
             classes: int = DEFAULT_CLASSES, record_bytes: int | None = None, progress=None,
             label: str = "") -> dict:
    """Run every strategy for ``epochs`` epochs on ``source`` and measure (a)-(g) and its cost.

    source: an :class:`~lirs.index.Index` (its labels are used; none: label metrics are None) or
    a record count n (a label-sorted in-memory index of n records of ``record_bytes``, 360 B by
    default, with ``classes`` balanced classes). ``params``: strategy parameters, one dict for
    all (see :func:`lirs.eval.strategies.run_strategy`); ``group_bytes`` is also the group of metric
    (f) and of the lirs group/window strategies. Returns a JSON-ready dict: ``config``,
    ``ideal``, ``checkpoints`` and ``strategies`` (name -> metrics, ``cost``, ``params``,
    ``uniformity``, ``curve_segments``, ``curve_labels``, ``seconds``). ``progress``: see
    :func:`lirs.eval.quality.progress.progress_mode`, or a :class:`Progress` shared with a caller;
    ``label`` is added to every step's name (e.g. the memory budget).
    """
    names = list(STRATEGIES) if strategies is None else list(strategies)
    bad = [s for s in names if s not in STRATEGIES]
    if bad or not names:
        raise UsageError(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")
    epochs, batch_size, segments = int(epochs), int(batch_size), int(segments)
    for name, v in (("epochs", epochs), ("batch_size", batch_size), ("segments", segments)):
        if v < 1:
            raise UsageError(f"{name} must be >= 1, got {v}")
    params = dict(params or {})
    if isinstance(source, Index):
        index = source
        synthetic = False
    else:
        n = int(source)
        if n < 2:
            raise UsageError(f"need at least 2 records, got {n}")
        rb = int(record_bytes or DEFAULT_RECORD_BYTES)
        index = synthetic_index(n, rb, labels=sorted_labels(n, classes))
        synthetic = True
    n = index.n
    where = "" if synthetic else f" of {', '.join(index.paths[:2])}{' ...' if len(index.paths) > 2 else ''}"
    if n < 2:
        raise UsageError(f"need at least 2 records, got {n}{where}")
    if batch_size > n:
        raise UsageError(f"batch_size {batch_size} exceeds the {n} records{where}")
    params.setdefault("group_bytes", int(group_bytes))
    labels = index.labels
    if labels is not None:
        codes, ncodes = label_codes(labels)
        class_counts = np.bincount(codes, minlength=ncodes)
    else:
        codes, ncodes, class_counts = None, 0, None
    seg = segment_codes(n, min(segments, n))
    nseg = int(seg.max()) + 1
    seg_counts = np.bincount(seg, minlength=nseg)
    cps = checkpoints_for(n)
    one_pct = int(np.flatnonzero(cps == max(1, math.ceil(n / 100)))[0])
    groups = groups_of(index, params["group_bytes"])
    ngroups = int(groups[-1]) + 1
    w = params.get("window")
    if isinstance(w, (int, np.integer)) and not isinstance(w, bool) and w > ngroups:
        # a window of more groups than the data has holds them all (the same order): report the
        # groups it holds, not 256 of "auto"'s 16 MiB on 110 groups of data
        params["window"] = ngroups
    shard_records = run_strategy("streaming_naive", index, seed=seed, batch_size=batch_size,
                                 **params).params["shard_records"]

    ideal_perm = seeds.rng(seed, 0, seeds.QUALITY_IDEAL).permutation(n)
    ideal_seg_curve = expected_distinct_seen(seg_counts, n, cps) / nseg
    ideal = {
        "segments_seen_1pct": float(ideal_seg_curve[one_pct]),
        "all_labels_seen_at": None,
        "batch_entropy": expected_batch_entropy(class_counts, n, batch_size) if labels is not None else None,
        "displacement": ideal_displacement(n),
        "spearman": 0.0,
        "repeat_pairs": ideal_repeat_rate(n, batch_size),
        "streaming_entropy": streaming_entropy(ideal_perm, shard_records),
        # batches of one record have no neighbours: the share of same-group ones means nothing there
        "same_group": ideal_same_group_rate(groups) if batch_size > 1 else None,
        "curve_segments": ideal_seg_curve.tolist(),
        "curve_labels": (expected_distinct_seen(class_counts, n, cps) / ncodes).tolist() if labels is not None else None,
    }
    if labels is not None:
        # one uniform permutation's value (its expectation has no simple closed form)
        ideal["all_labels_seen_at"] = K.first_all_seen(ideal_perm, codes, ncodes) / n

    out = {"config": {"n": n, "epochs": epochs, "batch_size": batch_size, "seed": int(seed), "segments": nseg,
                      "label_values": ncodes, "group_bytes": params["group_bytes"], "groups": ngroups,
                      "shard_records": shard_records,
                      "payload_bytes": int(index.payload_bytes), "synthetic": synthetic,
                      "params": {k: v for k, v in params.items()}, "strategies": names,
                      "pass_p": PASS_P, "fail_p": FAIL_P},
           "checkpoints": cps.tolist(), "ideal": ideal, "strategies": {}}
    if synthetic:
        out["config"]["record_bytes"] = int(record_bytes or DEFAULT_RECORD_BYTES)
        out["config"]["classes"] = int(classes)
    shared = isinstance(progress, Progress)
    bar = progress if shared else Progress(len(names) * epochs, len(names), progress)
    label = f" at {label}" if label else ""
    try:
        for name in names:
            bar.start(name + label)
            r = _evaluate_one(name, index, epochs, batch_size, seed, params, codes, ncodes, seg, nseg, cps, one_pct,
                              groups, shard_records, ideal, bar)
            out["strategies"][name] = r
            bar.done(f"pairs again {_x(r['repeat_pairs_vs_ideal'])}, same group {_x(r['same_group_vs_ideal'])}")
    finally:
        if not shared:
            bar.close()
    return out


def _x(v) -> str:
    return "-" if v is None else f"{v:.3g}x"


def _evaluate_one(name, index, epochs, batch_size, seed, params, codes, ncodes, seg, nseg, cps, one_pct, groups,
                  shard_records, ideal, bar) -> dict:
    n = index.n
    t0 = time.perf_counter()
    test = UniformityTest(n, epochs, batch_size=batch_size)
    seg_curve = np.zeros(len(cps), np.float64)
    lab_curve = np.zeros(len(cps), np.float64) if codes is not None else None
    acc = {k: [] for k in ("all_labels_seen_at", "batch_entropy", "displacement", "spearman", "repeat_pairs",
                           "streaming_entropy", "same_group")}
    prev = None
    first = None
    order_s = 0.0
    for e in range(epochs):
        t = time.perf_counter()
        r = run_strategy(name, index, seed=seed, epoch=e, batch_size=batch_size, **params)
        order_s += time.perf_counter() - t
        if first is None:
            first = r
        order = r.order
        seg_curve += distinct_seen(order, seg, nseg, cps)
        if codes is not None:
            lab_curve += distinct_seen(order, codes, ncodes, cps)
            acc["all_labels_seen_at"].append(K.first_all_seen(order, codes, ncodes) / n)
            if n >= batch_size:
                acc["batch_entropy"].append(float(batch_label_entropy(order, codes, ncodes, batch_size).mean()))
        d, rho = displacement(order)
        acc["displacement"].append(d)
        acc["spearman"].append(rho)
        if prev is not None:
            acc["repeat_pairs"].append(repeat_pair_rate(prev, order, batch_size))
        acc["streaming_entropy"].append(streaming_entropy(order, shard_records))
        if batch_size > 1:
            acc["same_group"].append(same_group_rate(order, groups, batch_size))
        test.add(order)
        prev = order
        bar.epoch()
    res = {k: (float(np.mean(v)) if v else None) for k, v in acc.items()}
    res["segments_seen_1pct"] = float(seg_curve[one_pct] / epochs / nseg)
    for k in ("batch_entropy", "repeat_pairs", "streaming_entropy", "same_group"):
        iv = ideal.get(k)
        res[k + "_vs_ideal"] = (res[k] / iv) if (res[k] is not None and iv) else None
    res["uniformity"] = test.result()
    res["exact"] = first.exact
    res["reshuffles"] = first.reshuffles
    res["params"] = dict(first.params)
    res["cost"] = first.cost.as_dict()
    res["curve_segments"] = np.round(seg_curve / epochs / nseg, 5).tolist()
    res["curve_labels"] = np.round(lab_curve / epochs / ncodes, 5).tolist() if lab_curve is not None else None
    res["order_seconds_per_epoch"] = order_s / epochs
    res["seconds"] = time.perf_counter() - t0
    return res
