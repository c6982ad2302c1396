"""Write the documentation's results page, and the README's results summary, from
benchmarks/results/*.json.

    python benchmarks/report.py            # writes docs/results.md (and its figures under docs/img/)
                                           # and the README's summary between its summary markers
    python benchmarks/report.py --print    # prints the page instead

Every figure on the page comes from a JSON file written by a benchmark script of this folder; a
missing file leaves its subsection out. Each subsection names the command that produced it.
tests/test_docs.py checks that the committed page and summary are what this script writes.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
ROOT = os.path.dirname(HERE)
README = os.path.join(ROOT, "README.md")
PAGE = os.path.join(ROOT, "docs", "results.md")
IMG = os.path.join(ROOT, "docs", "img")  # the page's figures: copies of benchmarks/results/*.png
START, END = "<!-- summary:start -->", "<!-- summary:end -->"


def load(name: str):
    p = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def table(head: list, rows: list) -> str:
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def f(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def mb(x):
    return f(None if x is None else x / 1e6, ",.0f")


def goal(ok) -> str:
    return "met" if ok else "**not met**"


def source(d) -> str:
    date = (d.get("date") or "")[:10]
    return f"`{d.get('command', '?')}`" + (f", {date}" if date else "")


def png(name: str) -> str:
    """The page's link to a benchmark's figure (copied under docs/img/ by :func:`write`), or ""."""
    return f"img/{name}.png" if os.path.exists(os.path.join(RESULTS, f"{name}.png")) else ""


# --------------------------------------------------------------------------- sections


def demo_glance(d) -> str:
    """The `lirs demo` bullet: what it measured, axis by axis, wins, ties and losses alike. A win is
    quoted only where the demo's verdict found the margin beyond the run-to-run spread of the
    steady epochs; the one-time costs it set apart are named after."""
    def val(v, unit):
        if v is None:
            return "never"
        if unit == " B":
            return f"{v / 1e6:.1f} MB"
        if unit == " epochs":
            return f"{v} epochs"
        return f"{v:.3g}{unit}"

    def part(outcome):
        return [f"{v['what']} ({v['lirs']} {val(v['lirs_value'], v['unit'])} vs {v['other']} "
                f"{val(v['other_value'], v['unit'])})" for v in d["verdict"] if v["outcome"] == outcome]

    wins, ties, loses = part("wins"), part("ties"), part("loses")
    m = d["settings"].get("min_margin")  # what the demo's verdict widened each time's spread by
    margin = f" widened by {m:.0%} where times are compared" if m else ""
    text = (f"`lirs demo` (linear SVM, {d['n']:,} label-sorted kdd-like records, {d['epochs']} epochs, "
            f"`benchmarks/results/demo.json`; times from the epochs after the first): lirs wins, by more than the "
            f"spread of those epochs{margin}, on " + ("; ".join(wins) if wins else "no axis") + ".")
    if ties:
        text += " Within that margin (a tie): " + "; ".join(ties) + "."
    text += " It does not win on " + ("; ".join(loses) if loses else "any other axis") + "."
    kernels = next((c for c in d.get("one_time") or [] if not c["methods"]), None)
    if kernels:
        text += (f" Set apart as one-time costs: {kernels['seconds']:.1f} s for the kernels (numba, first run), "
                 "each method's pre-processing and its first epoch's warm-up.")
    return text


def change(v) -> str:
    """A reduction of total time (%) as the change lirs makes: −x% saves, +x% is a loss."""
    return "never reaches the target" if v is None else (f"−{v:.0f}%" if v >= 0 else f"+{-v:.0f}% (slower)")


def paper_glance(d) -> str:
    """The bullet of bench_paper.py's headline (the figures `lirs demo` also quotes), losses included."""
    sv, dn = d["reductions"]["svm"], d["reductions"]["dnn"]
    gb = d["svm"]["dataset"]["file"]["bytes"] / 1e9
    strict = [m for m in ("lirs-instance", "lirs-window") if dn[m]["nvme_vs_tfip_nvme_pct"] is not None]
    dnn = (f"lirs instance {change(dn['lirs-instance']['nvme_vs_tfip_nvme_pct'])}, lirs window "
           f"{change(dn['lirs-window']['nvme_vs_tfip_nvme_pct'])} against TFIP on nvme" if strict else
           "neither lirs method reaches TFIP's best validation loss; to a loss all reach, lirs instance "
           f"{change(dn['lirs-instance']['nvme_vs_tfip_nvme_relaxed_pct'])} and lirs window "
           f"{change(dn['lirs-window']['nvme_vs_tfip_nvme_relaxed_pct'])} against TFIP on nvme")
    return (f"The LIRS paper's headline (`benchmarks/bench_paper.py`, one seed; `lirs demo` quotes it): SVM on "
            f"{gb:.2f} GB of label-sorted kdd-like data, total time to BMF's objective: lirs window "
            f"{change(sv['lirs-window']['nvme_vs_bmf_nvme_pct'])} on nvme and "
            f"{change(sv['lirs-window']['hdd_vs_bmf_hdd_pct'])} on the hdd envelope against BMF there (paper: "
            f"−49.9%); the paper's per-record reads (lirs instance) "
            f"{change(sv['lirs-instance']['nvme_vs_bmf_nvme_pct'])} on nvme. MLP on 2 GB against TFIP (an exact "
            f"pre-shuffle, then a 10,000-record buffer; paper: −43.5%): {dnn}; test accuracy "
            f"{dn['test_acc_gain_pct']['lirs-window']:+.2f} points for lirs window (paper: +1.01).")


def readme_summary() -> str:
    """The README's results summary: the demo's verdict (wins only beyond the spread it measured),
    then figures that are measured against a reference taken in the same run or that do not vary
    from run to run (memory per record, read amplification, out of core against fio)."""
    bullets = []
    demo = load("demo")
    if demo and demo.get("verdict"):
        bullets.append(demo_glance(demo))
    for line in summary_bullets():
        if line.startswith(("Memory:", "Out of core", "On 16 cores")):
            bullets.append(line)
    table16 = cores_16_table()
    return "\n".join(f"* {x}" for x in bullets) + ("\n\n" + table16 if table16 else "")


def sec_summary():
    """A few headline figures, each from its result file (subsections below give the detail)."""
    out = summary_bullets()
    paper = load("paper")
    if paper:
        out.insert(0, paper_glance(paper))
    demo = load("demo")
    if demo and demo.get("verdict"):
        out.insert(0, demo_glance(demo))
    if not out:
        return None
    return "### At a glance\n\n" + "\n".join(f"* {x}" for x in out)


def summary_bullets() -> list:
    """The headline figures of the benchmarks other than the demo and the paper's comparison."""
    out = []
    many = cores_16_glance()
    if many:
        out.append(many)
    svm = load("train_svm")
    if svm and "sorted" in svm["datasets"]:
        m = svm["datasets"]["sorted"]["methods"]
        e = {k: m[k].get("epochs_to_target") for k in m}
        base = svm["settings"]["epochs"]
        lirs_best = min((v for k, v in e.items() if k.startswith("lirs-") and v), default=None)
        out.append(f"SVM on label-sorted kdd-like data: lirs page/group/window reach in "
                   f"{min(e.get(k) or 99 for k in ('lirs-page', 'lirs-group', 'lirs-window'))}–"
                   f"{max(e.get(k) or 0 for k in ('lirs-page', 'lirs-group', 'lirs-window'))} epochs the objective "
                   f"BMF reaches in {base} (fastest lirs: {lirs_best}); a shuffle buffer of 10,000 records "
                   + ("never gets there" if not e.get("shuffle_buffer") else f"needs {e['shuffle_buffer']}") + ".")
    dnn = load("train_dnn")
    if dnn and "shuffle_buffer" in dnn["methods"]:
        sb = dnn["methods"]["shuffle_buffer"]
        lw = dnn["methods"].get("lirs-window") or dnn["methods"].get("lirs-instance")
        out.append(f"MLP on label-sorted higgs-like data: after {len(sb['per_epoch'])} epochs the shuffle buffer's best "
                   f"validation loss is {min(p['val_loss'] for p in sb['per_epoch']):.2f}; lirs passes it in "
                   f"{lw.get('epochs_to_target') or '?'} epoch(s) and reaches {min(p['val_loss'] for p in lw['per_epoch']):.3f}.")
    plan = load("plan")
    if plan:
        c = plan["memory"]["configs"]
        out.append(f"Memory: index + epoch assignment {c['group/table']['index_plus_plan_bytes_per_record']:.2f} "
                   f"B/record (group), {c['instance/stateless']['index_plus_plan_bytes_per_record']:.2f} (instance, "
                   f"stateless), against the LIRS paper's 16 (labels add "
                   f"{plan['memory']['labels_bytes_per_record']:.1f}); read amplification of 64 KiB groups "
                   f"{plan['amplification']['kdd']['group']['amplification']:.3f} on small records, where the "
                   f"paper's pages read {plan['amplification']['kdd']['page']['amplification']:.2f}×.")
    kdd = load("bench_kdd")
    if kdd:
        g = kdd.get("goals", {}).get("nvme", {})
        gi, gt = g.get("instance_vs_fio_iops", {}).get("value"), g.get("group_window_vs_torch", {}).get("value")
        out.append(f"Reading kdd-like LIBSVM (2.2 GB, cold, {(kdd.get('date') or '?')[:10]}): lirs instance at "
                   f"{f(gi)}× fio's 4 KiB IOPS; lirs "
                   f"group/window {f(gt, '.1f')}× the records/s of a hand-written torch DataLoader; group "
                   f"granularity was then bound by decoding text on 2 cores "
                   f"({f(g.get('group_vs_fio_bandwidth', {}).get('value'))}× fio bandwidth with decoding, "
                   f"{f(g.get('group_reads_only_vs_fio_bandwidth', {}).get('value'))}× reading alone).")
    scale = load("scale")
    if scale and scale.get("summary", {}).get("ratios"):
        sr = scale["summary"]["ratios"]
        x = lambda n: f(sr.get(n, {}).get("vs_fio64k"))  # noqa: E731
        out.append(f"Out of core ({scale['files']['big_bytes'] / 1e9:.0f} GB of kdd-like LIBSVM, 1.5× the RAM, "
                   f"{(scale.get('date') or '?')[:10]}): an epoch with CSR decoding at {x('lirs-group-64K')}× "
                   f"(group) and {x('lirs-window-64Kx4096')}× (window) fio's 64 KiB random bandwidth on 2 cores; "
                   f"reading alone {x('lirs-group-64K/reads')}× and {x('lirs-window-64Kx4096/reads')}×.")
    sh = load("shuffle")
    if sh and sh["ratios"].get("lirs_vs_device_limit"):
        out.append(f"`lirs shuffle` of a {sh['file_bytes'] / 1e9:.0f} GB file: "
                   f"{sh['ratios']['lirs_vs_device_limit']:.2f}× the time of two sequential reads and two "
                   f"writes at fio's rates"
                   + (f", {1 / sh['ratios']['lirs_vs_shuf']:.1f}× faster than GNU `shuf`." if sh['ratios'].get('lirs_vs_shuf') else "."))
    return out


