"""Decoders against sklearn.datasets.load_svmlight_file: valid and invalid, whole files and spans."""
from __future__ import annotations

import struct

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file

import lirs
from lirs.decode import (NO_QID, decode_fixed, decode_libsvm, decode_lines, load_svmlight,
                         resolve_libsvm_params)
from lirs.errors import DataError, UsageError
from lirs.index import Index
from lirs.kernels import libsvm as K

HYP = settings(max_examples=60, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# --------------------------------------------------------------------------- helpers


def _bits(a):
    a = np.asarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same(ours, ref, dtype=np.float64):
    """Same shape, same CSR structure, bit-identical values and labels (and qids if present)."""
    X, y = ours[0], ours[1]
    Xr, yr = ref[0], ref[1]
    assert isinstance(X, sp.csr_matrix)
    assert X.shape == Xr.shape
    assert X.dtype == np.dtype(dtype)
    assert X.indices.dtype == (np.int32 if X.shape[1] <= 2**31 - 1 else np.int64)
    assert X.indptr.dtype == X.indices.dtype
    np.testing.assert_array_equal(X.indptr, Xr.indptr)
    np.testing.assert_array_equal(X.indices, Xr.indices)
    with np.errstate(over="ignore"):  # float64 -> float32 overflows to inf, as in sklearn
        ref_data = np.asarray(Xr.data, dtype)
    np.testing.assert_array_equal(_bits(X.data), _bits(ref_data))
    assert y.dtype == np.float64
    np.testing.assert_array_equal(_bits(y), _bits(yr))
    if len(ref) > 2:
        np.testing.assert_array_equal(ours[2], ref[2])


def sk_load(path, **kw):
    try:
        return load_svmlight_file(str(path), **kw)
    except (ValueError, OverflowError) as e:  # sklearn's ways of rejecting a file
        return e


def compare_file(path, **kw):
    """Both loaders on one file: equal results, or both reject (lirs with a DataError)."""
    ref = sk_load(path, **kw)
    if isinstance(ref, Exception):
        with pytest.raises(DataError) as ei:
            load_svmlight(path, **kw)
        assert str(path) in str(ei.value)
        return None
    ours = load_svmlight(path, **kw)
    assert_same(ours, ref, kw.get("dtype", np.float64))
    return ours


def split_records(raw: bytes):
    """Record spans as the index defines them: a data line plus the blank/comment lines after it.

    Lines before the first data line are a header (not part of any record)."""
    starts, pos, is_data = [], 0, []
    for line in raw.split(b"\n"):
        h, z = line.find(b"#"), line.find(b"\0")
        content = line[:h] if h >= 0 and (z < 0 or h < z) else line
        if content.split():
            starts.append(pos)
        pos += len(line) + 1
    starts = np.array(starts, np.int64)
    ends = np.append(starts[1:], len(raw)).astype(np.int64)
    return starts, ends


# --------------------------------------------------------------------------- generated files

_digits = st.text("0123456789", min_size=1, max_size=20)


@st.composite
def number_token(draw, allow_special=True):
    kind = draw(st.sampled_from(["int", "dec", "exp", "repr", "g16", "g17", "tiny", "huge"]
                                + (["special", "under"] if allow_special else [])))
    sign = draw(st.sampled_from(["", "", "-", "+"]))
    if kind == "int":
        return sign + draw(_digits)
    if kind == "dec":
        a, b = draw(st.text("0123456789", max_size=10)), draw(st.text("0123456789", max_size=10))
        if not a and not b:
            a = "0"
        return sign + a + "." + b
    if kind == "exp":
        return (sign + draw(st.text("0123456789", min_size=1, max_size=8)) + draw(st.sampled_from("eE"))
                + draw(st.sampled_from(["", "-", "+"])) + str(draw(st.integers(0, 40))))
    f = draw(st.floats(allow_nan=False, allow_infinity=False))
    if kind == "repr":
        return repr(f)
    if kind == "g16":
        return "%.16g" % f
    if kind == "g17":
        return "%.17g" % f
    if kind == "tiny":
        return sign + draw(st.sampled_from(["5e-324", "4.9e-324", "2.2250738585072014e-308", "1e-400"]))
    if kind == "huge":
        return sign + draw(st.sampled_from(["1.7976931348623157e308", "1e309", "9007199254740993",
                                            "123456789012345678901234567890", "1e23", "8.5e22"]))
    if kind == "special":
        return sign + draw(st.sampled_from(["inf", "nan", "Infinity", "NaN", "iNf"]))
    return draw(st.sampled_from(["1_0", "1_000.5", "0.1_2e1_0"]))


@st.composite
def libsvm_file(draw, one_based=None, qid_p=0.2):
    n = draw(st.integers(0, 12))
    one_based = draw(st.booleans()) if one_based is None else one_based
    ws = st.sampled_from([" ", " ", "\t", "  ", " \x0b", "\x0c "])
    lines = []
    for _ in range(n):
        for _ in range(draw(st.integers(0, 1))):
            lines.append(draw(st.sampled_from(["", "# a comment", "   ", "\t# x: 1:2", "#"])))
        parts = [draw(number_token())]
        if draw(st.floats(0, 1)) < qid_p:
            parts.append("qid:" + str(draw(st.integers(-5, 10**6))))
        k = draw(st.integers(0, 6))
        idx = sorted(draw(st.sets(st.integers(0 + one_based, 60), min_size=k, max_size=k)))
        for i in idx:
            it = draw(st.sampled_from(["{}", "{}", "+{}", "0{}"])).format(i)
            parts.append(it + ":" + draw(number_token()))
        line = draw(ws).lstrip("\x0c") + draw(ws).join(parts)
        line += draw(st.sampled_from(["", "", " # trailing", "\r", " "]))
        lines.append(line)
    text = "\n".join(lines)
    if lines and draw(st.booleans()):
        text += "\n"
    return text.encode()


@HYP
@given(raw=libsvm_file(), zb=st.sampled_from(["auto", True, False]),
       dtype=st.sampled_from([np.float64, np.float32]), q=st.booleans())
def test_generated_files_match_sklearn(tmp_path, raw, zb, dtype, q):
    p = tmp_path / "g.svm"
    p.write_bytes(raw)
    compare_file(p, zero_based=zb, dtype=dtype, query_id=q)


@HYP
@given(raw=libsvm_file(one_based=True), data=st.data())
def test_spans_match_sklearn_rows(tmp_path, raw, data):
    """decode_libsvm over shuffled record spans of a buffer equals sklearn's rows in that order."""
    p = tmp_path / "s.svm"
    p.write_bytes(raw)
    ref = load_svmlight_file(str(p), query_id=True)
    Xr, yr = ref[0], ref[1]
    starts, ends = split_records(raw)
    k = len(starts)
    # sklearn's "auto": one-based iff there are features and every index is > 0
    zero_based = Xr.nnz == 0 or bool(np.min(_raw_indices(raw)) == 0)
    perm = np.array(data.draw(st.permutations(range(k))), np.int64)
    perm = perm[: data.draw(st.integers(0, k))]
    # the engine puts the records read into its own buffer: copy them there, keep file offsets
    pad = data.draw(st.integers(0, 7))
    chunks, bstarts, bends, pos = [], [], [], 0
    for j in perm:
        b = b"\0" * pad + raw[starts[j]:ends[j]]
        chunks.append(b)
        bstarts.append(pos + pad)
        bends.append(pos + len(b))
        pos += len(b)
    buf = np.frombuffer(b"".join(chunks), np.uint8)
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    X, y, qid = decode_libsvm(buf, np.array(bstarts, np.int64), np.array(bends, np.int64),
                              n_features=Xr.shape[1], zero_based=zero_based, dtype=dtype,
                              source=str(p), file_offsets=starts[perm], query_id=True)
    assert_same((X, y), (Xr[perm], yr[perm]), dtype)
    assert qid.dtype == np.int64 and qid.shape == (len(perm),)
    has = np.array([_has_qid(raw[starts[j]:ends[j]]) for j in range(k)], bool)
    full = np.full(k, NO_QID, np.int64)
    full[has] = ref[2]
    np.testing.assert_array_equal(qid, full[perm])


def _has_qid(rec: bytes) -> bool:
    toks = rec.split(b"#")[0].split()
    return len(toks) > 1 and toks[1].startswith(b"qid")


def _raw_indices(raw):
    out = []
    for line in raw.split(b"\n"):
        for tok in line.split(b"#")[0].split()[1:]:
            if not tok.startswith(b"qid"):
                out.append(int(tok.split(b":")[0]))
    return out or [0]


# --------------------------------------------------------------------------- hand-written cases

VALID = [
    b"",
    b"# only a comment\n\n   \n",
    b"1 1:1 2:2\n-1 3:0.5\n",
    b"1 1:1 2:2\r\n-1 3:0.5\r\n",                  # CRLF
    b"1 1:1 2:2\n-1 3:0.5",                        # last line without newline
    b"1 0:1 5:2\n",                                 # zero-based by auto
    b"+1 1:0 2:-0 3:0.0\n",                         # explicit zeros are kept
    b"1 qid:3 1:1\n2 qid:3 2:1\n3 qid:7 1:2\n",
    b"1 qid:3 1:1\n2 2:1\n",                        # qid on some records only
    b"1 qid:abc 1:1\n",                             # qid value not parsed unless query_id
    b"1 qidfoo:5 1:1\n",                            # sklearn: any token starting with 'qid'
    b"1\n2\n",                                      # labels only, no features
    b"1 1:2 # tail comment 3:4\n",
    b"1\t1:2\x0b2:3\x0c3:4 \r\n",                   # all bytes.split() whitespace
    b"1_0 1_0:2_5\n",                               # Python's int()/float() take underscores
    b"inf 1:nan 2:-inf 3:Infinity\n",
    b"1e400 1:1e-400 2:5e-324 3:1.7976931348623157e308\n",
    b"0.1 1:0.30000000000000004 2:9007199254740993 3:123456789012345678901234567890\n",
    b"1 +2:1 003:4\n",                               # signs and leading zeros in indices
    b"1 1:1 #\x00 binary in a comment\n",
    b"1 1:2e0 2:1E-0\n",
    b"-1 7:1.5e-3 10:.5 11:5. 12:-.25E+2\n",
]

INVALID = [
    b"x 1:2\n",             # bad label
    b"1:2 3:4\n",           # label with a colon
    b"1 3\n",               # no colon
    b"1 3:\n",              # no value
    b"1 :3\n",              # no index
    b"1 a:1\n",
    b"1 1:x\n",
    b"1 1:2:3\n",
    b"1 2:1 1:1\n",         # unsorted
    b"1 2:1 2:1\n",         # duplicate
    b"1 -1:1\n",            # negative index
    b"1 1.5:1\n",
    b"1 qid 1:1\n",         # qid without a colon
    b"1 1:1 qid:2\n",       # qid after a feature: int('qid') fails
    b"1 1:1\x00\n",         # NUL byte in a token
    b"1 1:1 \x00#x\n",      # a '#' after a NUL is not a comment
    b"1 1:1\n2 1:1e\n",
    b"1 1:1\n\xff\xfe 1:1\n",
]


@pytest.mark.parametrize("raw", VALID, ids=range(len(VALID)))
@pytest.mark.parametrize("zb", ["auto", True, False])
@pytest.mark.parametrize("q", [False, True])
def test_valid_handwritten(tmp_path, raw, zb, q):
    p = tmp_path / "v.svm"
    p.write_bytes(raw)
    for dtype in (np.float64, np.float32):
        compare_file(p, zero_based=zb, query_id=q, dtype=dtype)


@pytest.mark.parametrize("raw", INVALID, ids=range(len(INVALID)))
@pytest.mark.parametrize("zb", ["auto", False])
def test_invalid_handwritten_both_reject(tmp_path, raw, zb):
    p = tmp_path / "bad.svm"
    p.write_bytes(raw)
    assert isinstance(sk_load(p, zero_based=zb), Exception)
    with pytest.raises(DataError, match=r"bad\.svm: line \d+, byte \d+: "):
        load_svmlight(p, zero_based=zb)
    if zb == "auto":  # what sklearn refuses with its default, `lirs index` refuses too
        with pytest.raises(DataError, match=r"bad\.svm: line \d+, byte \d+: "):
            lirs.build_index(str(p), progress=False)


def test_qid_value_is_checked_with_query_id(tmp_path):
    p = tmp_path / "q.svm"
    p.write_bytes(b"1 qid:abc 1:1\n")
    assert isinstance(sk_load(p, query_id=True), Exception)
    with pytest.raises(DataError, match="qid"):
        load_svmlight(p, query_id=True)


def test_index_zero_when_one_based(tmp_path):
    p = tmp_path / "z.svm"
    p.write_bytes(b"1 1:1\n1 0:1\n")
    assert isinstance(sk_load(p, zero_based=False), Exception)
    with pytest.raises(DataError, match=r"line 2, .*index 0"):
        load_svmlight(p, zero_based=False)


def test_n_features(tmp_path):
    p = tmp_path / "n.svm"
    p.write_bytes(b"1 1:1 4:2\n")
    compare_file(p, n_features=10)
    compare_file(p, n_features=4)
    compare_file(p, n_features=3)  # too small: both reject


def test_error_message_names_file_offset_record_token(tmp_path):
    raw = b"1 1:1 2:2\n# note\n-1 3:1 4:abc\n1 5:1\n"
    starts, ends = split_records(raw)
    buf = np.frombuffer(raw, np.uint8)
    with pytest.raises(DataError) as ei:
        decode_libsvm(buf, starts, ends, n_features=10, zero_based=False, source="d.svm",
                      record_ids=np.array([100, 101, 102]))
    bad = raw.index(b"4:abc")
    assert str(ei.value).startswith(f"d.svm: byte {bad} (record 101): ")
    assert "'4:abc'" in str(ei.value)
    # the same record placed elsewhere in a buffer: the file offset still comes out right
    sub = np.frombuffer(b"xyz" + raw[starts[1]:ends[1]], np.uint8)
    with pytest.raises(DataError, match=f"byte {bad} \\(record 0\\)"):
        decode_libsvm(sub, np.array([3]), np.array([len(sub)]), n_features=10, zero_based=False,
                      source="d.svm", file_offsets=starts[1:2])


def test_decode_error_of_an_indexed_file_names_the_line(tmp_path):
    raw = b"1 1:1 2:2\n# note\n\n-1 3:1 4:abc\n1 5:1\n"
    p = tmp_path / "d.svm"
    p.write_bytes(raw)
    starts, ends = split_records(raw)
    bad = raw.index(b"4:abc")
    with pytest.raises(DataError) as ei:
        decode_libsvm(np.frombuffer(raw, np.uint8), starts, ends, n_features=10, zero_based=False,
                      source=str(p), record_ids=np.array([7, 8, 9]))
    assert str(ei.value).startswith(f"{p}: line 4, byte {bad} (record 8): ")
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("rec", [b"# only comment\n", b"\n", b"1 1:1\n2 2:1\n", b"1 1:1\n# c\n2 2:1"])
def test_record_needs_exactly_one_data_line(rec):
    buf = np.frombuffer(rec, np.uint8)
    with pytest.raises(DataError, match="data line"):
        decode_libsvm(buf, np.array([0]), np.array([len(rec)]), n_features=5, zero_based=False)


def test_out_of_range_index_for_n_features():
    rec = b"1 3:1 9:1\n"
    buf = np.frombuffer(rec, np.uint8)
    with pytest.raises(DataError, match="out of range"):
        decode_libsvm(buf, np.array([0]), np.array([len(rec)]), n_features=8, zero_based=False)
    X, _ = decode_libsvm(buf, np.array([0]), np.array([len(rec)]), n_features=9, zero_based=False)
    assert X.indices.tolist() == [2, 8]


def test_large_indices_give_int64(tmp_path):
    """An extension over sklearn (whose C int overflows): indices past 2**31 - 1 are kept."""
    big = 3 * 2**31
    rec = f"1 5:1 {big}:2\n".encode()
    buf = np.frombuffer(rec, np.uint8)
    X, y = decode_libsvm(buf, np.array([0]), np.array([len(rec)]), n_features=big + 1, zero_based=True)
    assert X.indices.dtype == np.int64 and X.indices.tolist() == [5, big]
    p = tmp_path / "big.svm"
    p.write_bytes(rec)
    X2, _ = load_svmlight(p)
    assert X2.shape == (1, big) and X2.indices.dtype == np.int64  # auto: one-based
    assert X2.indices.tolist() == [4, big - 1]


def test_other_dtype_casts_like_sklearn(tmp_path):
    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:0.1 2:3.5\n")
    p.write_bytes(b"1 1:0.9 2:-3.5 3:7\n")
    ref = load_svmlight_file(str(p), dtype=np.int32)
    X, _ = load_svmlight(p, dtype=np.int32)
    assert X.dtype == np.int32 and ref[0].dtype == np.int32
    np.testing.assert_array_equal(X.data, ref[0].data)


def test_gzip_file(tmp_path):
    import gzip
    p = tmp_path / "c.svm.gz"
    with gzip.open(p, "wb") as f:
        f.write(b"1 1:1 2:2\n-1 3:4\n")
    compare_file(p)


def test_empty_spans_and_no_records():
    buf = np.zeros(0, np.uint8)
    X, y = decode_libsvm(buf, np.zeros(0, np.int64), np.zeros(0, np.int64), n_features=3, zero_based=True)
    assert X.shape == (0, 3) and y.shape == (0,)


def test_bad_spans_are_usage_errors():
    buf = np.frombuffer(b"1 1:1\n", np.uint8)
    with pytest.raises(UsageError):
        decode_libsvm(buf, np.array([0]), np.array([99]), n_features=3, zero_based=True)
    with pytest.raises(UsageError):
        decode_libsvm(buf, np.array([0]), np.array([6]), n_features=0, zero_based=True)


# --------------------------------------------------------------------------- float fast path


@settings(max_examples=400, deadline=None)
@given(tok=number_token())
def test_kernel_float_equals_python_float(tok):
    b = np.frombuffer(tok.encode(), np.uint8)
    v, ok = K.parse_float(b, 0, len(b), K.POW10)
    try:
        ref = float(tok.encode())
    except ValueError:
        assert not ok
        return
    if ok:
        assert struct.pack("<d", v) == struct.pack("<d", ref), tok


def test_kernel_float_exhaustive_sweep():
    """Random mantissas of 1..20 digits at every exponent around the fast path's limits."""
    rng = np.random.default_rng(7)
    toks = []
    for e in range(-30, 31):
        for nd in range(1, 21):
            for _ in range(6):
                m = "".join(map(str, rng.integers(0, 10, nd)))
                dot = int(rng.integers(0, nd + 1))
                toks.append(f"{m[:dot]}.{m[dot:]}e{e}" if dot < nd else f"{m}e{e}")
    n_fast = 0
    for tok in toks:
        b = np.frombuffer(tok.encode(), np.uint8)
        v, ok = K.parse_float(b, 0, len(b), K.POW10)
        if ok:
            n_fast += 1
            assert struct.pack("<d", v) == struct.pack("<d", float(tok)), tok
    assert n_fast > len(toks) // 3  # the fast path is really taken


def test_fast_path_covers_plain_numbers():
    for tok in [b"1", b"-1", b"0.0625", b"3.14159", b"1e-5", b"123456789012345", b"-0", b"2.5E+3"]:
        b = np.frombuffer(tok, np.uint8)
        v, ok = K.parse_float(b, 0, len(b), K.POW10)
        assert ok and struct.pack("<d", v) == struct.pack("<d", float(tok)), tok


# --------------------------------------------------------------------------- resolve_libsvm_params


@pytest.mark.parametrize("raw", [b"1 1:1 7:2\n", b"1 0:1 7:2\n", b"1\n2\n", b"1 3:1\n"])
@pytest.mark.parametrize("zb", ["auto", True, False])
def test_resolve_params_agree_with_sklearn(tmp_path, raw, zb):
    p = tmp_path / "r.svm"
    p.write_bytes(raw)
    idx = [i for i in _raw_indices(raw)] if b":" in raw else []
    meta = {"min_index": min(idx), "max_index": max(idx)} if idx else {"min_index": 0, "max_index": -1}
    index = Index.from_arrays([str(p)], "libsvm", offsets=split_records(raw)[0],
                              data_ends=[len(raw)], meta=meta)
    ref = sk_load(p, zero_based=zb)
    if isinstance(ref, Exception):
        with pytest.raises(DataError):
            resolve_libsvm_params(index, zero_based=zb)
        return
    n_features, zero_based = resolve_libsvm_params(index, zero_based=zb)
    assert n_features == ref[0].shape[1]
    starts, ends = split_records(raw)
    X, y = decode_libsvm(np.frombuffer(raw, np.uint8), starts, ends, n_features=n_features,
                         zero_based=zero_based, dtype=np.float64)
    assert_same((X, y), ref)


def test_resolve_params_needs_meta_and_checks_n_features(tmp_path):
    index = Index.from_arrays([str(tmp_path / "x.svm")], "libsvm", offsets=[0], data_ends=[6], meta={})
    with pytest.raises(UsageError, match="lirs index"):
        resolve_libsvm_params(index)
    index.meta.update(min_index=1, max_index=9)
    assert resolve_libsvm_params(index) == (9, False)
    assert resolve_libsvm_params(index, n_features=20) == (20, False)
    with pytest.raises(UsageError):
        resolve_libsvm_params(index, n_features=5)


def test_zero_based_false_with_a_featureless_file_agrees_with_sklearn(tmp_path):
    """A file of labels only beside one-based files: the index said min_index 0 (so that "auto"
    reads zero-based, as sklearn does), and zero_based=False refused valid data as holding index 0."""
    from sklearn.datasets import load_svmlight_files

    d = tmp_path / "ds"
    d.mkdir()
    (d / "a.svm").write_bytes(b"1\n-1\n")
    (d / "b.svm").write_bytes(b"1 3:1 5:2\n2 1:4\n")
    files = [str(d / "a.svm"), str(d / "b.svm")]
    for zb in (False, "auto", True):
        ref = load_svmlight_files(files, zero_based=zb)
        with lirs.Loader(str(d), 4, zero_based=zb) as L:
            got = {int(i): row for b in L.epoch(0) for i, row in zip(b.ids, b.X.toarray())}
        assert L.n_features == ref[2].shape[1], zb
        np.testing.assert_array_equal(np.array([got[2], got[3]]), ref[2].toarray())
    index = lirs.open_index(str(d))
    assert resolve_libsvm_params(index, zero_based=False) == (5, False)
    from lirs.commands.info import summarize  # lirs info says the index written, not the 0 "auto" reads

    assert summarize(index)["features"] == {"min_index": 1, "max_index": 5}
    index.meta.pop("least_index")  # an index built before it was recorded: refused as then, no crash
    with pytest.raises(DataError, match="index 0"):
        resolve_libsvm_params(index, zero_based=False)
    (d / "c.svm").write_bytes(b"1 0:1\n")  # a real index 0 is still refused
    lirs.build_index(str(d), progress=False)
    with pytest.raises(DataError, match="index 0"):
        resolve_libsvm_params(lirs.open_index(str(d)), zero_based=False)
    one = tmp_path / "one.svm"  # one file without any feature: one column, as sklearn
    one.write_bytes(b"1\n-1\n")
    lirs.build_index(str(one), progress=False)
    assert resolve_libsvm_params(lirs.open_index(str(one)), zero_based=False) == (1, False)


@pytest.mark.parametrize("bad", [4.9, 5.5, "6", b"7", 0, -1, 2**63, float("inf"), [5], True])
def test_n_features_must_be_a_whole_number_in_range(tmp_path, bad):
    """A float was truncated (4.9 -> 4), a string converted, 2**63 or a list raised Python's own
    error: each is a UsageError naming n_features, as sklearn refuses them, wherever it is given."""
    import lirs

    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1 4:2\n-1 2:1\n")
    lirs.build_index(str(p), progress=False)
    raw = np.frombuffer(p.read_bytes(), np.uint8)
    for call in (lambda: lirs.Loader(str(p), 2, n_features=bad),
                 lambda: load_svmlight(p, n_features=bad),
                 lambda: decode_libsvm(raw, np.array([0]), np.array([10]), n_features=bad, zero_based=False)):
        with pytest.raises(UsageError, match="n_features"):
            call()


def test_an_empty_batch_of_any_dtype(tmp_path):
    """3 records on 4 ranks: rank 3's batch holds none; with dtype float16 scipy's constructor
    refused it (a ValueError at that batch, where batches of records worked)."""
    import lirs

    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1 4:2\n-1 2:1\n1 3:0.5\n")
    for dt in (np.float16, np.float32, np.int8):
        with lirs.Loader(str(p), 2, rank=3, world_size=4, dtype=dt) as ld:
            (b,) = list(ld.epoch(0))
        assert b.X.shape == (0, 4) and b.X.dtype == dt and len(b.y) == 0


@pytest.mark.parametrize("where", [0, 1])
def test_zero_based_false_names_the_first_index_0(tmp_path, where):
    """zero_based=False on data holding index 0 named no line or byte; it names the first one (of
    the file it is in, past 1 MiB of records before it), as load_svmlight does."""
    import lirs

    d = tmp_path / "d"
    d.mkdir()
    lines = [f"{1 - 2 * (i % 2)} 3:{i % 7} 9:1.5 # c{i}\n" for i in range(70000)]
    for k, name in enumerate(("a.svm", "b.svm")):
        body = list(lines)
        if k == where:
            body[60000] = "# a comment line\n-1 00:1 5:2\n"
            body[65000] = "1 0:2\n"
        (d / name).write_text("".join(body))
    lirs.build_index(str(d), progress=False)
    path = str(d / ("a.svm", "b.svm")[where])
    raw = open(path, "rb").read()
    off = raw.index(b"-1 00:1") + 3
    with pytest.raises(DataError) as ei:
        lirs.Loader(str(d), 10, zero_based=False)
    line = raw[:off].count(b"\n") + 1
    assert str(ei.value).startswith(f"{path}: line {line}, byte {off}: "), str(ei.value)  # as every other error
    assert "index 0" in str(ei.value) and "'00:1'" in str(ei.value)


def test_resolve_params_from_built_index(tmp_path):
    from lirs.build import build_index
    raw = b"# header\n1 2:1 5:1\n-1 3:1 9:0.5\n"
    p = tmp_path / "b.svm"
    p.write_bytes(raw)
    index = build_index([str(p)])
    n_features, zero_based = resolve_libsvm_params(index)
    ref = load_svmlight_file(str(p))
    assert (n_features, zero_based) == (ref[0].shape[1], False)
    starts, ends = index.bounds()
    X, y = decode_libsvm(np.frombuffer(raw, np.uint8), starts, ends, n_features=n_features,
                         zero_based=zero_based, dtype=np.float64)
    assert_same((X, y), ref)


# --------------------------------------------------------------------------- fixed and lines


def test_decode_fixed_matches_npy(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((50, 3, 4)).astype(">f4")
    p = tmp_path / "a.npy"
    np.save(p, a)
    raw = np.fromfile(p, np.uint8)
    header = len(raw) - a.nbytes
    rs = a[0].nbytes
    ids = rng.permutation(50)[:20]
    out = decode_fixed(raw, header + ids * rs, a.dtype, (3, 4))
    assert out.shape == (20, 3, 4) and out.dtype == a.dtype
    np.testing.assert_array_equal(out, a[ids])
    out[0] = 0  # a copy, not a view of the buffer
    np.testing.assert_array_equal(np.load(p)[ids[0]], a[ids[0]])
    with pytest.raises(UsageError):
        decode_fixed(raw, np.array([len(raw) - 2]), a.dtype, (3, 4))


@pytest.mark.parametrize("shape", [(3,), (2, 4), ()])
def test_decode_fixed_of_no_records_is_empty(shape):
    """Zero records raised numpy's bare "cannot reshape array of size 0" instead of the empty
    (0, *shape) array the docstring promises."""
    out = decode_fixed(np.zeros(48, np.uint8), np.empty(0, np.int64), np.float32, shape)
    assert out.shape == (0, *shape) and out.dtype == np.float32
    assert decode_fixed(np.zeros(48, np.uint8), [], ">i2", shape).dtype == np.dtype(">i2")


def test_decode_lines():
    raw = b'{"a": 1}\n{"b": 2}\r\nlast'
    buf = np.frombuffer(raw, np.uint8)
    starts, ends = np.array([0, 9, 19]), np.array([9, 19, 23])
    assert decode_lines(buf, starts, ends) == [b'{"a": 1}', b'{"b": 2}', b"last"]
    assert decode_lines(buf, starts[[1, 0]], ends[[1, 0]], keep_newline=True) == [b'{"b": 2}\r\n', b'{"a": 1}\n']


# --------------------------------------------------------------------------- correctly rounded floats


def _exact_decimal(x: float) -> str:
    """The exact decimal expansion of a finite double (or of a dyadic fraction)."""
    from fractions import Fraction
    f = Fraction(x)
    j = f.denominator.bit_length() - 1  # a power of two
    return f"{f.numerator * 5 ** j}e-{j}" if j else str(f.numerator)


def _midpoint(x: float) -> str:
    """The exact decimal of the point halfway between x > 0 and the next double up."""
    from fractions import Fraction
    mid = (Fraction(x) + Fraction(float(np.nextafter(x, np.inf)))) / 2
    j = mid.denominator.bit_length() - 1
    return f"{mid.numerator * 5 ** j}e-{j}" if j else str(mid.numerator)


def _hard_tokens(rng):
    toks = []
    for _ in range(3000):  # 1..19 significant digits over the whole exponent range
        nd = int(rng.integers(1, 20))
        m = "".join(map(str, rng.integers(0, 10, nd)))
        e = int(rng.integers(-360, 330))
        dot = int(rng.integers(0, nd + 1))
        toks.append(f"{rng.choice(['', '-', '+'])}{m[:dot]}.{m[dot:]}e{e}")
    bits = rng.integers(1, 0x7FF0000000000000, 1500, dtype=np.int64)
    doubles = bits.view(np.float64).tolist() + rng.uniform(2**53, 2**64, 300).tolist()
    for x in doubles:
        toks.append(repr(x))                         # shortest round-trip (17 digits at most)
        toks.append("%.16e" % x)
        d = _midpoint(x)                             # exactly halfway: ties to even
        toks.append(d)
        digits, _, exp = d.partition("e")
        exp = int(exp or 0)
        if len(digits) > 19:                         # near halfway, truncated to 19 digits
            cut = len(digits) - 19
            toks.append(f"{digits[:19]}e{exp + cut}")
            toks.append(f"{int(digits[:19]) + 1}e{exp + cut}")
    toks += [_exact_decimal(5e-324), "4.9406564584124654e-324", "2.4703282292062327e-324",
             "2.4703282292062328e-324", "2.2250738585072011e-308", "2.2250738585072014e-308",
             "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308",
             "9007199254740993", "9007199254740992", "9007199254740995", "18446744073709551615",
             "1e23", "1e22", "1e-22", "1e-23", "1e400", "-1e400", "1e-400", "-1e-400", "0e999",
             "1e99999", "1e100000", "0.000001e-300", "123456789012345678e-340", "nan", "-nan",
             "inf", "-Infinity", "1_000", "0x10", "1e", "1e+", ".", "-", "", "1.5e3.", "00000000000000000000001"]
    return toks


def test_float_kernel_is_bit_identical_to_python_float_on_hard_cases():
    """Eisel-Lemire with Clinger's fast path: where the kernel answers, it is float()'s answer;
    and it answers for (nearly) every number of at most 19 significant digits."""
    toks = _hard_tokens(np.random.default_rng(11))
    answered = short = 0
    for tok in toks:
        b = np.frombuffer(tok.encode(), np.uint8)
        v, ok = K.parse_float(b, 0, len(b), K.POW10)
        try:
            ref = float(tok)
        except ValueError:
            assert not ok, tok
            continue
        sig = len(tok.lower().split("e")[0].lstrip("+-").replace(".", "").lstrip("0"))
        if sig <= 19 and "n" not in tok.lower() and "_" not in tok:
            short += 1
            answered += ok
        if ok:
            assert struct.pack("<d", v) == struct.pack("<d", ref), tok
    assert answered >= 0.999 * short  # the exact fallback is for the rare undecided cases only


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hard_numbers_in_a_file_match_sklearn(tmp_path, dtype):
    rng = np.random.default_rng(5)
    toks = [t for t in _hard_tokens(rng) if t and _float_or_none(t) is not None]
    lines = []
    for i in range(0, len(toks) - 3, 3):
        lines.append(f"{toks[i]} 1:{toks[i + 1]} 7:{toks[i + 2]}")
    path = tmp_path / "hard.svm"
    path.write_text("\n".join(lines) + "\n")
    assert compare_file(path, dtype=dtype) is not None
    raw = path.read_bytes()
    s, e = split_records(raw)
    X, y = decode_libsvm(np.frombuffer(raw, np.uint8), s, e, n_features=7, zero_based=False, dtype=dtype)
    assert_same((X, y), load_svmlight_file(str(path), dtype=dtype, n_features=7, zero_based=False), dtype)


def _float_or_none(t):
    try:
        return float(t)
    except ValueError:
        return None


# --------------------------------------------------------------------------- plain fast path


def _plain_like_file(rng, n, nl=b"\n"):
    """Records at the edges of the plain grammar: 8-digit indices and values, signs, 15 and 16
    digit decimals, tabs, CRs; now and then a record that only the full kernels take."""
    out = []
    for i in range(n):
        label = rng.choice([b"+1", b"-1", b"1", b"0", b"2.5", b"-0", b"12345678", b"123456789"])
        idx = np.unique(rng.integers(1, 10 ** int(rng.integers(1, 9)), int(rng.integers(0, 12))))
        toks = [label]
        for a in idx.tolist():
            kind = rng.integers(0, 9)
            v = [b"1", b"-1", b"0.5", b"-0.25", b"12345678", b"1234567.12345678",
                 b"123456789012.345", b"1234567890123.456", b"1e-5"][kind]
            toks.append(b"%d:%s" % (a, v))
        if rng.random() < 0.03:
            toks.insert(1, b"qid:%d" % rng.integers(-5, 5))
        line = rng.choice([b" ", b"\t", b"  "]).join(toks)
        if rng.random() < 0.02:
            line += b" # a comment"
        out.append(line)
    return nl.join(out)


@pytest.mark.parametrize("nl", [b"\n", b"\r\n"])
@pytest.mark.parametrize("tail", [b"", b"\n"])
def test_plain_and_full_kernels_agree_with_sklearn(tmp_path, nl, tail):
    raw = _plain_like_file(np.random.default_rng(3), 400, nl) + tail
    path = tmp_path / "plain.svm"
    path.write_bytes(raw)
    for zb in ["auto", False]:
        assert compare_file(path, zero_based=zb) is not None  # a valid file: both load it
        assert compare_file(path, zero_based=zb, dtype=np.float32, query_id=True) is not None
    ref = load_svmlight_file(str(path), zero_based=False, n_features=10 ** 8)
    s, e = split_records(raw)
    for lo in range(0, len(s), 97):  # batches, so that plain runs stop and resume
        X, y = decode_libsvm(raw, s[lo:lo + 97], e[lo:lo + 97], n_features=10 ** 8, zero_based=False,
                             dtype=np.float64)
        assert_same((X, y), (ref[0][lo:lo + 97], ref[1][lo:lo + 97]))


def test_spans_never_read_past_their_end():
    """Adjacent records without a separator between them: word loads see the next record's digits,
    which must not join the number (and a record at the very end of the buffer is read too)."""
    recs = [b"1 3:5", b"7 2:1", b"2 1:12.5", b"34 4:1.", b"5 8:-2"]
    buf = b"".join(recs)
    ends = np.cumsum([len(r) for r in recs])
    starts = ends - [len(r) for r in recs]
    for pad in [b"", b"9" * 40]:
        X, y = decode_libsvm(buf + pad, starts, ends, n_features=9, zero_based=False, dtype=np.float64)
        ref = [load_svmlight_file(__import__("io").BytesIO(r), n_features=9, zero_based=False) for r in recs]
        np.testing.assert_array_equal(y, [r[1][0] for r in ref])
        np.testing.assert_array_equal(X.toarray(), np.vstack([r[0].toarray() for r in ref]))


@pytest.mark.parametrize("end", [b" ", b"\t", b"\x0b", b"\x0c", b"\r", b"", b"x", b"_1", b".", b".5", b"0",
                                 b"e1", b":", b"3:1", b"4"])
def test_single_digit_values_and_what_follows(tmp_path, end):
    """A one-digit value is decoded by two byte tests when whitespace follows; anything else
    after the digit takes the general path (or Python, or an error), as sklearn decides."""
    lines = [b"1 2:%d%s 5:1 7:0" % (d, end) for d in range(10)] + [b"0 3:0%s" % end, b"1 4:9%s" % end]
    path = tmp_path / "digits.svm"
    path.write_bytes(b"\n".join(lines))
    try:
        ref = load_svmlight_file(str(path), zero_based=False, n_features=9)
    except ValueError:
        with pytest.raises(DataError, match="line 1, "):  # the first line is already refused
            load_svmlight(path, zero_based=False, n_features=9)
        return
    assert_same(load_svmlight(path, zero_based=False, n_features=9), ref)
    raw = path.read_bytes()
    nl = [i for i, c in enumerate(raw) if c == 10]
    starts = np.array([0] + [i + 1 for i in nl], np.int64)
    ends = np.array(nl + [len(raw)], np.int64)
    assert_same(decode_libsvm(raw, starts, ends, n_features=9, zero_based=False, dtype=np.float64), ref)


def test_whole_file_in_regions_matches_one_thread_and_sklearn(tmp_path, monkeypatch):
    """Regions decoded by several threads: blank and comment lines (fewer records than lines),
    qid tokens (fewer features than ':'), fallback tokens and re-parsed records in every region."""
    from lirs import svmdecode
    rng = np.random.default_rng(9)
    lines = _plain_like_file(rng, 600).split(b"\n")
    for i in range(0, len(lines), 37):
        lines[i] = lines[i] + b"\n\n# note: 1:2\n"
        lines[i + 1] = lines[i + 1].replace(b":1 ", b":1.00000000000000000000001 ", 1)
        lines[i + 2] = lines[i + 2].replace(b":1 ", b":inf ", 1)
    path = tmp_path / "regions.svm"
    path.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 2000)
    for q in [False, True]:
        one = load_svmlight(path, threads=1, query_id=q)
        for threads in [2, 3, 7]:
            assert_same(load_svmlight(path, threads=threads, query_id=q), one)
        assert_same(one, load_svmlight_file(str(path), query_id=q))


@pytest.mark.parametrize("tail", [b"\n", b"", b"\r\n", b"\n\n"])
def test_plain_file_in_regions_matches_sklearn(tmp_path, monkeypatch, tail):
    """Only plain data lines: the regions' records and features follow one another, the CSR
    arrays are those the kernels wrote (the last line with or without its newline)."""
    from lirs import svmdecode
    rng = np.random.default_rng(11)
    lines = [b"%d " % rng.integers(0, 3) + b" ".join(b"%d:%d" % (a, rng.integers(1, 9)) for a in
             np.unique(rng.integers(1, 10 ** 6, int(rng.integers(1, 30)))).tolist()) for _ in range(700)]
    path = tmp_path / "plain.svm"
    path.write_bytes(tail.join(lines) + tail if tail else b"\n".join(lines))
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1500)
    ref = load_svmlight_file(str(path), dtype=np.float32)
    for threads in [1, 2, 5]:
        assert_same(load_svmlight(path, threads=threads, dtype=np.float32), ref, np.float32)


