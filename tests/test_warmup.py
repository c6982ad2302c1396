"""Cold start: the warm-up helper compiles the read and decode kernels into numba's cache while the
loader plans, with exactly the types the pipeline then uses (it compiles none of them itself)."""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from lirs import warmup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# First batch of a window epoch in a fresh process; prints the kernels this process compiled.
_CHILD = r"""
import json, sys
from numba.core import event
compiled = []

class Rec(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        f = ev.data["dispatcher"].py_func
        compiled.append(f.__module__ + "." + f.__qualname__)

event.register("numba:compile", Rec())
import lirs
with lirs.Loader(sys.argv[1], 64, granularity="window", seed=0) as loader:
    b = next(iter(loader.epoch(0)))
json.dump({"compiled": compiled, "rows": int(b.X.shape[0]), "nnz": int(b.X.nnz),
           "sum": float(b.X.sum()), "y": b.y.tolist()}, sys.stdout)
"""

WARMED = ("lirs.kernels.ring.ring_read", "lirs.kernels.io.pread_worker",
          "lirs.kernels.libsvm_plain.libsvm_spans_plain")


def _svm(path, n=400, seed=3):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            idx = np.unique(rng.integers(1, 5000, 8))
            f.write(f"{rng.integers(0, 2)} " + " ".join(f"{a}:{rng.integers(1, 9)}" for a in idx) + "\n")
    subprocess.run([sys.executable, "-m", "lirs.cli", "index", path], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=ROOT))
    return path


def _first_batch(path, cache, **env):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=ROOT, **env)
    out = subprocess.run([sys.executable, "-c", _CHILD, path], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.slow
def test_cold_loader_compiles_read_and_decode_in_the_helper(tmp_path):
    path = _svm(str(tmp_path / "a.svm"))
    helped = _first_batch(path, tmp_path / "cache1")
    alone = _first_batch(path, tmp_path / "cache2", LIRS_WARMUP="0")
    # without the helper this process compiles its read and decode kernels (the check can fail) ...
    assert any(k in alone["compiled"] for k in WARMED[:2])
    assert WARMED[2] in alone["compiled"]
    # ... with it, it loads the decode kernels from the cache the helper filled (same types); the
    # read kernels come from the helper or from here, whichever began them first
    assert WARMED[2] not in helped["compiled"], helped["compiled"]
    assert any(k.startswith("lirs.kernels.plan.") for k in helped["compiled"])  # planning stays here
    assert {k: helped[k] for k in ("rows", "nnz", "sum", "y")} == {k: alone[k] for k in ("rows", "nnz", "sum", "y")}


def test_warm_cache_starts_no_helper(tmp_path):
    # this process has compiled the kernels (or loads them): nothing is cold, nothing starts
    from lirs.decode import decode_libsvm
    warmup._compile_decode({"dtype": "float32"})
    warmup._compile_read({"engine": "threads"})
    assert decode_libsvm is not None
    opts = {"engine": "threads", "format": "libsvm", "dtype": "<f4"}
    assert warmup.cold_groups(opts) == []
    w = warmup.start(opts)
    assert w.procs == []
    w.wait("read")
    w.wait("decode")


def test_off_switch_and_other_formats(monkeypatch):
    monkeypatch.setenv(warmup.ENV, "0")
    assert warmup.start({"engine": "uring", "format": "libsvm"}).procs == []
    assert warmup._decode_kernels({"format": "npy"}) == []


def test_wait_follows_the_helper(monkeypatch):
    # a group the helper has begun is waited for; one it has not begun is not
    r, w_ = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; print('start decode', flush=True); "
                             "sys.stdin.readline(); print('done decode', flush=True)"],
                            stdin=r, stdout=subprocess.PIPE, text=True)
    os.close(r)
    try:
        w = warmup.Warmup([warmup.Helper(proc, ["decode", "read"], None)])
        assert w.started["decode"].wait(30)
        t0 = time.monotonic()
        w.wait("read")  # not begun: returns at once
        assert time.monotonic() - t0 < 5 and not w.done["decode"].is_set()
        threading.Timer(0.5, os.write, (w_, b"go\n")).start()
        w.wait("decode")  # begun: returns when done
        assert w.done["decode"].is_set()
    finally:
        os.close(w_)
        proc.wait()