def sec_index():
    d = load("index")
    if not d:
        return None
    rows = [["`lirs index`, cold cache", mb(d.get("index_cold_Bps")), f(d.get("cold_vs_fio")), "≥ 0.90",
             goal((d.get("cold_vs_fio") or 0) >= 0.9) if d.get("cold_vs_fio") else "–"]]
    ml = d.get("index_cold_memlimit")
    if ml:
        rows.append([f"`lirs index`, cold, in a {d['mem_limit']} memory cgroup", mb(ml["Bps"]), f(ml["vs_fio"]),
                     "≥ 0.90", goal((ml["vs_fio"] or 0) >= 0.9)])
    rows += [["`lirs index`, warm cache", mb(d.get("index_warm_Bps")), "", "≥ 1,500 MB/s",
              goal((d.get("index_warm_Bps") or 0) >= 1.5e9)],
             ["fio sequential read, 1 MiB, O_DIRECT (reference)", mb(d.get("fio_seq_read_Bps")), "1.00", "", ""]]
    cpu = d.get("index_cold_process_cpu_s_per_GB")
    return (f"### Index build\n\nOne sequential scan of a {d['file']['bytes'] / 1e9:.1f} GB kdd-like file "
            f"({d['file']['records']:,} records), against fio reading the same file just before each build "
            f"(median of the pairs; {source(d)}). \"Cold\" means the page cache of this machine was dropped. "
            f"The scan reads with O_DIRECT, 1 MiB pieces 16 in flight, two chunks ahead of the one being "
            f"scanned (as fio's reference job), so neither the page cache's copy nor its reclaim costs CPU, and "
            f"a file larger than RAM reads as a small one does; a file already in the page cache (just written) "
            f"is read through it. It parses every LIBSVM record with sklearn's "
            f"rules, so that bad input fails at index time"
            + (f", at {cpu:.2f} CPU seconds per GB" if cpu else "")
            + ": on 2 cores and a fast moment of this virtual disk, the parse sets the pace:\n\n"
            + table(["what", "MB/s", "× fio", "goal", ""], rows))


def sec_incremental():
    d = load("incremental")
    if not d:
        return None
    ratio = d["incremental_vs_full"]
    want = d["goals"]["incremental_vs_full"]
    rows = [["full index", f(d["full_index_s"] * 1e3, ".0f"), "1.00", "", ""],
            [f"incremental, after appending {d['file']['appended_bytes'] / 1e6:.0f} MB",
             f(d["incremental_index_s"] * 1e3, ".0f"), f(ratio), f"≤ {want}", goal(ratio <= want)],
            ["`lirs index --check` of a touched file", f(d["check_touched_s"] * 1e3, ".0f"), "", "", ""]]
    return (f"### Incremental index\n\n`lirs index` on a {d['file']['bytes'] / 1e6:.0f} MB kdd-like file after "
            f"an append of 1%, against a full index of the same file in the same run (medians of "
            f"{len(d['full_index_runs_s'])} repeats, page cache warm; {source(d)}). Every old byte is checked "
            f"against its per-MiB CRC-32C while the tail is scanned; the sidecar written is byte for byte the "
            f"full index's ({'checked' if d['sidecar_byte_equal_to_full'] else 'NOT equal'}).\n\n"
            + table(["what", "ms", "× full", "goal", ""], rows))


def sec_decode():
    d = load("decode")
    if not d:
        return None
    r = d["ratios"]
    rows = []
    for k, label in (("sklearn_load_svmlight_file_1core", "sklearn `load_svmlight_file`, 1 core"),
                     ("svmloader_1core", "svmloader, 1 core"),
                     ("xgboost_dmatrix_1core", "xgboost `DMatrix` (dmlc-core), 1 core"),
                     ("xgboost_dmatrix_all_cores", f"xgboost `DMatrix`, {d['cores']} cores"),
                     ("lirs_load_svmlight_1core", "lirs `load_svmlight`, 1 core"),
                     ("lirs_load_svmlight_all_cores", f"lirs `load_svmlight`, {d['cores']} cores"),
                     ("lirs_decode_libsvm_batches_1thread", "lirs `decode_libsvm`, batches of 4096, 1 thread")):
        if d.get(k):
            rows.append([label, f(d[k]["MB_per_s"], ".0f")])
    w = d.get("lirs_decode_libsvm_window")
    if w:
        rows.append([f"lirs `decode_libsvm`, one {w['bytes'] / 1e6:.0f} MB window (a Loader's), 1 thread",
                     f(w["1thread_MB_per_s"], ".0f")])
        rows.append([f"lirs `decode_libsvm`, the same window, {w['threads_all_cores']} threads",
                     f(w["all_cores_MB_per_s"], ".0f")])
    g1, ga = r.get("lirs_1core_vs_xgboost_1core"), r.get("lirs_all_cores_vs_xgboost_all_cores")
    out = (f"### LIBSVM decoding\n\nWarm cache, {d['file']['bytes'] / 1e6:.0f} MB kdd-like text, median of "
           f"{d['rounds']} rounds; results equal sklearn's bit for bit: {d.get('results_equal_sklearn')} "
           f"({source(d)}). Numbers are rounded exactly as Python's `float()` (Clinger's fast path, then "
           f"Eisel–Lemire, then `float()` for what they cannot settle); a whole file, and a Loader's "
           f"window, is split across every core. lirs on 1 core: {f(r['lirs_1core_vs_sklearn'], '.1f')}× sklearn and {f(g1)}× xgboost's "
           f"1-core parser (goal ≥ 2: {goal(bool(g1 and g1 >= 2))}); on all cores {f(ga)}× xgboost on all cores "
           f"(goal ≥ 3: {goal(bool(ga and ga >= 3))}); lirs gains {f(r['lirs_all_cores_speedup_over_1core'])}× "
           f"from the second core, xgboost {f(r['xgboost_all_cores_speedup_over_1core'])}×.\n\n"
           + table(["decoder", "MB/s"], rows))
    c = load("coldstart")
    if c:
        cold, warm = c["first_batch"]["cold"], c["first_batch"]["warm"]
        slow = ", ".join(f"`{k['kernel'].rsplit('.', 1)[1]}` {k['seconds']:.1f} s" for k in cold["slowest"][:3])
        out += (f"\n\n**Cold start** ({source(c)}): the first batch of a window `Loader` with an empty numba "
                f"cache arrives after {cold['first_batch_s']:.1f} s (warm: {warm['first_batch_s']:.1f} s; goal ≤ 5 s: "
                f"{goal(bool(c.get('goal_met')))}); a first `lirs epoch` takes {c['lirs_epoch']['cold_s']:.1f} s "
                f"(warm {c['lirs_epoch']['warm_s']:.1f} s). While the loader compiles its planning kernels "
                f"({cold['compile_s']:.1f} s for {cold['kernels_compiled']}, the slowest {slow}), helper processes "
                f"(one for the read kernels, one for the decode kernels) compile the rest into the same cache; without them (`LIRS_WARMUP=0`) the first "
                f"batch took {c['first_batch']['cold_without_helper']['first_batch_s']:.1f} s in the same run. "
                f"Plain LIBSVM compiles only the small plain kernels.")
        b = c.get("before")
        if b:
            out += (f" The epoch plans its first step and finds its extents before the pipeline waits for the "
                    f"read helper, so the walk's kernels compile during that wait: without it (lirs at "
                    f"{b['code_commit']}, measured just before) the first batch came after "
                    f"{b['first_batch_cold_s']:.1f} s (goal: {goal(bool(b['goal_met']))}).")
    return out + _coldstart_dataloader_line()


def _coldstart_dataloader_line() -> str:
    """A fresh process's first DataLoader batch with workers, before and after they inherit the kernels."""
    c = load("coldstart_dataloader")
    if not c:
        return ""
    m, p, cc = c["median_first_batch_s"], c["mann_whitney_p"], c["code_commit"]
    before, after = m[cc["before"]], m[cc["after"]]
    return (f" A fresh process's `make_dataloader` with 2 workers (`benchmarks/results/coldstart_dataloader.json`, "
            f"{len(c['rounds'][next(iter(c['rounds']))])} rounds in turns, {c['date'][:10]}, a "
            f"{c['file']['bytes'] / 1e6:.0f} MB file): with an empty cache each worker compiled every kernel again, "
            f"{before['w2']['cold']:.1f} s to the first batch; now the main process compiles the walk's kernels and "
            f"waits for its helpers before the workers fork, and they inherit them: {after['w2']['cold']:.1f} s "
            f"(p = {f(p['w2']['cold'], '.3f')}; `num_workers=0` {after['w0']['cold']:.1f} s). Warm: "
            f"{before['w2']['warm']:.1f} s and {after['w2']['warm']:.1f} s.")


def sec_torch():
    d = load("torch")
    if not d:
        return None
    r = d["ratio_vs_loader"]
    return (f"### PyTorch adapter against the Loader\n\nOne epoch of a {d['data']['bytes'] / 1e6:.0f} MB kdd-like "
            f"file, {d['granularity']} granularity, batch {d['batch_size']}, warm cache, median of {d['repeats']} "
            f"in the same run ({source(d)}): `make_dataloader` with `num_workers=0` runs at "
            f"{f(r['torch_w0'])}× the Loader's epoch rate (goal ≥ 0.9: {goal(r['torch_w0'] >= 0.9)}; "
            f"{d['records_per_s']['torch_w0'] / 1e6:.2f} M records/s against the Loader's "
            f"{d['records_per_s']['loader'] / 1e6:.2f} M, {1e6 / d['records_per_s']['loader'] * d['batch_size']:.0f} µs "
            f"per batch) — the CSR tensors are built on the consumer's thread, and with one "
            f"process the DataLoader steps the dataset without torch's per-batch iterator: what remains is the cost "
            f"of the tensors themselves. With `num_workers=2` (persistent workers, each with a pool sized to "
            f"its share of the cores, its batches crossing in bundles of up to 16 in shared-memory slots, put "
            f"back in order in the main process) on this 2-core machine it is "
            f"{f(r['torch_w2'])}× the Loader and {f(d['ratio_vs_w0']['torch_w2'])}× `num_workers=0` (goal ≥ "
            f"{d['goal_ratio_workers_vs_w0']}: {goal(d['ratio_vs_w0']['torch_w2'] >= d['goal_ratio_workers_vs_w0'])})"
            + ("" if d['ratio_vs_w0']['torch_w2'] >= d['goal_ratio_workers_vs_w0'] else
               ": the workers and the main process compete for the same two cores")
            + f"; a worker's pool keeps its share of the cores busy, and its extra threads take steps only "
            f"while its delivering thread is away." + _torch_before_line() + _torch_window_line())


def _torch_before_line() -> str:
    """What 2 workers gave against ``num_workers=0`` in the run kept from before that change."""
    b = load("torch_before_away")
    if not b:
        return ""
    return f" The run before it ({source(b)}): {f(b['ratio_vs_w0']['torch_w2'])}×."


def _torch_window_line() -> str:
    w = load("torch_window")
    if not w or "torch_w2" not in w.get("ratio_vs_w0", {}):
        return ""
    return (f" With the default granularity, {w['granularity']} ({source(w)}), `num_workers=2` runs at "
            f"{_two_workers(w)} and `num_workers=1` at "
            f"{f(w['ratio_vs_w0']['torch_w1'])}×; worker w of W reads windows w, w + W, ..., each window read "
            f"once between them, and a batch across two workers' windows is joined from its pieces in the main "
            f"process." + _torch_window_ring_line())


def _torch_window_ring_line() -> str:
    """The window workers' later rounds in turns, before and after each ring held a window's items."""
    r = load("torch_window_ring_ab")
    if not r:
        return ""
    m, p = r["median_ratio_vs_w0"], r["mann_whitney_p"]
    before, after = m[r["code_commit"]["before"]], m["ring"]
    return (f" Later, {len(r['rounds']['ring'])} rounds in turns (`benchmarks/results/torch_window_ring_ab.json`, "
            f"{(r.get('date') or '')[:10]}) put `num_workers=2` at {f(before['torch_w2'])}× before each worker's ring "
            f"held a window's items and {f(after['torch_w2'])}× after (p = {f(p['torch_w2'])}): the 2-worker goal sits "
            f"at the edge of this machine's spread; 4 workers went from {f(before['torch_w4'])}× to "
            f"{f(after['torch_w4'])}× (p = {f(p['torch_w4'])}), their items no longer crossing as shared-memory "
            f"segments of their own." + _torch_window_unwritten_line())


def _torch_window_unwritten_line() -> str:
    """Later and first passes of window workers, the ring taken unwritten against written whole."""
    r = load("torch_window_ring_unwritten_ab")
    if not r:
        return ""
    m, p = r["median"], r["mann_whitney_p"]
    ratio, first = m["ratio_vs_w0"], m["first_epoch_s"]
    return (f" Taking the ring's memory unwritten (`benchmarks/results/torch_window_ring_unwritten_ab.json`, "
            f"{len(r['rounds']['unwritten'])} rounds in turns, {(r.get('date') or '')[:10]}) left later passes as they were "
            f"(2 workers {f(ratio['unwritten']['torch_w2'])}× against {f(ratio['memset']['torch_w2'])}× written whole, "
            f"p = {f(p['ratio_vs_w0']['torch_w2'])}) and shortened the first pass of 4 workers from "
            f"{f(first['memset']['torch_w4'])} s to {f(first['unwritten']['torch_w4'])} s "
            f"(p = {f(p['first_epoch_s']['torch_w4'], '.3f')})." + _torch_window_recheck_line())


