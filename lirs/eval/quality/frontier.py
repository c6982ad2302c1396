"""The randomness/memory frontier: every memory-bounded strategy at every memory budget, measured
by :func:`lirs.eval.quality.evaluate` (:func:`frontier`), and the flat rows of a result
(:func:`summary_rows`) that the summary tables and the frontier plot read."""
from __future__ import annotations

from ...constants import DEFAULT_GROUP_BYTES
from ...errors import UsageError
from ...index import Index
from ...windows import group_span
from ..strategies import DEFAULT_RECORD_BYTES, STRATEGIES
from .evaluate import evaluate
from .metrics import DEFAULT_CLASSES, DEFAULT_EPOCHS, DEFAULT_SEGMENTS
from .progress import Progress

MIB = 1 << 20

FRONTIER_STRATEGIES = ("window", "shuffle_buffer", "streaming_py1e", "streaming_py1br", "deeplake",
                       "ffcv_quasi_random", "corgipile", "corgi2")
"""The memory-bounded strategies a frontier compares by default."""

MEMORY_MEANING = {
    "window": "one lirs window: ceil(M / group_bytes) random groups read as one step and dealt over the "
              "batches they feed (the Loader holds two windows: the one consumed and the next one)",
    "shuffle_buffer": "the shuffle buffer: M / (mean record bytes) records",
    "streaming_py1e": "Streaming's shuffle block: M / (mean record bytes) samples; shards a tenth of it",
    "streaming_py1br": "Streaming's shuffle block: M / (mean record bytes) samples; shards a tenth of it",
    "streaming_py1b": "Streaming's shuffle block: M / (mean record bytes) samples; shards a tenth of it",
    "deeplake": "the shuffle buffer: M bytes, filled with whole chunks of M / 128",
    "ffcv_quasi_random": "the open pages: 2 x batch pages of M / (2 x batch) bytes",
    "corgipile": "the buffer: max(1, M // group_bytes) whole blocks of group_bytes",
    "corgi2": "the buffer: max(1, M // group_bytes) whole blocks, online and in the offline rewrite",
    "bmf": "one block: ceil(data / M) blocks, each trained whole",
    "two_pass": "one pile: 1.25 x data / M piles",
    "terashuf": "one run of M bytes",
    "chunk_roundrobin": "one chunk of M / (mean record bytes) records",
}
"""What the budget M bounds, per strategy (the RAM a strategy really holds is ``cost.memory_bytes``)."""


SHARE_FLOOR = 4096
"""The least budget a share of the data gives (one page), or the whole data where that is less:
a buffer of no record or a window of no group measures nothing."""

RAISED = " raised)"
"""How the label of a share that :data:`SHARE_FLOOR` raised ends: ``"4,096 B (5% raised)"``."""


def share_budget(label: str, share: float, payload: int) -> tuple[str, int]:
    """A share of the data (``share`` in (0, 1], written ``label`` such as ``"5%"``) as a budget
    ``(label, bytes)``: ``share`` x ``payload`` bytes, at least :data:`SHARE_FLOOR` or the whole
    data where that is less. Where the floor raised it, the label gives the bytes used and the
    share asked (``"13 B (5% raised)"``): 4 kB of 13 B of data was reported as 5%."""
    want = int(int(payload) * float(share))
    floor = max(1, min(SHARE_FLOOR, int(payload)))
    if want >= floor:
        return label, want
    return f"{floor:,} B ({label}{RAISED}", floor


def default_budgets(payload: int) -> list:
    """The default sweep: 1 MiB, 4 MiB, 16 MiB, ... below the data, then 5% and 100% of it, as
    ``(label, bytes)`` in increasing bytes (duplicates dropped; 5% as :func:`share_budget` gives
    it, so on data under 80 kB it is labelled with the bytes the floor raised it to)."""
    out = []
    m = MIB
    while m < payload:
        out.append((f"{m // MIB}M" if m < 1024 * MIB else f"{m // (1024 * MIB)}G", m))
        m *= 4
    # 100% first: where the floor raises 5% to the whole data, the one budget is called 100%
    out += [("100%", int(payload)), share_budget("5%", 0.05, payload)]
    return _dedup(out)


