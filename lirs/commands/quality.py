"""`lirs quality PATH | --records N`: how random each shuffle strategy is, and what it costs."""
from __future__ import annotations

import os
import re
import sys

from . import (at_least_one, at_least_zero, check_results_and_plot, option, planner_group_size, positive_size,
               printing_results, window_spec)
from ..errors import UsageError
from ..litter import out_dir
from ..recommendation import write_json
from ..sidecar import belonging_to_input


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
                    "uniformity p-values, plus each strategy's memory and I/O per epoch. With several memory "
                    "budgets (--memory 1M,16M,5%%,100%% or --memory sweep) it measures the randomness/memory "
                    "frontier of the memory-bounded strategies (lirs window, shuffle buffer, Streaming py1e/py1br, "
                    "Deep Lake, FFCV, CorgiPile, Corgi²) instead. The default table is a summary; --wide prints "
                    "every metric.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("path", nargs="?", metavar="PATH", help="data file, directory or .lirs sidecar (indexed)")
    src.add_argument("--records", type=int, metavar="N", help="N synthetic records instead of a file "
                                                              "(label-sorted, fixed size; nothing is written)")
    p.add_argument("--strategies", default=None, metavar="A,B,...", help="comma-separated subset (default: all)")
    p.add_argument("--epochs", type=int, default=20, metavar="E",
                   help="epochs per strategy (default 20; the uniformity test needs at least 10)")
    p.add_argument("--batch-size", type=int, default=1024, metavar="B", help="records per batch (default 1024)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of every strategy's orders (default 0)")
    p.add_argument("--memory", default="5%", metavar="SIZE[,SIZE...]",
                   help="memory budget M of the buffer/block/shard strategies and of the lirs window "
                        "(the groups M spans, rounded up): bytes (64M, 1G) or a share of the data (5%%, the "
                        "default); several, comma-separated (1M,16M,5%%,100%%), or 'sweep' (1M, 4M, 16M, ... "
                        "below the data, 5%%, 100%%) measure the frontier")
    p.add_argument("--group-bytes", default="64K", metavar="G",
                   help="lirs group size, also the group of metric (f) (default 64K)")
    p.add_argument("--window", default=None, metavar="W",
                   help="lirs window: a size such as 64M, a share such as 5%%, auto or a group count "
                        "(default: the memory budget M; not with several budgets)")
    p.add_argument("--segments", type=int, default=1000, metavar="K",
                   help="file segments of metric (a) (default 1000)")
    # None: not given, so that a PATH with either is refused, not run on the file's own sizes and labels
    p.add_argument("--record-bytes", type=int, default=None, metavar="R",
                   help="only with --records (refused with a PATH): bytes per record (default 360, kdd-like)")
    p.add_argument("--classes", type=int, default=None, metavar="C",
                   help="only with --records (refused with a PATH): balanced classes, sorted in file order "
                        "(default 1000)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a strategy parameter, e.g. buffer_records=10000, shard_records=4096, canonical_nodes=2, "
                        "reshuffle_every_epoch=false (repeatable; a *_bytes parameter takes sizes like 16M, "
                        "the others whole numbers)")
    p.add_argument("--json", metavar="OUT", default=None, help="write the full results here (JSON)")
    p.add_argument("--plot", metavar="OUT.png", default=None, help="save a plot (needs matplotlib)")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    p.add_argument("--wide", action="store_true", help="print every metric, not the summary")
    return p


