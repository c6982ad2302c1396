"""The results of :func:`lirs.eval.quality.evaluate` as a table, as Markdown and as a plot."""
from __future__ import annotations

import math

import numpy as np

from ..figures import pyplot, save_png
from .metrics import FAIL_P, PASS_P


def cell(x) -> str:
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
        reads = f"{c['rand_reads']:,} x {cell(c['median_read_bytes'])}" if c["rand_reads"] else "-"
        rows.append([
            name, _f(r["segments_seen_1pct"]), _f(r["all_labels_seen_at"], "{:.4f}"),
            _f(r["batch_entropy"], "{:.2f}"), _f(r["displacement"]), _f(r["spearman"], "{:+.3f}"),
            _f(r["repeat_pairs_vs_ideal"], "{:.3g}x"), _f(r["streaming_entropy"], "{:.2f}"),
            _f(r["same_group"], "{:.2e}"), _p(u["position_p"]), _p(u["pair_p"]), _p(u["batch_p"]), verdict,
            cell(c["memory_bytes"]),
            cell(c["read_bytes"]), reads, cell(c["write_bytes"]) if c["write_bytes"] else "-"])
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
    """Save a PNG of four panels lettered (a)-(d): distinct file segments seen against records
    drawn, label entropy per batch, uniformity p-values, memory and I/O per epoch. False when
    matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
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
    c.set_title(f"(c) uniformity over {result['config']['epochs']} epochs (metric g)")
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
            io += f" in {co['rand_reads']:,} random reads of {cell(co['median_read_bytes'])}"
        else:
            io += " sequentially"
        if co["write_bytes"]:
            io += f", write {co['write_bytes'] / P:.0f}x"
        if co["oneoff_write_bytes"]:
            io += f" (+ {co['oneoff_write_bytes'] / P:.0f}x written once)"
        d.text(mems[k] * 1.3, k, io, va="center", fontsize=7)
    d.set_yticks(y, names, fontsize=8)
    d.invert_yaxis()
    d.set_xlabel(f"memory needed (bytes; data: {cell(P)}), and I/O per epoch relative to the data")
    d.set_title("(d) memory and I/O per epoch")
    cfg = result["config"]
    fig.suptitle(title or f"lirs quality: {cfg['n']:,} records, batch {cfg['batch_size']}, {cfg['epochs']} epochs")
    fig.tight_layout()
    save_png(fig, path)
    return True
