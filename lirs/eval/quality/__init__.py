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
    in the next epoch (ideal ~ (B-1)/(n-1)); ``repeat_pairs_vs_ideal`` is that over the ideal.
(e) ``streaming_entropy``: MosaicML Streaming's measure: entropy of the distribution of |steps|
    between consecutive record IDs plus the same over their shard IDs (bits; higher is more
    random), against one uniform permutation's value.
(f) ``same_group``: share of neighbouring positions inside a batch whose records lie in the same
    ``group_bytes`` group of the file (ideal: the chance two random records share a group).
(g) uniformity over the epochs, three chi-square tests (p-values), each valid when the epochs
    are independent uniform permutations: ``position_p``, the position of every sampled record
    binned (each record's position must be uniform over the epoch; records that move together,
    as a group's, widen the statistic's law by the dependence estimated from the epochs, so the
    test holds for page/group/window too); ``pair_p``, the gap between
    the positions of file neighbours (2j, 2j+1) in log2 bins against its exact law under a
    uniform permutation, P(|gap| = k) = 2(n-k)/(n(n-1)); ``batch_p``, the table of batch in one
    epoch against batch in the next (Pearson's test of independence, summed over consecutive
    epochs: it catches layouts kept for the whole run, like BMF's blocks). A strategy is called
    uniform when every p >= 1e-3, non-uniform when one p < 1e-6. lirs page/group/window are
    uniform over their units, not over records: the pair test shows it.

Plus each strategy's memory and I/O cost (:class:`lirs.eval.strategies.Cost`).

:func:`frontier` runs the memory-bounded strategies at several memory budgets (the
randomness/memory frontier); :func:`summary_rows` flattens either result into one row per
strategy and budget, :func:`format_summary` prints them and :func:`plot_frontier` draws them.
"""
from __future__ import annotations

from .evaluate import evaluate
from .frontier import FRONTIER_STRATEGIES, MEMORY_MEANING, default_budgets, frontier, source_payload, summary_rows  # noqa: F401
from .metrics import (DEFAULT_CLASSES, DEFAULT_EPOCHS, DEFAULT_SEGMENTS, FAIL_P, MAX_PAIRS,  # noqa: F401
                      MAX_POSITION_SAMPLE, MIN_EPOCHS, MIN_EXPECTED, PASS_P, UniformityTest, batch_label_entropy,
                      checkpoints_for, displacement, distinct_seen, expected_batch_entropy, expected_distinct_seen,
                      groups_of, ideal_displacement, ideal_repeat_rate, ideal_same_group_rate, inverse_order,
                      label_codes, repeat_pair_rate, same_group_rate, segment_codes, sorted_labels,
                      streaming_entropy)
from .progress import Progress, progress_mode  # noqa: F401
from .report import TABLE_COLUMNS, format_markdown, format_table, plot, table_rows  # noqa: F401
from .summary import SUMMARY_COLUMNS, SUMMARY_HELP, format_frontier_wide, format_summary, plot_frontier  # noqa: F401
