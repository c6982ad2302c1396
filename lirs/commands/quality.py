"""`lirs quality PATH | --records N`: how random each shuffle strategy is, and what it costs."""
from __future__ import annotations

import json
import os
import sys

from ..errors import UsageError


def add_parser(sub):
    p = sub.add_parser(
        "quality", help="compare the randomness, memory and I/O of shuffle strategies (no data is read)",
        description="Run shuffle strategies (lirs instance/page/group/window and the reference systems: "
                    "sequential, BMF, shuffle buffer, Deep Lake, MosaicML Streaming, FFCV, two-pass, terashuf, "
                    "chunk round-robin) for a few epochs over an indexed dataset, or over N synthetic "
                    "label-sorted records, and measure from the orders and the index's labels alone: (a) file "
                    "segments and labels seen against records drawn, (b) label entropy per batch, (c) "
                    "displacement and rank correlation with file order, (d) batch pairs that meet again next "
                    "epoch, (e) Streaming's entropy, (f) neighbours from the same group, (g) chi-square "
                    "uniformity p-values, plus each strategy's memory and I/O per epoch.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("path", nargs="?", metavar="PATH", help="data file, directory or .lirs sidecar (indexed)")
    src.add_argument("--records", type=int, metavar="N", help="N synthetic records instead of a file "
                                                              "(label-sorted, fixed size; nothing is written)")
    p.add_argument("--strategies", default=None, metavar="A,B,...", help="comma-separated subset (default: all)")
    p.add_argument("--epochs", type=int, default=20, metavar="E",
                   help="epochs per strategy (default 20; the uniformity test needs at least 10)")
    p.add_argument("--batch-size", type=int, default=1024, metavar="B", help="records per batch (default 1024)")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--memory", default="5%", metavar="SIZE",
                   help="memory budget of the buffer/block/shard strategies: bytes (64M, 1G) or a share of the "
                        "data (5%%, the default)")
    p.add_argument("--group-bytes", default="64K", metavar="G",
                   help="lirs group size, also the group of metric (f) (default 64K)")
    p.add_argument("--window", type=int, default=16, metavar="W", help="groups per lirs window (default 16)")
    p.add_argument("--segments", type=int, default=1000, metavar="K",
                   help="file segments of metric (a) (default 1000)")
    p.add_argument("--record-bytes", type=int, default=360, metavar="R",
                   help="with --records: bytes per record (default 360, kdd-like)")
    p.add_argument("--classes", type=int, default=1000, metavar="C",
                   help="with --records: balanced classes, sorted in file order (default 1000)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a strategy parameter, e.g. buffer_records=10000, shard_records=4096, canonical_nodes=2, "
                        "reshuffle_every_epoch=false (repeatable; sizes like 16M are accepted)")
    p.add_argument("--json", metavar="OUT", default=None, help="write the full results here (JSON)")
    p.add_argument("--plot", metavar="OUT.png", default=None, help="save a plot (needs matplotlib)")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    return p


def parse_params(items) -> dict:
    """``["name=value", ...]`` -> dict; values become int (sizes like 16M allowed), bool or str."""
    from ..eval.strategies import all_params
    from ..units import parse_size

    out = {}
    known = all_params()
    for item in items:
        if "=" not in item:
            raise UsageError(f"--param {item!r}: expected NAME=VALUE")
        k, v = (s.strip() for s in item.split("=", 1))
        if k not in known:
            raise UsageError(f"--param {k}: no strategy takes it; known: {', '.join(sorted(known))}")
        if v.lower() in ("true", "yes", "1", "false", "no", "0") and k == "reshuffle_every_epoch":
            out[k] = v.lower() in ("true", "yes", "1")
        elif k in ("inner", "permutation"):
            out[k] = v
        else:
            out[k] = parse_size(v)
    return out


def memory_budget(text, payload: int) -> int:
    """``"5%"`` -> 5% of ``payload`` bytes; ``"64M"`` -> 67108864."""
    from ..units import parse_size

    t = str(text).strip()
    if t.endswith("%"):
        try:
            frac = float(t[:-1]) / 100.0
        except ValueError:
            raise UsageError(f"--memory {text!r}: expected a size like 64M or a share like 5%") from None
        if not 0 < frac <= 1:
            raise UsageError(f"--memory {text!r}: a share must be in (0%, 100%]")
        return max(4096, int(payload * frac))
    m = parse_size(t)
    if m < 1:
        raise UsageError(f"--memory {text!r} must be positive")
    return m


def run(args) -> int:
    from ..eval.quality import evaluate, format_markdown, format_table, plot
    from ..eval.strategies import DEFAULT_RECORD_BYTES, STRATEGIES
    from ..units import parse_size

    names = None
    if args.strategies:
        names = [s.strip() for s in args.strategies.split(",") if s.strip()]
        bad = [s for s in names if s not in STRATEGIES]
        if bad or not names:
            raise UsageError(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")
    if args.epochs < 1 or args.batch_size < 1:
        raise UsageError("--epochs and --batch-size must be >= 1")
    if args.plot and not args.plot.endswith(".png"):
        raise UsageError(f"--plot {args.plot}: the plot is a PNG; name it OUT.png")
    params = parse_params(args.param)
    if args.path is not None:
        from ..index import open_index

        source = open_index(args.path)
        payload = source.payload_bytes
        what = os.path.abspath(args.path)
    else:
        if args.records < 2:
            raise UsageError("--records must be >= 2")
        source = args.records
        payload = args.records * (args.record_bytes or DEFAULT_RECORD_BYTES)
        what = f"{args.records:,} synthetic label-sorted records of {args.record_bytes} B, {args.classes} classes"
    params.setdefault("memory_bytes", memory_budget(args.memory, payload))
    params.setdefault("window", args.window)
    res = evaluate(source, names, epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, params=params,
                   segments=args.segments, group_bytes=parse_size(args.group_bytes), classes=args.classes,
                   record_bytes=args.record_bytes)
    res["config"]["source"] = what
    res["config"]["memory"] = args.memory
    if args.epochs < 10:
        print(f"note: {args.epochs} epochs is too few for the uniformity test to mean much (use >= 10)",
              file=sys.stderr)
    cfg = res["config"]
    print(f"{what}: {cfg['n']:,} records, batch {cfg['batch_size']}, {cfg['epochs']} epochs, seed {cfg['seed']}, "
          f"memory budget {params['memory_bytes']:,} B")
    print(format_markdown(res) if args.markdown else format_table(res))
    print("columns: seg@1% = share of file segments seen after 1% of an epoch; labels all = share of the epoch "
          "drawn until every label was seen; batch H = label entropy per batch (bits); disp = mean |moved| / n; "
          "rho = rank correlation with file order; pairs again = batch pairs meeting again next epoch, x ideal; "
          "stream H = Streaming's entropy; same grp = in-batch neighbours from one group; p pos / p pairs / "
          "p mates = chi-square p of positions / file-neighbour gaps / batch mates next epoch (uniform: all >= "
          f"{cfg['pass_p']:g}; not: one < {cfg['fail_p']:g}); memory, bytes read and written per epoch, random "
          "reads (count x median size).")
    if args.json:
        tmp = args.json + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(res, f, indent=1)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, args.json)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        print(f"results: {os.path.abspath(args.json)}")
    if args.plot:
        if plot(res, args.plot):
            print(f"plot: {os.path.abspath(args.plot)}")
        else:
            print("no plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
    return 0
