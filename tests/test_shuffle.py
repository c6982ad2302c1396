"""`lirs shuffle`: permutation of the input, exact uniformity, determinism, byte preservation,
.npy headers and labels, sidecars equal to `lirs index`, shards, memory plan, cleanup, errors."""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from scipy import stats as sps

import lirs
import lirs.external.api as E
import lirs.external.disk as D
import lirs.external.memory as M
from lirs.cli import main as cli_main
from lirs.errors import DataError, LirsError, UsageError
from lirs.inputs import labels_path
from lirs.kernels import external as KE

from conftest import open_fds


# --------------------------------------------------------------------------- data makers


def libsvm_bytes(n, seed, *, crlf=False, comments=False, no_final_newline=False, dup=False):
    """n LIBSVM records (unique unless ``dup``), optionally with blank/comment lines and CRLF."""
    rng = np.random.default_rng(seed)
    eol = b"\r\n" if crlf else b"\n"
    out = []
    for i in range(n):
        lab = rng.choice([b"+1", b"-1", b"2.5", b"0"])
        k = int(rng.integers(0, 6))
        idx = np.sort(rng.choice(np.arange(1, 5000), k, replace=False))
        toks = [lab] + [b"%d:%d" % (j, rng.integers(1, 9)) for j in idx]
        if not dup:
            toks.append(b"%d:1" % (10_000 + i))  # makes every record unique
        line = b" ".join(toks)
        if comments and rng.random() < 0.2:
            line += b" # note %d" % i
        out.append(line + eol)
        if comments and rng.random() < 0.15:
            out.append(rng.choice([b"", b"  ", b"# comment only", b"\t# x 1:2"]) + eol)
    data = b"".join(out)
    if no_final_newline:
        data = data[:-len(eol)]
    return data


def lines_bytes(n, seed, *, crlf=False, empty=False, no_final_newline=False):
    rng = np.random.default_rng(seed)
    eol = b"\r\n" if crlf else b"\n"
    out = []
    for i in range(n):
        if empty and rng.random() < 0.2:
            out.append(eol)
        else:
            body = b'{"id":%d,"t":"%s"}' % (i, b"x" * int(rng.integers(0, 300)))
            out.append(body + eol)
    data = b"".join(out)
    if no_final_newline and not data.endswith(b"\n\n"):
        data = data[:-len(eol)]
    return data


def text_records(data: bytes, fmt: str) -> list[bytes]:
    """Records as `lirs shuffle` defines them: lines (a missing final newline added); LIBSVM drops
    blank and comment-only lines."""
    lines = data.split(b"\n")
    recs = [ln + b"\n" for ln in lines[:-1]]
    if lines[-1]:
        recs.append(lines[-1] + b"\n")
    if fmt == "libsvm":
        recs = [r for r in recs if r.strip() and not r.lstrip().startswith(b"#")]
    return recs


def out_records(path) -> list[bytes]:
    data = open(path, "rb").read()
    assert data.endswith(b"\n")
    return [ln + b"\n" for ln in data.split(b"\n")[:-1]]


def make_npy(path, n, seed, *, labels=True, shape=(3,), dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n,) + shape).astype(dtype)
    x.reshape(n, -1)[:, 0] = np.arange(n)  # unique rows, row id in column 0
    np.save(path, x)
    if labels:
        np.save(labels_path(str(path)), np.where(np.arange(n) % 3 == 0, 1.0, -1.0) * (1 + np.arange(n)))
    return x


@pytest.fixture
def force_plan(monkeypatch):
    """Shrink the memory plan so that small inputs use many piles, tiny buffers and re-splits."""

    def apply(**changes):
        orig = E.plan_memory

        def plan(*a, **k):
            p = orig(*a, **k)
            if "pile_cap" in changes:
                changes.setdefault("target", min(p.target, changes["pile_cap"]))
            return dataclasses.replace(p, **changes)

        monkeypatch.setattr(E, "plan_memory", plan)

    return apply


@pytest.fixture(params=["direct", "buffered"])
def io_mode(request, monkeypatch):
    """Piles and output with O_DIRECT (where the filesystem takes it) or through the page cache."""
    monkeypatch.setattr(D, "DIRECT", request.param == "direct")
    return request.param


def check_io(st, io_mode, d):
    """The run used O_DIRECT exactly when asked and the filesystem of ``d`` takes it."""
    want = io_mode == "direct" and D.direct_ok(str(d))
    assert st["direct_io"] == {"piles": want, "output": want}


def leftovers(d):
    """Hidden temporaries (piles, staged output, sidecar temps) left in directory ``d``."""
    return sorted(x for x in os.listdir(d) if x.startswith("."))


# --------------------------------------------------------------------------- permutation


