"""Cold start: compile the read and decode kernels in a helper process while this one plans.

A fresh install, container or CI job starts with an empty numba cache, and the first batch waits
for every kernel on its path to compile: planning, reading, decoding, one after the other. Threads
cannot overlap them (numba compiles under one global lock), processes can: when a Loader's read or
decode kernels are not in numba's cache, it starts ``python -m lirs.warmup`` for each group (read,
decode), which compiles it into the same cache while this process compiles its planning kernels.
Before its first read and first decode, the pipeline waits for the helper to finish the group,
then loads it from the cache in milliseconds; a group no helper has begun is compiled here. The
epoch's first step is planned, its extents found, before the pipeline waits for the read group
(:func:`prime_walk`): all the walk's kernels compile here during that wait, not after it.

With the cache warm, the groups this process has not loaded yet are loaded by a thread while the
caller opens the engine and plans (loading a cached kernel takes milliseconds, and a fresh
process's first batch waited for all of them).

DataLoader workers fork from a process that has made a Loader (to size their ring): before they
fork, that process compiles the walk's kernels and waits for its helpers (:func:`settle`), so that
every worker inherits the kernels instead of compiling them again, and no fork happens while a
preload thread holds numba's compiler lock (:func:`join_preloads`).

Best effort: when the helper cannot start, fails, or compiled for other argument types, the
pipeline compiles in-process as it would have (a debug log says why). ``LIRS_WARMUP=0`` turns it
off, the loading thread too; a process the helper starts never starts another.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import weakref

import numpy as np

from .constants import BLOCK

log = logging.getLogger(__name__)

ENV = "LIRS_WARMUP"
#: Longest wait for one group (seconds): past it the pipeline compiles in-process.
WAIT_S = 120.0
#: Longest wait for a helper told to stop (SIGTERM) before it is killed (seconds).
STOP_WAIT_S = 2.0
#: The process that started a helper (its pid), in the helper's environment: the helper ends with it.
PARENT_ENV = "LIRS_WARMUP_PARENT"
#: How often a helper looks whether the process that started it is still there (seconds).
PARENT_POLL_S = 0.2


# ---------------------------------------------------------------- groups: what each compiles

def _engine_name(requested: str) -> str:
    """The engine ``requested`` reads with: "auto" is uring where io_uring may be set up, else
    threads (their kernels, not uring's, are what a Loader here compiles: a helper compiling uring's
    where io_uring is refused failed, and every later Loader started one again)."""
    from .engines import AUTO_ORDER, ENV as ENGINE_ENV
    if requested in (None, "", "auto"):
        requested = os.environ.get(ENGINE_ENV, "").strip() or "auto"
    if requested == "auto":
        from .engines.uring import uring_allowed
        requested = AUTO_ORDER[0] if uring_allowed() else AUTO_ORDER[1]
    return requested


def _read_kernels(opts: dict) -> list:
    """The numba dispatchers the engine ``opts["engine"]`` calls to read, and those that lay out
    a read step's buffer (every engine)."""
    from .kernels import io, ring
    return {"uring": [ring.ring_read, ring.init_array], "threads": [io.pread_worker]}.get(
        _engine_name(opts.get("engine")), []) + [io.block_positions, io.record_spans, io.step_totals]


def _compile_read(opts: dict) -> None:
    """Open the loader's engine on a scratch file (opening reads its first block) through the page
    cache: the kernels take ``direct`` as an argument, so their types do not depend on it."""
    from .engines import open_engine
    from .litter import clean_dead

    # a helper killed (SIGKILL, a container stopped) left its directory: the next one removes it
    mark = f"lirs-warmup-{os.getuid()}-"
    clean_dead(tempfile.gettempdir(), mark + r"(?P<pid>\d+)-\w+")
    with tempfile.TemporaryDirectory(prefix=f"{mark}{os.getpid()}-") as d:
        path = os.path.join(d, "block")
        with open(path, "wb") as f:
            f.write(b"\0" * BLOCK)
        # at DEBUG: this choice is the scratch file's, not the epoch's (-v shows the Loader's own, once)
        open_engine([path], opts.get("engine") or "auto", direct=False, depth=opts.get("depth"),
                    log_level=logging.DEBUG).close()
    _compile_step_layout()


