"""The randomness metrics of ``lirs quality`` and their ideal values, and the uniformity test
(:class:`UniformityTest`); see the package docstring for what each measures."""
from __future__ import annotations

import math

import numpy as np

from ...errors import UsageError
from ...plan import unit_table
from ..kernels import quality as K

PASS_P = 1e-3       # a uniform strategy's p-values stay above this
FAIL_P = 1e-6       # a non-uniform one shows a p-value below this
MIN_EPOCHS = 10     # fewer: the position test's two bins expect too few; no "uniform" verdict
DEFAULT_EPOCHS = 20
DEFAULT_SEGMENTS = 1000
DEFAULT_CLASSES = 1000
MAX_POSITION_SAMPLE = 4096
MAX_PAIRS = 1 << 18
MIN_EXPECTED = 5.0   # chi-square cells are merged until each expects this many
MAX_TRACE_EPOCHS = 100  # epochs the position test's dependence is estimated from (its cost: epochs^2 x records)


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
    out = np.empty(len(order), np.int64)
    K.inverse(np.ascontiguousarray(order, np.int64), out)
    return out


def repeat_pair_rate(order_a, order_b, batch_size: int) -> float:
    """(d) Of the pairs sharing a batch in ``order_a``, the share sharing one again in ``order_b``."""
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
    order = np.ascontiguousarray(order, np.int64)
    n = len(order)
    scratch = np.empty(max(n, 1), np.int64)
    h = K.diff_entropy(order, scratch)
    shards = order // int(shard_records)
    h += K.diff_entropy(shards, scratch[: int(shards.max()) + 1] if n else scratch)
    return float(h)


def same_group_rate(order, group_of, batch_size: int) -> float:
    """(f) Share of neighbouring positions inside a batch whose records share a group."""
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
    ufirst = unit_table(index, int(group_bytes))
    if ufirst is None:
        return np.arange(index.n, dtype=np.int64)
    return np.repeat(np.arange(len(ufirst) - 1, dtype=np.int64), np.diff(ufirst))


def trace_of_square(G: np.ndarray) -> float:
    """Chen and Qin's (2010) unbiased estimate of tr(S^2), S the covariance of i.i.d. vectors v_1
    .. v_e (whatever their mean), from their Gram matrix ``G`` float64 (e, e), e >= 4: sums of
    products of dot products over distinct epochs."""
    e = len(G)
    G0 = G - np.diag(np.diag(G))
    r, s2 = G0.sum(axis=1), (G0 * G0).sum(axis=1)
    a2 = float(s2.sum())                        # i != j: G_ij^2
    a3 = float((r * r - s2).sum())              # i, j, k distinct: G_ij G_jk
    a4 = float(r.sum()) ** 2 - 2 * a2 - 4 * a3  # i, j, k, l distinct: G_ij G_kl
    return a2 / (e * (e - 1)) - 2 * a3 / (e * (e - 1) * (e - 2)) + a4 / (e * (e - 1) * (e - 2) * (e - 3))


