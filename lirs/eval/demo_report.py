"""What `lirs demo` prints and draws from the dict of :func:`lirs.eval.demo.run_demo`: the
objective per epoch, the seconds spent (pre-processing included), a summary, the verdict per axis,
the paper's headline at full size (packaged, not measured by the demo), and a two-panel plot. Every figure comes from that dict (and so from the demo's JSON)."""
from __future__ import annotations

import os

from ..units import format_bytes
from .figures import pyplot, save_png
from .demo import MIN_MARGIN, explain


def _grid(head: list, rows: list) -> list:
    """Lines of a left-aligned text table."""
    w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    return ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in [head] + rows]


def value(v, unit: str, digits: int | None = None) -> str:
    """A verdict value in its unit; None reads "never" (a target not reached). ``digits``:
    significant digits (bytes then in full), where the usual ones would print two values alike."""
    if v is None:
        return "never"
    if unit == " B":
        return format_bytes(v) if digits is None else f"{v:,.0f} B"
    if unit == " s":
        return f"{v:.2f} s" if digits is None else f"{v:.{digits}g} s"
    if unit == " epochs":
        return f"{v} epoch" + ("s" if v != 1 else "")
    return f"{v:.{digits or 3}g}"


def _digits(values, unit: str) -> int | None:
    """The fewest significant digits (None: the usual format) that print unequal ``values`` unequal:
    a verdict between two values must not read as one between equal numbers."""
    vals = [v for v in values if v is not None]
    for digits in (None, 3, 4, 5, 6, 8, 10):
        shown = {}
        if all(shown.setdefault(value(v, unit, digits), v) == v for v in vals):
            return digits
    return 10


def explanations(res: dict) -> list:
    """One line per method: what it does."""
    w = max(len(m) for m in res["methods"])
    return [f"  {m.ljust(w)}  {explain(m, res)}" for m in res["methods"]]


def objective_table(res: dict) -> list:
    """(a) (f - f*)/f* after each epoch, per method."""
    ms = res["methods"]
    head = ["method", "start"] + [f"ep {i + 1}" for i in range(res["epochs"])]
    rows = [[m, f"{res['f0_rel_diff']:.3g}"] + [f"{p['rel_diff']:.3g}" for p in r["per_epoch"]]
            for m, r in ms.items()]
    return [f"(a) training objective per epoch, as (f - f*)/f* (0 = the optimum; f* = {res['f_star']:.6g}, "
            f"from {res['reference_s']:.1f} s of in-memory training; start = untrained model)"] + _grid(head, rows)


def time_table(res: dict) -> list:
    """(b) seconds since each method began, pre-processing included, after each epoch."""
    ms = res["methods"]
    head = ["method", "pre-proc"] + [f"ep {i + 1}" for i in range(res["epochs"])]
    rows = [[m, f"{r.get('pre_s') or 0.0:.2f}"] + [f"{t:.2f}" for t in r["elapsed_s"]] for m, r in ms.items()]
    pre = "; ".join(f"{m}: {r['pre_what']}" for m, r in ms.items() if (r.get("pre_s") or 0) > 0)
    if res.get("index_reused"):
        pre = (pre + "; " if pre else "") + "lirs: index reused (0 s)"
    return ["(b) seconds since the method began, pre-processing included, after each epoch"
            + (f" (pre-processing: {pre})" if pre else "")] + _grid(head, rows)


def summary_table(res: dict) -> list:
    """Per method: epoch time, loading not hidden, bytes read, memory, target reached."""
    ms = res["methods"]
    head = ["method", "s/epoch", "wait s", "read/epoch", "ampl.", "memory", "to target"]
    rows = []
    for m, r in ms.items():
        wait = sum(p["wait_s"] for p in r["per_epoch"]) / len(r["per_epoch"])
        amp = r["mean_bytes_read"] / max(res["payload_bytes"], 1)
        hit = r.get("epochs_to_target")
        rows.append([m, f"{r['mean_epoch_s']:.2f}", f"{wait:.2f}", format_bytes(r["mean_bytes_read"]), f"{amp:.2f}x",
                     format_bytes(r.get("memory_bytes")),
                     "-" if res.get("target_method") is None else
                     ("never" if hit is None else f"{hit} ep, {r['reached_s']:.2f} s")])
    tgt = res.get("target_method")
    note = (f"target: the best objective {tgt} reached in {res['epochs']} epochs, (f - f*)/f* = "
            f"{res['target_rel_diff']:.3g}. " if tgt else "")
    return _grid(head, rows) + [note + "wait: loading not hidden behind training. ampl.: bytes read / record "
                                "bytes. memory: index, plan and read buffers (lirs), one block (BMF), the "
                                "buffer's records (shuffle buffer)."]