def _compile_step_layout() -> None:
    """A read step of one record, laid out with the types lirs.pipeline and lirs.assemble pass."""
    from .kernels import io
    one, pos = np.ones(1, np.int64), np.empty(1, np.int64)
    io.block_positions(one, BLOCK, pos)
    io.record_spans(pos, one, np.zeros(1, np.int32), np.zeros(1, np.int64), one, np.empty(1, np.int64),
                    np.empty(1, np.int64))
    io.step_totals(one, one)


def _decode_kernels(opts: dict) -> list:
    if opts.get("format") != "libsvm":
        return []
    from .kernels import libsvm_plain, rows
    return [libsvm_plain.libsvm_spans_plain, rows.rebase_into, rows.rebase_each]


def _compile_decode(opts: dict) -> None:
    """Decode two plain LIBSVM lines with the loader's dtype (the kernels' types do not depend on
    the data, only on the arrays the decoder passes)."""
    from .assemble import cut_rows, rows
    from .decode import decode_libsvm
    buf = np.frombuffer(b"1 1:1 3:0.5\n-1 2:2.25\n", np.uint8)
    X, _ = decode_libsvm(buf, np.array([0, 12], np.int64), np.array([12, 22], np.int64), n_features=3,
                         zero_based=False, dtype=np.dtype(opts.get("dtype", "float32")))
    rows(X, 1, 2)  # a batch cut from a step, and a shared step's batches (the consumer's kernels, lirs.kernels.rows)
    cut_rows(X, [0, 1, 2])


#: group -> (kernels it compiles (opts -> dispatchers), how to compile them (opts -> None)), in the
#: order the helper compiles them: the one the pipeline needs last first.
GROUPS = {
    "decode": (_decode_kernels, _compile_decode),
    "read": (_read_kernels, _compile_read),
}


# ---------------------------------------------------------------- parent side

def cached(dispatcher) -> bool:
    """True when ``dispatcher`` (a numba ``cache=True`` function) is compiled in this process or
    has an entry in numba's cache for its current source; errors count as cached (start nothing)."""
    try:
        if dispatcher.overloads:
            return True
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception as e:  # numba internals: if they change, warm-up only stops happening
        log.debug("cannot inspect numba's cache of %r: %s", dispatcher, e)
        return True


def cold_groups(opts: dict) -> list[str]:
    """Groups of :data:`GROUPS` with a kernel that would compile on first use, in order."""
    return [g for g, (kernels, _) in GROUPS.items() if not all(cached(k) for k in kernels(opts))]


class Helper:
    """One helper process compiling ``groups``, and per group whether it has started and finished
    it (both set once the process is gone), followed by a thread of its own. The Loaders of one
    process made while it runs share it (:data:`_HELPERS`): each started two more, all compiling the
    same kernels. It outlives the Loaders' ``close()`` (it fills the cache a later Loader loads
    from), not this process (:meth:`stop` at exit)."""

    def __init__(self, proc, groups, key):
        self.proc, self.pid = proc, os.getpid()
        self.started = {g: threading.Event() for g in groups}
        self.done = {g: threading.Event() for g in groups}
        threading.Thread(target=self._follow, args=(key,), name="lirs-warmup", daemon=True).start()

    def _follow(self, key):
        try:
            for line in self.proc.stdout:
                what, _, group = line.strip().partition(" ")
                ev = {"start": self.started, "done": self.done}.get(what, {}).get(group)
                if ev is not None:
                    ev.set()
        finally:
            rc = self.proc.wait()
            self.proc.stdout.close()  # its pipe: open until the process exited otherwise
            if rc:
                log.debug("warm-up helper exited with %s: kernels compile in-process", rc)
            with _HELPERS_LOCK:
                if _HELPERS.get(key) is self:
                    del _HELPERS[key]
            for g in self.started:
                self.started[g].set()
                self.done[g].set()

    def stop(self) -> None:
        """End the helper when it is still compiling and this process started it (a forked child's
        copy is its parent's): SIGTERM, then SIGKILL past :data:`STOP_WAIT_S`. It runs in a session of
        its own, out of reach of the terminal's Ctrl-C, and compiled on for seconds after a Ctrl-C'd
        ``lirs epoch`` had exited. Its waiters go on (its follower releases them) and compile here."""
        if os.getpid() != self.pid or self.proc.poll() is not None:
            return
        try:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_WAIT_S)
        except (OSError, subprocess.TimeoutExpired) as e:  # gone meanwhile, or unkillable: nothing more to do
            log.debug("stopping warm-up helper %s: %s", self.proc.pid, e)