def _dedup(budgets) -> list:
    seen, out = set(), []
    for label, b in sorted(budgets, key=lambda x: x[1]):
        if b not in seen:
            seen.add(b)
            out.append((label, int(b)))
    return out


def budget_groups(memory_bytes: int, group_bytes: int, data_bytes: int = 0, records: int = 0) -> int:
    """The lirs window at a budget: the groups ``memory_bytes`` spans, rounded up (as the Loader
    rounds a share of the data), so that a budget of the whole data is one window; a group counted
    at the mean record's bytes where records (``records`` of ``data_bytes``) are larger than
    ``group_bytes``, as the Loader counts them (:func:`lirs.windows.group_span`)."""
    return max(1, -(-int(memory_bytes) // group_span(group_bytes, data_bytes, records)))


def data_size(source, record_bytes: int | None = None) -> tuple[int, int]:
    """``(bytes, records)`` of a strategy source: an Index, or a record count of ``record_bytes``."""
    if isinstance(source, Index):
        return int(source.payload_bytes), int(source.n)
    return int(source) * int(record_bytes or DEFAULT_RECORD_BYTES), int(source)


def frontier(source, budgets, strategies=None, *, epochs: int = DEFAULT_EPOCHS, batch_size: int = 1024,
             seed: int = 0, params: dict | None = None, segments: int = DEFAULT_SEGMENTS,
             group_bytes: int = DEFAULT_GROUP_BYTES, classes: int = DEFAULT_CLASSES,
             record_bytes: int | None = None, progress=None) -> dict:
    """Run every strategy (default :data:`FRONTIER_STRATEGIES`) at every memory budget of
    ``budgets`` (``(label, bytes)`` pairs, e.g. ``("5%", 25_000_000)``) for ``epochs`` epochs.

    At budget M every strategy gets ``memory_bytes = M`` and lirs ``window`` gets
    :func:`budget_groups` groups. Other arguments as :func:`lirs.eval.quality.evaluate`.
    Returns a JSON-ready dict: ``config`` (with ``budgets`` and ``memory_meaning``), ``ideal``
    (a uniform permutation's values that no budget changes; ``streaming_entropy`` is None there),
    ``rows`` (one flat dict per strategy and budget: see :func:`summary_rows`) and ``budgets``
    (per budget, every strategy's full metrics without the curves, and its ``ideal`` and
    ``shard_records``: Streaming's shards, so its entropy and that entropy's ideal, follow M)."""
    names = list(FRONTIER_STRATEGIES if strategies is None else strategies)
    bad = [s for s in names if s not in STRATEGIES]
    if bad or not names:
        raise UsageError(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")
    budgets = _dedup(budgets)
    if not budgets or any(b < 1 for _, b in budgets):
        raise UsageError(f"the memory budgets must be positive byte counts, got {budgets}")
    params = dict(params or {})
    if "window" in params or "memory_bytes" in params:
        raise UsageError("a frontier sets memory_bytes and window itself, from each budget")
    gb = int(params.pop("group_bytes", group_bytes))
    size = data_size(source, record_bytes)
    bar = Progress(len(budgets) * len(names) * int(epochs), len(budgets) * len(names), progress)
    out = None
    try:
        for label, m in budgets:
            p = dict(params, memory_bytes=int(m), window=budget_groups(m, gb, *size))
            res = evaluate(source, names, epochs=epochs, batch_size=batch_size, seed=seed, params=p, segments=segments,
                           group_bytes=gb, classes=classes, record_bytes=record_bytes, progress=bar, label=label)
            if out is None:
                out = _start(res, names, budgets, gb, size)
            for r in res["strategies"].values():
                r.pop("curve_segments", None)
                r.pop("curve_labels", None)
            # the window evaluate ran: at most the groups the data has
            out["budgets"].append({"memory": label, "memory_bytes": int(m),
                                   "window": res["config"]["params"]["window"],
                                   "shard_records": res["config"]["shard_records"], "ideal": _no_curves(res["ideal"]),
                                   "strategies": res["strategies"]})
    finally:
        bar.close()
    out["rows"] = summary_rows(out)
    return out


def _start(res: dict, names, budgets, group_bytes: int, size: tuple) -> dict:
    cfg = dict(res["config"])
    cfg["params"] = {k: v for k, v in cfg["params"].items() if k not in ("memory_bytes", "window")}
    cfg.update(strategies=names, group_bytes=group_bytes,
               budgets=[{"memory": label, "memory_bytes": int(m), "share": int(m) / max(1, cfg["payload_bytes"]),
                         "window": min(cfg["groups"], budget_groups(m, group_bytes, *size))}
                        for label, m in budgets],
               memory_meaning={s: MEMORY_MEANING.get(s, "memory_bytes = M (see lirs.eval.strategies)") for s in names})
    # shard_records, and so the ideal Streaming entropy, follow the budget: they are per budget
    # (budgets[i]), and None here rather than the first budget's value standing for every budget
    cfg["shard_records"] = None
    ideal = dict(_no_curves(res["ideal"]), streaming_entropy=None)
    return {"config": cfg, "ideal": ideal, "budgets": []}


def _no_curves(ideal: dict) -> dict:
    return {k: v for k, v in ideal.items() if not k.startswith("curve_")}


def summary_rows(result: dict) -> list:
    """One flat dict per (strategy, budget) of a :func:`frontier` result, or per strategy of an
    :func:`~lirs.eval.quality.evaluate` result (its one budget): ``strategy``, ``memory`` (the
    budget's label), ``memory_bytes`` (the budget), ``ram_bytes`` (what the strategy holds),
    ``read_x`` (bytes read per epoch / data), ``large_read_share`` (of those bytes, the share in
    reads of at least 64 KiB), ``write_x``, ``oneoff_x`` (one-off bytes read + written / data),
    ``pairs_again_x``, ``same_group_x``, ``batch_entropy`` (bits), ``batch_entropy_x``, and the
    other metrics and p-values under their evaluate names."""
    if "budgets" in result:
        per = [(b["memory"], b["memory_bytes"], b["strategies"]) for b in result["budgets"]]
    else:
        cfg = result["config"]
        mem = cfg.get("params", {}).get("memory_bytes")
        per = [(cfg.get("memory", "-" if mem is None else str(mem)), mem, result["strategies"])]
    rows = []
    for label, m, strategies in per:
        for name, r in strategies.items():
            c, u = r["cost"], r["uniformity"]
            P = max(1, c["payload_bytes"])
            rows.append({
                "strategy": name, "memory": label, "memory_bytes": m, "ram_bytes": c["memory_bytes"],
                "read_x": c["read_amplification"], "large_read_share": c.get("large_read_share"),
                "write_x": c["write_bytes"] / P, "oneoff_x": (c["oneoff_read_bytes"] + c["oneoff_write_bytes"]) / P,
                "pairs_again_x": r["repeat_pairs_vs_ideal"], "same_group_x": r["same_group_vs_ideal"],
                "batch_entropy": r["batch_entropy"], "batch_entropy_x": r["batch_entropy_vs_ideal"],
                "segments_seen_1pct": r["segments_seen_1pct"], "all_labels_seen_at": r["all_labels_seen_at"],
                "displacement": r["displacement"], "spearman": r["spearman"],
                "streaming_entropy_x": r["streaming_entropy_vs_ideal"], "position_p": u["position_p"],
                "pair_p": u["pair_p"], "batch_p": u["batch_p"], "uniform": u["uniform"], "params": r["params"]})
    return rows


def source_payload(source, record_bytes: int | None = None) -> int:
    """Bytes of the records of ``source`` (an Index or a record count of ``record_bytes`` each)."""
    if isinstance(source, Index):
        return int(source.payload_bytes)
    return int(source) * int(record_bytes or DEFAULT_RECORD_BYTES)