def _with_range(v, r, unit: str, digits: int | None = None) -> str:
    """A verdict value, and its range across the steady epochs when it has one."""
    if r is None or v is None:
        return value(v, unit, digits)
    lo, hi = (value(x, unit, digits).removesuffix(unit) for x in r)
    return f"{value(v, unit, digits)} ({lo}-{hi})"


def verdict_lines(res: dict) -> list:
    """The verdict per axis (steady state; a margin within the run-to-run spread is a tie), a
    closing line naming every axis lirs does not win, then the one-time costs set apart."""
    v = res["verdict"]
    if not v:
        return []
    out = ["verdict: lirs's best method against the best other method, per axis (smaller is better; times "
           f"from the epochs after the first, with their range in this run: a side wins a time only when its "
           f"range, widened by {MIN_MARGIN:.0%}, lies below the other's, else it is a tie):"]
    w = max(len(x["what"]) for x in v)
    for x in v:
        tag = {"wins": "lirs wins ", "ties": "lirs ties ", "loses": "lirs loses"}[x["outcome"]]
        note = ""
        if x["outcome"] != "wins" and not x["other_reaches_target"] and res.get("target_method"):
            note = f"  ({x['other']} never reaches the target)"
        d = _digits([x["lirs_value"], x["other_value"], *(x.get("lirs_range") or ()), *(x.get("other_range") or ())],
                    x["unit"])
        out.append(f"  {tag}  {x['what'].ljust(w)}  {x['lirs']} {_with_range(x['lirs_value'], x.get('lirs_range'), x['unit'], d)}"
                   f" vs {x['other']} {_with_range(x['other_value'], x.get('other_range'), x['unit'], d)}{note}")
    lost = [x["what"] for x in v if x["outcome"] != "wins"]
    out.append("lirs does not win on: " + "; ".join(lost) + "." if lost else "lirs wins on every axis above.")
    return out + one_time_lines(res)


def one_time_lines(res: dict) -> list:
    """The one-time costs (:func:`lirs.eval.demo.one_time_costs`), named apart from the verdict."""
    costs = res.get("one_time") or []
    if not costs:
        return []
    out = ["one-time costs, not in the verdict (they differ between a first run and the next):"]
    for c in costs:
        who = f"{', '.join(c['methods'])}: " if c["methods"] else ""
        out.append(f"  {who}{c['what']}: {c['seconds']:.2f} s" + (f" ({c['note']})" if c["note"] else ""))
    return out


def next_steps(res: dict) -> list:
    """The commands the demo suggests next, each one that runs as printed (``res["data"]``: the
    demo's LIBSVM file)."""
    import shlex

    data = shlex.quote(res["data"])
    return [("lirs bench " + data, "how fast each read pattern is on this device (and HDD/SSD envelopes)"),
            ("lirs quality " + data, "how random each strategy's order is"),
            ("python -c 'import lirs; help(lirs.Loader)'", "use lirs in your own training loop")]


def change(v) -> str:
    """A reduction of total time ``v`` (%) printed as the change lirs makes: "-81%" saves 81%,
    "+31%" takes 31% longer (a loss), "never" never reaches the target."""
    return "never" if v is None else f"{-v:+.0f}%"


def _change_table(per_method: dict, base: str, losses: list, tag: str) -> list:
    """Rows of lirs methods x devices; every loss (slower, or never) is added to ``losses``."""
    cols = list(next(iter(per_method.values())))
    names = {"paper_form": f"nvme vs {base} on hdd"}
    rows = [[m] + [change(per[c]) for c in cols] for m, per in per_method.items()]
    for m, per in per_method.items():
        lost = [names.get(c, c) for c in cols if per[c] is None or per[c] < 0]
        if lost:
            losses.append(f"{tag} {m} ({', '.join(lost)})")
    return ["    " + x for x in _grid(["method"] + [names.get(c, c) for c in cols], rows)]