def test_first_error_in_file_order_across_regions(tmp_path, monkeypatch):
    from lirs import svmdecode
    good = b"1 1:1 2:0.5\n" * 400
    path = tmp_path / "bad.svm"
    path.write_bytes(good + b"1 3:x\n" + good + b"1 2:1 1:1\n" + good)
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1000)
    with pytest.raises(DataError, match="line 401") as ei:
        load_svmlight(path, threads=4)
    assert "3:x" in str(ei.value)


# --------------------------------------------------------------------------- CSR without scipy's checks


def _arrays(case):
    """(data, indices, indptr, shape) of one csr_batch input case."""
    if case == "empty":
        return np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(1, np.int32), (0, 7)
    if case == "empty_rows":
        return np.zeros(0, np.float64), np.zeros(0, np.int32), np.zeros(4, np.int64), (3, 7)
    if case == "int64":  # n_features past 2**31 - 1: int64 indices and indptr
        big = 3 * 2**31
        return (np.array([1, 2, 3], np.float32), np.array([5, big, 0], np.int64),
                np.array([0, 2, 2, 3], np.int64), (3, big + 1))
    if case == "unsorted":
        return np.array([1, 2, 3], np.float32), np.array([4, 1, 0], np.int32), np.array([0, 2, 3], np.int32), (2, 7)
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 9, 50)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64 if case == "int64_indptr" else np.int32)
    indices = np.concatenate([np.sort(rng.choice(100, c, replace=False)) for c in counts]).astype(np.int32)
    return rng.random(len(indices)).astype(np.float32), indices, indptr, (50, 100)


