"""`lirs index PATH...`: scan a dataset once and write its offset table (the sidecar)."""
from __future__ import annotations

import time

from . import print_json, printing_results, say
from ..errors import UsageError
from ..units import parse_size


def add_parser(sub):
    p = sub.add_parser(
        "index", help="build the offset index (PATH.lirs) of a dataset",
        description="Scan a dataset once and write its sidecar index: record offsets (text formats), "
                    "or header/record size/count (fixed formats), labels, and a fingerprint of the data.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="data file(s) or a directory (one logical dataset)")
    # None where not given (auto, 0, 16M apply in run): --check, which scans nothing, refuses them when given
    p.add_argument("--format", default=None, choices=["auto", "libsvm", "lines", "tfrecord", "npy", "fixed"])
    p.add_argument("--record-size", type=int, default=None, help="bytes per record (raw fixed format)")
    p.add_argument("--header-size", type=int, default=None, help="bytes to skip at the start of each raw fixed file")
    p.add_argument("-o", "--out", default=None, help="sidecar path (default PATH.lirs; required for several files)")
    p.add_argument("--chunk", default=None, help="scan chunk size (default 16M)")
    p.add_argument("--json", action="store_true", help="print the index summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--check", action="store_true",
                   help="do not scan: confirm the existing index covers exactly the PATHs given (with -o), in their order "
                        "(record IDs follow it; a sidecar among them is left out), and still matches its data exactly (every data "
                        "file read whole and compared with its per-MiB checksums, and every .npy labels file "
                        "with its labels, even where size and modification time match: an edit whose mtime "
                        "was put back is found), record the data's new modification time; exit 1 naming the "
                        "first changed byte range when it does not")
    p.add_argument("--full", action="store_true",
                   help="scan everything again (default: reuse the existing index for unchanged files and "
                        "scan a changed file from its first changed MiB, an appended one from its old end)")
    return p


def run(args) -> int:
    from ..build import build_index, check_header_size
    from ..inputs import expand_paths, resolve_format
    from ..sidecar import is_sidecar_path
    from .info import summarize, print_summary

    if args.check:  # before the checks of options it refuses
        return _check(args)
    for p in args.paths:  # read as data, a sidecar's NUL bytes got advice that indexed the index
        if is_sidecar_path(p):
            raise UsageError(f"{p}: that is an index (a .lirs sidecar); run lirs index on its data files")
    args.format = "auto" if args.format is None else args.format
    args.header_size = 0 if args.header_size is None else args.header_size
    args.chunk = "16M" if args.chunk is None else args.chunk
    if args.record_size is not None and args.record_size <= 0:
        raise UsageError("--record-size must be a positive number of bytes")
    if args.header_size < 0:
        raise UsageError("--header-size must be 0 or more bytes")
    if parse_size(args.chunk) <= 0:
        raise UsageError(f"--chunk must be a positive size (bytes, or with K, M, G), got {args.chunk!r}")
    paths = args.paths[0] if len(args.paths) == 1 else args.paths
    t0 = time.perf_counter()
    # say which format will be read and why before the scan: a .csv read as raw lines, say, is
    # better known before it takes minutes
    files = expand_paths(paths)
    fmt, why = resolve_format(files, args.format, args.record_size)
    # build_index checks them too: here before the format is said
    check_header_size(args.header_size, fmt, why, args.record_size, files)
    if not args.json:
        say(f"format: {fmt} ({why})", flush=True)
    try:
        idx = build_index(paths, format=args.format, record_size=args.record_size, header_size=args.header_size,
                          out=args.out, progress=False if args.quiet else None, chunk_bytes=parse_size(args.chunk),
                          full=args.full)
    except PermissionError as e:
        if not str(e.filename or "").endswith(".lirs"):  # the data's (unreadable): said as it is
            raise
        raise UsageError(f"{e.filename} cannot be written ({e.strerror}); name the index where you can write "
                         "with -o DIR/NAME.lirs") from e
    secs = time.perf_counter() - t0
    s = summarize(idx)
    s["format_reason"] = why
    s["seconds"] = round(secs, 3)
    s["scan_bytes_per_s"] = round(s["bytes"] / secs) if secs > 0 else None
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        if args.json:
            print_json(s)
        else:
            print(f"indexed {s['records']:,} records ({s['bytes'] / 1e6:,.1f} MB, {s['format']}) in {secs:.2f}s "
                  f"-> {idx.sidecar}")
            print_summary(s)
    return 0


def _check(args) -> int:
    from ..index import revalidate

    given = [flag for flag, value in (("--full", args.full), ("--format", args.format),
                                      ("--record-size", args.record_size), ("--header-size", args.header_size),
                                      ("--chunk", args.chunk)) if value is not None and value is not False]
    if given:  # a check scans nothing and builds nothing: taken silently, they seemed to apply
        raise UsageError(f"--check does not take {', '.join(given)}: it compares the data with the index "
                         "as it was built; leave them out (or re-index without --check)")
    target = args.out or args.paths[0]
    if len(args.paths) > 1 and not args.out:
        raise UsageError("several data files: name their sidecar with -o NAME.lirs")
    if args.out:  # before the data is read: the PATHs must be the files the sidecar indexes
        _check_same_files(args.paths, args.out)
    idx = revalidate(target)  # stale or corrupt: raises, and the CLI exits with 1
    with printing_results():  # a full disk behind stdout: said as standard output's, not the sidecar's
        if args.json:
            print_json({"sidecar": idx.sidecar, "files": list(idx.paths), "records": idx.n, "matches": True})
        else:
            print(f"{idx.sidecar}: still matches {idx.nfiles} data file(s), {idx.n:,} records; no re-index needed")
    return 0


def _check_same_files(paths, sidecar: str) -> None:
    """StaleIndexError when the data files ``paths`` (expanded as ``lirs index`` would) are not
    those the index ``sidecar`` covers, in its order (global record IDs follow the files' order):
    checked alone, a sidecar of some of them (a shard added since) still matches its own files, and
    "no re-index needed" left the new one's records out. Sidecars among ``paths`` (``--check
    D.lirs -o D.lirs``) name no data and are left out; given none but sidecars, nothing is compared."""
    import os

    from ..errors import StaleIndexError
    from ..index import open_index
    from ..inputs import expand_paths
    from ..sidecar import is_sidecar_path

    data = [p for p in paths if not is_sidecar_path(p)]
    if not data:
        return

    def key(p):  # one file however it is named (relative, through a link)
        st = os.stat(p)
        return st.st_dev, st.st_ino

    given = {key(p): p for p in expand_paths(data, strays=False)}
    indexed = {}
    for p in open_index(sidecar, check=False).paths:
        try:
            indexed[key(p)] = p
        except FileNotFoundError:  # gone: revalidate names it as removed
            pass
    missing = [p for k, p in given.items() if k not in indexed]
    extra = [p for k, p in indexed.items() if k not in given]
    redo = f"lirs index {' '.join(data)} -o {sidecar}"
    if missing or extra:
        said = ([f"{', '.join(missing)} not indexed by it"] if missing else []) + \
               ([f"it also indexes {', '.join(extra)}, not given"] if extra else [])
        raise StaleIndexError(f"{sidecar} does not index the PATHs given: {'; '.join(said)}; re-index them: {redo}")
    if list(given) != [k for k in indexed if k in given]:
        raise StaleIndexError(f"{sidecar} indexes the PATHs given in another order ({', '.join(indexed.values())}); "
                              "global record IDs follow the files' order, so they would name other records; give "
                              f"them in that order, or re-index them in this one: {redo}")