def parse_params(items) -> dict:
    """``["name=value", ...]`` -> dict, each value checked before any work: a name from its
    choices, a bool (true/false, yes/no, 1/0), a byte size for a ``*_bytes`` parameter (16M), else a
    whole count (``1.5`` is refused, not a buffer of 1 record)."""
    from ..eval.strategies import all_params
    from ..eval.strategies.base import PARAM_CHOICES, check_choice
    from ..units import parse_size

    out = {}
    known = all_params()
    bools = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--param {item!r}: expected NAME=VALUE")
        k, v = (s.strip() for s in item.split("=", 1))
        if k not in known:
            raise UsageError(f"--param {k}: no strategy takes it; known: {', '.join(sorted(known))}")
        try:
            if k in PARAM_CHOICES:
                out[k] = check_choice(k, bools.get(v.lower(), v) if True in PARAM_CHOICES[k] else v)
            elif k.endswith("_bytes"):
                out[k] = parse_size(v)
            elif re.fullmatch(r"[0-9]+", v):
                out[k] = int(v)
            else:
                raise UsageError(f"expected a whole number, got {v!r}")
            if k not in PARAM_CHOICES and out[k] < 1:
                raise UsageError(f"expected a positive number, got {v!r}")
        except UsageError as e:
            raise UsageError(f"--param {k}={v}: {e}") from None
    return out


def memory_budget(text, payload: int) -> int:
    """``"5%"`` -> 5% of ``payload`` bytes (at least 4096, or ``payload`` where that is less:
    :func:`lirs.eval.quality.frontier.share_budget`); ``"64M"`` -> 67108864."""
    return _budget(text, payload, "a size like 64M or a share like 5%")[1]


def _budget(text, payload: int, expected: str) -> tuple[str, int]:
    from ..eval.quality.frontier import share_budget
    from ..units import parse_size

    t = str(text).strip()
    if t.endswith("%"):
        try:
            frac = float(t[:-1]) / 100.0
        except ValueError:
            raise UsageError(f"--memory {text!r}: expected a size like 64M or a share like 5%") from None
        if not 0 < frac <= 1:
            raise UsageError(f"--memory {text!r}: a share must be in (0%, 100%]")
        return share_budget(t, frac, payload)
    try:
        m = parse_size(t)
    except UsageError:
        raise UsageError(f"--memory {text!r}: expected {expected}") from None
    if m < 1:
        raise UsageError(f"--memory {text!r} must be positive")
    return t, m


def memory_budgets(text, payload: int) -> list:
    """``"1M,5%"`` -> ``[("1M", 1048576), ("5%", payload // 20)]`` (in the order given, repeats
    dropped); ``"sweep"`` -> :func:`lirs.eval.quality.default_budgets`. A share the floor raised
    is labelled with the bytes it gives (:func:`lirs.eval.quality.frontier.share_budget`)."""
    from ..eval.quality import default_budgets

    t = str(text).strip()
    if t.lower() == "sweep":
        return default_budgets(payload)
    items = [x.strip() for x in t.split(",")]
    if not t or any(not x for x in items):
        raise UsageError(f"--memory {text!r}: an empty budget; expected sizes like 1M,16M,5% separated by commas")
    out, seen = [], set()
    for x in items:
        # the forms a list of budgets takes (`lirs quality`), not those of one budget (`lirs order`)
        label, m = _budget(x, payload, "a size like 64M, a share like 5%, a comma-separated list of them, "
                                       "or 'sweep'")
        if m not in seen:
            seen.add(m)
            out.append((label, m))
    return out


def raised_notes(budgets, payload: int) -> list:
    """A line per budget of ``budgets`` that the floor raised above the share asked, saying so."""
    from ..eval.quality.frontier import RAISED, SHARE_FLOOR

    return [f"note: --memory {label[label.index('(') + 1:-len(RAISED)]} of the {payload:,} B of data is under "
            f"the floor of {SHARE_FLOOR:,} B (or all the data, where less): the strategies get {m:,} B, "
            f"{100 * m / max(1, payload):.3g}% of the data, shown as {label!r}"
            for label, m in budgets if label.endswith(RAISED)]