def _torch_window_recheck_line() -> str:
    """The window workers measured again at a later tree, the same benchmark."""
    r = load("torch_window_recheck")
    if not r:
        return ""
    return (f" Measured again later ({source(r)}, median of {r['repeats']}): `num_workers=2` at {_two_workers(r)}, "
            f"4 workers at {f(r['ratio_vs_w0']['torch_w4'])}×; the workers took "
            f"{f(r['cpu_ratio_vs_loader']['torch_w2'])}× the Loader's CPU." + _torch_window_workers_ab_line())


def _torch_window_workers_ab_line() -> str:
    """The 2-worker ratio of two trees in turns (``torch_window_workers_ab.json``)."""
    r = load("torch_window_workers_ab")
    if not r:
        return ""
    m, p, b, a = r["median"], r["mann_whitney_p"], r["before"], r["after"]
    w0 = r["lists"][b]["records_per_s_w0"] + r["lists"][a]["records_per_s_w0"]
    return (f" Two trees in turns, lirs at {b} and at {a}, {len(r['runs']) // 2} runs each (`benchmarks/results/"
            f"torch_window_workers_ab.json`, {(r['runs'][0]['result'].get('date') or '')[:10]}): `num_workers=2` at "
            f"{f(m[b]['ratio_w2_vs_w0'])}× and {f(m[a]['ratio_w2_vs_w0'])}× `num_workers=0` (p = "
            f"{f(p['ratio_w2_vs_w0'])}), below the goal on a slower day (`num_workers=0` {min(w0) / 1e6:.2f}–"
            f"{max(w0) / 1e6:.2f}M records/s), the workers taking {f(m[a]['cpu_s_w2_vs_loader'])}× the Loader's CPU."
            + _joins_line())


def _joins_line() -> str:
    """A window batch's pieces joined in the main process, numpy against torch.cat (``joins.json``)."""
    j = load("joins")
    if not j:
        return ""
    m, r = j["median"], j["lirs_vs_torch_cat"]
    return (f" The main process joins the pieces of a batch across two workers' windows with numpy on its own "
            f"thread: with {j['workers']} workers ({source(j)}, {len(j['epochs'])} epochs, {m['joins']:.0f} joins each, "
            f"medians) {m['lirs_ms']:.1f} ms of joins an epoch against {m['torch_cat_ms']:.1f} ms with `torch.cat` "
            f"on the same pieces ({f(r['join_ms_per_epoch'])}×), the slowest join {m['lirs_slowest_ms']:.2f} ms against "
            f"{m['torch_cat_slowest_ms']:.2f} ms ({f(r['slowest_join'])}×): `torch.cat` splits a join over torch's "
            f"intra-op threads, which wait for a core beside busy workers." + _pass_times_line())


def _pass_times_line() -> str:
    """Where a window epoch with workers spent its time (``torch_window_times.json``: bench_torch's
    ``pass_shares_last_epoch``, ``LirsDataLoader.pass_times``)."""
    d = load("torch_window_times")
    sh = (d or {}).get("pass_shares_last_epoch")
    if not sh:
        return ""
    ws = sorted(sh, key=lambda k: int(k.rsplit("w", 1)[1]))
    col = lambda part: "/".join(f(sh[k][part]) for k in ws)  # noqa: E731
    return (f" Where such an epoch's time goes (`LirsDataLoader.pass_times`, {source(d)}; with "
            f"{'/'.join(k.rsplit('w', 1)[1] for k in ws)} workers, shares of the last epoch): each worker "
            f"(median) waited for its Loader's batches {col('worker_wait')}, packed them {col('worker_pack')} and "
            f"waited for the main process to ask {col('worker_torch')}; the main process waited for the workers' "
            f"items {col('main_wait')} and had its first batch after {'/'.join(f(sh[k]['first_batch_s']) for k in ws)} s "
            f"(each worker reads its own windows: the first waits for a window read on a worker's share of the cores)."
            + _workers_work_line())


def _workers_work_line() -> str:
    """The Python work a batch of an epoch with workers, counted (``work_workers.json``), and the
    2-worker window ratio of the trees it compares, timed in turns (``torch_window_trim_ab.json``)."""
    w = load("work_workers")
    if not w or not w.get("against"):
        return ""
    this, that, q = w["this"], w["against"], w["this_vs_against"]
    gs = [g for g in ("window", "group") if g in this]
    counts = "; ".join(f"{g} {this[g]['bytecodes']:.0f} against {that[g]['bytecodes']:.0f} ({f(q[g]['bytecodes'])}×, "
                       f"the main process {this[g]['main_bytecodes']:.0f})" for g in gs)
    line = (f" The Python of such an epoch, counted in the main process and its {w['workers']} workers, every thread "
            f"({source(w)}, {w['data']['bytes'] / 1e6:.0f} MB), bytecodes a batch at lirs "
            f"{this[gs[0]]['commit']} against {that[gs[0]]['commit']}: {counts}.")
    ab = load("torch_window_trim_ab")
    if ab:
        m, p, b, a = ab["median"], ab["mann_whitney_p"], ab["before"], ab["after"]
        line += (f" Timed in turns, {len(ab['runs']) // 2} runs each (`benchmarks/results/torch_window_trim_ab.json`): "
                 f"window `num_workers=2` at {f(m[b]['ratio_w2_vs_w0'])}× `num_workers=0` at {b} and "
                 f"{f(m[a]['ratio_w2_vs_w0'])}× at {a} (p = {f(p['ratio_w2_vs_w0'])}"
                 + ("" if p["ratio_w2_vs_w0"] < 0.1 else ": no change measured within this machine's spread") + ").")
    return line + _arena_line() + _recheck16_line() + _recheck16_line("torch_window_recheck16_s21", "Again, sixteen runs")


def _arena_line() -> str:
    """Window workers decoding into a shared arena, against copying into the ring, timed in turns
    (``torch_window_arena_ab.json``)."""
    ab = load("torch_window_arena_ab")
    if not ab:
        return ""
    m, p, b, a = ab["median"], ab["mann_whitney_p"], ab["before"], ab["after"]
    return (f" With each window worker decoding into its part of a shared arena, a batch's values and indices "
            f"no longer copied (`benchmarks/results/torch_window_arena_ab.json`, {len(ab['runs']) // 2} runs each in "
            f"turns, lirs at {b} and {a}): a worker's share of the pass spent packing {f(m[b]['worker_pack_share'])} → "
            f"{f(m[a]['worker_pack_share'])} (p = {f(p['worker_pack_share'], '.4f')}), the CPU of the pass against "
            f"`num_workers=0`'s {f(m[b]['cpu_s_w2_vs_w0'])}× → {f(m[a]['cpu_s_w2_vs_w0'])}× (p = {f(p['cpu_s_w2_vs_w0'])}), "
            f"`num_workers=2` at {f(m[b]['ratio_w2_vs_w0'])}× → {f(m[a]['ratio_w2_vs_w0'])}× `num_workers=0` "
            f"(p = {f(p['ratio_w2_vs_w0'])}; goal ≥ 0.95: {goal(m[a]['ratio_w2_vs_w0'] >= 0.95)}).")


def _recheck16_line(name: str = "torch_window_recheck16", lead: str = "Sixteen runs one after the other") -> str:
    """Sixteen runs of one tree, one after the other (``NAME.json``): the 2-worker window ratio's
    spread from run to run on one day."""
    rc = load(name)
    if not rc:
        return ""
    m, (lo, hi), r = rc["median"], rc["range"]["ratio_w2_vs_w0"], rc["lists"]["ratio_w2_vs_w0"]
    day = rc["runs"][0]["result"]["date"][:10]
    return (f" {lead} at lirs {rc['code_commit']} (`benchmarks/results/{name}.json`, "
            f"{day}, `num_workers=0` at {f(m['records_per_s_w0'] / 1e6)}M records/s): `num_workers=2` at "
            f"{f(m['ratio_w2_vs_w0'], '.3f')}× `num_workers=0` (from {f(lo, '.3f')}× to {f(hi, '.3f')}×, {sum(x >= 0.95 for x in r)} of {len(r)} runs at "
            f"0.95× or more; goal ≥ 0.95: {goal(m['ratio_w2_vs_w0'] >= 0.95)} that day), the workers' CPU "
            f"{f(m['cpu_s_w2_vs_w0'])}× `num_workers=0`'s: the goal sits within this machine's spread from day to day.")


def _two_workers(r) -> str:
    """``X× `num_workers=0` (goal ≥ G: met)`` of a bench_torch.py result's 2-worker rate."""
    x, g = r["ratio_vs_w0"]["torch_w2"], r["goal_ratio_workers_vs_w0"]
    return f"{f(x)}× `num_workers=0` (goal ≥ {g}: {goal(x >= g)})"


def sec_tfrecord():
    d = load("tfrecord")
    if not d:
        return None
    rows = [[e["granularity"] + (", `verify=True`" if e["verify"] else ""), f(e["read_Bps"] / 1e9),
             f(e["read_vs_fio_rand64k"]), f"{e['records_per_s'] / 1e3:.0f}k", f(e["amplification"], ".3f")]
            for e in d["epochs_cold"]]
    return (f"### TFRecord\n\n{d['file']['bytes'] / 1e9:.1f} GB of TFRecord ({d['file']['records']:,} records, "
            f"about {d['file']['mean_record_bytes'] / 1e3:.1f} kB), both CRCs checked ({source(d)}). Cold "
            f"`lirs index`: {d['index_cold_Bps'] / 1e9:.2f} GB/s, {f(d['index_cold_vs_fio_seq'])}× fio's sequential "
            f"read of the same file; warm {d['index_warm_Bps'] / 1e9:.1f} GB/s. One cold epoch delivering payloads "
            f"as `bytes`, against fio's 64 KiB random reads at QD 32 "
            f"({d['fio_rand64k_qd32_Bps'] / 1e9:.2f} GB/s):\n\n"
            + table(["epoch", "read GB/s", "× fio 64 KiB", "records/s", "amplification"], rows))


def sec_engines():
    d = load("engines")
    if not d:
        return None
    parts = []
    if "engines" in d:
        label = {"uring_4k_qd32": ("uring", "4 KiB random, QD 32", "reads/s", "fio io_uring QD 32"),
                 "uring_4k_qd128": ("uring", "4 KiB random, QD 128", "reads/s", "fio io_uring QD 128"),
                 "uring_64k_qd32_bandwidth": ("uring", "64 KiB random, QD 32", "MB/s", "fio io_uring QD 32"),
                 "threads_4k_32": ("threads", "4 KiB random, 32 threads", "reads/s", "fio psync, 32 jobs"),
                 "aiofiles_4k_64": ("aiofiles", "4 KiB random, 64 in flight", "reads/s", "fio io_uring QD 32")}
        rows = []
        for k, (eng, what, unit, ref) in label.items():
            p = d["engines"].get(k)
            if not p:
                continue
            scale = 1e6 if unit == "MB/s" else 1
            rows.append([eng, what, f"{p['engine_median'] / scale:,.0f}", f"{(p['fio_median'] or 0) / scale:,.0f}",
                         ref, f(p.get("ratio_median")), f"≥ {p['goal_ratio']:.2f}: {goal(p['meets_goal'])}"
                         if "goal_ratio" in p else "reported"])
        kept = {k["section"]: k for k in d.get("kept_from_previous_run", [])}
        src = source(kept["engines"]) if "engines" in kept else source(d)
        parts.append(f"### Engines against fio\n\nO_DIRECT reads of a {d.get('file_bytes', 0) / 1e9:.0f} GB file, "
                     f"each point the median of interleaved (fio, engine) pairs ({src}). An engine call "
                     f"reads one batch of extents sorted by offset, as the planner emits them; fio's reads "
                     f"come in random order:\n\n"
                     + table(["engine", "workload", "engine", "fio", "fio run", "ratio", "goal"], rows))
    ld = d.get("loader")
    if ld and "runs" in ld:
        rows = [[f(r.get("compute_ms"), ".1f"), f(r.get("compute_ms_over_load_ms")), f(r["records_per_s"], ",.0f"),
                 f(r["mb_per_s"], ",.0f"), f(100 * r["stall_fraction"], ".1f") + " %"] for r in ld["runs"]]
        parts.append(f"Loader (`lirs epoch`, group granularity, {ld['file_bytes'] / 1e6:.0f} MB kdd-like file, "
                     f"{source(d) if 'loader' not in kept else source(kept['loader'])}, "
                     f"{ld['load_ms_per_batch_no_compute']:.2f} ms load per batch with no compute): stall "
                     f"fraction when the training step takes as long as loading — goal ≤ 5 %: "
                     f"{goal(ld['meets_goal'])}.\n\n"
                     + table(["compute ms/batch", "compute / load", "records/s", "MB/s", "stall"], rows))
    memfs = _memfs_part()
    if memfs:
        parts.append(memfs)
    return "\n\n".join(parts) if parts else None


