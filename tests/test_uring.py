"""The uring engine's own choices: setup flags with fallback, a ring per thread, registered files,
batched waits, a reading thread whose ring a process limit refuses. The engine contract itself
(exact bytes, errors, short reads) is tested for every engine in test_engines.py and, through FUSE,
in test_faults.py."""
from __future__ import annotations

import errno
import logging
import os
import threading

import numpy as np
import pytest

from conftest import engines_here
from lirs.engines import BLOCK, aligned_empty, open_engine

pytestmark = pytest.mark.skipif("uring" not in engines_here(), reason="io_uring is not available here")

SIZE = 200 * BLOCK + 777


@pytest.fixture
def data(tmp_path):
    d = np.random.default_rng(3).integers(0, 256, SIZE, dtype=np.uint8)
    p = tmp_path / "data.bin"
    d.tofile(p)
    return str(p), d


def _read_and_check(eng, d, seed, count=300):
    rng = np.random.default_rng(seed)
    nblk = -(-SIZE // BLOCK)
    off = rng.integers(0, nblk, count).astype(np.int64) * BLOCK
    off[:5] = (nblk - 1) * BLOCK  # a few extents run past the end of the file
    nb = rng.integers(1, 4, count).astype(np.int64) * BLOCK
    pos = np.concatenate([[0], np.cumsum(nb)[:-1]]).astype(np.int64)
    buf = aligned_empty(int(nb.sum()))
    got = eng.read(np.zeros(count, np.int32), off, nb, buf, pos)
    for i in range(count):
        want = d[off[i]:off[i] + nb[i]]
        assert got[i] == len(want), f"extent {i}: {got[i]} bytes, expected {len(want)}"
        assert bytes(buf[pos[i]:pos[i] + got[i]]) == want.tobytes(), f"extent {i} differs"


def _uring_fds() -> int:
    n = 0
    for x in os.listdir("/proc/self/fd"):
        try:
            n += "io_uring" in os.readlink(f"/proc/self/fd/{x}")
        except OSError:
            pass
    return n


def test_refused_setup_flags_fall_back(data, monkeypatch):
    import lirs.engines.uring as U

    path, d = data
    # an unknown flag bit: the kernel answers EINVAL, as an older kernel does for DEFER_TASKRUN
    monkeypatch.setattr(U, "SETUP_FLAGS", (1 << 30, U.IORING_SETUP_COOP_TASKRUN, 0))
    with open_engine([path], "uring", depth=16) as eng:
        assert eng.setup_flags in (U.IORING_SETUP_COOP_TASKRUN, 0)
        _read_and_check(eng, d, 1)


def test_other_setup_errors_are_not_retried(data, monkeypatch):
    import lirs.engines.uring as U

    monkeypatch.setattr(U, "SETUP_FLAGS", (1 << 30,))  # the last choice refused: a clear error
    with pytest.raises(U.UringSetupError, match="io_uring_setup failed"):
        U.UringEngine([data[0]], depth=8)


def test_a_ring_per_thread_and_ended_threads_give_theirs_back(data):
    path, d = data
    before = _uring_fds()
    with open_engine([path], "uring", depth=8) as eng:
        for seed in range(5):  # one thread after another: each ends before the next starts
            errors = []
            t = threading.Thread(target=lambda s=seed: _catch(errors, _read_and_check, eng, d, s))
            t.start()
            t.join()
            assert not errors, errors[0]
        t = threading.Thread(target=lambda: _catch(errors, _read_and_check, eng, d, 9))
        t.start()
        t.join()
        assert not errors, errors[0]
        # the constructing thread's ring and the last thread's: ended threads' rings were closed
        assert len(eng._rings) <= 2
        assert _uring_fds() - before <= 2
    assert _uring_fds() == before


def test_threads_read_at_once_through_their_own_rings(data):
    path, d = data
    errors = []
    with open_engine([path], "uring", depth=4) as eng:
        ts = [threading.Thread(target=lambda s=s: _catch(errors, _loop, eng, d, s)) for s in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors[0]
        owners = {r.owner for r in eng._rings.values()}
        assert len(owners) == len(eng._rings)


def test_files_are_registered_with_the_ring(data):
    from lirs.kernels import ring as RK

    path, d = data
    with open_engine([path], "uring") as eng:
        assert eng._take().desc[RK.R_FIXED] == 1
        _read_and_check(eng, d, 4)


@pytest.mark.parametrize("share", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("depth", [1, 7, 64])
def test_batched_waits_read_everything(data, monkeypatch, share, depth):
    import lirs.engines.uring as U
    from lirs.kernels import ring as RK

    path, d = data
    monkeypatch.setattr(U, "URING_WAIT_SHARE", share)
    with open_engine([path], "uring", depth=depth) as eng:
        wait = eng._take().desc[RK.R_WAIT]
        assert 1 <= wait <= depth and wait == max(1, min(depth, int(depth * share)))
        _read_and_check(eng, d, 5)


def _loop(eng, d, seed):
    for k in range(4):
        _read_and_check(eng, d, 100 * seed + k, count=64)


def _catch(errors, fn, *args):
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001
        errors.append(e)


@pytest.mark.parametrize("submit", [1, 2, 5, 64])
@pytest.mark.parametrize("depth", [7, 64])
def test_reads_are_handed_over_a_few_per_call(data, monkeypatch, submit, depth):
    """At most ``URING_SUBMIT_CHUNK`` reads per io_uring_enter (the block layer plugs bigger
    submissions), and still every byte read."""
    import lirs.engines.uring as U
    from lirs.kernels import ring as RK

    path, d = data
    monkeypatch.setattr(U, "URING_SUBMIT_CHUNK", submit)
    # each wait asks for a whole ring of completions: calls then count submissions, not completions
    monkeypatch.setattr(U, "URING_WAIT_SHARE", 1.0)
    with open_engine([path], "uring", depth=depth) as eng:
        ring = eng._take()
        assert ring.desc[RK.R_SUBMIT] == submit
        _read_and_check(eng, d, 6)
        count = 400
        off = np.random.default_rng(7).integers(0, SIZE // BLOCK, count).astype(np.int64) * BLOCK
        nb = np.full(count, BLOCK, np.int64)
        pos = np.arange(count, dtype=np.int64) * BLOCK
        buf = aligned_empty(count * BLOCK)
        got = np.zeros(count, np.int64)
        err = np.zeros(3, np.int64)
        enters = RK.ring_read(ring.desc, eng.fds, eng.cfds, eng.sizes, np.zeros(count, np.int32), off, nb,
                              buf.ctypes.data, pos, eng.direct, got, err, np.zeros(count, np.uint8),
                              np.empty(count, np.int64))
        assert err[0] == 0 and (got == BLOCK).all()
        assert all(bytes(buf[pos[i]:pos[i] + BLOCK]) == d[off[i]:off[i] + BLOCK].tobytes() for i in range(count))
        if submit < depth:  # every call hands over at most `submit` reads
            assert enters >= count / submit
        else:  # a whole ring per call (the kernel rounds it up to a power of two): far fewer calls
            assert enters < count / 2


def _rings_only_on(monkeypatch, thread, en=errno.ENOMEM):
    """Ring setup refused with ``en`` on every thread but ``thread``, as a process limit that one
    ring fits and one per reading thread does not (``ulimit -l 64`` as non-root, ``ulimit -n``)."""
    import lirs.engines.uring as U

    real = U._Ring

    def ring(*a, **k):
        if threading.current_thread() is not thread:
            raise U.UringSetupError(en, f"io_uring_setup failed: {os.strerror(en)}")
        return real(*a, **k)
    monkeypatch.setattr(U, "_Ring", ring)


def _ringless_warnings(caplog):
    return [r for r in caplog.records if "could not be set up" in r.getMessage()]


@pytest.mark.parametrize("en, limit", [(errno.ENOMEM, "ulimit -l"), (errno.EMFILE, "ulimit -n")])
def test_auto_reads_through_pread_in_threads_whose_ring_a_limit_refuses(data, monkeypatch, caplog, en, limit):
    path, d = data
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    _rings_only_on(monkeypatch, threading.current_thread(), en)
    errors = []
    with caplog.at_level(logging.INFO, logger="lirs.engines"), open_engine([path], "auto", direct=False) as eng:
        assert eng.name == "uring"
        ts = [threading.Thread(target=lambda s=s: _catch(errors, _loop, eng, d, s)) for s in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        _read_and_check(eng, d, 8)  # this thread's ring still reads
    assert not errors, errors[0]
    said = _ringless_warnings(caplog)
    assert len(said) == 1 and said[0].levelno == logging.WARNING  # once an engine, not once a thread or read
    assert os.strerror(en) in said[0].getMessage() and limit in said[0].getMessage()


def test_a_loaders_epoch_with_auto_is_served_whole_where_pool_threads_get_no_ring(tmp_path, monkeypatch, caplog):
    import lirs
    from lirs.engines import reads_are_copies

    n = 3000
    p = tmp_path / "ids.svm"
    p.write_text("".join(f"{i} 1:1\n" for i in range(n)))
    if reads_are_copies("auto", None, [str(p)]):
        pytest.skip("the test filesystem takes no O_DIRECT: auto would not choose uring")
    lirs.build_index(str(p))
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    monkeypatch.setenv("LIRS_WARMUP", "0")
    _rings_only_on(monkeypatch, threading.current_thread())
    with caplog.at_level(logging.INFO, logger="lirs.engines"), \
            lirs.Loader(str(p), 100, granularity="instance", threads=4, seed=1) as L:
        ys = np.concatenate([b.y for b in L.epoch(0)])
        assert L._pipeline.engine.name == "uring"
    assert np.array_equal(np.sort(ys), np.arange(n))  # every record once
    assert len(_ringless_warnings(caplog)) == 1


@pytest.mark.parametrize("env, engine, asked_by", [(None, "uring", "engine='uring'"),
                                                   ("uring", "auto", "$LIRS_ENGINE='uring'")])
def test_uring_asked_for_by_name_fails_naming_the_limit_where_a_threads_ring_is_refused(data, monkeypatch, env, engine,
                                                                                       asked_by):
    import lirs.engines.uring as U

    path, d = data
    if env:
        monkeypatch.setenv("LIRS_ENGINE", env)
    else:
        monkeypatch.delenv("LIRS_ENGINE", raising=False)
    _rings_only_on(monkeypatch, threading.current_thread())
    errors = []
    with open_engine([path], engine, direct=False) as eng:
        t = threading.Thread(target=lambda: _catch(errors, _read_and_check, eng, d, 2))
        t.start()
        t.join()
    assert len(errors) == 1 and isinstance(errors[0], U.UringSetupError)
    msg = str(errors[0])
    assert asked_by in msg and "Cannot allocate memory" in msg and "ulimit -l" in msg and "'threads'" in msg
