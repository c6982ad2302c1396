"""The LIRS paper's headline as measured by benchmarks/bench_paper.py, reduced to the figures
`lirs demo` quotes. They are written to lirs/eval/data/paper_summary.json, package data: a pip
install has no benchmarks/ folder, yet the demo should show the paper's comparison beside its own.
"""
from __future__ import annotations

import os

# where `lirs demo` finds the figures it quotes (lirs.eval.demo.paper_headline reads it)
SUMMARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lirs", "eval", "data",
                       "paper_summary.json")
BASELINE = {"svm": "bmf", "dnn": "tfip"}


def headline(res) -> dict:
    """The figures `lirs demo` quotes, taken from ``res`` (paper.json) unchanged: per part, the file,
    the target, each method's epochs to it on nvme, and each lirs method's reduction of total time
    against the baseline in % per device (``"<env>"``) and in the paper's form (``"paper_form"``:
    lirs on nvme vs the baseline on hdd); positive: lirs takes less time, negative: lirs loses,
    None: it never reaches the target. DNN also: the relaxed target's reductions and the test
    accuracy gain in points. ``paper``: the paper's 49.9% / 43.5% / 1.01%."""
    red, paper = res["reductions"], res["paper"]
    out = {"source": "benchmarks/bench_paper.py", "command": res["command"], "date": res.get("date"),
           "paper": {"svm_total_reduction_pct": paper["svm"]["avg_total_reduction_pct"],
                     "dnn_total_reduction_pct": paper["dnn"]["avg_total_reduction_pct"],
                     "dnn_test_acc_gain_pct": paper["dnn"]["avg_test_acc_gain_pct"]}}
    for part, base in BASELINE.items():
        if part not in res:
            continue
        ds, dev = res[part]["dataset"], res[part]["devices"]
        p = out[part] = {
            "baseline": base, "target": res[part]["target"], "devices": list(dev),
            "file_bytes": ds["file"]["bytes"] if part == "svm" else ds["train_bytes"],
            "records": ds["n"] if part == "svm" else ds["train_records"],
            "what": ("linear SVM on label-sorted kdd-like LIBSVM" if part == "svm"
                     else f"{ds['model']} on label-sorted {ds['profile']}-like float32 records"),
            "epochs_to_target": {m: r["epochs_to_target"] for m, r in dev["nvme"].items()}}
        keys = ("",) + (("_relaxed",) if "relaxed_target" in res[part] else ())
        for key in keys:
            p["total_reduction" + key + "_pct"] = {
                m: {**{e: r.get(f"{e}_vs_{base}_{e}{key}_pct") for e in dev},
                    "paper_form": r.get(f"nvme_vs_{base}_hdd{key}_pct (paper's form)")}
                for m, r in red[part].items() if m.startswith("lirs-")}
        if "_relaxed" in keys:
            p["relaxed_target"] = res[part]["relaxed_target"]
            p["epochs_to_relaxed_target"] = {m: r.get("epochs_to_target_relaxed") for m, r in dev["nvme"].items()}
        if "test_acc_gain_pct" in red[part]:
            p["test_acc_gain_points"] = {m: v for m, v in red[part]["test_acc_gain_pct"].items() if m.startswith("lirs-")}
    return out
