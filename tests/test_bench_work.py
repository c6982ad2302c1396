"""benchmarks/bench_work.py on a small file: the Python work of an epoch counted per batch in every
thread, this tree against a checkout of itself (the same lirs: the same counts, but for a pool
thread's polling), and the counts moving with the work they count."""
from __future__ import annotations

import json
import os

from conftest import benchmark_module


def test_counts_per_batch_and_this_tree_against_itself(tmp_path, shm_dir):
    bm = benchmark_module("bench_work")
    out = tmp_path / "work.json"
    assert bm.main(["--size", "2MB", "--dir", os.path.join(shm_dir, "w"), "--granularities", "group,instance",
                    "--against", bm.TREE, "--repeat", "1", "--top", "5", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    for gran in ("group", "instance"):
        this, that = d["this"][gran], d["against"][gran]
        assert this["batches"] == that["batches"] > 1 and this["records"] == that["records"]
        assert this["lirs"] == that["lirs"] == os.path.join(bm.TREE, "lirs")
        # every thread's work is in: the pool's decoding and reading, the consumer's delivery
        names = " ".join(f["function"] for f in this["top"])
        assert len(this["top"]) == 5 and this["bytecodes"] > 100 and this["python_calls"] > 5
        assert this["c_calls"] > 5 and "lirs/" in names
        for k in bm.METRICS:  # the same lirs twice: equal but for a polling thread's few bytecodes
            assert 0.9 < d["this_vs_against"][gran][k] < 1.1


def test_a_counted_child_sees_work_added_to_the_path(tmp_path, shm_dir):
    # the counts follow the code: a tree whose batch delivery runs extra Python counts more
    bm = benchmark_module("bench_work")
    path = bm.kdd_file(os.path.join(shm_dir, "w2"), "2MB")
    base = bm.count(bm.TREE, path, "group", 3)
    slow = tmp_path / "slow"
    (slow / "lirs").mkdir(parents=True)
    src = os.path.join(bm.TREE, "lirs")
    for name in os.listdir(src):  # a copy of this lirs whose Loader delivers each batch after a loop
        if name != "__pycache__":
            os.symlink(os.path.join(src, name), slow / "lirs" / name)
    os.unlink(slow / "lirs" / "loader.py")
    text = open(os.path.join(src, "loader.py")).read()
    line = "            self._moved = (bp.index, epoch)\n"  # a shared step's batch (Loader._shared), as group's are
    assert text.count(line) == 1
    (slow / "lirs" / "loader.py").write_text(text.replace(line, line + "            for _ in range(1000):\n                pass\n"))
    more = bm.count(str(slow), path, "group", 3)
    assert more["lirs"] == str(slow / "lirs") and more["batches"] == base["batches"]
    assert 2500 < more["bytecodes"] - base["bytecodes"] < 3500  # the loop's ~3000 bytecodes, each batch


def test_a_dataloader_epoch_counts_its_main_process_and_its_workers(tmp_path, shm_dir):
    # --workers: make_dataloader's epoch, the workers' counts (sent home as they exit) added to the
    # main process's: the same batches as the Loader's epoch, more work than the main process alone
    bm = benchmark_module("bench_work")
    path = bm.kdd_file(os.path.join(shm_dir, "w3"), "2MB")
    alone = bm.count(bm.TREE, path, "window", 60)
    both = bm.count(bm.TREE, path, "window", 60, workers=2)
    assert both["workers"] == 2 and both["batches"] == alone["batches"] > 1
    assert both["records"] == alone["records"]
    assert 50 < both["main_bytecodes"] < both["bytecodes"] - 200
    names = {f["function"].split(" ")[0] for f in both["top"]}
    assert "timed_main" in names and names & {"unpack_many", "_unpack_shared"}, "the main process's work"
    assert {"array_spans", "pack_arrays"} <= names, "the workers' work"
