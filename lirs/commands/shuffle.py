"""`lirs shuffle IN... -o OUT`: an exact two-pass external shuffle of files larger than RAM."""
from __future__ import annotations


from . import print_json, printing_results
from ..units import format_bytes


def add_parser(sub):
    p = sub.add_parser(
        "shuffle", help="write a uniformly shuffled copy of a dataset larger than RAM (two passes)",
        description="Exact two-pass external shuffle: pass 1 deals every record to one of M random piles on "
                    "disk, pass 2 shuffles each pile in memory and appends it to the output. The output is a "
                    "uniformly random permutation of the input records. Text records are whole lines, kept "
                    "byte for byte (a last line without a newline gets one; LIBSVM blank and comment-only "
                    "lines are dropped; the first 64 KiB of each LIBSVM input are checked, all of it with --index); "
                    ".npy rows keep a valid header and their INPUT.labels.npy labels.")
    p.add_argument("inputs", nargs="+", metavar="IN", help="data file(s) or a directory (one dataset, one format)")
    p.add_argument("-o", "--out", required=True, metavar="OUT",
                   help="output file; with --shards, a new directory of part files")
    p.add_argument("--shards", type=int, default=None, metavar="K",
                   help="write K files OUT/part-00000.EXT ... of consecutive shuffled records")
    p.add_argument("--memory", default="2G", help="memory cap for buffers and the pile in RAM (default 2G)")
    p.add_argument("--tmpdir", default=None, metavar="D", help="where the piles go (default: beside OUT)")
    p.add_argument("--seed", type=int, default=0, help="same input, seed, --memory and open-file limit: same output (default 0)")
    p.add_argument("--index", action="store_true",
                   help="also write OUT.lirs (one per shard), as `lirs index OUT` would")
    p.add_argument("--format", default="auto", choices=["auto", "libsvm", "lines", "tfrecord", "npy", "fixed"])
    p.add_argument("--record-size", type=int, default=None, metavar="N", help="bytes per record (raw fixed format)")
    p.add_argument("--header-size", type=int, default=0, metavar="H",
                   help="bytes to skip at the start of each raw fixed input (not copied)")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def run(args) -> int:
    # imported here, not at the top: `lirs --help` need not load the shuffle's kernels
    from ..external import shuffle

    inputs = args.inputs[0] if len(args.inputs) == 1 else args.inputs
    # shuffle() checks the numbers and the memory size (UsageError: exit status 2)
    st = shuffle(inputs, args.out, shards=args.shards, memory=args.memory, tmpdir=args.tmpdir, seed=args.seed,
                 index=args.index, progress=False if args.quiet else None, format=args.format,
                 record_size=args.record_size, header_size=args.header_size)
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        if args.json:
            print_json(st)
            return 0
        where = st["outputs"][0] if len(st["outputs"]) == 1 else f"{len(st['outputs'])} shards in {args.out}"
        print(f"shuffled {st['records']:,} records ({format_bytes(st['bytes'])}, {st['format']}) in "
              f"{st['seconds']:.2f}s (pass 1 {st['seconds_pass1']:.2f}s, pass 2 {st['seconds_pass2']:.2f}s, "
              f"{st['piles']} piles) -> {where}")
        notes = []
        if st["skipped_lines"]:
            notes.append(f"dropped {st['skipped_lines']:,} blank/comment-only lines")
        if st["added_newlines"]:
            notes.append(f"added a newline after {st['added_newlines']} last line(s)")
        if st["splits"]:
            notes.append(f"{st['splits']} oversized pile(s) split again")
        if st.get("labels"):
            notes.append(f"labels in {st['labels'][0]}" + (" ..." if len(st["labels"]) > 1 else ""))
        if st.get("sidecars"):
            notes.append(f"index {st['sidecars'][0]}" + (" ..." if len(st["sidecars"]) > 1 else ""))
        if notes:
            print("  " + "; ".join(notes))
    return 0
