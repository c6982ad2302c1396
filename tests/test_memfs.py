"""Files held in memory (tmpfs, ramfs) are read through the page cache unless O_DIRECT is asked
for: tmpfs takes O_DIRECT since Linux 6.6, but a direct read there copies whole blocks out of the
same memory (``lirs.mounts.held_in_memory``, ``benchmarks/results/memfs_engines.json``)."""
from __future__ import annotations

import json
import logging
import os
import warnings

import numpy as np
import pytest

import lirs
import lirs.mounts as mounts
from lirs.engines import open_engine, probe_direct, reads_are_copies
from lirs.mounts import held_in_memory, in_memory

from test_loader import _write_libsvm, assert_same_batches, copied_batches


def _blob(path, n=3 * 4096):
    np.arange(n, dtype=np.uint8).tofile(path)
    return str(path)


def test_held_in_memory_names_a_dataset_wholly_in_memory(shm_dir, tmp_path):
    shm = _blob(os.path.join(shm_dir, "a.bin"))
    why = held_in_memory([shm, _blob(os.path.join(shm_dir, "b.bin"))])
    assert why is not None and shm in why and mounts.fs_type(shm) in why
    assert held_in_memory([]) is None
    assert held_in_memory([os.path.join(shm_dir, "missing.bin")]) is None
    if in_memory(str(tmp_path)):
        pytest.skip("the test folder is in memory too: no file on a device to mix in")
    disk = _blob(tmp_path / "c.bin")
    assert held_in_memory([disk]) is None
    assert held_in_memory([shm, disk]) is None and held_in_memory([disk, shm]) is None


def _pretend_in_memory(monkeypatch):
    """Every filesystem reported as tmpfs (the test's files stay on a filesystem taking O_DIRECT)."""
    monkeypatch.setattr(mounts, "fs_type", lambda path: "tmpfs")


def test_files_in_memory_are_read_through_the_page_cache_unless_o_direct_is_asked(tmp_path, monkeypatch,
                                                                                   caplog):
    paths = [_blob(tmp_path / "a.bin"), _blob(tmp_path / "b.bin")]
    if probe_direct(paths[0]) is not None:
        pytest.skip("the test folder refuses O_DIRECT: nothing to choose")
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    _pretend_in_memory(monkeypatch)
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="lirs.engines"):
        warnings.simplefilter("error")  # the right reads for memory: no warning
        with open_engine(paths) as eng:
            assert eng.name == "buffered" and not eng.direct and "held in memory" in eng.reason
        with open_engine(paths, "threads") as eng:
            assert not eng.direct and "held in memory" in eng.reason
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with open_engine(paths, "threads", direct=True) as eng:
        assert eng.direct  # asked for: O_DIRECT still, where the filesystem takes it
    assert reads_are_copies("auto", None, paths) and reads_are_copies("threads", None, paths)
    assert not reads_are_copies("auto", True, paths)


def test_a_loader_reads_a_file_on_tmpfs_through_the_page_cache(shm_dir):
    """The default engine on tmpfs: page-cache reads of each record's bytes alone (an instance step
    holds several batches), the same batches as the buffered engine's."""
    if not in_memory(shm_dir):
        pytest.skip("/dev/shm is not held in memory here")
    p = _write_libsvm(os.path.join(shm_dir, "d.svm"), 2000, seed=8)
    lirs.build_index(p, progress=False)
    kw = dict(granularity="instance", seed=3, n_features=300)
    with lirs.Loader(p, 40, engine="buffered", **kw) as ref:
        want = [(b.ids, b.X) for b in ref.epoch(0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with lirs.Loader(p, 40, **kw) as ld:
            got = copied_batches(ld)
    assert_same_batches(got, want)


def test_an_index_scan_of_a_file_in_memory_opens_no_direct_engine(tmp_path, monkeypatch, caplog):
    """``lirs index`` reads a file held in memory through the page cache, without probing for
    O_DIRECT (or warning that it is refused, as tmpfs did before Linux 6.6); elsewhere the probe runs."""
    import lirs.inputs as I

    p = _blob(tmp_path / "a.bin", 5 * 4096 + 7)
    want = np.fromfile(p, np.uint8)
    probed = []
    real = I._scan_engine
    monkeypatch.setattr(I, "_scan_engine", lambda path: probed.append(path) or real(path))
    monkeypatch.setattr(I, "cached", lambda *a, **k: False)  # as a cold file (and tmpfs, which refuses RWF_NOWAIT)
    got = np.concatenate([buf[:nb].copy() for buf, nb, _ in I.read_chunks(p, 0, len(want), 4096, direct=True)])
    assert np.array_equal(got, want) and probed == [p]
    probed.clear()
    _pretend_in_memory(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="lirs"):
        got = np.concatenate([buf[:nb].copy() for buf, nb, _ in I.read_chunks(p, 0, len(want), 4096, direct=True)])
    assert np.array_equal(got, want) and probed == []
    assert not [r for r in caplog.records if "O_DIRECT" in r.getMessage()]


def test_order_plans_the_reads_a_loader_makes_on_a_file_in_memory(tmp_path, monkeypatch, capsys):
    """`lirs order` ("what an epoch will read") planned O_DIRECT 4 KiB blocks on any file: on tmpfs,
    where a Loader reads each record's bytes alone, it said 9x the bytes and amplification an epoch
    reads. It plans as a Loader with the same engine does, and says which reads."""
    from lirs.cli import main

    p = _write_libsvm(str(tmp_path / "d.svm"), 2000, seed=8)
    lirs.build_index(p, progress=False)
    monkeypatch.delenv("LIRS_ENGINE", raising=False)

    def order(*extra):
        assert main(["order", p, "--granularity", "instance", "--batch-size", "40", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    def loader(**kw):
        with lirs.Loader(p, 40, granularity="instance", **kw) as ld:
            return ld.plan(0).stats()

    _pretend_in_memory(monkeypatch)
    st = order()
    assert st["bytes_read"] == loader()["bytes_read"] == st["payload_bytes"] and st["amplification"] == 1.0
    assert not st["direct"] and st["read_as"] == "page cache copies"
    assert main(["order", p, "--granularity", "instance"]) == 0
    assert "page cache copies (engine auto)" in capsys.readouterr().out
    monkeypatch.undo()
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    if probe_direct(p) is None:  # a disk taking O_DIRECT: blocks by default, copies with the buffered engine
        st = order()
        assert st["direct"] and st["read_as"] == "direct 4 KiB blocks" and st["engine"] == "auto"
        assert st["bytes_read"] == loader()["bytes_read"] > st["payload_bytes"]
        st = order("--engine", "buffered")
        assert not st["direct"] and st["bytes_read"] == loader(engine="buffered")["bytes_read"] == st["payload_bytes"]
    assert main(["order", p, "--engine", "nosuch"]) == 2
    assert main(["order", p, "--strategy", "sequential", "--engine", "buffered"]) == 2
    monkeypatch.setenv("LIRS_ENGINE", "buffered")  # auto asks for what the environment names: say that one
    st = order()
    assert st["engine"] == "buffered" and not st["direct"] and st["amplification"] == 1.0