@pytest.mark.parametrize("case", ["int32", "int64_indptr", "int64", "empty", "empty_rows", "unsorted"])
@pytest.mark.parametrize("fast", [True, False])
def test_csr_equals_the_checked_constructor(monkeypatch, case, fast):
    """The matrix built without scipy's constructor is the one built through it: same type,
    instance attributes, shape, dtypes and arrays (shared, not copied), sortedness computed by
    scipy when asked, and scipy's full format check passes. ``fast=False``: the fallback taken on a
    scipy whose instances this module cannot reproduce."""
    from lirs import decode as D
    assert D._CSR_BASE is not None  # this scipy takes the fast path (else every case tests the fallback)
    if not fast:
        monkeypatch.setattr(D, "_CSR_BASE", None)
    data, indices, indptr, shape = _arrays(case)
    X = D.csr_batch(data, indices, indptr, shape)
    indptr_ref = indptr.astype(np.int32) if indices.dtype == np.int32 else indptr
    R = D._csr_checked(data, indices, indptr_ref, shape)
    assert type(X) is sp.csr_matrix and vars(X).keys() == vars(R).keys()
    assert X.shape == R.shape == shape and isinstance(X.shape[0], int) and X.nnz == R.nnz
    assert X.dtype == data.dtype and X.indices.dtype == indices.dtype
    assert X.indptr.dtype == (np.int32 if indices.dtype == np.int32 else np.int64)
    assert X.data is data and X.indices is indices
    np.testing.assert_array_equal(X.indptr, R.indptr)
    assert "_has_sorted_indices" not in vars(X)
    assert X.has_sorted_indices == R.has_sorted_indices == (case != "unsorted")
    X.check_format(full_check=True)
    import pickle  # torch's DataLoader workers send batches pickled
    P = pickle.loads(pickle.dumps(X))
    assert type(P) is sp.csr_matrix and P.shape == X.shape and P.indptr.dtype == X.indptr.dtype
    np.testing.assert_array_equal(P.indices, X.indices)
    if case != "int64":
        np.testing.assert_array_equal(X.toarray(), R.toarray())


