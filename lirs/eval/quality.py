"""Shuffle quality: how random each strategy's record order is, from the orders and the labels in
the index alone (no data is read).

Per strategy, averaged over the epochs evaluated (every metric has an ideal: its value, exact or
expected, under a uniform random permutation):

(a) ``segments_seen_1pct``: the share of file segments (the file cut into ``segments`` equal runs
    of records; on label-sorted data with that many balanced classes these are the classes) seen
    after drawing 1% of an epoch, and the whole curve against records drawn (Deep Lake's plot;
    ideal: exact expectation); ``all_labels_seen_at``: the share of the epoch drawn before every
    label value was seen (ideal: one uniform permutation's value).
(b) ``batch_entropy``: label entropy (bits) of each full batch, against the expected entropy of a
    batch drawn uniformly without replacement (exact, multivariate hypergeometric).
(c) ``displacement``: mean |position - file position| / n (ideal about 1/3) and ``spearman``, the
    rank correlation of delivery order with file order (ideal 0).
(d) ``repeat_pairs``: of the pairs of records that share a batch, the share that share one again
    in the next epoch (ideal ~ (B-1)/(n-1)); ``repeat_lift`` is that over the ideal.
(e) ``streaming_entropy``: MosaicML Streaming's measure: entropy of the distribution of |steps|
    between consecutive record IDs plus the same over their shard IDs (bits; higher is more
    random), against one uniform permutation's value.
(f) ``same_group``: share of neighbouring positions inside a batch whose records lie in the same
    ``group_bytes`` group of the file (ideal: the chance two random records share a group).
(g) uniformity over the epochs, three chi-square tests (p-values), each valid when the epochs
    are independent uniform permutations: ``position_p``, the position of every sampled record
    binned (each record's position must be uniform over the epoch); ``pair_p``, the gap between
    the positions of file neighbours (2j, 2j+1) in log2 bins against its exact law under a
    uniform permutation, P(|gap| = k) = 2(n-k)/(n(n-1)); ``batch_p``, the table of batch in one
    epoch against batch in the next (Pearson's test of independence, summed over consecutive
    epochs: it catches layouts kept for the whole run, like BMF's blocks). A strategy is called
    uniform when every p >= 1e-3, non-uniform when one p < 1e-6. lirs page/group/window are
    uniform over their units, not over records: the pair test shows it.

Plus each strategy's memory and I/O cost (:class:`lirs.strategies.Cost`).
"""
from __future__ import annotations

import logging
import math
import sys
import time

import numpy as np

from ..errors import UsageError

log = logging.getLogger("lirs.quality")

PASS_P = 1e-3       # a uniform strategy's p-values stay above this
FAIL_P = 1e-6       # a non-uniform one shows a p-value below this
PURPOSE_IDEAL = 640  # the uniform reference permutation of metric (e)
DEFAULT_EPOCHS = 20
DEFAULT_SEGMENTS = 1000
DEFAULT_CLASSES = 1000
MAX_POSITION_SAMPLE = 4096
MAX_PAIRS = 1 << 18
MIN_EXPECTED = 5.0   # chi-square cells are merged until each expects this many


# --------------------------------------------------------------------------- labels


def label_codes(labels) -> tuple[np.ndarray, int]:
    """(codes int32 (n,) in [0, k), k) for float64 labels (n,): codes of the distinct values."""
    _, codes = np.unique(np.asarray(labels, np.float64), return_inverse=True)
    codes = codes.astype(np.int32).reshape(-1)
    return codes, int(codes.max()) + 1 if len(codes) else 0


