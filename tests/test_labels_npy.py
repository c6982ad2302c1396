"""The labels file beside ``.npy`` data (``X.labels.npy``, ``X.npy.labels.npy``) as `lirs index`
and an open read it: a node that is not a regular file, bytes after its values, and which record's
label changed."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import lirs
from lirs.cli import main
from lirs.errors import DataError, StaleIndexError
from lirs.index import open_index


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIRS_CACHE_DIR", str(tmp_path / "cache"))


def _within(fn, fifo, seconds=30):
    """``fn()``'s result or exception, run in a thread: a call still blocked after ``seconds`` (on
    opening ``fifo``, waiting for a writer) fails the test instead of hanging the suite; the blocked
    open is then released by opening the FIFO for writing."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the test, which asserts on it
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked reader sees end of file
        t.join(seconds)
        pytest.fail(f"blocked on {fifo} for over {seconds} s (a FIFO opened for reading)")
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.parametrize("name", ["x.labels.npy", "x.npy.labels.npy"])
@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "directory"])
def test_a_labels_file_that_is_no_regular_file_is_refused_before_it_is_opened(tmp_path, capsys, name, make):
    """A FIFO named X.labels.npy made `lirs index X.npy` wait forever (opening it for reading waits
    for a writer); a directory there failed with a bare IsADirectoryError. A DataError naming it,
    as a data file that is not a regular file is refused."""
    x, node = tmp_path / "x.npy", tmp_path / name
    np.save(x, np.zeros((4, 3), np.float32))
    make(node)
    with pytest.raises(DataError, match=rf"{name}: the labels file of .*x\.npy is not a regular file \(a FIFO, "
                                        r"device, socket or directory\)"):
        _within(lambda: lirs.build_index(str(x), progress=False), node)
    assert _within(lambda: main(["index", "--quiet", str(x)]), node) == 1
    assert "not a regular file" in capsys.readouterr().err
    assert node.is_fifo() if make is os.mkfifo else node.is_dir()  # left as it was


def test_an_index_whose_labels_file_became_a_fifo_opens_to_a_stale_error_not_a_hang(tmp_path, capsys):
    """The labels file of an index replaced by a FIFO: the open compared it (its size moved) by
    opening it for reading, which waited for a writer forever; `lirs index --check` too."""
    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    np.save(x, np.zeros((4, 3), np.float32))
    np.save(lab, np.arange(4, dtype=np.float64))
    lirs.build_index(str(x), progress=False)
    lab.unlink()
    os.mkfifo(lab)
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: the labels of .*x\.npy changed since indexing "
                                              r"\(it is not a regular file now"):
        _within(lambda: open_index(str(x)), lab)
    assert _within(lambda: main(["index", "--check", str(x)]), lab) == 1
    assert "not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["x.labels.npy", "x.npy.labels.npy"])
def test_a_labels_file_with_bytes_after_its_values_is_refused_as_a_data_file_is(tmp_path, capsys, name):
    """`lirs index` refuses a data .npy with bytes after the records its header promises (values
    appended without a new header are never read), but took a labels file so, silently. Refused
    too, naming the labels file, its size and the size its header promises."""
    x, lab = tmp_path / "x.npy", tmp_path / name
    np.save(x, np.zeros((4, 3), np.float32))
    np.save(lab, np.arange(4, dtype=np.float64))
    promised = lab.stat().st_size
    with open(lab, "ab") as f:
        f.write(b"junk")
    with pytest.raises(DataError, match=rf"{name}: not a \.npy array of labels \(the file has {promised + 4} bytes, "
                                        rf"its header promises {promised} .*4 bytes after its values"):
        lirs.build_index(str(x), progress=False)
    assert main(["index", "--quiet", str(x)]) == 1
    assert f"{promised + 4} bytes" in capsys.readouterr().err
    with open(x, "ab") as f:  # the data file so is refused alike
        f.write(b"junk")
    with pytest.raises(DataError, match=r"x\.npy: byte \d+: 4 bytes after the 4 records"):
        lirs.build_index(str(x), progress=False)


def _keep_size_and_mtime(lab, labels):
    """Rewrite the labels file ``lab`` with ``labels`` (the same count), its mtime put back."""
    st = os.stat(lab)
    np.save(lab, labels)
    os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_check_names_the_first_record_whose_label_changed(tmp_path, capsys):
    """`lirs index --check` on a labels file whose values changed, its size and mtime kept, said
    "its labels differ" and named no record: it names the first one (numbered within its data
    file, the second file's here) with the label the index has and the one the file has now."""
    d = tmp_path / "d"
    d.mkdir()
    for name, n in (("a", 30), ("b", 40)):
        np.save(d / f"{name}.npy", np.zeros((n, 2), np.float32))
        np.save(d / f"{name}.labels.npy", np.ones(n))
    lirs.build_index(str(d), progress=False)
    labels = np.ones(40)
    labels[[17, 33]] = -1.0
    _keep_size_and_mtime(d / "b.labels.npy", labels)
    assert main(["index", "--check", str(d)]) == 1
    err = capsys.readouterr().err
    assert "b.labels.npy: the labels of" in err and "its mtime kept" in err, err
    assert "record 17: the index has 1.0, the file has -1.0" in err, err
    with pytest.raises(StaleIndexError, match=r"b\.labels\.npy: .*record 17: the index has 1\.0, the file has -1\.0"):
        open_index(str(d), check=False).check_fresh(full=True)


def test_a_labels_file_whose_mtime_moved_names_the_first_changed_record_at_open(tmp_path):
    """A labels file whose sampled blocks, size and mtime are kept is compared by `--check`, one whose
    mtime moved by an open: the stale error names the first record whose label differs, past the
    first million labels compared (one chunk) too; a NaN label the same is no difference."""
    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    n = (1 << 20) + 10
    labels = np.arange(n, dtype=np.float64) % 5
    labels[3] = np.nan
    np.save(x, np.zeros((n, 1), np.uint8))
    np.save(lab, labels)
    lirs.build_index(str(x), progress=False)
    labels[40_000] = -1.0  # between the blocks an open samples: only `lirs index --check` sees it
    _keep_size_and_mtime(lab, labels)
    open_index(str(x))
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: .*\(its labels differ, its size and modification "
                                              r"time kept; record 40000: the index has 0\.0, the file has -1\.0\)"):
        open_index(str(x), check=False).check_fresh(full=True)
    labels[(1 << 20) + 2] = 7.5
    labels[40_000] = 0.0
    np.save(lab, labels)
    os.utime(lab, ns=(0, os.stat(lab).st_mtime_ns + 10 ** 9))
    with pytest.raises(StaleIndexError, match=rf"x\.labels\.npy: .*its mtime changed .*; record {(1 << 20) + 2}: "
                                              rf"the index has {float(((1 << 20) + 2) % 5)}, the file has 7\.5"):
        open_index(str(x))