def test_csr_int64_indptr_that_does_not_fit_is_kept():
    from lirs.decode import csr_batch
    indptr = np.array([0, 2**31], np.int64)  # more values than int32 counts: never cut down
    X = csr_batch(np.zeros(0, np.float32), np.zeros(0, np.int32), indptr, (1, 5))
    assert X.indptr.dtype == np.int64 and X.indptr[-1] == 2**31


def test_a_stack_of_steps_whose_values_pass_int32_keeps_int64_pointers():
    """A batch stacked from steps whose int32 row pointers each fit but whose values together pass
    2**31 (a batch of over 2G values): its pointers were cast back to int32 and wrapped negative."""
    from lirs.assemble import stack
    from lirs.decode import csr_batch
    big = 1_500_000_000  # each piece's pointers fit int32; no values are held (csr_batch checks none)
    piece = csr_batch(np.zeros(0, np.float32), np.zeros(0, np.int32), np.array([0, big], np.int32), (1, 5))
    X, _ = stack([piece, piece], None)
    assert X.indptr.tolist() == [0, big, 2 * big]
    assert X.indptr.dtype == X.indices.dtype == np.int64
    small = csr_batch(np.zeros(0, np.float32), np.zeros(0, np.int32), np.array([0, 3], np.int32), (1, 5))
    X, _ = stack([small, small], None)
    assert X.indptr.tolist() == [0, 3, 6] and X.indptr.dtype == X.indices.dtype == np.int32


