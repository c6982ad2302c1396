"""A small MLP trained from a label-sorted file: TFIP and a shuffle buffer alone against lirs.

The LIRS paper's Tables 6 and 7 on this machine class. A dense data set (higgs-like float32 x 28,
or epsilon-like float32 x 2000: records larger than a 4 KiB page, like the paper's ImageNet) is
generated, a validation and a test set are held out, and the training records are written
label-sorted to an .npy file (the order the data are stored in). The same MLP (D-128-64-1, ReLU,
BCE-with-logits, Adam 1e-3, batch 256, one torch thread, seeded init) is trained from that file:

- tfip: the paper's TensorFlow input pipeline (Section 3.2): the file shuffled exactly once with
  lirs's external shuffle (pre-processing, timed), then each epoch the copy read in order through a
  10,000-record shuffle buffer (:mod:`lirs.eval.tfip`);
- shuffle_buffer: the same buffer over the file as stored (no pre-shuffle);
- lirs-instance / lirs-page / lirs-window: :class:`lirs.Loader`, a fresh permutation every epoch
  (pre-processing: the index, timed).

Loading overlaps compute in every method (read-ahead threads / the Loader's prefetch). The
validation loss is taken ``--evals`` times per epoch (time excluded from the epoch), so epochs to
the target are fractional, as in the paper's Table 6. Target: TFIP's best validation loss (the
shuffle buffer's when TFIP is not run). Total time to the target = pre-processing + epochs to the
target x mean epoch time (Eq. 1 of the paper). Table 7 analog: test accuracy at each method's best
validation checkpoint.

    python benchmarks/train_dnn.py                  # benchmarks/results/train_dnn.json + .png
    python benchmarks/train_dnn.py --profile epsilon --size 1GB --epochs 8
    python benchmarks/train_dnn.py --smoke --dir /tmp/x --json /tmp/x/out.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import RESULTS, machine  # noqa: E402

import lirs  # noqa: E402
from lirs.eval.gen import generate, labels_path, records_for_size  # noqa: E402
from lirs.eval.tfip import TFIP, TFIP_BUFFER_RECORDS, BufferStream  # noqa: E402

METHODS = ("tfip", "shuffle_buffer", "lirs-instance", "lirs-page", "lirs-window")
DEFAULT_METHODS = ("tfip", "shuffle_buffer", "lirs-instance", "lirs-window")


def make_data(d: str, profile: str, records: int, holdout: int, seed: int):
    """(files written, train path sorted by label, (Xv, yv), (Xt, yt)) from one generated set."""
    src = os.path.join(d, f"dnn-{profile}-{records}-s{seed}.npy")
    train = os.path.join(d, f"dnn-{profile}-train-sorted-{records}-s{seed}.npy")
    if not os.path.exists(src):
        generate(profile, src, records=records + 2 * holdout, seed=seed, progress=False)
    X = np.load(src, mmap_mode="r")
    y = np.load(labels_path(src))
    val = (np.array(X[:holdout]), y[:holdout])  # copies: torch wants writable arrays
    test = (np.array(X[holdout:2 * holdout]), y[holdout:2 * holdout])
    if not os.path.exists(train):
        ytr = y[2 * holdout:]
        o = np.argsort(ytr, kind="stable")  # all -1 first: the worst case for a shuffle buffer
        np.save(labels_path(train) + ".tmp.npy", ytr[o])
        out = np.lib.format.open_memmap(train + ".tmp.npy", "w+", np.float32, (len(o), X.shape[1]))
        for s in range(0, len(o), 65536):  # in slices: the data set need not fit in memory twice
            out[s:s + 65536] = X[2 * holdout + o[s:s + 65536]]
        out.flush()
        del out
        os.replace(labels_path(train) + ".tmp.npy", labels_path(train))
        os.replace(train + ".tmp.npy", train)
    return [src, train, labels_path(src), labels_path(train)], train, val, test


def make_model(torch, d_in: int, seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d_in, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 1))


def evaluate(torch, model, X, y):
    """(BCE loss, accuracy) of ``model`` on X float32 (k, D), y (k,) in {-1, +1}."""
    with torch.no_grad():
        z = torch.cat([model(torch.from_numpy(X[s:s + 8192])).squeeze(1) for s in range(0, len(X), 8192)])
        t = torch.from_numpy((y > 0).astype(np.float32))
        loss = float(torch.nn.functional.binary_cross_entropy_with_logits(z, t))
        acc = float(((z > 0).float() == t).float().mean())
    return loss, acc


class Source:
    """The batches of one method, ``(ids, X, y)`` per epoch, and what its pre-processing cost."""

    def __init__(self, method, index, train, *, batch_size, seed, prefetch, workdir, memory, index_s):
        from lirs.loader import Loader

        self.method, self.loader, self.stream = method, None, None
        n, rs = index.n, index.record_size
        if method.startswith("lirs-"):
            self.loader = Loader(index, batch_size, granularity=method.split("-", 1)[1], seed=seed,
                                 prefetch=prefetch)
            self.pre_s, self.pre_what = index_s, "lirs index (scan once)"
            self.memory_bytes = int(16 * n + (prefetch + 1) * batch_size * rs)
        elif method == "tfip":
            self.tfip = TFIP(train, os.path.join(workdir, os.path.basename(train) + ".tfip.npy"), batch_size,
                             seed=seed, memory=memory, prefetch=prefetch)
            st = self.tfip.prepare()
            self.stream = self.tfip.stream
            self.pre_s = st["pre_s"]
            self.pre_what = (f"exact external shuffle ({st['piles']} piles, --memory {memory}) + index of the copy")
            self.pre_stats = {k: st[k] for k in ("seconds_pass1", "seconds_pass2", "index_s", "piles",
                                                 "bytes_read", "bytes_written")}
            self.memory_bytes = self.stream.memory_bytes
        else:
            self.stream = BufferStream(index, batch_size, seed=seed, prefetch=prefetch)
            self.pre_s, self.pre_what = 0.0, "none"
            self.memory_bytes = self.stream.memory_bytes

    def epoch(self, e):
        if self.loader is not None:
            self.loader.stats.reset()
            return ((b.ids, b.X, b.y) for b in self.loader.epoch(e))
        return self.stream.epoch(e)

    def wait_s(self) -> float:
        return self.loader.stats.wait_s if self.loader is not None else self.stream.wait_s

    def amplification(self):
        return self.loader.stats.as_dict()["amplification"] if self.loader is not None else None

    def close(self):
        if self.loader is not None:
            self.loader.close()
        elif self.method == "tfip":
            self.tfip.close(remove=True)
        else:
            self.stream.close()


def run_method(torch, method, index, train, *, epochs, batch_size, seed, val, test, evals=4, budget_s=None,
               workdir=".", memory="512M", index_s=0.0, prefetch=4, log=print):
    """Train the MLP ``epochs`` epochs on ``method``'s batches. With ``budget_s`` an epoch stops
    after that many seconds and its time is extrapolated to the whole epoch (no evaluation)."""
    model = make_model(torch, index.record_shape[0], seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = torch.nn.BCEWithLogitsLoss()
    src = Source(method, index, train, batch_size=batch_size, seed=seed, prefetch=prefetch, workdir=workdir,
                 memory=memory, index_s=index_s)
    rec = {"pre_s": src.pre_s, "pre_what": src.pre_what, "memory_bytes": src.memory_bytes, "per_epoch": [],
           "checkpoints": []}
    if hasattr(src, "pre_stats"):
        rec["pre_stats"] = src.pre_stats
    nb = math.ceil(index.n / batch_size)
    marks = {max(1, round(k * nb / evals)) for k in range(1, evals + 1)} if budget_s is None else set()
    try:
        for e in range(epochs):
            model.train()
            t0 = time.perf_counter()
            comp = ev = 0.0
            done = i = 0
            for ids, X, y in src.epoch(e):
                c = time.perf_counter()
                opt.zero_grad()
                loss = lossf(model(torch.from_numpy(X)).squeeze(1), torch.from_numpy((y > 0).astype(np.float32)))
                loss.backward()
                opt.step()
                comp += time.perf_counter() - c
                done += len(ids)
                i += 1
                if i in marks:
                    c = time.perf_counter()
                    model.eval()
                    vl, va = evaluate(torch, model, *val)
                    tl, ta = evaluate(torch, model, *test)
                    model.train()
                    rec["checkpoints"].append({"epochs": e + i / nb, "val_loss": vl, "val_acc": va, "test_loss": tl,
                                               "test_acc": ta})
                    ev += time.perf_counter() - c
                if budget_s is not None and time.perf_counter() - t0 > budget_s:
                    break
            wall = time.perf_counter() - t0 - ev
            ent = {"epoch": e, "epoch_s": wall, "compute_s": comp, "wait_s": src.wait_s(),
                   "amplification": src.amplification(), "records": done, "extrapolated": done < index.n}
            if ent["extrapolated"]:
                ent["measured_s"], ent["epoch_s"] = wall, wall * index.n / max(done, 1)
            if rec["checkpoints"] and budget_s is None:
                ent.update({k: rec["checkpoints"][-1][k] for k in ("val_loss", "val_acc", "test_loss", "test_acc")})
            rec["per_epoch"].append(ent)
            log(f"  {method} epoch {e}: " + (f"val loss {ent['val_loss']:.4f}, test acc {ent['test_acc']:.4f}, "
                                             if "val_loss" in ent else "") +
                f"{ent['epoch_s']:.1f}s{'*' if ent['extrapolated'] else ''} (waited {ent['wait_s']:.1f}s)")
    finally:
        src.close()
    rec["mean_epoch_s"] = float(np.mean([p["epoch_s"] for p in rec["per_epoch"]]))
    return rec


def summarize(res: dict) -> None:
    """Tables 6 and 7 analog: fractional epochs to the target validation loss, total time to it,
    test accuracy at the best validation checkpoint; every method against the target's method."""
    ms = res["methods"]
    base = "tfip" if "tfip" in ms else ("shuffle_buffer" if "shuffle_buffer" in ms else None)
    res["target_method"] = base
    target = min(c["val_loss"] for c in ms[base]["checkpoints"]) if base else None
    res["target_val_loss"] = target
    # the common target: the highest of the best validation losses of the methods that shuffle the
    # whole set (all but the buffer alone), a level each of them reaches. The minimum of a noisy curve
    # is noisy itself: where one method's best lies just under the others', the strict target says
    # more about the noise than about the order
    shuffled = [r["checkpoints"] for m, r in ms.items() if m != "shuffle_buffer"]
    common = max(min(c["val_loss"] for c in cp) for cp in shuffled) if shuffled and base else None
    res["relaxed_target_val_loss"] = common
    for r in ms.values():
        cp = r["checkpoints"]
        best = min(range(len(cp)), key=lambda i: cp[i]["val_loss"])
        r["best_val_loss"], r["best_at_epochs"] = cp[best]["val_loss"], cp[best]["epochs"]
        r["test_acc_at_best"] = cp[best]["test_acc"]
        r["final_test_acc"] = cp[-1]["test_acc"]
        for key, t in (("", target), ("_relaxed", common)):
            hit = None if t is None else next((c["epochs"] for c in cp if c["val_loss"] <= t), None)
            r["epochs_to_target" + key] = hit
            r["total_to_target" + key + "_s"] = None if hit is None else float(r["pre_s"] + hit * r["mean_epoch_s"])
    if base:
        b = ms[base]
        for r in ms.values():
            if r["total_to_target_s"] and b["total_to_target_s"]:
                r["total_vs_target_method"] = r["total_to_target_s"] / b["total_to_target_s"] - 1.0
            r["test_acc_gain"] = r["test_acc_at_best"] - b["test_acc_at_best"]


