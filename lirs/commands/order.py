"""`lirs order PATH`: an epoch's record order and read plan, computed without reading the data."""
from __future__ import annotations

import json
import os
import sys

from ..errors import UsageError


def add_parser(sub):
    from ..plan import GRANULARITIES, PERMUTATIONS

    p = sub.add_parser(
        "order", help="write an epoch's record-ID order and print its read plan",
        description="Plan one epoch of an indexed dataset (nothing is read): write the record IDs in "
                    "delivery order for one rank as an int64 .npy file, and print the plan's statistics: "
                    "batches, reads, bytes read, payload bytes and read amplification.")
    p.add_argument("path", metavar="PATH", help="data file, directory or .lirs sidecar (indexed)")
    p.add_argument("--granularity", default="group", choices=GRANULARITIES,
                   help="shuffling unit (default: group)")
    p.add_argument("--batch-size", type=int, default=1024, metavar="B", help="records per batch (default 1024)")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--epoch", type=int, default=0, metavar="E")
    p.add_argument("--rank", type=int, default=0, metavar="R")
    p.add_argument("--world-size", type=int, default=1, metavar="W")
    p.add_argument("--drop-last", action="store_true", help="every batch full; the tail is not delivered")
    p.add_argument("--group-bytes", default="64K", metavar="G", help="group size for group/window (default 64K)")
    p.add_argument("--window", type=int, default=16, metavar="N", help="groups per window (default 16)")
    p.add_argument("--permutation", default="auto", choices=PERMUTATIONS,
                   help="table (stored), stateless (computed on demand) or auto (default)")
    p.add_argument("-o", "--out", metavar="ORDER.npy", default=None, help="write the order here")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    return p


def run(args) -> int:
    import numpy as np

    from ..index import open_index
    from ..plan import plan_epoch
    from ..units import format_bytes, parse_size

    idx = open_index(args.path)
    plan = plan_epoch(idx, args.batch_size, args.granularity, seed=args.seed, epoch=args.epoch, rank=args.rank,
                      world_size=args.world_size, drop_last=args.drop_last,
                      group_bytes=parse_size(args.group_bytes), window=args.window,
                      permutation=args.permutation)
    st = plan.stats()
    st["path"] = os.path.abspath(args.path)
    st["records_in_dataset"] = idx.n
    st["index_bytes_per_record"] = idx.index_bytes() / idx.n if idx.n else 0.0
    st["plan_bytes_per_record"] = plan.nbytes / idx.n if idx.n else 0.0
    if args.out:
        if not args.out.endswith(".npy"):
            raise UsageError(f"--out {args.out}: the order is written as .npy; name it ORDER.npy")
        order = plan.order()
        tmp = args.out + ".tmp.npy"
        try:
            np.save(tmp, order)
            os.replace(tmp, args.out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        st["out"] = os.path.abspath(args.out)
    if args.json:
        json.dump(st, sys.stdout, indent=2)
        print()
        return 0
    amp = st["amplification"]
    print(f"{st['path']}: epoch {args.epoch}, {args.granularity}, rank {args.rank} of {args.world_size}, "
          f"seed {args.seed}")
    print(f"  batches        {st['batches']:,} x {args.batch_size} records ({st['records']:,} records"
          f"{', tail dropped' if args.drop_last and st['records'] * args.world_size < idx.n else ''})")
    print(f"  units          {st['units']:,} ({st['permutation']} permutation)")
    print(f"  reads          {st['reads']:,} (median {format_bytes(st['median_read_bytes'] or 0)})")
    print(f"  bytes read     {format_bytes(st['bytes_read'])} for {format_bytes(st['payload_bytes'])} of records")
    print(f"  amplification  {amp:.3f}x" if amp else "  amplification  -")
    print(f"  memory         index {st['index_bytes_per_record']:.2f} B/record + plan "
          f"{st['plan_bytes_per_record']:.2f} B/record")
    if args.out:
        print(f"  order          {st['out']}")
    return 0