_HELPERS: dict = {}  # (pid, group, options) -> the Helper compiling that group
_HELPERS_LOCK = threading.Lock()


def _helper(opts: dict, group: str) -> Helper | None:
    """The helper of this process compiling ``group`` for ``opts``: the running one, else a new one
    (None when it cannot start)."""
    key = (os.getpid(), group, json.dumps(opts, sort_keys=True))
    with _HELPERS_LOCK:
        h = _HELPERS.get(key)
        if h is None:
            proc = _spawn(opts, [group])
            h = None if proc is None else Helper(proc, [group], key)
            if h is not None:
                _HELPERS[key] = h
        return h


class Warmup:
    """The helpers compiling a loader's cold groups (:class:`Helper`), and per group whether its
    helper has started and finished it. ``wait(group)`` returns at once in another process (after
    a fork)."""

    def __init__(self, helpers=(), preload=None, opts=None):
        self.pid = os.getpid()
        self.preload = preload  # the thread loading cached kernels into this process (or None)
        self.opts = opts  # the loader's options: settle() loads its groups
        if opts is not None:
            _LIVE.add(self)
        self.procs = [h.proc for h in helpers]
        self.started = {g: ev for h in helpers for g, ev in h.started.items()}
        self.done = {g: ev for h in helpers for g, ev in h.done.items()}

    def join_preload(self) -> None:
        """Wait for the thread loading cached kernels (it opened an engine on a scratch file)."""
        t = self.preload
        if t is not None and t is not threading.current_thread() and os.getpid() == self.pid:
            t.join()

    def settle(self) -> None:
        """Have every group compiled or loaded in this process, waiting for its helper where one
        began it (see :func:`settle`)."""
        if self.opts is None or os.getpid() != self.pid:
            return
        self.join_preload()
        for group, (kernels, load) in GROUPS.items():
            ev = self.done.get(group)
            if ev is not None and not ev.wait(WAIT_S):
                log.debug("warm-up of %s still running after %.0f s: compiling in-process", group, WAIT_S)
            if not all(loaded(k) for k in kernels(self.opts)):
                try:
                    load(self.opts)
                except Exception as e:  # noqa: BLE001 - each child then compiles or loads it on first use
                    log.debug("settling %s failed: %s", group, e)

    def compiling(self, group: str) -> bool:
        """Whether a helper of this process is still compiling ``group`` (or has yet to begin it)."""
        ev = self.done.get(group)
        return ev is not None and not ev.is_set() and os.getpid() == self.pid

    def wait(self, group: str) -> None:
        """Block until ``group`` is compiled into the cache, when a helper has begun it; a group no
        helper has begun yet is compiled here (not waiting for the groups before it)."""
        ev = self.done.get(group)
        if ev is None or ev.is_set() or os.getpid() != self.pid or not self.started[group].is_set():
            return
        if not ev.wait(WAIT_S):
            log.debug("warm-up of %s still running after %.0f s: compiling in-process", group, WAIT_S)


_LIVE = weakref.WeakSet()  # this process's Warmups of open loaders