def _memfs_part() -> str | None:
    """Engine settings on a file held in memory (tmpfs), and what the default chose there."""
    d = load("memfs_engines")
    if not d:
        return None
    names = {"buffered": "`buffered`", "uring_copy": "`uring`, `direct=False`", "uring_direct": "`uring`, `direct=True`",
             "auto": "default (`auto`)"}
    rows = []
    for gran, by in d["summary"].items():
        for k, r in by.items():
            what = names.get(k, k) + (f": {r['engine']}{' with O_DIRECT' if r['direct'] else ''}" if k == "auto" else "")
            rows.append([gran, what, f(r["records_per_s"] / 1e6), f(r["cpu_us_per_record"]), f(r.get("vs_buffered"))])
    return (f"### Files held in memory\n\nA {d['data']['bytes'] / 1e6:.0f} MB kdd-like file in /dev/shm (tmpfs, kernel "
            f"{d['kernel']}, which takes O_DIRECT), batch {d['batch_size']}, each setting in a fresh process, "
            f"{d['rounds']} rounds in turns, the median epoch of {d['epochs']} a run ({source(d)}). M records/s and CPU "
            f"µs per record, medians over the rounds; the rate against `buffered` of the same round (median):\n\n"
            + table(["granularity", "engine", "M records/s", "CPU µs/record", "vs buffered"], rows))


def sec_plan():
    d = load("plan")
    if not d:
        return None
    amp = d["amplification"]
    rows = []
    for g in ("instance", "page", "group", "window"):
        rows.append([g] + [f(amp[n][g]["amplification"], ".3f") for n in ("kdd", "webspam")])
    sw = amp["kdd"].get("group_sweep", {})
    swrows = [[f"{int(k) // 1024} KiB", f(v["amplification"], ".3f"), f(v["model_1_plus_4k_over_G"], ".3f")]
              for k, v in sw.items()]
    out = [f"### Planning: read amplification, plan time, memory\n\n({source(d)}) Read amplification "
           f"(bytes read / record bytes) of one epoch, batch {d['batch_size']}, groups of "
           f"{d['group_bytes'] // 1024} KiB, windows of {d['window']} groups, on a kdd-like file "
           f"({amp['kdd']['mean_record_bytes']:.0f} B/record) and a webspam-like file "
           f"({amp['webspam']['mean_record_bytes'] / 1e3:.1f} kB/record):\n\n"
           + table(["granularity", "kdd-like", "webspam-like"], rows)]
    if swrows:
        out.append("Group size against the model 1 + 4 KiB/G (kdd-like):\n\n"
                   + table(["group", "amplification", "1 + 4 KiB/G"], swrows))
    pt = d.get("plan_time")
    if pt:
        rows = []
        for k, c in pt["configs"].items():
            rows.append([k.replace("/", ", "), f(c["plan_total_s"]), f(c.get("read_s_at_fio"), ",.1f"),
                         f(c.get("plan_over_read"), ".3f")])
        out.append(f"Planning a whole epoch of {pt['records']:,} kdd-like records (every batch's records and "
                   f"extents), against the time the device needs to read what the plan asks for at fio's "
                   f"rate measured in the same run ({f(d['fio'].get('iops_4k_qd32'), ',.0f')} 4 KiB reads/s, "
                   f"{mb(d['fio'].get('bw_64k_qd32'))} MB/s in 64 KiB reads). The Loader plans batch by batch "
                   f"on its pool, overlapped with reads:\n\n"
                   + table(["granularity, permutation", "plan s", "read s at fio", "plan / read"], rows))
    for name in ("plan_gil", "plan_gil_span"):
        pg = load(name)
        if not pg:
            continue
        cells = [f"{r['granularity']} with {r['holders']} {r['this_records_per_s'] / 1e6:.2f}M against "
                 f"{r['against_records_per_s'] / 1e6:.2f}M ({r['this_vs_against']:.2f}×)"
                 for r in pg["rows"] if r.get("this_vs_against")]
        out.append(f"The planning thread's walk of an epoch (records/s) while K other threads hold the GIL in turns "
                   f"({pg['hold_us']} µs each in a call that sleeps, then {pg['gap_us']} µs without: contention "
                   f"without taking the cores; `benchmarks/bench_plan_gil.py`, {source(pg)}), lirs at "
                   f"{pg.get('code_commit', '?')} ({pg.get('change', '?')}) against "
                   f"{pg.get('against_commit', '?')}, medians of {pg['rounds']} turns, by K: " + "; ".join(cells) + ".")
    m = d.get("memory")
    if m:
        rows = []
        for k, c in m["configs"].items():
            rows.append([k.replace("/", ", "), f(m["offsets_bytes_per_record"]), f(c["plan_tables_bytes_per_record"], ".3f"),
                         f(c["index_plus_plan_bytes_per_record"]), goal(c["meets_goal"])])
        out.append(f"Memory per record of index + assignment, {m['records']:,} records (the LIRS paper: "
                   f"{m['paper_bytes_per_record']:.0f} B/record, 8 B offset + 8 B assignment; goal ≤ "
                   f"{m['goal_bytes_per_record']:.0f}). Labels add {m['labels_bytes_per_record']:.1f} B/record.\n\n"
                   + table(["granularity, permutation", "offsets B/rec", "plan B/rec", "total B/rec", "≤ 8 B"], rows))
    return "\n\n".join(out)


def sec_train_svm():
    d = load("train_svm")
    if not d:
        return None
    out = [f"### SVM training under each order (the paper's Fig. 9 and Table 3)\n\n{d.get('solver', '')}; "
           f"({source(d)}). Epochs each method needs to reach the target objective (the best "
           f"BMF reaches in {d['settings']['epochs']} epochs), pre-processing, mean epoch time (loading "
           f"overlapped with compute), total time to the target, final relative objective difference "
           f"(f − f*)/f* and memory:"]
    for name, ds in d["datasets"].items():
        rows = []
        for m, r in ds["methods"].items():
            amp = r["per_epoch"][-1].get("amplification")
            rows.append([m, r.get("epochs_to_target") or "not reached", f(r.get("pre_s")), f(r["mean_epoch_s"]),
                         f(amp) if amp else "–", f(r.get("total_to_target_s"), ".1f"),
                         f(r["per_epoch"][-1]["rel_diff"], ".2e"), f(r["memory_bytes"] / 1e6, ",.1f")])
        out.append(f"**{name}** file ({ds['n']:,} records, {ds['file']['bytes'] / 1e6:.0f} MB), nvme:\n\n"
                   + table(["method", "epochs to target", "pre s", "epoch s", "ampl.", "total s", "final (f−f*)/f*",
                            "memory MB"], rows))
        h = ds.get("hdd")
        if h and "methods" in h:
            rows = [[m, r["epochs_to_target"] or "not reached", f(r["pre_s"], ".1f"),
                     f(r["epoch_s"], ",.1f") + (" (extrapolated)" if r["extrapolated"] else ""),
                     f(r["total_to_target_s"], ",.0f")] for m, r in h["methods"].items()]
            out.append(f"Same file on the hdd envelope of `lirs bench` ({h['envelope']['read_iops']} read IOPS, "
                       f"{h['envelope']['read_bps'] / 1e6:.0f} MB/s, blkio throttle on this process only): the "
                       f"orders are the same, so the epochs to the target are those above; pre-processing "
                       f"(index scan from a cold cache, BMF's rewrite) and one epoch per method are timed under "
                       f"the throttle, epochs longer than {h['budget_s']:g} s extrapolated from the records "
                       f"trained:\n\n" + table(["method", "epochs to target", "pre s", "epoch s", "total s"], rows))
        elif h:
            out.append(f"hdd envelope: skipped ({h.get('skipped')}).")
    p = png("train_svm")
    if p:
        out.append(f"![objective per epoch]({p})")
    return "\n\n".join(out)


def sec_train_dnn():
    d = load("train_dnn")
    if not d:
        return None
    rows = []
    for m, r in d["methods"].items():
        last = r["per_epoch"][-1]
        rows.append([m, r.get("epochs_to_target") or "not reached", f(min(p["val_loss"] for p in r["per_epoch"]), ".4f"),
                     f(last.get("test_acc"), ".4f"), f(r.get("mean_epoch_s"), ".1f")])
    out = [f"### DNN training (the paper's Tables 6 and 7)\n\n{d['model']}, {d['train_records']:,} label-sorted "
           f"higgs-like records, batch {d['batch_size']}, {d['epochs']} epochs ({source(d)}). Epochs to reach the "
           f"shuffle buffer's best validation loss, best validation loss, test accuracy after the last epoch, "
           f"epoch time:\n\n" + table(["method", "epochs to target", "best val. loss", "test acc.", "epoch s"], rows)]
    p = png("train_dnn")
    if p:
        out.append(f"![validation loss per epoch]({p})")
    return "\n\n".join(out)


def sec_shuffle():
    d = load("shuffle")
    if not d:
        return None
    r, dev, ra = d["runs"], d["device"], d["ratios"]

    def run_row(key, label):
        x = r.get(key)
        if not x:
            return None
        vs = ra.get(f"{key}_vs_device_limit")
        return [label, f"{x['seconds']:.1f} (pass 1 {x['seconds_pass1']:.1f}, pass 2 {x['seconds_pass2']:.1f})",
                f(vs, ".2f") + "×" if vs is not None else "–", mb(x["peak_rss_delta"]), mb(x["memory"])]

    rows = [row for row in (run_row("lirs", f"lirs shuffle, {r['lirs']['piles']} piles"),
                            run_row("lirs_index", "same, with `--index`"),
                            run_row("lirs_low_memory", "lirs shuffle, small `--memory`")) if row]
    if d.get("shuf"):
        rows.append(["GNU `shuf` + `sync` (whole file in RAM)", f"{d['shuf']['seconds']:.1f}",
                     f"lirs / shuf = {f(ra.get('lirs_vs_shuf'))}", mb(d["shuf"].get("max_rss")), "–"])
    if dev.get("limit_seconds"):
        rows.append(["device limit: 2 reads + 2 writes at fio's sequential bandwidth", f"{dev['limit_seconds']:.1f}",
                     "1.00×", "", ""])
    lim = ra.get("lirs_vs_device_limit")
    return (f"### `lirs shuffle`\n\nA {d['file_bytes'] / 1e9:.1f} GB kdd-like file ({d['records']:,} records), "
            f"page cache dropped before each run ({source(d)}); fio: read {mb(dev.get('read_bytes_per_s'))} MB/s, "
            f"write {mb(dev.get('write_bytes_per_s'))} MB/s. Goal ≤ {d['goal_lirs_vs_device_limit']}× the device "
            f"limit: {goal(lim is not None and lim <= d['goal_lirs_vs_device_limit'])}."
            + (f" {d['shuf_note']}." if not d.get("shuf") else "") + "\n\n"
            + table(["run", "seconds", "vs device limit", "peak RSS MB (above baseline)", "--memory MB"], rows))


