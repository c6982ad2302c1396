"""Shared helpers of the benchmark scripts: fio references, cache dropping, result files."""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import warnings

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout these scripts belong to


def tree_python(code: str, *args, tree: str = TREE) -> list[str]:
    """argv of ``python -c code args`` importing this tree's lirs (or ``tree``'s: another checkout),
    whatever the working directory. ``-c`` puts the working directory first on sys.path, ahead of
    PYTHONPATH: run from another checkout, a child would import that checkout's lirs (an A/B of two
    trees from one directory would measure one lirs twice)."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {tree!r})\n{code}", *map(str, args)]


def drop_caches() -> bool:
    """Flush dirty pages and drop the page cache (root only). Returns False when not allowed."""
    from lirs.eval.envelope import drop_caches as drop

    if drop():
        return True
    warnings.warn("cannot drop the page cache (needs root): cold-cache figures are skipped")
    return False


def fio_json(args: list[str]) -> dict | None:
    """Run fio with JSON output; None (with a warning) when fio is missing."""
    if not shutil.which("fio"):
        warnings.warn("fio not found; install it with `apt-get install -y fio` for the reference runs")
        return None
    out = subprocess.run(["fio", "--output-format=json", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout[out.stdout.index("{"):])


def fio_seq_read_bps(path: str, *, bs="1M", iodepth=16, runtime=10) -> float | None:
    """Sequential O_DIRECT read bandwidth (bytes/s) of ``path`` with fio."""
    size = os.path.getsize(path)
    r = fio_json(["--name=seq", f"--filename={path}", "--rw=read", f"--bs={bs}", "--direct=1",
                  "--ioengine=io_uring", f"--iodepth={iodepth}", f"--size={size}", f"--runtime={runtime}",
                  "--time_based=0", "--invalidate=1"])
    if r is None:
        return None
    return float(r["jobs"][0]["read"]["bw_bytes"])


def ensure_file(path: str, size: int, make) -> int:
    """Call ``make()`` to (re)write ``path`` unless it exists within 10% of ``size`` bytes (files are
    reused between runs); returns its size."""
    if not os.path.exists(path) or abs(os.path.getsize(path) - size) > 0.1 * size:
        make()
    return os.path.getsize(path)


def machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def write_result(name: str, res: dict, path: str | None = None) -> str:
    """Write ``benchmarks/results/NAME.json`` (or ``path``) with the machine and date added."""
    res = dict(res)
    res.setdefault("machine", machine())
    res.setdefault("date", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    path = os.path.abspath(path or os.path.join(RESULTS, f"{name}.json"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    return path


def kdd_file(directory: str, size: str) -> str:
    """``DIRECTORY/kdd.svm``: a kdd-like LIBSVM file of about ``size`` (``lirs gen``), indexed; made
    once and reused by later runs. Returns its path."""
    import subprocess
    import sys

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "kdd.svm")
    if not os.path.exists(path + ".lirs"):
        subprocess.run([sys.executable, "-m", "lirs.cli", "gen", "--profile", "kdd", "--size", size,
                        "-o", path, "--quiet"], check=True)
        subprocess.run([sys.executable, "-m", "lirs.cli", "index", path], check=True, capture_output=True)
    return path


def sorted_kdd(directory: str, size: str, seed: int):
    """A label-sorted kdd-like LIBSVM file of about ``size`` in ``directory`` (made once), indexed.
    Returns ``(path, made, gen_s, index, index_s)``: whether it was generated now, and the seconds
    generating and indexing took."""
    import time

    import lirs
    from lirs.eval.gen import generate
    from lirs.units import parse_size

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"quality-kdd-sorted-{size}-s{seed}.svm")
    t = time.perf_counter()
    made = not os.path.exists(path)
    if made:
        generate("kdd", path, size=parse_size(size), order="sorted", seed=seed, progress=False)
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    index = lirs.build_index(path, progress=False)
    return path, made, gen_s, index, time.perf_counter() - t
