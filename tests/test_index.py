"""Index building: offsets against a plain-Python reference, sidecar format, staleness, atomicity."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import lirs
from lirs.inputs import compressed
from lirs.errors import DataError, IndexFormatError, StaleIndexError, UsageError
from lirs.index import Index, open_index, write_index


def ref_libsvm(data: bytes):
    """Plain-Python reference: record starts and labels as sklearn would see the lines."""
    starts, labels = [], []
    pos = 0
    for line in data.splitlines(keepends=True) if b"\r" not in data else data.split(b"\n"):
        raw = line if line.endswith(b"\n") or b"\r" not in data else line + b"\n"
        body = line.split(b"#", 1)[0]
        parts = body.split()
        if parts:
            starts.append(pos)
            labels.append(float(parts[0]))
        pos += len(raw) if b"\r" in data else len(line)
    return starts, labels


def ref_lines(data: bytes):
    starts, pos = [], 0
    for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
        starts.append(pos)
        pos += len(line) + 1
    return starts


label_st = st.sampled_from([b"1", b"-1", b"+1", b"0", b"2.5", b"-0.125", b"1e3", b"3.0000000000000004",
                            b"0.1234567890123456789", b"7E-2", b"12345678901234567890", b"inf", b"-nan"])
feat_st = st.lists(st.tuples(st.integers(0, 10**7), st.sampled_from([b"1", b"0.5", b"-2e-3", b"7"])),
                   max_size=6)
ws_st = st.sampled_from([b" ", b"\t", b"  ", b" \t "])
eol_st = st.sampled_from([b"\n", b"\r\n"])


@st.composite
def libsvm_file(draw):
    lines = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["rec", "rec", "rec", "blank", "comment", "reccomment", "qid"]))
        if kind == "blank":
            body = draw(st.sampled_from([b"", b"   ", b"\t"]))
        elif kind == "comment":
            body = draw(st.sampled_from([b"# hello", b"  #x 1:2", b"#"]))
        else:
            feats = sorted(set(i for i, _ in draw(feat_st)))
            toks = [draw(label_st)]
            if kind == "qid":
                toks.append(b"qid:%d" % draw(st.integers(0, 9)))
            toks += [b"%d:%s" % (i, draw(st.sampled_from([b"1", b"0.5", b"-2e-3"]))) for i in feats]
            body = draw(ws_st).join(toks)
            if draw(st.booleans()):
                body = draw(ws_st) + body
            if kind == "reccomment":
                body += b" # trailing 3:4"
        lines.append(body + draw(eol_st))
    data = b"".join(lines)
    if draw(st.booleans()) and data.endswith(b"\n"):
        data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
    return data


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=libsvm_file(), chunk=st.sampled_from([1, 2, 3, 7, 64, 1 << 20]))
def test_libsvm_offsets_and_labels_match_reference(tmp_path, data, chunk):
    p = tmp_path / "d.svm"
    p.write_bytes(data)
    starts, labels = ref_libsvm(data)
    if not starts:
        with pytest.raises(DataError):
            lirs.build_index(str(p), progress=False, chunk_bytes=chunk)
        return
    idx = lirs.build_index(str(p), progress=False, chunk_bytes=chunk)
    assert idx.format == "libsvm"
    assert idx.n == len(starts)
    assert idx.offsets.tolist() == starts
    np.testing.assert_array_equal(idx.labels, np.array(labels))
    s, e = idx.bounds()
    assert e[-1] == len(data)
    # every record span starts with its data line
    for a in s[:5]:
        assert data[a:a + 1] not in (b"", b"\n")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=30),
       trailing=st.booleans(), chunk=st.sampled_from([1, 5, 1 << 20]))
def test_lines_offsets_match_reference(tmp_path, lines, trailing, chunk):
    data = b"\n".join(lines) + (b"\n" if trailing else b"")
    if not data:
        return
    # a file that begins with a compression magic (gzip, zip, ...) is refused: tested elsewhere
    assume(compressed("d.jsonl", data[:64]) is None)
    p = tmp_path / "d.jsonl"
    p.write_bytes(data)
    # named .jsonl, a NUL byte is refused as binary unless the format is said
    idx = lirs.build_index(str(p), progress=False, chunk_bytes=chunk, format="lines")
    assert idx.format == "lines"
    assert idx.offsets.tolist() == ref_lines(data)
    f, s, e = idx.spans(np.arange(idx.n))
    got = [data[a:b] for a, b in zip(s, e)]
    assert b"".join(got) == data  # spans tile the file: nothing lost, nothing twice


def test_several_files_and_directory_give_global_ids(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "a.svm").write_bytes(b"1 1:1\n-1 2:1\n")
    (d / "b.svm").write_bytes(b"# c\n1 3:1\n1 4:1\n-1 5:2")
    (d / ".hidden").write_bytes(b"junk")
    idx = lirs.build_index(str(d), progress=False)
    assert idx.sidecar == str(d) + ".lirs"
    assert idx.n == 5 and idx.nfiles == 2
    assert idx.file_starts.tolist() == [0, 2, 5]
    f, s, e = idx.spans(np.arange(5))
    assert f.tolist() == [0, 0, 1, 1, 1]
    assert s.tolist() == [0, 6, 4, 10, 16]
    assert e.tolist() == [6, 13, 10, 16, 22]
    assert idx.labels.tolist() == [1, -1, 1, 1, -1]
    with pytest.raises(UsageError):
        lirs.build_index([str(d / "a.svm"), str(d / "b.svm")], progress=False)
    j = lirs.build_index([str(d / "a.svm"), str(d / "b.svm")], out=str(tmp_path / "both.lirs"), progress=False)
    assert j.offsets.tolist() == idx.offsets.tolist()


def test_npy_needs_no_scan_and_reads_labels(tmp_path):
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x.labels.npy", np.arange(10) % 2)
    idx = lirs.build_index(str(tmp_path / "x.npy"), progress=False)
    assert idx.format == "npy" and idx.n == 10 and idx.record_size == 16
    assert idx.record_dtype == np.float32 and idx.record_shape == (4,)
    raw = (tmp_path / "x.npy").read_bytes()
    f, s, e = idx.spans(np.array([3, 9]))
    assert np.frombuffer(raw[s[0]:e[0]], np.float32).tolist() == x[3].tolist()
    assert np.frombuffer(raw[s[1]:e[1]], np.float32).tolist() == x[9].tolist()
    assert idx.labels.tolist() == [0, 1] * 5
    assert idx.index_bytes() < 8 * idx.n  # no offset table for fixed records


@pytest.mark.parametrize("dtype", [
    [("温度", "<f4"), ("b", "<i2")],  # a 3.0 header (UTF-8): read as latin-1, the name came back garbled
    [(("a title", "x"), "<f8"), ("y", "<i4", (2, 3))],  # a titled field: the sidecar never opened again
    [("p", [("q", ">f4"), ("r", "u1", (2,))]), ("s", "<i8")],  # nested, big-endian
])
def test_npy_record_dtypes_come_back_whole(tmp_path, dtype):
    a = np.zeros(7, dtype)
    a.view(np.uint8)[:] = np.arange(a.nbytes) % 251
    np.save(tmp_path / "s.npy", a)
    lirs.build_index(str(tmp_path / "s.npy"), progress=False)
    idx = lirs.open_index(str(tmp_path / "s.npy"))
    assert idx.record_dtype == np.load(tmp_path / "s.npy").dtype and idx.record_dtype.names == a.dtype.names
    with lirs.Loader(str(tmp_path / "s.npy"), 3, granularity="instance", seed=1) as loader:
        got = np.concatenate([b.X for b in loader.epoch(0)])
        ids = np.concatenate([b.ids for b in loader.epoch(0)])
    assert got.dtype.names == a.dtype.names  # in native byte order: the same values
    assert got.tobytes() == a[ids].astype(got.dtype).tobytes()


def test_npy_labels_are_kept_bit_for_bit(tmp_path):
    """-0.0 and NaNs of either sign were folded into 0.0 and one NaN by the index's codes: the
    Loader's y of .npy data (read from the index) differed from the labels file's bits."""
    labels = np.array([1.0, -0.0, 0.0, np.nan, -np.nan, -1.0, 1.0, -0.0, 2.5, -np.inf])
    np.save(tmp_path / "x.npy", np.ones((len(labels), 3), np.float32))
    np.save(tmp_path / "x.labels.npy", labels)
    idx = lirs.build_index(str(tmp_path / "x.npy"), progress=False)
    assert idx.labels.view(np.uint64).tolist() == labels.view(np.uint64).tolist()
    idx = lirs.open_index(str(tmp_path / "x.npy"))  # as saved in the sidecar
    assert idx.labels.view(np.uint64).tolist() == labels.view(np.uint64).tolist()
    with lirs.Loader(str(tmp_path / "x.npy"), 4, granularity="instance") as ld:
        for b in ld.epoch(0):
            assert b.y.view(np.uint64).tolist() == labels[b.ids].view(np.uint64).tolist()
    values = np.asarray(idx.label_values)
    assert values[:-2].tolist() == sorted(values[:-2].tolist()) and np.isnan(values[-2:]).all()  # by value, NaNs last


@pytest.mark.parametrize("others", [0, 30])  # a few values (the kernel counts), many (it bisects)
def test_libsvm_labels_are_kept_bit_for_bit(tmp_path, others):
    """A LIBSVM index coded labels by value: -0 and 0 (and NaNs of either sign) were one label, the
    first seen, in Index.labels and the sidecar, while sklearn and the Loader's y kept each one's bits."""
    from sklearn.datasets import load_svmlight_file

    toks = ["-0", "0", "1", "nan", "-nan", "0", "-nan", "-0"] + [str(2 + i) for i in range(others)]
    p = tmp_path / "y.svm"
    p.write_text("".join(f"{t} 1:{i + 1}\n" for i, t in enumerate(toks)))
    _, want = load_svmlight_file(str(p))
    bits = want.view(np.uint64).tolist()
    assert np.signbit(want[:5]).tolist() == [True, False, False, False, True]
    idx = lirs.build_index(str(p), progress=False)
    assert idx.labels.view(np.uint64).tolist() == bits
    assert lirs.open_index(str(p)).labels.view(np.uint64).tolist() == bits  # as saved in the sidecar
    with lirs.Loader(str(p), 4, granularity="instance") as ld:
        for b in ld.epoch(0):
            assert b.y.view(np.uint64).tolist() == want[b.ids].view(np.uint64).tolist()


def test_info_json_is_strict_and_counts_every_label(tmp_path, capsys):
    """`lirs info --json` printed `Infinity` (not JSON) for labels past 65,535 distinct values
    with an inf among them; and -0.0 beside 0.0 (kept apart by the codes) lost one's count."""
    import json

    from lirs.cli import main

    many = np.arange(70000, dtype=np.float64)
    many[5] = np.inf
    np.save(tmp_path / "m.npy", np.ones((len(many), 1), np.float32))
    np.save(tmp_path / "m.labels.npy", many)
    np.save(tmp_path / "z.npy", np.ones((5, 1), np.float32))
    np.save(tmp_path / "z.labels.npy", np.array([0.0, -0.0, -0.0, 1.0, np.nan]))
    for name in ("m.npy", "z.npy"):
        lirs.build_index(str(tmp_path / name), progress=False)
    assert main(["info", str(tmp_path / "m.npy"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert got["labels"] == {"distinct": "> 65535", "min": 0.0, "max": "inf"}
    assert main(["info", str(tmp_path / "z.npy"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == {"0": 3, "1": 1, "nan": 1}


def test_fixed_raw_and_its_errors(tmp_path):
    p = tmp_path / "r.bin"
    p.write_bytes(bytes(range(100)) * 3)
    idx = lirs.build_index(str(p), format="fixed", record_size=30, progress=False)
    assert idx.n == 10
    assert idx.spans(np.array([2]))[1].tolist() == [60]
    with pytest.raises(DataError, match="trailing bytes"):
        lirs.build_index(str(p), format="fixed", record_size=7, progress=False)
    with pytest.raises(UsageError):
        lirs.build_index(str(p), format="fixed", progress=False)
    idx = lirs.build_index(str(p), format="fixed", record_size=10, header_size=50, progress=False)
    assert idx.n == 25 and idx.offsets[0] == 50


def test_stale_index_is_detected(tmp_path):
    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1\n-1 2:1\n")
    lirs.build_index(str(p), progress=False)
    open_index(str(p))  # fresh
    p.write_bytes(b"1 1:1\n-1 2:9\n")  # same size, new content
    with pytest.raises(StaleIndexError, match="lirs index"):
        open_index(str(p))
    open_index(str(p), check=False)


def test_atomic_write_leaves_old_index_on_failure(tmp_path, monkeypatch):
    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1\n-1 2:1\n")
    lirs.build_index(str(p), progress=False)
    before = (tmp_path / "d.svm.lirs").read_bytes()
    p.write_bytes(b"1 1:1\n-1 2:1\n1 3:1\n")
    import lirs.index as li

    def boom(*a, **k):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(li.os, "replace", boom)
    with pytest.raises(OSError, match="injected"):
        lirs.build_index(str(p), progress=False)
    assert (tmp_path / "d.svm.lirs").read_bytes() == before
    assert [x.name for x in tmp_path.iterdir() if x.name.startswith(".")] == []


def test_corrupt_and_foreign_sidecars(tmp_path):
    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1\n")
    lirs.build_index(str(p), progress=False)
    side = tmp_path / "d.svm.lirs"
    blob = bytearray(side.read_bytes())
    blob[-3] ^= 0xFF
    side.write_bytes(bytes(blob))
    with pytest.raises(IndexFormatError, match="checksum"):
        open_index(str(p))
    side.write_bytes(b"hello world" * 10)
    with pytest.raises(IndexFormatError, match="not a lirs index"):
        open_index(str(p))
    side.write_bytes(bytes(blob[:40]))
    with pytest.raises(IndexFormatError):
        open_index(str(p))


@pytest.mark.parametrize("content,expect", [
    (b"", "empty file"),
    (b"\x00\x01\x02garbage\xff\n", "NUL byte"),
    (b"1 1:1\n1 x:1\n", "line 2, byte 8: expected INDEX:VALUE, got 'x:1'"),
    (b"1 1:1\nabc 2:1\n", "line 2, byte 6: expected a numeric label"),
    (b"1 3:1 -2:1\n", "negative feature index"),
    (b"# only a comment\n\n", "no records"),
])
def test_bad_libsvm_gives_one_line_error(tmp_path, content, expect):
    p = tmp_path / "bad.svm"
    p.write_bytes(content)
    with pytest.raises(DataError, match=expect.replace("(", r"\(")):
        lirs.build_index(str(p), progress=False)
    r = subprocess.run([sys.executable, "-m", "lirs.cli", "index", str(p)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and str(p) in r.stderr


def test_cli_index_info_and_exit_codes(tmp_path):
    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1 5:2\n-1 2:1\n1 3:1")
    run = lambda *a: subprocess.run([sys.executable, "-m", "lirs.cli", *a], capture_output=True, text=True)
    r = run("index", str(p), "--json")
    assert r.returncode == 0, r.stderr
    import json

    s = json.loads(r.stdout)
    assert s["records"] == 3 and s["format"] == "libsvm"
    assert s["labels"] == {"-1": 1, "1": 2}
    assert s["features"]["max_index"] == 5
    r = run("info", str(p))
    assert r.returncode == 0 and "records           3" in r.stdout
    assert "under 4 KiB       100.0% of records" in r.stdout
    from lirs.commands.info import _share

    # a few huge records among millions are not "100.0%" (nor a few small ones "0.0%")
    assert (_share(1 - 3e-6), _share(3e-6), _share(0.0), _share(0.5)) == (">99.9%", "<0.1%", "0.0%", "50.0%")
    assert run("info", str(tmp_path / "missing.svm")).returncode == 1
    r = subprocess.run([sys.executable, "-m", "lirs", "info", str(p)], capture_output=True, text=True)
    assert r.returncode == 0 and "records           3" in r.stdout  # `python -m lirs` is the command too
    assert run("index").returncode == 2
    assert run("index", str(p), "--format", "nope").returncode == 2
    assert run("index", str(p), "--record-size", "-3").returncode == 2


@pytest.mark.parametrize("args,said", [
    (["--chunk", "0"], "--chunk must be a positive size"),
    (["--header-size", "-1"], "--header-size must be 0 or more"),
    (["--header-size", "4"], "--header-size (header_size=4) applies to raw fixed files (--format fixed); these are libsvm"),
    (["--format", "libsvm", "--record-size", "4"],
     "--record-size (record_size=4) applies to raw fixed files (--format fixed); these are libsvm (--format libsvm)"),
    (["-o", "{tmp}/no/such/dir/d.lirs"], "its directory {tmp}/no/such/dir does not exist"),
])
def test_cli_index_refuses_options_it_would_ignore_or_misuse(tmp_path, capsys, args, said):
    """An option that would be ignored (a header size for a text format) or cannot work (a chunk
    of 0, an -o in no directory) is one line saying so, exit status 2, before any scan: nothing
    written."""
    from lirs.cli import main

    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1 5:2\n-1 2:1\n")
    assert main(["index", "--quiet", *[a.format(tmp=tmp_path) for a in args], str(p)]) == 2
    err = capsys.readouterr().err
    assert said.format(tmp=tmp_path) in err and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == ["d.svm"]


def test_a_record_size_with_a_format_that_has_its_own_layout_is_refused(tmp_path, capsys):
    """record_size with an explicit --format lines (or libsvm) was silently ignored (where a header
    size is refused), and with --format npy failed as "record layout float32(4,) differs from the
    dataset's first file (NoneNone)" on a one-file dataset: each is a UsageError (exit 2) naming
    --record-size, the format and why it was chosen (for .npy, its rows' own size), before any sidecar."""
    from lirs.cli import main

    (tmp_path / "t.jsonl").write_text("".join(f'{{"i": {i}}}\n' for i in range(50)))
    np.save(tmp_path / "x.npy", np.zeros((10, 4), np.float32))
    for name, fmt, rs, said in (("t.jsonl", "lines", 10, "these are lines (--format lines), whose layout their own format gives"),
                                ("x.npy", "npy", 7, "these are npy (--format npy), whose rows are 16 bytes"),
                                ("x.npy", "npy", 16, "these are npy (--format npy), whose rows are 16 bytes")):
        with pytest.raises(UsageError, match=re.escape(f"--record-size (record_size={rs}) applies to raw fixed files "
                                                       f"(--format fixed); {said}")):
            lirs.build_index(str(tmp_path / name), format=fmt, record_size=rs, progress=False)
        assert main(["index", "--format", fmt, "--record-size", str(rs), str(tmp_path / name)]) == 2
        out, err = capsys.readouterr()
        assert f"--record-size (record_size={rs})" in err and said in err and "None" not in err, err
        assert "format:" not in out + err  # refused before the format it would read is said
    assert sorted(os.listdir(tmp_path)) == ["t.jsonl", "x.npy"]
    assert len(lirs.build_index(str(tmp_path / "x.npy"), format="npy", progress=False)) == 10  # without it: indexed


def test_index_in_fresh_process_is_identical(tmp_path):
    rng = np.random.default_rng(0)
    lines = [b"%d %s\n" % (rng.choice([-1, 1]), b" ".join(b"%d:1" % i for i in sorted(set(rng.integers(1, 99, 5)))))
             for _ in range(500)]
    p = tmp_path / "d.svm"
    p.write_bytes(b"".join(lines))
    a = lirs.build_index(str(p), progress=False, chunk_bytes=1000).offsets.copy()
    code = f"import lirs; print(list(lirs.build_index({str(p)!r}, progress=False).offsets[:50].tolist()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([int(x) for x in a[:50]])


# --------------------------------------------------------------------------- compact offsets


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=0, max_size=3),
       st.lists(st.integers(1, 5000), min_size=1, max_size=8), st.booleans())
def test_offset_table_streams_to_the_same_offsets(file_counts, chunks, huge):
    from lirs.offsets import OffsetEncoder as _OffsetEncoder, OffsetTable

    rng = np.random.default_rng(sum(file_counts) + len(chunks))
    parts = []
    for c in file_counts:  # offsets restart in every file of a dataset
        lens = rng.integers(1, 400, c).astype(np.int64)
        if huge:
            lens[rng.random(c) < 0.01] = 3 << 30  # multi-GiB records make blocks "wide"
        parts.append(np.concatenate([[0], np.cumsum(lens[:-1])]) + int(rng.integers(0, 100)))
    offs = np.concatenate(parts) if parts else np.empty(0, np.int64)
    enc = _OffsetEncoder()
    rel, pos, i = [], 0, 0
    while pos < len(offs):
        step = chunks[i % len(chunks)]
        rel.append(enc.encode(offs[pos:pos + step]))
        pos += step
        i += 1
    rel.append(enc.encode(np.empty(0, np.int64), final=True))
    t = OffsetTable(enc.bases(), np.concatenate(rel), enc.wides())
    assert len(t) == len(offs)
    assert np.array_equal(t.to_array(), offs)
    assert np.array_equal(OffsetTable.from_array(offs).to_array(), offs)
    if len(offs):
        ids = rng.integers(0, len(offs), 50)
        assert np.array_equal(t[ids], offs[ids]) and t[int(ids[0])] == offs[ids[0]]
        assert np.array_equal(t[3:40:2], offs[3:40:2]) and t[-1] == offs[-1]
    if not huge and len(offs):
        assert t.nbytes <= 4 * len(offs) + 8 * (len(offs) // 1024 + 1)


def test_sidecar_with_wide_offset_blocks_round_trips(tmp_path):
    from lirs.index import Index, open_index, write_index

    # a sparse file with records 2 GiB apart: blocks of such records cannot use 32-bit offsets
    p = tmp_path / "sparse.txt"
    n = 1500
    offs = np.arange(n, dtype=np.int64) * 10
    offs[700:] += 5 << 30
    with open(p, "wb") as f:
        f.truncate(int(offs[-1]) + 10)
    idx = Index.from_arrays([str(p)], "lines", offsets=offs, data_ends=[int(offs[-1]) + 10])
    assert idx.offset_table.wide.size > 0
    side = write_index(idx, str(tmp_path / "sparse.lirs"))
    back = open_index(side)
    assert np.array_equal(back.offsets, offs)
    f, s, e = back.spans([699, 700, n - 1])
    assert s.tolist() == offs[[699, 700, n - 1]].tolist() and e[0] == offs[700] and e[2] == offs[-1] + 10


def test_index_bytes_per_record_is_about_four(tmp_path):
    p = tmp_path / "l.txt"
    p.write_bytes(b"".join(b"x" * (i % 50) + b"\n" for i in range(20000)))
    idx = lirs.build_index(str(p), format="lines", progress=False)
    assert 4.0 <= idx.index_bytes() / idx.n < 4.1


@pytest.mark.parametrize("chunk", [8, 9, 64])
def test_lines_of_empty_lines_fill_a_chunk(tmp_path, chunk):
    """Every byte can start a `lines` record: chunks of nothing but newlines."""
    p = tmp_path / "e.txt"
    data = b"\n" * 40 + b"ab\n" + b"\n" * 30
    p.write_bytes(data)
    idx = lirs.build_index(str(p), format="lines", chunk_bytes=chunk, progress=False)
    assert idx.offsets.tolist() == ref_lines(data)


# ---- the validating scan against sklearn, on lines long enough for the kernel's 8-byte fast path

_VALUES = [b"1", b"0.5", b".5", b"5.", b"-2", b"+3", b"1e3", b"-2.5E-3", b"0.12345678", b"12345678",
           b"123456789", b"0.1234567890123", b"nan", b"inf", b"1_0", b"", b".", b"-", b"1.2.3", b"0x1",
           b"1e", b"1:2", b"1\xa0", b"1\x00", b"e5", b"--1", b"1#c"]
_ODD = [b"x:1", b":1", b"qid:1", b"1", b"-1:1", b"00007:1", b"1.5:1", b"\x00", b"#", b"2abc:1", b"+4:1"]


@st.composite
def _fuzz_file(draw):
    def line(valid):
        idx = sorted(set(draw(st.lists(st.integers(0, 10**8), min_size=0, max_size=12))))
        toks = [draw(st.sampled_from([b"1", b"-1", b"0.25", b"nan", b"1e400"]))]
        for i in idx:
            v = b"1" if valid else draw(st.sampled_from(_VALUES))
            toks.append(b"%d:%s" % (i, v))
        if not valid and draw(st.booleans()):
            toks.insert(draw(st.integers(1, len(toks))), draw(st.sampled_from(_ODD)))
        sep = b" " if valid else draw(st.sampled_from([b" ", b" ", b"  ", b"\t", b" \r ", b"\x0b"]))
        return sep.join(toks) + draw(st.sampled_from([b"\n", b"\n", b"\r\n", b" \n"]))
    pad = [line(True) for _ in range(draw(st.integers(0, 30)))]
    bad = [line(False) for _ in range(draw(st.integers(1, 3)))]
    tail = [line(True) for _ in range(draw(st.integers(0, 30)))]
    return b"".join(pad + bad + tail)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_fuzz_file(), chunk=st.sampled_from([64, 1000, 1 << 20]))
def test_index_accepts_exactly_what_sklearn_accepts(tmp_path, data, chunk):
    from sklearn.datasets import load_svmlight_file

    p = tmp_path / "f.svm"
    p.write_bytes(data)
    try:
        load_svmlight_file(str(p))
        ok = True
    except Exception:  # noqa: BLE001
        ok = False
    if ok:
        idx = lirs.build_index(str(p), progress=False, chunk_bytes=chunk)
        X, y = load_svmlight_file(str(p))
        assert idx.n == X.shape[0]
        np.testing.assert_array_equal(idx.labels.view(np.uint64), y.view(np.uint64))
        from lirs.decode import decode_libsvm, resolve_libsvm_params

        n_features, zero_based = resolve_libsvm_params(idx)
        s, e = idx.bounds()
        X2, _ = decode_libsvm(np.frombuffer(data, np.uint8), s, e, n_features=n_features,
                              zero_based=zero_based, dtype=np.float64)
        assert X2.shape == X.shape
        np.testing.assert_array_equal(X2.indptr, X.indptr)
        np.testing.assert_array_equal(X2.indices, X.indices)
        np.testing.assert_array_equal(X2.data.view(np.uint64), X.data.view(np.uint64))
    else:
        with pytest.raises(DataError, match=r"f\.svm: line (\d+), byte (\d+): ") as ei:
            lirs.build_index(str(p), progress=False, chunk_bytes=chunk)
        line, byte = map(int, re.search(r"line (\d+), byte (\d+)", str(ei.value)).groups())
        assert line == data[:byte].count(b"\n") + 1


# --------------------------------------------------------------------------- format detection messages


def _cli_index(*args):
    r = subprocess.run([sys.executable, "-m", "lirs.cli", "index", "--quiet", *args], capture_output=True,
                       text=True)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("name,content,extra,line", [
    ("d.csv", b"1,2\n3,4\n", [], "format: lines (from the .csv extension; CSV is not parsed: records are "
                                  "delivered as raw lines (bytes, without their line ends))"),
    ("d.jsonl", b'{"a": 1}\n', [], "format: lines (from the .jsonl extension; JSON is not parsed"),
    ("d.svm", b"1 1:1\n", [], "format: libsvm (from the .svm extension)"),
    ("d.txt", b"1 1:1\n# c\n-1 2:3\n", [], "format: libsvm (the first 2 data lines read as LIBSVM"),
    ("d.txt", b"hello world\n", [], "format: lines (the first lines are not LIBSVM; records are delivered "
                                    "as raw lines (bytes, without their line ends))"),
    ("d.txt", b"1 1:1\n", ["--format", "lines"], "format: lines (--format lines)"),
    ("d.txt", b"10.0.0.1\n192.168.0.1\n", [], "format: lines (the first lines are not LIBSVM"),  # no labels
    ("d.dat", b"1.2.3\nfine\n", [], "format: lines (the first lines are not LIBSVM"),
    ("d.dat", b"+1.5e3 1:2\n-inf 3:4\nNaN\n.5 qid:3 2:1\n", [], "format: libsvm (the first 4 data lines"),
    ("d.bin", b"\x00" * 8, ["--record-size", "4"], "format: fixed (--record-size 4)"),
])
def test_index_says_which_format_and_why(tmp_path, name, content, extra, line):
    p = tmp_path / name
    p.write_bytes(content)
    rc, out, err = _cli_index(*extra, str(p))
    assert rc == 0, err
    first = out.splitlines()[0]
    assert first.startswith(line), out
    rc, out, err = _cli_index("--json", *extra, str(p))  # JSON on stdout: the reason is a field
    s = json.loads(out)
    assert rc == 0 and first == f"format: {s['format']} ({s['format_reason']})"


def test_detection_reads_on_to_the_end_of_a_long_first_line(tmp_path, monkeypatch):
    """A LIBSVM file named without an extension (as LIBSVM's data sets are: gisette_scale) whose first
    record, or leading comment block, is longer than the 64 KiB head was detected as raw lines."""
    from lirs import inputs

    wide = b"1 " + b" ".join(b"%d:0.5" % i for i in range(1, 9001)) + b"\n"  # 9000 features, 80 KB
    for name, data in (("long_first", wide + b"-1 3:1\n"), ("comment", b"# " + b"x" * 70000 + b"\n1 1:1\n-1 2:2\n"),
                       ("no_lf_at_end", b"1 1:1")):  # the last line is whole at end of file
        p = tmp_path / name
        p.write_bytes(data)
        fmt, why = inputs.format_reason(str(p))
        assert fmt == "libsvm" and "data lines read as LIBSVM" in why, (name, why)
    idx = lirs.build_index(str(tmp_path / "long_first"), progress=False)
    assert idx.format == "libsvm" and idx.n == 2 and idx.meta["max_index"] == 9000
    reads = []
    real = inputs.read_at
    monkeypatch.setattr(inputs, "read_at", lambda *a: reads.append(a[1:]) or real(*a))
    short = tmp_path / "short"
    short.write_bytes(b"-1 3:1\n" + wide * 40)  # a line ends in the head: only the head is read
    assert inputs.format_reason(str(short))[0] == "libsvm" and reads == [(1 << 16,)]
    reads.clear()
    text = tmp_path / "text"
    text.write_bytes(b"hello " * 20000 + b"\n")  # a long line whose words are not LIBSVM: no read on
    assert inputs.format_reason(str(text))[0] == "lines" and reads == [(1 << 16,)]
    endless = tmp_path / "endless"  # no line ends within the bound: the format cannot be told
    endless.write_bytes(b"1" + b" 1:1" * (2 << 20))
    with pytest.raises(DataError, match=r"endless: no data line ends in its first 4194304 bytes .*--format libsvm"):
        inputs.format_reason(str(endless))


def test_an_extensionless_file_whose_qid_token_sklearn_accepts_is_detected_as_libsvm(tmp_path):
    """sklearn takes any first feature token starting with "qid" and holding a ':' as the query id
    (`qid:` with nothing after it, `qidx:3`): such a file named without an extension was read as lines."""
    from lirs import inputs

    for i, line in enumerate((b"1 qid: 1:1\n", b"1 qidx:3 1:1\n", b"1 qid:7 2:0.5\n")):
        p = tmp_path / f"q{i}"
        p.write_bytes(line + b"-1 3:1\n")
        assert inputs.format_reason(str(p))[0] == "libsvm", line
        idx = lirs.build_index(str(p), progress=False)
        assert idx.format == "libsvm" and idx.n == 2
    p = tmp_path / "notqid"
    p.write_bytes(b"1 qid 1:1\n-1 3:1\n")  # no ':' in the token: not a query id, not LIBSVM
    assert inputs.format_reason(str(p))[0] == "lines"


def test_a_small_file_cut_off_at_its_end_is_refused_as_cut_off_not_read_as_lines(tmp_path):
    """An extensionless LIBSVM file of a few lines whose last record is cut off without its line end
    (a file still being written: `1 1:3 4:`) was detected as raw lines, that cut line counted as
    evidence, and indexed without labels. The cut line counts only where no whole data line came
    before it: the file is LIBSVM, and its cut record is refused as having no line end."""
    from lirs import inputs

    p = tmp_path / "train"
    p.write_bytes(b"".join(b"%d 1:%d 4:0.5\n" % (i % 2, i) for i in range(12)) + b"1 1:3 4:")
    assert inputs.format_reason(str(p)) == ("libsvm", "the first 12 data lines read as LIBSVM (label index:value ...)")
    with pytest.raises(DataError, match=r"train: line 13, .*no line end: is the file still being written\?"):
        lirs.build_index(str(p), progress=False)
    for data, fmt in ((b"# header\n1 1:1", "libsvm"), (b"\nhello", "lines")):  # the one data line, uncut
        p.write_bytes(data)
        assert inputs.format_reason(str(p))[0] == fmt, data


def _gz(b):
    import gzip
    return gzip.compress(b)


def _bz2(b):
    import bz2
    return bz2.compress(b)


def _xz(b):
    import lzma
    return lzma.compress(b)


def _zip(b):
    import io
    import zipfile
    f = io.BytesIO()
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("d.svm", b)
    return f.getvalue()


_SVM = b"1 1:1 3:0.5\n-1 2:2\n" * 50


@pytest.mark.parametrize("name,pack,kind,hint", [
    ("data.svm.gz", _gz, "gzip", "gunzip data.svm.gz"),
    ("data.svm.bz2", _bz2, "bzip2", "bunzip2 data.svm.bz2"),
    ("data.svm.xz", _xz, "xz", "unxz data.svm.xz"),
    ("data.svm.zst", lambda b: b"\x28\xb5\x2f\xfd" + b, "zstd", "unzstd data.svm.zst"),
    ("data.zip", _zip, "zip", "unzip -p data.zip > DATA"),
    ("data.svm", _gz, "gzip", "gunzip -c data.svm > DATA"),        # the magic bytes, whatever the name
    ("data.jsonl", _bz2, "bzip2", "bunzip2 -c data.jsonl > DATA"),
    ("data", _xz, "xz", "unxz -c data > DATA"),
    ("data.txt", lambda b: b"\x28\xb5\x2f\xfd" + b, "zstd", "unzstd -c data.txt > DATA"),
])
def test_compressed_input_is_refused_with_a_hint(tmp_path, name, pack, kind, hint):
    p = tmp_path / name
    p.write_bytes(pack(_SVM))
    # the hint names the path as given (the basename, pasted elsewhere, named no file)
    want = f"{p}: compressed input ({kind}) is not supported; decompress first (e.g. {hint.replace(name, str(p), 1)})"
    with pytest.raises(DataError) as e:
        lirs.build_index(str(p), progress=False)
    assert str(e.value).startswith(want), str(e.value)
    rc, out, err = _cli_index(str(p))
    assert rc == 1 and err.count("\n") == 1 and want in err and "NUL byte" not in err, err


def test_compressed_input_is_refused_with_an_explicit_text_format(tmp_path):
    p = tmp_path / "data.svm"
    p.write_bytes(_gz(_SVM))
    for fmt in ("libsvm", "lines", "tfrecord"):
        with pytest.raises(DataError, match=r"compressed input \(gzip\) is not supported"):
            lirs.build_index(str(p), format=fmt, progress=False)
    # raw fixed records may begin with any bytes
    assert lirs.build_index(str(p), record_size=1, progress=False).n == p.stat().st_size


def test_misnamed_compressed_and_binary_inputs_are_refused_for_what_they_are(tmp_path):
    """A plain file named .gz (a shuffle written to o.svm.gz) is not said to be gzip, with a gunzip
    that fails; LZMA-alone bytes are compressed under any name; compressed or binary bytes under a
    text extension (zlib in a .jsonl) are refused, not served as lines of garbage, unless the
    format is given; raw fixed records under a compressed name are refused too."""
    import lzma
    import zlib

    def refused(name, data, match, **kw):
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(DataError, match=match):
            lirs.build_index(str(p), progress=False, **kw)
        return p

    refused("o.svm.gz", _SVM, r"o.svm.gz: named .gz, but its first bytes are not gzip's: if it is not compressed, "
                              "rename it without .gz")
    refused("d.csv", lzma.compress(_SVM, format=lzma.FORMAT_ALONE),
            r"compressed input \(lzma\) is not supported; decompress first \(e.g. unlzma -c \S*/d.csv > DATA\)")
    packed = zlib.compress(np.random.default_rng(1).integers(0, 256, 4096, np.uint8).tobytes())
    assert b"\0" in packed
    p = refused("z.jsonl", packed, r"z.jsonl: byte \d+: NUL byte in what its .jsonl name says is text")
    assert lirs.build_index(str(p), progress=False, format="lines").format == "lines"
    refused("p.svm.zst", b"\x50\x2a\x4d\x18" + bytes(12) + b"\x28\xb5\x2f\xfd", r"compressed input \(zstd\)")  # pzstd
    refused("e.svm.bz2", _bz2(b""), r"compressed input \(bzip2\)")  # an empty stream
    refused("r.bin.gz", _gz(bytes(240)), r"compressed input \(gzip\)", record_size=12)
    refused("r2.bin.gz", _gz(bytes(240)), r"compressed input \(gzip\)", format="fixed", record_size=12)


def test_tfrecord_whose_first_length_looks_like_gzip_magic_is_not_compressed(tmp_path):
    from lirs.tfrecord import encode

    p = tmp_path / "data.bin"
    p.write_bytes(encode([bytes(0x8B1F), b"x"]).tobytes())  # length field begins 1f 8b
    assert p.read_bytes()[:2] == b"\x1f\x8b"
    assert lirs.build_index(str(p), progress=False).format == "tfrecord"


def test_shuffle_refuses_compressed_input(tmp_path):
    from lirs.external.api import shuffle

    p = tmp_path / "data.svm.gz"
    p.write_bytes(_gz(_SVM))
    with pytest.raises(DataError, match="compressed input"):
        shuffle(str(p), str(tmp_path / "o.svm"), progress=False)


def _mapped_rss(path: str) -> int:
    """Bytes of ``path``'s memory maps resident in this process (/proc/self/smaps)."""
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a map's first line: range perms offset dev inode [path]
                ours = len(head) >= 6 and head[-1] == path
            elif ours and head and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps (Linux)")
def test_release_pages_unmaps_the_sidecar_but_keeps_its_data(tmp_path):
    # an epoch walks every offset; the pages it mapped must leave the process's RSS on release
    p = tmp_path / "d.svm"
    rng = np.random.default_rng(0)
    p.write_bytes(b"".join(b"%d 1:%d\n" % (int(rng.integers(0, 3)), i) for i in range(200_000)))
    lirs.build_index(str(p), progress=False)
    idx = open_index(str(p))
    side = os.path.realpath(idx.sidecar)
    before = idx.offsets.copy(), idx.labels.copy()
    assert _mapped_rss(side) >= 500_000  # the offsets (~4 B/record) and labels were touched
    assert idx.release_pages() >= 1
    assert _mapped_rss(side) < 64 << 10
    assert np.array_equal(idx.offsets, before[0]) and np.array_equal(idx.labels, before[1])
    # an index read into memory has no map to release
    assert open_index(str(p), mmap=False).release_pages() == 0


def test_an_epoch_plan_releases_the_index_pages_it_walks(tmp_path, monkeypatch):
    from lirs import plan as P

    p = tmp_path / "d.svm"
    p.write_bytes(b"".join(b"1 3:%d\n" % i for i in range(40_000)))
    lirs.build_index(str(p), progress=False)
    idx = open_index(str(p))
    calls = []
    monkeypatch.setattr(type(idx), "release_pages", lambda self: calls.append(1) or 0)
    monkeypatch.setattr(P, "INDEX_RELEASE_BATCHES", 4)
    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", 1)  # a read step per batch
    plan = P.plan_epoch(idx, 32, granularity="group", group_bytes=4096, seed=0, epoch=0)
    assert len(calls) == 1  # the unit table's scan of every offset
    n = sum(1 for _ in plan.batches())
    assert n == plan.num_batches and len(calls) == 1 + n // 4
    # a step of several batches reads its offsets with pread (see below); where the index cannot be
    # read so (no map of a sidecar), it releases the pages once it is planned (its groups lie all over)
    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", 5 * 32 * idx.payload_bytes // idx.n)
    from lirs import windows
    monkeypatch.setattr(windows, "STEP_RECORD_COST", 1)  # ~10 B records: steps by bytes alone, as before
    calls.clear()
    plan = P.plan_epoch(idx, 32, granularity="group", group_bytes=4096, seed=0, epoch=0)
    assert plan._rel_file is not None
    n = sum(1 for _ in plan.batches())
    assert len(calls) == n // 4  # no release for the steps: they mapped nothing
    plan._rel_file = None
    calls.clear()
    assert plan.batches_per_step == 5
    n = sum(1 for _ in plan.batches())
    steps, left, k = 0, n, 0  # an epoch's first steps hold 1, 2, 4, .. batches, then 5
    while left > 0:
        left, k, steps = left - min(5, 1 << k, left), k + 1, steps + 1
    assert len(calls) == n // 4 + steps  # (the unit table is the first plan's)
    # its runs (groups) are visited STEP_PIECE_RUNS at a time, released after each piece: a run
    # maps a whole large folio of the index (up to 2 MiB), wherever it lies
    whole = [(b.ids, [(s.ext_file, s.ext_offset, s.ext_nbytes) for s, *_ in b.parts]) for b in plan.batches()]
    monkeypatch.setattr(_walker(), "STEP_PIECE_RUNS", 1)
    calls.clear()
    batches = list(plan.batches())
    pieces = [(b.ids, [(s.ext_file, s.ext_offset, s.ext_nbytes) for s, *_ in b.parts]) for b in batches]
    steps = {id(s): s for b in batches for s, *_ in b.parts}
    # (runs of consecutive records over the steps, at least: adjacent groups may join one run)
    runs = sum(int(np.count_nonzero(np.diff(np.sort(s.ids), prepend=-2) != 1)) for s in steps.values())
    assert runs > len(steps) and len(calls) >= n // 4 + runs
    for (i1, e1), (i2, e2) in zip(whole, pieces, strict=True):
        assert np.array_equal(i1, i2)
        assert all(np.array_equal(x, y) for a, b in zip(e1, e2) for x, y in zip(a, b))


def test_a_window_step_releases_the_index_pages_between_its_pieces(tmp_path, monkeypatch):
    from lirs import plan as P
    from lirs import windows as W
    from lirs.kernels import plan as K
    from lirs.kernels import steps as KS

    p = tmp_path / "d.svm"
    p.write_bytes(b"".join(b"1 3:%d\n" % i for i in range(40_000)))
    lirs.build_index(str(p), progress=False)
    idx = open_index(str(p))
    plan = P.plan_epoch(idx, 32, granularity="window", group_bytes=4096, window=30, seed=0, epoch=0)
    plan._rel_file = None  # an index that is not a map of its sidecar (else the offsets come by pread)
    calls = []
    kernel = K.extents
    monkeypatch.setattr(type(idx), "release_pages", lambda self: calls.append("release") or 0)
    monkeypatch.setattr(K, "extents", lambda *a: calls.append("extents") or kernel(*a))
    one_call = KS.step_extents  # a pass of few runs: runs, extents and deal in one kernel call
    monkeypatch.setattr(KS, "step_extents", lambda *a: calls.append("extents") or one_call(*a))
    monkeypatch.setattr(W, "STEP_PIECE_RUNS", 4)
    ids, _ = W.window_records(plan, 0)
    runs = int(np.count_nonzero(np.diff(ids, prepend=ids[0] - 2) != 1))
    step = W.window_step(plan, 0, 0, 0, None, True)
    assert runs >= 20 and calls == ["extents", "release"] * -(-runs // 4)
    calls.clear()
    part = W.window_step(plan, 1, 0, 5, 105, True)  # a part of a window: its rows in unit order
    assert 2 <= len(calls) // 2 <= 25 and calls == ["extents", "release"] * (len(calls) // 2)
    assert np.array_equal(part.ids, step.ids[5:105])
    calls.clear()
    one = W.window_step(plan, 2, 0, 5, 37, True)  # one batch's rows: one pass, released with the batches
    assert calls == ["extents"] and np.array_equal(one.ids, step.ids[5:37])


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps (Linux)")
def test_a_window_epoch_maps_no_page_of_the_offset_table(tmp_path, monkeypatch):
    # a window's runs lie all over the index; their offsets come by pread, so walking a whole epoch
    # without a single release leaves (almost) nothing of the sidecar mapped in this process
    from lirs import plan as P

    p = tmp_path / "d.svm"
    p.write_bytes(b"".join(b"1 3:%d\n" % i for i in range(400_000)))  # offsets: 1.6 MB
    lirs.build_index(str(p), progress=False)
    idx = open_index(str(p))
    side = os.path.realpath(idx.sidecar)

    def walk(plan):
        idx.release_pages()
        monkeypatch.setattr(type(idx), "release_pages", lambda self: 0)
        for _ in plan.batches():
            pass
        monkeypatch.undo()
        return _mapped_rss(side)

    plan = P.plan_epoch(idx, 256, granularity="window", group_bytes=4096, window=64, seed=0, epoch=0)
    assert walk(plan) < 64 << 10
    plan._rel_file = None  # the same walk through the map
    assert walk(plan) > 1 << 20


# --------------------------------------------------------------------------- chunked reading


def _refuse_direct(monkeypatch):
    """Make every file look like one on a filesystem that refuses O_DIRECT (tmpfs, some FUSE)."""
    import lirs.engines as E

    monkeypatch.setattr(E, "probe_direct", lambda path: f"the filesystem of {path} refuses O_DIRECT (test)")


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("start,end,chunk", [(0, None, 4096), (1, None, 5000), (4095, 70001, 1 << 16),
                                             (12345, None, (1 << 20) + 7), (0, 100, 1 << 20), (9000, 9001, 64)])
def test_read_chunks_yield_the_file_bytes(tmp_path, start, end, chunk, direct):
    from lirs.inputs import read_chunks

    p = tmp_path / "x.bin"
    data = np.random.default_rng(1).integers(0, 256, 3 * (1 << 20) + 1234, dtype=np.uint8)
    data.tofile(p)
    end = data.size if end is None else end
    pieces, want_off = [], start
    for buf, nb, off in read_chunks(str(p), start, end, chunk, direct=direct):
        assert off == want_off and 0 < nb <= chunk and buf.size >= nb
        pieces.append(buf[:nb].copy())
        want_off += nb
    assert want_off == end
    assert np.concatenate(pieces).tobytes() == data[start:end].tobytes()


@pytest.mark.parametrize("direct", [True, False])
def test_read_chunks_of_a_file_that_ends_early(tmp_path, direct):
    from lirs.inputs import read_chunks

    p = tmp_path / "x.bin"
    p.write_bytes(b"a" * 10000)
    with pytest.raises(DataError, match=rf"{re.escape(str(p))}: byte 10000: file ended early"):
        list(read_chunks(str(p), 0, 20000, 4096, direct=direct))


def test_index_without_o_direct_is_identical_and_says_so_once(tmp_path, monkeypatch, caplog):
    import logging

    import lirs.inputs as I

    rng = np.random.default_rng(4)
    lines = [f"{rng.integers(-1, 2)} " + " ".join(f"{c}:{rng.integers(1, 9)}" for c in
                                                  np.sort(rng.choice(99, rng.integers(0, 9), replace=False)) + 1)
             for _ in range(3000)]
    p = tmp_path / "x.svm"
    p.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(I, "cached", lambda *a, **k: False)  # the file just written is: read it with O_DIRECT anyway
    direct = lirs.build_index(str(p), progress=False, chunk_bytes=5000)
    offsets, codes = np.array(direct.offsets), np.array(direct.label_codes)
    _refuse_direct(monkeypatch)
    monkeypatch.setattr(I, "_WARNED_DEVICES", set())
    with caplog.at_level(logging.DEBUG, logger="lirs.inputs"):
        for _ in range(2):
            cached = lirs.build_index(str(p), progress=False, chunk_bytes=5000, full=True)  # a scan, not the reuse
            assert np.array_equal(cached.offsets, offsets) and np.array_equal(cached.label_codes, codes)
    said = [r for r in caplog.records if "refuses O_DIRECT (test); scanning through the page cache" in r.message]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG]


def test_regions_split_over_the_pool_give_the_same_index_and_first_error(tmp_path, monkeypatch):
    from lirs import scanner as B  # the text scanners live there

    rng = np.random.default_rng(8)
    lines = [b"%d %s" % (rng.integers(-2, 3), b" ".join(b"%d:%d" % (c, rng.integers(1, 9)) for c in
                                                        np.sort(rng.choice(500, rng.integers(0, 12), replace=False))))
             for _ in range(4000)]
    data = b"\n".join(lines) + b"\n"
    p = tmp_path / "x.svm"
    p.write_bytes(data)
    monkeypatch.setattr(B, "_MIN_PART", 256)  # every chunk cut in one part per core, scanned on the pool
    idx = lirs.build_index(str(p), progress=False, chunk_bytes=20000)
    starts, labels = ref_libsvm(data)
    assert np.array_equal(idx.offsets, starts)
    assert np.array_equal(idx.label_values[idx.label_codes], labels)
    # two bad lines in different parts of one chunk: the first in the file is the one reported
    for wrong, first in (((2600,), 2601), ((1500, 2600), 1501)):
        bad = list(lines)
        for i in wrong:
            bad[i] = b"1 3:x"
        p.write_bytes(b"\n".join(bad) + b"\n")
        with pytest.raises(DataError, match=rf"line {first}, byte \d+"):
            lirs.build_index(str(p), progress=False, chunk_bytes=1 << 20)


@pytest.mark.parametrize("piece", [1, 7, 1000, 1 << 23])
def test_unit_table_scanned_in_pieces_is_the_whole_scan(tmp_path, monkeypatch, piece):
    # the unit scan goes piece by piece (releasing index pages between): a unit cut by a piece's
    # edge stays one unit, and each file still starts its own
    from lirs import plan as P

    rng = np.random.default_rng(3)
    for name in ("a.svm", "b.svm"):
        (tmp_path / name).write_bytes(b"".join(b"1 %d:1%s\n" % (i + 1, b"0" * int(rng.integers(0, 300)))
                                               for i in range(3000)))
    lirs.build_index(str(tmp_path), format="libsvm", progress=False)
    idx = open_index(str(tmp_path))
    offs = idx.offsets
    fs = idx.file_starts
    want = [i for f in range(2) for i in range(fs[f], fs[f + 1])
            if i == fs[f] or offs[i] // 4096 != offs[i - 1] // 4096]
    monkeypatch.setattr(P, "UNIT_SCAN_RECORDS", piece)
    table = P.unit_table(idx, 4096)
    assert table.tolist() == want + [idx.n]


def test_a_sidecar_s_arrays_are_mapped_through_the_file_its_header_came_from(tmp_path):
    from lirs.sidecar import read_sidecar

    p = tmp_path / "d.svm"
    p.write_bytes(b"1 3:1\n-1 2:4\n")
    side = lirs.build_index(str(p), progress=False).sidecar
    header, arrays, file = read_sidecar(side)
    assert file is not None and os.fstat(file.fd).st_ino == os.stat(side).st_ino


def _policies():
    """The module whose STEP_MIN_BYTES sizes a group read step."""
    from lirs import policies
    return policies


def _walker():
    """The module whose STEP_PIECE_RUNS pieces a group read step's extents."""
    from lirs import walker
    return walker


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps (Linux)")
def test_release_pages_again_and_after_the_arrays_change(tmp_path):
    # the page ranges are found once per index: later releases still unmap what was touched since,
    # and tables set on the index afterwards are released instead of the ones it had
    p = tmp_path / "d.svm"
    p.write_bytes(b"".join(b"%d 1:%d\n" % (i % 3, i) for i in range(200_000)))
    lirs.build_index(str(p), progress=False)
    idx = open_index(str(p))
    side = os.path.realpath(idx.sidecar)
    for _ in range(3):
        idx.offsets.copy(), idx.labels.copy()
        assert _mapped_rss(side) >= 500_000
        assert idx.release_pages() >= 1
        assert _mapped_rss(side) < 64 << 10
    other = open_index(str(p))
    idx._offsets = other._offsets
    other.offsets.copy()
    assert _mapped_rss(side) >= 500_000
    assert idx.release_pages() >= 1
    assert _mapped_rss(side) < 64 << 10


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps (Linux)")
def test_release_pages_without_libc_falls_back_to_mmap_madvise(tmp_path, monkeypatch):
    from lirs import pages

    p = tmp_path / "d.svm"
    p.write_bytes(b"".join(b"1 1:%d\n" % i for i in range(200_000)))
    lirs.build_index(str(p), progress=False)
    calls = []
    monkeypatch.setattr(pages, "_page_range", lambda a: calls.append(a) or None)
    idx = open_index(str(p))
    side = os.path.realpath(idx.sidecar)
    idx.offsets.copy()
    assert _mapped_rss(side) >= 500_000
    assert idx.release_pages() >= 1 and calls
    assert _mapped_rss(side) < 64 << 10


def test_a_directory_of_subdirectories_says_they_are_not_read(tmp_path):
    """A directory's data are the files directly in it: one holding only subdirectories of data is
    refused naming them, not indexed as empty nor searched recursively."""
    (tmp_path / "D" / "2024").mkdir(parents=True)
    (tmp_path / "D" / "2024" / "a.svm").write_bytes(b"1 1:1\n")
    with pytest.raises(DataError, match=r"D: directory holds no data files \(its subdirectories 2024 are not read"):
        lirs.build_index(str(tmp_path / "D"), progress=False)


def test_the_current_directory_is_indexed_beside_itself(tmp_path, monkeypatch):
    """`lirs index .` (and a Loader of ".") names the directory's sidecar DIR.lirs beside it, as
    for any directory, not a hidden "..lirs" inside it."""
    d = tmp_path / "D"
    d.mkdir()
    (d / "a.svm").write_bytes(b"1 1:1\n-1 2:1\n")
    monkeypatch.chdir(d)
    idx = lirs.build_index(".", progress=False)
    assert idx.sidecar == str(tmp_path / "D.lirs") and os.listdir(d) == ["a.svm"]
    with lirs.Loader(".", 2) as ld:
        assert sorted(int(i) for b in ld.epoch(0) for i in b.ids) == [0, 1]


def test_a_directory_of_mixed_formats_names_the_odd_file(tmp_path):
    """Five LIBSVM files and one .npy: the error gives each format with its count and first files,
    so the one .npy is named, not only the first few files of the majority."""
    d = tmp_path / "M"
    d.mkdir()
    for i in range(5):
        (d / f"a{i}.svm").write_bytes(b"1 1:1\n")
    np.save(d / "z.npy", np.zeros((2, 2), np.float32))
    with pytest.raises(DataError, match=r"share a format; found libsvm \(5: a0.svm, a1.svm, a2.svm \.\.\.\); npy \(1: z.npy\)"):
        lirs.build_index(str(d), progress=False)


def test_a_directory_skips_editor_backups_and_refuses_a_file_unlike_its_shards(tmp_path):
    """A README.md beside .jsonl shards was served as records, and a VERSION file beside .svm ones
    as a LIBSVM record; an editor's backup (part-1.svm~) or autosave (#part-1.svm#) read as LIBSVM
    by content served its shard's records twice. Backups are skipped as hidden files are; a file
    without the shards' extension is refused, naming it and the extension; a directory of files
    all without one (Spark's part-00000) is read by content as before."""
    s, j, spark = tmp_path / "s", tmp_path / "j", tmp_path / "spark"
    for d in (s, j, spark):
        d.mkdir()
    for i in range(3):
        (s / f"part-{i}.svm").write_bytes(b"%d 1:1\n" % i)
        (j / f"part-{i}.jsonl").write_bytes(b'{"id": %d}\n' % i)
        (spark / f"part-0000{i}").write_bytes(b"%d 1:1\n" % i)
    for name in ("part-1.svm~", "#part-1.svm#", "part-1.svm.bak", "part-1.svm.orig", "part-1.svm.swp"):
        (s / name).write_bytes(b"1 1:1\n")
    (spark / "_SUCCESS").write_bytes(b"")
    assert len(lirs.build_index(str(s), progress=False)) == 3
    assert len(lirs.build_index(str(spark), progress=False)) == 3
    (j / "README.md").write_bytes(b"# My dataset\nThree shards.\n")
    with pytest.raises(DataError, match=r"README.md: not a .jsonl file like the others in .*j; move it out"):
        lirs.build_index(str(j), progress=False)
    (s / "VERSION").write_bytes(b"3\n")
    with pytest.raises(DataError, match=r"VERSION: not a .svm file like the others"):
        lirs.build_index(str(s), progress=False)


def test_rotated_logs_in_a_directory_are_shards_of_their_extension(tmp_path):
    """Rotated logs (app.jsonl, app.jsonl.1, app.jsonl.2, as RotatingFileHandler and logrotate
    name them) were refused as "app.jsonl.1: not a .jsonl file", and the advice `DIR/*.jsonl`
    left two thirds of the records out. A trailing number is no extension: they are indexed, and
    a README beside them is refused with advice that names the rotated files too."""
    d = tmp_path / "logs"
    d.mkdir()
    for name, base in (("app.jsonl", 0), ("app.jsonl.1", 100), ("app.jsonl.23", 200)):
        (d / name).write_text("".join(f'{{"id": {base + i}}}\n' for i in range(10)))
    idx = lirs.build_index(str(d), progress=False)
    assert idx.format == "lines" and idx.n == 30
    (d / "README.md").write_text("# logs\nrotated daily\n")
    with pytest.raises(DataError, match=re.escape(f"README.md: not a .jsonl file like the others in {d}; move it out, "
                                                  f"or index the files you mean (lirs index {d}/*.jsonl {d}/*.jsonl.[0-9]* -o")):
        lirs.build_index(str(d), progress=False)


def test_a_directory_mostly_without_known_extensions_is_read_by_content(tmp_path):
    """TFDS-style shards (mnist-train.tfrecord-00000-of-00002) beside their dataset_info.json and
    features.json were called strays of the .json files, the advice to index `DIR/*.json`: the
    metadata alone. The stray rule holds only where most files have a known extension; here the
    files are read by content, and their disagreeing formats are named."""
    from lirs.inputs import expand_paths
    from lirs.tfrecord import encode

    d = tmp_path / "mnist"
    d.mkdir()
    for k in range(2):
        (d / f"mnist-train.tfrecord-0000{k}-of-00002").write_bytes(encode([b"x" * 30] * 10).tobytes())
    (d / "dataset_info.json").write_text('{"name": "mnist"}\n')
    (d / "features.json").write_text('{"type": "FeaturesDict"}\n')
    assert len(expand_paths(str(d))) == 4
    with pytest.raises(DataError, match=r"share a format; found lines \(2: dataset_info.json, features.json\); "
                                        r"tfrecord \(2: mnist-train.tfrecord-00000-of-00002, "):
        lirs.build_index(str(d), progress=False)
    (d / "features.json").unlink()  # 1 of 3 files named .json: still read by content
    with pytest.raises(DataError, match=r"share a format; found lines \(1: dataset_info.json\); tfrecord \(2: "):
        lirs.build_index(str(d), progress=False)


def test_a_dangling_symlink_or_a_link_loop_in_a_directory_is_named(tmp_path):
    """A shard linked to a store not mounted yet (its target missing) was left out of the index
    without a word, its records missing from every epoch; a symlink loop too. Both are refused,
    naming the link and its target; an emacs lock link (.#name, dangling too) is hidden, skipped."""
    d = tmp_path / "d"
    d.mkdir()
    for i in range(3):
        (d / f"part-{i}.svm").write_bytes(b"%d 1:1\n" % i)
    os.symlink("nowhere/part-9.svm", d / ".#part-0.svm")
    assert len(lirs.build_index(str(d), progress=False)) == 3
    os.symlink("../mnt/disk2/part-3.svm", d / "part-3.svm")
    with pytest.raises(DataError, match=r"d/part-3.svm: a symlink to ../mnt/disk2/part-3.svm, which does not exist; "
                                         "expected a data file there: mount or restore it, or remove the link"):
        lirs.build_index(str(d), progress=False)
    os.remove(d / "part-3.svm")
    os.symlink("part-4.svm", d / "part-4.svm")
    with pytest.raises(DataError, match=r"d/part-4.svm: a symlink to part-4.svm, which leads back to itself"):
        lirs.build_index(str(d), progress=False)


@pytest.mark.parametrize("at", [0, 2, 4])
def test_a_shard_of_comment_lines_only_holds_zero_records_as_an_empty_one(tmp_path, at):
    """A LIBSVM shard holding no record (a comment header, blank lines) refused its whole
    directory ("no records found") where an empty shard is skipped. It is indexed as zero records
    (first, middle or last; its lack of features does not make the dataset zero-based), read as
    none, and re-indexed when it gains some; a dataset of no records at all is still refused."""
    d = tmp_path / "d"
    d.mkdir()
    for i in range(5):
        (d / f"part-{i}.svm").write_bytes(b"".join(b"%d %d:1\n" % (i * 10 + k, k + 1) for k in range(3)))
    (d / f"part-{at}.svm").write_bytes(b"# written by job 42\n\n")
    want = sorted(float(i * 10 + k) for i in range(5) if i != at for k in range(3))
    idx = lirs.build_index(str(d), progress=False)
    assert idx.n == 12 and sorted(idx.labels.tolist()) == want and idx.meta["min_index"] == 1
    assert idx.file_starts[at] == idx.file_starts[at + 1] and idx.payload_bytes == sum(
        os.path.getsize(d / f"part-{i}.svm") for i in range(5) if i != at)
    with lirs.Loader(str(d), 5, seed=0) as ld:
        assert sorted(float(y) for b in ld.epoch(0) for y in b.y) == want
    with open(d / f"part-{at}.svm", "ab") as f:
        f.write(b"99 1:1\n")
    again = lirs.build_index(str(d), progress=False)
    assert again.n == 13 and sorted(again.labels.tolist()) == sorted(want + [99.0])
    for i in range(5):
        (d / f"part-{i}.svm").write_bytes(b"# nothing\n")
    with pytest.raises(DataError, match=r"no records in any of the 5 files \(.*part-0.svm ...: only blank or comment"):
        lirs.build_index(str(d), progress=False)


def test_fixed_record_arguments_are_checked_in_the_api_as_in_the_cli(tmp_path):
    """header_size=-5 wrote a sidecar no epoch could read, np.int64(5) failed in the sidecar's JSON,
    2.5 failed deep in a kernel, True was taken as 1; --record-size on a .npy read its header as
    records; a header longer than the file was called an empty file."""
    p = tmp_path / "r.bin"
    p.write_bytes(bytes(range(20)))
    for kw, said in ((dict(record_size=5, header_size=-5), "header_size must be >= 0"),
                     (dict(record_size=2.5), "record_size must be an int"), (dict(record_size=True), "record_size"),
                     (dict(record_size=0), "record_size must be >= 1"), (dict(record_size=5, header_size=2.5), "header_size")):
        with pytest.raises(UsageError, match=said):
            lirs.build_index(str(p), progress=False, **kw)
    assert len(lirs.build_index(str(p), record_size=np.int64(5), progress=False)) == 4
    with pytest.raises(DataError, match="the 30-byte header is longer than the file .20 bytes."):
        lirs.build_index(str(p), record_size=5, header_size=30, progress=False)
    np.save(tmp_path / "h.npy", np.zeros((6, 2)))
    with pytest.raises(UsageError, match="h.npy is .npy data.*drop --record-size"):
        lirs.build_index(str(tmp_path / "h.npy"), record_size=8, progress=False)
    assert len(lirs.build_index(str(tmp_path / "h.npy"), "fixed", record_size=8, progress=False)) > 6  # asked for


def test_an_empty_list_of_data_files_is_refused_naming_the_parameter(tmp_path):
    """build_index([]) and shuffle([], out) raised a bare StopIteration, build_index([], format=...,
    out=...) "max() arg is an empty sequence", Loader([]) "several data files form one dataset":
    each is now a UsageError naming its parameter, before anything is written."""
    for call, name in ((lambda: lirs.build_index([], progress=False), "paths"),
                       (lambda: lirs.build_index([], "libsvm", out=str(tmp_path / "e.lirs"), progress=False), "paths"),
                       (lambda: lirs.shuffle([], str(tmp_path / "o.svm"), progress=False), "inputs"),
                       (lambda: lirs.Loader([], 4), "source")):
        with pytest.raises(UsageError, match=f"no data files given: {name} is an empty list"):
            call()
    assert os.listdir(tmp_path) == []


def test_build_index_refuses_a_header_size_it_would_ignore_and_a_chunk_that_is_no_size(tmp_path):
    """header_size on a LIBSVM or .npy file was silently ignored where `lirs index --header-size`
    refuses it; chunk_bytes=-5 or 1.5 was taken as a 1-byte chunk, "64K" raised a bare ValueError:
    each is a UsageError naming the argument, before any sidecar is written. "64K" is a size, as
    --chunk takes it."""
    p = tmp_path / "d.svm"
    p.write_bytes(b"1 1:1 5:2\n-1 2:1\n")
    np.save(tmp_path / "a.npy", np.zeros((3, 2), np.float32))
    for path, fmt in ((p, "libsvm"), (tmp_path / "a.npy", "npy")):
        with pytest.raises(UsageError, match=rf"header_size=100\) applies to raw fixed files .*these are {fmt}"):
            lirs.build_index(str(path), header_size=100, progress=False)
    for bad, said in ((-5, "chunk_bytes must be >= 1"), (0, "chunk_bytes must be >= 1"), (1.5, "chunk_bytes must be an int"),
                      ("lots", "cannot read size 'lots'"), (True, "chunk_bytes must be an int")):
        with pytest.raises(UsageError, match=said):
            lirs.build_index(str(p), chunk_bytes=bad, full=True, progress=False)
    assert sorted(os.listdir(tmp_path)) == ["a.npy", "d.svm"]
    assert len(lirs.build_index(str(p), chunk_bytes="64K", progress=False)) == 2
    assert len(lirs.build_index(str(p), chunk_bytes=np.int64(3), full=True, progress=False)) == 2


def test_labels_of_refuses_the_record_ids_spans_refuses(tmp_path):
    """labels_of([-1]) gave the last record's label (numpy indexes from the end), where spans([-1])
    raises IndexError: both refuse an id outside [0, n), with codes or with plain label values."""
    p = tmp_path / "d.svm"
    p.write_bytes(b"0 1:1\n1 2:1\n0 3:1\n")
    np.save(tmp_path / "a.npy", np.zeros((3, 2), np.float32))
    np.save(tmp_path / "a.labels.npy", np.array([0.5, 1.5, 2.5]))
    for idx in (lirs.build_index(str(p), progress=False), lirs.build_index(str(tmp_path / "a.npy"), progress=False)):
        for bad in ([-1], [0, 3], np.array([[1, -2]])):
            for lookup in (idx.spans, idx.labels_of):
                with pytest.raises(IndexError, match=r"record id out of range \[0, 3\)"):
                    lookup(bad)
        assert idx.labels_of(np.array([2, 0])).tolist() == idx.labels[[2, 0]].tolist()
        assert idx.labels_of([]).shape == (0,)


def test_npy_headers_that_are_none_are_said_so(tmp_path):
    """lirs reads .npy headers itself: each way a header can fail is a DataError at byte 0."""
    import struct

    def write(name, body: bytes, version=(1, 0)):
        fmt = "<H" if version == (1, 0) else "<I"
        (tmp_path / name).write_bytes(np.lib.format.magic(*version) + struct.pack(fmt, len(body)) + body)
        return str(tmp_path / name)

    cases = [(write("cut.npy", b"{'descr'"), "the file ends inside the"),
             (write("list.npy", b"['<f4', False, (2,)]\n"), "not a dict of descr, fortran_order and shape"),
             (write("shape.npy", b"{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}\n"), "is not a tuple of ints"),
             (write("descr.npy", b"{'descr': 'nonsense', 'fortran_order': False, 'shape': (2,)}\n"), "is no dtype"),
             (write("huge.npy", b" " * ((1 << 20) + 1), (2, 0)), "at most 1048576 are read")]
    p = tmp_path / "cut.npy"
    p.write_bytes(p.read_bytes()[:-3])  # the header's length promises more than is there
    for path, said in cases:
        with pytest.raises(DataError, match=rf"byte 0: not a valid .npy file .*{said}"):
            lirs.build_index(path, progress=False)


def test_huge_npy_shapes_big_integer_labels_and_a_huge_chunk_are_refused_or_clamped(tmp_path):
    """A record shape whose bytes overflow int64 was indexed (wrapped) and failed at the first batch
    with numpy's "array is too big", or said negative bytes; int64 labels past 2**53 changed value
    (2**63-1 came back as -2**63 through label_dtype=int64); `--chunk 8G` on a 12-byte file asked
    numpy for 32 GiB."""
    import struct

    def npy(name, shape):
        body = repr({"descr": "|i1", "fortran_order": False, "shape": shape}).encode() + b"\n"
        (tmp_path / name).write_bytes(np.lib.format.magic(1, 0) + struct.pack("<H", len(body)) + body + bytes(8))
        return str(tmp_path / name)

    for shape in [(1, 2**61 + 1, 8), (1, 2**64), (3, 2**62, 2)]:
        with pytest.raises(DataError, match=r"records of \d+ bytes .*more than the file's"):
            lirs.build_index(npy(f"s{len(shape)}{shape[1] % 7}.npy", shape), progress=False)
    np.save(tmp_path / "x.npy", np.ones((3, 2), np.float32))
    np.save(tmp_path / "x.labels.npy", np.array([1, 2**53, 2**63 - 1], np.int64))
    with pytest.raises(DataError, match=r"x\.labels\.npy: label 9223372036854775807 of record 2 is past 2\*\*53"):
        lirs.build_index(str(tmp_path / "x.npy"), progress=False)
    np.save(tmp_path / "x.labels.npy", np.array([1, 2**53, -(2**53)], np.int64))  # exact in float64
    assert lirs.build_index(str(tmp_path / "x.npy"), progress=False).labels.tolist() == [1, 2**53, -(2**53)]
    if np.dtype(np.longdouble).itemsize > 8 and np.finfo(np.longdouble).max > np.finfo(np.float64).max:
        # long-double labels that float64 does not hold were served rounded (1e400 as inf) with a numpy warning
        np.save(tmp_path / "x.labels.npy", np.array([1, np.longdouble("1e400"), 2], np.longdouble))
        with pytest.raises(DataError, match=r"x\.labels\.npy: label 1e\+400 of record 1 \(float\d+\) is outside "
                                            r"float64's range .*serve it as inf"):
            lirs.build_index(str(tmp_path / "x.npy"), progress=False)
        np.save(tmp_path / "x.labels.npy", np.array([1, 2, np.longdouble("-1e-400")], np.longdouble))
        with pytest.raises(DataError, match=r"label -1e-400 of record 2 .*outside float64's range .*serve it as -0\.0"):
            lirs.build_index(str(tmp_path / "x.npy"), progress=False)
        # within the range: rounded to the nearest float64, as features are to float32
        np.save(tmp_path / "x.labels.npy", np.array([1, np.nan, 1], np.longdouble) / 10)
        got = lirs.build_index(str(tmp_path / "x.npy"), progress=False).labels
        assert got[0] == got[2] == 0.1 and np.isnan(got[1])
    small = tmp_path / "t.svm"
    small.write_bytes(b"1 1:1\n0 2:1\n")
    assert lirs.build_index(str(small), chunk_bytes=8 << 30, progress=False).n == 2


@pytest.mark.parametrize("fmt,line", [("libsvm", b"# " + b"x" * 200_000 + b"\n"), ("lines", b"y" * 200_000 + b"\n")])
def test_a_line_of_many_chunks_is_joined_once(tmp_path, monkeypatch, fmt, line):
    """A line longer than a chunk (a long comment, a big JSON record) was joined anew with every
    chunk: bytes copied grew with the square of its length (a 2 GiB line took minutes). Its pieces
    are now joined once, when its newline comes; the records around it are found as before."""
    import lirs.scanner as S

    copied = []

    class CountingNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def concatenate(parts, *a, **k):
            out = np.concatenate(parts, *a, **k)
            copied.append(out.nbytes)
            return out

    monkeypatch.setattr(S, "np", CountingNumpy())
    p = tmp_path / ("d.svm" if fmt == "libsvm" else "d.jsonl")
    head = b"1 1:1\n" if fmt == "libsvm" else b"{}\n"
    p.write_bytes(head + line + head + line[:-1])  # the last line without its newline
    idx = lirs.build_index(str(p), format=fmt, progress=False, chunk_bytes=4096)
    want = [0, len(head)] if fmt == "lines" else [0]
    want += [len(head) + len(line)] + ([2 * len(head) + len(line)] if fmt == "lines" else [])
    assert idx.offsets.tolist() == want
    assert sum(copied) < 3 * len(line), sum(copied)


@pytest.mark.parametrize("fmt,line", [("libsvm", b"# " + b"x" * 300_000 + b"\n"), ("lines", b"y" * 300_000 + b"\n")])
def test_a_long_line_asks_for_scan_arrays_by_its_records_not_its_bytes(tmp_path, monkeypatch, fmt, line):
    """A line longer than a chunk, joined whole, was scanned into arrays of one int64 start, one
    float64 label and one flag byte for every byte of it (17 B a byte: a 512 MiB line asked for
    8.5 GiB and died with numpy's "Unable to allocate" under ulimit -v). The arrays are sized by
    the records a region can hold (its line ends), never past a chunk's; `lines` asks for starts
    alone (it has no labels)."""
    import lirs.scanner as S

    asked = []

    class CountingNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(shape, dtype=float, *a, **k):
            asked.append((int(np.prod(shape)), np.dtype(dtype)))
            return np.empty(shape, dtype, *a, **k)

    monkeypatch.setattr(S, "np", CountingNumpy())
    p = tmp_path / ("d.svm" if fmt == "libsvm" else "d.jsonl")
    head = b"1 1:1\n" if fmt == "libsvm" else b"{}\n"
    p.write_bytes(head + line + head + line + head)
    idx = lirs.build_index(str(p), format=fmt, progress=False, chunk_bytes=4096, full=True)
    want = [0, len(head) + len(line), 2 * (len(head) + len(line))]
    if fmt == "lines":
        want = sorted(want + [len(head), 2 * len(head) + len(line)])
    assert idx.offsets.tolist() == want
    assert asked and max(n for n, _ in asked) <= 4096 + 2, asked
    if fmt == "lines":
        assert {dt for _, dt in asked} == {np.dtype(np.int64)}, asked


def test_a_line_too_long_for_memory_is_one_error_naming_the_file(tmp_path, monkeypatch):
    """Out of memory joining a long line (a line of GiBs under ulimit -v): a DataError naming the
    file, the line's byte and what to do, not numpy's MemoryError traceback."""
    import lirs.scanner as S

    class NoMemory:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def concatenate(parts, *a, **k):
            raise MemoryError("Unable to allocate 4.00 GiB for an array")

    monkeypatch.setattr(S, "np", NoMemory())
    p = tmp_path / "d.jsonl"
    p.write_bytes(b"{}\n" + b"y" * 20_000 + b"\n{}\n")
    with pytest.raises(DataError, match=r"d\.jsonl: byte 3: the line there is too long to hold in memory .*ulimit -v"):
        lirs.build_index(str(p), format="lines", progress=False, chunk_bytes=4096, full=True)


@pytest.mark.parametrize("distinct", [5, 300, 70_000])
def test_labels_are_coded_a_chunk_at_a_time_as_they_are_whole(monkeypatch, tmp_path, distinct):
    """The labels of .npy files are coded a chunk at a time over the files (codes in 1 or 2 bytes
    a label; past 65535 distinct values, kept whole): the same values and codes as coding their
    concatenation at once, -0.0 and 0.0 and NaNs of either sign told apart by their bits."""
    import lirs.labelcodes as LC

    monkeypatch.setattr(LC, "_STEP", 1000)  # chunks that cross the files' bounds
    rng = np.random.default_rng(distinct)
    pool = np.concatenate([[-0.0, 0.0, np.nan, -np.nan], rng.normal(size=distinct - 4)])
    parts = []
    for k, n in enumerate((2500, 1, 4200 if distinct < 65536 else 300_000)):
        np.save(tmp_path / f"{k}.npy", pool[rng.integers(0, len(pool), n)])
        parts.append(np.load(tmp_path / f"{k}.npy", mmap_mode="r"))
    whole = np.concatenate(parts)
    values, codes = LC.encode_label_parts(parts)
    assert (codes is None) == (distinct > 65535)
    if codes is None:
        assert values.view(np.uint64).tolist() == whole.view(np.uint64).tolist()
        return
    assert codes.dtype == (np.uint8 if len(values) <= 256 else np.uint16)
    assert values[codes].view(np.uint64).tolist() == whole.view(np.uint64).tolist()
    bits = np.unique(whole.view(np.uint64))
    assert values.view(np.uint64).tolist() == bits[np.lexsort((bits, bits.view(np.float64)))].tolist()


def test_info_says_huge_labels_briefly(tmp_path, capsys):
    """A label of 1e300 was printed as its 301-digit integer (str(int(v))), in `lirs info` and
    as a JSON key; integers that float64 holds whole are still said as integers."""
    import json

    from lirs.cli import main

    p = tmp_path / "big.svm"
    p.write_bytes(b"1e300 1:2\n0 2:3\n-2.5 1:1\n7 1:1\n123456789012345 1:1\n1e16 1:1\n-1e300 1:1\n")
    lirs.build_index(str(p), progress=False)
    assert main(["info", str(p), "--json"]) == 0
    labels = json.loads(capsys.readouterr().out)["labels"]
    assert sorted(labels) == sorted(["-1e+300", "-2.5", "0", "7", "123456789012345", "1e+16", "1e+300"])
    assert main(["info", str(p)]) == 0
    out = capsys.readouterr().out
    assert "1e+300: 1" in out and "-2.5: 1" in out and "7: 1" in out and "0000000000" not in out, out


def test_info_of_data_without_features_says_so(tmp_path, capsys):
    import json

    from lirs.cli import main

    p = tmp_path / "labels.svm"
    p.write_bytes(b"1\n-1\n1 # no feature at all\n")
    lirs.build_index(str(p), progress=False)
    assert main(["info", str(p)]) == 0
    out = capsys.readouterr().out
    assert "feature indices   none (no record has a feature)" in out and ".. -1" not in out
    # --json said {"min_index": 0, "max_index": -1}: the index's sentinels, read as indices
    assert main(["info", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["features"] == {"min_index": None, "max_index": None}
    p.write_bytes(b"1 3:1\n-1\n1 0:2 7:1\n")
    lirs.build_index(str(p), progress=False)
    assert main(["info", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["features"] == {"min_index": 0, "max_index": 7}
    from lirs.commands.info import print_summary, summarize

    idx = lirs.open_index(str(p))
    for k in ("min_index", "max_index"):  # an index that does not record them: said, not a TypeError
        idx.meta.pop(k)
    print_summary(summarize(idx))
    assert "feature indices   not recorded" in capsys.readouterr().out


def test_a_file_name_not_in_utf8_prints_as_its_bytes(tmp_path):
    """A name of bytes that are not UTF-8 (``os.fsencode``) under a strict UTF-8 stdout (any UTF-8
    locale but C.UTF-8): every command ran to its end (stdout's strict encoding raised after the
    sidecar was written) and an error names the file with its own byte, not ``\\udcff``."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    d = os.fsencode(tmp_path)
    good, bad = os.path.join(d, b"good\xff.svm"), os.path.join(d, b"bad\xfe.svm")
    with open(good, "wb") as f:
        f.write(b"".join(b"%d %d:1\n" % (i % 2, i + 1) for i in range(20)))
    with open(bad, "wb") as f:
        f.write(b"1 1:1\n-1 x:1\n")
    for cmd in (b"index", b"info", b"order", b"epoch"):
        r = subprocess.run([sys.executable, b"-m", b"lirs", cmd, good], capture_output=True, env=env)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, (cmd, r.stderr[-300:])
    assert good in subprocess.run([sys.executable, b"-m", b"lirs", b"info", good], capture_output=True, env=env).stdout
    r = subprocess.run([sys.executable, b"-m", b"lirs", b"index", bad], capture_output=True, env=env)
    assert r.returncode == 1 and bad + b": line 2, byte 9" in r.stderr


def test_an_index_rebuilt_while_it_is_opened_is_never_called_corrupt(tmp_path, monkeypatch):
    """Another process rebuilding the index (data rewritten, same size) between the open's read of
    the header and of the arrays: the arrays were read through a second open(), the new file's,
    and checked against the old header (IndexFormatError "corrupt"; `--check` then found nothing).
    One descriptor reads both: the old index, found stale."""
    import lirs.sidecar as S

    def content(tag):
        return "".join(f"{tag} 1:{i} 2:{tag + 1}\n" for i in range(3000))

    p = tmp_path / "d.svm"
    p.write_text(content(0))
    lirs.build_index(str(p), progress=False)
    size = os.path.getsize(str(p) + ".lirs")
    real = S._header_of

    def header_then_rebuild(fd, sidecar):
        got = real(fd, sidecar)
        for tag in range(1, 10):  # a rebuilt sidecar of the old one's size
            p.write_text(content(tag))
            subprocess.run([sys.executable, "-c", f"import lirs; lirs.build_index({str(p)!r}, progress=False)"],
                           check=True, capture_output=True)
            if os.path.getsize(sidecar) == size:
                break
        monkeypatch.setattr(S, "_header_of", real)
        return got

    monkeypatch.setattr(S, "_header_of", header_then_rebuild)
    with pytest.raises(lirs.StaleIndexError):
        lirs.open_index(str(p))
    assert os.path.getsize(str(p) + ".lirs") == size and lirs.open_index(str(p)).n == 3000


def test_paths_as_bytes_are_paths(tmp_path):
    """`os.fsencode` paths (what `os.listdir(bytes)` gives): build_index took b"d.svm" for a list
    of ints, open_index failed in a string method, a Loader looked for the file "b'...'"."""
    p = os.path.join(os.fsencode(tmp_path), b"d\xff.svm")
    with open(p, "wb") as f:
        f.write(b"1 1:1\n0 2:1\n1 3:1\n")
    assert lirs.build_index(p, progress=False).n == 3
    assert lirs.build_index([p], out=p + b".lirs", progress=False).n == 3
    assert lirs.open_index(p).n == 3
    for source in (p, [p], p + b".lirs"):
        with lirs.Loader(source, 2) as L:
            assert sorted(np.concatenate([b.ids for b in L.epoch(0)])) == [0, 1, 2]


def test_closed_standard_streams_neither_stop_work_nor_crash_help(tmp_path):
    """stderr closed when Python started (a daemon, `2>&-`): sys.stderr is None and every progress
    bar raised at its first write, so a Loader's first-use index failed and `lirs index` exited 1
    without a word. An ASCII locale's stdout (surrogateescape) failed on the ² of `quality --help`."""
    for name in ("a.svm", "b.svm"):
        (tmp_path / name).write_text("1 1:1\n-1 2:2\n1 3:0.5\n")
    code = (f"import lirs\nwith lirs.Loader({str(tmp_path / 'a.svm')!r}, 2) as L:\n"
            "    print(sum(len(b.ids) for b in L.epoch(0)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=False, stdout=subprocess.PIPE, text=True,
                       preexec_fn=lambda: os.close(2), timeout=300)
    assert r.stdout.strip() == "3"
    r = subprocess.run([sys.executable, "-m", "lirs", "index", str(tmp_path / "b.svm")], stdout=subprocess.DEVNULL,
                       preexec_fn=lambda: os.close(2), timeout=300)
    assert r.returncode == 0 and (tmp_path / "b.svm.lirs").exists()
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    r = subprocess.run([sys.executable, "-m", "lirs", "quality", "--help"], capture_output=True, env=env, timeout=300)
    assert r.returncode == 0 and b"Corgi" in r.stdout, r.stderr[-300:]


def test_a_reader_gone_before_the_scan_does_not_stop_lirs_index(tmp_path):
    """`lirs index D | reader` whose reader has gone: the "format:" line met EPIPE before the scan,
    and the command exited 0 with no index written."""
    (tmp_path / "a.svm").write_text("1 1:1\n-1 2:2\n")
    r, w = os.pipe()
    os.close(r)
    try:
        rc = subprocess.run([sys.executable, "-m", "lirs", "index", str(tmp_path / "a.svm")], stdout=w,
                            stderr=subprocess.PIPE, timeout=300).returncode
    finally:
        os.close(w)
    assert rc == 0 and lirs.open_index(str(tmp_path / "a.svm")).n == 2


def test_a_directorys_files_are_in_code_point_name_order(tmp_path):
    """docs/formats.md: a directory's files are read in name order by code point (``part-10``
    before ``part-9``, ``B`` before ``a``), and global record IDs follow that order."""
    d = tmp_path / "shards"
    d.mkdir()
    for name in ("part-9.jsonl", "part-10.jsonl", "a.jsonl", "B.jsonl"):
        (d / name).write_text(f"{name}\n")
    idx = lirs.build_index(str(d), progress=False)
    assert [os.path.basename(p) for p in idx.paths] == ["B.jsonl", "a.jsonl", "part-10.jsonl", "part-9.jsonl"]
    assert idx.file_of(np.arange(4)).tolist() == [0, 1, 2, 3]
    batch = next(iter(lirs.Loader(str(d), batch_size=4, granularity="instance", seed=1).epoch(0)))
    assert sorted(zip(batch.ids.tolist(), batch.X)) == [
        (0, b"B.jsonl"), (1, b"a.jsonl"), (2, b"part-10.jsonl"), (3, b"part-9.jsonl")]


def test_a_full_disk_under_the_labels_scratch_file_names_it(tmp_path, monkeypatch, capsys):
    """`lirs index` of a LIBSVM file on a full disk printed a bare "No space left on device": the
    write that failed was the labels' anonymous temporary file, which has no name. The error names
    it and its directory (where -o moves it); nothing is left behind."""
    import tempfile

    from lirs.cli import main as cli_main

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full to stand for a full disk")
    (tmp_path / "a.svm").write_bytes(b"".join(b"%d 1:%d\n" % (i % 2, i) for i in range(30000)))
    # every write to the labels' scratch file fails as a full disk's does (ENOSPC)
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **k: open("/dev/full", "r+b", buffering=0))  # noqa: SIM115
    assert cli_main(["index", str(tmp_path / "a.svm"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path} (the index's temporary labels file there): No space left on device" in err
    assert "use -o to write elsewhere" in err
    assert os.listdir(tmp_path) == ["a.svm"]


def _linked_tree(tmp_path):
    """real/sub, data/a.svm (100 records) and link -> real/sub, in ``tmp_path`` (made the cwd)."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.svm").write_bytes(b"".join(b"%d 1:%d\n" % (i % 2, i + 1) for i in range(100)))
    os.symlink(os.path.join("real", "sub"), tmp_path / "link")


def _serves_all(sidecar):
    """The index at ``sidecar`` checks whole and a Loader over it serves its 100 records once each."""
    from lirs.cli import main as cli_main

    assert cli_main(["index", "--check", sidecar, "--quiet"]) == 0
    ids = [i for b in lirs.Loader(sidecar, batch_size=16, granularity="instance", seed=0).epoch(0) for i in b.ids]
    assert sorted(ids) == list(range(100))


def test_a_sidecar_opened_through_a_symlinked_directory_finds_its_data(tmp_path, monkeypatch):
    """A sidecar keeps its data's path relative to its own directory, computed and resolved as text:
    but the kernel resolves ``L/..`` through a symlink ``L`` to the link target's parent. A sidecar
    written in real/sub, opened as link/a.lirs (link -> real/sub), looked for its data beside link
    ("... indexes .../data/a.svm, which does not exist"). It opens, and serves every record."""
    from lirs.cli import main as cli_main

    _linked_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["index", "data/a.svm", "-o", "real/sub/a.lirs", "--quiet"]) == 0
    assert cli_main(["info", "link/a.lirs"]) == 0
    assert lirs.open_index("link/a.lirs").paths == (str(tmp_path / "data" / "a.svm"),)
    _serves_all("link/a.lirs")


def test_a_sidecar_named_through_a_symlink_s_parent_is_written_where_it_opens(tmp_path, monkeypatch, capsys):
    """``lirs index data/a.svm -o link/../b.lirs`` (the kernel writes real/b.lirs) kept the data's
    path from the text's directory (``link/..`` folded to the link's own parent): its own open then
    refused the sidecar it had just written, and left it. It writes one that opens."""
    from lirs.cli import main as cli_main

    _linked_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["index", "data/a.svm", "-o", "link/../b.lirs", "--quiet"]) == 0, capsys.readouterr().err
    assert cli_main(["info", "real/b.lirs"]) == 0
    assert lirs.open_index("link/../b.lirs").paths == (str(tmp_path / "data" / "a.svm"),)
    _serves_all("real/b.lirs")


def test_a_symlinked_data_file_is_kept_by_its_link_name_across_a_symlinked_directory(tmp_path, monkeypatch):
    """Where the data file is itself a symlink, its sidecar names the link (not its target) when the
    relative path is taken between the real directories, so a link moved to other data is followed."""
    from lirs.sidecar import read_header

    _linked_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    os.symlink(os.path.join("..", "data", "a.svm"), tmp_path / "real" / "l.svm")
    idx = lirs.build_index("link/../l.svm", out="link/a.lirs", progress=False)
    assert idx.paths == (str(tmp_path / "real" / "l.svm"),)
    assert read_header("real/sub/a.lirs")[0]["files"][0]["relpath"] == os.path.join("..", "l.svm")
    assert lirs.open_index("link/a.lirs").paths == (str(tmp_path / "real" / "l.svm"),)
    _serves_all("link/a.lirs")


def test_a_sidecar_written_through_a_symlinked_directory_by_an_older_lirs_still_opens(tmp_path, monkeypatch):
    """An older lirs kept, for a sidecar written as link/a.lirs, the path from the link's own parent
    (by text): where the kernel's reading of it names nothing and the text's names the data, the
    text's is taken, as it was."""
    import lirs.index
    from lirs.sidecar import read_header

    _linked_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as m:
        m.setattr(lirs.index, "relpath", os.path.relpath)  # the text's relative path, as before
        lirs.build_index("data/a.svm", out="link/a.lirs", progress=False)
    assert read_header("link/a.lirs")[0]["files"][0]["relpath"] == os.path.join("..", "data", "a.svm")
    assert lirs.open_index("link/a.lirs").paths == (str(tmp_path / "data" / "a.svm"),)
    _serves_all("link/a.lirs")


def _versioned_tree(tmp_path):
    """ds_v1/train.svm (labels +1), ds_v2/train.svm (labels -1), proj/idx and proj/data -> ds_v1
    (absolute), with proj/idx/train.lirs built for proj/data/train.svm."""
    for v, label in (("ds_v1", 1), ("ds_v2", -1)):
        (tmp_path / v).mkdir()
        (tmp_path / v / "train.svm").write_bytes(b"".join(b"%d 1:%d\n" % (label, i + 1) for i in range(100)))
    (tmp_path / "proj" / "idx").mkdir(parents=True)
    os.symlink(tmp_path / "ds_v1", tmp_path / "proj" / "data")
    return lirs.build_index(str(tmp_path / "proj" / "data" / "train.svm"),
                            out=str(tmp_path / "proj" / "idx" / "train.lirs"), progress=False)


def test_a_sidecar_keeps_the_symlinked_data_directory_it_was_built_through(tmp_path):
    """proj/data -> ds_v1, indexed with -o proj/idx/train.lirs: the sidecar kept ../../ds_v1/train.svm
    (the link's name lost), so with proj/data switched to ds_v2 the Loader went on serving v1's
    records, unsaid. It keeps ../data/train.svm: the switched link's data is read (here refused as
    stale, its size having changed)."""
    from lirs.sidecar import read_header

    _versioned_tree(tmp_path)
    side = str(tmp_path / "proj" / "idx" / "train.lirs")
    assert read_header(side)[0]["files"][0]["relpath"] == os.path.join("..", "data", "train.svm")
    os.unlink(tmp_path / "proj" / "data")
    os.symlink(tmp_path / "ds_v2", tmp_path / "proj" / "data")
    with pytest.raises(StaleIndexError, match="stale for"):
        lirs.open_index(side)


def test_a_project_moved_whole_with_its_symlinked_data_directory_still_opens(tmp_path):
    """The same project moved (mv proj disk2/proj; its absolute link still valid) was refused: "indexes
    .../disk2/ds_v1/train.svm, which does not exist". It opens, through the moved link."""
    _versioned_tree(tmp_path)
    (tmp_path / "disk2").mkdir()
    os.rename(tmp_path / "proj", tmp_path / "disk2" / "proj")
    idx = lirs.open_index(str(tmp_path / "disk2" / "proj" / "idx" / "train.lirs"))
    assert idx.paths == (str(tmp_path / "disk2" / "proj" / "data" / "train.svm"),)
    _serves_all(str(tmp_path / "disk2" / "proj" / "idx" / "train.lirs"))


@pytest.mark.parametrize("out", ["proj/idx/train.lirs", "linked_idx/train.lirs"])
def test_a_symlinked_data_directory_indexed_into_another_directory_covers_its_files(tmp_path, monkeypatch, capsys, out):
    """``lirs index proj/data -o proj/idx/train.lirs`` with proj/data -> store (or with the sidecar's
    own directory a symlink) wrote, then exited 1, and every open refused the index: "proj/data holds
    files its index ... does not cover: part-0.svm, part-1.svm" (the files kept through the link's
    target, the directory through the link), its advice repeating the failure. It opens."""
    from lirs.cli import main as cli_main

    (tmp_path / "store").mkdir()
    for k in range(2):
        (tmp_path / "store" / f"part-{k}.svm").write_bytes(b"".join(b"1 1:%d\n" % (i + 1) for i in range(50)))
    (tmp_path / "proj" / "idx").mkdir(parents=True)
    (tmp_path / "elsewhere" / "deep").mkdir(parents=True)
    os.symlink(tmp_path / "store", tmp_path / "proj" / "data")
    os.symlink(tmp_path / "elsewhere" / "deep", tmp_path / "linked_idx")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["index", "proj/data", "-o", out, "--quiet"]) == 0, capsys.readouterr().err
    assert cli_main(["info", out]) == 0, capsys.readouterr().err
    assert lirs.open_index(out).n == 100


@pytest.mark.parametrize("whole", [True, False])
def test_an_indexed_shard_whose_link_target_is_unmounted_is_named_as_a_dangling_link(tmp_path, whole):
    """Shards that are symlinks into a store, the store not mounted at open: the error said the shard
    "was removed from shards after it was indexed; re-run `lirs index shards`" (one file: "which does
    not exist; move it back"). It names the link and its target, as `lirs index` does."""
    (tmp_path / "store").mkdir()
    (tmp_path / "shards").mkdir()
    for k in range(2):
        (tmp_path / "store" / f"part-{k}.svm").write_bytes(b"".join(b"1 1:%d\n" % (i + 1) for i in range(50)))
        os.symlink(tmp_path / "store" / f"part-{k}.svm", tmp_path / "shards" / f"part-{k}.svm")
    target = str(tmp_path / "shards") if whole else str(tmp_path / "shards" / "part-0.svm")
    lirs.build_index(target, progress=False)
    os.rename(tmp_path / "store", tmp_path / "store_unmounted")
    link = tmp_path / "shards" / "part-0.svm"
    with pytest.raises(DataError, match=rf"{re.escape(str(link))}: a symlink to {re.escape(str(tmp_path / 'store' / 'part-0.svm'))}, "
                       r"which does not exist; .*mount or restore it"):
        lirs.open_index(target)