def _bench_files():
    out = {}
    for name in ("kdd", "webspam", "higgs"):
        d = load(f"bench_{name}")
        if d:
            out[name] = d
    return out


def sec_bench():
    ds = _bench_files()
    if not ds:
        return None

    def gval(d, dev, key):
        g = d.get("goals", {}).get(dev, {}).get(key)
        return None if not g else g.get("value")

    names = list(ds)
    first = next(iter(ds.values()))
    rows = []
    for key, label in (("instance_vs_fio_iops", "lirs instance / fio 4 KiB IOPS (goal ≥ 0.9)"),
                       ("instance_reads_only_vs_fio_iops", "… the same plan, reads only"),
                       ("group_vs_fio_bandwidth", "lirs group / fio bandwidth (goal ≥ 0.85)"),
                       ("group_reads_only_vs_fio_bandwidth", "… the same plan, reads only"),
                       ("group_window_vs_torch", "lirs group/window ÷ torch DataLoader, records/s (goal ≥ 10)")):
        vals = [gval(ds[n], "nvme", key) for n in names]
        if any(v is not None for v in vals):
            rows.append([label] + [f(v) for v in vals])
    for dev in ("nvme", "ssd", "hdd"):
        recs = [ds[n].get("recommendation", {}).get(dev, {}).get("config") for n in names]
        if any(recs):
            rows.append([f"recommended on {dev}"] + [r or "–" for r in recs])
    total = sum(d.get("benchmark", {}).get("seconds", 0) for d in ds.values())
    out = [f"### `lirs bench` on this machine\n\n{len(ds)} files of about "
           f"{first['data'].get('file_bytes', 0) / 1e9:.1f} GB, envelopes nvme/ssd/hdd, budget "
           f"{first['settings'].get('budget_s', '?')} s per configuration ({source(first)}, "
           f"{total / 60:.0f} minutes in all). Ratios on the nvme envelope:\n\n"
           + table(["", *[f"{n}-like" for n in names]], rows)]
    for n, d in ds.items():
        rows = []
        for r in d["rows"]:
            if r.get("status") not in (None, "ok"):
                rows.append([r["device"], r["name"], "–", "–", "–", "–", r.get("note") or r.get("status")])
                continue
            ep = r.get("epoch_s")
            rows.append([r["device"], r["name"], ("~" if r.get("extrapolated") else "") + f(ep, ",.1f"),
                         f(r.get("records_per_s"), ",.0f"), f(r.get("mb_per_s"), ",.0f"),
                         f(r.get("amplification")), f(r.get("ratio"))])
        recs = "; ".join(v.get("text", "") for v in d.get("recommendation", {}).values())
        out.append(f"<details><summary>{n}-like: every row ({d['data'].get('records', 0):,} records)</summary>\n\n"
                   + table(["device", "configuration", "epoch s", "records/s", "MB/s", "ampl.", "× bound"], rows)
                   + f"\n\n{recs}\n\n</details>")
        p = png(f"bench_{n}")
        if p:
            out.append(f"![lirs bench, {n}-like]({p})")
    return "\n\n".join(out)


def sec_quality():
    d = load("quality")
    if not d:
        return None
    st, ideal, c, fl = d["strategies"], d["ideal"], d["config"], d["file"]

    def seg(name):
        return f(st[name]["segments_seen_1pct"], ".3f") if name in st else "–"

    out = [f"### How random is each strategy (`lirs quality`)\n\nA label-sorted kdd-like file ({fl['records']:,} "
           f"records, {fl['bytes'] / 1e6:.0f} MB), batch {c['batch_size']}, {c['epochs']} epochs, memory budget "
           f"{c.get('memory')} of the data ({c['params']['memory_bytes'] / 1e6:.1f} MB) for every buffer, block "
           f"or shard ({source(d)}). Columns: share of the {c['segments']} file segments seen after 1 % of an "
           f"epoch, share of the epoch drawn before both labels were seen, label entropy per batch, mean "
           f"displacement and rank correlation with file order, batch pairs that meet again next epoch (× the "
           f"uniform rate), Streaming's entropy, in-batch neighbours from one 64 KiB group, the p-values of "
           f"the three uniformity tests (uniform = every p ≥ {c['pass_p']:g}, over 10 epochs or more), memory, and I/O per epoch.",
           d["table_markdown"]]
    if "bmf" in st:
        out.append(f"After 1 % of an epoch a uniform permutation has seen {f(ideal['segments_seen_1pct'], '.3f')} of the "
                   f"file's segments; the shuffle buffer {seg('shuffle_buffer')}, Deep Lake {seg('deeplake')}, "
                   f"Streaming py1e {seg('streaming_py1e')}, lirs window {seg('window')} and lirs instance "
                   f"{seg('instance')}. BMF's batch mates meet again "
                   f"{f(st['bmf'].get('repeat_pairs_vs_ideal'), '.1f')}× as often as under a uniform order.")
    p = png("quality")
    if p:
        out.append(f"![shuffle quality]({p})")
    return "\n\n".join(out)


_FRONTIER_NAMES = {"window": "lirs window", "shuffle_buffer": "shuffle buffer", "streaming_py1e": "Streaming py1e",
                   "streaming_py1br": "Streaming py1br", "deeplake": "Deep Lake", "ffcv_quasi_random": "FFCV quasi-random",
                   "corgipile": "CorgiPile", "corgi2": "Corgi²"}


def frontier_at(d, strategy: str, memory: str) -> dict | None:
    """The frontier row of ``strategy`` at budget label ``memory``."""
    return next((r for r in d["rows"] if r["strategy"] == strategy and r["memory"] == memory), None)


def sec_frontier():
    d = load("quality_frontier")
    if not d:
        return None
    fl, c = d["file"], d["config"]
    labels = [b["memory"] for b in c["budgets"]]
    rows = []
    for st in c["strategies"]:
        cells = []
        for m in labels:
            r = frontier_at(d, st, m)
            cells.append("–" if r is None else f"{r['pairs_again_x']:.3g} / {r['same_group_x']:.3g}")
        rows.append([_FRONTIER_NAMES.get(st, st)] + cells)
    w = frontier_at(d, "window", "5%")
    t = d.get("targets", {})
    out = [f"### Randomness against memory (`lirs quality --memory ...`)\n\nA label-sorted kdd-like file "
           f"({fl['records']:,} records, {fl['bytes'] / 1e6:.0f} MB), batch {c['batch_size']}, {c['epochs']} "
           f"epochs, the same memory budget M for every strategy ({source(d)}). Each cell: batch pairs that meet "
           f"again next epoch / neighbours in a batch from one 64 KiB group, both × a uniform order (1 = uniform). "
           f"A lirs window of M bytes deals each group's records over about M / batch bytes batches, so pairs "
           f"again fall as 1 + group bytes × data / M² and same-group as data / M.",
           table(["strategy"] + labels, rows)]
    if w:
        ok = "meets" if t.get("all_met") else "misses"
        out.append(f"At M = 5% of the data ({w['memory_bytes'] / 1e6:.0f} MB) lirs window {ok} the project's "
                   f"targets: pairs again {w['pairs_again_x']:.3f}× (≤ 1.1), same group {w['same_group_x']:.1f}× "
                   f"(≤ 25), label entropy per batch {w['batch_entropy']:.3f} bits (uniform "
                   f"{d['ideal']['batch_entropy']:.3f}; ≥ 0.99), reading {w['read_x']:.3f}× the data (≤ 1.08) with "
                   f"{100 * w['large_read_share']:.2f}% of the bytes in reads of at least 64 KiB. "
                   f"What memory means for each strategy is in the JSON (`config.memory_meaning`).")
    p = png("quality_frontier")
    if p:
        out.append(f"![randomness against memory]({p})")
    return "\n\n".join(out)


def sec_window():
    d = load("window")
    if not d:
        return None
    rows = [[r["config"], f(r["epoch_s"]), f(r["vs_group"]), f"{r['rss_over_baseline'] / 2**20:.0f}",
             "–" if not r.get("window_bytes") else f"{r['rss_over_baseline'] / r['window_bytes']:.1f}"]
            for r in d["rows"]]
    return (f"### What a window's memory costs\n\nOne epoch with CSR decoding of a {d['data']['bytes'] / 1e6:.0f} MB "
            f"kdd-like file, warm cache, batch {d['batch_size']} ({source(d)}). `× group`: the group epoch's time "
            f"over this one's, same run; memory: peak RSS above a process that planned without reading. A window "
            f"epoch here held {held_windows(d)}: the one consumed, the next one read meanwhile and, where the "
            f"reads wait for a device or on 8 cores or more, the one after; raw bytes while they decode, then "
            f"their decoded rows.\n\n"
            + table(["configuration", "epoch s", "× group", "MiB held", "÷ window bytes"], rows))


def held_windows(d) -> str:
    """"two windows" / "three windows (engine uring)": what the run's window epochs held, where its
    JSON records it (runs before ``windows_in_flight`` was recorded held two)."""
    got = {(r.get("windows_in_flight"), r.get("engine")) for r in d["rows"] if r.get("window")}
    n, eng = next(iter(got)) if len(got) == 1 else (None, None)
    word = {2: "two", 3: "three"}.get(n or 2, str(n))
    return f"{word} windows" + (f" (engine `{eng}`)" if eng else "")


def sec_cores():
    d = load("cores")
    if not d:
        return None
    rows = [[r["granularity"], r["cores"], r["workers"], f(r["epoch_s"]), f"{r['records_per_s'] / 1e3:.0f}k",
             f(r["speedup_vs_1_core"]), f"{100 * r['stall_share']:.0f}%"] for r in d["rows"]]
    return (f"### The pool on 1, 2, ... cores\n\nAn epoch with CSR decoding and no training step under `taskset`, "
            f"{d['data']['bytes'] / 1e6:.0f} MB kdd-like, warm cache ({source(d)}). The pool has a thread per "
            f"usable core and one more; the stall is the share of the epoch the consumer waited.\n\n"
            + table(["granularity", "cores", "threads", "epoch s", "records/s", "× 1 core", "stall"], rows))


def sec_cores_gil():
    d = load("cores_gil")
    if not d:
        return None
    m = d.get("machine", {})
    rows = [[r["mode"], r["granularity"], r["cores"], r.get("engine", ""), f"{r['records_per_s'] / 1e6:.2f}",
             f(r.get("cpu_us_per_record")),
             "–" if r.get("gil_share") is None else f"{100 * r['gil_share']:.0f}%",
             "–" if not r.get("ceiling_records_per_s") else f"{r['ceiling_records_per_s'] / 1e6:.1f}",
             gil_roles(r)]
            for r in d["rows"]]
    return (f"### The GIL's share and the ceiling it implies\n\nOne epoch with CSR decoding and no training "
            f"step, {d['data']['bytes'] / 1e6:.0f} MB kdd-like, batch {d['batch_size']}, under `taskset` "
            f"({source(d)}; a {m.get('cpus', '?')}-core machine). Page cache: the file in /dev/shm, engine "
            f"`buffered`; device: the file on disk, the default engine. The GIL's share of the wall time comes "
            f"from `py-spy record --gil{gil_mode(d)}`{gil_records(d)}; the ceiling (records/s divided by that share) is what "
            f"the pipeline could reach with every core it wants while the GIL stays this busy."
            + (f" {d['context']}" if d.get("context") else "") + "\n\n"
            + table(["mode", "granularity", "cores", "engine", "M records/s", "CPU µs/record", "GIL held",
                     "ceiling M/s", "held by (% of wall)"], rows) + gil_blocking_note() + work_note())


