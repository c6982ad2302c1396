"""The shared pools: results in order, the caller's part, errors, a forked child."""
from __future__ import annotations

import os
import threading

import pytest

from lirs import parallel


def test_results_come_in_order_and_the_caller_runs_the_first_part():
    who = {}

    def fn(i):
        who[i] = threading.current_thread().name
        return i * i
    assert parallel.on_cores(fn, list(range(6)), "test") == [i * i for i in range(6)]
    assert who[0] == threading.current_thread().name
    assert all(who[i].startswith("lirs-test") for i in range(1, 6))
    # the threads stay for the next call
    assert parallel.shared_pool("test") is parallel.shared_pool("test")


def test_an_error_is_raised_after_every_part_ended():
    ended = []

    def fn(i):
        if i == 0:
            raise ValueError("part 0")
        ended.append(i)
        return i
    with pytest.raises(ValueError, match="part 0"):
        parallel.on_cores(fn, [0, 1, 2, 3], "test")
    assert sorted(ended) == [1, 2, 3]
    with pytest.raises(KeyError):
        parallel.on_cores(lambda i: {}[i], [5, 6], "test")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_pools_of_its_own():
    parallel.on_cores(lambda i: i, [0, 1], "test")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads do not exist here, the call must not hang
        try:
            ok = parallel.on_cores(lambda i: i + 1, [0, 1, 2], "test") == [1, 2, 3]
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
