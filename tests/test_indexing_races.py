"""Files that change while lirs reads them: a labels file rewritten in place under an open (it was
memory-mapped: SIGBUS), and fixed-record data appended to while it is indexed."""
from __future__ import annotations

import os

import numpy as np
import pytest

import lirs
from lirs import freshness as fr
from lirs.cli import main
from lirs.errors import DataError, StaleIndexError
from lirs.index import open_index


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIRS_CACHE_DIR", str(tmp_path / "cache"))


def _labelled(tmp_path, n=50):
    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    np.save(x, np.zeros((n, 2), np.float32))
    np.save(lab, np.arange(n, dtype=np.float64) % 7)
    return x, lab


def _touch(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))


def _no_label_maps(monkeypatch):
    """np.load and np.memmap fail the test where they would map a labels file: a file truncated
    under a map (np.save rewriting it in place) kills the process with SIGBUS, not an error."""
    load, memmap = np.load, np.memmap

    def no_map_load(path, *a, mmap_mode=None, **k):
        assert not mmap_mode, f"{path} memory-mapped"
        return load(path, *a, **k)

    class NoLabelMap(memmap):
        def __new__(cls, path, *a, **k):
            assert not str(path).endswith(".labels.npy"), f"{path} memory-mapped"
            return memmap.__new__(memmap, path, *a, **k)

    monkeypatch.setattr(np, "load", no_map_load)
    monkeypatch.setattr(np, "memmap", NoLabelMap)


def test_labels_files_are_read_not_memory_mapped(tmp_path, monkeypatch, capsys):
    """Indexing, opening (the labels file's mtime moved: compared) and `lirs index --check` read a
    labels file by pread: a memory map of one rewritten in place meanwhile (np.save truncates it
    first) killed the opening process with SIGBUS."""
    x, lab = _labelled(tmp_path)
    _no_label_maps(monkeypatch)
    lirs.build_index(str(x), progress=False)
    _touch(lab)
    assert np.array_equal(open_index(str(x)).labels, np.arange(50) % 7)
    assert main(["index", "--check", str(x)]) == 0, capsys.readouterr().err
    np.save(lab, (np.arange(50, dtype=np.float64) % 7)[::-1].copy())
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: the labels of .*x\.npy changed since indexing"):
        open_index(str(x))


def test_a_labels_file_cut_while_it_is_compared_is_stale(tmp_path, monkeypatch):
    """A labels file truncated between its header's read and its values' (a rewrite in place
    under an open) is a StaleIndexError naming it, not a crash."""
    x, lab = _labelled(tmp_path)
    lirs.build_index(str(x), progress=False)
    _touch(lab)
    real = fr.NpyRows

    def cut(path):
        rows = real(path)
        os.truncate(path, rows.offset + 8)  # one label of 50 left
        return rows

    monkeypatch.setattr(fr, "NpyRows", cut)
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: the labels of .*x\.npy changed since indexing "
                                              r"\(its size changed"):
        open_index(str(x))
