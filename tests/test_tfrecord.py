"""TFRecord: CRC-32C, the validating index scan, payloads through the Loader, `lirs shuffle`.

The reference writer and reader here follow the TFRecord spec with a bitwise CRC-32C in plain
Python, independent of lirs's kernels, so a shared mistake cannot hide.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import struct
from collections import Counter

import numpy as np
import pytest

import lirs
from lirs.build import build_index
from lirs.cli import main
from lirs.errors import DataError, UsageError
from lirs.external import api as E
from lirs.external import disk as D
from lirs.index import open_index
from lirs.kernels import tfrecord as K
from lirs.tfrecord import crc32c, encode, masked_crc32c, payloads


# --------------------------------------------------------------------------- the spec, in Python


def spec_crc32c(data: bytes) -> int:
    """CRC-32C bit by bit: reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF."""
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def spec_mask(c: int) -> int:
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def spec_bytes(records) -> bytes:
    out = bytearray()
    for r in records:
        head = struct.pack("<Q", len(r))
        out += head + struct.pack("<I", spec_mask(spec_crc32c(head))) + r
        out += struct.pack("<I", spec_mask(spec_crc32c(r)))
    return bytes(out)


def spec_read(data: bytes) -> list[bytes]:
    """Every payload of a TFRecord file, both CRCs checked (AssertionError otherwise)."""
    out, p = [], 0
    while p < len(data):
        (n,) = struct.unpack_from("<Q", data, p)
        assert struct.unpack_from("<I", data, p + 8)[0] == spec_mask(spec_crc32c(data[p:p + 8])), p
        body = data[p + 12:p + 12 + n]
        assert len(body) == n and p + 16 + n <= len(data), p
        assert struct.unpack_from("<I", data, p + 12 + n)[0] == spec_mask(spec_crc32c(body)), p
        out.append(body)
        p += 16 + n
    return out


def make_records(n: int, seed: int, big: int = 0) -> list[bytes]:
    """``n`` payloads of 0 .. ~3 KB (one of ``big`` bytes when given), each unique."""
    rng = np.random.default_rng(seed)
    recs = [rng.bytes(int(rng.integers(0, 3000))) + struct.pack("<I", i) for i in range(n)]
    if n:
        recs[0] = b""
    if big and n > 2:
        recs[n // 2] = rng.bytes(big)
    return recs


def write(path, records) -> bytes:
    data = spec_bytes(records)
    with open(path, "wb") as f:
        f.write(data)
    return data


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- CRC-32C


def test_crc32c_known_values_and_spec():
    assert spec_crc32c(b"123456789") == 0xE3069283          # the CRC-32C check value
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA                  # RFC 3720 B.4 test vectors
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    rng = np.random.default_rng(0)
    buf = rng.integers(0, 256, 300, dtype=np.uint8)
    for hw in sorted({False, K.HW}):
        for lo, hi in [(0, 0), (0, 1), (3, 11), (1, 300), (5, 77), (8, 16), (7, 299)]:
            want = spec_crc32c(buf[lo:hi].tobytes())
            assert int(K.crc32c_update(K.TABLE, hw, buf, lo, hi, 0)) == want, (hw, lo, hi)
            # continuing a CRC over a split gives the CRC of the whole
            mid = (lo + hi) // 2
            c = K.crc32c_update(K.TABLE, hw, buf, lo, mid, 0)
            assert int(K.crc32c_update(K.TABLE, hw, buf, mid, hi, c)) == want
            assert int(K.masked_crc(K.TABLE, hw, buf, lo, hi)) == spec_mask(want)
    assert masked_crc32c(b"abc") == spec_mask(spec_crc32c(b"abc"))


def test_crc32c_three_lanes_join_to_the_one_lane_crc():
    """Long inputs are summed in three interleaved lanes of K.STRIPE bytes joined by the zero-feed
    tables: every length and offset around the lane boundaries gives the table-driven answer."""
    rng = np.random.default_rng(3)
    s = K.STRIPE
    buf = rng.integers(0, 256, 7 * s + 64, dtype=np.uint8)
    cuts = [(0, 3 * s), (0, 3 * s - 1), (0, 3 * s + 1), (1, 3 * s + 1), (7, 6 * s + 9), (0, buf.size),
            (3, buf.size - 5), (s, 4 * s)]
    for lo, hi in cuts:
        want = int(K.crc32c_update(K.TABLE, False, buf, lo, hi, 0))
        assert int(K.crc32c_update(K.TABLE, K.HW, buf, lo, hi, 0)) == want, (lo, hi)
        mid = (lo + hi) // 2  # continued over a split, lanes on both sides
        part = K.crc32c_update(K.TABLE, K.HW, buf, lo, mid, 0)
        assert int(K.crc32c_update(K.TABLE, K.HW, buf, mid, hi, part)) == want, (lo, mid, hi)
    assert crc32c(bytes(3 * s)) == spec_crc32c(bytes(3 * s))


def test_crc32c_agrees_with_google_crc32c_when_installed():
    g = pytest.importorskip("google_crc32c")
    data = np.random.default_rng(1).bytes(100_003)
    assert crc32c(data) == g.value(data)


def test_encode_is_the_spec_writer():
    recs = make_records(50, seed=2, big=70_000)
    assert encode(recs).tobytes() == spec_bytes(recs)
    assert spec_read(spec_bytes(recs)) == recs


# --------------------------------------------------------------------------- index + Loader


@pytest.mark.parametrize("chunk", [1, 13, 4096, 16 << 20])
def test_index_offsets_any_chunk_size(tmp_path, chunk):
    # one-byte chunks: every record is assembled from pieces (a small file keeps it quick)
    recs = [r[:40] for r in make_records(12, seed=3)] if chunk == 1 else make_records(120, seed=3, big=9000)
    write(tmp_path / "d.tfrecord", recs)
    idx = build_index(tmp_path / "d.tfrecord", progress=False, chunk_bytes=chunk)
    sizes = np.array([len(r) + 16 for r in recs])
    assert idx.format == "tfrecord" and idx.n == len(recs) and idx.labels is None
    np.testing.assert_array_equal(idx.offsets, np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    s, e = idx.bounds()
    np.testing.assert_array_equal(e - s, sizes)


@pytest.mark.parametrize("granularity", ["instance", "page", "group", "window"])
def test_loader_delivers_every_payload_once(tmp_path, granularity, engine_name):
    recs = make_records(700, seed=4, big=70_000)
    write(tmp_path / "d.tfr", recs)
    build_index(tmp_path / "d.tfr", progress=False, chunk_bytes=5000)
    with lirs.Loader(tmp_path / "d.tfr", 37, granularity=granularity, group_bytes=16384, window=4, seed=1,
                     engine=engine_name, verify=True) as loader:
        for epoch in (0, 1):
            got = {}
            for b in loader.epoch(epoch):
                assert b.y is None and isinstance(b.X, list) and len(b.X) == len(b.ids)
                for i, x in zip(b.ids.tolist(), b.X):
                    assert i not in got
                    got[i] = x
            assert got == dict(enumerate(recs))


def test_shards_form_one_dataset(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    parts = [make_records(k, seed=10 + k) for k in (5, 40, 17)]
    for j, recs in enumerate(parts):
        write(d / f"part-{j}.tfrecord", recs)
    rc, out, err = cli("index", "--quiet", str(d), "-o", str(tmp_path / "all.lirs"))
    assert rc == 0, err
    assert "format: tfrecord (from the .tfrecord extension (first of 3 files; all agree))" in out
    idx = open_index(tmp_path / "all.lirs")
    assert idx.nfiles == 3 and idx.n == 62
    flat = [r for recs in parts for r in recs]
    with lirs.Loader(tmp_path / "all.lirs", 8, granularity="window", group_bytes=4096, window=2) as loader:
        got = {i: x for b in loader.epoch(0) for i, x in zip(b.ids.tolist(), b.X)}
    assert got == dict(enumerate(flat))


def test_detected_from_content_and_forced(tmp_path):
    write(tmp_path / "d.bin", make_records(9, seed=5))
    rc, out, err = cli("index", "--quiet", str(tmp_path / "d.bin"))
    assert rc == 0, err
    assert out.startswith("format: tfrecord (the first 12 bytes are a TFRecord header")
    write(tmp_path / "e.dat", [b"x" * 3])
    assert build_index(tmp_path / "e.dat", format="tfrecord", out=str(tmp_path / "e.lirs")).n == 1
    # named as lines, whose records are not checked: it was indexed as "lines" of the framing
    write(tmp_path / "f.jsonl", make_records(9, seed=5))
    rc, out, err = cli("index", "--quiet", str(tmp_path / "f.jsonl"))
    assert rc == 1 and "f.jsonl: named .jsonl, but its first 12 bytes are a TFRecord header" in err, err
    assert build_index(tmp_path / "f.jsonl", format="tfrecord", out=str(tmp_path / "f.lirs")).n == 9
    assert not os.path.exists(tmp_path / "f.jsonl.lirs")


# --------------------------------------------------------------------------- bad input


def _bad(tmp_path, how):
    """A file of 6 records broken ``how``; returns (path, record, byte offset) of the error."""
    recs = make_records(6, seed=6)
    data = bytearray(spec_bytes(recs))
    starts = np.concatenate([[0], np.cumsum([len(r) + 16 for r in recs])]).tolist()
    if how == "length crc":
        data[starts[2] + 9] ^= 0x40
        rec, off = 2, starts[2]
    elif how == "length":
        data[starts[3] + 1] ^= 0x01
        rec, off = 3, starts[3]
    elif how == "payload crc":
        data[starts[4] + 12 + len(recs[4]) // 2] ^= 0x01
        rec, off = 4, starts[4]
    elif how == "truncated":
        del data[-7:]
        rec, off = 5, starts[5]
    elif how == "truncated header":
        data += spec_bytes([b"abc"])[:7]
        rec, off = 6, starts[6]
    else:  # trailing garbage
        data += b"not a record at all, just text\n"
        rec, off = 6, starts[6]
    p = tmp_path / "bad.tfrecord"
    p.write_bytes(bytes(data))
    return p, rec, off


_EXPECT = {"length crc": "length CRC mismatch", "length": "length CRC mismatch",
           "payload crc": "payload CRC mismatch", "truncated": "truncated record",
           "truncated header": "truncated record header", "garbage": "length CRC mismatch"}


@pytest.mark.parametrize("how", list(_EXPECT))
@pytest.mark.parametrize("chunk", [16, 1 << 20])
def test_bad_file_names_file_record_and_byte(tmp_path, how, chunk):
    p, rec, off = _bad(tmp_path, how)
    with pytest.raises(DataError) as e:
        build_index(p, progress=False, chunk_bytes=chunk)
    msg = str(e.value)
    assert msg.startswith(f"{p}: record {rec} at byte {off}: {_EXPECT[how]}"), msg
    assert "expected" in msg
    rc, out, err = cli("index", "--quiet", "--chunk", str(chunk), str(p))
    assert rc == 1 and err.count("\n") == 1 and f"record {rec} at byte {off}" in err, err


def _header(length: int) -> bytes:
    """A record header whose length CRC checks: ``length`` as 8 little-endian bytes and its CRC."""
    ln = struct.pack("<Q", length)
    return ln + struct.pack("<I", spec_mask(spec_crc32c(ln)))


@pytest.mark.parametrize("length", [1 << 40, 1 << 63, (1 << 64) - 1])
def test_a_length_past_the_end_is_named_as_stored_and_at_once(tmp_path, monkeypatch, length):
    """A good record, then a header whose CRC checks but whose length runs past the file's end:
    the message names the length as stored (lengths of 2**62 or more read 2**62), and the scan
    stops at the header instead of gathering the rest of the file (3 MiB here, 64 KiB chunks)."""
    import lirs.tfrecord as T

    p = tmp_path / "huge.tfrecord"
    p.write_bytes(spec_bytes([b"ok"]) + _header(length) + b"\0" * (3 << 20))
    chunks = []
    real = T.read_chunks

    def counted(*a, **k):
        for c in real(*a, **k):
            chunks.append(c[1])
            yield c

    monkeypatch.setattr(T, "read_chunks", counted)
    with pytest.raises(DataError) as e:
        build_index(p, progress=False, chunk_bytes=1 << 16)
    msg = str(e.value)
    assert msg.startswith(f"{p}: record 1 at byte 18: truncated record: ") and f" {length}" in msg, msg
    assert "4611686018427387904" not in msg, msg  # 2**62, what the length was capped at
    assert f"the file ends at byte {os.path.getsize(p)}" in msg and len(chunks) <= 2, (msg, len(chunks))
    p.write_bytes(spec_bytes([b"ok"]) + struct.pack("<Q", length) + b"\1\2\3\4" + b"\0" * 100)
    with pytest.raises(DataError) as e:
        build_index(p, progress=False)
    assert f"length CRC mismatch: expected the stored" in str(e.value) and f"(length field reads {length})" in str(e.value)


def test_a_zlib_compressed_file_is_said_to_be_one(tmp_path):
    """TFRecordWriter's compression_type="ZLIB" writes a stream with no magic bytes: it was refused
    as a bad length CRC at byte 0 and nothing more (GZIP is named by its magic)."""
    import zlib

    p = tmp_path / "z.tfrecord"
    p.write_bytes(zlib.compress(spec_bytes(make_records(20, seed=9))))
    with pytest.raises(DataError, match=r"record 0 at byte 0: length CRC mismatch: .*look like a ZLIB stream"):
        build_index(p, progress=False)
    p.write_bytes(b"xx" + spec_bytes(make_records(3, seed=9)))  # not ZLIB: no such guess
    with pytest.raises(DataError) as e:
        build_index(p, progress=False)
    assert "ZLIB" not in str(e.value)


def test_payload_crc_is_checked_again_on_read_with_verify(tmp_path):
    recs = make_records(30, seed=7)
    data = bytearray(write(tmp_path / "d.tfrecord", recs))
    build_index(tmp_path / "d.tfrecord", progress=False)
    off = sum(len(r) + 16 for r in recs[:11])
    data[off + 12 + len(recs[11]) // 2] ^= 0x20   # same size, payload byte flipped after indexing
    (tmp_path / "d.tfrecord").write_bytes(bytes(data))
    idx = open_index(tmp_path / "d.tfrecord", check=False)
    with lirs.Loader(idx, 4, granularity="instance", verify=True) as loader:
        # framing checked whole when indexed: the error says the index and the data disagree, and how to tell why
        with pytest.raises(DataError, match=rf"d.tfrecord: record 11 at byte {off}: payload CRC mismatch.*"
                                            r"so the index and the data disagree: `lirs index --check`"):
            list(loader.epoch(0))
    with lirs.Loader(idx, 4, granularity="instance") as loader:  # verify off: delivered as read
        got = {i: x for b in loader.epoch(0) for i, x in zip(b.ids.tolist(), b.X)}
    assert got[11] != recs[11] and all(got[i] == recs[i] for i in range(30) if i != 11)


def test_payloads_refuse_a_span_that_is_not_one_record():
    buf = np.frombuffer(spec_bytes([b"abcd", b"efghij"]), np.uint8)
    assert payloads(buf, [0, 20], [20, 42]) == [b"abcd", b"efghij"]
    with pytest.raises(DataError, match=r"f: record 7 at byte 100: length field reads 4, so the record needs 20"):
        payloads(buf, [0], [42], source="f", record_ids=[7], file_offsets=[100])


# --------------------------------------------------------------------------- lirs shuffle

CONFIGS = {
    "default": {},
    "piles": dict(piles=5, write_buffer=4096, chunk=4096, out_buffer=8192),
    "resplit": dict(piles=3, write_buffer=4096, chunk=1000, out_buffer=4096, pile_cap=60_000),
}


@pytest.fixture(params=["direct", "buffered"])
def io_mode(request, monkeypatch):
    monkeypatch.setattr(D, "DIRECT", request.param == "direct")
    return request.param


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("shards", [None, 3])
def test_shuffle_writes_a_valid_tfrecord_permutation(tmp_path, monkeypatch, io_mode, config, shards):
    recs = make_records(400, seed=8, big=20_000)  # the big one is larger than every write buffer
    write(tmp_path / "in.tfrecord", recs)
    orig = E.plan_memory

    def plan(*a, **k):
        p = orig(*a, **k)
        ch = dict(CONFIGS[config])
        if "pile_cap" in ch:
            ch.setdefault("target", min(p.target, ch["pile_cap"]))
        return dataclasses.replace(p, **ch)

    monkeypatch.setattr(E, "plan_memory", plan)
    out = tmp_path / ("sh" if shards else "out.tfrecord")
    st = E.shuffle(tmp_path / "in.tfrecord", out, shards=shards, seed=5, index=True, progress=False)
    got = [r for p in st["outputs"] for r in spec_read(open(p, "rb").read())]
    assert Counter(got) == Counter(recs) and len(got) == len(recs)
    assert got != recs
    assert st["format"] == "tfrecord" and st["records"] == len(recs)
    assert sum(os.path.getsize(p) for p in st["outputs"]) == os.path.getsize(tmp_path / "in.tfrecord")
    if config == "resplit":
        assert st["splits"] > 0
    for p in st["outputs"]:  # the sidecars written with --index serve the outputs
        assert open_index(p).n == len(spec_read(open(p, "rb").read()))


def test_shuffle_refuses_a_corrupt_input(tmp_path):
    p, rec, off = _bad(tmp_path, "payload crc")
    with pytest.raises(DataError, match=rf"bad.tfrecord: record {rec} at byte {off}: payload CRC mismatch"):
        E.shuffle(p, tmp_path / "o.tfrecord", progress=False)
    assert not (tmp_path / "o.tfrecord").exists()


def test_shuffle_refuses_an_output_named_as_another_format(tmp_path):
    # TFRecord bytes under a .svm name would be read back as LIBSVM and fail there
    write(tmp_path / "in.tfrecord", make_records(20, seed=2))
    for name, fmt in (("o.svm", "libsvm"), ("o.jsonl", "lines"), ("o.npy", "npy")):
        with pytest.raises(UsageError, match=rf"{name} would be read back as {fmt} .* name it with .tfrecord"):
            E.shuffle(tmp_path / "in.tfrecord", tmp_path / name, progress=False)
        assert not (tmp_path / name).exists()
    E.shuffle(tmp_path / "in.tfrecord", tmp_path / "o.bin", index=True, progress=False)  # read by content
    assert open_index(str(tmp_path / "o.bin")).format == "tfrecord"


def test_shuffle_cli_tfrecord(tmp_path):
    recs = make_records(50, seed=9)
    write(tmp_path / "in.tfrecords", recs)
    rc, out, err = cli("shuffle", str(tmp_path / "in.tfrecords"), "-o", str(tmp_path / "o.tfrecords"),
                       "--memory", "64M")
    assert rc == 0, err
    assert Counter(spec_read((tmp_path / "o.tfrecords").read_bytes())) == Counter(recs)


# --------------------------------------------------------------------------- TensorFlow


def test_tensorflow_reads_what_lirs_reads(tmp_path):
    tf = pytest.importorskip("tensorflow")
    recs = make_records(100, seed=11)
    write(tmp_path / "d.tfrecord", recs)
    theirs = [bytes(x.numpy()) for x in tf.data.TFRecordDataset(str(tmp_path / "d.tfrecord"))]
    build_index(tmp_path / "d.tfrecord", progress=False)
    with lirs.Loader(tmp_path / "d.tfrecord", 10, granularity="instance") as loader:
        ours = {i: x for b in loader.epoch(0) for i, x in zip(b.ids.tolist(), b.X)}
    assert [ours[i] for i in range(len(recs))] == theirs == recs
    st = E.shuffle(tmp_path / "d.tfrecord", tmp_path / "o.tfrecord", progress=False)
    shuffled = [bytes(x.numpy()) for x in tf.data.TFRecordDataset(st["outputs"][0])]
    assert Counter(shuffled) == Counter(recs)


def test_error_messages_name_the_record_within_its_file():
    # the message shape every caller relies on (CLI one-liners, docs/bad-input.md)
    err = np.array([0x1234, 0x5678, 10, 0, 0], np.int64)
    from lirs.tfrecord import record_error

    msg = str(record_error("f.tfrecord", 3, 99, K.BAD_LENGTH_CRC, err))
    assert re.match(r"f\.tfrecord: record 3 at byte 99: length CRC mismatch: expected the stored masked "
                    r"CRC-32C 0x00001234, computed 0x00005678", msg)


def test_torch_dataset_yields_payloads(tmp_path):
    pytest.importorskip("torch")
    from lirs.torch import LirsIterableDataset

    recs = make_records(90, seed=12)
    write(tmp_path / "d.tfrecord", recs)
    build_index(tmp_path / "d.tfrecord", progress=False)
    ds = LirsIterableDataset(tmp_path / "d.tfrecord", 16, granularity="window", group_bytes=8192, window=2,
                             verify=True)
    got = {}
    for batch in ds:
        assert batch["y"] is None and isinstance(batch["X"], list)
        got.update(zip(batch["ids"].tolist(), batch["X"]))
    assert got == dict(enumerate(recs))
