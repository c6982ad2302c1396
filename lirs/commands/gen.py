"""`lirs gen`: write a seeded synthetic dataset shaped like one of the LIRS paper's datasets."""
from __future__ import annotations


from . import at_least_one, option, positive_size, print_json, printing_results
from ..errors import UsageError


def add_parser(sub):
    from ..eval.gen import ORDERS, PROFILES

    profiles = "; ".join(f"{k}: {v['about']}" for k, v in PROFILES.items())
    p = sub.add_parser(
        "gen", help="generate a synthetic dataset (kdd, webspam, higgs, epsilon, lines)",
        description="Write a seeded synthetic dataset whose records look like the LIRS paper's datasets, "
                    "with labels (+1/-1) from a hidden linear model plus noise, so models can learn them. "
                    f"Profiles: {profiles}. Dense profiles write their labels to PATH.labels.npy (float64 +1/-1).")
    p.add_argument("--profile", required=True, choices=list(PROFILES))
    n = p.add_mutually_exclusive_group(required=True)
    n.add_argument("--records", type=int, help="number of records")
    n.add_argument("--size", help="about this many bytes instead, e.g. 500MB, 2G")
    p.add_argument("--order", default="shuffled", choices=list(ORDERS),
                   help="shuffled (random order, default) or sorted (all -1 records, then all +1)")
    p.add_argument("--seed", type=int, default=0, help="same seed, same bytes (default 0)")
    p.add_argument("-o", "--out", required=True, metavar="PATH",
                   help="output file; an extension must name the profile's format (.svm, .npy, .jsonl)")
    p.add_argument("--workers", type=int, default=None, help="formatting threads (default: up to 2)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def run(args) -> int:
    from ..eval.gen import generate

    if args.records is not None and args.records <= 0:
        raise UsageError("--records must be a positive number")
    if args.seed < 0:
        raise UsageError("--seed must be a non-negative integer")
    if args.size is not None:
        option("--size", args.size, positive_size)
    if args.workers is not None:
        option("--workers", args.workers, at_least_one)
    res = generate(args.profile, args.out, records=args.records, size=args.size, order=args.order,
                   seed=args.seed, progress=False if args.quiet else None, workers=args.workers)
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        if args.json:
            print_json(res)
        else:
            lc = res["label_counts"]
            extra = f" (labels in {res['labels_path']})" if res["labels_path"] else ""
            print(f"wrote {res['records']:,} {args.profile} records, {res['bytes'] / 1e6:,.1f} MB, {args.order}, "
                  f"labels -1: {lc['-1']:,} +1: {lc['+1']:,}, in {res['seconds']:.2f}s "
                  f"({res['bytes_per_s'] / 1e6:,.0f} MB/s) -> {res['path']}{extra}")
    return 0