def test_decoded_batches_feed_sklearn(tmp_path):
    """Batches of decode_libsvm and of row slices and stacks of steps (lirs.assemble) are accepted
    by an sklearn estimator's partial_fit, as load_svmlight_file's matrix is."""
    from sklearn.linear_model import SGDClassifier

    from lirs.assemble import rows, stack
    recs = [b"1 1:0.5 7:2\n", b"-1 2:1\n", b"1 3:0.25 4:1 9:3\n", b"-1 \n", b"1 5:1 6:2\n"]
    buf = np.frombuffer(b"".join(recs), np.uint8)
    ends = np.cumsum([len(r) for r in recs])
    X, y = decode_libsvm(buf, ends - [len(r) for r in recs], ends, n_features=9, zero_based=False)
    Xs = stack([rows(X, 0, 2), rows(X, 3, 5)], None)[0]
    ref = load_svmlight_file(str(_write(tmp_path, recs)), n_features=9, dtype=np.float32)[0]
    for M, yy in [(X, y), (rows(X, 1, 4), y[1:4]), (Xs, np.r_[y[:2], y[3:]])]:
        assert M.indices.dtype == M.indptr.dtype == np.int32
        M.check_format(full_check=True)
        clf = SGDClassifier(random_state=0).partial_fit(M, yy, classes=[-1.0, 1.0])
        assert clf.coef_.shape == (1, 9)
    np.testing.assert_array_equal(X.toarray(), ref.toarray())
    np.testing.assert_array_equal(Xs.toarray(), ref[[0, 1, 3, 4]].toarray())


