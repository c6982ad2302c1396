"""Where a verification of a data file whose modification time moved (``touch``, a copy that kept
the bytes) is recorded, so that the next open takes the cheap check again: in the sidecar itself
(its header rewritten atomically), or, where the sidecar cannot be written (a read-only mount, a
full disk), in a small file of the user's cache (``$LIRS_CACHE_DIR``, else ``$XDG_CACHE_HOME/lirs``, else
``~/.cache/lirs``) keyed by the sidecar's path and the CRC of its header, or nowhere. Recording is
optional: a failure to record is logged, never raised, since reading must not need a writable disk.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os

from .cachedir import cache_dir
from .litter import clean_dead_litter, remove_quietly, temp_name

log = logging.getLogger("lirs.index")


def _entry_path(sidecar: str) -> str:
    # the name's own bytes: a name need not be UTF-8 (a byte like \xff arrives as a surrogate)
    key = hashlib.blake2b(os.fsencode(os.path.abspath(sidecar)), digest_size=10).hexdigest()
    return os.path.join(cache_dir(), "verified", key + ".json")


def _load(idx) -> dict:
    try:
        with open(_entry_path(idx.sidecar)) as f:
            e = json.load(f)
    except (OSError, ValueError):
        return {}
    if e.get("sidecar") != idx.sidecar or e.get("header_crc") != idx.header_crc:
        return {}  # another sidecar, or this one rewritten since
    return e


def trusted_mtimes(idx) -> list:
    """Per file of ``idx``: the modification time (ns) it was verified at, recorded in the cache
    because the sidecar could not be rewritten, or None when there is none (or its size moved).
    The cache entry is read once for all files: once per file made an open of many files quadratic."""
    files = _load(idx).get("files", {}) if idx.sidecar else {}
    entries = (files.get(str(f)) for f in range(len(idx.fingerprints)))
    return [int(e[1]) if e and e[0] == fp.get("size") else None for e, fp in zip(entries, idx.fingerprints)]


def record_labels(idx, moved: dict) -> bool:
    """Record in ``idx``'s sidecar the verified modification times ``moved`` ({file number:
    mtime_ns}) of its ``.npy`` files' labels files (``meta["label_files"]``); False where it cannot
    be rewritten (a read-only mount, a full disk: each open compares them again) or was rebuilt
    meanwhile."""
    from .sidecar import rewrite_header

    entries = [dict(e, fingerprint=dict(e["fingerprint"])) for e in idx.meta.get("label_files") or ()]
    for f, m in moved.items():
        if m is not None:
            entries[f]["fingerprint"]["mtime_ns"] = int(m)

    def update(header):
        header.setdefault("meta", {})["label_files"] = entries
        return header

    try:
        crc = rewrite_header(idx.sidecar, update, idx.header_crc)
    except OSError as e:  # the record is optional: reading needs neither a writable nor a non-full disk
        log.info("%s cannot be rewritten (%s): its labels files are compared again at every open", idx.sidecar,
                 e.strerror)
        return False
    if crc is None:
        return False
    idx.meta["label_files"], idx.header_crc = entries, crc
    return True


def record(idx, moved: dict) -> str:
    """Record the verified modification times ``moved`` ({file number: mtime_ns}) of ``idx``'s
    files: in its sidecar, else in the cache; returns where ("sidecar", "cache" or "nowhere")."""
    from .sidecar import rewrite_header

    fps = [dict(fp) for fp in idx.fingerprints]
    for f, m in moved.items():
        fps[f]["mtime_ns"] = int(m)

    def update(header):
        for fi, fp in zip(header["files"], fps):
            if fi["fingerprint"].get("size") == fp.get("size"):
                fi["fingerprint"]["mtime_ns"] = fp["mtime_ns"]
        return header

    try:
        crc = rewrite_header(idx.sidecar, update, idx.header_crc)
        if crc is None:
            log.info("%s was rebuilt since it was opened: its verification is not recorded", idx.sidecar)
            return "nowhere"
        idx.fingerprints, idx.header_crc = tuple(fps), crc
        return "sidecar"
    except OSError as e:  # read-only, full (ENOSPC, EDQUOT), failing (EIO): the cache may still take it
        why = e.strerror
    path = _entry_path(idx.sidecar)
    entry = _load(idx) or {"sidecar": idx.sidecar, "header_crc": idx.header_crc, "files": {}}
    for f, m in moved.items():
        entry["files"][str(f)] = [idx.fingerprints[f].get("size"), int(m)]
    tmp = temp_name(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        clean_dead_litter(os.path.dirname(path))  # a killed writer's records
        with open(tmp, "w") as out:
            json.dump(entry, out)
        os.replace(tmp, path)
    except OSError as e:
        remove_quietly(tmp)  # a full cache left it empty, under this live process's name: nothing cleans it
        log.info("%s: verified, but neither it (%s) nor the cache (%s) can record it: every open reads "
                 "the data again", idx.sidecar, why, e.strerror)
        return "nowhere"
    log.info("%s cannot be rewritten (%s); its verification is recorded in %s", idx.sidecar, why, path)
    return "cache"
