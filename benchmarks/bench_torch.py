"""The torch adapter against the Loader it wraps: epoch rate, warm cache, in one run.

On a generated kdd-like LIBSVM file (``lirs gen --profile kdd``, ~200 MB by default, shuffled
order), one epoch of:

* ``loader``: ``lirs.Loader`` (scipy CSR batches), the reference;
* ``torch_w0``: ``make_dataloader(num_workers=0)`` (sparse CSR tensors built as consumed);
* ``torch_wW`` for each W of ``--workers`` (default 2): ``make_dataloader(num_workers=W)``, its
  workers persistent (the default: they, their Loaders and pools start once; each worker's pool is
  its share of the usable cores), every W-th batch each, packed in one buffer to the main process.

Each is made once and runs one untimed epoch first, as in a training job (for the workers that
first epoch includes starting them: ``first_epoch_s``).

The page cache is warmed first; the runs are interleaved, ``--repeats`` times (median reported),
so a busy machine slows all of them alike; the 1-minute load average before and after is
recorded. Ratios are records/s against ``loader`` (goal >= 0.9) and, for workers, against
``torch_w0`` (goal >= 0.95 on 2 cores, >= 1.0 on 16). Writes benchmarks/results/torch.json.
Run it under the shared lock: ``flock /tmp/lirs-bench.lock python benchmarks/bench_torch.py``.
``--smoke``: a tiny file, seconds.

``--train``: the README's model (an ``EmbeddingBag`` with a sparse gradient, SGD) on ``--device``
(default: cuda when available, else cpu, the CI-sized fallback): its step alone on batches
already on the device (``step``), the Loader alone (``loader``), ``make_dataloader(device=...)``
alone (``feed``: batches moved to the device on a side stream, no step) and feeding the step
(``train``), interleaved; writes benchmarks/results/train_gpu.json with the device named.
``--train-gil S``: then py-spy samples for S seconds which thread holds the GIL while each training
row runs (the step's thread, the feeder, the Loader's threads). ``--train-workers 2,4``: also
``feed_wW`` and ``train_wW``, the same with ``num_workers=W`` (the
Loader's threads in the workers, the main process left to rebuild, move and step).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import write_result  # noqa: E402

GOAL = 0.9          # torch_w0 against the Loader
GOAL_WORKERS = 0.95  # torch_wW against torch_w0 on 2 cores (1.0 on 16)


def ensure(path: str, size: int):
    """The kdd-like file and its index (made when missing or of another size)."""
    from lirs.build import build_index
    from lirs.eval.gen import generate
    from lirs.index import open_index

    if not os.path.exists(path) or abs(os.path.getsize(path) - size) > 0.05 * size:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        generate("kdd", path, size=size, order="shuffled", seed=1, progress=False)
    try:
        return open_index(path)
    except Exception:  # noqa: BLE001 - no or stale sidecar: build it
        return build_index(path, progress=False)


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def proc_cpu_s(pid: int) -> float:
    """CPU seconds of a live process (utime + stime from /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_s(dl=None) -> float:
    """CPU seconds of this process, its finished children and the live workers of ``dl``
    (persistent DataLoader workers do not exit between epochs)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    live = getattr(getattr(dl, "_iterator", None), "_workers", None) or []
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime + sum(proc_cpu_s(w.pid) for w in live)


def run_loader(loader, epoch) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, records) of one epoch of a lirs.Loader."""
    t, c = time.perf_counter(), cpu_s()
    n = sum(len(b.ids) for b in loader.epoch(epoch))
    return time.perf_counter() - t, cpu_s() - c, n


def run_torch(dl, epoch) -> tuple[float, float, int]:
    """The same for a DataLoader of make_dataloader (workers persistent: started by the first)."""
    dl.dataset.set_epoch(epoch)
    c = cpu_s(dl)
    t = time.perf_counter()
    n = sum(len(b["ids"]) for b in dl)
    s = time.perf_counter() - t
    return s, cpu_s(dl) - c, n


def pass_shares(t: dict) -> dict:
    """Shares of a pass's wall time (:meth:`lirs.torch.LirsDataLoader.pass_times` ``t``): the main
    process's wait for the workers' items, and the median over the workers of each of their parts
    (``wait``: for their Loader's batches, ``pack``, ``torch``: for the main process to ask)."""
    main = t.get("main") or {}
    wall = main.get("end") or 0.0
    if not wall:
        return {}
    ws = [w for w in t["workers"] if w["end"] is not None]
    out = {"main_wait": main["wait_s"] / wall, "main_cpu": main["cpu_s"] / wall,
           "first_batch_s": main["first"]}
    for part in ("wait", "pack", "torch", "cpu"):
        out[f"worker_{part}"] = statistics.median(w[f"{part}_s"] / wall for w in ws) if ws else None
    return out


def interleave(made: dict, runner, repeats: int, n: int, warmup_epoch: int = 99):
    """Seconds and CPU seconds of ``repeats`` interleaved epochs of each of ``made`` (after one
    untimed epoch each, whose seconds are returned too)."""
    first = {name: runner(name, obj, warmup_epoch)[0] for name, obj in made.items()}
    runs, cpus = {k: [] for k in made}, {k: [] for k in made}
    for rep in range(repeats):
        for name, obj in made.items():
            s, c, got = runner(name, obj, rep)
            assert got == n, f"{name}: {got} records, expected {n}"
            runs[name].append(s)
            cpus[name].append(c)
            print(f"  rep {rep} {name:9s} {s:7.2f} s  {n / s:>12,.0f} records/s  cpu {c:6.2f} s", file=sys.stderr)
    return first, runs, cpus


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/work/scratch/torch-bench/kdd-200MB.svm")
    ap.add_argument("--size", type=float, default=200e6, help="bytes of the generated file")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--granularity", default="group")
    ap.add_argument("--workers", default="2", help="comma-separated num_workers to run beside 0")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a 5 MB file, one repeat")
    ap.add_argument("--train", action="store_true", help="the GPU-feeding benchmark (train_gpu.json)")
    ap.add_argument("--device", default=None, help="--train: cuda (default when available) or cpu")
    ap.add_argument("--train-gil", type=float, default=0.0, help="--train: seconds py-spy samples which thread "
                                                                   "holds the GIL while train (and train_wW) run")
    ap.add_argument("--train-workers", default="", help="--train: comma-separated num_workers whose feed and "
                                                        "training also run (feed_wW, train_wW)")
    ap.add_argument("--note", default="", help="recorded in the JSON (e.g. 'machine shared with other jobs')")
    ap.add_argument("--json", default=None, help="result file name (default: torch / train_gpu, smoke: none)")
    ap.add_argument("--out", default=None, help="result file path (default benchmarks/results/NAME.json)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.data, a.size, a.repeats = os.path.join("/tmp", "lirs-bench-torch-smoke.svm"), 5e6, 1
    idx = ensure(a.data, int(a.size))
    warm(a.data)
    if a.train:
        return train(a, idx, argv)
    kw = dict(granularity=a.granularity, seed=0)
    import lirs
    from lirs.torch import make_dataloader

    workers = [int(w) for w in a.workers.split(",") if w.strip() and int(w) > 0]
    made = {"loader": lirs.Loader(a.data, a.batch_size, **kw),
            "torch_w0": make_dataloader(a.data, a.batch_size, num_workers=0, **kw)}
    for w in workers:
        made[f"torch_w{w}"] = make_dataloader(a.data, a.batch_size, num_workers=w, **kw)
    from lirs.workers import CROSSED

    crossed = {}  # name -> how its last epoch's items reached the main process (lirs.workers.CROSSED)
    times = {}  # name -> where its last epoch's time went (LirsDataLoader.pass_times)

    def runner(name, obj, e):
        before = dict(CROSSED)
        got = (run_loader if name == "loader" else run_torch)(obj, e)
        crossed[name] = {k: v - before.get(k, 0) for k, v in CROSSED.items() if v - before.get(k, 0)}
        if name not in ("loader", "torch_w0"):
            times[name] = obj.pass_times()
        return got

    load_before = os.getloadavg()
    first, runs, cpus = interleave(made, runner, a.repeats, idx.n)
    med = {k: statistics.median(v) for k, v in runs.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items()}
    size = os.path.getsize(a.data)
    from lirs.cores import usable_cores

    res = {
        "command": "flock /tmp/lirs-bench.lock python benchmarks/bench_torch.py " + " ".join(argv or sys.argv[1:]),
        "data": {"path": a.data, "bytes": size, "records": idx.n, "profile": "kdd", "cache": "warm"},
        "batch_size": a.batch_size, "granularity": a.granularity, "repeats": a.repeats,
        "usable_cores": usable_cores(), "persistent_workers": True, "note": a.note,
        "seconds": runs, "median_s": med, "first_epoch_s": first,
        "records_per_s": {k: idx.n / v for k, v in med.items()},
        "mb_per_s": {k: size / v / 1e6 for k, v in med.items()},
        "ratio_vs_loader": {k: med["loader"] / v for k, v in med.items() if k != "loader"},
        "ratio_vs_w0": {k: med["torch_w0"] / v for k, v in med.items() if k.startswith("torch_w") and k != "torch_w0"},
        # CPU seconds per epoch (all threads and workers): what the adapter costs, less load-sensitive
        "cpu_s": cpus, "cpu_median_s": cpu_med,
        "cpu_ratio_vs_loader": {k: v / cpu_med["loader"] for k, v in cpu_med.items() if k != "loader"},
        # items of the workers' last epoch by how they crossed: in a ring slot, in the pickle stream,
        # or as a shared-memory segment of their own (no free slot)
        "crossed_last_epoch": {k: v for k, v in crossed.items() if k.startswith("torch_w") and k != "torch_w0"},
        # where the workers' last epoch went: each worker's wait for its Loader, packing and wait
        # for the main process to ask, the main process's wait for items (shares of the epoch)
        "pass_shares_last_epoch": {k: pass_shares(v) for k, v in times.items()},
        "pass_times_last_epoch": times,
        "goal_ratio": GOAL, "goal_ratio_workers_vs_w0": GOAL_WORKERS,
        # the machine is shared: a load above its core count slows every run, not their ratio alone
        "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]},
    }
    res["meets_goal"] = {"torch_w0": res["ratio_vs_loader"]["torch_w0"] >= GOAL,
                         **{k: r >= GOAL_WORKERS for k, r in res["ratio_vs_w0"].items()}}
    for k, r in res["ratio_vs_loader"].items():
        print(f"{k}: {r:.2f}x the Loader's records/s", file=sys.stderr)
    for k, r in res["ratio_vs_w0"].items():
        print(f"{k}: {r:.2f}x torch_w0's records/s (goal >= {GOAL_WORKERS})", file=sys.stderr)
    for k, sh in res["pass_shares_last_epoch"].items():
        print(f"{k}: " + ", ".join(f"{p} {v:.2f}" for p, v in sh.items() if v is not None), file=sys.stderr)
    made.pop("loader").close()
    for dl in made.values():
        dl.dataset.close()
    name = a.json or (None if a.smoke and not a.out else "torch")
    if name:
        print(write_result(name, res, a.out), file=sys.stderr)
    return 0


def train(a, idx, argv) -> int:
    """--train: the README's EmbeddingBag model fed by make_dataloader(device=...) on the device."""
    import torch

    import lirs
    from lirs.torch import make_dataloader

    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    kw = dict(granularity=a.granularity, seed=0)
    dl = make_dataloader(a.data, a.batch_size, device=device, **kw)
    # the same feed with the Loader in DataLoader worker processes: the main process then only
    # rebuilds the workers' batches and moves them, beside the step's kernel launches
    workers = [int(w) for w in a.train_workers.split(",") if w.strip() and int(w) > 0]
    dls = {w: make_dataloader(a.data, a.batch_size, device=device, num_workers=w, **kw) for w in workers}
    model = torch.nn.EmbeddingBag(dl.dataset.n_features, 1, mode="sum", sparse=True).to(device)
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def step(b):
        X = b["X"]
        logits = model(X.col_indices(), X.crow_indices()[:-1], per_sample_weights=X.values()).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, (b["y"] > 0).float())
        opt.zero_grad()
        loss.backward()
        opt.step()

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    resident = list(dl)  # one epoch already on the device: the step alone reads no input
    loader = lirs.Loader(a.data, a.batch_size, **kw)

    def runner(name, obj, epoch):
        sync()
        t = time.perf_counter()
        if name == "step":
            n = sum(step(b) or len(b["ids"]) for b in resident)
        elif name == "loader":
            n = sum(len(b.ids) for b in loader.epoch(epoch))
        else:
            obj.dataset.set_epoch(epoch)
            n = sum((step(b) if name.startswith("train") else None) or len(b["ids"]) for b in obj)
        sync()
        return time.perf_counter() - t, 0.0, n

    made = {"step": None, "loader": None, "feed": dl, "train": dl,
            **{f"{k}_w{w}": d for w, d in dls.items() for k in ("feed", "train")}}
    load_before = os.getloadavg()
    _, runs, _ = interleave(made, runner, a.repeats, idx.n)
    gil = {name: train_gil(runner, made[name], name, a.train_gil) for name in made
           if name.startswith("train") and a.train_gil > 0}
    med = {k: statistics.median(v) for k, v in runs.items()}
    rate = {k: idx.n / v for k, v in med.items()}
    res = {
        "command": "python benchmarks/bench_torch.py " + " ".join(argv or sys.argv[1:]),
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if cuda else ""),
        "torch": torch.__version__, "note": a.note or ("" if cuda else "CPU fallback (no CUDA here): CI-sized"),
        "data": {"path": a.data, "bytes": os.path.getsize(a.data), "records": idx.n, "profile": "kdd", "cache": "warm"},
        "batch_size": a.batch_size, "granularity": a.granularity, "repeats": a.repeats,
        "model": "EmbeddingBag(n_features, 1, mode='sum', sparse=True), SGD lr 0.5, BCE with logits",
        "seconds": runs, "median_s": med, "records_per_s": rate,
        # feeding keeps up when train runs at the slower of the step alone and the feed alone
        "train_vs_slower_alone": rate["train"] / min(rate["step"], rate["feed"]),
        "feed_vs_loader": rate["feed"] / rate["loader"],
        # the goal: training at >= 0.8x the slower of the GPU step alone and the Loader alone
        "train_vs_step_or_loader": rate["train"] / min(rate["step"], rate["loader"]),
        # the same with the Loader in W DataLoader workers (--train-workers)
        "workers": {f"w{w}": {"feed_vs_loader": rate[f"feed_w{w}"] / rate["loader"],
                              "train_vs_slower_alone": rate[f"train_w{w}"] / min(rate["step"], rate[f"feed_w{w}"]),
                              "train_vs_step_or_loader": rate[f"train_w{w}"] / min(rate["step"], rate["loader"])}
                    for w in workers},
        "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]},
    }
    if gil:  # who holds the GIL while training: the step's launches (consumer), the feeder, the Loader's threads
        res["gil"] = gil
        for name, g in gil.items():
            print(f"{name}: GIL {g.get('share') or 0:.0%} by thread {g.get('threads') or g.get('reason')}", file=sys.stderr)
    for k, v in rate.items():
        print(f"{k:7s} {v:>12,.0f} records/s", file=sys.stderr)
    print(f"train / slower alone: {res['train_vs_slower_alone']:.2f}; train / min(step, loader): "
          f"{res['train_vs_step_or_loader']:.2f}", file=sys.stderr)
    for w, r in res["workers"].items():
        print(f"{w}: train / min(step, loader): {r['train_vs_step_or_loader']:.2f}", file=sys.stderr)
    loader.close()
    for d in (dl, *dls.values()):
        d.dataset.close()
    name = a.json or (None if a.smoke and not a.out else "train_gpu")
    if name:
        print(write_result(name, res, a.out), file=sys.stderr)
    return 0