def work_note() -> str:
    """The Python work per batch, counted (``work.json``): this tree, and against an earlier one."""
    w = load("work")
    if not w:
        return ""
    against = w.get("against")
    head = ["granularity", "bytecodes", "Python calls", "C calls"]
    rows = []
    for g, r in w["this"].items():
        row = [g] + [f(r[k], ".0f" if k == "bytecodes" else ".1f") for k in ("bytecodes", "python_calls", "c_calls")]
        if against:
            a, q = against[g], w["this_vs_against"][g]
            row += [f"{a['bytecodes']:.0f} / {a['python_calls']:.1f} / {a['c_calls']:.1f}",
                    " / ".join(f(q[k], ".2f") for k in ("bytecodes", "python_calls", "c_calls"))]
        rows.append(row)
    if against:
        head += [f"lirs at {next(iter(against.values()))['commit']}", "ratio"]
    this = next(iter(w["this"].values()))["commit"]
    return (f"\n\nThe Python work behind that share, per batch of one epoch, every thread, counted (not timed) under "
            f"`sys.settrace` ({source(w)}; lirs at {this}{'' if not against else ', and the tree it is compared with'}; "
            f"{w['data']['bytes'] / 1e6:.0f} MB kdd-like in /dev/shm, engine `buffered`, batch 1024). Each Python "
            f"step on a read step's path runs after the step's bytes went through the caches, so it costs "
            f"several times what it costs alone:\n\n" + table(head, rows) + _work_ab())


# A/B runs of the GIL's share on 2 cores behind the counted work: (JSON, trees compared)
WORK_AB = ("cores_gil_ab_work", "cores_gil_ab_window_units")


def _work_ab() -> str:
    """The GIL's share of two trees, timed in turns, for each change the counted work follows (``WORK_AB``)."""
    notes = []
    for name in WORK_AB:
        ab = load(name)
        if not ab:
            continue
        first = ab["runs"][0]["code_commit"]  # older files: the first round ran the tree before first
        before = ab.get("before", first)
        after = ab.get("after") or next(r["code_commit"] for r in ab["runs"] if r["code_commit"] != before)
        parts = [f"{g} {100 * r['gil_share']['before']:.1f}% → {100 * r['gil_share']['after']:.1f}% "
                 f"(p = {r['gil_share']['mann_whitney_p']:.2f}; records/s {r['records_per_s']['ratio']:.2f}×, "
                 f"p = {r['records_per_s']['mann_whitney_p']:.2f})"
                 for g, r in ab["after_vs_before"].items()]
        notes.append(f"lirs at {before} → {after}, {len(ab['runs']) // 2} runs each (`{name}.json`): " + "; ".join(parts))
    if not notes:
        return ""
    return ("\n\nThe GIL's share on 2 cores, trees run in turns (Mann-Whitney p): " + ". ".join(notes)
            + ". Where p is large, the counted work's direction is within this machine's spread from run to run.")


def gil_roles(row) -> str:
    """The GIL's holders by thread role (consumer, planning, pool, decode), % of wall time: runs
    whose py-spy record named the threads; "–" for older ones."""
    th = ((row.get("gil") or {}).get("holders") or {}).get("threads")
    return ", ".join(f"{r} {100 * v['share_of_wall']:.0f}" for r, v in th.items()) if th else "–"


def gil_blocking_note() -> str:
    """The shares of the same code sampled with the process stopped for each sample (py-spy's
    default), when that run was kept (``cores_gil_blocking.json``)."""
    b = load("cores_gil_blocking")
    if not b:
        return ""
    got = ", ".join(f"{r['granularity']} {100 * r['gil_share']:.0f}%" for r in b["rows"] if r.get("gil_share") is not None)
    mode, n = b["rows"][0]["mode"], b["rows"][0]["cores"]
    # the blocking run is of the code before instance steps of copied reads (cores_gil_before_copies)
    was = load("cores_gil_before_copies")
    running = "" if not was else " (sampled running: " + ", ".join(
        f"{r['granularity']} {100 * r['gil_share']:.0f}%" for r in was["rows"]
        if r["mode"] == mode and r["cores"] == n and r.get("gil_share") is not None) + ", `cores_gil_before_copies.json`)"
    return (f"\n\nThe code before instance steps of copied reads, with py-spy stopping the process for each sample, "
            f"its default ({source(b)}): {got} ({mode}, {n} cores){running}. Stopped 400 times a second, "
            f"a window epoch read as holding the GIL more than twice as long." + gil_calibration_note())


def gil_calibration_note() -> str:
    """What py-spy read of canned processes of known GIL share, both ways (``gil_calibration.json``)."""
    c = load("gil_calibration")
    if not c:
        return ""
    got = "; ".join(f"{r['process']} ({r['expected']:g}): "
                    + "/".join("–" if x["share"] is None else f"{x['share']:.2f}"
                               for x in c["rows"] if x["process"] == r["process"])
                    for r in c["rows"] if not r["blocking"])
    return (f" Canned processes whose share is known, read running/stopped ({source(c)}): {got}.")


def gil_mode(d) -> str:
    """The py-spy flag of a run's GIL records: `--nonblocking` (the process is not stopped for each
    sample) unless the run stopped it (``blocking``; runs before that option did)."""
    m = d.get("gil_method") or {}
    return "" if m.get("blocking", True) else " --nonblocking"


def gil_records(d) -> str:
    """How many GIL records each share is the median of, when more than one."""
    n = (d.get("gil_method") or {}).get("records", 1)
    return "" if n <= 1 else f" (the median of {n} records of {d['gil_method']['duration_s']:g} s each)"


def _consumer_ab() -> str:
    """The consumer's own cost a batch before and after it took a shared step's batches as one."""
    d = load("consumer_ab_units")
    if not d:
        return ""
    (b, sb), (a, sa) = d["summary"].items()
    per = ", ".join(f"{g} {sb[g]['own']['median_cpu_us_per_batch']:.1f} µs against "
                    f"{sa[g]['own']['median_cpu_us_per_batch']:.1f}" for g in sb)
    n = len(d["runs"]) // 2
    return (f" Before the consumer took a shared step's batches as one (lirs at {b}; after: {a}), steps done, "
            f"medians of {n} rounds in turns: {per} (`benchmarks/results/consumer_ab_units.json`).")


def sec_consumer():
    d = load("consumer")
    if not d:
        return None
    own = all("own" in v for v in d["consumer"].values())
    rows = [[g, f(v["inline"]["cpu_us_per_batch"], ".1f"), f(v["ahead"]["cpu_us_per_batch"], ".1f"),
             f(d["consumer_cpu_ahead_vs_inline"][g]), f(v["inline"]["records_per_s"] / 1e6),
             f(v["ahead"]["records_per_s"] / 1e6)]
            + ([f(v["own"]["cpu_us_per_batch"], ".1f"), f(v["own"]["records_per_s"] / 1e6)] if own else [])
            for g, v in d["consumer"].items()]
    fb = d["first_batch"]
    return (f"### The consumer's thread and the first batch\n\nCPU of the consumer's thread per batch, "
            f"batch plans made on it or ahead on a thread of their own, the pool {d['pool_threads']} threads in "
            f"both, engine `{d['engine']}`, {d['data']['bytes'] / 1e6:.0f} MB kdd-like in the page cache, medians "
            f"of {d['repeats']} interleaved epochs ({source(d)}):\n\n"
            + table(["granularity", "µs/batch, inline", "µs/batch, ahead", "ahead / inline", "M rec/s, inline",
                     "M rec/s, ahead"] + (["µs/batch, steps done", "M rec/s, steps done"] if own else []), rows)
            + ("\n\n*Steps done*: every read step decoded before the consumer asks for it, plans made ahead: "
               "the consumer's own cost a batch, and the rate it reaches alone where the pool keeps up "
               "(many cores). In the other columns a group or instance consumer runs queued read steps "
               "itself whenever it would wait, and that is most of its CPU." if own else "")
            + _consumer_ab()
            + f"\n\nA fresh process's first group batch (numba's cache warm) with the cached kernels loaded "
              f"while the Loader opens: {fb['preload']['first_batch_s'] * 1e3:.1f} ms, against "
              f"{fb['off']['first_batch_s'] * 1e3:.1f} ms without (`LIRS_WARMUP=0`): "
              f"{f(d['first_batch_preload_vs_off'])}×.")


# the 16-core GPU machine lent to a session (tools/device_round.sh): the latest lease's JSONs sit in
# results/16cores/ (its A/B calls in ab/N/), the run before this round's pipeline changes beside them as
# *_before.json, the earlier lease of this round in session11/
MANY = "16cores"
LAST_16 = "session11/"  # the earlier lease's run of this round, kept beside the latest
GOALS_16 = {"group": 10e6, "window": 10e6, "instance": 2.5e6}  # records/s, page cache, 16 cores


def machine_16(suffix: str = "", sub: str = "") -> str:
    """The lent machine in words, from the run's machine.txt and its GPU benchmark (``sub``: a folder
    of an earlier lease's run, e.g. ``"session11/"``)."""
    try:
        with open(os.path.join(RESULTS, MANY, f"{sub}machine{suffix}.txt")) as fh:
            txt = fh.read()
    except OSError:
        return "a 16-core machine"
    model = next((ln.split(":", 1)[1].strip() for ln in txt.splitlines() if ln.startswith("Model name")), "")
    gpu = (load(f"{MANY}/{sub}train_gpu{suffix}") or {}).get("device", "")
    gpu = gpu[gpu.find("(") + 1:gpu.rfind(")")] if "(" in gpu else ""
    return "16 cores" + (f" ({model})" if model else "") + (f", an {gpu}" if gpu else "")


def load_cores_16(suffix: str = "", sub: str = ""):
    """The 16-core cores run; granularities its time budget left out are taken from a run made right
    after on the same machine (cores_gil{suffix}_<granularity>.json), where there is one, and a
    16-core cell it left out from the first A/B run of the same tree on that lease (ab/N/cores_ab.json)."""
    d = load(f"{MANY}/{sub}cores_gil{suffix}")
    if not d:
        return None
    d = dict(d, extra=[])
    have = {r["granularity"] for r in d["rows"]}
    for g in ("group", "window", "instance"):
        more = load(f"{MANY}/{sub}cores_gil{suffix}_{g}")
        if g not in have and more:
            d["rows"] = d["rows"] + [r for r in more["rows"] if r["granularity"] == g]
            d["extra"].append((g, more, (f"The {g} rows come from a second run right after on the same machine "
                                         f"({source(more)}), since the first one's time budget ran out before them.")))
    for g in ("group", "window", "instance"):
        ab = next((a for _, a in ([] if suffix or sub else ab_calls_16())
                   if a.get("code_commit") == d.get("code_commit") and _rate(a, g, 16)), None)
        if _rate(d, g, 16) is None and ab:
            d["rows"] = d["rows"] + [r for r in ab["rows"] if r["granularity"] == g and r["cores"] == 16]
            d["extra"].append((g, ab, (f"The {g} cell on 16 cores comes from the first A/B run of the same tree "
                                       "right after (below; no GIL record), since this run's time budget ran "
                                       "out before it.")))
    return d


def _rate(d, gran: str, cores: int):
    return next((r["records_per_s"] for r in (d or {}).get("rows", [])
                 if r["mode"] == "page-cache" and r["granularity"] == gran and r["cores"] == cores), None)


def _ratios(t) -> str:
    return ", ".join(f"{k[7:]}: {v:.2f}×" for k, v in t["ratio_vs_w0"].items())


def cores_16_glance() -> str | None:
    """The README's line on the 16-core run."""
    d = load_cores_16()
    if not d:
        return None
    size = d["data"]["bytes"] / d["data"]["records"]
    parts = []
    for g in ("group", "window", "instance"):
        r16, r8 = _rate(d, g, 16), _rate(d, g, 8)
        if r16:
            parts.append(f"{g} {r16 / 1e6:.2f}M records/s ({r16 * size / 1e9:.2f} GB/s"
                         + (f", {r16 / r8:.2f}× its 8-core rate" if r8 else "") + ")")
    out = (f"On {machine_16()} ({(d.get('date') or '?')[:10]}, lirs at {d.get('code_commit', '?')}, "
           f"`benchmarks/results/{MANY}/`): an epoch from the "
           f"page cache at " + ", ".join(parts) + ".")
    t = load(f"{MANY}/torch")
    if t and t.get("ratio_vs_w0"):
        tw = load(f"{MANY}/torch_window") or {}
        out += (" `make_dataloader` with " + ", ".join(f"{k[7:]} workers {v:.2f}×" for k, v in t["ratio_vs_w0"].items())
                + f" its rate with `num_workers=0` ({t['granularity']}"
                + ("" if not tw.get("ratio_vs_w0") else
                   "; window " + ", ".join(f"{v:.2f}×" for v in tw["ratio_vs_w0"].values())) + ").")
    gpu = load(f"{MANY}/train_gpu")
    if gpu and gpu.get("train_vs_step_or_loader"):
        rate = gpu["records_per_s"]
        out += (f" Training the README's model on the GPU fed by `make_dataloader(device=\"cuda\")`: "
                f"{rate['train'] / 1e6:.2f}M records/s, {gpu['train_vs_step_or_loader']:.2f}× the slower of the "
                f"GPU step alone ({rate['step'] / 1e6:.2f}M) and the Loader alone ({rate['loader'] / 1e6:.2f}M).")
    return out


