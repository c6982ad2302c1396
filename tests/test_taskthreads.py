"""The pipeline's threads (lirs.taskthreads): hand-offs run in order, shutdown, exit, dropped pools."""
import gc
import subprocess
import sys
import threading
import time

import pytest

from lirs.errors import ThreadLimitError
from lirs.taskthreads import TaskThreads


def _alive(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_one_thread_runs_the_tasks_in_the_order_handed():
    pool = TaskThreads(1, "tt-order")
    got = []
    for i in range(50):
        pool.submit(got.append, i)
    pool.shutdown(wait=True)
    assert got == list(range(50))
    assert _alive("tt-order") == []


def test_every_thread_starts_named_and_runs_the_initializer_once():
    names, lock = [], threading.Lock()

    def init():
        with lock:
            names.append(threading.current_thread().name)

    pool = TaskThreads(3, "tt-init", initializer=init)
    assert pool.threads() == () and len(pool) == 0
    done = threading.Event()
    pool.submit(done.set)
    assert done.wait(10)
    pool.shutdown(wait=True)
    assert sorted(names) == ["tt-init_0", "tt-init_1", "tt-init_2"]
    assert [t.name for t in pool.threads()] == ["tt-init_0", "tt-init_1", "tt-init_2"] and len(pool) == 3


def test_tasks_run_at_once_on_several_threads():
    pool = TaskThreads(3, "tt-par")
    barrier = threading.Barrier(3, timeout=10)
    ok = []
    for _ in range(3):
        pool.submit(lambda: ok.append(barrier.wait() is not None))
    pool.shutdown(wait=True)
    assert ok == [True, True, True], "three tasks were running together"


def test_shutdown_runs_what_was_queued_then_refuses_new_tasks():
    pool = TaskThreads(2, "tt-shut")
    got = []
    gate = threading.Event()
    pool.submit(gate.wait, 10)
    for i in range(5):
        pool.submit(lambda i=i: (time.sleep(0.01), got.append(i)))
    gate.set()
    pool.shutdown(wait=True)
    assert sorted(got) == list(range(5))
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(got.append, 9)
    pool.shutdown(wait=True)  # idempotent
    assert _alive("tt-shut") == []


def test_a_task_that_raises_is_printed_and_the_thread_goes_on(capfd):
    pool = TaskThreads(1, "tt-raise")
    got = []

    def boom():
        raise ValueError("task bug")

    pool.submit(boom)
    pool.submit(got.append, 1)
    pool.shutdown(wait=True)
    assert got == [1]
    assert "ValueError: task bug" in capfd.readouterr().err


def test_shutdown_from_one_of_its_threads_does_not_wait_for_itself():
    pool = TaskThreads(2, "tt-self")
    done = threading.Event()

    def stop():
        pool.shutdown(wait=True)
        done.set()

    pool.submit(stop)
    assert done.wait(10)
    for t in pool.threads():
        t.join(10)
    assert _alive("tt-self") == []


def test_a_pool_dropped_without_shutdown_lets_its_threads_end():
    pool = TaskThreads(2, "tt-drop")
    done = threading.Event()
    pool.submit(done.set)
    assert done.wait(10)
    threads = pool.threads()
    del pool
    gc.collect()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)


def test_the_interpreter_exits_with_a_pool_left_running():
    code = ("import threading; from lirs.taskthreads import TaskThreads\n"
            "keep = TaskThreads(3, 'tt-exit'); e = threading.Event(); keep.submit(e.set); e.wait(10)\n"
            "keep.submit(lambda: print('queued before exit', flush=True))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "queued before exit" in out.stdout


def test_a_forked_child_exits_though_a_parent_pool_was_mid_shutdown():
    # the parent's pool lock held at the fork (a parent thread inside shutdown): the child, which
    # has none of the parent's threads, must not wait for that lock at its exit
    code = ("import os, sys, time; from lirs.taskthreads import TaskThreads\n"
            "pool = TaskThreads(2, 'tt-fork'); pool.submit(len, '')\n"
            "pool._lock.acquire()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    sys.exit(0)\n"
            "for _ in range(200):\n"
            "    done, status = os.waitpid(pid, os.WNOHANG)\n"
            "    if done: break\n"
            "    time.sleep(0.05)\n"
            "else:\n"
            "    os.kill(pid, 9); print('child hung', flush=True)\n"
            "pool._lock.release(); pool.shutdown()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "child hung" not in out.stdout


def test_threads_that_cannot_start_leave_a_working_pool_or_the_error_itself(monkeypatch, caplog):
    """The process's thread limit hit after 2 of 5 threads: the pool goes on with those 2 (said in a
    warning), not with a half-started list that never starts the rest; with none started, an error
    that says it ("can't start new thread") and names the limit, a RuntimeError as Python's is."""
    real, started = threading.Thread.start, []

    def limited(self):
        if self.name.startswith("tt-limit") and len(started) >= limit:
            raise RuntimeError("can't start new thread")
        started.append(self.name)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", limited)
    limit = 2
    pool = TaskThreads(5, "tt-limit")
    with caplog.at_level("WARNING", logger="lirs.taskthreads"):
        got = []
        for i in range(20):
            pool.submit(got.append, i)
    assert "started 2 of 5 threads (can't start new thread: the process's thread limit, `ulimit -u`" in caplog.text
    assert len(pool) == 2
    pool.shutdown(wait=True)
    assert sorted(got) == list(range(20)) and _alive("tt-limit") == []

    started.clear()
    limit = 0
    pool = TaskThreads(3, "tt-limit")
    with pytest.raises(ThreadLimitError, match=r"none of the 3 threads asked for could start \(can't start new "
                                               r"thread: .*`ulimit -u`") as e:
        pool.submit(print, "never")
    assert isinstance(e.value, RuntimeError)  # as the callers of submit expect
    pool.shutdown(wait=True)
