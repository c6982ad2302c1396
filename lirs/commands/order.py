"""`lirs order PATH`: an epoch's record order and read plan, computed without reading the data."""
from __future__ import annotations

import os

from ..constants import DEFAULT_GROUP_BYTES, DEFAULT_WINDOW
from ..policies import DEFAULT_GRANULARITY
from ..errors import UsageError
from ..litter import out_dir
from ..sidecar import belonging_to_input
from . import (at_least_one, at_least_zero, check_unit_options, option, planner_group_size, print_json,
               printing_results, window_spec)


def add_parser(sub):
    from ..plan import GRANULARITIES, PERMUTATIONS

    p = sub.add_parser(
        "order", help="write an epoch's record-ID order and print its read plan",
        description="Plan one epoch of an indexed dataset (nothing is read): write the record IDs in "
                    "delivery order for one rank as an int64 .npy file, and print the plan's statistics: "
                    "batches, reads, bytes read, payload bytes and read amplification.")
    p.add_argument("path", metavar="PATH", help="data file, directory or .lirs sidecar (indexed on first use)")
    p.add_argument("--granularity", default=None, choices=GRANULARITIES,
                   help=f"shuffling unit (default: {DEFAULT_GRANULARITY})")
    p.add_argument("--strategy", default=None, metavar="NAME",
                   help="any shuffle strategy of `lirs quality` instead (instance/page/group/window are the "
                        "granularities; others: sequential, bmf, shuffle_buffer, deeplake, streaming_py1s, ..., "
                        "two_pass, terashuf, chunk_roundrobin); prints its memory and I/O cost")
    p.add_argument("--memory", default=None, metavar="SIZE",
                   help="with --strategy: memory budget of buffer/block/shard strategies (bytes or a share of the "
                        "data, default 5%%)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="with --strategy: a strategy parameter, e.g. buffer_records=10000 (repeatable)")
    # None: not given (auto applies), so that a --strategy that reads no file can refuse it when given
    p.add_argument("--engine", default=None, metavar="NAME",
                   help="the engine whose reads are planned, as `lirs epoch --engine`: auto (default; $LIRS_ENGINE "
                        "or the best that works: O_DIRECT 4 KiB blocks where the files take it and are not held "
                        "in memory), uring, threads, aiofiles, buffered (page-cache copies of each record's bytes)")
    p.add_argument("--batch-size", type=int, default=1024, metavar="B", help="records per batch (default 1024)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of every epoch's order (default 0)")
    p.add_argument("--epoch", type=int, default=0, metavar="E",
                   help="the epoch whose order is written: each epoch of a seed has its own (default 0)")
    p.add_argument("--rank", type=int, default=0, metavar="R")
    p.add_argument("--world-size", type=int, default=1, metavar="W")
    p.add_argument("--drop-last", action="store_true", help="every batch full; the tail is not delivered")
    # None: not given (the defaults apply in run), so that a --strategy that does not take an option
    # can refuse it when given rather than ignore it
    p.add_argument("--group-bytes", default=None, metavar="G", help="group size for group/window (default 64K)")
    p.add_argument("--window", default=None, metavar="W",
                   help="memory of a window: auto (default: 5%% of the data within 16M..256M), a size such as 64M, a share such as 5%%, or a group count")
    p.add_argument("--permutation", default=None, choices=PERMUTATIONS,
                   help="table (stored), stateless (computed on demand) or auto (default)")
    p.add_argument("-o", "--out", metavar="ORDER.npy", default=None, help="write the order here")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    return p


def _check_out(path: str | None, data: str) -> None:
    """UsageError for an --out that cannot be written (not .npy, in no directory, one of the files
    of the input ``data``), before the order is computed."""
    if path is None:
        return
    if not path.endswith(".npy"):
        raise UsageError(f"--out {path}: the order is written as .npy; name it ORDER.npy")
    out_dir(path, "--out", inputs=belonging_to_input(data))


def _write_order(path: str, order) -> str:
    """Write ``order`` to ``path`` as .npy (through a temporary put in place once whole); the absolute path.

    A failed write raises OSError naming ``path`` with its errno (ENOSPC, EIO, ...), which the CLI
    describes: np.save writes a real file with ndarray.tofile, whose short write is a bare OSError
    ("20000 requested and 8176 written") naming neither the file nor the cause."""
    import numpy as np
    from numpy.lib import format as npy

    from ..litter import clean_dead_temps, temp_name

    arr = np.ascontiguousarray(order)
    clean_dead_temps(path)  # a killed run's
    tmp = temp_name(path)  # named as every lirs temporary, written through a file (np.save adds no suffix)
    try:
        try:
            with open(tmp, "wb") as f:
                npy.write_array_header_1_0(f, npy.header_data_from_array_1_0(arr))  # as np.save's for this array
                f.write(memoryview(arr).cast("B"))  # Python's write: an OSError with the errno of the failed call
        except OSError as e:
            raise OSError(e.errno, e.strerror or str(e), path) from e
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return os.path.abspath(path)


def _check_counts(args) -> None:
    """UsageError naming the option (as typed) of a count that cannot work, before the data is
    indexed: plan_epoch checks them too, but after the index was built, naming its parameters."""
    def rank(r):
        if not 0 <= r < args.world_size:
            raise UsageError(f"must be in [0, {args.world_size}) for --world-size {args.world_size}, got {r}")
        return r

    option("--batch-size", args.batch_size, at_least_one)
    option("--seed", args.seed, at_least_zero)
    option("--epoch", args.epoch, at_least_zero)
    option("--world-size", args.world_size, at_least_one)
    option("--rank", args.rank, rank)


def _check_drop_last(args, n: int) -> None:
    """UsageError when --drop-last leaves the epoch empty (fewer records than one full batch per
    rank), as the Loader refuses it (:func:`lirs.ranges.check_drop_last`), said with the options."""
    if args.drop_last and n < args.batch_size * args.world_size:
        ranks = f" and --world-size {args.world_size}" if args.world_size > 1 else ""
        raise UsageError(f"--drop-last with --batch-size {args.batch_size}{ranks} leaves every epoch empty: the "
                         f"dataset has {n} records, fewer than one full batch{' per rank' if ranks else ''}")


def _strategy_params(args) -> dict:
    """The parameters of reference strategy ``args.strategy`` from --param, --memory and --group-bytes;
    UsageError, before any work, for an option it does not take (refused, not ignored)."""
    from ..eval.strategies import strategy_params
    from ..units import parse_size
    from .quality import memory_budget, parse_params

    name = args.strategy
    if args.world_size != 1 or args.rank != 0 or args.drop_last or args.engine is not None:
        raise UsageError(f"--rank/--world-size/--drop-last/--engine apply to the lirs strategies "
                         f"(instance, page, group, window), not to {name}")
    params = parse_params(args.param)
    # record_bytes sizes a synthetic source's records; an index has every record's size, so it is not taken here
    takes = [k for k in strategy_params(name) if k != "record_bytes"]
    flags = {"memory_bytes": ("--memory", args.memory), "group_bytes": ("--group-bytes", args.group_bytes),
             "window": ("--window", args.window), "permutation": ("--permutation", args.permutation)}
    refused = [f"--param {k}" for k in params if k not in takes]
    refused += [flag for k, (flag, value) in flags.items() if value is not None and k not in takes]
    if refused:
        options = [flags[k][0] for k in ("memory_bytes", "group_bytes") if k in takes]
        options += [f"--param {', '.join(takes)}"] if takes else []
        raise UsageError(f"--strategy {name} does not take {', '.join(refused)}; "
                         f"it takes {' and '.join(options) if options else 'no options (its order is fixed)'}")
    if "memory_bytes" in takes:
        if args.memory is not None:
            memory_budget(args.memory, 1)  # a spec that cannot work fails here, before the data is indexed
        params.setdefault("memory_bytes", args.memory or "5%")  # a share of the data: sized once it is open
    if "group_bytes" in takes and args.group_bytes is not None:
        params.setdefault("group_bytes", parse_size(args.group_bytes))
    return params


def _run_strategy(args, params: dict, idx) -> int:
    """A reference strategy's order (not a planner granularity): whole epoch, one rank."""
    from ..eval.strategies import run_strategy
    from ..units import format_bytes
    from .quality import memory_budget

    if isinstance(params.get("memory_bytes"), str):  # --memory (or its 5% default): bytes of this data
        params["memory_bytes"] = memory_budget(params["memory_bytes"], idx.payload_bytes)
    r = run_strategy(args.strategy, idx, seed=args.seed, epoch=args.epoch, batch_size=args.batch_size, **params)
    cost = r.cost.as_dict()
    st = {"strategy": args.strategy, "path": os.path.abspath(args.path), "records": int(len(r.order)),
          "records_in_dataset": idx.n, "batches": -(-len(r.order) // args.batch_size), "batch_size": args.batch_size,
          "seed": args.seed, "epoch": args.epoch, "exact": r.exact, "reshuffles": r.reshuffles,
          "params": r.params, "cost": cost}
    if args.out:
        st["out"] = _write_order(args.out, r.order)
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        if args.json:
            print_json(st)
            return 0
        print(f"{st['path']}: epoch {args.epoch}, strategy {args.strategy}, seed {args.seed}"
              f"{' (uniform permutation)' if r.exact else ''}")
        print(f"  records        {st['records']:,} in {st['batches']:,} batches of {args.batch_size}")
        print(f"  parameters     {', '.join(f'{k}={v}' for k, v in r.params.items()) or '-'}")
        print(f"  memory         {format_bytes(cost['memory_bytes'])} ({cost['memory_what']})")
        reads = (f"{cost['rand_reads']:,} random (median {format_bytes(cost['median_read_bytes'] or 0)})"
                 if cost["rand_reads"] else "none random")
        print(f"  per epoch      read {format_bytes(cost['read_bytes'])} ({format_bytes(cost['seq_read_bytes'])} "
              f"sequential), {reads}, written {format_bytes(cost['write_bytes'])}")
        if cost["oneoff_read_bytes"] or cost["oneoff_write_bytes"]:
            print(f"  once per run   read {format_bytes(cost['oneoff_read_bytes'])}, "
                  f"written {format_bytes(cost['oneoff_write_bytes'])}")
        print(f"  how            {cost['notes']}")
        if args.out:
            print(f"  order          {st['out']}")
    return 0


def run(args) -> int:
    from ..constants import BLOCK
    from ..engines import check_engine, reads_are_copies, requested_engine
    from ..firstuse import open_or_index
    from ..plan import GRANULARITIES, plan_epoch
    from ..eval.strategies import STRATEGIES
    from ..units import format_bytes

    _check_out(args.out, args.path)
    _check_counts(args)
    if args.strategy is not None:
        if args.strategy not in STRATEGIES:
            raise UsageError(f"--strategy {args.strategy}: unknown; choose from {', '.join(STRATEGIES)}")
        if args.granularity is not None and args.granularity != args.strategy:
            raise UsageError(f"--granularity {args.granularity} and --strategy {args.strategy} disagree; give one")
        if args.strategy not in GRANULARITIES:
            params = _strategy_params(args)
            return _run_strategy(args, params, open_or_index(args.path))
        args.granularity = args.strategy
    if args.param or args.memory is not None:  # a granularity's memory is its --window
        raise UsageError(f"{'--param' if args.param else '--memory'} goes with a --strategy other than the "
                         f"granularities ({', '.join(GRANULARITIES)}); a window's memory is --window")
    if args.granularity is None:
        args.granularity = DEFAULT_GRANULARITY
    check_unit_options(args.granularity, args.group_bytes, args.window)
    group_bytes = DEFAULT_GROUP_BYTES if args.group_bytes is None else option("--group-bytes", args.group_bytes,
                                                                              planner_group_size)
    if args.window is not None:
        option("--window", args.window, window_spec)
    # an unknown name (or $LIRS_ENGINE) refused before indexing; reported as asked ($LIRS_ENGINE for auto)
    engine = requested_engine(check_engine(args.engine or "auto"))
    idx = open_or_index(args.path)
    _check_drop_last(args, idx.n)
    # the reads a Loader with this engine makes (its rule, not a copy of it): O_DIRECT ones cover whole
    # 4 KiB blocks; page-cache copies (tmpfs, a filesystem refusing O_DIRECT, buffered) each record's bytes alone
    copies = reads_are_copies(engine, None, idx.paths)
    plan = plan_epoch(idx, args.batch_size, args.granularity, seed=args.seed, epoch=args.epoch, rank=args.rank,
                      world_size=args.world_size, drop_last=args.drop_last,
                      group_bytes=group_bytes,
                      window=DEFAULT_WINDOW if args.window is None else args.window,
                      permutation=args.permutation or "auto", block=BLOCK, align=1 if copies else BLOCK)
    st = plan.stats()
    st["path"] = os.path.abspath(args.path)
    st["engine"] = engine
    st["direct"] = not copies  # as `lirs epoch --json`'s: whether the reads are O_DIRECT
    st["read_as"] = "page cache copies" if copies else f"direct {BLOCK // 1024} KiB blocks"
    st["records_in_dataset"] = idx.n
    st["index_bytes_per_record"] = idx.index_bytes() / idx.n if idx.n else 0.0
    st["plan_bytes_per_record"] = plan.nbytes / idx.n if idx.n else 0.0
    if args.out:
        st["out"] = _write_order(args.out, plan.order())
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        if args.json:
            print_json(st)
            return 0
        amp = st["amplification"]
        print(f"{st['path']}: epoch {args.epoch}, {args.granularity}, rank {args.rank} of {args.world_size}, "
              f"seed {args.seed}")
        print(f"  batches        {st['batches']:,} x {args.batch_size} records ({st['records']:,} records"
              f"{', tail dropped' if args.drop_last and st['records'] * args.world_size < idx.n else ''})")
        print(f"  units          {st['units']:,} ({st['permutation']} permutation)")
        print(f"  reads          {st['reads']:,} (median {format_bytes(st['median_read_bytes'] or 0)}), "
              f"{st['read_as']} (engine {engine})")
        print(f"  bytes read     {format_bytes(st['bytes_read'])} for {format_bytes(st['payload_bytes'])} of records")
        print(f"  amplification  {amp:.3f}x" if amp else "  amplification  -")
        print(f"  memory         index {st['index_bytes_per_record']:.2f} B/record + plan "
              f"{st['plan_bytes_per_record']:.2f} B/record")
        if args.out:
            print(f"  order          {st['out']}")
    return 0
