"""`lirs demo`: the whole story on this machine in about a minute.

Generate a label-sorted kdd-like LIBSVM sample (or take the user's file), index it, train the same
linear SVM under lirs (instance, window), BMF, a shuffle buffer and the file order, each reading
the file with its own I/O pattern, and print and plot the objective per epoch and against the
seconds spent, pre-processing included. The work is in :mod:`lirs.eval.demo`.
"""
from __future__ import annotations

import datetime
import os
import shlex
import sys


def add_parser(sub):
    from ..eval.demo import DEFAULT_SIZE, METHODS

    p = sub.add_parser(
        "demo", help="train an SVM with lirs against BMF, a shuffle buffer and file order (~1 min)",
        description="Generate a label-sorted kdd-like sample (or use --data), index it, train the same "
                    "L2-regularized linear SVM (LIBLINEAR dual coordinate descent, squared hinge) for a few "
                    "epochs under lirs (instance, window), BMF, a shuffle buffer and the file order, then print "
                    "the objective per epoch and against the seconds spent (pre-processing included), where "
                    "lirs wins and where it does not, and save demo.json and a plot (demo.png).")
    p.add_argument("--data", metavar="PATH",
                   help="your own LIBSVM file (binary labels: -1/+1 or 0/1), or its .lirs index built elsewhere, "
                        "instead of a sample")
    p.add_argument("--out", "--dir", dest="out", default=None, metavar="DIR",
                   help="where the sample, its index, demo.json and demo.png go (default: "
                        "demo in lirs's cache: $LIRS_CACHE_DIR, else $XDG_CACHE_HOME/lirs, i.e. ~/.cache/lirs, or "
                        "$TMPDIR/lirs-UID with no home; "
                        "a second run reuses the sample and its index)")
    p.add_argument("--size", default=DEFAULT_SIZE, help=f"size of the generated sample (default {DEFAULT_SIZE})")
    p.add_argument("--epochs", type=int, default=5, help="epochs per method (default 5)")
    p.add_argument("--batch-size", type=int, default=1024, help="records per batch (default 1024)")
    p.add_argument("--C", type=float, default=1.0, help="SVM cost parameter (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of every order (default 0)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--reference-epochs", type=int, default=20,
                   help="epochs of the in-memory random-order run that estimates the optimum f* (default 20)")
    p.add_argument("--engine", default="auto", help="I/O engine (default auto)")
    return p


def run(args) -> int:
    from ..eval.demo import run_demo
    from ..eval.demo_report import next_steps, plot, report_lines
    from ..eval.figures import no_plot_reason

    import math

    from ..errors import UsageError
    from ..recommendation import write_json

    if not (math.isfinite(args.C) and args.C > 0):  # before the sample is made, not a ZeroDivisionError after
        raise UsageError(f"--C must be a positive number, got {args.C}")
    if args.reference_epochs < 1:  # f* would be the untrained objective: a verdict on negative gaps
        raise UsageError(f"--reference-epochs must be >= 1, got {args.reference_epochs}")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    res = run_demo(data=args.data, out=args.out, size=args.size, epochs=args.epochs, batch_size=args.batch_size,
                   C=args.C, seed=args.seed, methods=methods, engine=args.engine,
                   reference_epochs=args.reference_epochs, say=lambda m: print(m, flush=True))
    res["command"] = "lirs " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    res["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    res["cpus"] = os.cpu_count()
    for line in report_lines(res):
        print(line)
    out_json = os.path.join(res["out"], "demo.json")
    png = os.path.join(res["out"], "demo.png")
    made = plot(res, png)
    write_json(res, out_json)  # atomic: an interrupted demo leaves the last demo.json whole
    print()
    print(f"results: {out_json}")
    print(f"plot: {png}" if made else
          f"plot: not drawn, {no_plot_reason()}; then run lirs demo again (it reuses the sample)")
    print(f"total demo time {res['total_s']:.0f} s")
    print()
    print("next:")
    for cmd, what in next_steps(res):
        print(f"  {cmd}    {what}")
    return 0