def sorted_labels(n: int, classes: int) -> np.ndarray:
    """float64 (n,): ``classes`` balanced classes in file order (label-sorted data)."""
    if int(classes) < 1:
        raise UsageError(f"classes must be >= 1, got {classes}")
    return (np.arange(n, dtype=np.int64) * int(classes) // max(int(n), 1)).astype(np.float64)


def segment_codes(n: int, segments: int) -> np.ndarray:
    """int32 (n,): the file segment of every record (``segments`` equal runs in file order)."""
    return (np.arange(n, dtype=np.int64) * int(segments) // int(n)).astype(np.int32)


# --------------------------------------------------------------------------- metrics


def checkpoints_for(n: int, points: int = 120) -> np.ndarray:
    """int64 ascending sample counts in [1, n], log-spaced, including 1% of n and n."""
    pts = np.unique(np.concatenate([np.round(np.geomspace(1, n, points)), [max(1, math.ceil(n / 100)), n]]))
    return pts.astype(np.int64)


def distinct_seen(order, codes, ncodes: int, checkpoints) -> np.ndarray:
    """(a) Distinct codes among the first ``checkpoints[j]`` records of ``order``: int64 (m,)."""
    from .kernels import quality as K

    cp = np.ascontiguousarray(checkpoints, np.int64)
    out = np.empty(len(cp), np.int64)
    K.distinct_curve(np.ascontiguousarray(order, np.int64), codes, int(ncodes), cp, out)
    return out


def expected_distinct_seen(class_counts, n: int, checkpoints) -> np.ndarray:
    """(a) ideal: expected distinct classes among t records drawn without replacement, for every
    t in ``checkpoints``; class_counts int (k,) summing to n. float64 (m,)."""
    from scipy.special import gammaln

    c = np.asarray(class_counts, np.float64)
    c = c[c > 0]
    uc, mult = np.unique(c, return_counts=True)
    t = np.asarray(checkpoints, np.float64)[:, None]
    # P(class of size c unseen after t draws) = C(n-c, t) / C(n, t)
    ok = t <= n - uc[None, :]
    lg = (gammaln(n - uc + 1)[None, :] - gammaln(np.where(ok, n - uc - t, 0) + 1) - gammaln(n + 1)
          + gammaln(n - t + 1))
    miss = np.where(ok, np.exp(np.where(ok, lg, -np.inf)), 0.0)
    return ((1.0 - miss) * mult[None, :]).sum(axis=1)


def batch_label_entropy(order, codes, ncodes: int, batch_size: int) -> np.ndarray:
    """(b) Label entropy (bits) of every full batch of ``order``: float64 (n // batch_size,)."""
    from .kernels import quality as K

    order = np.ascontiguousarray(order, np.int64)
    out = np.empty(len(order) // int(batch_size), np.float64)
    K.batch_entropy(order, codes, int(ncodes), int(batch_size), out)
    return out


def expected_batch_entropy(class_counts, n: int, batch_size: int) -> float:
    """(b) ideal: expected plug-in label entropy (bits) of ``batch_size`` records drawn uniformly
    without replacement from n (class sizes ``class_counts``): exact, by the hypergeometric law
    of each class's count in the batch."""
    from scipy.stats import hypergeom

    B = int(min(batch_size, n))
    c = np.asarray(class_counts, np.int64)
    c = c[c > 0]
    uc, mult = np.unique(c, return_counts=True)
    x = np.arange(1, B + 1, dtype=np.float64)
    f = -(x / B) * np.log2(x / B)
    h = 0.0
    for size, m in zip(uc, mult):
        h += m * float(hypergeom.pmf(x, n, size, B) @ f)
    return h


def displacement(order) -> tuple[float, float]:
    """(c) (mean |position - record ID| / n, Spearman's rank correlation with file order)."""
    from .kernels import quality as K

    n = len(order)
    if n < 2:
        return 0.0, 1.0
    s1, s2 = K.displacement(np.ascontiguousarray(order, np.int64))
    return s1 / n / n, 1.0 - 6.0 * s2 / (n * (n * n - 1.0))


def ideal_displacement(n: int) -> float:
    """(c) ideal: E|U - V| / n for independent uniform positions in [0, n): (n^2 - 1) / (3 n^2)."""
    return (n * n - 1.0) / (3.0 * n * n)


def inverse_order(order) -> np.ndarray:
    """int64 (n,): the position of every record ID in ``order``."""
    from .kernels import quality as K

    out = np.empty(len(order), np.int64)
    K.inverse(np.ascontiguousarray(order, np.int64), out)
    return out


def repeat_pair_rate(order_a, order_b, batch_size: int) -> float:
    """(d) Of the pairs sharing a batch in ``order_a``, the share sharing one again in ``order_b``."""
    from .kernels import quality as K

    again, total = K.repeat_pairs(np.ascontiguousarray(order_a, np.int64), inverse_order(order_b), int(batch_size))
    return again / total if total else 0.0


def ideal_repeat_rate(n: int, batch_size: int) -> float:
    """(d) ideal: the chance that two given records share a batch of an independent uniform
    permutation cut into batches of ``batch_size`` (the last one shorter)."""
    B = int(batch_size)
    full, rest = divmod(int(n), B)
    pairs = full * B * (B - 1) + rest * (rest - 1)
    return pairs / (n * (n - 1.0)) if n > 1 else 0.0


def streaming_entropy(order, shard_records: int) -> float:
    """(e) MosaicML Streaming's shuffle-quality entropy: entropy (bits) of |differences| between
    consecutive record IDs plus that of their shard IDs (shards of ``shard_records``)."""
    from .kernels import quality as K

    order = np.ascontiguousarray(order, np.int64)
    n = len(order)
    scratch = np.empty(max(n, 1), np.int64)
    h = K.diff_entropy(order, scratch)
    shards = order // int(shard_records)
    h += K.diff_entropy(shards, scratch[: int(shards.max()) + 1] if n else scratch)
    return float(h)


def same_group_rate(order, group_of, batch_size: int) -> float:
    """(f) Share of neighbouring positions inside a batch whose records share a group."""
    from .kernels import quality as K

    same, total = K.same_group_neighbours(np.ascontiguousarray(order, np.int64), group_of, int(batch_size))
    return same / total if total else 0.0


def ideal_same_group_rate(group_of) -> float:
    """(f) ideal: the chance that two distinct random records share a group."""
    c = np.bincount(np.asarray(group_of, np.int64)).astype(np.float64)
    n = c.sum()
    return float((c * (c - 1)).sum() / (n * (n - 1))) if n > 1 else 0.0


def groups_of(index, group_bytes: int) -> np.ndarray:
    """int64 (n,): the group (records whose start lies in one aligned ``group_bytes`` span, as
    the lirs planner defines it) of every record."""
    from ..plan import unit_table

    ufirst = unit_table(index, int(group_bytes))
    if ufirst is None:
        return np.arange(index.n, dtype=np.int64)
    return np.repeat(np.arange(len(ufirst) - 1, dtype=np.int64), np.diff(ufirst))


class UniformityTest:
    """(g) Chi-square tests that a strategy's orders are independent uniform permutations, fed one
    epoch at a time with :meth:`add`.

    ``position``: records ``sample`` (all when n <= max_sample, else ``max_sample`` evenly
    spaced ones), the position of each binned into ``bins`` equal bins (default: epochs // 5,
    from 2 to 20, so every cell expects at least 5). Statistic sum (N - E p)^2 / (E p) over
    records and bins, compared with chi-square on records x (bins - 1) degrees of freedom (its
    mean is exact; dependence between records of one epoch only narrows it).
    ``pairs``: file neighbours (2j, 2j+1) (at most ``max_pairs``, evenly spaced); the gap between
    their positions counted in bins [1, 2), [2, 4), [4, 8), ... and compared with its exact law;
    bins are merged until each expects at least 5.
    ``batch`` (with ``batch_size``): for each pair of consecutive epochs, Pearson's statistic of
    the (batches x batches) table of where records land, against independence, with batches
    merged into runs of max(batch_size, sqrt(5 n)) positions so that every cell expects at least
    5; the relative permutation of two independent uniform epochs is uniform, so the statistics
    of successive pairs are independent and add up, on (runs - 1)^2 degrees of freedom each.
    """

    def __init__(self, n: int, epochs: int, *, batch_size: int | None = None, bins: int | None = None,
                 max_sample: int = MAX_POSITION_SAMPLE, max_pairs: int = MAX_PAIRS):
        self.n = int(n)
        self.epochs = int(epochs)
        # batches merged into runs of at least sqrt(5 n) positions, so every cell expects >= 5
        self.unit = min(self.n, max(int(batch_size), math.ceil(math.sqrt(MIN_EXPECTED * self.n)))) if batch_size else 0
        self.batches = -(-self.n // self.unit) if self.unit else 0
        self.table_stat = 0.0
        self.table_df = 0
        self._prev = None
        if self.n < 2 or self.epochs < 1:
            raise UsageError(f"a uniformity test needs n >= 2 and epochs >= 1, got {n}, {epochs}")
        self.bins = int(bins) if bins is not None else int(min(20, max(2, self.epochs // 5)))
        self.sample = (np.arange(self.n, dtype=np.int64) if self.n <= max_sample else
                       np.unique(np.linspace(0, self.n - 1, max_sample).round().astype(np.int64)))
        self.counts = np.zeros((len(self.sample), self.bins), np.int64)
        widths = np.bincount(np.arange(self.n, dtype=np.int64) * self.bins // self.n, minlength=self.bins)
        self.p_bins = widths / self.n
        npairs = self.n // 2
        j = (np.arange(npairs, dtype=np.int64) if npairs <= max_pairs else
             np.unique(np.linspace(0, npairs - 1, max_pairs).round().astype(np.int64)))
        self.first, self.second = 2 * j, 2 * j + 1
        edges = [1]
        while edges[-1] < self.n:
            edges.append(min(self.n, edges[-1] * 2))
        self.edges = np.array(edges, np.int64)
        self.gap_counts = np.zeros(len(self.edges) - 1, np.int64)
        self.added = 0

    def add(self, order) -> None:
        from .kernels import quality as K

        order = np.ascontiguousarray(order, np.int64)
        pos = inverse_order(order)
        K.add_position_counts(pos, self.sample, self.n, self.bins, self.counts)
        K.add_gap_counts(pos, self.first, self.second, self.edges, self.gap_counts)
        if self.batches > 1:
            if self._prev is not None:
                self.table_stat += float(K.batch_table_stat(self._prev, pos, self.unit))
                self.table_df += (self.batches - 1) ** 2
            self._prev = order
        self.added += 1

    def _gap_law(self) -> np.ndarray:
        a = self.edges[:-1].astype(np.float64)
        b = self.edges[1:].astype(np.float64)
        n = float(self.n)
        # sum over k in [a, b) of 2(n - k) / (n (n - 1))
        s = (b - a) * n - (a + b - 1) * (b - a) / 2.0
        return 2.0 * s / (n * (n - 1.0))

    def result(self) -> dict:
        """p-values and statistics of both tests: position_p, pair_p, uniform (True, False or
        None when in between the thresholds)."""
        from scipy.stats import chi2

        E = self.added
        if E == 0:
            raise UsageError("no epochs were added to the uniformity test")
        exp = E * self.p_bins[None, :]
        stat = float(((self.counts - exp) ** 2 / exp).sum())
        df = len(self.sample) * (self.bins - 1)
        pos_p = float(chi2.sf(stat, df))
        # pairs: merge bins from the smallest gaps up until each expects MIN_EXPECTED
        law = self._gap_law() * len(self.first) * E
        obs_m, exp_m = [], []
        o = e = 0.0
        for ob, ex in zip(self.gap_counts, law):
            o += ob
            e += ex
            if e >= MIN_EXPECTED:
                obs_m.append(o)
                exp_m.append(e)
                o = e = 0.0
        if e > 0 and exp_m:
            obs_m[-1] += o
            exp_m[-1] += e
        obs_m, exp_m = np.array(obs_m), np.array(exp_m)
        if len(exp_m) >= 2:
            pstat = float(((obs_m - exp_m) ** 2 / exp_m).sum())
            pdf = len(exp_m) - 1
            pair_p = float(chi2.sf(pstat, pdf))
        else:
            pstat, pdf, pair_p = None, 0, None
        batch_p = float(chi2.sf(self.table_stat, self.table_df)) if self.table_df else None
        low = min(p for p in (pos_p, pair_p, batch_p) if p is not None)
        return {"epochs": E, "position_p": pos_p, "position_stat": stat, "position_df": df,
                "position_bins": self.bins, "position_records": len(self.sample), "pair_p": pair_p,
                "pair_stat": pstat, "pair_df": pdf, "pairs": len(self.first), "batch_p": batch_p,
                "batch_stat": self.table_stat if self.table_df else None, "batch_df": self.table_df,
                "batch_run": self.unit,
                "uniform": True if low >= PASS_P else (False if low < FAIL_P else None)}


# --------------------------------------------------------------------------- evaluation


def _progress(progress):
    return (not sys.stderr.isatty()) if progress is None else (not progress)


def evaluate(source, strategies=None, *, epochs: int = DEFAULT_EPOCHS, batch_size: int = 1024, seed: int = 0,
             params: dict | None = None, segments: int = DEFAULT_SEGMENTS, group_bytes: int = 65536,
             classes: int = DEFAULT_CLASSES, record_bytes: int | None = None, progress=None) -> dict:
    """Run every strategy for ``epochs`` epochs on ``source`` and measure (a)-(g) and its cost.

    source: an :class:`~lirs.index.Index` (its labels are used; none: label metrics are None) or
    a record count n (a label-sorted in-memory index of n records of ``record_bytes``, 360 B by
    default, with ``classes`` balanced classes). ``params``: strategy parameters, one dict for
    all (see :func:`lirs.strategies.run_strategy`); ``group_bytes`` is also the group of metric
    (f) and of the lirs group/window strategies. Returns a JSON-ready dict: ``config``,
    ``ideal``, ``checkpoints`` and ``strategies`` (name -> metrics, ``cost``, ``params``,
    ``uniformity``, ``curve_segments``, ``curve_labels``, ``seconds``).
    """
    from tqdm import tqdm

    from ..index import Index
    from .strategies import DEFAULT_RECORD_BYTES, STRATEGIES, run_strategy, synthetic_index

    names = list(STRATEGIES) if strategies is None else list(strategies)
    bad = [s for s in names if s not in STRATEGIES]
    if bad or not names:
        raise UsageError(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")
    epochs, batch_size, segments = int(epochs), int(batch_size), int(segments)
    if epochs < 1 or batch_size < 1 or segments < 1:
        raise UsageError(f"epochs, batch_size and segments must be >= 1, got {epochs}, {batch_size}, {segments}")
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
    if n < 2:
        raise UsageError(f"need at least 2 records, got {n}")
    if batch_size > n:
        raise UsageError(f"batch_size {batch_size} exceeds the {n} records")
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
    shard_records = run_strategy("streaming_naive", index, seed=seed, batch_size=batch_size,
                                 **params).params["shard_records"]

    ideal_perm = np.random.default_rng(np.random.SeedSequence([int(seed), 0, PURPOSE_IDEAL])).permutation(n)
    ideal_seg_curve = expected_distinct_seen(seg_counts, n, cps) / nseg
    ideal = {
        "segments_seen_1pct": float(ideal_seg_curve[one_pct]),
        "all_labels_seen_at": None,
        "batch_entropy": expected_batch_entropy(class_counts, n, batch_size) if labels is not None else None,
        "displacement": ideal_displacement(n),
        "spearman": 0.0,
        "repeat_pairs": ideal_repeat_rate(n, batch_size),
        "streaming_entropy": streaming_entropy(ideal_perm, shard_records),
        "same_group": ideal_same_group_rate(groups),
        "curve_segments": ideal_seg_curve.tolist(),
        "curve_labels": (expected_distinct_seen(class_counts, n, cps) / ncodes).tolist() if labels is not None else None,
    }
    if labels is not None:
        from .kernels import quality as K

        # one uniform permutation's value (its expectation has no simple closed form)
        ideal["all_labels_seen_at"] = K.first_all_seen(ideal_perm, codes, ncodes) / n

    out = {"config": {"n": n, "epochs": epochs, "batch_size": batch_size, "seed": int(seed), "segments": nseg,
                      "label_values": ncodes, "group_bytes": params["group_bytes"], "shard_records": shard_records,
                      "payload_bytes": int(index.payload_bytes), "synthetic": synthetic,
                      "params": {k: v for k, v in params.items()}, "strategies": names,
                      "pass_p": PASS_P, "fail_p": FAIL_P},
           "checkpoints": cps.tolist(), "ideal": ideal, "strategies": {}}
    if synthetic:
        out["config"]["record_bytes"] = int(record_bytes or DEFAULT_RECORD_BYTES)
        out["config"]["classes"] = int(classes)
    bar = tqdm(total=len(names) * epochs, unit="epoch", desc="lirs quality", disable=_progress(progress),
               leave=False)
    try:
        for name in names:
            out["strategies"][name] = _evaluate_one(
                name, index, epochs, batch_size, seed, params, codes, ncodes, seg, nseg, cps, one_pct, groups,
                shard_records, ideal, bar)
    finally:
        bar.close()
    return out


def _evaluate_one(name, index, epochs, batch_size, seed, params, codes, ncodes, seg, nseg, cps, one_pct, groups,
                  shard_records, ideal, bar) -> dict:
    from .kernels import quality as K
    from .strategies import run_strategy

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
        bar.set_postfix_str(name)
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
        acc["same_group"].append(same_group_rate(order, groups, batch_size))
        test.add(order)
        prev = order
        bar.update(1)
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


# --------------------------------------------------------------------------- report


def _b(x) -> str:
    if x is None:
        return "-"
    for unit, k in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= k:
            return f"{x / k:.1f} {unit}"
    return f"{int(x)} B"


def _p(p) -> str:
    if p is None:
        return "-"
    if p == 0.0:
        return "<1e-300"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}"


def _f(x, fmt="{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


TABLE_COLUMNS = ("strategy", "seg@1%", "labels all", "batch H", "disp", "rho", "pairs again", "stream H",
                 "same grp", "p pos", "p pairs", "p mates", "uniform", "memory", "read/epoch", "random reads",
                 "written/epoch")


def table_rows(result: dict) -> list:
    """One row of strings per strategy (and the ideal first), in TABLE_COLUMNS order."""
    ideal = result["ideal"]
    rows = [["ideal (uniform)", _f(ideal["segments_seen_1pct"]), _f(ideal["all_labels_seen_at"], "{:.4f}"),
             _f(ideal["batch_entropy"], "{:.2f}"), _f(ideal["displacement"]), "0", _f(ideal["repeat_pairs"], "{:.2e}"),
             _f(ideal["streaming_entropy"], "{:.2f}"), _f(ideal["same_group"], "{:.2e}"), "", "", "", "yes", "", "",
             "", ""]]
    for name, r in result["strategies"].items():
        c = r["cost"]
        u = r["uniformity"]
        verdict = {True: "yes", False: "no", None: "?"}[u["uniform"]]
        reads = f"{c['rand_reads']:,} x {_b(c['median_read_bytes'])}" if c["rand_reads"] else "-"
        rows.append([
            name, _f(r["segments_seen_1pct"]), _f(r["all_labels_seen_at"], "{:.4f}"),
            _f(r["batch_entropy"], "{:.2f}"), _f(r["displacement"]), _f(r["spearman"], "{:+.3f}"),
            _f(r["repeat_pairs_vs_ideal"], "{:.3g}x"), _f(r["streaming_entropy"], "{:.2f}"),
            _f(r["same_group"], "{:.2e}"), _p(u["position_p"]), _p(u["pair_p"]), _p(u["batch_p"]), verdict,
            _b(c["memory_bytes"]),
            _b(c["read_bytes"]), reads, _b(c["write_bytes"]) if c["write_bytes"] else "-"])
    return rows


def format_table(result: dict) -> str:
    """The comparison as an aligned text table (one row per strategy, the ideal first)."""
    rows = [list(TABLE_COLUMNS)] + table_rows(result)
    w = [max(len(r[i]) for r in rows) for i in range(len(TABLE_COLUMNS))]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(s.ljust(w[i]) if i == 0 else s.rjust(w[i]) for i, s in enumerate(r)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    return "\n".join(lines)


def format_markdown(result: dict) -> str:
    """The comparison as a markdown table."""
    rows = table_rows(result)
    head = "| " + " | ".join(TABLE_COLUMNS) + " |"
    sep = "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(TABLE_COLUMNS))) + " |"
    return "\n".join([head, sep] + ["| " + " | ".join(r) + " |" for r in rows])


def plot(result: dict, path: str, title: str | None = None) -> bool:
    """Save a PNG: (a) distinct file segments seen against records drawn, batch label entropy,
    uniformity p-values and memory against I/O per epoch. False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install matplotlib): no plot")
        return False
    import os

    names = list(result["strategies"])
    n = result["config"]["n"]
    cmap = plt.get_cmap("tab20")
    colors = {s: cmap(i % 20) for i, s in enumerate(names)}
    fig, ax = plt.subplots(2, 2, figsize=(15, 11))
    x = np.asarray(result["checkpoints"], np.float64) / n
    a = ax[0, 0]
    for s in names:
        ls = "-" if result["strategies"][s]["exact"] else "--"
        a.plot(x, result["strategies"][s]["curve_segments"], ls, color=colors[s], label=s, lw=1.3)
    a.plot(x, result["ideal"]["curve_segments"], ":", color="black", lw=2.2, label="ideal (uniform)")
    a.set_xscale("log")
    a.set_xlabel("fraction of the epoch drawn")
    a.set_ylabel(f"fraction of the {result['config']['segments']} file segments seen")
    a.set_title("(a) distinct file segments seen (classes of a label-sorted file)")
    a.legend(fontsize=7, ncol=2, loc="upper left")
    a.grid(alpha=0.3)

    y = np.arange(len(names))
    b = ax[0, 1]
    ib = result["ideal"]["batch_entropy"]
    if ib:
        vals = [result["strategies"][s]["batch_entropy"] or 0.0 for s in names]
        b.barh(y, vals, color=[colors[s] for s in names])
        b.axvline(ib, color="black", ls=":", lw=2, label=f"ideal {ib:.2f} bits")
        b.set_xlabel(f"mean label entropy per batch of {result['config']['batch_size']} (bits)")
        b.legend(fontsize=8)
    else:
        b.text(0.5, 0.5, "no labels in the index", ha="center", va="center", transform=b.transAxes)
    b.set_yticks(y, names, fontsize=8)
    b.invert_yaxis()
    b.set_title("(b) label entropy per batch")

    c = ax[1, 0]
    pos = [-math.log10(max(result["strategies"][s]["uniformity"]["position_p"], 1e-300)) for s in names]
    prs = [-math.log10(max(1.0 if u["pair_p"] is None else u["pair_p"], 1e-300))
           for u in (result["strategies"][s]["uniformity"] for s in names)]
    cos = [-math.log10(max(1.0 if u["batch_p"] is None else u["batch_p"], 1e-300))
           for u in (result["strategies"][s]["uniformity"] for s in names)]
    c.barh(y - 0.27, np.minimum(pos, 300), height=0.27, label="positions", color="tab:blue")
    c.barh(y, np.minimum(prs, 300), height=0.27, label="file-neighbour gaps", color="tab:orange")
    c.barh(y + 0.27, np.minimum(cos, 300), height=0.27, label="batch mates next epoch", color="tab:purple")
    c.axvline(-math.log10(PASS_P), color="green", ls="--", lw=1, label=f"pass above p = {PASS_P:g}")
    c.axvline(-math.log10(FAIL_P), color="red", ls="--", lw=1, label=f"fail below p = {FAIL_P:g}")
    c.set_xscale("symlog", linthresh=10)
    c.set_yticks(y, names, fontsize=8)
    c.invert_yaxis()
    c.set_xlabel("-log10 p (chi-square against a uniform permutation)")
    c.set_title(f"(g) uniformity over {result['config']['epochs']} epochs")
    c.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)

    d = ax[1, 1]
    P = max(result["config"]["payload_bytes"], 1)
    mems = [max(result["strategies"][s]["cost"]["memory_bytes"], 1) for s in names]
    d.barh(y, mems, color=[colors[s] for s in names])
    d.set_xscale("log")
    d.set_xlim(1, max(mems) * 3e3)
    for k, s in enumerate(names):
        co = result["strategies"][s]["cost"]
        io = f"read {co['read_bytes'] / P:.2f}x"
        if co["rand_reads"]:
            io += f" in {co['rand_reads']:,} random reads of {_b(co['median_read_bytes'])}"
        else:
            io += " sequentially"
        if co["write_bytes"]:
            io += f", write {co['write_bytes'] / P:.0f}x"
        if co["oneoff_write_bytes"]:
            io += f" (+ {co['oneoff_write_bytes'] / P:.0f}x written once)"
        d.text(mems[k] * 1.3, k, io, va="center", fontsize=7)
    d.set_yticks(y, names, fontsize=8)
    d.invert_yaxis()
    d.set_xlabel(f"memory needed (bytes; data: {_b(P)}), and I/O per epoch relative to the data")
    d.set_title("cost per epoch")
    cfg = result["config"]
    fig.suptitle(title or f"lirs quality: {cfg['n']:,} records, batch {cfg['batch_size']}, {cfg['epochs']} epochs")
    fig.tight_layout()
    tmp = path + ".tmp.png"
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True