def settle() -> None:
    """Before worker processes fork: every kernel group of this process's loaders compiled or
    loaded here, so that each child inherits them. On an empty cache the workers otherwise each
    compiled every group themselves, side by side with the helpers compiling the same into the
    cache (a 2-worker DataLoader's first batch took twice that of ``num_workers=0`` on 2 cores);
    with a warm cache each loaded them again."""
    for w in list(_LIVE):
        w.settle()


def prime_walk(warm: Warmup, plan, first: int, stride: int, windows) -> None:
    """On a cold numba cache, while a helper still compiles the read kernels (the pipeline waits for
    them before it opens the engine), plan the epoch's first step here and find its extents: the
    walk's kernels (the cursor's, the deal's, the extents') compile during that wait instead of
    after it. The step is thrown away (the epoch plans it again); an error it meets is left to the
    epoch's own walk, which raises it where it belongs."""
    if warm.compiling("read"):
        from .cores import usable_cores
        from .policies import walk_extents

        # as the epoch's walk will plan: on many cores a group step's records, deal and extents are
        # one kernel call (lirs.kernels.steps.span_step), compiled here too, not at the first step
        walk_first(plan, first, stride, windows, walk_extents(plan.granularity, False, usable_cores()))


def walk_first(plan, first: int = 0, stride: int = 1, windows=None, extents: bool | str = "defer") -> None:
    """Plan the first step of ``plan``'s walk from batch ``first`` and find its extents, then throw
    it away: the walk's kernels are compiled (or loaded) here by the end (see :func:`prime_walk`).
    ``extents``: as the walk will find them (:func:`lirs.policies.walk_extents`)."""
    walk = plan.batches(first, extents=extents, stride=stride, windows=windows, units=True)
    try:
        item = next(walk, None)
        if item is not None:
            for part in item.parts:
                part.step.ready()
    except Exception as e:  # noqa: BLE001 - the epoch's walk raises it again, at its batch
        log.debug("priming the walk's kernels stopped: %s", e)
    finally:
        walk.close()


def _spawn(opts: dict, groups: list[str]):
    """A helper process compiling ``groups`` (None when it cannot start)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, **{ENV: "0", PARENT_ENV: str(os.getpid())})
    # the helper must import this very lirs, or its cache entries are for other source files
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        # not `-m lirs.warmup`: that puts the working directory first, and a lirs there (another
        # checkout, or any lirs/warmup.py) would run instead of this one
        code = "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); runpy.run_module('lirs.warmup', run_name='__main__')"
        return subprocess.Popen([sys.executable, "-c", code, root, json.dumps(opts), *groups], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, start_new_session=True)
    except OSError as e:
        log.debug("warm-up helper not started: %s", e)
        return None


def start(opts: dict) -> Warmup:
    """Start helpers for the cold groups of a loader with ``opts`` (``engine``, ``depth``,
    ``format``, ``dtype``): one process per group, so that they compile side by side with this
    process's planning; a :class:`Warmup` that waits for nothing when all are cached."""
    if os.environ.get(ENV, "1").strip() in ("0", "false", "no") or not sys.executable:
        return Warmup()
    cold = cold_groups(opts)
    helpers = [h for g in cold if (h := _helper(opts, g)) is not None]
    # groups in numba's cache but not yet loaded by this process: a thread loads them now, while
    # the caller opens the engine and plans, instead of the first batch (loading a cached kernel
    # takes milliseconds; a fresh process's first batch waits 0.70x as long, benchmarks/results/consumer.json)
    unloaded = [g for g, (kernels, _) in GROUPS.items() if g not in cold and not all(loaded(k) for k in kernels(opts))]
    preload = _start_preload(opts, unloaded) if unloaded else None
    return Warmup(helpers, preload, opts)