@pytest.mark.parametrize("ind,ptr", [(np.int32, np.int64), (np.int32, np.int32), (np.int64, np.int64)])
def test_rows_of_a_step_are_scipys_rows_with_their_own_row_pointers(ind, ptr):
    """lirs.assemble.rows: rows lo:hi of a step's CSR matrix, as scipy slices them, the row
    pointers rebased to 0 in a new array (int32 where the indices are), data and indices shared."""
    import scipy.sparse as sp

    from lirs.assemble import rows
    from lirs.decode import csr_batch

    rng = np.random.default_rng(4)
    S = sp.random(700, 50, density=0.1, format="csr", random_state=5, dtype=np.float32)
    X = csr_batch(S.data, S.indices.astype(ind), S.indptr.astype(ptr), S.shape)
    before = X.indptr.copy()
    for lo, hi in [(0, 700), (0, 1), (3, 3), (123, 640), (699, 700)] + [tuple(sorted(rng.integers(0, 701, 2))) for _ in range(20)]:
        R = rows(X, lo, hi)
        assert R.shape == (hi - lo, 50) and R.indptr[0] == 0 and R.indptr.dtype == (np.int32 if ind == np.int32 else ptr)
        assert not np.shares_memory(R.indptr, X.indptr)
        assert R.nnz == 0 or np.shares_memory(R.data, X.data) and np.shares_memory(R.indices, X.indices)
        R.check_format(full_check=True)  # (it may copy the arrays it checks)
        np.testing.assert_array_equal(R.toarray(), S[lo:hi].toarray())
    np.testing.assert_array_equal(X.indptr, before)  # the step's own pointers are never touched