def train_gil(runner, dl, name: str, seconds: float) -> dict:
    """The GIL-held share of wall time while ``name`` (a training row of :func:`train`) runs epochs,
    sampled by py-spy from a thread of this process (``bench_cores.measure_gil``: a ``--gil``
    record, then an ``--idle`` one for the ticks, ``seconds`` each), with the share by holding
    thread's role (consumer: the main thread, which launches the step; feeding: the device feeder;
    pool, planning: the Loader's) and the top functions; ``{"reason": ...}`` where py-spy is
    missing or may not attach."""
    import threading

    import bench_cores as bc

    py_spy = bc.find_py_spy()
    if py_spy is None:
        return {"reason": "py-spy not found (pip install py-spy, or set PYSPY)"}
    out = {}

    def sample():
        res, why = bc.measure_gil(py_spy, os.getpid(), seconds, 200)
        out.update(res or {"reason": why})
    t = threading.Thread(target=sample, name="bench-gil", daemon=True)
    t.start()
    e = 1000
    while t.is_alive():  # epochs go on until both records are taken
        runner(name, dl, e)
        e += 1
    if "share" not in out:
        return out
    threads = {r: round(v["share_of_wall"], 4) for r, v in out["holders"]["threads"].items()}
    top = [{"function": f["frame"], "share_of_wall": round(f["share_of_wall"], 4)} for f in out["holders"]["functions"][:8]]
    return {"share": out["share"], "threads": threads, "functions": top, "ticks": out["ticks"], "seconds": seconds}


if __name__ == "__main__":
    sys.exit(main())