def _start_preload(opts: dict, groups: list):
    """The thread loading ``groups``, started; None where the process's thread limit leaves no
    thread for it (the kernels then load at their first use; the threads the loader needs are left)."""
    preload = threading.Thread(target=_preload, args=(opts, groups), name="lirs-preload", daemon=True)
    # started with the lock held: join_preloads (before a fork) waits, then sees it; it ends by
    # leaving the set, which it cannot do before it was added
    with _PRELOADS_LOCK:
        try:
            preload.start()
        except RuntimeError as e:
            log.debug("preloading kernels skipped: no thread could start (%s)", e)
            return None
        _PRELOADS.add(preload)
    return preload


_PRELOADS: set = set()  # this process's preload threads still running
_PRELOADS_LOCK = threading.Lock()


def join_preloads() -> None:
    """Wait for every preload thread of this process (called just before the process forks).

    Loading a cached kernel holds numba's compiler lock. A fork copies the lock held but not the
    thread holding it, so a child that compiles or loads any kernel waits forever: a DataLoader's
    workers, forked while the Loader made in the main process to size their ring was still
    preloading, hung on their first plan, every time in a fresh process with a warm cache."""
    with _PRELOADS_LOCK:
        threads = [t for t in _PRELOADS if t is not threading.current_thread()]
    for t in threads:
        t.join()


def _forget_helpers() -> None:
    """In a forked child: the parent's helpers are not its own, and a lock a parent's thread held
    at the fork would never be released here."""
    global _HELPERS_LOCK
    _HELPERS_LOCK = threading.Lock()
    _HELPERS.clear()


def _stop_helpers() -> None:
    """At exit: stop this process's helpers still compiling (a Loader not closed, or a Ctrl-C while
    one was being made), not left to compile for an interpreter that is gone."""
    if not _HELPERS_LOCK.acquire(timeout=STOP_WAIT_S):  # a thread stopped holding it: leave them
        return
    try:
        helpers = list(_HELPERS.values())
    finally:
        _HELPERS_LOCK.release()
    for h in helpers:
        h.stop()


atexit.register(_stop_helpers)

if hasattr(os, "register_at_fork"):  # POSIX; multiprocessing's fork and os.fork run it, subprocess does not
    os.register_at_fork(before=join_preloads, after_in_child=_forget_helpers)


def loaded(dispatcher) -> bool:
    """True when ``dispatcher`` has a compiled or loaded variant in this process."""
    try:
        return bool(dispatcher.overloads)
    except Exception:  # numba internals: if they change, nothing is preloaded
        return True


def _preload(opts: dict, groups: list) -> None:
    try:
        for g in groups:
            try:
                GROUPS[g][1](opts)
            except Exception as e:  # the pipeline loads what failed here on first use
                log.debug("preloading %s failed: %s", g, e)
    finally:
        with _PRELOADS_LOCK:
            _PRELOADS.discard(threading.current_thread())


# ---------------------------------------------------------------- helper side

def main(argv=None) -> int:
    """``python -m lirs.warmup OPTS_JSON GROUP...``: compile each group between lines ``start G`` and
    ``done G`` on standard output."""
    argv = sys.argv[1:] if argv is None else argv
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        _exit_with_parent(int(parent))
    opts = json.loads(argv[0])
    for group in argv[1:]:
        print("start", group, flush=True)
        try:
            GROUPS[group][1](opts)
        except Exception as e:  # the parent compiles what failed here
            print(f"# {group}: {type(e).__name__}: {e}", file=sys.stderr)
        print("done", group, flush=True)
    return 0


def _exit_with_parent(parent: int) -> None:
    """End this helper once process ``parent``, which started it, is gone. The helper runs in a
    session of its own (out of the terminal's Ctrl-C), and a parent ended by SIGTERM or SIGKILL (a
    preempted job) never runs :meth:`Helper.stop`: the helper compiled on for seconds, re-parented.
    A thread polls the parent's pid (from before this process could be re-parented: one already
    orphaned ends at once); prctl(PR_SET_PDEATHSIG) would follow the parent's *thread*, and a
    Loader made in a thread that then ends would lose its helper."""
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)  # nothing to flush: numba renames each cache file into place whole

    threading.Thread(target=watch, name="lirs-warmup-parent", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