@pytest.mark.parametrize("kind", ["csr32", "csr64", "csr_wide", "dense", "list"])
def test_a_shared_steps_batches_cut_in_one_pass_are_each_batchs_rows(kind):
    """lirs.assemble.rows_each (a shared step's batches, cut at once): for every piece, what
    rows_of gives (values, labels, dtypes); CSR pieces keep their own row pointers, never
    overlapping another's, and share the step's data."""
    import scipy.sparse as sp

    from lirs.assemble import rows_each, rows_of
    from lirs.decode import csr_batch

    rng = np.random.default_rng(7)
    S = sp.random(500, 40, density=0.1, format="csr", random_state=3, dtype=np.float32)
    ind, ptr = {"csr32": (np.int32, np.int32), "csr64": (np.int32, np.int64)}.get(kind, (np.int64, np.int64))
    X = {"dense": S.toarray(), "list": [bytes([i % 256]) * 3 for i in range(500)]}.get(
        kind, csr_batch(S.data, S.indices.astype(ind), S.indptr.astype(ptr), S.shape))
    before = None if kind in ("dense", "list") else X.indptr.copy()
    for y in (None, rng.random(500)):
        for cuts in ([0, 500], [0, 1, 2, 500], [10, 10, 300, 499], [0, 100, 200, 300, 400, 500],
                     sorted(rng.integers(0, 501, 9).tolist())):
            got = rows_each((X, y), cuts)
            assert len(got) == len(cuts) - 1
            for (gx, gy), lo, hi in zip(got, cuts[:-1], cuts[1:]):
                wx, wy = rows_of((X, y), lo, hi)
                assert (gy is None and wy is None) or np.array_equal(gy, wy)
                if kind == "list":
                    assert gx == wx
                elif kind == "dense":
                    assert np.array_equal(gx, wx)
                else:
                    assert gx.shape == wx.shape and gx.indptr.dtype == wx.indptr.dtype and gx.indptr[0] == 0
                    gx.check_format(full_check=True)
                    np.testing.assert_array_equal(gx.toarray(), S[lo:hi].toarray())
                    assert (len(cuts), lo, hi) == (2, 0, 500) or not np.shares_memory(gx.indptr, X.indptr)
            if kind not in ("dense", "list") and len(cuts) > 2:
                ptrs = [g[0].indptr for g in got]
                assert not any(np.shares_memory(a, b) for i, a in enumerate(ptrs) for b in ptrs[i + 1:])
        if before is not None:
            np.testing.assert_array_equal(X.indptr, before)


def _write(tmp_path, recs):
    p = tmp_path / "b.svm"
    p.write_bytes(b"".join(recs))
    return p


