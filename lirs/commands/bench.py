"""`lirs bench PATH`: instance vs page vs group vs window vs peer loaders on this disk (and on SSD/HDD
envelopes), against fio, with a table, JSON, a plot and a recommendation."""
from __future__ import annotations

import os
import sys

from . import at_least_one, check_results_and_plot, option, positive_size, printing_results, window_spec
from ..constants import DEFAULT_WINDOW
from ..errors import UsageError
from ..litter import out_dir

DEFAULTS = {"budget_s": 20.0, "fio_runtime_s": 5.0}
SMOKE = {"budget_s": 3.0, "fio_runtime_s": 0.5}


def add_parser(sub):
    p = sub.add_parser(
        "bench", help="which granularity wins on this disk (and SSD/HDD envelopes), against fio and peers",
        description="Measure the device with fio on the data file, then read the data with lirs at each "
                    "granularity and with peer loaders (sklearn in memory, torch DataLoader, np.memmap, "
                    "shuffle buffer, BMF, external shuffle), each in its own process with cold caches, "
                    "optionally under blkio throttles that give the disk the envelope of a SATA SSD or an "
                    "HDD. Prints epoch time, records/s, MB/s, reads/s, read amplification, CPU time, peak "
                    "RSS and ratios to fio, and recommends a granularity. Each configuration reads for at "
                    "most --budget seconds; longer epochs are extrapolated (marked ~).")
    p.add_argument("path", metavar="PATH", help="data file or .lirs sidecar (indexed first if needed)")
    p.add_argument("--devices", default="nvme", metavar="LIST",
                   help="envelopes, comma-separated: nvme (the disk as it is), ssd, hdd (default nvme; "
                        "ssd/hdd need root and cgroup-v1 blkio)")
    p.add_argument("--granularity", default="instance,page,group,window", metavar="LIST",
                   help="lirs granularities to measure (default all four; 'none' for peers only)")
    p.add_argument("--reads-only", default="none", metavar="LIST",
                   help="granularities to measure once more reading only (the plan's extents at full queue "
                        "depth, no decode): the I/O ceiling of the pattern (default none)")
    p.add_argument("--group-bytes", default="64K,auto", metavar="LIST",
                   help="group sizes for group/window; 'auto' adds the size the envelope calls for "
                        "(fio IOPS x size >= sequential bandwidth), when it differs (default 64K,auto)")
    p.add_argument("--window", default=DEFAULT_WINDOW, metavar="W",
                   help="memory of a window: auto (default: 5%% of the data within 16M..256M), a size such as 64M, a share such as 5%%, or a group count")
    p.add_argument("--peers", default="auto", metavar="LIST",
                   help="auto (all that apply), none, or some of inmemory,torch,memmap,shuffle_buffer,bmf,external")
    p.add_argument("--epochs", type=int, default=1, metavar="E", help="epochs per configuration (default 1)")
    p.add_argument("--budget", type=float, default=None, metavar="S",
                   help="seconds of reading per configuration before it stops and extrapolates "
                        f"(default {DEFAULTS['budget_s']:g}; {SMOKE['budget_s']:g} with --smoke)")
    p.add_argument("--batch-size", type=int, default=1024, metavar="B", help="records per batch (default 1024)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the orders read (default 0)")
    p.add_argument("--engine", default="auto", help="lirs I/O engine (default auto)")
    p.add_argument("--prefetch", type=int, default=4, metavar="K", help="batches in flight (default 4)")
    p.add_argument("--no-fio", action="store_true", help="do not run fio (no ratios)")
    p.add_argument("--fio-runtime", type=float, default=None, metavar="S",
                   help=f"seconds per fio job (default {DEFAULTS['fio_runtime_s']:g}; {SMOKE['fio_runtime_s']:g} with --smoke)")
    p.add_argument("--workdir", metavar="DIR",
                   help="where the run's scratch folder goes, with BMF's and the external shuffle's copies of the "
                        "data (default: beside the data; removed at the end)")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON (schema: lirs.eval.bench.SCHEMA)")
    p.add_argument("--plot", metavar="OUT.png", help="write a plot of epoch times (needs matplotlib)")
    p.add_argument("--auto", action="store_true",
                   help="save the recommendation beside the index (DATA.lirs.bench.json), so that "
                        "Loader(..., granularity='auto') uses it")
    p.add_argument("--smoke", action="store_true",
                   help=f"a quick check: budget {SMOKE['budget_s']:g}s, fio {SMOKE['fio_runtime_s']:g}s per job "
                        "(--budget and --fio-runtime, when given, still apply)")
    return p


def _list(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"--{what} is empty")
    return items


