"""A small MLP trained on label-sorted dense data: shuffle buffer (10,000, the TFIP default) vs lirs.

The LIRS paper's Tables 6 and 7 on this machine class: a higgs-like data set (float32 x 28, labels
+-1 from a hidden linear model) is generated, a validation and a test set are held out, and the
training records are written label-sorted to an .npy file. The same MLP (28-128-64-1, ReLU,
BCE-with-logits, Adam 1e-3, batch 256, one torch thread, seeded init) is trained from that file
with:

- shuffle_buffer: the file read in order (O_DIRECT runs of a batch) through a 10,000-record buffer;
- lirs-instance / lirs-window: :class:`lirs.Loader` with a fresh permutation every epoch.

Loading overlaps compute in every method (a prefetch thread / the Loader's prefetch). Per epoch:
validation loss, test accuracy, epoch wall time and the time the training loop waited for data.
Table 6 analog: epochs each method needs to reach the shuffle buffer's best validation loss;
Table 7 analog: test accuracy at each method's best validation epoch.

    python benchmarks/train_dnn.py                 # benchmarks/results/train_dnn.json + .png
    python benchmarks/train_dnn.py --smoke --dir /tmp/x --json /tmp/x/out.json
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import RESULTS, machine  # noqa: E402

import lirs  # noqa: E402
from lirs.eval.gen import generate, labels_path  # noqa: E402
from lirs.eval.reference import shuffle_buffer_order  # noqa: E402
from lirs.eval.spans import Prefetch as _Prefetch  # noqa: E402

METHODS = ("shuffle_buffer", "lirs-instance", "lirs-window")


def make_data(d: str, records: int, holdout: int, seed: int):
    """(train path sorted by label, (Xv, yv), (Xt, yt)) from one generated higgs-like set."""
    src = os.path.join(d, f"dnn-higgs-{records}-s{seed}.npy")
    train = os.path.join(d, f"dnn-higgs-train-sorted-{records}-s{seed}.npy")
    if not os.path.exists(src):
        generate("higgs", src, records=records + 2 * holdout, seed=seed, progress=False)
    X = np.load(src)
    y = np.load(labels_path(src))
    val = (X[:holdout], y[:holdout])
    test = (X[holdout:2 * holdout], y[holdout:2 * holdout])
    Xtr, ytr = X[2 * holdout:], y[2 * holdout:]
    o = np.argsort(ytr, kind="stable")  # all -1 first: the worst case for a shuffle buffer
    if not os.path.exists(train):
        np.save(train + ".tmp.npy", np.ascontiguousarray(Xtr[o]))
        np.save(labels_path(train) + ".tmp.npy", ytr[o])
        os.replace(labels_path(train) + ".tmp.npy", labels_path(train))
        os.replace(train + ".tmp.npy", train)
    return [src, train, labels_path(src), labels_path(train)], train, val, test


def buffer_batches(index, engine, order, batch_size):
    """Shuffle-buffer batches of a fixed-record file: runs of ``batch_size`` records read in file
    order with one aligned direct read each; every batch gathers its rows from the live runs."""
    from lirs.decode import decode_fixed
    from lirs.engines import aligned_empty

    n = index.n
    starts, ends = index.bounds()
    runs = {}
    nxt = 0
    buf = aligned_empty(4096)
    for s in range(0, n, batch_size):
        ids = order[s:s + batch_size]
        need = int(ids.max()) // batch_size
        while nxt <= need:
            a, f = nxt * batch_size, min(n, (nxt + 1) * batch_size)
            lo = int(starts[a]) // 4096 * 4096
            hi = -(-int(ends[f - 1]) // 4096) * 4096
            if len(buf) < hi - lo:
                buf = aligned_empty(hi - lo)
            engine.read(np.zeros(1, np.int32), np.array([lo]), np.array([hi - lo]), buf, np.zeros(1, np.int64))
            runs[nxt] = [decode_fixed(buf, starts[a:f] - lo, index.record_dtype, index.record_shape),
                         index.labels_of(np.arange(a, f)), f - a]
            nxt += 1
        r = ids // batch_size
        local = ids - r * batch_size
        Xb = np.empty((len(ids), *index.record_shape), index.record_dtype)
        yb = np.empty(len(ids), np.float64)
        for k in np.unique(r).tolist():
            sel = np.flatnonzero(r == k)
            Xb[sel] = runs[k][0][local[sel]]
            yb[sel] = runs[k][1][local[sel]]
            runs[k][2] -= len(sel)
            if runs[k][2] == 0:
                del runs[k]
        yield ids, Xb, yb


def make_model(torch, seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(28, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 1))


def evaluate(torch, model, X, y):
    with torch.no_grad():
        z = model(torch.from_numpy(X)).squeeze(1)
        t = torch.from_numpy((y > 0).astype(np.float32))
        loss = float(torch.nn.functional.binary_cross_entropy_with_logits(z, t))
        acc = float(((z > 0).float() == t).float().mean())
    return loss, acc


def run_method(torch, method, index, epochs, batch_size, seed, val, test, prefetch=4):
    from lirs.engines import open_engine
    from lirs.loader import Loader

    model = make_model(torch, seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = torch.nn.BCEWithLogitsLoss()
    rec = {"per_epoch": []}
    loader = eng = None
    if method.startswith("lirs-"):
        loader = Loader(index, batch_size, granularity=method.split("-", 1)[1], seed=seed, prefetch=prefetch)
        rec["memory_bytes"] = int(16 * index.n + (prefetch + 1) * batch_size * index.record_size)
    else:
        eng = open_engine(list(index.paths))
        rec["memory_bytes"] = int((10_000 + (prefetch + 1) * batch_size) * index.record_size)
    try:
        for e in range(epochs):
            t0 = time.perf_counter()
            if loader is not None:
                loader.stats.reset()
                it = ((b.ids, b.X, b.y) for b in loader.epoch(e))
                src = None
            else:
                order = shuffle_buffer_order(index.n, 10_000, seed=seed, epoch=e)
                src = _Prefetch(buffer_batches(index, eng, order, batch_size), prefetch)
                it = iter(src)
            model.train()
            comp = 0.0
            for ids, X, y in it:
                c = time.perf_counter()
                opt.zero_grad()
                loss = lossf(model(torch.from_numpy(X)).squeeze(1), torch.from_numpy((y > 0).astype(np.float32)))
                loss.backward()
                opt.step()
                comp += time.perf_counter() - c
            wall = time.perf_counter() - t0
            model.eval()
            vl, va = evaluate(torch, model, *val)
            tl, ta = evaluate(torch, model, *test)
            wait = loader.stats.wait_s if loader is not None else src.wait_s
            amp = loader.stats.as_dict()["amplification"] if loader is not None else None
            rec["per_epoch"].append({"epoch": e, "epoch_s": wall, "compute_s": comp, "wait_s": wait,
                                     "amplification": amp, "val_loss": vl, "val_acc": va, "test_loss": tl,
                                     "test_acc": ta})
            print(f"  {method} epoch {e}: val loss {vl:.4f}, test acc {ta:.4f}, {wall:.1f}s (waited {wait:.1f}s)",
                  flush=True)
    finally:
        if loader is not None:
            loader.close()
        if eng is not None:
            eng.close()
    return rec


def plot(res, png) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for m, r in res["methods"].items():
        e = [p["epoch"] + 1 for p in r["per_epoch"]]
        ax[0].plot(e, [p["val_loss"] for p in r["per_epoch"]], marker=".", label=m)
        ax[1].plot(e, [p["test_acc"] for p in r["per_epoch"]], marker=".", label=m)
    ax[0].set_ylabel("validation loss (BCE)")
    ax[1].set_ylabel("test accuracy")
    for a in ax:
        a.set_xlabel("epoch")
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=8)
    fig.suptitle(f"MLP on label-sorted higgs-like data ({res['train_records']:,} records)", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="training records (default 1,000,000)")
    ap.add_argument("--holdout", type=int, default=20_000, help="validation and test records each")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default="/work/scratch/train")
    ap.add_argument("--json", default=os.path.join(RESULTS, "train_dnn.json"))
    ap.add_argument("--smoke", action="store_true", help="tiny data, 2 epochs")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # the other core reads and decodes
    if a.smoke:
        a.records, a.holdout, a.epochs = 30_000, 2_000, 2
    methods = [m for m in a.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS and not m.startswith("lirs-")]
    if bad:
        ap.error(f"unknown methods {bad}")
    os.makedirs(a.dir, exist_ok=True)
    files, train, val, test = make_data(a.dir, a.records, a.holdout, a.seed)
    index = lirs.build_index(train)
    res = {"command": "python benchmarks/train_dnn.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:])),
           "machine": machine(), "torch": torch.__version__, "torch_threads": 1,
           "model": "MLP 28-128-64-1 ReLU, BCEWithLogits, Adam lr 1e-3", "batch_size": a.batch_size,
           "train_records": index.n, "holdout_each": a.holdout, "train_order": "label-sorted",
           "shuffle_buffer_records": 10_000, "epochs": a.epochs, "methods": {}}
    for m in methods:
        res["methods"][m] = run_method(torch, m, index, a.epochs, a.batch_size, a.seed, val, test)
    base = "shuffle_buffer" if "shuffle_buffer" in res["methods"] else None
    lines = []
    if base:
        target = min(p["val_loss"] for p in res["methods"][base]["per_epoch"])
        res["target_val_loss"] = target
        lines.append(f"target: the shuffle buffer's best validation loss {target:.4f}")
    lines.append(f"{'method':15} {'epochs to target':>16} {'best val loss':>13} {'test acc @best':>14} "
                 f"{'final test acc':>14} {'epoch s':>8} {'wait s':>7} {'ampl':>6} {'memory MB':>9}")
    for m, r in res["methods"].items():
        pe = r["per_epoch"]
        best = min(range(len(pe)), key=lambda i: pe[i]["val_loss"])
        r["best_epoch"] = best
        r["test_acc_at_best"] = pe[best]["test_acc"]
        r["epochs_to_target"] = (next((i + 1 for i, p in enumerate(pe) if p["val_loss"] <= target), None)
                                 if base else None)
        r["mean_epoch_s"] = float(np.mean([p["epoch_s"] for p in pe]))
        amp = pe[-1]["amplification"]
        lines.append(f"{m:15} {str(r['epochs_to_target'] or '-'):>16} {pe[best]['val_loss']:13.4f} "
                     f"{r['test_acc_at_best']:14.4f} {pe[-1]['test_acc']:14.4f} {r['mean_epoch_s']:8.2f} "
                     f"{np.mean([p['wait_s'] for p in pe]):7.2f} {'-' if amp is None else f'{amp:.2f}':>6} "
                     f"{r['memory_bytes'] / 1e6:9.1f}")
    res["table"] = "\n".join(lines)
    print(res["table"])
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    png = os.path.splitext(a.json)[0] + ".png"
    print(f"wrote {a.json}" + (f" and {png}" if plot(res, png) else " (no plot: matplotlib missing)"))
    index = None
    if not a.keep and not a.smoke:
        for p in files + [lirs.sidecar_path(train)]:
            if os.path.exists(p):
                os.unlink(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
