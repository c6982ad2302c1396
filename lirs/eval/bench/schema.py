"""The JSON ``lirs bench`` writes: :data:`SCHEMA` and :func:`validate`."""
from __future__ import annotations

SCHEMA_VERSION = 1

SCHEMA = {
    "top": {"schema": str, "version": int, "date": str, "command": (str, type(None)), "machine": dict,
            "data": dict, "settings": dict, "disk": dict, "envelopes": dict, "fio": dict, "rows": list,
            "recommendation": dict, "goals": dict, "notes": list},
    "data": {"path": str, "format": str, "records": int, "payload_bytes": int, "file_bytes": int,
             "mean_record_bytes": (int, float), "index_s": (int, float, type(None))},
    "row": {"device": str, "name": str, "kind": str, "status": str, "note": (str, type(None)),
            "granularity": (str, type(None)), "group_bytes": (int, type(None)), "window": (int, type(None)),
            "peer": (str, type(None)), "reads_only": bool, "what": (str, type(None)),
            "epoch_s": (int, float, type(None)), "extrapolated": (bool, type(None)),
            "epochs_measured": (int, type(None)), "measured_s": (int, float, type(None)),
            "records": (int, type(None)), "records_per_s": (int, float, type(None)),
            "mb_per_s": (int, float, type(None)), "reads_per_s": (int, float, type(None)),
            "amplification": (int, float, type(None)), "cpu_s": (int, float, type(None)),
            "cpu_s_per_epoch": (int, float, type(None)), "peak_rss_bytes": (int, type(None)),
            "pre_s": (int, float, type(None)), "pre_what": (str, type(None)),
            "io_source": (str, type(None)), "cache_evicted": (bool, type(None)),
            "bound": (dict, type(None)), "ratio": (int, float, type(None)), "ratios": dict},
}
ROW_STATUSES = ("ok", "skipped", "error")


def validate(res: dict) -> list[str]:
    """Problems of a result dict against :data:`SCHEMA` (empty list: valid)."""
    probs = []

    def check(d, spec, where):
        if not isinstance(d, dict):
            probs.append(f"{where}: expected an object")
            return
        for k, t in spec.items():
            if k not in d:
                probs.append(f"{where}: missing {k!r}")
            elif not isinstance(d[k], t) or (isinstance(d[k], bool) and bool not in _types(t)):
                probs.append(f"{where}.{k}: {type(d[k]).__name__} is not {_tname(t)}")

    check(res, SCHEMA["top"], "result")
    if probs:
        return probs
    if res["schema"] != "lirs-bench":
        probs.append(f"result.schema: {res['schema']!r} is not 'lirs-bench'")
    if res["version"] != SCHEMA_VERSION:
        probs.append(f"result.version: {res['version']} is not {SCHEMA_VERSION}")
    check(res["data"], SCHEMA["data"], "data")
    for i, row in enumerate(res["rows"]):
        check(row, SCHEMA["row"], f"rows[{i}]")
        if isinstance(row, dict):
            if row.get("status") not in ROW_STATUSES:
                probs.append(f"rows[{i}].status: {row.get('status')!r} not in {ROW_STATUSES}")
            if row.get("status") == "ok" and not row.get("epoch_s"):
                probs.append(f"rows[{i}]: status ok without epoch_s")
            if row.get("device") not in res["envelopes"]:
                probs.append(f"rows[{i}].device: {row.get('device')!r} has no envelope entry")
    for dev, rec in res["recommendation"].items():
        names = {r["name"] for r in res["rows"] if r.get("device") == dev}
        if rec.get("config") not in names:
            probs.append(f"recommendation[{dev}]: {rec.get('config')!r} is not a row of {dev}")
    return probs


def _types(t):
    return t if isinstance(t, tuple) else (t,)


def _tname(t):
    return " or ".join(x.__name__ for x in _types(t))
