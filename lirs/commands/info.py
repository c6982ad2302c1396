"""`lirs info PATH`: what an index says about its dataset."""
from __future__ import annotations


import numpy as np

from . import print_json, printing_results


def add_parser(sub):
    p = sub.add_parser("info", help="describe an indexed dataset",
                       description="Records, bytes, format, record sizes, 4 KiB page facts, labels and "
                                   "index bytes per record, read from the sidecar (no data scan).")
    p.add_argument("path", metavar="PATH", help="data file, directory or .lirs sidecar")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--verify", action="store_true",
                   help="also check the CRC-32 of every array of the index (reads the whole sidecar)")
    return p


def summarize(idx) -> dict:
    """A JSON-ready description of an :class:`~lirs.index.Index`."""
    m = idx.meta
    n = idx.n
    nbytes = idx.payload_bytes
    s = {
        "sidecar": idx.sidecar,
        "files": list(idx.paths),
        "format": idx.format,
        "records": n,
        "bytes": nbytes,
        "record_bytes": {"min": m.get("record_bytes_min"), "mean": m.get("record_bytes_mean"),
                         "max": m.get("record_bytes_max")},
        "fraction_under_4k": (m.get("records_under_4k", 0) / n) if n else 0.0,
        "records_straddling_4k": m.get("records_straddling_4k"),
        "index_bytes": idx.index_bytes(),
        "index_bytes_per_record": idx.index_bytes() / n if n else 0.0,
        "offset_bytes_per_record": (0.0 if idx.is_fixed else idx.offset_table.nbytes / n if n else 0.0),
    }
    if idx.format == "npy":
        s["record_dtype"] = str(idx.record_dtype)
        s["record_shape"] = list(idx.record_shape)
    if idx.is_fixed:
        s["record_size"] = idx.record_size
    if idx.format == "libsvm":
        s["features"] = _features(m)
    if idx.label_values is not None:
        if idx.label_codes is not None:
            counts = np.bincount(np.asarray(idx.label_codes), minlength=len(idx.label_values))
            s["labels"] = {}
            for v, c in zip(np.asarray(idx.label_values), counts):  # -0.0 and 0.0 (kept apart) count as one
                s["labels"][_fmt_label(v)] = s["labels"].get(_fmt_label(v), 0) + int(c)
        else:
            lab = np.asarray(idx.label_values)
            nan = int(np.isnan(lab).sum())
            # strict JSON has no Infinity or NaN: those are said as strings. min and max of the labels
            # that are numbers (one NaN made both "nan"), the NaNs counted apart
            lo, hi = (lab.min(), lab.max()) if nan == lab.size else (np.nanmin(lab), np.nanmax(lab))
            s["labels"] = {"distinct": "> 65535", "min": _number(lo), "max": _number(hi)}
            if nan:
                s["labels"]["nan"] = nan
    else:
        s["labels"] = None
    return s


def _features(meta: dict) -> dict | None:
    """A LIBSVM index's feature indices: ``{"min_index", "max_index"}``, both None where no record
    has a feature (the index stores 0 and -1 for that, which are not indices); None where the index
    does not say (one made before it recorded them)."""
    if "min_index" not in meta or "max_index" not in meta:
        return None
    if int(meta["max_index"]) < 0:
        return {"min_index": None, "max_index": None}
    # min_index is 0 where a file has no feature (sklearn's "auto" rule): least_index is what is written
    return {"min_index": int(meta.get("least_index", meta["min_index"])), "max_index": int(meta["max_index"])}


def _number(v) -> float | str:
    """``v`` as a JSON number, or ``"inf"``, ``"-inf"``, ``"nan"`` where it is not finite."""
    v = float(v)
    return v if np.isfinite(v) else repr(v)


def _fmt_label(v: float) -> str:
    """A label as a short key: an integer as one (``1``, ``-3``) up to 1e16, where float64 still
    holds every integer and ``repr`` starts writing exponents; past it and otherwise ``repr``
    (``1e+300``, ``0.5``, ``nan``): ``str(int(1e300))`` is 301 digits."""
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 1e16 else repr(v)


def _share(f: float) -> str:
    """``f`` (0..1) as a percentage that reads 0% or 100% only when it is (3 huge records in
    millions: 99.9995% is not "100.0%")."""
    text = f"{100 * f:.1f}%"
    if text == "100.0%" and f < 1:
        return ">99.9%"
    return "<0.1%" if text == "0.0%" and f > 0 else text


def print_summary(s: dict) -> None:
    rb = s["record_bytes"]
    print(f"  format            {s['format']}" + (f"  ({s['record_dtype']} x {tuple(s['record_shape'])})"
                                                 if "record_dtype" in s else ""))
    print(f"  files             {len(s['files'])}")
    print(f"  records           {s['records']:,}")
    print(f"  bytes             {s['bytes']:,}")
    if rb["mean"] is not None:
        print(f"  record bytes      min {rb['min']:,}  mean {rb['mean']:,.1f}  max {rb['max']:,}")
    print(f"  under 4 KiB       {_share(s['fraction_under_4k'])} of records")
    print(f"  straddle 4 KiB    {s['records_straddling_4k']:,} records cross a page boundary")
    if "features" in s:
        f = s["features"]
        if f is None:
            print("  feature indices   not recorded (re-run `lirs index` to record them)")
        elif f["max_index"] is None:
            print("  feature indices   none (no record has a feature)")
        else:
            print(f"  feature indices   {f['min_index']} .. {f['max_index']}")
    if s["labels"]:
        items = list(s["labels"].items())
        shown = ", ".join(f"{k}: {v:,}" if isinstance(v, int) else f"{k}: {v}" for k, v in items[:8])
        more = f", ... ({len(items)} distinct)" if len(items) > 8 else ""
        print(f"  labels            {shown}{more}")
    print(f"  index             {s['index_bytes_per_record']:.2f} bytes/record in memory "
          f"({s['index_bytes']:,} bytes)")


def run(args) -> int:
    from ..index import open_index

    idx = open_index(args.path, verify=args.verify)  # a corrupt array raises IndexFormatError: exit 1
    s = summarize(idx)
    if args.verify:
        s["verified"] = True
    with printing_results():  # a full disk or a failed device behind stdout: said as such
        if args.json:
            print_json(s, allow_nan=False)
        else:
            print(f"{idx.sidecar}")
            print_summary(s)
            if args.verify:
                print("  checksums         every array matches its CRC-32")
    return 0