def table(res: dict) -> str:
    lines = [f"target: {res['target_method']}'s best validation loss {res['target_val_loss']:.4f}"
             if res.get("target_method") else "no target (neither tfip nor shuffle_buffer ran)",
             f"{'method':15} {'pre s':>7} {'epochs':>7} {'epoch s':>8} {'wait s':>7} {'total s':>8} "
             f"{'vs base':>8} {'best val':>9} {'test acc':>9} {'ampl':>6} {'memory MB':>9}"]
    for m, r in res["methods"].items():
        amp = r["per_epoch"][-1]["amplification"]
        tot, rel = r.get("total_to_target_s"), r.get("total_vs_target_method")
        hit = r["epochs_to_target"]
        lines.append(f"{m:15} {r['pre_s']:7.2f} {'-' if hit is None else f'{hit:.3g}':>7} {r['mean_epoch_s']:8.2f} "
                     f"{np.mean([p['wait_s'] for p in r['per_epoch']]):7.2f} "
                     f"{'-' if tot is None else f'{tot:.1f}':>8} {'-' if rel is None else f'{100 * rel:+.1f}%':>8} "
                     f"{r['best_val_loss']:9.4f} {r['test_acc_at_best']:9.4f} "
                     f"{'-' if amp is None else f'{amp:.2f}':>6} {r['memory_bytes'] / 1e6:9.1f}")
    return "\n".join(lines)


