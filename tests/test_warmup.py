"""Cold start: the warm-up helper compiles the read and decode kernels into numba's cache while the
loader plans, with exactly the types the pipeline then uses (it compiles none of them itself)."""
import json
import os
import subprocess
import sys
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

WARMED = ("lirs.kernels.io.uring_read", "lirs.kernels.io.pread_worker",
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
    # ... with it, it loads them from the cache the helper filled: same types, nothing compiled twice
    assert not set(WARMED) & set(helped["compiled"]), helped["compiled"]
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
    assert w.proc is None
    w.wait("read")
    w.wait("decode")


def test_off_switch_and_other_formats(monkeypatch):
    monkeypatch.setenv(warmup.ENV, "0")
    assert warmup.start({"engine": "uring", "format": "libsvm"}).proc is None
    assert warmup._decode_kernels({"format": "npy"}) == []


def test_a_failing_helper_releases_every_wait(monkeypatch):
    # a helper that dies at once: the pipeline must not hang, it compiles in-process
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"], stdout=subprocess.PIPE, text=True)
    w = warmup.Warmup(["read", "decode"], proc)
    w.wait("read")
    w.wait("decode")
    assert proc.returncode == 3


def test_helper_reports_each_group_even_when_one_fails(capsys):
    assert warmup.main([json.dumps({"engine": "no-such-engine", "format": "libsvm", "dtype": "<f8"}),
                        "read", "decode"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == ["read", "decode"]
    assert "read: UsageError" in err


def test_wait_after_fork_returns_at_once():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE,
                            text=True)
    try:
        w = warmup.Warmup(["decode"], proc)
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
