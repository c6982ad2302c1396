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


def test_a_raw_fixed_file_appended_to_while_it_is_indexed_is_refused(tmp_path, monkeypatch):
    """Records appended between the count of a raw fixed-record file and its fingerprint left a
    sidecar of the old count under the new fingerprint: every open took it, the new records were
    never served. The file is fingerprinted before it is counted, and a change refused."""
    from lirs import build as B

    p = tmp_path / "f.bin"
    p.write_bytes(b"\x07" * 64 * 100)
    real = B.raw_fixed_count

    def count_then_append(*a, **k):
        n = real(*a, **k)
        with open(p, "ab") as f:  # another writer, just after the count
            f.write(b"\x09" * 64 * 10)
        return n

    monkeypatch.setattr(B, "raw_fixed_count", count_then_append)
    with pytest.raises(DataError, match=r"f\.bin: file changed while it was being indexed"):
        lirs.build_index(str(p), format="fixed", record_size=64, progress=False)
    assert not os.path.exists(str(p) + ".lirs")
    monkeypatch.setattr(B, "raw_fixed_count", real)
    assert lirs.build_index(str(p), format="fixed", record_size=64, progress=False).n == 110


def test_an_npy_file_replaced_while_it_is_indexed_is_refused(tmp_path, monkeypatch):
    """A .npy replaced by a longer one (np.save to a temp name, rename) between its header's read
    and its fingerprint left a sidecar of the old row count under the new file's fingerprint."""
    from lirs import build as B

    x = tmp_path / "x.npy"
    np.save(x, np.zeros((100, 4), np.float32))
    real = B.npy_layout

    def layout_then_replace(path):
        out = real(path)
        np.save(tmp_path / "new.npy", np.ones((110, 4), np.float32))
        os.replace(tmp_path / "new.npy", x)
        return out

    monkeypatch.setattr(B, "npy_layout", layout_then_replace)
    with pytest.raises(DataError, match=r"x\.npy: file changed while it was being indexed"):
        lirs.build_index(str(x), progress=False)
    assert not os.path.exists(str(x) + ".lirs")


def test_a_labels_file_rewritten_while_it_is_indexed_is_refused(tmp_path, monkeypatch):
    """A labels file rewritten after its fingerprint and before its labels are taken is refused
    by name: the sidecar never pairs labels read from one file with another's fingerprint."""
    from lirs import build as B

    x, lab = _labelled(tmp_path)
    real = B.labels_for_npy

    def labels_then_rewrite(path, n, **k):
        out = real(path, n, **k)
        np.save(lab, np.arange(50, dtype=np.float64)[::-1].copy())  # in place, the same size
        return out

    monkeypatch.setattr(B, "labels_for_npy", labels_then_rewrite)
    with pytest.raises(DataError, match=r"x\.labels\.npy: file changed while it was being indexed"):
        lirs.build_index(str(x), progress=False)
    assert not os.path.exists(str(x) + ".lirs")


def test_a_directory_of_more_labelled_npy_files_than_free_descriptors_is_indexed(tmp_path):
    """Each labels file's reader held a descriptor open until the index was written: a directory of
    more labelled .npy files than the process could open at once failed with EMFILE."""
    import subprocess
    import sys

    d = tmp_path / "shards"
    d.mkdir()
    for i in range(120):
        np.save(d / f"x{i:03d}.npy", np.full((3, 2), i, np.float32))
        np.save(d / f"x{i:03d}.labels.npy", np.full(3, i % 5, np.float64))
    code = ("import resource, sys, lirs; resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100)); "
            "idx = lirs.build_index(sys.argv[1], progress=False); print(idx.n)")
    r = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-1] == "360"


def test_a_labels_file_replaced_after_its_header_was_read_is_refused_a_touch_is_not(tmp_path):
    """No descriptor is held between reads: a labels file replaced (renamed over) by one of another
    size after its header was read is refused at the next read, not read by the old header; one only
    touched reads on (a touch during a long `lirs shuffle` stopped it)."""
    from lirs.npyformat import NpyRows

    _, lab = _labelled(tmp_path)
    rows = NpyRows(str(lab))
    assert np.array_equal(rows[0:5], np.arange(5.0) % 7)
    _touch(lab)
    assert np.array_equal(rows[5:10], np.arange(5.0, 10.0) % 7)
    other = tmp_path / "other.npy"
    np.save(other, np.arange(40, dtype=np.float64) + 100)
    os.replace(other, lab)
    with pytest.raises(DataError, match="its size changed since its header was read"):
        rows[0:5]


def test_fortran_order_labels_are_read_once_for_all_their_slices(tmp_path, monkeypatch):
    """Rows of Fortran-order labels are not contiguous: each slice read the whole file (lirs shuffle
    slices labels a chunk at a time), now the first one does."""
    from lirs import npyformat
    from lirs.npyformat import NpyRows

    lab = tmp_path / "f.labels.npy"
    a = np.asfortranarray(np.arange(40, dtype=np.float64).reshape(20, 2))
    np.save(lab, a)
    reads = []
    real = npyformat.pread_into
    monkeypatch.setattr(npyformat, "pread_into", lambda *x: reads.append(1) or real(*x))
    rows = NpyRows(str(lab))
    reads.clear()
    for c in range(0, 20, 5):
        assert np.array_equal(rows[c:c + 5], a[c:c + 5])
    assert len(reads) == 1


def test_a_labels_symlink_to_a_missing_file_is_refused_not_taken_for_no_labels(tmp_path):
    """A labels file that is a symlink to a missing target (a store not mounted) was taken for no
    labels: the index served every record without one, silently."""
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((10, 2), np.float32))
    os.symlink(tmp_path / "gone" / "x.labels.npy", tmp_path / "x.labels.npy")
    with pytest.raises(DataError, match=r"x\.labels\.npy: the labels file of .* is a symlink to .*gone.*which does not exist"):
        lirs.build_index(str(x), progress=False)
    assert not os.path.exists(str(x) + ".lirs")
