"""The readable side of ``lirs quality``: the summary table (one row per strategy and memory
budget, from :func:`lirs.eval.quality.frontier.summary_rows`), the wide tables of a frontier and
the frontier plot (randomness against memory)."""
from __future__ import annotations

from ..figures import pyplot, save_png
from .report import cell, format_markdown, format_table


SUMMARY_COLUMNS = ("strategy", "memory", "RAM", "read x", "in >=64K", "pairs again", "same grp", "label H")
SUMMARY_HELP = ("memory = the budget M each strategy was given; RAM = what it holds at its peak; read x = bytes "
                "read per epoch / data; in >=64K = share of those bytes read in reads of at least 64 KiB "
                "(sequential streams count); pairs again = batch pairs that meet again next epoch and same grp = "
                "in-batch neighbours from one {group} group, both x a uniform order (ideal 1x); label H = label "
                "entropy per batch, bits (ideal in the first row).")


def _x(v, fmt="{:.3g}x") -> str:
    return "-" if v is None else fmt.format(v)


def summary_table_rows(result: dict, rows: list) -> list:
    """Strings in SUMMARY_COLUMNS order: the ideal first, then one per row of ``rows``."""
    ideal = result["ideal"]
    # no ideal (batches of one record: no pairs, no neighbours): "-" as in the rows, not 1x
    out = [["ideal (uniform)", "", "", "", "", "1x" if ideal.get("repeat_pairs") else "-",
            "1x" if ideal.get("same_group") is not None else "-", _x(ideal.get("batch_entropy"), "{:.3f}")]]
    for r in rows:
        share = r["large_read_share"]
        out.append([r["strategy"], str(r["memory"]), cell(r["ram_bytes"]), _x(r["read_x"], "{:.3f}x"),
                    "-" if share is None else f"{100 * share:.0f}%", _x(r["pairs_again_x"]), _x(r["same_group_x"]),
                    _x(r["batch_entropy"], "{:.3f}")])
    return out


def format_summary(result: dict, rows: list, markdown: bool = False) -> str:
    """The summary as an aligned text table, or as markdown."""
    body = summary_table_rows(result, rows)
    if markdown:
        head = "| " + " | ".join(SUMMARY_COLUMNS) + " |"
        sep = "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(SUMMARY_COLUMNS))) + " |"
        return "\n".join([head, sep] + ["| " + " | ".join(r) + " |" for r in body])
    table = [list(SUMMARY_COLUMNS)] + body
    w = [max(len(r[i]) for r in table) for i in range(len(SUMMARY_COLUMNS))]
    lines = []
    for k, r in enumerate(table):
        lines.append("  ".join(s.ljust(w[i]) if i < 2 else s.rjust(w[i]) for i, s in enumerate(r)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    return "\n".join(lines)


def format_frontier_wide(result: dict, markdown: bool = False) -> str:
    """Every metric of a frontier: the full comparison table of every budget, one after another."""
    parts = []
    for b in result["budgets"]:
        # the budget's own ideal: Streaming's ideal entropy follows M (its shards do)
        one = {"ideal": b["ideal"], "strategies": b["strategies"]}
        parts.append(f"memory {b['memory']} ({cell(b['memory_bytes'])}, lirs window = {b['window']} groups):")
        parts.append(format_markdown(one) if markdown else format_table(one))
    return "\n\n".join(parts)


def plot_frontier(result: dict, path: str, title: str | None = None) -> bool:
    """Save a PNG of randomness against memory (log x): (a) batch pairs that meet again next
    epoch and (b) in-batch neighbours from one group, both x a uniform order (log y), one line
    per strategy, a reference line at 1x and markers at 5% and 100% of the data. False when
    matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
    from matplotlib.ticker import FuncFormatter
    rows = result["rows"]
    names = list(dict.fromkeys(r["strategy"] for r in rows))
    cmap = plt.get_cmap("tab10")
    P = result["config"]["payload_bytes"]
    gb = int(result["config"]["group_bytes"])
    group = f"{gb // 1024} KiB" if gb % 1024 == 0 else cell(gb)
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.6))
    panels = (("pairs_again_x", "(a) batch pairs that meet again next epoch, x uniform"),
              ("same_group_x", f"(b) in-batch neighbours from one {group} group, x uniform"))
    for ax, (key, label) in zip(axes, panels):
        for i, s in enumerate(names):
            pts = sorted((r["memory_bytes"], r[key]) for r in rows if r["strategy"] == s and r[key] is not None)
            if not pts:
                continue
            x, y = zip(*pts)
            # lirs window and CorgiPile draw the same order: a wide pale window line, CorgiPile dashed on it
            style = dict(lw=5, zorder=2, alpha=0.45) if s == "window" else dict(lw=1.3, zorder=3)
            ax.plot(x, [max(v, 1e-3) for v in y], "--o" if s == "corgipile" else "-o", ms=3.5, color=cmap(i % 10),
                    label="lirs window" if s == "window" else s, **style)
        ax.axhline(1.0, color="black", ls=":", lw=1.8, label="uniform (1x)")
        for share, txt in ((0.05, "5% of the data"), (1.0, "all the data")):
            ax.axvline(share * P, color="grey", ls="--", lw=0.8)
            ax.text(share * P, 0.98, f" {txt}", transform=ax.get_xaxis_transform(), fontsize=7, va="top",
                    color="grey", rotation=90)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: cell(v)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        # a narrow range (pairs again spans 1x to a few x) still gets 2x, 5x, 0.5x labels
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}x" if f"{v:.1e}"[0] in "25" else ""))
        ax.set_xlabel(f"memory budget M (bytes; data {cell(P)})")
        ax.set_ylabel("x a uniform order (1 = ideal)")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=9, frameon=False)
    cfg = result["config"]
    fig.suptitle(title or f"lirs quality: randomness against memory, {cfg['n']:,} records, batch {cfg['batch_size']}, "
                          f"{cfg['epochs']} epochs")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save_png(fig, path)
    return True
