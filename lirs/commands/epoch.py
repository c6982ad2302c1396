"""`lirs epoch PATH`: read one epoch through the Loader and report how fast and how smoothly."""
from __future__ import annotations

import os
import resource
import sys
import time

from ..policies import DEFAULT_GRANULARITY, GRANULARITIES
from ..recommendation import AUTO
from ..errors import UsageError
from . import (at_least_one, at_least_zero, check_unit_options, option, planner_group_size, print_json,
               printing_results, window_spec)


def add_parser(sub):
    p = sub.add_parser(
        "epoch", help="read one epoch and report throughput and stalls",
        description="Read one epoch of an indexed dataset with the Loader (plan, direct reads, decode), "
                    "optionally sleeping --compute-ms per batch to stand in for a training step, and "
                    "report records/s, MB/s, reads/s, read amplification, the stall fraction (time "
                    "the consumer waited for data / wall time), peak RSS and the engine used.")
    p.add_argument("path", metavar="PATH", help="data file, directory or .lirs sidecar (indexed on first use)")
    p.add_argument("--granularity", default=DEFAULT_GRANULARITY, choices=(*GRANULARITIES, AUTO),
                   help=f"shuffling unit (default: {DEFAULT_GRANULARITY})")
    p.add_argument("--engine", default="auto",
                   help="auto (default; $LIRS_ENGINE or the best that works), uring, threads, aiofiles, buffered")
    p.add_argument("--batch-size", type=int, default=1024, metavar="B", help="records per batch (default 1024)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of every epoch's order (default 0)")
    p.add_argument("--epoch", type=int, default=0, metavar="E",
                   help="the epoch whose order is read: each epoch of a seed has its own (default 0)")
    p.add_argument("--compute-ms", type=float, default=0.0, metavar="T",
                   help="sleep T ms per batch, as a training step would take (default 0)")
    p.add_argument("--prefetch", type=int, default=4, metavar="K", help="batches in flight (default 4)")
    # None: not given (64K, or what `--granularity auto` saved), so that a granularity without groups can refuse it
    p.add_argument("--group-bytes", default=None, metavar="G",
                   help="group size for group/window (default 64K; with --granularity auto, the saved one)")
    p.add_argument("--window", default=None, metavar="W",  # None: auto, or what `--granularity auto` saved
                   help="memory of a window: auto (default: 5%% of the data within 16M..256M), a size such as 64M, a share such as 5%%, or a group count")
    p.add_argument("--depth", type=int, default=None, metavar="D",
                   help="reads in flight per batch, at most 4096 (engine default: uring 128, threads 32, "
                        "aiofiles 64, buffered up to 8)")
    p.add_argument("--max-batches", type=int, default=None, metavar="N",
                   help="stop after N batches (reads, bytes read and payload then count the steps read ahead of "
                        "them too, up to --prefetch batches: a share that varies from run to run)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def run(args) -> int:
    from ..api import depth_of
    from ..loader import Loader
    from ..units import format_bytes

    check_unit_options(args.granularity, args.group_bytes, args.window)
    # the Loader checks these too, naming its parameters (batch_size): said here with the options typed
    option("--batch-size", args.batch_size, at_least_one)
    option("--prefetch", args.prefetch, at_least_one)
    option("--depth", args.depth, depth_of)
    option("--seed", args.seed, at_least_zero)
    option("--epoch", args.epoch, at_least_zero)
    if args.window is not None:
        option("--window", args.window, window_spec)
    if not 0 <= args.compute_ms <= 3.6e6:  # (NaN fails both) an hour a batch at most: time.sleep takes it
        raise UsageError(f"--compute-ms must be a number of milliseconds from 0 to 3600000, got {args.compute_ms}")
    if args.max_batches is not None and args.max_batches < 1:
        raise UsageError("--max-batches must be >= 1")
    compute_s = args.compute_ms / 1000.0
    # None: the Loader's default, or under auto the saved size (a given one wins over it)
    group_bytes = None if args.group_bytes is None else option("--group-bytes", args.group_bytes, planner_group_size)
    with Loader(args.path, args.batch_size, granularity=args.granularity, group_bytes=group_bytes, window=args.window,
                seed=args.seed, engine=args.engine, prefetch=args.prefetch, depth=args.depth) as loader:
        eng = loader.engine
        full = total = loader.num_batches(args.epoch)
        if args.max_batches is not None:
            total = min(total, args.max_batches)
        from tqdm import tqdm

        bar = tqdm(total=total, unit="batch", disable=not sys.stderr.isatty(), leave=False)
        loader.stats.reset()
        t0 = time.perf_counter()
        n = 0
        for batch in loader.epoch(args.epoch):
            if compute_s:
                time.sleep(compute_s)
            n += 1
            bar.update(1)
            if n >= total:
                break
        wall = time.perf_counter() - t0
        bar.close()
        st = loader.stats.as_dict()
        # stopped before the epoch's end: the pool had read steps ahead of the last batch, counted
        ahead = n < full
        res = {
            "path": os.path.abspath(args.path),
            "format": loader.index.format,
            "granularity": loader.granularity,  # what "auto" chose
            "group_bytes": loader.group_bytes, "window_groups": loader.window,
            "engine": eng.name,
            "direct": eng.direct,
            "engine_reason": eng.reason,
            "batch_size": args.batch_size,
            "prefetch": args.prefetch,
            "compute_ms": args.compute_ms,
            "epoch": args.epoch,
            "seed": args.seed,
            "batches": st["batches"],
            "records": st["records"],
            "wall_s": wall,
            "records_per_s": st["records"] / wall if wall else None,
            "mb_per_s": st["bytes_read"] / wall / 1e6 if wall else None,
            "reads_per_s": st["reads"] / wall if wall else None,
            "bytes_read": st["bytes_read"],
            "payload_bytes": st["payload_bytes"],
            "reads": st["reads"],
            "amplification": st["amplification"],
            "read_ahead_counted": ahead,  # reads, bytes and payload include steps read for batches not delivered
            "wait_s": st["wait_s"],
            "stall_fraction": st["wait_s"] / wall if wall else None,
            "load_ms_per_batch": 1000 * (st["io_s"] + st["decode_s"]) / st["batches"] if st["batches"] else None,
            "peak_rss_bytes": peak_rss_bytes(),
        }
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        if args.json:
            print_json(res)
            return 0
        print(f"{res['path']}: epoch {args.epoch}, {res['granularity']}, engine {res['engine']}"
              f"{' (O_DIRECT)' if res['direct'] else ' (page cache)'}")
        # the records served, not batches x batch size: the last batch may be short
        print(f"  batches        {res['batches']:,} of up to {args.batch_size:,} records ({res['records']:,} records), "
              f"prefetch {args.prefetch}, compute {args.compute_ms:g} ms/batch")
        print(f"  wall           {wall:.3f} s")
        print(f"  records/s      {res['records_per_s']:,.0f}")
        print(f"  MB/s           {res['mb_per_s']:,.1f}   ({format_bytes(res['bytes_read'])} read"
              f"{', with the steps read ahead of the last batch' if ahead else ''})")
        print(f"  reads/s        {res['reads_per_s']:,.0f}   ({res['reads']:,} reads)")
        amp = res["amplification"]
        print(f"  amplification  {amp:.3f}x" if amp else "  amplification  -")
        print(f"  stall          {100 * res['stall_fraction']:.1f}% of wall time waiting for data")
        print(f"  peak RSS       {format_bytes(res['peak_rss_bytes'])}")
    return 0
