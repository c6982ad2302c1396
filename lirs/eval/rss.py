"""Peak memory of a process tree, sampled from ``/proc``: the memory of one measurement run in a
child process, its own worker processes (a DataLoader's) included.

    tree_pids(session) -> list[int]
    process_memory(pid) -> dict | None
    tree_memory(session) -> dict
    TreeSampler(session, interval_s=0.25)   # .start(), .stop() -> peaks

The tree is the child's *session*: start the child with ``start_new_session=True`` and its pid is
the session id of every process it starts. Figures are bytes. ``pss`` sums the proportional set
size (a page shared by forked workers counts once over the tree, unlike ``rss``); ``anon`` and
``file`` split it into private memory (heap, buffers, decoded batches) and file-backed mappings
(the index sidecar's ``mmap``, libraries), whose pages the kernel can drop under pressure. They
come from ``/proc/PID/smaps_rollup`` (Linux >= 4.14), else from ``/proc/PID/status`` (then RSS,
not PSS).
"""
from __future__ import annotations

import os
import threading

FIELDS = ("rss", "pss", "anon", "file")
_ROLLUP = {"Rss:": "rss", "Pss:": "pss", "Pss_Anon:": "anon", "Pss_File:": "file"}
_STATUS = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}


def _session_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: the fields start after the last ')'
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[3]) if len(fields) > 3 else None


def tree_pids(session: int) -> list[int]:
    """Pids of every live process of ``session`` (int)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _session_of(p) == session]


def _read_kib(path: str, names: dict) -> dict | None:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key = line.split(None, 1)[0] if line.strip() else ""
                if key in names:
                    out[names[key]] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return out or None


def process_memory(pid: int) -> dict | None:
    """``{"rss", "pss", "anon", "file"}`` (bytes) of process ``pid``, or None when it is gone.
    Without ``smaps_rollup``: ``pss`` = ``rss`` and ``anon``/``file`` are RSS figures."""
    m = _read_kib(f"/proc/{pid}/smaps_rollup", _ROLLUP)
    if m is None:
        m = _read_kib(f"/proc/{pid}/status", _STATUS)
        if m is None:
            return None
        m["pss"] = m.get("rss", 0)
    return {k: int(m.get(k, 0)) for k in FIELDS}


def tree_memory(session: int) -> dict:
    """Sums of :func:`process_memory` over the live processes of ``session``, plus ``"processes"``."""
    total = dict.fromkeys(FIELDS, 0)
    n = 0
    for pid in tree_pids(session):
        m = process_memory(pid)
        if m is None:
            continue
        n += 1
        for k in FIELDS:
            total[k] += m[k]
    total["processes"] = n
    return total


class TreeSampler:
    """Samples :func:`tree_memory` of ``session`` every ``interval_s`` seconds on a daemon thread;
    :meth:`stop` returns the peak of every field (each field's own peak), and ``samples``."""

    def __init__(self, session: int, interval_s: float = 0.25):
        self.session = int(session)
        self.interval_s = float(interval_s)
        self.peaks = dict.fromkeys((*FIELDS, "processes"), 0)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lirs-rss-sampler", daemon=True)

    def start(self) -> TreeSampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        """Take one sample now (the thread calls this; tests may too)."""
        m = tree_memory(self.session)
        if m["processes"] == 0:
            return
        self.samples += 1
        for k, v in m.items():
            self.peaks[k] = max(self.peaks[k], v)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def stop(self) -> dict:
        """Stop sampling; ``{"rss", "pss", "anon", "file", "processes", "samples"}`` peaks."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return {**self.peaks, "samples": self.samples}