def plot(res, png) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for m, r in res["methods"].items():
        e = [c["epochs"] for c in r["checkpoints"]]
        ax[0].plot(e, [c["val_loss"] for c in r["checkpoints"]], marker=".", label=m)
        ax[1].plot(e, [c["test_acc"] for c in r["checkpoints"]], marker=".", label=m)
    if res.get("target_val_loss") is not None:
        ax[0].axhline(res["target_val_loss"], color="grey", lw=0.8, ls="--")
    ax[0].set_ylabel("validation loss (BCE)")
    ax[1].set_ylabel("test accuracy")
    for k, a in enumerate(ax):
        a.set_xlabel("epoch")
        a.grid(alpha=0.3)
        a.set_title(f"({'ab'[k]})", loc="left", fontsize=10)
    ax[0].legend(fontsize=8)
    fig.suptitle(f"MLP on label-sorted {res['profile']}-like data ({res['train_records']:,} records)", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def prepare(a):
    """(files, train path, index, index seconds, val, test) for the parsed arguments ``a``."""
    records = a.records or records_for_size(a.profile, a.size, seed=a.seed)
    os.makedirs(a.dir, exist_ok=True)
    files, train, val, test = make_data(a.dir, a.profile, records, a.holdout, a.seed)
    t = time.perf_counter()
    index = lirs.build_index(train)
    return files, train, index, time.perf_counter() - t, val, test


def settings(a, index) -> dict:
    return {"model": f"MLP {index.record_shape[0]}-128-64-1 ReLU, BCEWithLogits, Adam lr 1e-3", "profile": a.profile,
            "batch_size": a.batch_size, "train_records": index.n, "train_bytes": index.payload_bytes,
            "holdout_each": a.holdout, "train_order": "label-sorted", "shuffle_buffer_records": TFIP_BUFFER_RECORDS,
            "tfip_shuffle_memory": a.memory, "epochs": a.epochs, "evals_per_epoch": a.evals, "torch_threads": 1}


def parser(doc=__doc__):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="higgs", choices=("higgs", "epsilon"))
    ap.add_argument("--records", type=int, default=None, help="training records (default 1,000,000 or --size)")
    ap.add_argument("--size", default=None, help="training file size instead of --records, like 1GB")
    ap.add_argument("--holdout", type=int, default=20_000, help="validation and test records each")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--evals", type=int, default=4, help="validation checkpoints per epoch")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--memory", default="512M", help="TFIP's external shuffle memory cap")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default="/work/scratch/train")
    ap.add_argument("--smoke", action="store_true", help="tiny data, 2 epochs")
    ap.add_argument("--keep", action="store_true")
    return ap


def main(argv=None) -> int:
    ap = parser()
    ap.add_argument("--json", default=os.path.join(RESULTS, "train_dnn.json"))
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # the other core reads and decodes
    if a.smoke:
        a.records, a.size, a.holdout, a.epochs, a.memory = 30_000, None, 2_000, 2, "2M"
    if a.records is None and a.size is None:
        a.records = 1_000_000
    methods = [m for m in a.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown methods {bad}; expected some of {', '.join(METHODS)}")
    files, train, index, index_s, val, test = prepare(a)
    res = {"command": "python benchmarks/train_dnn.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:])),
           "machine": machine(), "torch": torch.__version__, **settings(a, index), "index_s": index_s,
           "total_time_model": "T_total = T_pre + epochs_to_target x mean epoch wall time (Eq. 1)", "methods": {}}
    for m in methods:
        res["methods"][m] = run_method(torch, m, index, train, epochs=a.epochs, batch_size=a.batch_size, seed=a.seed,
                                       val=val, test=test, evals=a.evals, workdir=a.dir, memory=a.memory,
                                       index_s=index_s)
    summarize(res)
    res["table"] = table(res)
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