def cores_16_table() -> str | None:
    """The README's cores table of the 16-core run: records/s by cores, page cache."""
    d = load_cores_16()
    if not d:
        return None
    size = d["data"]["bytes"] / d["data"]["records"]
    counts = sorted({r["cores"] for r in d["rows"] if r["mode"] == "page-cache"})
    rows = [[g] + [f(None if _rate(d, g, c) is None else _rate(d, g, c) / 1e6) for c in counts]
            + [f(None if _rate(d, g, 16) is None else _rate(d, g, 16) * size / 1e9)]
            for g in ("group", "window", "instance") if _rate(d, g, 16)]
    return table(["M records/s, page cache"] + [f"{c} cores" for c in counts] + ["GB/s at 16"], rows)


def sec_cores_16():
    d = load_cores_16()
    if not d:
        return None
    before, last = load_cores_16("_before"), load_cores_16(sub=LAST_16)
    counts = sorted({r["cores"] for r in d["rows"] if r["mode"] == "page-cache"})
    rows = []
    for g in ("group", "window", "instance"):
        rates = [_rate(d, g, c) for c in counts]
        if not any(rates):
            continue
        r8, r16, was, then = _rate(d, g, 8), _rate(d, g, 16), _rate(before, g, 16), _rate(last, g, 16)
        gil = next((r.get("gil_share") for r in d["rows"] if r["mode"] == "page-cache" and r["granularity"] == g
                    and r["cores"] == 16), None)
        rows.append([g] + [f(None if x is None else x / 1e6) for x in rates]
                    + [f(r16 / r8 if r16 and r8 else None), "–" if gil is None else f"{100 * gil:.0f}%",
                       f(None if was is None else was / 1e6)]
                    + ([f(None if then is None else then / 1e6)] if last else [])
                    + [f"{GOALS_16[g] / 1e6:g}M: {goal(bool(r16) and r16 >= GOALS_16[g])}"])
    extra = "".join(" " + why for _, _, why in d["extra"])
    was = "" if not before else (f"; the column \"before\" is the same benchmark on {machine_16('_before')} "
                                 f"with lirs at {before.get('code_commit', '?')}, before this round's pipeline "
                                 f"changes (a read step run by the thread that claims it first, kept decode "
                                 f"threads, a step's Python in kernels, recycled step memory)")
    if last:
        was += (f"; the column \"{LAST_16[:-1]}\" is the run of an earlier lease ({machine_16(sub=LAST_16)}, "
                f"{(last.get('date') or '?')[:10]}, lirs at {last.get('code_commit', '?')}, `{MANY}/{LAST_16}`)")
    text = (f"### Sixteen cores and a GPU\n\nThe same benchmark on {machine_16()}, a machine lent to one "
            f"session ({source(d)}; `tools/device_all.sh`): page cache (the file in /dev/shm, engine `buffered`), "
            f"{d['data']['bytes'] / 1e9:.1f} GB kdd-like, batch {d['batch_size']}, lirs at "
            f"{d.get('code_commit', '?')}. M records/s by cores{was}.{extra}\n\n"
            + table(["granularity"] + [f"{c} cores" for c in counts] + ["8 → 16", "GIL at 16", "before, 16"]
                    + ([f"{LAST_16[:-1]}, 16"] if last else []) + ["goal at 16"], rows))
    for more in (ab_cores_16(), pread_16(), bisect_16()):
        if more:
            text += "\n\n" + more
    t = load(f"{MANY}/torch")
    if t and t.get("ratio_vs_w0"):
        tb = load(f"{MANY}/torch_before")
        tw, twb = load(f"{MANY}/torch_window"), load(f"{MANY}/torch_window_before")
        win = "" if not tw or not tw.get("ratio_vs_w0") else (
            "; with granularity window " + _ratios(tw)
            + ("" if not twb else f" (before: {_ratios(twb)})") + ab_torch_window_16())
        ok = all(v >= 1.0 for x in (t, tw or {}) for v in x.get("ratio_vs_w0", {}).values())
        text += (f"\n\n`make_dataloader` on that machine ({source(t)}; lirs at {t.get('code_commit', '?')}), "
                 f"workers against `num_workers=0` ({t['records_per_s']['torch_w0'] / 1e6:.2f}M records/s), group "
                 f"granularity: " + _ratios(t) + ("" if not tb else f" (before: {_ratios(tb)})") + win
                 + f" (goal ≥ 1.0 for 2, 4 and 8 workers: {goal(ok)}).")
    g = load(f"{MANY}/train_gpu")
    if g and g.get("train_vs_step_or_loader"):
        rate, gb = g["records_per_s"], load(f"{MANY}/train_gpu_before")
        text += (f"\n\nFeeding the GPU ({g['device']}, {source(g)}): the README's `EmbeddingBag` model, its step "
                 f"alone on batches already on the GPU {rate['step'] / 1e6:.2f}M records/s, the Loader alone "
                 f"{rate['loader'] / 1e6:.2f}M, `make_dataloader(device=\"cuda\")` alone (batches moved, no step) "
                 f"{rate['feed'] / 1e6:.2f}M, training fed by it {rate['train'] / 1e6:.2f}M: "
                 f"{g['train_vs_step_or_loader']:.2f}× the slower of the step alone and the Loader alone (goal ≥ "
                 f"0.8: {goal(g['train_vs_step_or_loader'] >= 0.8)})"
                 + ("" if not gb else f"; before ({gb['device']}): step {gb['records_per_s']['step'] / 1e6:.2f}M, "
                                      f"feed {gb['records_per_s']['feed'] / 1e6:.2f}M, training "
                                      f"{gb['records_per_s']['train'] / 1e6:.2f}M, "
                                      f"{gb['train_vs_step_or_loader']:.2f}×")
                 + "." + ab_train_16(g))
    return text


def _earlier(prefix: str, sub: str = "") -> list:
    """``(commit, result)`` of the earlier trees a same-machine A/B (tools/device_ab.sh) ran:
    ``16cores/<sub><prefix>_<commit>.json``."""
    found = sorted(glob.glob(os.path.join(RESULTS, MANY, f"{sub}{prefix}_[0-9a-f]*.json")))
    names = [os.path.basename(p)[len(prefix) + 1:-5] for p in found]
    return [(c, load(f"{MANY}/{sub}{prefix}_{c}")) for c in names if re.fullmatch(r"[0-9a-f]{7,40}", c)]


def ab_calls_16() -> list:
    """``(sub, this tree's cores_ab result)`` of each A/B call of the lease: ``16cores/ab/N/`` in order
    (each call ran this tree, then the earlier trees beside it), or ``16cores/`` itself."""
    subs = sorted((os.path.relpath(p, os.path.join(RESULTS, MANY)) + "/"
                   for p in glob.glob(os.path.join(RESULTS, MANY, "ab", "*")) if os.path.isdir(p)),
                  key=lambda x: int(x.split("/")[1]) if x.split("/")[1].isdigit() else 0) or [""]
    return [(sub, d) for sub in subs if (d := load(f"{MANY}/{sub}cores_ab"))]


def ab_cores_16() -> str | None:
    """The same-machine comparison of this tree's pipeline with earlier ones (tools/device_ab.sh), one
    clause per earlier tree of each A/B call."""
    calls = ab_calls_16()
    if not calls:
        return None
    parts = []
    for sub, d in calls:
        for c, e in _earlier("cores_ab", sub):
            cells = []
            for n in sorted({r["cores"] for r in d["rows"]}):
                for g in ("group", "window", "instance"):
                    now, was = _rate(d, g, n), _rate(e, g, n)
                    if now and was:
                        cells.append(f"{g} on {n} cores {now / 1e6:.2f}M against {was / 1e6:.2f}M ({now / was:.2f}×)")
            parts.append(f"lirs at {d.get('code_commit', '?')} against {c}" + (f" (`{sub}`)" if sub else "")
                         + ": " + ", ".join(cells))
    d = calls[0][1]
    return (f"The same machine, this tree and earlier ones run one after the other on the same data, each with "
            f"its own benchmark scripts (`tools/device_ab.sh`, {source(d)}; no GIL records), page cache, M "
            f"records/s, one call each (a difference under ~10% is within a call's spread): " + "; ".join(parts) + ".")


def ab_torch_window_16() -> str:
    """The same-machine A/B of window epochs with DataLoader workers (torch_window_ab*.json), or ""."""
    out = []
    for sub, _ in ab_calls_16():
        t = load(f"{MANY}/{sub}torch_window_ab")
        if t and t.get("ratio_vs_w0"):
            out.append(f"in an A/B right after (`{sub}`): lirs at {t.get('code_commit', '?')} {_ratios(t)} "
                       f"({t['records_per_s']['torch_w0'] / 1e6:.2f}M with none)"
                       + "".join(f", {c} {_ratios(e)} ({e['records_per_s']['torch_w0'] / 1e6:.2f}M)"
                                 for c, e in _earlier("torch_window_ab", sub) if e.get("ratio_vs_w0")))
    return "" if not out else " (" + "; ".join(out) + ")"


def pread_16() -> str | None:
    """Page-cache preads from many threads through one descriptor or one each (16cores/pread.json)."""
    d = load(f"{MANY}/pread")
    if not d:
        return None
    cells = [f"{r['threads']} threads {r['shared_reads_per_s'] / 1e6:.2f}M reads/s shared, "
             f"{r['own_reads_per_s'] / 1e6:.2f}M own ({r['own_vs_shared']:.2f}×)" for r in d["rows"]]
    return (f"Reads of an instance epoch from the page cache through one descriptor for all threads or one "
            f"each, as each reading thread of lirs preads through its own ({source(d)}; lirs at "
            f"{d.get('code_commit', '?')}): " + "; ".join(cells) + ".")


def bisect_16() -> str | None:
    """The 16-core bisect of the group rate (16cores/session11/bisect.json): each tree's records/s against
    the first."""
    d = load(f"{MANY}/{LAST_16}bisect")
    if not d:
        return None
    first = d["trees"][0]
    cells = [f"{t['commit']} ({t['what']}) {t['records_per_s'] / 1e6:.2f}M, {t['vs_' + first['commit']]:.2f}×"
             for t in d["trees"][1:]]
    return (f"A bisect of the group rate on 16 cores, the earlier lease ({source(d)}; {d['what']}): lirs at "
            f"{first['commit']} {first['records_per_s'] / 1e6:.2f}M records/s; " + "; ".join(cells) + ".")


def ab_train_16(g) -> str:
    """The GPU-feeding runs of the same A/B: the earlier trees right after, and reruns."""
    out = []
    for c, e in _earlier("train_gpu"):
        r = e["records_per_s"]
        out.append(f"lirs at {c} on the same machine right after (feeding on the consumer's thread): step "
                   f"{r['step'] / 1e6:.2f}M, feed {r['feed'] / 1e6:.2f}M, training {r['train'] / 1e6:.2f}M, "
                   f"{e['train_vs_step_or_loader']:.2f}×")
    again = load(f"{MANY}/train_gpu_rerun")
    if again:
        r = again["records_per_s"]
        out.append(f"the same benchmark again right after: step {r['step'] / 1e6:.2f}M, training {r['train'] / 1e6:.2f}M, "
                   f"{again['train_vs_step_or_loader']:.2f}×")
    return "" if not out else " In that run " + "; ".join(out) + "."