class UniformityTest:
    """(g) Chi-square tests that a strategy's orders are independent uniform permutations, fed one
    epoch at a time with :meth:`add`.

    ``position``: records ``sample`` (all when n <= max_sample, else ``max_sample`` evenly
    spaced ones), the position of each binned into ``bins`` equal bins (default: epochs // 5,
    from 2 to 20, so every cell expects at least 5). Statistic T = sum (N - E p)^2 / (E p) over
    records and bins. Records of one epoch need not move independently (a group's records land
    together, a window's in one stretch): T is compared with c chi-square(nu) (Satterthwaite),
    c = tr(S^2) / tr(S) and nu = tr(S)^2 / tr(S^2), S the covariance of one epoch's centred bin
    indicators over the sampled records: tr(S) = records x (bins - 1) exactly, tr(S^2) estimated
    from the epochs without bias whatever their mean (Chen and Qin's estimator, on at most
    ``MAX_TRACE_EPOCHS`` epochs, four at least), and never taken below its value for independent
    records (then c = 1: chi-square on records x (bins - 1) degrees of freedom).
    ``pairs``: file neighbours (2j, 2j+1) (at most ``max_pairs``, evenly spaced); the gap between
    their positions counted in bins [1, 2), [2, 4), [4, 8), ... and compared with its exact law;
    bins are merged until each expects at least 5.
    ``batch`` (with ``batch_size``): for each pair of consecutive epochs, Pearson's statistic of
    the (batches x batches) table of where records land, against independence, with batches
    merged into runs of max(batch_size, sqrt(5 n)) positions, the last run taking the rest (a
    short last run's cells would expect almost nothing), so that every cell expects at least 5;
    the relative permutation of two independent uniform epochs is uniform, so the statistics
    of successive pairs are independent and add up, on (runs - 1)^2 degrees of freedom each.
    """

    def __init__(self, n: int, epochs: int, *, batch_size: int | None = None, bins: int | None = None,
                 max_sample: int = MAX_POSITION_SAMPLE, max_pairs: int = MAX_PAIRS):
        self.n = int(n)
        self.epochs = int(epochs)
        # batches merged into runs of at least sqrt(5 n) positions, so every cell expects >= 5
        self.unit = min(self.n, max(int(batch_size), math.ceil(math.sqrt(MIN_EXPECTED * self.n)))) if batch_size else 0
        self.batches = self.n // self.unit if self.unit else 0  # runs: the last takes the rest
        self.table_stat = 0.0
        self.table_df = 0
        self._prev = None
        if self.n < 2 or self.epochs < 1:
            raise UsageError(f"a uniformity test needs n >= 2 and epochs >= 1, got {n}, {epochs}")
        self.bins = int(bins) if bins is not None else int(min(20, max(2, self.epochs // 5)))
        self.sample = (np.arange(self.n, dtype=np.int64) if self.n <= max_sample else
                       np.unique(np.linspace(0, self.n - 1, max_sample).round().astype(np.int64)))
        self.counts = np.zeros((len(self.sample), self.bins), np.int64)
        self.bins_of: list = []  # each epoch's bin of every sampled record (the first MAX_TRACE_EPOCHS)
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
        order = np.ascontiguousarray(order, np.int64)
        pos = inverse_order(order)
        K.add_position_counts(pos, self.sample, self.n, self.bins, self.counts)
        if len(self.bins_of) < MAX_TRACE_EPOCHS:
            self.bins_of.append((pos[self.sample] * self.bins // self.n).astype(np.int8))
        K.add_gap_counts(pos, self.first, self.second, self.edges, self.gap_counts)
        if self.batches > 1:
            if self._prev is not None:
                self.table_stat += float(K.batch_table_stat(self._prev, pos, self.unit))
                self.table_df += (self.batches - 1) ** 2
            self._prev = order
        self.added += 1

    def _position_scale(self) -> tuple[float, float]:
        """``(c, nu)`` of the position test (see the class docstring): T ~ c chi-square(nu)."""
        m = len(self.sample)
        trace = float(m * (self.bins - 1))  # tr(S): E |v|^2 for one record is bins - 1
        G = self._epoch_gram()
        tr2 = trace if G is None else max(trace, trace_of_square(G))
        return tr2 / trace, trace * trace / tr2

    def _epoch_gram(self) -> np.ndarray | None:
        """float64 (e, e): v_a . v_b of the first epochs' vectors v (centred bin indicators over
        the sampled records, scaled by 1 / sqrt(p)): sum over records of [same bin] / p - 1. None
        with fewer than four epochs."""
        if len(self.bins_of) < 4:
            return None
        B = np.stack(self.bins_of)
        w = 1.0 / self.p_bins[B]  # 1 / p of each epoch's bin of each record
        G = np.empty((len(B), len(B)))
        for a in range(len(B)):
            G[a] = ((B == B[a]) * w[a]).sum(axis=1) - len(self.sample)
        return G

    def _gap_law(self) -> np.ndarray:
        a = self.edges[:-1].astype(np.float64)
        b = self.edges[1:].astype(np.float64)
        n = float(self.n)
        # sum over k in [a, b) of 2(n - k) / (n (n - 1))
        s = (b - a) * n - (a + b - 1) * (b - a) / 2.0
        return 2.0 * s / (n * (n - 1.0))

    def result(self) -> dict:
        """p-values and statistics of the tests: position_p, pair_p, batch_p, uniform (True, False or
        None: in between the thresholds, or a pass over fewer than :data:`MIN_EPOCHS` epochs or
        without the pair or batch test)."""
        from scipy.stats import chi2

        E = self.added
        if E == 0:
            raise UsageError("no epochs were added to the uniformity test")
        exp = E * self.p_bins[None, :]
        stat = float(((self.counts - exp) ** 2 / exp).sum())
        scale, df = self._position_scale()
        pos_p = float(chi2.sf(stat / scale, df))
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
        verdict = True if low >= PASS_P else (False if low < FAIL_P else None)
        if verdict and (E < MIN_EPOCHS or pair_p is None or batch_p is None):
            verdict = None  # too little seen to call it uniform (a clear failure still says so)
        return {"epochs": E, "position_p": pos_p, "position_stat": stat, "position_df": df, "position_scale": scale,
                "position_bins": self.bins, "position_records": len(self.sample), "pair_p": pair_p,
                "pair_stat": pstat, "pair_df": pdf, "pairs": len(self.first), "batch_p": batch_p,
                "batch_stat": self.table_stat if self.table_df else None, "batch_df": self.table_df,
                "batch_run": self.unit,
                "uniform": verdict}
