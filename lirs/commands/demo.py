"""`lirs demo`: the whole story on this machine in about two minutes.

Generate a label-sorted kdd-like LIBSVM sample (or take the user's file), index it, train the same
linear SVM for a few epochs under lirs (group and window granularity), BMF, a shuffle buffer and the
file order, each reading the file with its own I/O pattern, and print what each cost and reached.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import time

from ..errors import UsageError
from ..units import format_bytes

METHODS = ("lirs-group", "lirs-window", "bmf", "shuffle_buffer", "sequential")


def add_parser(sub):
    p = sub.add_parser(
        "demo", help="train an SVM with lirs against BMF, a shuffle buffer and file order (~2 min)",
        description="Generate a label-sorted kdd-like sample (or use --data), index it, train the same "
                    "L2-regularized linear SVM (LIBLINEAR dual coordinate descent, squared hinge) for a few "
                    "epochs with lirs (group, window), BMF, a shuffle buffer and the file order, then print "
                    "epoch time, read amplification, objective reached and memory per method, and save a plot.")
    p.add_argument("--data", metavar="PATH", help="your own LIBSVM file (binary labels) instead of a sample")
    p.add_argument("--dir", default="./lirs-demo", metavar="D", help="working directory (default ./lirs-demo)")
    # 200MB keeps the whole demo near two minutes on 2 cores (decoding LIBSVM text is the bound)
    p.add_argument("--size", default="200MB", help="size of the generated sample (default 200MB; 500MB "
                                                   "takes about 2.5x as long)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per method (default 3)")
    p.add_argument("--batch-size", type=int, default=1024, help="records per batch (default 1024)")
    p.add_argument("--C", type=float, default=1.0, help="SVM cost parameter (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of every order (default 0)")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)} (also lirs-instance, lirs-page)")
    p.add_argument("--reference-epochs", type=int, default=20,
                   help="epochs of the in-memory random-order run that estimates the optimum f* (default 20)")
    p.add_argument("--engine", default="auto", help="I/O engine (default auto)")
    return p


def run(args) -> int:
    import lirs
    from ..eval.compare import METHODS as ALL, compare_svm
    from ..units import parse_size

    if args.epochs < 1:
        raise UsageError("--epochs must be >= 1")
    if args.batch_size < 1:
        raise UsageError("--batch-size must be >= 1")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ALL]
    if bad or not methods:
        raise UsageError(f"unknown method(s) {bad}; choose from {', '.join(ALL)}")
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    t_all = time.perf_counter()
    if args.data:
        path = os.path.abspath(args.data)
        if not os.path.isfile(path):
            raise UsageError(f"--data {args.data}: no such file")
        print(f"data: {path}")
    else:
        size = parse_size(args.size)
        path = os.path.join(d, f"kdd-sorted-{args.size}-s{args.seed}.svm")
        if os.path.exists(path):
            print(f"data: reusing {path}")
        else:
            from ..eval.gen import generate

            print(f"generating {args.size} of label-sorted kdd-like LIBSVM data -> {path}")
            r = generate("kdd", path, size=size, order="sorted", seed=args.seed,
                         progress=None if sys.stderr.isatty() else False)
            print(f"  {r['records']:,} records in {r['seconds']:.1f}s")
    t = time.perf_counter()
    index = lirs.build_index(path)
    index_s = time.perf_counter() - t
    if index.format != "libsvm":
        raise UsageError(f"{path} is {index.format} data; the demo trains an SVM on LIBSVM text")
    print(f"indexed {index.n:,} records in {index_s:.2f}s; training {len(methods)} methods x "
          f"{args.epochs} epochs (batch {args.batch_size}, C={args.C})")
    res = compare_svm(index, methods, epochs=args.epochs, batch_size=args.batch_size, C=args.C, seed=args.seed,
                      workdir=d, reference_epochs=args.reference_epochs, reference_tol=1e-4, index_s=index_s,
                      engine=args.engine, log_fn=lambda m: print("  " + m, flush=True))
    res["data"] = path
    res["command"] = "lirs " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    _table(res)
    out_json = os.path.join(d, "demo.json")
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1)
    png = os.path.join(d, "demo.png")
    made = plot_relative_difference(res, png, title=f"lirs demo: {os.path.basename(path)}")
    print()
    print(f"results: {out_json}" + (f", plot: {png}" if made else
                                    " (no plot: matplotlib is not installed; pip install matplotlib)"))
    print(f"total demo time {time.perf_counter() - t_all:.0f}s")
    print()
    print("next:")
    print("  lirs bench          how fast each read pattern is on this device (and HDD/SSD envelopes)")
    print(f"  lirs quality {path}   how random each strategy's order is")
    print("  python -c 'import lirs; help(lirs.Loader)'   use lirs in your own training loop")
    return 0


def _table(res: dict) -> None:
    ms = res["methods"]
    head = ("method", "pre-proc", "epoch", "wait", "read ampl.", "objective", "(f-f*)/f*", "epochs to target",
            "memory")
    rows = []
    for m, r in ms.items():
        amp = r["per_epoch"][-1].get("amplification")
        last = r["per_epoch"][-1]
        rows.append((m, "-" if r.get("pre_s") is None else f"{r['pre_s']:.2f}s",
                     f"{r['mean_epoch_s']:.2f}s" if "mean_epoch_s" in r else
                     f"{sum(p['epoch_s'] for p in r['per_epoch']) / len(r['per_epoch']):.2f}s",
                     f"{sum(p['wait_s'] for p in r['per_epoch']) / len(r['per_epoch']):.2f}s",
                     "-" if amp is None else f"{amp:.2f}x",
                     f"{last['objective']:.6g}", f"{last['rel_diff']:.3g}",
                     "-" if r.get("epochs_to_target") is None else str(r["epochs_to_target"]),
                     format_bytes(r.get("memory_bytes"))))
    w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    print()
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
    for row in rows:
        print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(row)))
    tgt = res.get("target_method")
    if tgt:
        print(f"\ntarget: the best objective {tgt} reached in {len(ms[tgt]['per_epoch'])} epochs "
              f"((f-f*)/f* = {res['target_rel_diff']:.3g}); f* from {res.get('reference_s', 0):.0f}s of "
              f"in-memory random-order training. 'wait': loading not hidden behind compute.")
    print("read ampl.: bytes read / record bytes (baselines read whole runs: ~1x). memory: bytes held by "
          "the method's buffers (lirs: index + prefetched batches; BMF: one block; buffer: its records).")


def plot_relative_difference(res: dict, png: str, title: str = "") -> bool:
    """Relative function value difference per epoch, one line per method (log scale). Returns
    False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for m, r in res["methods"].items():
        e = [p["epoch"] + 1 for p in r["per_epoch"]]
        v = [max(p["rel_diff"], 1e-12) for p in r["per_epoch"]]
        ax.semilogy(e, v, marker="o", label=m)
    ax.set_xlabel("epoch")
    ax.set_ylabel("(f - f*) / f*")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True