def headline_lines(h) -> list:
    """The block "the paper's headline on lirs's reference machine": the packaged full-size comparison of
    benchmarks/bench_paper.py (``res["paper_headline"]``, see :func:`lirs.eval.demo.paper_headline`)
    beside the paper's -49.9% / -43.5% / +1.01%, every case where lirs loses named at the end."""
    head = "the paper's headline on lirs's reference machine (2 cores, NVMe)"
    if not h:
        return [f"{head}: not packaged with this copy of lirs (benchmarks/bench_paper.py writes it)"]
    pp, losses = h["paper"], []
    out = [f"{head} (benchmarks/bench_paper.py, {(h.get('date') or '')[:10] or 'undated'}, shipped with lirs; "
           "not measured by this demo). Total time to the target = pre-processing + epochs x epoch time, lirs "
           "against the baseline: -x% saves x%, +x% takes x% longer (lirs loses), never: never reaches it."]
    names = {"bmf": "BMF", "tfip": "TFIP"}
    paper = {"svm": f"LIRS on Optane vs BMF on HDD {-pp['svm_total_reduction_pct']:+}%",
             "dnn": f"LIRS on Optane vs TFIP on HDD {-pp['dnn_total_reduction_pct']:+}%"}
    for part in ("svm", "dnn"):
        p = h.get(part)
        if not p:
            continue
        base, tag = names.get(p["baseline"], p["baseline"]), part.upper()
        out.append(f"  {tag}: {p['what']}, {p['file_bytes'] / 1e9:.2f} GB ({p['records']:,} records), against "
                   f"{base}; target: {p['target']}. Paper: {paper[part]}")
        out += _change_table(p["total_reduction_pct"], base, losses, tag)
        if "total_reduction_relaxed_pct" in p:
            out.append(f"  {tag}, target: {p['relaxed_target']}")
            out += _change_table(p["total_reduction_relaxed_pct"], base, losses, tag + " (common target)")
        if "test_acc_gain_points" in p:
            g = p["test_acc_gain_points"]
            out.append(f"  {tag} test accuracy against {base}: " + ", ".join(f"{m} {v:+.2f} points" for m, v in g.items())
                       + f". Paper: +{pp['dnn_test_acc_gain_pct']}%")
            losses += [f"{tag} test accuracy {m} ({v:+.2f} points)" for m, v in g.items() if v < 0]
    out.append("  lirs loses on: " + "; ".join(losses) + "." if losses else "  lirs loses on none of these.")
    return out


def report_lines(res: dict) -> list:
    """Everything `lirs demo` prints after training, in order."""
    lines = ["", "what each method does:"] + explanations(res) + [""]
    lines += objective_table(res) + [""] + time_table(res) + [""] + summary_table(res) + [""]
    lines += verdict_lines(res)
    return lines + ([""] + headline_lines(res["paper_headline"]) if "paper_headline" in res else [])


def plot(res: dict, png: str) -> bool:
    """Write :func:`figure` to ``png``. Returns False without matplotlib."""
    if pyplot(warn=False) is None:  # the demo says so itself, with the command that installs it
        return False
    save_png(figure(res), png)  # atomically: a save stopped midway leaves the previous demo.png whole
    return True


def figure(res: dict):
    """Two panels, (a) objective per epoch and (b) objective against seconds since the method
    began (pre-processing included), (f - f*)/f* on a log scale: a matplotlib Figure."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    floor = 1e-9  # a method may end below f* (an upper bound of the optimum): keep it on the log axis
    for m, r in res["methods"].items():
        ys = [max(res["f0_rel_diff"], floor)] + [max(p["rel_diff"], floor) for p in r["per_epoch"]]
        line, = a.semilogy(range(len(ys)), ys, marker="o", ms=3, label=m)
        pre = r.get("pre_s") or 0.0
        b.semilogy([0.0, pre] + list(r["elapsed_s"]), [ys[0]] + ys, marker="o", ms=3, color=line.get_color(),
                   label=m, markevery=list(range(1, len(ys) + 1)))
    a.set_xlabel("epoch")
    b.set_xlabel("seconds since the method began (pre-processing included)")
    for ax, t in ((a, "(a) objective per epoch"), (b, "(b) objective vs seconds, pre-processing included")):
        ax.set_ylabel("(f - f*) / f*")
        ax.set_title(t, fontsize=10, loc="left")
        ax.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=8)
    fig.suptitle(f"lirs demo: linear SVM on {os.path.basename(res['data'])} ({res['n']:,} records)", fontsize=10)
    fig.tight_layout()
    return fig
