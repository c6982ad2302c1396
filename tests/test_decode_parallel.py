"""Record spans decoded by several threads (a loader window) against one thread and sklearn, and the
compile options that keep the LIBSVM kernels free of reference counting."""
from __future__ import annotations

import io
import mmap
import re

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher
from sklearn.datasets import load_svmlight_file
from test_decode import _plain_like_file, assert_same, split_records

from lirs import svmdecode
from lirs.decode import decode_libsvm
from lirs.errors import DataError
from lirs.kernels import libsvm, libsvm_plain, numbers


def _odd_records(rng, n):
    """Plain-like records with, every few records, one that needs the full kernel, Python's
    float() (a value or a label), or sklearn's own parser (a comment inside the span)."""
    recs = [r + b"\n" for r in _plain_like_file(rng, n).split(b"\n")]
    for i in range(0, n, 11):
        recs[i] = recs[i].replace(b":1 ", b":1.00000000000000000000001 ", 1)
    for i in range(3, n, 13):
        recs[i] = re.sub(rb"^\S+", b"1.00000000000000000000001", recs[i], count=1)
    for i in range(5, n, 17):
        recs[i] = recs[i].replace(b":1 ", b":inf ", 1)
    for i in range(7, n, 19):
        recs[i] = b"# comment 1:2\n" + recs[i]
    return recs


@pytest.mark.parametrize("seed", [0, 1])
def test_runs_on_threads_match_one_thread_and_sklearn(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    recs = _odd_records(rng, 500)
    raw = b"".join(recs)
    ref = load_svmlight_file(io.BytesIO(raw), zero_based=False, n_features=10 ** 8)
    s, e = split_records(raw)
    order = rng.permutation(len(s))  # spans in any order, as a shuffled window holds them
    s, e = s[order], e[order]
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 500)
    for dtype in [np.float64, np.float32]:
        one = decode_libsvm(raw, s, e, n_features=10 ** 8, zero_based=False, dtype=dtype, threads=1)
        assert_same(one, (ref[0][order], ref[1][order]), dtype)
        for threads in [2, 3, 7]:
            assert_same(decode_libsvm(raw, s, e, n_features=10 ** 8, zero_based=False, dtype=dtype,
                                      threads=threads), one, dtype)


def test_runs_keep_qids(monkeypatch):
    raw = b"".join(_odd_records(np.random.default_rng(5), 300))
    s, e = split_records(raw)
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 400)
    one = decode_libsvm(raw, s, e, n_features=10 ** 8, zero_based=False, query_id=True, threads=1)
    many = decode_libsvm(raw, s, e, n_features=10 ** 8, zero_based=False, query_id=True, threads=4)
    assert_same(many, one, np.float32)
    assert (one[2] != np.iinfo(np.int64).min).any()


def test_first_error_in_record_order_across_runs(monkeypatch):
    good = [b"1 1:1 2:0.5\n"] * 400
    recs = good + [b"1 3:x\n"] + good + [b"1 2:1 1:1\n"] + good
    raw = b"".join(recs)
    s, e = split_records(raw)
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1000)
    with pytest.raises(DataError, match=r"record 400\)") as ei:
        decode_libsvm(raw, s, e, n_features=9, zero_based=False, threads=4, source="w.svm")
    assert "3:x" in str(ei.value)


def test_a_big_window_is_cut_into_runs(monkeypatch):
    """The split happens (so the tests above exercise it) and covers every record once."""
    raw = b"".join(_odd_records(np.random.default_rng(2), 200))
    s, e = split_records(raw)
    runs = svmdecode._span_runs(s, e, 3)
    assert len(runs) == 3 and runs[0][0] == 0 and runs[-1][1] == len(s)
    assert all(a < b for a, b in runs) and all(r[1] == q[0] for r, q in zip(runs, runs[1:]))
    sizes = [int((e[a:b] - s[a:b]).sum()) for a, b in runs]
    assert max(sizes) < 2 * min(sizes)


@pytest.mark.parametrize("module", [libsvm, libsvm_plain, numbers])
def test_kernels_compile_without_reference_counting(module):
    """An array passed between kernels costs two atomic reference-count updates per call, and
    threads updating the same array's count fight over one cache line: the LIBSVM kernels
    allocate nothing, so they are compiled without the runtime (``_nrt=False``)."""
    kernels = [f for f in vars(module).values() if isinstance(f, CPUDispatcher)]
    assert kernels
    for f in kernels:
        assert f.targetoptions.get("_nrt") is False, f.py_func.__name__


def _counting(monkeypatch, name):
    """Wrap the full kernel ``name`` of lirs.kernels.libsvm: a list that gets one entry per call."""
    calls = []
    kernel = getattr(libsvm, name)

    def wrapped(*args):
        calls.append(args)
        return kernel(*args)
    monkeypatch.setattr(libsvm, name, wrapped)
    return calls