def _check_args(args) -> None:
    """UsageError for an argument that cannot work, before the benchmark's minutes: an output that
    is one of the dataset's files or in no writable directory, a plot not named .png or without
    matplotlib, or over the results, a negative seed, a time that is not a positive number, no prefetch, an
    unknown engine, --auto with no granularity to recommend or beside an index it cannot write into."""
    import math

    from ..engines import ENGINE_NAMES
    from ..sidecar import belonging_to_input

    inputs = belonging_to_input(args.path)
    for flag, out in (("--json", args.json), ("--plot", args.plot)):
        if out:
            out_dir(out, flag, inputs=inputs)
    if args.plot and not args.plot.endswith(".png"):
        raise UsageError(f"--plot {args.plot}: the plot is a PNG; name it OUT.png")
    check_results_and_plot(args.json, args.plot)
    if args.plot:
        from ..eval.figures import no_plot_reason, pyplot

        if pyplot(warn=False) is None:  # drawn at the end: missing or broken, known now
            raise UsageError(f"--plot needs matplotlib: {no_plot_reason()}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    for flag, v in (("--budget", args.budget), ("--fio-runtime", args.fio_runtime)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise UsageError(f"{flag} must be a positive number of seconds, got {v}")
    option("--epochs", args.epochs, at_least_one)
    option("--batch-size", args.batch_size, at_least_one)
    option("--window", args.window, window_spec)
    for s in _list(args.group_bytes, "group-bytes"):
        option("--group-bytes", s, group_size)
    if args.prefetch < 1:
        raise UsageError(f"--prefetch must be >= 1, got {args.prefetch}")
    if args.engine not in ("auto", *ENGINE_NAMES):
        raise UsageError(f"--engine {args.engine}: expected auto or one of {', '.join(ENGINE_NAMES)}")
    if args.auto and [g.strip() for g in args.granularity.split(",") if g.strip()] == ["none"]:
        # the recommendation is a lirs granularity (reads-only rows are not one): known now, not after the run
        raise UsageError("--auto saves the lirs granularity the run recommends, and --granularity none measures "
                         "none: name some granularities, or drop --auto")
    if args.auto:
        _check_recommendation_dir(args.path)


def _check_recommendation_dir(path: str) -> None:
    """UsageError where --auto's recommendation (``INDEX.bench.json``, beside the index of ``path``)
    cannot be written, its directory not writable (a read-only mount): known now, it failed after the
    whole benchmark. A path that is not there or names no one index is left to the run to say."""
    from ..recommendation import RECOMMENDATION_SUFFIX
    from ..shellwords import shell_word
    from ..sidecar import is_sidecar_path, sidecar_path

    side = path if is_sidecar_path(path) else sidecar_path(path)
    rec = os.path.abspath(side + RECOMMENDATION_SUFFIX)
    d = os.path.dirname(rec)
    if os.path.isdir(d) and not os.access(d, os.W_OK | os.X_OK):
        raise UsageError(f"--auto saves the recommendation beside the index, as {rec}, and {d} is not writable: "
                         f"index the data where you can write (`lirs index {shell_word(path)} -o DIR/NAME.lirs`) and run "
                         "`lirs bench DIR/NAME.lirs --auto` (then pass that .lirs to the Loader), or drop --auto")


def group_size(text):
    """``"auto"``, or the bytes of a group size ``text`` names (``lirs bench``'s own check of them),
    else UsageError."""
    from ..eval.bench.run import check_group_size

    return check_group_size(text if text == "auto" else positive_size(text))


def times(args) -> tuple[float, float]:
    """``(budget_s, fio_runtime_s)``: each as given, else --smoke's, else the default."""
    base = SMOKE if args.smoke else DEFAULTS
    return (base["budget_s"] if args.budget is None else args.budget,
            base["fio_runtime_s"] if args.fio_runtime is None else args.fio_runtime)


def run(args) -> int:
    from ..eval.bench import (command_line, format_table, plot, run_bench, save_recommendation, saved_device,
                              write_json)
    from ..eval.figures import no_plot_reason

    _check_args(args)
    devices = _list(args.devices, "devices")
    gran = _list(args.granularity, "granularity")
    if gran == ["none"]:
        gran = []
    sizes = [group_size(s) for s in _list(args.group_bytes, "group-bytes")]
    reads_only = [] if args.reads_only.strip() == "none" else _list(args.reads_only, "reads-only")
    peers = args.peers.strip()
    if peers not in ("auto", "none"):
        peers = _list(peers, "peers")
    budget, fio_runtime = times(args)
    interactive = sys.stderr.isatty()
    res = run_bench(args.path, devices=devices, granularities=gran, group_bytes=sizes, window=args.window,
                    peers=peers, reads_only=reads_only, epochs=args.epochs, budget_s=budget,
                    batch_size=args.batch_size, seed=args.seed,
                    engine=args.engine, prefetch=args.prefetch, fio=not args.no_fio, fio_runtime_s=fio_runtime,
                    workdir=args.workdir, progress=None, command=command_line(["lirs", *sys.argv[1:]]),
                    say=(lambda m: None) if interactive else (lambda m: print(m, file=sys.stderr, flush=True)))
    # the files first: a stdout that fails or whose reader has gone (`| head`, a full disk behind
    # `>`) ends the command while it prints, and must not take the minutes of results with it
    written = []
    if args.json:
        written.append(f"results: {write_json(res, args.json)}")
    if args.plot:
        if plot(res, args.plot):
            written.append(f"plot: {os.path.abspath(args.plot)}")
        elif no_plot_reason():  # else the plotter said why (no configuration ran)
            print(f"no plot: {no_plot_reason()}", file=sys.stderr)
    unsaved = None
    if args.auto:
        from ..index import open_index
        from ..recommendation import recommendation_path

        idx = open_index(args.path)
        try:
            path = save_recommendation(res, idx)
            written.append(f"saved: {path} ({saved_device(res)}'s choice; Loader(..., granularity='auto') uses it)")
        except UsageError as e:
            unsaved = e
        except OSError as e:  # writable when checked, not now (a full disk, a remount): the table still prints
            unsaved = f"{e.filename or recommendation_path(idx)}: {e.strerror or e}"
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        print(format_table(res))
        for line in written:
            print(line)
    if unsaved is not None:
        print(f"not saved: {unsaved}", file=sys.stderr)
        return 1
    return 0