def run(args) -> int:
    from ..eval.quality import DEFAULT_CLASSES, MIN_EPOCHS
    from ..policies import POLICIES
    from ..eval.strategies import DEFAULT_RECORD_BYTES, STRATEGIES

    names = None
    if args.strategies is not None:  # "" names none: refused, not read as every strategy
        names = [s.strip() for s in args.strategies.split(",") if s.strip()]
        bad = [s for s in names if s not in STRATEGIES]
        if bad or not names:
            raise UsageError(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")
    if args.epochs < 1 or args.batch_size < 1:
        raise UsageError("--epochs and --batch-size must be >= 1")
    option("--seed", args.seed, at_least_zero)  # here, not from a strategy's check after the others ran
    for flag, v in (("--record-bytes", args.record_bytes), ("--classes", args.classes)):
        if v is not None and args.path is not None:  # they were ignored: the index has the sizes and labels
            raise UsageError(f"{flag} applies only to synthetic records (--records N, without a PATH): the records "
                             f"of {args.path} have the sizes and labels its index holds")
    args.record_bytes = DEFAULT_RECORD_BYTES if args.record_bytes is None else args.record_bytes
    args.classes = DEFAULT_CLASSES if args.classes is None else args.classes
    if args.record_bytes < 1:
        raise UsageError(f"--record-bytes must be >= 1, got {args.record_bytes}")
    option("--classes", args.classes, at_least_one)
    if args.window is not None:  # a spec that cannot work fails here, before any work
        option("--window", args.window, window_spec)
    option("--segments", args.segments, at_least_one)
    if args.plot and not args.plot.endswith(".png"):
        raise UsageError(f"--plot {args.plot}: the plot is a PNG; name it OUT.png")
    for flag, out in (("--json", args.json), ("--plot", args.plot)):
        if out:  # before the epochs are simulated, not after them; never over the dataset's files
            out_dir(out, flag, inputs=None if args.path is None else belonging_to_input(args.path))
    params = parse_params(args.param)
    for k, flag in (("memory_bytes", "--memory"), ("window", "--window"), ("group_bytes", "--group-bytes")):
        if k in params:  # one value for every strategy and metric, sized the same alone or in a sweep
            raise UsageError(f"--param {k}: set it with {flag}")
    if "record_bytes" in params:  # every strategy runs on an index, whose records keep their own sizes
        raise UsageError("--param record_bytes: set it with --record-bytes (with --records)" if args.path is None else
                         f"--param record_bytes: the records of {args.path} have the sizes its index holds; "
                         "--record-bytes sizes --records only")
    check_results_and_plot(args.json, args.plot)
    # the planner's rule where a lirs group strategy runs (found then after the others ran), any size elsewhere
    planned = names is None or any(s in POLICIES and POLICIES[s].uses_group_bytes for s in names)
    group_bytes = option("--group-bytes", args.group_bytes, planner_group_size if planned else positive_size)
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
    n = source.n if args.path is not None else args.records
    if args.batch_size > n:
        raise UsageError(f"--batch-size {args.batch_size} exceeds " + (f"--records {n:,}" if args.path is None else
                                                                       f"the {n:,} records of {what}"))
    budgets = memory_budgets(args.memory, payload)
    for note in raised_notes(budgets, payload):
        print(note, file=sys.stderr)
    sweep = len(budgets) > 1 or str(args.memory).strip().lower() == "sweep"
    if sweep and args.window is not None:
        raise UsageError("--window: with several memory budgets the lirs window follows each budget "
                         "(the groups M spans, rounded up); leave --window out")
    if args.epochs < MIN_EPOCHS:
        print(f"note: {args.epochs} epochs is too few for the uniformity test to mean much (use >= {MIN_EPOCHS}); "
              "no strategy is called uniform", file=sys.stderr)
    common = dict(epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, segments=args.segments,
                  group_bytes=group_bytes, classes=args.classes, record_bytes=args.record_bytes, progress="auto")
    res = (_frontier(source, budgets, names, params, common) if sweep else
           _single(source, budgets[0], names, params, args.window, common))
    res["config"]["source"] = what
    # the budgets used, not the text given: "5%,5%" is one budget, and its rows say "5%", not "5%,5%"
    res["config"]["memory"] = args.memory if sweep else budgets[0][0]
    # the files first: a stdout that fails or whose reader has gone (`| head`, a full disk behind
    # `>`) ends the command while it prints, and must not take the results asked for with it
    if args.json:
        write_json(res, args.json)
    plotted = False
    if args.plot:
        from ..eval.quality import plot, plot_frontier

        plotted = (plot_frontier if sweep else plot)(res, args.plot)
    if args.plot and not plotted:
        from ..eval.figures import no_plot_reason

        print(f"no plot: {no_plot_reason()}", file=sys.stderr)
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        _print(res, what, sweep, args)
        if args.json:
            print(f"results: {os.path.abspath(args.json)}")
        if plotted:
            print(f"plot: {os.path.abspath(args.plot)}")
    return 0


def _single(source, budget, names, params, window, common) -> dict:
    from ..eval.quality import evaluate
    from ..eval.quality.frontier import budget_groups, data_size
    from ..windows import group_span, window_groups

    label, m = budget
    params.setdefault("memory_bytes", m)
    # as the frontier sizes it (rounded up): one budget gives one window, alone or among others
    size = data_size(source, common.get("record_bytes"))
    if window is not None:  # a group count, as the Loader takes the spec (printed and in the JSON so)
        window = window_groups(window, group_span(common["group_bytes"], *size), *size)
    params.setdefault("window", window if window is not None else budget_groups(m, common["group_bytes"], *size))
    return evaluate(source, names, params=params, label=label, **common)


def _frontier(source, budgets, names, params, common) -> dict:
    from ..eval.quality import frontier

    return frontier(source, budgets, names, params=params, **common)


def _print(res: dict, what: str, sweep: bool, args) -> None:
    from ..eval.quality import (SUMMARY_HELP, format_frontier_wide, format_markdown, format_summary, format_table,
                                summary_rows)

    cfg = res["config"]
    if sweep:
        budgets = ", ".join(f"{b['memory']} ({b['memory_bytes']:,} B)" for b in cfg["budgets"])
        print(f"{what}: {cfg['n']:,} records, batch {cfg['batch_size']}, {cfg['epochs']} epochs, seed {cfg['seed']}, "
              f"memory budgets {budgets}")
    else:
        p = cfg["params"]
        print(f"{what}: {cfg['n']:,} records, batch {cfg['batch_size']}, {cfg['epochs']} epochs, seed {cfg['seed']}, "
              f"memory budget {p['memory_bytes']:,} B (lirs window: {p['window']} groups)")
    if args.wide:
        if sweep:
            print(format_frontier_wide(res, args.markdown))
        else:
            print(format_markdown(res) if args.markdown else format_table(res))
        print(WIDE_HELP.format(pass_p=cfg["pass_p"], fail_p=cfg["fail_p"]))
        return
    rows = res["rows"] if sweep else summary_rows(res)
    order = {s: k for k, s in enumerate(dict.fromkeys(r["strategy"] for r in rows))}
    rows = sorted(rows, key=lambda r: (order[r["strategy"]], r["memory_bytes"] or 0))
    print(format_summary(res, rows, args.markdown))
    g = int(cfg["group_bytes"])
    print("columns: " + SUMMARY_HELP.format(group=f"{g >> 10} KiB" if g % 1024 == 0 else f"{g:,}-byte")
          + " --wide: every metric.")


WIDE_HELP = ("columns: seg@1% = share of file segments seen after 1% of an epoch; labels all = share of the epoch "
             "drawn until every label was seen; batch H = label entropy per batch (bits); disp = mean |moved| / n; "
             "rho = rank correlation with file order; pairs again = batch pairs meeting again next epoch, x ideal; "
             "stream H = Streaming's entropy; same grp = in-batch neighbours from one group; p pos / p pairs / "
             "p mates = chi-square p of positions / file-neighbour gaps / batch mates next epoch (batches merged "
             "into runs of at least sqrt(5 n) positions) (uniform: all >= {pass_p:g}, over 10 epochs or more; not: "
             "one < {fail_p:g}); memory, bytes read and written per epoch, random reads (count x median size).")
