"""The configuration ``lirs bench DATA --auto`` chose for a dataset, saved beside its index.

``Loader(..., granularity="auto")`` reads it back (:func:`auto_settings`); nothing here measures.
"""
from __future__ import annotations

import json
import logging
import os

from .constants import BLOCK, DEFAULT_GROUP_BYTES, DEFAULT_WINDOW, GROUP_BYTES_MAX
from .policies import DEFAULT_GRANULARITY, GRANULARITIES, POLICIES

AUTO = "auto"  # the granularity that reads what `lirs bench --auto` saved
from .errors import UsageError
from .litter import clean_dead_temps, named, remove_quietly, temp_name
from .windows import group_span, window_groups

log = logging.getLogger("lirs.recommendation")

RECOMMENDATION_SUFFIX = ".bench.json"
RECOMMENDATION_VERSION = 1


def write_json(doc: dict, path: str) -> str:
    """Write ``doc`` to ``path`` atomically (temp file in the same directory, fsync, rename): its
    temporary name carries this process's id, so a later run cleans what a killed one left. An
    OSError (a full disk) names ``path``."""
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    clean_dead_temps(path)
    tmp = temp_name(path)
    try:
        with open(tmp, "w") as f:  # the mode open() gives (umask): others read results as any file's
            json.dump(doc, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        remove_quietly(tmp)
        if isinstance(e, OSError):  # a write()'s ENOSPC names no file, a failed rename the temporary
            named(e, path, tmp)
        raise
    return path


def recommendation_path(index) -> str | None:
    """``DATA.lirs.bench.json``: where ``lirs bench --auto`` saves the choice for this index."""
    side = getattr(index, "sidecar", None)
    return None if not side else side + RECOMMENDATION_SUFFIX


def saved_device(res: dict) -> str | None:
    """The device whose recommendation ``lirs bench --auto`` saves: ``nvme`` (the disk as it is,
    where a Loader will read) when it has one, else the first device of the run that has one; the
    ``ssd`` and ``hdd`` envelopes are throttles of this disk, not the disk."""
    recs = res.get("recommendation") or {}
    if "nvme" in recs:
        return "nvme"
    return next((d for d in res["settings"]["devices"] if d in recs), None)


def save_recommendation(res: dict, index, device: str | None = None) -> str:
    """Save the recommendation of ``device`` (default: :func:`saved_device`) beside the index,
    atomically; returns the path. Raises UsageError when there is none."""
    recs = res.get("recommendation") or {}
    if device is None:
        device = saved_device(res)
    if device not in recs:
        raise UsageError("no recommendation to save: no lirs configuration ran"
                         + ("" if device is None else f" on {device}"))
    path = recommendation_path(index)
    if path is None:
        raise UsageError("this index has no sidecar file to save the recommendation beside")
    r = recs[device]
    doc = {"schema": "lirs-bench-recommendation", "version": RECOMMENDATION_VERSION, "device": device,
           "granularity": r["granularity"], "group_bytes": r["group_bytes"], "window": r["window"],
           "config": r["config"], "epoch_s": r["epoch_s"], "extrapolated": r["extrapolated"],
           "batch_size": res["settings"]["batch_size"], "n": int(index.n),
           "payload_bytes": int(index.payload_bytes), "date": res.get("date"), "command": res.get("command")}
    return write_json(doc, path)


def load_recommendation(index) -> dict | None:
    """The saved recommendation of ``index`` (see :func:`save_recommendation`), or None when there is
    none or it belongs to other data (then a warning is logged)."""
    path = recommendation_path(index)
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        log.warning("ignoring %s: %s", path, e)
        return None
    if not isinstance(doc, dict) or doc.get("schema") != "lirs-bench-recommendation" \
            or doc.get("version") != RECOMMENDATION_VERSION:
        log.warning("ignoring %s: not a lirs bench recommendation of version %d", path, RECOMMENDATION_VERSION)
        return None
    if doc.get("n") != int(index.n) or doc.get("payload_bytes") != int(index.payload_bytes):
        log.warning("ignoring %s: it was measured on other data (re-run lirs bench --auto)", path)
        return None
    if doc.get("granularity") not in GRANULARITIES:
        log.warning("ignoring %s: unknown granularity %r", path, doc.get("granularity"))
        return None
    gb, w = doc.get("group_bytes"), doc.get("window")
    if gb is not None and (type(gb) is not int or gb < BLOCK or gb % BLOCK or gb > GROUP_BYTES_MAX) \
            or w is not None and not _window_ok(w, gb):
        log.warning("ignoring %s: group_bytes %r or window %r is not a size", path, gb, w)
        return None
    return doc


def _window_ok(w, gb) -> bool:
    """Whether ``w`` is a window spec a Loader takes (not a hand edit such as -1 or "garbage", which
    stopped ``Loader(granularity="auto")`` with an error naming no file)."""
    if type(w) not in (int, str):
        return False
    try:
        window_groups(w, gb or DEFAULT_GROUP_BYTES, 1)
    except UsageError:
        return False
    return True


def check_granularity(granularity) -> str:
    """``granularity`` when it names one (:data:`lirs.policies.POLICIES`) or is ``"auto"``, else UsageError."""
    if granularity not in POLICIES and granularity != AUTO:
        raise UsageError(f"granularity must be one of {', '.join((*POLICIES, AUTO))}, got {granularity!r}")
    return granularity


def auto_settings(index, group_bytes: int | None, window) -> tuple[str, int, object]:
    """``(granularity, group_bytes, window)`` for ``Loader(granularity="auto")``: the saved
    recommendation of ``lirs bench --auto`` for this dataset, else the default granularity
    (:data:`lirs.policies.DEFAULT_GRANULARITY`), and a logged note of the choice. ``group_bytes`` and
    ``window`` are the caller's, None when not given: each given wins over the saved one (a given
    128K was replaced by a saved 256K while a given window won), and ``window`` is the memory
    budget, so that ``auto`` never holds more memory than asked for. Groups given of another size
    than the saved ones keep the saved window's bytes, not its group count (16x the memory asked of
    a window of 8K groups read in 128K ones)."""
    doc = load_recommendation(index)
    if doc is None:
        gb = DEFAULT_GROUP_BYTES if group_bytes is None else int(group_bytes)
        log.info("granularity='auto': no lirs bench recommendation for %s (run `lirs bench DATA --auto`); "
                 "using %s with group_bytes %d (%s)", ", ".join(getattr(index, "paths", ()) or ()) or "this dataset",
                 DEFAULT_GRANULARITY, gb, "the default" if group_bytes is None else "given")
        return DEFAULT_GRANULARITY, gb, DEFAULT_WINDOW if window is None else window
    saved = doc.get("group_bytes") or DEFAULT_GROUP_BYTES
    gb = saved if group_bytes is None else int(group_bytes)
    w = window if window is not None else (doc.get("window") or DEFAULT_WINDOW)
    if window is None and type(w) is int and gb != saved:  # the saved window's bytes, in the groups given
        w = f"{w * group_span(saved, index.payload_bytes, index.n)}B"
    log.info("granularity='auto': %s from %s, with group_bytes %d (%s) and window %s (%s)",
             doc.get("config", doc["granularity"]), recommendation_path(index), gb,
             "saved" if group_bytes is None else f"given; saved {saved}", w, "saved" if window is None else "given")
    return doc["granularity"], gb, w