def sec_paper():
    d = load("paper")
    if not d:
        return None
    sv, dn = d["reductions"]["svm"], d["reductions"]["dnn"]
    svm_ds, dnn_ds = d["svm"]["dataset"], d["dnn"]["dataset"]

    def devs(r, base, key=""):
        return (f"{change(r[f'nvme_vs_{base}_nvme{key}_pct'])} nvme, {change(r[f'ssd_vs_{base}_ssd{key}_pct'])} ssd, "
                f"{change(r[f'hdd_vs_{base}_hdd{key}_pct'])} hdd, "
                f"{change(r[f'nvme_vs_{base}_hdd{key}_pct (paper' + chr(39) + 's form)'])} nvme vs {base.upper()} on hdd")

    rows = [["SVM total time vs BMF (paper: LIRS on Optane vs BMF on HDD)", "−49.9% (kdd −32.2%)",
             "; ".join(f"{m.split('-')[1]} {devs(sv[m], 'bmf')}" for m in sv)],
            ["DNN total time vs TFIP, to TFIP's best validation loss", "−43.5%",
             "; ".join(f"{m.split('-')[1]} {change(dn[m]['nvme_vs_tfip_nvme_pct'])}" for m in ("lirs-instance", "lirs-window"))],
            ["DNN total time vs TFIP, to a loss all reach", "–",
             "; ".join(f"{m.split('-')[1]} {devs(dn[m], 'tfip', '_relaxed')}" for m in ("lirs-instance", "lirs-window"))],
            ["DNN test accuracy vs TFIP", "+1.01%",
             "; ".join(f"{k} {v:+.2f} points" for k, v in dn["test_acc_gain_pct"].items())]]
    return (f"### The paper's headline: total training time against BMF and TFIP\n\n"
            f"`{d['command']}`: SVM on a label-sorted kdd-like file ({svm_ds['file']['bytes'] / 1e9:.2f} GB, "
            f"{svm_ds['n']:,} records), DNN ({dnn_ds['model']}) on a label-sorted epsilon-like file "
            f"({dnn_ds['train_bytes'] / 1e9:.0f} GB). " + (d.get("size_choice") or "") +
            " TFIP is the paper's TensorFlow input pipeline: one exact "
            f"shuffle of the file (`lirs shuffle`, timed as pre-processing), then the shuffled copy through a "
            f"10,000-record buffer every epoch. Total = pre-processing + epochs to the target × epoch time, "
            f"on the nvme, ssd and hdd envelopes of `lirs bench`; one seed; writes are not throttled on the "
            f"envelopes (a lower bound for BMF's and TFIP's pre-processing); `*` marks an extrapolated epoch. "
            f"Where lirs loses, the table says so. `lirs demo` prints these figures too, from "
            f"`lirs/eval/data/paper_summary.json` (written by the same run).\n\n"
            + table(["claim", "LIRS paper", "measured here"], rows)
            + "\n\n```\n" + d["table"].strip() + "\n```")


def sec_scale():
    d = load("scale")
    if not d:
        return None
    fl, big, sm = d["files"], d["epochs"]["big"], d["summary"]
    fio = d["fio"]["big"]["jobs"]
    label = {"lirs-group-64K": "group 64 KiB, CSR decode", "lirs-window-64Kx4096": f"window {d['window']}, CSR decode",
             "lirs-group-64K/reads": "group 64 KiB, reads only", "lirs-window-64Kx4096/reads": f"window {d['window']}, reads only"}
    ix = d["index"]["big"]
    rows = [["`lirs index`, cold", mb(ix["Bps"]), f"{mb(ix.get('fio_seq_Bps') or fio['seq1m_qd16']['bw_bytes'])} (sequential 1 MiB)",
             f(sm["ratios"]["index"]["vs_fio_seq"]), f"≥ {sm['ratios']['index']['goal']}: {goal(sm['ratios']['index']['met'])}",
             f"{d['index']['big']['vm_hwm_bytes'] / 2**20:,.0f} MiB"]]
    for name, what in label.items():
        r, g = big.get(name), sm["ratios"].get(name)
        if not r or not g:
            continue
        rows.append([what, f"{mb(r['mb_per_s'] * 1e6)} ({mb(r['payload_per_s'])} of records)",
                     f"{mb(fio['rand64k_qd32']['bw_bytes'])} (random 64 KiB)",
                     f(g["vs_fio64k"]), f"≥ {g['goal']}: {goal(g['met'])}",
                     f"{r['sampled']['anon'] / 2**20:,.0f} MiB"])
    for name in ("torch", "shuffle_buffer", "inmemory"):
        r = big.get(name)
        if r and r.get("status") == "ok":
            rows.append([f"peer: {name}" + (" (bounded run, extrapolated)" if r.get("extrapolated") else ""),
                         f"{r['records_per_s']:,.0f} records/s", "", "", "", f"{r['sampled']['anon'] / 2**20:,.0f} MiB"])
        elif r:
            rows.append([f"peer: {name}", f"skipped: {r.get('note') or r.get('reason') or r.get('status')}", "", "", "", ""])
    mem = [[label.get(n, n), f"{v['anon']['small'] / 2**20:,.0f}", f"{v['anon']['big'] / 2**20:,.0f}",
            f(v["anon"]["big_over_small"]),
            f"{v['plan_tables']['growth'] / 2**20:,.1f}" if "plan_tables" in v else "–",
            f(v["anon"].get("big_over_small_beyond_plan")),
            f"{v['rss']['small'] / 2**20:,.0f} → {v['rss']['big'] / 2**20:,.0f}",
            f(v["rss"].get("big_over_small_beyond_plan") or v["rss"]["big_over_small"])]
           for n, v in sm["rss"].items()]
    independent = [n for n, v in sm["rss"].items() if v.get("independent_of_size")]
    lim = sm["goals"]["rss_big_over_small"]
    private_ok = [n for n, v in sm["rss"].items()
                  if (v["anon"].get("big_over_small_beyond_plan") or v["anon"]["big_over_small"]) <= lim]
    pl = d.get("plan", {}).get("rows", {})
    plan = ", ".join(f"{g} {pl[g]['rank0_of_1']['per_batch_s']['middle'] * 1e6:.0f} µs"
                     for g in ("instance", "group", "window") if g in pl)
    busy = "".join(
        f"\n\nWith decoding, the {n.split('-')[1]} epoch kept {w['cpu_util_cores']:.2f} of {w['cores']} cores busy, "
        f"its decoder running at {w['decode_MBps_per_thread']:.0f} MB/s per thread"
        + (": the cores are not full; the pool's threads wait on reads and on each other for the GIL (each read "
           "step costs some Python work, which is why a group step spans several batches)."
           if w["cpu_util_cores"] < 0.85 * w["cores"] else ".")
        for n, w in list(sm.get("where_time_goes", {}).items())[:1] if w)
    return (f"### Out of core: a file 1.5× the RAM\n\nA {fl['big_bytes'] / 1e9:.1f} GB kdd-like LIBSVM file "
            f"({fl['big_records']:,} records) on a machine with {fl['ram_bytes'] / 2**30:.1f} GiB of RAM, page cache "
            f"dropped before each measurement, every measurement in a fresh process, fio on the same file in the "
            f"same run ({source(d)}). The virtual disk's speed moves by 2–3× from one minute to the next here; the ratios use "
            f"the fio figure taken in the run. \"Reads only\" reads the plan's extents with the engine, no decode, "
            f"in calls of at least its depth (or 8 MiB), two calls in flight on their own threads as the Loader keeps "
            f"steps in flight (each with its buffer: a window's call is the whole window). Memory is the process "
            f"tree's private (anonymous) peak:\n\n"
            + table(["what", "lirs (MB/s read)", "fio (MB/s)", "× fio", "goal", "private memory"], rows)
            + busy
            + f"\n\nMemory on a {fl['small_bytes'] / 1e9:.2f} GB prefix of the same records (whole windows, so both "
              f"files read windows of one size) and on the whole file "
              f"(it is {fl['big_bytes'] / fl['small_bytes']:.0f}× larger), MiB. A full shuffle keeps one entry per "
              f"unit in its plan (unit boundaries and permutation, 12 bytes per 64 KiB group): that growth is "
              f"shown apart, and \"beyond plan\" is the private peak on the big file less it, over the small one. "
              f"RSS adds the file-backed pages: the libraries' code (numba's LLVM among them) and the few index "
              f"arrays the plan touches (per-block bases, per-file tables). A read step of several batches reads "
              f"the offsets it needs from the sidecar with pread, so no page of the offset table is mapped "
              f"(steps of one batch map theirs and unmap them every "
              f"{d['index_release_batches'] if d.get('index_release_batches') else 'few'} batches). PSS would "
              f"split those shared pages among the processes mapping them, so its file part moves with what "
              f"else runs; RSS counts what the process holds:\n\n"
            + table(["configuration", "private, small", "private, big", "big / small", "plan tables +",
                     "beyond plan", "RSS, small → big", "RSS beyond plan"], mem)
            + (f"\n\nPrivate memory independent of the file size (within {lim}× beyond the plan tables): "
               f"{'; '.join(label.get(n, n) for n in private_ok) or 'none'}. With the file-backed pages too (RSS "
               f"within {lim}× beyond the plan tables): {'; '.join(label.get(n, n) for n in independent) or 'none'}." if "plan_tables" in
               next(iter(sm["rss"].values()), {}) else "")
            + (f"\n\nPlanning an epoch of 10⁹ records (dense, stateless permutation, batch 1024), per batch: {plan}; "
               f"nothing in memory grows with the record count but group's unit table." if plan else ""))

SECTIONS = [sec_summary, sec_index, sec_incremental, sec_decode, sec_engines, sec_plan, sec_window, sec_cores, sec_cores_gil, sec_cores_16, sec_consumer, sec_torch, sec_tfrecord,
            sec_bench, sec_scale, sec_shuffle,
            sec_quality, sec_frontier, sec_paper, sec_train_svm, sec_train_dnn]


PAGE_HEAD = ("# Results\n\n<!-- generated by benchmarks/report.py from benchmarks/results/*.json: edit those, "
             "not this page -->\n\nMeasured on this project's reference machine (2 cores, virtio disk, ext4); "
             "every figure below is read from `benchmarks/results/*.json` by `python benchmarks/report.py`, and "
             "each subsection names the command that produced it. Ratios compare against a reference taken in the "
             "same run. A figure marked `~` was extrapolated from a bounded run.")


def render() -> str:
    """The whole results page (markdown)."""
    parts = [PAGE_HEAD]
    for fn in SECTIONS:
        try:
            s = fn()
        except (KeyError, TypeError, ValueError) as e:  # a result file of another shape: say so, go on
            s = f"<!-- {fn.__name__}: cannot render ({e!r}) -->"
        if s:
            parts.append(re.sub(r"^### ", "## ", s, flags=re.M))  # subsections are the page's sections
    return "\n\n".join(parts) + "\n"


def figures() -> list:
    """Names of the benchmark figures the page shows (benchmarks/results/NAME.png)."""
    return sorted(set(re.findall(r"\(img/([\w.-]+)\.png\)", render())))


def readme_with_summary(readme: str) -> str:
    """``readme`` with its summary markers' content replaced by :func:`readme_summary`."""
    if START not in readme or END not in readme:
        raise ValueError(f"markers {START} / {END} not found")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + START + "\n" + readme_summary() + "\n" + END + tail


def _replace(path: str, text: str, mode: str = "w") -> None:
    tmp = path + ".tmp"
    with open(tmp, mode) as fh:
        fh.write(text)
    os.replace(tmp, path)


def write() -> None:
    """Write docs/results.md, copy its figures to docs/img/, and rewrite the README's summary."""
    import shutil

    _replace(PAGE, render())
    os.makedirs(IMG, exist_ok=True)
    for name in figures():
        shutil.copyfile(os.path.join(RESULTS, f"{name}.png"), os.path.join(IMG, f"{name}.png"))
    with open(README) as fh:
        _replace(README, readme_with_summary(fh.read()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print", action="store_true", help="print the page instead of writing it")
    a = ap.parse_args(argv)
    if a.print:
        print(render())
        return 0
    try:
        write()
    except ValueError as e:
        print(f"{README}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {PAGE}, its figures under {IMG} and the summary of {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