@pytest.mark.parametrize("stretch", [1, 2, 64])
def test_plain_kernel_goes_on_after_an_odd_record(tmp_path, monkeypatch, stretch):
    """A record the plain kernels refuse costs a stretch of the full kernel, not the rest of the
    file or batch; with stretches of one record the kernels alternate at every odd record."""
    from lirs.decode import load_svmlight
    rng = np.random.default_rng(11)
    recs = [b"%d %s\n" % (rng.integers(0, 2), b" ".join(b"%d:%d" % (i, rng.integers(1, 9)) for i in
                                                        np.unique(rng.integers(1, 900, 12)).tolist()))
            for _ in range(3000)]
    for i in range(17, 3000, 400):
        recs[i] = recs[i].replace(b"\n", b" 999:1e-5\n")  # not plain: an exponent
    raw = b"".join(recs)
    path = tmp_path / "mixed.svm"
    path.write_bytes(raw)
    ref = load_svmlight_file(str(path), zero_based=False, n_features=1000)
    monkeypatch.setattr(svmdecode, "_STRETCH_RECORDS", stretch)
    monkeypatch.setattr(svmdecode, "_STRETCH_BYTES", 30 * stretch)
    spans = _counting(monkeypatch, "libsvm_spans")
    lines = _counting(monkeypatch, "libsvm_lines")
    s, e = split_records(raw)
    assert_same(decode_libsvm(raw, s, e, n_features=1000, zero_based=False, dtype=np.float64, threads=1), ref)
    assert_same(load_svmlight(path, zero_based=False, n_features=1000, threads=1), ref)
    assert len(spans) == len(lines) == 8  # once per odd record
    full_records = sum(len(a[1]) - a[3] for a in spans)  # a[1]: the spans up to its end, a[3]: its first
    assert full_records <= 8 * stretch
    full_bytes = sum(a[2] - a[1] for a in lines)
    assert full_bytes < 8 * (30 * stretch + 200)


def test_data_that_is_never_plain_costs_few_calls(monkeypatch):
    recs = [b"1 1:%de-3 5:2.5e1\n" % i for i in range(1, 5000)]
    raw = b"".join(recs)
    ref = load_svmlight_file(io.BytesIO(raw), zero_based=False, n_features=9)
    spans = _counting(monkeypatch, "libsvm_spans")
    s, e = split_records(raw)
    assert_same(decode_libsvm(raw, s, e, n_features=9, zero_based=False, dtype=np.float64, threads=1), ref)
    assert len(spans) <= 8  # stretches double: 64, 128, ... records


def _in_mapping(a) -> bool:
    """Whether array ``a`` (or the array it views) lies in an mmap of its own."""
    while a is not None:
        if isinstance(a, memoryview):
            a = a.obj
        if isinstance(a, mmap.mmap):
            return True
        a = getattr(a, "base", None)
    return False


def test_populated_outputs_match_sklearn(tmp_path, monkeypatch):
    """A whole-file decode into populated mappings (every array, here) equals sklearn, on one
    thread and several (plain records: odd ones are spliced into new arrays); spans too."""
    from lirs import memory
    from lirs.decode import load_svmlight
    rng = np.random.default_rng(11)
    raw = _plain_like_file(rng, 400) + b"\n"
    path = tmp_path / "p.svm"
    path.write_bytes(raw)
    ref = load_svmlight_file(str(path), zero_based=False, n_features=10 ** 8)
    monkeypatch.setattr(memory, "POPULATE_MIN_BYTES", 1)
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 500)
    for threads in [1, 3]:
        X, y = load_svmlight(path, n_features=10 ** 8, zero_based=False, threads=threads)
        assert_same((X, y), ref, np.float64)
        # one region: no compaction, so the outputs are the mapped arrays themselves
        assert threads > 1 or (_in_mapping(X.data) and _in_mapping(X.indices))
        s, e = split_records(raw)
        assert_same(decode_libsvm(raw, s, e, n_features=10 ** 8, zero_based=False, dtype=np.float64,
                                  threads=threads), ref, np.float64)


def test_output_empty():
    from lirs import memory
    big = memory.output_empty((memory.POPULATE_MIN_BYTES >> 2) + 3, np.int32)
    assert big.shape == ((memory.POPULATE_MIN_BYTES >> 2) + 3,) and big.dtype == np.int32
    assert big.flags.writeable and big.flags.c_contiguous and _in_mapping(big)
    big[:] = 7
    assert int(big.sum()) == 7 * len(big)
    small = memory.output_empty(10, np.float32)
    assert small.shape == (10,) and small.dtype == np.float32 and small.base is None
    assert memory.output_empty(0, np.int64).shape == (0,)


def test_output_empty_falls_back_to_numpy_where_mapping_fails(monkeypatch):
    # a locked-memory or address-space limit refuses the mapping: numpy's memory then, same array
    from lirs import memory

    def refuse(*a, **k):
        raise OSError(12, "Cannot allocate memory")
    import types
    monkeypatch.setattr(memory, "mmap", types.SimpleNamespace(mmap=refuse, MAP_PRIVATE=mmap.MAP_PRIVATE,
                                                              MAP_POPULATE=mmap.MAP_POPULATE))
    a = memory.output_empty(memory.POPULATE_MIN_BYTES, np.uint8)
    assert a.shape == (memory.POPULATE_MIN_BYTES,) and a.flags.writeable and not _in_mapping(a)