CONFIGS = {
    "default": {},
    "piles": dict(piles=5, write_buffer=1024, chunk=4096, out_buffer=2048),
    "resplit": dict(piles=3, write_buffer=512, chunk=1000, out_buffer=700, pile_cap=6000),
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("n", [1, 2, 7, 150, 1200])
def test_libsvm_output_is_a_permutation(tmp_path, force_plan, io_mode, config, n):
    data = libsvm_bytes(n, seed=n, comments=True, no_final_newline=(n % 2 == 1))
    src = tmp_path / "in.svm"
    src.write_bytes(data)
    force_plan(**CONFIGS[config])
    st = E.shuffle(src, tmp_path / "out.svm", seed=5, progress=False)
    check_io(st, io_mode, tmp_path)
    want = text_records(data, "libsvm")
    got = out_records(tmp_path / "out.svm")
    assert Counter(got) == Counter(want)
    assert st["records"] == n == len(want)
    last = data.split(b"\n")[-1]
    assert st["added_newlines"] == (1 if last.strip() and not last.lstrip().startswith(b"#") else 0)
    assert len(data) == sum(map(len, want)) - st["added_newlines"] + st["skipped_bytes"]
    assert st["skipped_lines"] == len(data.split(b"\n")) - (0 if last else 1) - n
    assert lirs.build_index(tmp_path / "out.svm").n == n
    assert leftovers(tmp_path) == []
    if config == "resplit" and n >= 1200:
        assert st["splits"] > 0 and st["depth"] >= 1


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("n", [1, 3, 64, 900])
def test_lines_output_is_a_permutation_with_crlf_and_empty_lines(tmp_path, force_plan, io_mode, config, n):
    data = lines_bytes(n, seed=n + 1, crlf=(n % 2 == 0), empty=True, no_final_newline=(n > 1))
    src = tmp_path / "in.jsonl"
    src.write_bytes(data)
    force_plan(**CONFIGS[config])
    st = E.shuffle(src, tmp_path / "out.jsonl", seed=1, progress=False)
    check_io(st, io_mode, tmp_path)
    want = text_records(data, "lines")
    assert Counter(out_records(tmp_path / "out.jsonl")) == Counter(want)
    assert st["records"] == len(want)
    assert st["skipped_lines"] == 0


def test_every_byte_of_every_record_is_kept(tmp_path):
    data = (b"1 2:3\r\n"            # CRLF kept
            b"   \r\n"              # blank: not a record
            b"# header 1:2\n"       # comment-only: not a record
            b"-1 qid:3 4:5  # tail comment stays\n"
            b"\t+1 7:8\n"           # leading whitespace kept
            b"2 9:1")               # no final newline: gets one
    src = tmp_path / "a.svm"
    src.write_bytes(data)
    st = E.shuffle(src, tmp_path / "b.svm", seed=2)
    got = sorted(out_records(tmp_path / "b.svm"))
    assert got == sorted([b"1 2:3\r\n", b"-1 qid:3 4:5  # tail comment stays\n", b"\t+1 7:8\n", b"2 9:1\n"])
    assert (st["skipped_lines"], st["skipped_bytes"], st["added_newlines"]) == (2, 5 + 13, 1)
    lines = tmp_path / "a.txt"
    lines.write_bytes(b"x\r\n\n\n \ny")
    st = E.shuffle(lines, tmp_path / "b.txt", seed=2)
    assert sorted(out_records(tmp_path / "b.txt")) == sorted([b"x\r\n", b"\n", b"\n", b" \n", b"y\n"])
    assert st["records"] == 5 and st["added_newlines"] == 1


def test_several_inputs_form_one_dataset(tmp_path, force_plan):
    parts = [libsvm_bytes(40, seed=s, no_final_newline=True) for s in range(3)]
    for i, d in enumerate(parts):
        (tmp_path / f"p{i}.svm").write_bytes(d)
    force_plan(piles=4, write_buffer=600)
    st = E.shuffle([tmp_path / f"p{i}.svm" for i in range(3)], tmp_path / "all.svm", seed=9)
    want = sum((text_records(d, "libsvm") for d in parts), [])
    assert Counter(out_records(tmp_path / "all.svm")) == Counter(want)
    assert st["added_newlines"] == 3 and st["records"] == 120
    # a directory of inputs is the same dataset
    d = tmp_path / "dir"
    d.mkdir()
    for i, data in enumerate(parts):
        (d / f"p{i}.svm").write_bytes(data)
    E.shuffle(d, tmp_path / "all2.svm", seed=9)
    assert (tmp_path / "all2.svm").read_bytes() == (tmp_path / "all.svm").read_bytes()


def test_tmpfs_takes_or_refuses_o_direct_either_way_works(shm_dir, force_plan):
    data = libsvm_bytes(300, seed=6, no_final_newline=True)
    src = os.path.join(shm_dir, "in.svm")
    with open(src, "wb") as f:
        f.write(data)
    force_plan(piles=3, write_buffer=700)
    st = E.shuffle(src, os.path.join(shm_dir, "o.svm"), index=True)
    assert st["direct_io"]["piles"] == D.direct_ok(shm_dir)
    assert Counter(out_records(os.path.join(shm_dir, "o.svm"))) == Counter(text_records(data, "libsvm"))
    assert _same_sidecar(os.path.join(shm_dir, "o.svm"), st["sidecars"][0], shm_dir)


def test_duplicate_records_keep_their_multiplicity(tmp_path, force_plan):
    data = b"".join([b"1 1:1\n"] * 50 + [b"-1 2:1\n"] * 30 + [b"0 3:1\n"])
    (tmp_path / "d.svm").write_bytes(data)
    force_plan(piles=4, write_buffer=64)
    E.shuffle(tmp_path / "d.svm", tmp_path / "o.svm", seed=0)
    assert Counter(out_records(tmp_path / "o.svm")) == Counter(text_records(data, "libsvm"))


# --------------------------------------------------------------------------- determinism and uniformity


def test_same_seed_same_bytes_other_seed_other_order(tmp_path, force_plan):
    data = libsvm_bytes(500, seed=3)
    (tmp_path / "in.svm").write_bytes(data)
    force_plan(piles=4)
    outs = []
    for i, seed in enumerate([11, 11, 12]):
        E.shuffle(tmp_path / "in.svm", tmp_path / f"o{i}.svm", seed=seed)
        outs.append((tmp_path / f"o{i}.svm").read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]
    assert outs[0] != data


def test_output_does_not_depend_on_chunk_or_buffer_sizes(tmp_path, force_plan):
    data = libsvm_bytes(700, seed=4, comments=True)
    (tmp_path / "in.svm").write_bytes(data)
    force_plan(piles=6)
    E.shuffle(tmp_path / "in.svm", tmp_path / "a.svm", seed=3)
    force_plan(piles=6, chunk=333, write_buffer=250, out_buffer=123)
    E.shuffle(tmp_path / "in.svm", tmp_path / "b.svm", seed=3)
    assert (tmp_path / "a.svm").read_bytes() == (tmp_path / "b.svm").read_bytes()


@pytest.mark.parametrize("config", [dict(piles=1), dict(piles=3, write_buffer=16),
                                    dict(piles=2, write_buffer=16, pile_cap=40)])
def test_every_permutation_is_equally_likely(tmp_path, force_plan, config):
    """Chi-square over all 24 orders of 4 records, one shuffle per seed: the output order is uniform
    with one pile, with several piles, and when piles are split again."""
    recs = [b"a\n", b"bb\n", b"c\n", b"dd\n"]
    (tmp_path / "in.txt").write_bytes(b"".join(recs))
    force_plan(**config)
    perms = list(itertools.permutations(range(4)))
    where = {p: i for i, p in enumerate(perms)}
    counts = np.zeros(len(perms), np.int64)
    seeds = 40 * len(perms)
    splits = 0
    for seed in range(seeds):
        st = E.shuffle(tmp_path / "in.txt", tmp_path / "out.txt", seed=seed, progress=False)
        splits += st["splits"]
        got = out_records(tmp_path / "out.txt")
        counts[where[tuple(recs.index(r) for r in got)]] += 1
    assert counts.sum() == seeds
    assert sps.chisquare(counts).pvalue > 1e-3, counts
    if "pile_cap" in config:
        assert splits > 0


def test_pile_draws_are_uniform_and_chunk_free():
    m = 7
    a = np.empty(70_000, np.int64)
    KE.draw_piles(np.uint64(12345), 0, m, a)
    assert sps.chisquare(np.bincount(a, minlength=m)).pvalue > 1e-3
    b = np.empty(1000, np.int64)
    KE.draw_piles(np.uint64(12345), 5000, m, b)
    assert np.array_equal(a[5000:6000], b)  # record i's pile depends on (key, i) only


# --------------------------------------------------------------------------- npy and fixed records


@pytest.mark.parametrize("config", list(CONFIGS))
def test_npy_rows_and_labels_move_together(tmp_path, force_plan, io_mode, config):
    x = make_npy(tmp_path / "x.npy", 333, seed=1)
    y = np.load(labels_path(str(tmp_path / "x.npy")))
    config = dict(CONFIGS[config])
    if "pile_cap" in config:
        config["pile_cap"] = 3000  # rows of 12 bytes + 8 label bytes: piles of ~111 rows split again
    force_plan(**config)
    st = E.shuffle(tmp_path / "x.npy", tmp_path / "o.npy", seed=4, index=True)
    check_io(st, io_mode, tmp_path)
    o = np.load(tmp_path / "o.npy")
    assert o.shape == x.shape and o.dtype == x.dtype
    ids = o[:, 0].astype(np.int64)
    assert sorted(ids.tolist()) == list(range(333))
    assert np.array_equal(o, x[ids])
    oy = np.load(labels_path(str(tmp_path / "o.npy")))
    assert np.array_equal(oy, y[ids])
    assert st["labels"] == [labels_path(str(tmp_path / "o.npy"))]
    assert not np.array_equal(ids, np.arange(333))
    idx = lirs.open_index(tmp_path / "o.npy")
    assert idx.n == 333 and np.array_equal(idx.labels, y[ids])


def test_npy_structured_rows_several_inputs_and_shards(tmp_path):
    dt = np.dtype([("id", "<i8"), ("v", "<f4", (2,))])
    arrs = []
    for i, n in enumerate([5, 17, 9]):
        a = np.zeros(n, dt)
        a["id"] = np.arange(n) + 100 * i
        a["v"] = i
        np.save(tmp_path / f"s{i}.npy", a)
        arrs.append(a)
    st = E.shuffle([tmp_path / f"s{i}.npy" for i in range(3)], tmp_path / "out", shards=4, seed=0, index=True)
    parts = [np.load(p) for p in st["outputs"]]
    assert [len(p) for p in parts] == [8, 8, 8, 7]
    allrows = np.concatenate(parts)
    assert sorted(allrows["id"].tolist()) == sorted(np.concatenate(arrs)["id"].tolist())
    assert "labels" not in st
    for p in st["outputs"]:
        assert lirs.open_index(p).n == len(np.load(p))
    # a field name numpy writes in a 3.0 (UTF-8) header: the output's header says it again
    u = np.zeros(6, [("温度", "<f4"), ("b", "<i2")])
    u["b"] = np.arange(6)
    np.save(tmp_path / "u.npy", u)
    E.shuffle(tmp_path / "u.npy", tmp_path / "uo.npy", seed=1, index=True)
    back = np.load(tmp_path / "uo.npy")
    assert back.dtype == u.dtype and sorted(back["b"].tolist()) == list(range(6))


def test_npy_labels_missing_on_one_input_are_dropped_with_a_warning(tmp_path):
    make_npy(tmp_path / "a.npy", 10, seed=1)
    make_npy(tmp_path / "b.npy", 10, seed=2, labels=False)
    with pytest.warns(UserWarning, match="no labels"):
        st = E.shuffle([tmp_path / "a.npy", tmp_path / "b.npy"], tmp_path / "o.npy")
    assert "labels" not in st and not os.path.exists(labels_path(str(tmp_path / "o.npy")))


def test_raw_fixed_records_drop_the_header(tmp_path, force_plan, io_mode):
    rs, n, h = 24, 200, 10
    recs = [bytes([i % 251]) * 4 + i.to_bytes(4, "little") + bytes(16) for i in range(n)]
    (tmp_path / "r.bin").write_bytes(b"H" * h + b"".join(recs))
    force_plan(piles=3, write_buffer=rs * 2)
    st = E.shuffle(tmp_path / "r.bin", tmp_path / "o.bin", record_size=rs, header_size=h, index=True)
    check_io(st, io_mode, tmp_path)
    out = (tmp_path / "o.bin").read_bytes()
    assert len(out) == n * rs and st["format"] == "fixed"
    got = [out[i:i + rs] for i in range(0, len(out), rs)]
    assert Counter(got) == Counter(recs)
    assert lirs.open_index(tmp_path / "o.bin").record_size == rs


# --------------------------------------------------------------------------- shards


def test_shards_are_the_single_output_cut_in_order(tmp_path, force_plan):
    data = libsvm_bytes(103, seed=8)
    (tmp_path / "in.svm").write_bytes(data)
    force_plan(piles=3, out_buffer=300)
    E.shuffle(tmp_path / "in.svm", tmp_path / "one.svm", seed=6)
    st = E.shuffle(tmp_path / "in.svm", tmp_path / "sh", seed=6, shards=4)
    names = sorted(os.listdir(tmp_path / "sh"))
    assert names == ["part-00000.svm", "part-00001.svm", "part-00002.svm", "part-00003.svm"]
    sizes = [len(out_records(p)) for p in st["outputs"]]
    assert sizes == [26, 26, 26, 25]
    joined = b"".join(open(p, "rb").read() for p in st["outputs"])
    assert joined == (tmp_path / "one.svm").read_bytes()
    assert lirs.build_index(tmp_path / "sh").n == 103  # the directory is one dataset
    (tmp_path / "empty").mkdir()  # an existing empty directory is filled
    st = E.shuffle(tmp_path / "in.svm", tmp_path / "empty", seed=6, shards=2)
    assert sorted(os.listdir(tmp_path / "empty")) == ["part-00000.svm", "part-00001.svm"]
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- sidecars


def _same_sidecar(data_path, sidecar, tmp_path):
    ref = os.path.join(os.path.dirname(sidecar), "ref-" + os.path.basename(sidecar))
    lirs.build_index(data_path, out=ref)
    try:
        a, b = open(sidecar, "rb").read(), open(ref, "rb").read()
    finally:
        os.unlink(ref)
    return a == b


@pytest.mark.parametrize("fmt", ["libsvm", "lines"])
@pytest.mark.parametrize("config", ["default", "piles"])
def test_index_equals_lirs_index_of_the_output(tmp_path, force_plan, io_mode, fmt, config):
    if fmt == "libsvm":
        data = libsvm_bytes(400, seed=2, comments=True, crlf=True, no_final_newline=True)
        name = "in.svm"
    else:
        data = lines_bytes(400, seed=2, empty=True, no_final_newline=True)
        name = "in.jsonl"
    (tmp_path / name).write_bytes(data)
    force_plan(**CONFIGS[config])
    out = tmp_path / ("out" + os.path.splitext(name)[1])
    st = E.shuffle(tmp_path / name, out, seed=3, index=True)
    check_io(st, io_mode, tmp_path)
    assert st["sidecars"] == [str(out) + ".lirs"]
    assert _same_sidecar(str(out), st["sidecars"][0], tmp_path)
    idx = lirs.open_index(out)
    starts, ends = idx.bounds()
    raw = out.read_bytes()
    assert [raw[s:e] for s, e in zip(starts, ends)] == out_records(out)


def test_index_of_shards_and_many_distinct_labels(tmp_path, force_plan):
    rng = np.random.default_rng(0)
    # more distinct labels than label codes can hold: the sidecar stores every label
    lines = [b"%r 1:%d\n" % (float(v), i % 7) for i, v in enumerate(rng.standard_normal(70_000))]
    lines += [b"1.00000000000000000001 2:1\n", b"nan 3:1\n", b"-inf 4:1\n"]  # labels outside the fast path
    (tmp_path / "in.svm").write_bytes(b"".join(lines))
    force_plan(piles=2, out_buffer=5000)
    st = E.shuffle(tmp_path / "in.svm", tmp_path / "sh", shards=3, seed=1, index=True)
    assert [os.path.basename(p) for p in st["sidecars"]] == [f"part-0000{k}.svm.lirs" for k in range(3)]
    for data, side in zip(st["outputs"], st["sidecars"]):
        assert _same_sidecar(data, side, tmp_path)


def test_index_reports_bad_libsvm_input_by_line_and_byte(tmp_path):
    (tmp_path / "bad.svm").write_bytes(b"1 2:3\n-1 4:5\n1 x:1\n")
    with pytest.raises(DataError, match=r"bad\.svm: line 3, byte 15: expected INDEX:VALUE"):
        E.shuffle(tmp_path / "bad.svm", tmp_path / "o.svm", index=True)
    assert not os.path.exists(tmp_path / "o.svm") and leftovers(tmp_path) == []


# --------------------------------------------------------------------------- memory plan


@pytest.mark.parametrize("memory", ["2M", "16M", "256M", "2G", "64G"])
@pytest.mark.parametrize("input_bytes,mean", [(10**5, 50), (10**9, 350), (10**12, 350), (10**11, 44_000),
                                              (10**10, 2)])
@pytest.mark.parametrize("index", [False, True])
def test_memory_plan_respects_the_cap(memory, input_bytes, mean, index):
    mem = lirs.units.parse_size(memory)
    p = E.plan_memory(input_bytes, mean, memory, index=index, validate=index, max_piles=1024)
    assert p.pass1_bytes + p.reserve <= mem
    assert p.pass2_bytes + p.reserve <= mem
    assert 1 <= p.piles <= 1024 and p.write_buffer >= M._MIN_WRITE_BUFFER
    n = input_bytes / mean
    mu = n / p.piles
    assert p.target == min(p.pile_cap, M.PILE_TARGET)
    fits = (mu + 6 * np.sqrt(mu)) * (mean + 8) <= p.target * M.HEADROOM * 1.0001
    if p.capped:  # piles limited by open files or buffer room: pass 2 splits them again
        room = mem - p.reserve - 2 * p.chunk - p.validate
        assert not fits and (p.piles == 1024 or (p.piles + 1 + M.SPARE_SLOTS) * M._MIN_WRITE_BUFFER > room)
    else:  # an expected pile plus six standard deviations fits the cap, with no more piles than that needs
        assert fits
        if p.piles > 1:
            mu_fewer = n / (p.piles - 1)
            assert (mu_fewer + 6 * np.sqrt(mu_fewer)) * (mean + 8) > p.target * M.HEADROOM
    m, w = p.split_piles(p.pile_cap * 3, 1024)
    assert m >= 2 and 2 * p.chunk + (m + M.SPARE_SLOTS) * w + p.validate + p.reserve <= mem


def test_memory_plan_fixed_records_and_too_small_memory():
    p = E.plan_memory(10**9, 8000, "64M", record_bytes=8008, label_ratio=0.001)
    assert p.write_buffer % M.BLOCK == 0 and p.write_buffer >= 8008 + M.BLOCK
    assert p.pass1_bytes + p.reserve <= 64 << 20 and p.pass2_bytes + p.reserve <= 64 << 20
    with pytest.raises(UsageError, match="too small"):
        E.plan_memory(10**9, 350, "100K")
    with pytest.raises(UsageError, match="too small"):
        E.plan_memory(10**9, 8 << 20, "8M", record_bytes=8 << 20)


def test_run_stays_within_the_plan(tmp_path):
    data = libsvm_bytes(60_000, seed=1)  # several piles at 2M (--index does not change the pile count)
    (tmp_path / "in.svm").write_bytes(data)
    st = E.shuffle(tmp_path / "in.svm", tmp_path / "o.svm", memory="2M", index=True)
    assert st["piles"] > 1
    assert st["peak_memory_estimate"] <= st["memory"]
    assert st["pass2_memory_estimate"] <= st["memory"]


@pytest.mark.parametrize("fmt,shards,max_piles", [("libsvm", None, None), ("lines", 3, None), ("libsvm", None, 2)])
def test_index_does_not_change_the_output(tmp_path, fmt, shards, max_piles):
    """--index only adds sidecars: same seed and memory, same shuffled bytes (same piles and re-splits)."""
    name = "in.svm" if fmt == "libsvm" else "in.jsonl"
    data = libsvm_bytes(60_000, seed=8, comments=True) if fmt == "libsvm" else lines_bytes(8000, seed=8)
    (tmp_path / name).write_bytes(data)
    got = {}
    for index in (False, True):
        out = tmp_path / (f"sh{int(index)}" if shards else f"o{int(index)}{os.path.splitext(name)[1]}")
        st = E.shuffle(tmp_path / name, out, shards=shards, memory="2M", seed=4, index=index, progress=False,
                       _max_piles=max_piles)
        got[index] = (st["piles"], st["splits"], [open(p, "rb").read() for p in st["outputs"]])
        assert ("sidecars" in st) == index
    assert got[True] == got[False]
    assert got[False][0] > 1 and (max_piles is None or got[False][1] > 0)


def test_line_longer_than_memory_is_a_clear_error(tmp_path):
    (tmp_path / "big.txt").write_bytes(b"short\n" + b"x" * (3 << 20) + b"\nend\n")
    with pytest.raises(UsageError, match=r"big\.txt: the line at byte 6 is longer than .* raise --memory"):
        E.shuffle(tmp_path / "big.txt", tmp_path / "o.txt", memory="2M")
    assert leftovers(tmp_path) == [] and not os.path.exists(tmp_path / "o.txt")


def test_long_lines_bigger_than_buffers_pass_through(tmp_path, force_plan, io_mode):
    recs = [b"%d %s\n" % (i, b"y" * (5000 * (i % 3))) for i in range(30)]
    (tmp_path / "l.txt").write_bytes(b"".join(recs))
    force_plan(piles=3, write_buffer=1000, chunk=3000, out_buffer=1024)
    st = E.shuffle(tmp_path / "l.txt", tmp_path / "o.txt", seed=2, index=True)
    check_io(st, io_mode, tmp_path)
    assert Counter(out_records(tmp_path / "o.txt")) == Counter(recs)
    assert _same_sidecar(str(tmp_path / "o.txt"), st["sidecars"][0], tmp_path)


# --------------------------------------------------------------------------- interruption and cleanup


def _boom_after(monkeypatch, name, calls, exc=KeyboardInterrupt):
    real = getattr(KE, name)
    state = {"n": 0}

    def wrapped(*a):
        state["n"] += 1
        if state["n"] > calls:
            raise exc()
        return real(*a)

    monkeypatch.setattr(KE, name, wrapped)


@pytest.mark.parametrize("where", ["scatter_lines", "gather_lines", "line_starts"])
@pytest.mark.parametrize("shards", [None, 3])
def test_interrupted_run_leaves_nothing(tmp_path, force_plan, monkeypatch, where, shards):
    data = libsvm_bytes(600, seed=5)
    (tmp_path / "in.svm").write_bytes(data)
    out = tmp_path / ("o.svm" if shards is None else "sh")
    piles = tmp_path / "piles"
    piles.mkdir()
    force_plan(piles=4, write_buffer=2000, out_buffer=1500)
    _boom_after(monkeypatch, where, 2)
    before = open_fds()
    with pytest.raises(KeyboardInterrupt):
        E.shuffle(tmp_path / "in.svm", out, shards=shards, tmpdir=piles, index=True, seed=1)
    assert not os.path.exists(out) and not os.path.exists(str(out) + ".lirs")
    assert leftovers(tmp_path) == [] and os.listdir(piles) == []
    assert sorted(os.listdir(tmp_path)) == ["in.svm", "piles"]
    assert set(open_fds()) <= set(before)


def test_failed_run_keeps_the_previous_output(tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_bytes(b"a\nb\nc\n")
    (tmp_path / "o.txt").write_bytes(b"old\n")
    _boom_after(monkeypatch, "gather_lines", 0, exc=RuntimeError)
    with pytest.raises(RuntimeError):
        E.shuffle(tmp_path / "in.txt", tmp_path / "o.txt")
    assert (tmp_path / "o.txt").read_bytes() == b"old\n" and leftovers(tmp_path) == []


def test_a_run_stopped_between_its_renames_never_pairs_new_labels_with_old_data(tmp_path, monkeypatch):
    """Labels are renamed into place before their data: a run stopped between the two left the
    new labels beside the previous run's output, which the next index took as its labels. The old
    output goes first: a stop there leaves labels without data, never with the wrong data."""
    from lirs.external import outputs as O

    x = np.arange(80, dtype=np.float32).reshape(40, 2)
    np.save(tmp_path / "in.npy", x)
    np.save(tmp_path / "in.labels.npy", np.arange(40.0))
    E.shuffle(tmp_path / "in.npy", tmp_path / "o.npy", seed=1)
    real, calls = os.replace, []

    def stopped(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise KeyboardInterrupt  # after the labels' rename, before the data's
        return real(a, b)

    monkeypatch.setattr(O.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        E.shuffle(tmp_path / "in.npy", tmp_path / "o.npy", seed=2)
    assert not os.path.exists(tmp_path / "o.npy")  # not the first run's rows beside the second's labels
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("fmt", ["libsvm", "npy"])
@pytest.mark.parametrize("k", range(1, 7))
def test_an_interrupt_during_the_renames_never_leaves_new_data_beside_an_old_sidecar(tmp_path, monkeypatch, fmt, k):
    """Ctrl-C just after ``shuffle --index`` renamed its new output into place (before the sidecar
    was written) exited "interrupted" with the new data published beside the previous run's
    sidecar, which readers refused as stale; a fixed-record output's sidecar, built after the
    renames, was lost with both outputs. Every sidecar is sealed first and the renames are held
    from Ctrl-C: whichever rename the signal comes after, a reader opens the old output and its
    sidecar, or the new ones; never no output at all."""
    import signal

    from lirs.external import outputs as O

    if fmt == "libsvm":
        (tmp_path / "in.svm").write_bytes(libsvm_bytes(3000, seed=4))
        src, out = tmp_path / "in.svm", tmp_path / "o.svm"
    else:
        np.save(tmp_path / "in.npy", np.arange(6000, dtype=np.float32).reshape(3000, 2))
        np.save(tmp_path / "in.labels.npy", np.arange(3000.0))
        src, out = tmp_path / "in.npy", tmp_path / "o.npy"
    E.shuffle(src, out, seed=1, index=True)
    real, calls = os.replace, []

    def interrupted(a, b):
        real(a, b)
        calls.append(b)
        if len(calls) == k:  # the worst moment: the file just took its name
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(O.os, "replace", interrupted)
    try:
        E.shuffle(src, out, seed=2, index=True)
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(O.os, "replace", real)
    idx = lirs.open_index(out)  # raised StaleIndexError: new data, the old run's sidecar
    assert idx.n == 3000 and os.path.exists(str(out) + ".lirs")
    assert idx.label_values is not None
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("fmt", ["libsvm", "npy"])
def test_a_run_without_index_leaves_no_older_runs_sidecar_beside_its_data(tmp_path, fmt):
    """A run without --index into an OUT an earlier --index run wrote left that run's sidecar beside
    the new data: `lirs info OUT` then refused it as stale. The last run's files are left, together."""
    if fmt == "libsvm":
        (tmp_path / "in.svm").write_bytes(libsvm_bytes(300, seed=4))
        src, out = tmp_path / "in.svm", tmp_path / "o.svm"
    else:
        np.save(tmp_path / "in.npy", np.arange(600, dtype=np.float32).reshape(300, 2))
        src, out = tmp_path / "in.npy", tmp_path / "o.npy"
    E.shuffle(src, out, seed=1, index=True)
    assert os.path.exists(str(out) + ".lirs")
    E.shuffle(src, out, seed=2)
    assert not os.path.exists(str(out) + ".lirs")
    assert lirs.build_index(out).n == 300  # and indexing it is a fresh index of the new data
    assert leftovers(tmp_path) == []
    # what is not an index there is someone's: refused before any work, with or without --index, kept
    os.unlink(str(out) + ".lirs")
    (tmp_path / (out.name + ".lirs")).write_text("my notes")
    before = open(out, "rb").read()
    for index in (False, True):
        with pytest.raises(UsageError, match=r"\.lirs exists and is not a lirs index"):
            E.shuffle(src, out, seed=3, index=index)
    assert (tmp_path / (out.name + ".lirs")).read_text() == "my notes" and open(out, "rb").read() == before
    os.unlink(str(out) + ".lirs")
    os.mkdir(str(out) + ".lirs")
    with pytest.raises(UsageError, match=r"\.lirs is a directory where the output's index goes"):
        E.shuffle(src, out, seed=3)
    assert leftovers(tmp_path) == []


def test_a_failed_fixed_record_sidecar_keeps_the_previous_output(tmp_path, monkeypatch):
    """``shuffle(x.npy, o.npy, index=True)`` over an existing o.npy built the sidecar after the
    renames: where that failed (ENOSPC), the old output was already gone and the abort removed the
    new data and labels too, leaving nothing. The sidecar is sealed from the temporaries before any
    rename: its failure leaves the previous output, its labels and its sidecar as they were."""
    import errno

    from lirs.external import outputs as O

    np.save(tmp_path / "x.npy", np.arange(400, dtype=np.float32).reshape(100, 4))
    np.save(tmp_path / "x.labels.npy", np.arange(100.0))
    out = tmp_path / "o.npy"
    E.shuffle(tmp_path / "x.npy", out, seed=1, index=True)
    before = {p: (tmp_path / p).read_bytes() for p in ("o.npy", "o.npy.labels.npy", "o.npy.lirs")}

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(out) + ".lirs")

    for name in ("seal_sidecar", "build"):  # the sealing now, the build after the renames before
        if hasattr(O, name):
            monkeypatch.setattr(O, name, full)
    with pytest.raises(OSError, match="No space left"):
        E.shuffle(tmp_path / "x.npy", out, seed=2, index=True)
    assert {p: (tmp_path / p).read_bytes() for p in before} == before
    assert lirs.open_index(out).n == 100
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- errors and CLI


def test_fixed_record_sizes_that_are_not_whole_numbers_are_refused_before_any_work(tmp_path):
    """record_size=16.0 or header_size=16.0 passed the checks and failed with a TypeError in pass 1
    (a pile directory made and removed), "16" with a bare TypeError, 1.5 with a DataError of "1.0
    trailing bytes": each is a UsageError naming the argument, as build_index gives, before any work."""
    (tmp_path / "x.bin").write_bytes(bytes(range(256)) * 4)
    for kw, said in ((dict(record_size=16.0), "record_size must be an int"), (dict(record_size="16"), "record_size"),
                     (dict(record_size=1.5), "record_size"), (dict(record_size=True), "record_size"),
                     (dict(record_size=16, header_size=16.0), "header_size must be an int"),
                     (dict(record_size=16, header_size=-1), "header_size must be >= 0")):
        with pytest.raises(UsageError, match=said):
            E.shuffle(tmp_path / "x.bin", tmp_path / "o.bin", memory="64M", format="fixed", **kw)
        assert os.listdir(tmp_path) == ["x.bin"]
    st = E.shuffle(tmp_path / "x.bin", tmp_path / "o.bin", format="fixed", record_size=np.int64(16), header_size=np.int64(0))
    assert st["records"] == 64


def test_a_header_size_for_a_format_that_has_its_own_layout_is_refused(tmp_path):
    """shuffle(header_size=...) of a LIBSVM file ignored it (the format gives the layout), where
    build_index and `lirs index --header-size` refuse it: refused alike, before any work."""
    (tmp_path / "x.svm").write_text("".join(f"{i % 2} 1:{i}\n" for i in range(50)))
    with pytest.raises(UsageError, match=r"header_size=16\) applies to raw fixed files.*these are libsvm"):
        E.shuffle(tmp_path / "x.svm", tmp_path / "o.svm", memory="64M", header_size=16)
    assert os.listdir(tmp_path) == ["x.svm"]


def test_a_record_size_for_a_format_that_has_its_own_layout_is_refused(tmp_path):
    """shuffle(record_size=...) with an explicit format lines or npy ignored it (the format gives the
    layout), where build_index refuses it: refused alike, naming the option, the CLI with exit 2."""
    (tmp_path / "t.jsonl").write_text("".join(f'{{"i": {i}}}\n' for i in range(50)))
    np.save(tmp_path / "x.npy", np.zeros((10, 4), np.float32))
    for name, fmt, said in (("t.jsonl", "lines", "these are lines .--format lines., whose layout"),
                            ("x.npy", "npy", "these are npy .--format npy., whose rows are 16 bytes")):
        with pytest.raises(UsageError, match=r"--record-size \(record_size=10\) applies to raw fixed files.*" + said):
            E.shuffle(tmp_path / name, tmp_path / ("o-" + name), memory="64M", format=fmt, record_size=10)
        assert cli_main(["shuffle", "--quiet", str(tmp_path / name), "-o", str(tmp_path / ("o-" + name)),
                         "--format", fmt, "--record-size", "10"]) == 2
    assert sorted(os.listdir(tmp_path)) == ["t.jsonl", "x.npy"]


def test_a_file_of_another_format_named_svm_is_refused_before_pass_1(tmp_path):
    good = b"".join(b"%d 1:%d 7:0.5\n" % (i % 2, i) for i in range(5000))  # 5000 lines over 64 KiB
    (tmp_path / "a.svm").write_bytes(good)
    (tmp_path / "bin.svm").write_bytes(np.random.default_rng(3).bytes(200_000))
    (tmp_path / "c.svm").write_bytes(b"1 1:1\n0 2:1\nage,income\n" + good)
    for bad, said in (("bin.svm", "line 1, byte 0: expected a numeric label"), ("c.svm", "line 3, byte 12")):
        with pytest.raises(DataError, match=f"{bad}: {said}"):
            E.shuffle([tmp_path / "a.svm", tmp_path / bad], tmp_path / "o.svm", format="libsvm")
        assert sorted(os.listdir(tmp_path)) == ["a.svm", "bin.svm", "c.svm"]  # no output, no piles
    # a first line longer than 64 KiB: its tokens up to the last blank in the head are checked (none
    # were: a binary file with no newline byte there, a CSV header past 64 KiB were shuffled as LIBSVM)
    (tmp_path / "long.svm").write_bytes(b"1 " + b" ".join(b"%d:1" % i for i in range(1, 20_000)) + b"\n" + good)
    assert E.shuffle(tmp_path / "long.svm", tmp_path / "o.svm")["records"] == 5001
    (tmp_path / "note.svm").write_bytes(b"#" + b"x" * 70_000 + b"\n" + good)  # a comment line: dropped
    assert E.shuffle(tmp_path / "note.svm", tmp_path / "o.svm")["records"] == 5000
    for sep in (b"\t", b"\v", b"\f", b"\r"):  # every blank the grammar splits tokens on is a place to cut
        (tmp_path / "sep.svm").write_bytes(b"1" + b"".join(sep + b"%d:1" % i for i in range(1, 20_000)) + b"\n" + good)
        assert E.shuffle(tmp_path / "sep.svm", tmp_path / "o.svm")["records"] == 5001, sep
    nonl = np.random.default_rng(4).bytes(70_000).replace(b"\n", b"x").replace(b"#", b"x")
    for name, data, said in (("nonl.svm", nonl + b"\n" + good, "line 1, byte 0: expected a numeric label"),
                             ("csv.svm", b",".join(b"col%d" % i for i in range(12_000)) + b"\n" + good,
                              "line 1, byte 0: expected a numeric label"),
                             ("short.svm", b"1 1:1\n0 2:x", "line 2, byte 8")):  # a short file's last line too
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=f"{name}: {said}"):
            E.shuffle(tmp_path / name, tmp_path / "o2.svm")
        assert not os.path.exists(tmp_path / "o2.svm")
    # past the first 64 KiB lines are copied as they are (--index checks them all)
    (tmp_path / "late.svm").write_bytes(good + b"age,income\n")
    assert E.shuffle(tmp_path / "late.svm", tmp_path / "o.svm")["records"] == 5001
    with pytest.raises(DataError, match="late.svm: line 5001"):
        E.shuffle(tmp_path / "late.svm", tmp_path / "o2.svm", index=True)


def test_errors(tmp_path, monkeypatch):
    (tmp_path / "a.svm").write_bytes(b"1 1:1\n")
    (tmp_path / "b.jsonl").write_bytes(b'{"x":1}\n')
    np.save(tmp_path / "d.npy", np.zeros((3, 2), np.float32))
    np.save(tmp_path / "e.npy", np.zeros((3, 2), np.float64))
    with pytest.raises(FileNotFoundError):
        E.shuffle(tmp_path / "missing.svm", tmp_path / "o.svm")
    with pytest.raises(DataError, match="share a format"):
        E.shuffle([tmp_path / "a.svm", tmp_path / "b.jsonl"], tmp_path / "o.svm")
    with pytest.raises(DataError, match="differs"):
        E.shuffle([tmp_path / "d.npy", tmp_path / "e.npy"], tmp_path / "o.npy")
    with pytest.raises(UsageError, match="one of the inputs"):
        E.shuffle(tmp_path / "a.svm", tmp_path / "a.svm")
    with pytest.raises(UsageError, match="too small"):
        E.shuffle(tmp_path / "a.svm", tmp_path / "o.svm", memory="10K")
    with pytest.raises(UsageError, match="more than the 1 records"):
        E.shuffle(tmp_path / "a.svm", tmp_path / "sh", shards=2)
    with pytest.raises(UsageError, match="record-size"):
        E.shuffle(tmp_path / "a.svm", tmp_path / "o.bin", format="fixed")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_bytes(b"")
    with pytest.raises(UsageError, match="not an empty directory"):
        E.shuffle(tmp_path / "a.svm", tmp_path / "full", shards=1)
    with pytest.raises(UsageError, match="is a directory"):
        E.shuffle(tmp_path / "a.svm", tmp_path / "full")
    (tmp_path / "comments.svm").write_bytes(b"# only\n\n")
    with pytest.raises(DataError, match="no records"):
        E.shuffle(tmp_path / "comments.svm", tmp_path / "o.svm")
    monkeypatch.setattr(D, "free_bytes", lambda d: 3)
    with pytest.raises(LirsError, match="not enough free disk space"):
        E.shuffle(tmp_path / "a.svm", tmp_path / "o.svm")
    assert leftovers(tmp_path) == []


def test_the_space_check_says_what_each_filesystem_needs_and_counts_the_sidecar(tmp_path, monkeypatch):
    """With the piles already elsewhere (--tmpdir on another filesystem) the refusal still spoke of
    "piles + output where they share a filesystem" and advised --tmpdir; with ``index`` the
    sidecar (~5 B a LIBSVM record, more than half the output for short lines) was not counted,
    and the shuffle failed at the end on a temporary's ENOSPC. Each filesystem is named with what
    it needs; the sidecar counts."""
    (tmp_path / "a.svm").write_bytes(b"".join(b"%d 1:%d\n" % (i % 2, i % 10) for i in range(20000)))
    out, piles = tmp_path / "o.svm", tmp_path / "piles"
    piles.mkdir()
    ds = E.open_dataset([str(tmp_path / "a.svm")], index=True)
    side = ds.sidecar_bytes(ds.mean_record())
    assert side > 20000 * 5
    real_stat = os.stat
    # piles on a filesystem of their own with room to spare, the output's holds the output alone
    # (the two directories alone: os.stat is everyone's, and the publish lock compares devices)
    monkeypatch.setattr(D.os, "stat", lambda p, *a, **k: os.stat_result(
        (*real_stat(p)[:2], 7 if str(p) == str(piles) else 8, *real_stat(p)[3:]))
        if str(p) in (str(piles), str(tmp_path)) else real_stat(p, *a, **k))
    monkeypatch.setattr(D, "free_bytes", lambda d: 1 << 40 if str(d) == str(piles) else ds.out_bytes + 1000)
    with pytest.raises(LirsError) as e:
        E.shuffle(tmp_path / "a.svm", out, tmpdir=piles, index=True)
    said = str(e.value)
    assert f"the output on {tmp_path} needs about" in said and "sidecar" in said and "--tmpdir" not in said
    assert not out.exists() and os.listdir(piles) == []
    E.shuffle(tmp_path / "a.svm", out, tmpdir=piles)  # without its sidecar, the output fits
    monkeypatch.setattr(D, "free_bytes", lambda d: 1000 if str(d) == str(piles) else 1 << 40)
    with pytest.raises(LirsError, match=r"the piles \(--tmpdir\) on .*piles needs about .* name another --tmpdir"):
        E.shuffle(tmp_path / "a.svm", out, tmpdir=piles)
    monkeypatch.setattr(D.os, "stat", real_stat)
    monkeypatch.setattr(D, "free_bytes", lambda d: ds.pile_bytes + ds.out_bytes + 1000)
    with pytest.raises(LirsError, match=r"piles .* \+ output .* \+ sidecar .*sharing its filesystem.*use --tmpdir"):
        E.shuffle(tmp_path / "a.svm", out, tmpdir=piles, index=True)


@pytest.mark.parametrize("where", ["data", "sidecar"])
def test_a_full_disk_names_the_output_not_its_temporary(tmp_path, monkeypatch, where):
    """ENOSPC while writing the output or its sidecar named the hidden temporary
    (``.o.svm.lirs-tmp-PID-TID``), a file the user never asked for and that is gone by then: the
    error names the output (or sidecar) it was to become."""
    import errno

    import lirs.external.writer as W
    import lirs.sidecar as S

    (tmp_path / "a.svm").write_bytes(libsvm_bytes(300, seed=2))
    out = tmp_path / "o.svm"
    if where == "data":
        def full(fd, data, off):
            raise D._named(OSError(errno.ENOSPC, "No space left on device"), fd)
        monkeypatch.setattr(W, "pwrite_all", full)
    else:
        def full(self, b):
            raise OSError(errno.ENOSPC, "No space left on device", self.dest)
        monkeypatch.setattr(S.SidecarWriter, "_put", full)
    with pytest.raises(OSError) as e:
        E.shuffle(tmp_path / "a.svm", out, index=True)
    assert e.value.errno == errno.ENOSPC
    assert e.value.filename == str(out if where == "data" else str(out) + ".lirs")
    assert leftovers(tmp_path) == [] and sorted(os.listdir(tmp_path)) == ["a.svm"]


@pytest.mark.parametrize("out,index,what", [
    ("x", False, "would be the labels file of the input"),  # its labels, x.labels.npy: the input's preferred name
    ("x.npy.labels.npy", False, "would be the labels file of the input"),  # the data over the input's labels
    ("x.npy.lirs", False, "would be read back as a lirs index"),  # over the input's sidecar (named as one)
    ("x.npy.lirs.npy", True, None),                  # an unrelated name: allowed
])
def test_an_output_never_overwrites_what_belongs_to_an_input(tmp_path, out, index, what):
    """The shuffle's output, its labels file and its index must not land on an input's labels file
    or sidecar (either labels name, existing or not): written there, the input would be indexed
    with the shuffled labels, or its index destroyed. Refused before anything is written."""
    x = make_npy(tmp_path / "x.npy", 40, seed=3)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    if what is None:
        E.shuffle(tmp_path / "x.npy", tmp_path / out, index=index, progress=False)
        assert np.array_equal(np.sort(np.load(tmp_path / out)[:, 0]), x[:, 0])
        return
    with pytest.raises(UsageError, match=what):
        E.shuffle(tmp_path / "x.npy", tmp_path / out, index=index, progress=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_two_labels_files_beside_an_npy_are_refused(tmp_path):
    """X.labels.npy and X.npy.labels.npy both beside X.npy: which holds its labels is not known
    (one may be another file's, a shuffle's output say), so indexing names both instead of
    picking one."""
    make_npy(tmp_path / "x.npy", 10, seed=1)
    np.save(tmp_path / "x.labels.npy", np.zeros(10))
    with pytest.raises(DataError, match=r"two labels files beside it, .*x\.labels\.npy and .*x\.npy\.labels\.npy"):
        lirs.build_index(str(tmp_path / "x.npy"), progress=False)


def test_cli(tmp_path, capsys, monkeypatch):
    data = libsvm_bytes(50, seed=1, comments=True)
    (tmp_path / "in.svm").write_bytes(data)
    rc = cli_main(["shuffle", str(tmp_path / "in.svm"), "-o", str(tmp_path / "o.svm"), "--memory", "4M",
                   "--seed", "3", "--index", "--json", "--quiet"])
    assert rc == 0
    st = json.loads(capsys.readouterr().out)
    assert st["records"] == 50 and st["sidecars"] == [str(tmp_path / "o.svm.lirs")]
    assert Counter(out_records(tmp_path / "o.svm")) == Counter(text_records(data, "libsvm"))
    rc = cli_main(["shuffle", str(tmp_path / "in.svm"), "-o", str(tmp_path / "sh"), "--shards", "2", "--quiet"])
    assert rc == 0 and "2 shards" in capsys.readouterr().out
    assert cli_main(["shuffle", str(tmp_path / "in.svm"), "-o", str(tmp_path / "in.svm")]) == 2
    assert "one of the inputs" in capsys.readouterr().err
    assert cli_main(["shuffle", str(tmp_path / "nope.svm"), "-o", str(tmp_path / "x.svm")]) == 1
    capsys.readouterr()
    for out, tmp in ((tmp_path / "no" / "x.svm", ()), (tmp_path / "x.svm", ("--tmpdir", str(tmp_path / "no")))):
        assert cli_main(["shuffle", str(tmp_path / "in.svm"), "-o", str(out), *tmp, "--quiet"]) == 2  # usage
        assert str(tmp_path / "no") in capsys.readouterr().err and not (tmp_path / "x.svm").exists()
    assert cli_main(["shuffle", str(tmp_path / "in.svm"), "-o", str(tmp_path / "x.svm"), "--memory", "1K"]) == 2
    assert cli_main(["shuffle", str(tmp_path / "in.svm"), "-o", str(tmp_path / "x.svm"), "--memory", "lots"]) == 2
    monkeypatch.setattr(D, "free_bytes", lambda d: 0)
    assert cli_main(["shuffle", str(tmp_path / "in.svm"), "-o", str(tmp_path / "x.svm")]) == 1
    assert "not enough free disk space" in capsys.readouterr().err


def _cli_shuffle(capsys, *args) -> dict:
    """`lirs shuffle ... --json` in this process: its statistics."""
    assert cli_main(["shuffle", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_options_that_do_not_choose_the_order_leave_the_bytes_alone(tmp_path, capsys):
    """Same input, --seed and --memory: `lirs shuffle` writes the same records in the same order
    with or without --index, --shards (the parts concatenate to it), --tmpdir, --format, --quiet."""
    (tmp_path / "in.svm").write_bytes(libsvm_bytes(60_000, seed=8, comments=True))
    (tmp_path / "piles").mkdir()
    base = ["--memory", "2M", "--seed", "5"]
    ref = _cli_shuffle(capsys, tmp_path / "in.svm", "-o", tmp_path / "ref.svm", *base, "--quiet")
    assert ref["piles"] > 2  # several piles, so the order depends on the pile draws
    want = open(ref["outputs"][0], "rb").read()
    variants = {"index": ["--index"], "index-quiet": ["--index", "--quiet"],
                "tmpdir": ["--tmpdir", tmp_path / "piles", "--index"], "format": ["--format", "libsvm"],
                "shards": ["--shards", "3"], "shards-index": ["--shards", "3", "--index"]}
    for name, extra in variants.items():
        out = tmp_path / (name if "--shards" in extra else f"{name}.svm")
        st = _cli_shuffle(capsys, tmp_path / "in.svm", "-o", out, *base, *extra)
        got = b"".join(open(p, "rb").read() for p in st["outputs"])
        assert (st["piles"], st["splits"]) == (ref["piles"], ref["splits"]), name
        assert got == want, f"{name}: other bytes than without {extra}"
        assert ("sidecars" in st) == ("--index" in extra)
    assert lirs.open_index(tmp_path / "index.svm").n == ref["records"]


def test_npy_rows_and_labels_do_not_depend_on_index_or_shards(tmp_path):
    make_npy(tmp_path / "x.npy", 30_000, seed=2, shape=(8,))
    got = {}
    for name, kw in {"plain": {}, "index": {"index": True}, "shards": {"shards": 2, "index": True}}.items():
        st = E.shuffle(tmp_path / "x.npy", tmp_path / name, memory="2M", seed=6, progress=False, **kw)
        got[name] = (st["piles"], np.concatenate([np.load(p) for p in st["outputs"]]),
                     np.concatenate([np.load(p) for p in st["labels"]]))
    assert got["plain"][0] > 1
    for name in ("index", "shards"):
        assert got[name][0] == got["plain"][0]
        np.testing.assert_array_equal(got[name][1], got["plain"][1])
        np.testing.assert_array_equal(got[name][2], got["plain"][2])


@pytest.mark.slow
@pytest.mark.parametrize("signame, status, said", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_ctrl_c_in_a_subprocess_cleans_up(tmp_path, signame, status, said):
    """A real SIGINT (or SIGTERM: `kill`, a scheduler's stop) during pass 1: exit status 130 (143),
    no output, no piles. (Pass 1 is slowed down enough that the signal always lands inside it.)"""
    import signal
    import time

    data = libsvm_bytes(2000, seed=1) * 40
    (tmp_path / "in.svm").write_bytes(data)
    code = ("import sys, time; import lirs.external.api as E; from lirs.kernels import external as K\n"
            "real = K.scatter_lines\n"
            "def slow(*a):\n"
            "    print('started', flush=True); time.sleep(3); return real(*a)\n"
            "K.scatter_lines = slow\n"
            "from lirs.cli import main; sys.exit(main(sys.argv[1:]))\n")
    p = subprocess.Popen([sys.executable, "-c", code, "shuffle", str(tmp_path / "in.svm"), "-o",
                          str(tmp_path / "o.svm"), "--memory", "2M", "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                         # a test run in the background inherits SIGINT ignored, and Python then
                         # installs no KeyboardInterrupt handler: give the child the default
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout.readline().strip() == b"started"
    time.sleep(0.2)
    p.send_signal(getattr(signal, signame))
    _, err = p.communicate(timeout=60)
    assert p.returncode == status, err
    assert err.decode().endswith(f"lirs shuffle: {said}\n"), err
    assert sorted(os.listdir(tmp_path)) == ["in.svm"]


def test_shuffle_index_refuses_labels_an_index_cannot_take_before_any_pass(tmp_path):
    """Labels of shape (n, 2) with --index: both passes ran, the outputs took their final names,
    then the index failed naming the *output's* labels. Refused at once, naming the input's."""
    np.save(tmp_path / "x.npy", np.zeros((50, 3), np.float32))
    np.save(tmp_path / "x.labels.npy", np.zeros((50, 2)))
    with pytest.raises(DataError, match=r"x.labels.npy: labels of shape \(50, 2\).*expected numbers of shape \(50,\)"):
        E.shuffle(tmp_path / "x.npy", tmp_path / "o.npy", index=True)
    assert sorted(os.listdir(tmp_path)) == ["x.labels.npy", "x.npy"]
    st = E.shuffle(tmp_path / "x.npy", tmp_path / "o.npy")  # without an index, any rows travel with theirs
    assert np.load(st["labels"][0]).shape == (50, 2)


def test_a_sidecar_that_fails_at_its_commit_leaves_no_temporary(tmp_path, monkeypatch):
    """--index: the output's sidecar failing as it is put in place (ENOSPC at its fsync, a rename
    refused) leaves no `.NAME.lirs-tmp-` file beside the output."""
    import errno

    import lirs.sidecar as S

    (tmp_path / "in.svm").write_bytes(libsvm_bytes(300, seed=2))

    def full(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(S.SidecarWriter, "publish", full)
    with pytest.raises(OSError, match="No space"):
        E.shuffle(tmp_path / "in.svm", tmp_path / "o.svm", index=True, seed=1)
    assert not [n for n in os.listdir(tmp_path) if ".lirs-tmp-" in n]


def test_names_longer_than_the_filesystem_allows_are_refused_before_any_work(tmp_path):
    """A data file of 251 bytes has a sidecar name of 256: refused before the scan (the rename
    failed after it, every time a Loader opened the data), for `lirs index`, a Loader and the
    sidecar of a shuffle's output."""
    long = tmp_path / ("x" * 247 + ".svm")
    long.write_bytes(libsvm_bytes(50, seed=3))
    for run in (lambda: lirs.build_index(str(long), progress=False), lambda: lirs.Loader(str(long), 8)):
        # the way out names lirs index's -o: a Loader (or lirs epoch) that indexes on first use has none
        with pytest.raises(UsageError, match=r"its name is 256 bytes, longer than its filesystem allows \(255\); "
                                             r"index the data under a shorter name \(lirs index DATA -o DIR/NAME.lirs\)"):
            run()
    (tmp_path / "in.svm").write_bytes(libsvm_bytes(50, seed=3))
    with pytest.raises(UsageError, match="its name is 256 bytes"):
        E.shuffle(tmp_path / "in.svm", tmp_path / ("y" * 247 + ".svm"), index=True, seed=1)
    assert sorted(os.listdir(tmp_path)) == sorted([long.name, "in.svm"])


@pytest.mark.parametrize("name,said", [("o.svm.gz", "compressed"), ("o.lirs", "a lirs index"),
                                       ("o.jsonl.zst", "compressed")])
def test_an_output_named_as_what_it_is_not_is_refused(tmp_path, name, said):
    """The records are written plain: `-o o.svm.gz` was refused when read back (a gzip that is
    not), `-o o.lirs` taken for an index (and it could replace one)."""
    (tmp_path / "in.svm").write_bytes(libsvm_bytes(40, seed=4))
    with pytest.raises(UsageError, match=f"would be read back as {said} \\(its extension\\), but lirs shuffle writes "
                                         "plain records"):
        E.shuffle(tmp_path / "in.svm", tmp_path / name, index=True, seed=1)
    assert os.listdir(tmp_path) == ["in.svm"]
    E.shuffle(tmp_path / "in.svm", tmp_path / name, shards=2, seed=1)  # a directory of shards: any name
    assert sorted(os.listdir(tmp_path / name)) == ["part-00000.svm", "part-00001.svm"]


def test_a_labels_file_beside_an_npy_output_that_is_not_the_run_s_is_refused_up_front(tmp_path):
    """An old output's labels kept beside rows that have none (read as their labels), and an
    `o.labels.npy` beside the `o.npy.labels.npy` a run writes (found only after both passes): both
    refused before pass 1. The run's own labels file is replaced as before."""
    make_npy(tmp_path / "x.npy", 60, seed=1)
    np.save(tmp_path / "u.npy", np.arange(120, dtype=np.float32).reshape(60, 2))
    E.shuffle(tmp_path / "x.npy", tmp_path / "o.npy", seed=1)
    E.shuffle(tmp_path / "x.npy", tmp_path / "o.npy", seed=2)  # its own labels: replaced
    with pytest.raises(UsageError, match=r"o.npy.labels.npy lies beside the output and would be read as its labels "
                                         r"\(its records have none\)"):
        E.shuffle(tmp_path / "u.npy", tmp_path / "o.npy", seed=3)
    np.save(tmp_path / "o.bin.labels.npy", np.zeros(60))  # .npy rows under another name: read so too
    with pytest.raises(UsageError, match=r"o.bin.labels.npy lies beside the output"):
        E.shuffle(tmp_path / "u.npy", tmp_path / "o.bin", seed=3)
    np.save(tmp_path / "p.labels.npy", np.zeros(60))
    with pytest.raises(UsageError, match=r"p.labels.npy lies beside the output and would be read as its labels "
                                         r"\(this shuffle writes .*p.npy.labels.npy\)"):
        E.shuffle(tmp_path / "x.npy", tmp_path / "p.npy", seed=3, index=True)
    assert not (tmp_path / "p.npy").exists() and not (tmp_path / "o.bin").exists() and leftovers(tmp_path) == []


def test_places_that_would_feed_the_output_back_are_refused_up_front(tmp_path):
    """A single output inside the input directory would be read as more of the dataset (every
    record twice); piles inside the --shards directory block its rename after both passes."""
    d = tmp_path / "ds"
    d.mkdir()
    (d / "a.svm").write_bytes(libsvm_bytes(30, seed=1))
    with pytest.raises(UsageError, match="lies in the input directory"):
        E.shuffle(d, d / "s.svm", seed=1)
    (tmp_path / "link").symlink_to(d)
    with pytest.raises(UsageError, match="lies in the input directory"):  # the same directory through a link
        E.shuffle(tmp_path / "link", d / "s.svm", seed=1)
    E.shuffle(d, tmp_path / "s.svm", seed=1)  # beside it: fine
    (tmp_path / "sh").mkdir()
    with pytest.raises(UsageError, match="--tmpdir .* lies inside the output directory"):
        E.shuffle(d, tmp_path / "sh", shards=2, tmpdir=tmp_path / "sh", seed=1)
    assert os.listdir(d) == ["a.svm"] and os.listdir(tmp_path / "sh") == []


def test_shards_are_named_for_their_records_not_an_extension_of_another_format(tmp_path):
    """Part files took the first input's extension: lines of an `in.svm` read with --format lines
    became `part-*.svm` (read back as LIBSVM), raw records of an `.npy` `part-*.npy` (no header)."""
    (tmp_path / "in.svm").write_bytes(b"a\n\nb\nc\n")
    E.shuffle(tmp_path / "in.svm", tmp_path / "l", shards=2, format="lines", seed=1)
    np.save(tmp_path / "x.npy", np.arange(40, dtype=np.float32).reshape(20, 2))
    E.shuffle(tmp_path / "x.npy", tmp_path / "r", shards=2, format="fixed", record_size=8, seed=1)
    assert [sorted(os.listdir(tmp_path / k)) for k in "lr"] == [["part-00000.bin", "part-00001.bin"]] * 2
    with pytest.raises(UsageError, match="would be read back as libsvm .*; name it with .bin$"):
        E.shuffle(tmp_path / "in.svm", tmp_path / "o.svm", format="lines", seed=1)


def test_shards_take_an_extension_only_where_it_names_the_records_format(tmp_path):
    """Part files kept any extension naming no format: TFDS shards `x.tfrecord-0000K-of-00002` gave
    `part-00000.tfrecord-00000-of-00002` (every part "shard 0 of 2"), `app.jsonl.1` `part-00000.1`
    and `data.v2` `part-00000.v2`. A rotated file's number and a TFDS suffix are dropped; an
    extension naming no format gives `.bin`."""
    from lirs.tfrecord import encode

    for k in range(2):
        (tmp_path / f"x.tfrecord-0000{k}-of-00002").write_bytes(encode([b"r%d-%d" % (k, i) for i in range(9)]).tobytes())
    (tmp_path / "app.jsonl.1").write_bytes(b"".join(b'{"i": %d}\n' % i for i in range(9)))
    (tmp_path / "data.v2").write_bytes(b"".join(b"line %d\n" % i for i in range(9)))
    cases = {"t": ([tmp_path / "x.tfrecord-00000-of-00002", tmp_path / "x.tfrecord-00001-of-00002"], ".tfrecord"),
             "j": ([tmp_path / "app.jsonl.1"], ".jsonl"), "v": ([tmp_path / "data.v2"], ".bin")}
    for out, (inputs, ext) in cases.items():
        st = E.shuffle(inputs, tmp_path / out, shards=2, seed=1, index=True)
        assert sorted(os.listdir(tmp_path / out)) == [f"part-0000{k}{e}" for k in range(2) for e in (ext, ext + ".lirs")]
        assert lirs.build_index(tmp_path / out).n == st["records"]  # read back as one dataset


def test_index_writes_the_sidecar_lirs_index_out_would(tmp_path):
    """`--index` built TFRecord and .npy sidecars with the detected format recorded as given
    (`format_given`), unlike `lirs index OUT`'s: a later stale-index error advised
    `lirs index OUT --format tfrecord`. The format is recorded as given only where it was."""
    from lirs.freshness import format_options
    from lirs.tfrecord import encode

    (tmp_path / "in.tfrecord").write_bytes(encode([b"p%d" % i * 7 for i in range(50)]).tobytes())
    np.save(tmp_path / "in.npy", np.arange(100, dtype=np.float32).reshape(50, 2))
    (tmp_path / "in.svm").write_bytes(b"".join(b"%d 1:%d\n" % (i % 2, i) for i in range(50)))
    for name, fmt, given in (("in.tfrecord", "auto", None), ("in.npy", "auto", None),
                             ("in.svm", "lines", "lines"), ("in.tfrecord", "tfrecord", "tfrecord")):
        out = tmp_path / f"o-{fmt}{os.path.splitext(name)[1] if fmt == 'auto' else '.bin'}"
        E.shuffle(tmp_path / name, out, index=True, seed=1, format=fmt)
        shuffled = lirs.open_index(out)
        built = lirs.build_index(out, full=True, format=fmt)
        assert shuffled.meta == built.meta and shuffled.meta["format_given"] == given, name
        assert format_options(shuffled) == ("" if given is None else f" --format {given}")


def test_index_of_npy_and_fixed_shards_names_the_shards_not_the_staging_directory(tmp_path):
    """The sidecar of each `.npy` or fixed-record shard named the staging directory (gone once it
    became OUT) as its data's path: not the sidecar `lirs index` writes, and a missing shard's error
    named a folder that never was the data's."""
    np.save(tmp_path / "a.npy", np.arange(120, dtype="<f4").reshape(60, 2))
    np.save(tmp_path / "a.labels.npy", np.arange(60.0))
    (tmp_path / "f.bin").write_bytes(bytes(range(256)) * 4)
    for name, kw in (("a.npy", {}), ("f.bin", {"record_size": 16})):
        st = E.shuffle(tmp_path / name, tmp_path / f"sh-{name}", shards=3, seed=2, index=True, **kw)
        for out in st["outputs"]:
            sidecar = out + ".lirs"
            ref = os.path.join(os.path.dirname(out), "ref.lirs")
            lirs.build_index(out, out=ref, full=True, **kw)
            assert open(sidecar, "rb").read() == open(ref, "rb").read(), out
            os.unlink(ref)
            assert lirs.open_index(sidecar).paths == (os.path.abspath(out),)
    assert leftovers(tmp_path) == []


def test_a_full_disk_under_shuffles_labels_scratch_file_names_it_and_tmpdir(tmp_path, monkeypatch, capsys):
    """`lirs shuffle --index` of a LIBSVM file printed a bare "No space left on device (... use -o
    to write elsewhere)" when the sidecar's labels scratch file (anonymous, in the pile directory)
    filled its disk: it is named, and --tmpdir (which moves it) advised."""
    import tempfile

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full to stand for a full disk")
    (tmp_path / "a.svm").write_bytes(b"".join(b"%d 1:%d\n" % (i % 2, i) for i in range(30000)))
    # every write to the labels' scratch file fails as a full disk's does (ENOSPC)
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **k: open("/dev/full", "r+b", buffering=0))  # noqa: SIM115
    assert cli_main(["shuffle", str(tmp_path / "a.svm"), "-o", str(tmp_path / "o.svm"), "--index", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "(the index's temporary labels file there): No space left on device" in err, err
    assert "use --tmpdir to write elsewhere" in err and "-o to" not in err
    assert leftovers(tmp_path) == []


def test_a_pile_that_fills_its_disk_names_tmpdir():
    import errno

    from lirs.cli import describe_os_error

    e = OSError(errno.ENOSPC, "No space left on device", "/d/.lirs-shuffle-12-ab/p0-0.pile")
    assert describe_os_error(e, "shuffle").endswith("(no space left on the device; free some or use --tmpdir to "
                                                    "write elsewhere)")