@HYP
@given(raw=libsvm_file(one_based=True, qid_p=0.0), data=st.data())
def test_outputs_sized_by_a_bound_match_sklearn(tmp_path, raw, data):
    """A loader's step sizes its outputs by ``nnz_bound`` of its records' bytes, with no pass
    counting them: that bound holds for every record sklearn accepts, and a bound too low only
    sends records to Python's parser (same rows)."""
    from lirs.svmdecode import nnz_bound
    p = tmp_path / "b.svm"
    p.write_bytes(raw)
    ref = sk_load(p, zero_based=False)
    if isinstance(ref, Exception):
        return
    Xr, yr = ref
    starts, ends = split_records(raw)
    if not len(starts):
        return
    assert len(starts) == Xr.shape[0]
    assert (np.diff(Xr.indptr) <= (ends - starts - 1) // 4).all()  # a feature takes 4 bytes at least
    total = int((ends - starts).sum())
    bound = data.draw(st.sampled_from([nnz_bound(total), 0, 1, data.draw(st.integers(0, nnz_bound(total)))]))
    X, y = decode_libsvm(np.frombuffer(raw, np.uint8), starts, ends, n_features=Xr.shape[1], zero_based=False,
                         dtype=np.float64, nnz_bound=bound)
    assert_same((X, y), (Xr, yr))


def test_a_loaders_step_counts_no_colons(tmp_path, monkeypatch):
    """A group step (one thread) is decoded into outputs sized from its records' bytes: the pass
    counting ':' over every byte is gone from it (and the batches are sklearn's rows)."""
    rng = np.random.default_rng(5)
    lines = [f"{rng.integers(0, 2)} " + " ".join(f"{i}:{rng.integers(1, 99) / 10}"
                                                  for i in sorted(rng.choice(np.arange(1, 200), 12, replace=False)))
             for _ in range(600)]
    p = tmp_path / "g.svm"
    p.write_text("\n".join(lines) + "\n")
    Xr, yr = load_svmlight_file(str(p), n_features=200, dtype=np.float32)

    def counted(*a):
        raise AssertionError("a loader's step counted its ':'")
    monkeypatch.setattr(K, "span_colons", counted)
    with lirs.Loader(str(p), 50, granularity="group", group_bytes=8192, engine="buffered", n_features=200) as ld:
        got = list(ld.epoch(0))
    ids = np.concatenate([b.ids for b in got])
    assert np.array_equal(np.sort(ids), np.arange(600))
    for b in got:
        assert (b.X != Xr[b.ids]).nnz == 0 and np.array_equal(b.y, yr[b.ids])


@HYP
@given(raw=libsvm_file(one_based=True), data=st.data())
def test_a_loaders_span_decoder_gives_decode_libsvms_rows_with_int32_row_pointers_from_the_kernels(raw, data):
    """A loader's read steps decode through SpanDecoder (options fixed once, no argument checks):
    sklearn's rows (records the kernels leave to Python included: qids, comments, odd tokens),
    bad records raising as decode_libsvm raises them, and row pointers that come int32 out of the
    decode (no narrowing pass over them before the CSR matrix is built)."""
    import lirs.decode as D
    from lirs.svmdecode import nnz_bound
    from lirs.svmlight import Where
    starts, ends = split_records(raw)
    if not len(starts):
        return
    n_features = 1 + max([int(t.split(b":")[0]) for line in raw.split(b"\n") for t in line.split(b"#")[0].split()[1:]
                          if b":" in t and t.split(b":")[0].isdigit()] or [0])
    total = int((ends - starts).sum())
    bound = data.draw(st.sampled_from([nnz_bound(total), data.draw(st.integers(0, nnz_bound(total)))]))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    buf = np.frombuffer(raw, np.uint8)
    try:
        ref = decode_libsvm(buf, starts, ends, n_features=n_features, zero_based=False, dtype=dtype)
    except DataError as e:
        ref = e
    ro = [a.copy() for a in (starts, ends)]
    for a in ro:
        a.flags.writeable = False
    calls = []
    real = D.rebase_into
    D.rebase_into = lambda *a: calls.append(a) or real(*a)
    try:
        got = D.SpanDecoder(n_features, False, dtype)(buf, *ro, Where("", ro[0], None, None), bound)
    except DataError as e:
        got = e
    finally:
        D.rebase_into = real
    if isinstance(ref, Exception):
        assert isinstance(got, DataError) and str(got) == str(ref)
        return
    assert_same(got, ref, dtype)
    assert got[0].indptr.dtype == np.int32 and not calls


@pytest.mark.parametrize("fast", [True, False])
def test_csr_pieces_are_each_pieces_csr_batch(monkeypatch, fast):
    """lirs.decode.csr_pieces (a shared step's batches, made in one call) gives for each piece the
    matrix csr_batch gives (the arrays shared, not copied), also on the fallback path."""
    from lirs import decode as D
    if not fast:
        monkeypatch.setattr(D, "_CSR_BASE", None)
    data, indices, indptr, (k, n) = _arrays("int32")
    sizes = [0, 7, 1, 20, 22]
    rows = np.concatenate([[0], np.cumsum(sizes)])
    at = indptr[rows].tolist()
    ptrs = np.concatenate([indptr[a:b + 1] - indptr[a] for a, b in zip(rows[:-1], rows[1:])]).astype(np.int32)
    got = D.csr_pieces(data, indices, ptrs, at, sizes, n)
    full = sp.csr_matrix((data, indices, indptr), shape=(k, n))
    o = 0
    for i, X in enumerate(got):
        kk, a, b = sizes[i], at[i], at[i + 1]
        want = D.csr_batch(data[a:b], indices[a:b], ptrs[o:o + kk + 1], (kk, n))
        o += kk + 1
        assert type(X) is sp.csr_matrix and vars(X).keys() == vars(want).keys() and X.shape == (kk, n)
        assert a == b or np.shares_memory(X.data, data)
        X.check_format(full_check=True)
        np.testing.assert_array_equal(X.toarray(), want.toarray())
        np.testing.assert_array_equal(X.toarray(), full[rows[i]:rows[i + 1]].toarray())


def test_zero_based_numpy_bools_are_the_bools_they_are_and_ints_are_refused(tmp_path):
    """``zero_based=np.False_`` is False everywhere: the native decoder and the Python fallback
    (a line with a token it leaves to Python) shift alike, and index 0 is refused when the Loader
    is made, not in mid-epoch. An int 0 or 1 is refused (sklearn refuses it), not read as a bool
    one way here and the other way there."""
    from lirs.errors import UsageError

    p = tmp_path / "z.svm"
    p.write_bytes(b"1 1:1 3:2\n2 2:5\n3 0_1:5 0003:1\n")  # '0_1' (an int to Python) is left to its parser
    want, y = load_svmlight_file(str(p), zero_based=False)
    X, y2 = load_svmlight(p, zero_based=np.False_)
    assert X.shape == want.shape and (X != want).nnz == 0 and np.array_equal(y, y2)
    for bad in (0, 1, 1.0, "no"):
        with pytest.raises(UsageError, match="zero_based must be True, False or 'auto'"):
            load_svmlight(p, zero_based=bad)
    z = tmp_path / "zero.svm"
    z.write_bytes(b"".join(b"1 %d:1\n" % (i % 7 + 1) for i in range(3000)) + b"1 0:1\n")
    lirs.build_index(str(z), progress=False)
    with pytest.raises(DataError, match=r"zero\.svm: line 3001"):
        lirs.Loader(str(z), 10, zero_based=np.False_)
    with pytest.raises(UsageError, match="zero_based"):
        lirs.Loader(str(z), 10, zero_based=0)


def test_load_svmlight_threads_and_query_id_are_checked_before_the_file_is_read(tmp_path):
    """threads=0, -1, 1.5, "2" or True were taken (as 1 or 2 parts) and query_id="no" as true,
    where the Loader and sklearn refuse them: each is a UsageError naming the argument, raised
    before the file (here: none) is opened. None stays "every usable CPU"; numpy ints and bools pass."""
    from lirs.errors import UsageError

    missing = tmp_path / "missing.svm"
    for kw, said in ((dict(threads=0), "threads must be >= 1"), (dict(threads=-1), "threads must be >= 1"),
                     (dict(threads=1.5), "threads must be an int"), (dict(threads="2"), "threads must be an int"),
                     (dict(threads=True), "threads must be an int"), (dict(query_id="no"), "query_id must be True or False"),
                     (dict(query_id=1), "query_id"), (dict(query_id=None), "query_id")):
        with pytest.raises(UsageError, match=said):
            load_svmlight(missing, **kw)
    p = tmp_path / "q.svm"
    p.write_bytes(b"1 qid:3 1:1\n0 qid:4 2:5\n")
    X, y, qid = load_svmlight(p, threads=np.int64(2), query_id=np.True_)
    assert X.shape == (2, 2) and qid.tolist() == [3, 4]
    assert len(load_svmlight(p, threads=None, query_id=np.False_)) == 2


@pytest.mark.parametrize("bad", ["U5", object, "datetime64[s]", "not a dtype"])
def test_a_loader_dtype_no_value_holds_is_refused_naming_it(tmp_path, bad):
    from lirs.errors import UsageError

    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1.5\n")
    lirs.build_index(str(p), progress=False)
    with pytest.raises(UsageError, match="dtype must be a numpy dtype of numbers"):
        lirs.Loader(str(p), 1, dtype=bad)
    with pytest.raises(UsageError, match="dtype must be a numpy dtype of numbers"):
        load_svmlight(p, dtype=bad)
    with lirs.Loader(str(p), 1, dtype=np.int16) as L:  # a number dtype: cast as sklearn does
        assert next(iter(L.epoch(0))).X.dtype == np.int16