def test_a_failing_helper_releases_every_wait():
    # a helper that dies after beginning a group: the wait ends, the pipeline compiles in-process
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print('start read', flush=True); sys.exit(3)"],
                            stdout=subprocess.PIPE, text=True)
    w = warmup.Warmup([warmup.Helper(proc, ["read", "decode"], None)])
    assert w.started["read"].wait(30)
    t0 = time.monotonic()
    w.wait("read")
    assert time.monotonic() - t0 < 30
    assert w.done["read"].is_set() and w.done["decode"].is_set() and proc.returncode == 3


def test_helper_reports_each_group_even_when_one_fails(capsys):
    assert warmup.main([json.dumps({"engine": "no-such-engine", "format": "libsvm", "dtype": "<f8"}),
                        "read", "decode"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["start read", "done read", "start decode", "done decode"]
    assert "read: UsageError" in err


def test_wait_after_fork_returns_at_once():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('start decode', flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        w = warmup.Warmup([warmup.Helper(proc, ["decode"], None)])
        assert w.started["decode"].wait(30)  # in this process, wait("decode") would block
        pid = os.fork()
        if pid == 0:  # the helper belongs to the parent: a forked child never waits for it
            t0 = time.monotonic()
            w.wait("decode")
            os._exit(0 if time.monotonic() - t0 < 5 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        proc.kill()
        proc.wait()



def test_a_fork_waits_for_the_preload_threads():
    # loading a cached kernel holds numba's compiler lock: a child forked meanwhile inherits the lock
    # held by no thread of its own, so the fork waits for this process's preload threads first
    done = threading.Event()
    go = threading.Event()

    def preload():
        go.wait(30)
        time.sleep(0.3)
        done.set()
        with warmup._PRELOADS_LOCK:
            warmup._PRELOADS.discard(threading.current_thread())

    t = threading.Thread(target=preload, daemon=True)
    with warmup._PRELOADS_LOCK:
        warmup._PRELOADS.add(t)
    t.start()
    go.set()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if done.is_set() else 1)
    _, status = os.waitpid(pid, 0)
    t.join()
    assert os.waitstatus_to_exitcode(status) == 0, "the child was forked while the preload still ran"
    assert t not in warmup._PRELOADS


_PRELOAD_CHILD = r"""
import json, sys
import lirs
from lirs.kernels import libsvm_plain
with lirs.Loader(sys.argv[1], 64, granularity="group", seed=0, engine="threads") as loader:
    loader._warm.join_preload()  # no batch asked for yet
    print(json.dumps({"loaded": bool(libsvm_plain.libsvm_spans_plain.overloads),
                      "thread": loader._warm.preload is not None}))
"""


def test_cached_kernels_are_loaded_before_the_first_batch(tmp_path):
    """With numba's cache warm, a new process's Loader loads the read and decode kernels on a
    thread while the caller goes on (benchmarks/bench_consumer.py measures the first batch with and
    without); LIRS_WARMUP=0 turns that off too."""
    path = _svm(str(tmp_path / "p.svm"))
    env = dict(os.environ, PYTHONPATH=ROOT)

    def child(**extra):
        out = subprocess.run([sys.executable, "-c", _PRELOAD_CHILD, path], env=dict(env, **extra),
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    child()  # fills the cache if it was cold (then the helper compiled, nothing was preloaded)
    assert child() == {"loaded": True, "thread": True}
    assert child(LIRS_WARMUP="0") == {"loaded": False, "thread": False}


def test_a_failing_preload_leaves_the_kernels_to_first_use(monkeypatch, caplog):
    # loading a group can fail (an engine that cannot open here): the thread logs it and stops;
    # the pipeline then loads what it needs on first use, as without the thread
    def broken(opts):
        raise OSError("no engine here")

    ran = []
    monkeypatch.setattr(warmup, "GROUPS", {"read": (lambda o: [], broken),
                                            "decode": (lambda o: [], lambda o: ran.append(o))})
    with caplog.at_level("DEBUG", logger="lirs.warmup"):
        warmup._preload({"engine": "uring"}, ["read", "decode"])
    assert ran == [{"engine": "uring"}], "a failed group does not stop the next one"
    assert any("preloading read failed: no engine here" in r.getMessage() for r in caplog.records)
    assert warmup.loaded(object()) is True  # not a dispatcher: nothing to preload


def _helper_compiling_read():
    """A helper that has begun the read group and finishes it when a line comes on its stdin."""
    r, w_ = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print('start read', flush=True); "
                             "sys.stdin.readline(); print('done read', flush=True)"],
                            stdin=r, stdout=subprocess.PIPE, text=True)
    os.close(r)
    w = warmup.Warmup([warmup.Helper(proc, ["read"], None)])
    assert w.started["read"].wait(30)
    return w, w_, proc


@pytest.mark.parametrize("granularity", ["group", "window"])
def test_a_cold_epoch_finds_its_first_steps_extents_before_it_waits_for_the_read_helper(tmp_path, monkeypatch,
                                                                                       granularity):
    """Cold, the pipeline waits for the helper compiling the read kernels before it opens the
    engine; the walk's kernels (cursor, deal, extents) compile here meanwhile: the epoch's first
    step is planned and its extents found before that wait. The batches are those of a warm epoch."""
    import lirs
    from lirs.steps import ReadStep
    path = _svm(str(tmp_path / "a.svm"), n=600)
    with lirs.Loader(path, 64, granularity=granularity, seed=1) as ref:
        want = [(b.ids.tolist(), b.X.toarray().tolist(), b.y.tolist()) for b in ref.epoch(2)]
    events = []
    ready = ReadStep.ready
    monkeypatch.setattr(ReadStep, "ready", lambda self: events.append("extents") or ready(self))
    w, w_, proc = _helper_compiling_read()
    wait = w.wait
    monkeypatch.setattr(w, "wait", lambda group: events.append("wait " + group) or wait(group))
    try:
        with lirs.Loader(path, 64, granularity=granularity, seed=1) as loader:
            loader._warm = w
            threading.Timer(0.5, os.write, (w_, b"go\n")).start()
            got = [(b.ids.tolist(), b.X.toarray().tolist(), b.y.tolist()) for b in loader.epoch(2)]
    finally:
        os.close(w_)
        proc.wait()
    assert "wait read" in events and "extents" in events[:events.index("wait read")], events[:5]
    assert got == want


def test_a_warm_epoch_plans_nothing_twice_and_a_priming_error_is_the_walks(tmp_path, monkeypatch):
    """No helper compiling: nothing is planned ahead of the epoch. With one, an error met while
    priming is not raised there (the epoch's own walk meets it, at its batch): one that happens
    only once costs the epoch nothing, one that stays is raised by the epoch."""
    import lirs
    from lirs.steps import ReadStep
    path = _svm(str(tmp_path / "a.svm"), n=300)
    calls = []
    ready = ReadStep.ready
    monkeypatch.setattr(ReadStep, "ready", lambda self: calls.append(1) or ready(self))
    with lirs.Loader(path, 64, granularity="group", seed=0, engine="buffered") as loader:
        loader._warm = warmup.Warmup()
        walks = []
        batches = loader.plan(0).batches
        monkeypatch.setattr(type(loader.plan(0)), "batches",
                            lambda self, *a, **k: walks.append(1) or batches.__func__(self, *a, **k))
        n = sum(len(b.ids) for b in loader.epoch(0))
        assert n == 300 and len(walks) == 1  # the epoch's own walk only
    for fails in (1, 10**9):
        left = [fails]

        def flaky(self):
            left[0] -= 1
            if left[0] >= 0:
                raise OSError("index read failed")
            return ready(self)
        monkeypatch.setattr(ReadStep, "ready", flaky)
        w, w_, proc = _helper_compiling_read()
        try:
            with lirs.Loader(path, 64, granularity="group", seed=0, engine="buffered") as loader:
                loader._warm = w
                threading.Timer(0.5, os.write, (w_, b"go\n")).start()
                if fails == 1:  # the priming step's: the epoch is whole
                    assert sum(len(b.ids) for b in loader.epoch(0)) == 300
                else:
                    with pytest.raises(OSError, match="index read failed"):
                        next(iter(loader.epoch(0)))
        finally:
            os.close(w_)
            proc.wait()


def test_settle_loads_every_group_here_and_a_failure_is_left_to_first_use(monkeypatch, caplog):
    ran = []

    def broken(opts):
        raise OSError("no engine here")

    monkeypatch.setattr(warmup, "GROUPS", {"read": (lambda o: [object.__new__(_Unloaded)], broken),
                                            "decode": (lambda o: [object.__new__(_Unloaded)], ran.append)})
    w = warmup.Warmup(opts={"engine": "uring"})
    assert w in warmup._LIVE  # warmup.settle() settles it with the process's other loaders
    with caplog.at_level("DEBUG", logger="lirs.warmup"):
        w.settle()
    assert ran == [{"engine": "uring"}], "a failed group does not stop the next one"
    assert any("settling read failed: no engine here" in r.getMessage() for r in caplog.records)
    w.pid = -1  # another process's (after a fork): nothing to settle
    ran.clear()
    w.settle()
    assert ran == []


class _Unloaded:
    overloads = {}


def test_the_helper_runs_this_lirs_not_one_in_the_working_directory(tmp_path, monkeypatch):
    """`python -m lirs.warmup` puts the working directory first on sys.path: a lirs there (another
    checkout, or any lirs/warmup.py) ran instead of this one, its code executed."""
    (tmp_path / "lirs").mkdir()
    (tmp_path / "lirs" / "__init__.py").write_text("")
    (tmp_path / "lirs" / "warmup.py").write_text("open('SHADOW_RAN', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    proc = warmup._spawn({"engine": "threads", "format": "libsvm", "dtype": "<f4"}, [])
    assert proc.wait(timeout=120) == 0
    assert not (tmp_path / "SHADOW_RAN").exists()


def test_auto_compiles_threads_kernels_where_io_uring_is_refused(monkeypatch):
    """Under seccomp (io_uring refused) "auto" reads with threads, yet the helpers compiled uring's
    kernels, failed, and every later Loader started a "read" helper again."""
    from lirs.engines import uring
    from lirs.kernels import io

    monkeypatch.setattr(uring, "uring_allowed", lambda: False)
    assert warmup._engine_name("auto") == "threads"
    assert io.pread_worker in warmup._read_kernels({"engine": "auto"})
    monkeypatch.setattr(uring, "uring_allowed", lambda: True)
    assert warmup._engine_name("auto") == "uring" and warmup._engine_name("threads") == "threads"


def test_a_killed_helpers_scratch_directory_is_removed_by_the_next(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    left = tmp_path / f"lirs-warmup-{os.getuid()}-{dead}-abcd1234"
    left.mkdir()
    (left / "block").write_bytes(b"\0" * 4096)
    other = tmp_path / f"lirs-warmup-{os.getuid() + 1}-{dead}-abcd1234"  # another user's: not ours to remove
    other.mkdir()
    warmup._compile_read({"engine": "threads", "format": "libsvm", "dtype": "<f4"})
    assert not left.exists() and other.exists()
    assert [p.name for p in tmp_path.iterdir()] == [other.name]  # and its own went with it


def test_a_cache_is_found_where_numba_would_find_none(tmp_path, monkeypatch):
    """A read-only install (no writable __pycache__ beside the kernels) and no writable user cache
    (a container without a home): numba raised "cannot cache function ... no locator available" at
    import, so lirs could not run at all; the kernels are cached in the temporary folder instead."""
    from lirs.kernels import cache_fallback

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    unwritable = "/proc/1/lirs-no"  # not even root writes there
    mine = tmp_path / f"lirs-numba-{os.getuid()}"
    assert cache_fallback(unwritable, unwritable) == str(mine) and (mine.stat().st_mode & 0o777) == 0o700
    # made first by someone else (or open to others): numba would unpickle what they put there
    mine.chmod(0o777)
    other = cache_fallback(unwritable, unwritable)
    assert other != str(mine) and os.path.dirname(other) == str(tmp_path) and (os.stat(other).st_mode & 0o777) == 0o700
    mine.rmdir()
    mine.symlink_to(other)
    assert cache_fallback(unwritable, unwritable) not in (str(mine), other)
    assert cache_fallback(str(tmp_path / "src"), unwritable) is None  # numba's own choice
    assert cache_fallback(unwritable, str(tmp_path / "user")) is None
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "given"))
    assert cache_fallback(unwritable, unwritable) is None


def test_loaders_made_while_a_helper_runs_share_it(monkeypatch):
    """Four cold Loaders of one process (train, validation, test) started two helpers each, all
    compiling the same kernels: a group's running helper is shared, and a new one starts only
    once it is gone (and the group still cold)."""
    spawned = []

    def spawn(opts, groups):
        spawned.append(groups)
        return subprocess.Popen([sys.executable, "-c", "import sys; print('start %s' % sys.argv[1], flush=True); "
                                 "sys.stdin.readline()", groups[0]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)

    monkeypatch.setattr(warmup, "_spawn", spawn)
    monkeypatch.setattr(warmup, "cold_groups", lambda opts: ["decode", "read"])
    opts = {"engine": "threads", "format": "libsvm", "dtype": "float32"}
    ws = [warmup.start(opts) for _ in range(4)]
    assert spawned == [["decode"], ["read"]]
    assert all(w.done["read"] is ws[0].done["read"] for w in ws)
    warmup.start({**opts, "dtype": "float64"})  # other kernels' types: their own helpers
    assert len(spawned) == 4
    procs = [h.proc for h in list(warmup._HELPERS.values())]
    for p in procs:  # (their stdout is the followers' to read)
        p.stdin.write("go\n")
        p.stdin.close()
    assert ws[0].done["read"].wait(30) and ws[0].done["decode"].wait(30)
    deadline = time.monotonic() + 30
    while warmup._HELPERS and time.monotonic() < deadline:  # each follower forgets its helper as it ends
        time.sleep(0.05)
    assert all(p.stdout.closed for p in procs)  # its pipe too (open until the process exited)
    warmup.start(opts)
    assert len(spawned) == 6
    for h in list(warmup._HELPERS.values()):
        h.proc.stdin.write("go\n")
        h.proc.stdin.close()
        h.proc.wait(30)


_PRIME_CHILD = r"""
import sys
import lirs, lirs.cores
from lirs import warmup
from lirs.kernels import steps as KS
lirs.cores.usable_cores = lambda: int(sys.argv[2])
class Cold:  # a helper still compiling the read kernels
    def compiling(self, group):
        return True
with lirs.Loader(sys.argv[1], 64, granularity="group", seed=1) as loader:
    plan = loader.plan(0)
    assert plan.batches_per_step > 1
    warmup.prime_walk(Cold(), plan, 0, 1, None)
print(len(KS.span_step.signatures), len(KS.span_records.signatures))
"""


@pytest.mark.parametrize("cores,span_step", [(2, False), (16, True)])
def test_a_cold_walk_is_primed_with_the_extents_its_epoch_plans_with(tmp_path, cores, span_step):
    # on many cores a group epoch's planning thread finds each step's extents in the call that takes
    # its records (span_step): primed so, it compiles while the helper compiles the read kernels,
    # not at the epoch's first step; on few cores the extents are deferred, and it is not compiled
    path = _svm(str(tmp_path / "a.svm"), n=3000)
    env = dict(os.environ, PYTHONPATH=ROOT, LIRS_WARMUP="0")
    out = subprocess.run([sys.executable, "-c", _PRIME_CHILD, path, str(cores)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    steps, records = map(int, out.stdout.split())
    assert (steps > 0) == span_step and (records > 0) != span_step


def _blocking_spawn(spawned):
    """A stand-in for _spawn: a process that says it started its group and waits on its stdin."""
    def spawn(opts, groups):
        spawned.append(groups)
        return subprocess.Popen([sys.executable, "-c", "import sys; print('start %s' % sys.argv[1], flush=True); "
                                 "sys.stdin.readline()", groups[0]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
    return spawn


def test_exit_stops_this_processs_helpers_not_a_closed_loaders_or_anothers(monkeypatch):
    """A Ctrl-C'd command left its helpers compiling after it had exited: at exit this process's
    helpers still running are stopped (their waiters released), not one another process started (a
    forked child's copy). A closed Loader's helpers go on: they fill the cache a later Loader loads."""
    spawned = []
    monkeypatch.setattr(warmup, "_spawn", _blocking_spawn(spawned))
    monkeypatch.setattr(warmup, "cold_groups", lambda opts: ["decode", "read"])
    opts = {"engine": "threads", "format": "libsvm", "dtype": "float32", "test": "exit"}
    a, b = warmup.start(opts), warmup.start(opts)
    assert len(spawned) == 2 and b.procs == a.procs
    a.join_preload()
    assert all(p.poll() is None for p in a.procs), "a loader's close leaves them compiling"
    mine, theirs = [h for h in warmup._HELPERS.values() if h.proc in a.procs]
    theirs.pid = os.getpid() + 1
    warmup._stop_helpers()
    assert mine.proc.poll() is not None and theirs.proc.poll() is None
    group = next(iter(mine.done))
    assert a.done[group].wait(10)  # its waiters are released: they compile in-process
    theirs.proc.stdin.write("go\n")
    theirs.proc.stdin.close()
    theirs.proc.wait(30)


def _alive_helper(pid: int) -> bool:
    """Whether ``pid`` is still a running (not zombie) warm-up helper."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline") as f:
            return state != "Z" and "lirs.warmup" in f.read()
    except OSError:
        return False


def _helpers_of(ppid: int) -> list[int]:
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == ppid and _alive_helper(int(d)):
            out.append(int(d))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the helpers through /proc")
def test_a_command_interrupted_on_a_cold_cache_stops_its_helpers(tmp_path):
    """Ctrl-C during a cold `lirs epoch` ended the command, not its helpers (a session of their own,
    out of the terminal's reach): they compiled on for seconds after it had exited."""
    import signal

    p = _svm(str(tmp_path / "d.svm"), n=3000)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT, LIRS_WARMUP="1")
    cli = subprocess.Popen([sys.executable, "-m", "lirs.cli", "epoch", p], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (helpers := _helpers_of(cli.pid)) and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # both started, still compiling
        helpers = _helpers_of(cli.pid) or helpers  # one that ended meanwhile is found gone below: not left over
        assert helpers, "no helper started on an empty cache"
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130 and "interrupted" in err, err[-2000:]
    left = [h for h in helpers if _alive_helper(h)]
    for h in left:  # not left running past the test
        os.kill(h, signal.SIGKILL)
    assert not left, "the interrupted command's helpers are still compiling"


_CHOICE_CHILD = r"""
import json, logging, sys
import lirs
import lirs.mounts as mounts
mounts.fs_type = lambda path: "tmpfs"  # as on /dev/shm: the Loader reads through the page cache
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("lirs").addHandler(Keep(logging.INFO))
logging.getLogger("lirs").setLevel(logging.INFO)
with lirs.Loader(sys.argv[1], 64, granularity="group", seed=0) as loader:
    loader._warm.join_preload()  # the cached kernels loaded (the warm-up's scratch engine opened)
    for _ in loader.epoch(0):
        pass
    print(json.dumps({"engine": loader.engine.name, "lines": [m for m in lines if m.startswith("engine ")]}))
"""


def test_verbose_names_only_the_engine_the_epoch_reads_with(tmp_path, monkeypatch):
    """Loading the cached read kernels opens an ``auto`` engine on a scratch file; it logged its
    choice at INFO like the Loader's, so ``-v`` on a file in memory said "engine buffered chosen"
    and then "engine uring chosen" for an epoch read by buffered. One choice is said: the epoch's."""
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    path = _svm(str(tmp_path / "v.svm"))
    env = dict(os.environ, PYTHONPATH=ROOT)
    for _ in ("cache cold or warm", "cache warm: the kernels preloaded in this process"):
        out = subprocess.run([sys.executable, "-c", _CHOICE_CHILD, path], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["engine"] == "buffered"
        assert [m.split()[1] for m in got["lines"] if " chosen" in m] == ["buffered"], got


def _helpers_of(pid: int) -> list[int]:
    """The warm-up helpers process ``pid`` started (children running lirs.warmup)."""
    found = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]) == pid \
                    and b"lirs.warmup" in open(f"/proc/{d}/cmdline", "rb").read():
                found.append(int(d))
        except (OSError, IndexError, ValueError):  # gone meanwhile
            pass
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is still a warm-up helper that runs (not a zombie no one reaped yet)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return state != "Z" and b"lirs.warmup" in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False


@pytest.mark.slow
def test_helpers_end_when_the_script_that_started_them_is_killed(tmp_path):
    """A training script killed by SIGTERM (a preempted job: no atexit, no Helper.stop) while the numba
    cache was cold left its helpers compiling for seconds, re-parented, in sessions of their own.
    They now end with it."""
    import signal

    path = _svm(str(tmp_path / "a.svm"), n=2000)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cold"), PYTHONPATH=ROOT)
    script = f"import lirs\nwith lirs.Loader({path!r}, 256) as L:\n    print(sum(len(b.ids) for b in L.epoch(0)))\n"
    p = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        helpers, t0 = [], time.monotonic()
        while not helpers and p.poll() is None and time.monotonic() - t0 < 120:
            helpers = _helpers_of(p.pid)
            time.sleep(0.05)
        if not helpers:
            pytest.skip("no warm-up helper started (the script ended first)")
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        p.wait(30)
        t0 = time.monotonic()
        while any(map(_running, helpers)) and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert not [h for h in helpers if _running(h)]
    finally:
        p.kill()
        p.wait()
        for h in helpers:
            if _running(h):
                os.kill(h, signal.SIGKILL)
