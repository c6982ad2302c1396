"""Incremental `lirs index`: only what changed is scanned again, and the sidecar written is byte
for byte the one a full re-index writes (offsets, labels, feature range, qid count, checksums)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import lirs
from lirs import incremental as I
from lirs.content import SUM_BLOCK


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIRS_CACHE_DIR", str(tmp_path / "cache"))


def _lines(n, seed, *, lo=1, hi=400):
    """``n`` LIBSVM lines (qids, trailing comments, comment lines among them) as text."""
    rng = np.random.default_rng(seed)
    lab = rng.integers(0, 4, n)
    base = rng.integers(lo, hi - 20, n)
    val = rng.integers(0, 1000, n)
    out = []
    for i in range(n):
        b, v = int(base[i]), int(val[i])
        feats = " ".join(f"{b + d}:{v}.{d}" for d in (0, 3, 7, 12)[:i % 5])
        qid = f" qid:{i % 3}" if i % 97 == 0 else ""
        com = "  # note" if i % 211 == 0 else ""
        out.append(f"{lab[i]}{qid} {feats}{com}")
        if i % 503 == 0:
            out.append("# a comment line")
    return "\n".join(out) + "\n"


@pytest.fixture
def spy(monkeypatch):
    """The plans incremental builds took (one list per build)."""
    seen = []
    real = I.plan_update

    def plan(*a, **k):
        p = real(*a, **k)
        seen.append(p)
        return p

    monkeypatch.setattr("lirs.build.plan_update", plan)
    return seen


def _same_as_full(path, *, out=None, **kw):
    side = out or path + ".lirs"
    lirs.build_index(path, out=out, progress=False, **kw)
    inc = open(side, "rb").read()
    lirs.build_index(path, out=out, progress=False, full=True, **kw)
    assert inc == open(side, "rb").read()


def _bump(p):
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


@pytest.mark.parametrize("chunk", [16 << 20, 300_000])
def test_append_rescans_the_tail_and_writes_the_full_sidecar(tmp_path, spy, chunk, monkeypatch):
    p = tmp_path / "d.svm"
    p.write_text(_lines(150_000, 1))
    lirs.build_index(str(p), progress=False, chunk_bytes=chunk)
    spy.clear()
    size = p.stat().st_size
    assert size > 2 * SUM_BLOCK
    with open(p, "a") as f:
        f.write(_lines(500, 2, lo=0, hi=900))  # new min and max feature index, new labels
    from lirs.scanner import Tap

    copied = []
    real = Tap.append_blocks
    monkeypatch.setattr(Tap, "append_blocks", lambda self, *a: copied.append(a[-1] - a[-2]) or real(self, *a))
    _same_as_full(str(p), chunk_bytes=chunk)
    assert copied and copied[0] >= spy[0][0].rec - 1024  # the kept blocks' words copied as they were
    keep = spy[0][0]
    assert keep is not None and not keep.whole and keep.byte >= size - 2 * SUM_BLOCK


def test_an_unterminated_last_line_continued_by_an_append(tmp_path, spy):
    p = tmp_path / "d.svm"
    text = _lines(150_000, 3)
    p.write_text(text[:-1])  # no newline at the end
    lirs.build_index(str(p), progress=False)
    spy.clear()
    with open(p, "a") as f:
        f.write(" 999:1\n2 1:1\n")
    _same_as_full(str(p))
    assert lirs.open_index(str(p)).meta["max_index"] == 999
    assert spy[0][0] is not None and not spy[0][0].whole


@pytest.mark.parametrize("where", [0.7, 0.85, 0.99])  # past the second MiB: restarts after the first
def test_an_edit_in_the_middle(tmp_path, spy, where):
    p = tmp_path / "d.svm"
    p.write_text(_lines(150_000, 4))
    lirs.build_index(str(p), progress=False)
    spy.clear()
    b = bytearray(p.read_bytes())
    at = b.index(b"\n", int(len(b) * where)) + 1
    b[at:at] = b"3 5:5 7000:1\n"  # one more record with a new largest index
    p.write_bytes(bytes(b))
    _same_as_full(str(p))
    # a same-size edit with a moved mtime (a label changed)
    b = bytearray(p.read_bytes())
    at = b.index(b"\n1 ", int(len(b) * where)) + 1
    b[at] = ord("2")
    p.write_bytes(bytes(b))
    _bump(p)
    _same_as_full(str(p))
    assert all(k is not None and not k.whole for k in (spy[0][0], spy[1][0]))


def test_truncation_and_touch(tmp_path, spy):
    p = tmp_path / "d.svm"
    p.write_text(_lines(150_000, 5))
    lirs.build_index(str(p), progress=False)
    b = p.read_bytes()
    p.write_bytes(b[:b.index(b"\n", len(b) * 8 // 10) + 1])
    _same_as_full(str(p))
    assert spy[1][0] is not None and not spy[1][0].whole
    _bump(p)
    _same_as_full(str(p))
    assert spy[-1][0].whole  # touched: nothing scanned


def test_chunk_size_does_not_change_the_sidecar(tmp_path):
    p = tmp_path / "d.svm"
    p.write_text(_lines(40_000, 6))
    lirs.build_index(str(p), progress=False, chunk_bytes=16 << 20)
    a = open(str(p) + ".lirs", "rb").read()
    lirs.build_index(str(p), progress=False, chunk_bytes=100_003, full=True)
    assert a == open(str(p) + ".lirs", "rb").read()


def test_a_directory_notices_added_removed_and_changed_files(tmp_path, spy):
    d = tmp_path / "set"
    d.mkdir()
    for i in range(4):
        (d / f"part{i}.svm").write_text(_lines(3000, 10 + i))
    lirs.build_index(str(d), progress=False)
    (d / "part4.svm").write_text(_lines(2000, 20))  # added
    os.unlink(d / "part1.svm")                      # removed
    with open(d / "part2.svm", "a") as f:           # changed
        f.write("1 3:3\n")
    idx = lirs.build_index(str(d), progress=False)
    assert [os.path.basename(x) for x in idx.paths] == ["part0.svm", "part2.svm", "part3.svm", "part4.svm"]
    plan = spy[-1]
    assert plan[0].whole and plan[2].whole and plan[3] is None
    inc = open(str(d) + ".lirs", "rb").read()
    lirs.build_index(str(d), progress=False, full=True)
    assert inc == open(str(d) + ".lirs", "rb").read()
    with lirs.Loader(str(d), 256, granularity="instance") as ld:
        assert sum(len(b.ids) for b in ld.epoch(0)) == idx.n == 3000 * 2 + 3001 + 2000


@pytest.mark.parametrize("fmt", ["lines", "tfrecord"])
def test_append_to_lines_and_tfrecord(tmp_path, spy, fmt):
    from lirs.tfrecord import encode

    rng = np.random.default_rng(8)
    if fmt == "lines":
        p = tmp_path / "d.jsonl"
        p.write_text("".join(f'{{"a": {i}}}\n' for i in range(80_000)))
        more = "".join(f'{{"b": {i}}}\n' for i in range(100)).encode()
    else:
        p = tmp_path / "d.tfrecord"
        p.write_bytes(encode(rng.integers(0, 256, int(rng.integers(1, 90))).astype(np.uint8).tobytes()
                             for _ in range(40_000)).tobytes())
        more = encode([b"x" * 10, b"yy"]).tobytes()
    lirs.build_index(str(p), progress=False)
    spy.clear()
    with open(p, "ab") as f:
        f.write(more)
    _same_as_full(str(p))
    assert spy[0][0] is not None and not spy[0][0].whole


def test_an_append_is_planned_as_one_but_an_earlier_edit_is_caught_before_commit(tmp_path, spy, monkeypatch):
    """The tail is scanned while the old bytes are checked; an edit among them (same size, so only
    the checksums see it) throws that work away and the exact plan is built instead."""
    p = tmp_path / "d.svm"
    p.write_text(_lines(150_000, 9))
    lirs.build_index(str(p), progress=False)
    spy.clear()
    b = bytearray(p.read_bytes())
    old = len(b)
    at = b.index(b"\n1 ", len(b) * 7 // 10) + 1
    b[at] = ord("2")  # a label changed in the third MiB of four
    p.write_bytes(bytes(b) + _lines(300, 10).encode())
    commits = []
    real_publish = lirs.sidecar.SidecarWriter.publish
    monkeypatch.setattr(lirs.sidecar.SidecarWriter, "publish", lambda self: commits.append(1) or real_publish(self))
    _same_as_full(str(p))
    guess, exact = spy[0][0], spy[1][0]
    assert guess.pending is not None and guess.byte >= old - 2 * SUM_BLOCK  # planned as an append
    assert exact.pending is None and exact.byte <= at < guess.byte  # rescanned from before the edit
    assert len(commits) == 2  # the guessed build renamed nothing (the second: the full re-index)
    assert lirs.open_index(str(p)).labels[lirs.open_index(str(p)).offset_table[:].searchsorted(at)] == 2
    # an append alone: the guess holds, one plan
    spy.clear()
    with open(p, "a") as f:
        f.write(_lines(300, 11))
    _same_as_full(str(p))
    assert len(spy) == 1 and spy[0][0].pending is not None


def test_a_failed_check_under_a_guessed_plan_names_the_file_and_leaves_the_old_sidecar(tmp_path, monkeypatch):
    import errno

    from lirs import content as C

    p = tmp_path / "d.svm"
    p.write_text(_lines(150_000, 12))
    lirs.build_index(str(p), progress=False)
    before = open(str(p) + ".lirs", "rb").read()
    with open(p, "a") as f:
        f.write(_lines(300, 13))

    def broken(path, sums, size, **kw):
        raise OSError(errno.EIO, "Input/output error", path)

    monkeypatch.setattr(C, "first_changed_block", broken)
    with pytest.raises(OSError, match="Input/output error") as e:
        lirs.build_index(str(p), progress=False)
    assert e.value.filename == str(p)
    assert open(str(p) + ".lirs", "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["cache", "d.svm", "d.svm.lirs"] or \
        sorted(os.listdir(tmp_path)) == ["d.svm", "d.svm.lirs"]


@pytest.mark.parametrize("case", ["new value", "past 256 values", "past 65535 values", "fewer values"])
def test_kept_labels_are_coded_as_a_full_index_codes_them(tmp_path, case):
    """Kept records' label codes are translated, not rescanned: whatever the append does to the set
    of label values (a new one between the old ones, a wider code type, too many for codes), the
    sidecar is the full index's."""
    rng = np.random.default_rng(14)
    n = 70_000 if case == "past 65535 values" else 120_000
    if case == "new value":
        old, new = rng.choice([-1.0, 1.0], n), np.full(50, 0.5)
    elif case == "past 256 values":
        old, new = rng.integers(0, 200, n).astype(float), np.arange(200, 300, 2).astype(float)
    elif case == "past 65535 values":
        old, new = np.arange(n) * 0.25, np.full(50, 1e9)
    else:  # the truncated tail held the only 7s
        old, new = np.where(np.arange(n) >= n - 2000, 7.0, rng.choice([1.0, 2.0], n)), np.full(50, 1.0)

    def text(labels, seed):
        r = np.random.default_rng(seed)
        return "".join(f"{float(x)!r} {int(r.integers(1, 50))}:{int(r.integers(1, 9))}\n" for x in labels)

    p = tmp_path / "d.svm"
    body = text(old, 1)
    p.write_text(body)
    lirs.build_index(str(p), progress=False)
    if case == "fewer values":
        body = body[:body.index("7.0 ")]
        p.write_text(body)  # cut inside a later block: the kept records are those before it
    with open(p, "a") as f:
        f.write(text(new, 2))
    _same_as_full(str(p))
    idx = lirs.open_index(str(p))
    k = len(body.splitlines())
    want = np.concatenate([old[:k], new])
    assert np.array_equal(idx.labels, want)


def test_an_append_keeps_labels_equal_in_value_apart(tmp_path, spy):
    """-0 and 0, NaNs of either sign: kept labels and appended ones merged with them are coded by
    their bits, as sklearn reads them, not folded into the first seen."""
    from sklearn.datasets import load_svmlight_file

    toks = ["-0", "0", "1", "nan", "-nan"]
    p = tmp_path / "d.svm"
    p.write_text("".join(f"{toks[i % 5]} 1:{i % 7 + 1} 2:3\n" for i in range(300_000)))
    lirs.build_index(str(p), progress=False)
    spy.clear()
    with open(p, "a") as f:
        f.write("-nan 1:1\n0 1:2\n-0 1:3\n2 1:4\n")
    _same_as_full(str(p))
    assert spy[0][0] is not None and not spy[0][0].whole  # the old records kept, their codes translated
    _, want = load_svmlight_file(str(p))
    assert lirs.open_index(str(p)).labels.view(np.uint64).tolist() == want.view(np.uint64).tolist()


def test_a_forked_child_indexes_with_pools_of_its_own(tmp_path):
    """The checksum pools are made once per process: a child forked after the parent used them
    (a DataLoader worker) gets new ones instead of queueing work for threads it does not have."""
    import multiprocessing

    p = tmp_path / "d.svm"
    p.write_text(_lines(150_000, 15))
    lirs.build_index(str(p), progress=False)
    with open(p, "a") as f:
        f.write(_lines(300, 16))
    lirs.build_index(str(p), progress=False)  # the parent's pools now exist, threads and all
    with open(p, "a") as f:
        f.write(_lines(300, 17))

    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=lirs.build_index, args=(str(p),), kwargs={"progress": False})
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0
    _same_as_full(str(p))


def test_a_guessed_tail_scan_that_fails_on_moved_bytes_is_planned_again(tmp_path):
    """An early edit that grows the file looks like an append: the guessed tail scan then starts
    inside a line and fails. The check of the old bytes finds the edit, and the exact plan is built
    instead of reporting the guessed scan's error."""
    p = tmp_path / "d.svm"
    old = _lines(150_000, 18)
    p.write_text(old)
    lirs.build_index(str(p), progress=False)
    with open(p, "a") as f:
        f.write(_lines(300, 19))  # the guess, made on an append alone
    guess = I.plan_update([str(p)], "libsvm", str(p) + ".lirs", speculate=True)[0]
    I.settle([guess])
    at = guess.byte
    k = at - old.rindex(":", 0, at)  # grow the file by k bytes: the guessed restart lands on ":..."
    assert 2 <= k < 30 and old[0] in "0123" and old[1] == " "
    p.write_text(old[0] + "." + "0" * (k - 1) + old[1:] + _lines(300, 19))  # the first label, same value
    assert (p.read_text()[at:at + 1]) == ":"
    _same_as_full(str(p))
    assert lirs.open_index(str(p)).n == 150_000 + 300


def test_a_corrupt_old_sidecar_is_not_reused(tmp_path, spy, caplog):
    """A word of the old offset table changed (still increasing: plausible) is not copied into the
    new sidecar under a fresh CRC, where no check would find it again: the re-index scans anew."""
    from lirs.sidecar import read_header

    p = tmp_path / "d.jsonl"
    p.write_text("".join(f'{{"k": {i}}}\n' for i in range(20_000)))
    lirs.build_index(str(p), progress=False)
    side = str(p) + ".lirs"
    arr = read_header(side)[0]["arrays"]["offsets_rel"]
    with open(side, "r+b") as f:
        f.seek(arr["offset"] + 5000 * 4)
        word = int(np.frombuffer(f.read(4), "<u4")[0])
        f.seek(arr["offset"] + 5000 * 4)
        f.write(np.array([word + 1], "<u4").tobytes())
    with open(p, "a") as f:
        f.write('{"k": "new"}\n')
    spy.clear()
    _same_as_full(str(p))
    assert spy[0] == [None] and "is corrupt" in caplog.text
    with lirs.Loader(str(p), 20_001, granularity="instance") as loader:
        got = {int(i): bytes(x) for b in loader.epoch(0) for i, x in zip(b.ids, b.X)}
    assert got[4999] == b'{"k": 4999}' and got[5000] == b'{"k": 5000}'


def test_an_error_in_a_tfrecord_tail_names_the_record_as_a_full_scan_does(tmp_path):
    from lirs.errors import DataError
    from lirs.tfrecord import encode

    p = tmp_path / "t.tfrecord"
    p.write_bytes(encode([b"x" * 100] * 3000).tobytes())
    lirs.build_index(str(p), progress=False)
    with open(p, "ab") as f:
        f.write(encode([b"y" * 100] * 30).tobytes()[:-7])  # the last record cut short
    said = []
    for full in (False, True):
        with pytest.raises(DataError) as e:
            lirs.build_index(str(p), progress=False, full=full)
        said.append(str(e.value))
    assert said[0] == said[1] and "record 3029 at byte" in said[0], said


def test_a_file_cut_where_a_record_starts_on_a_block_boundary(tmp_path):
    """Truncated to exactly a MiB boundary at which a record began: the restart is the file's new
    end, and the sidecar is still the one a full scan writes (its marks had one row too many)."""
    head = b"".join(b"%d %d:%d\n" % (1 if i % 2 else -1, 1 + i % 7, i % 100) for i in range(100_000))
    head = head[:head.rindex(b"\n", 0, SUM_BLOCK - 100) + 1]
    filler = b"1 1:1 #" + b"x" * (SUM_BLOCK - len(head) - 8) + b"\n"
    body = head + filler
    assert len(body) == SUM_BLOCK
    p = tmp_path / "cut.svm"
    p.write_bytes(body + b"-1 2:3\n" * 5000)
    lirs.build_index(str(p), progress=False)
    os.truncate(p, SUM_BLOCK)
    _same_as_full(str(p))


def test_a_failed_append_scan_says_why_while_the_old_bytes_check_waits(tmp_path, monkeypatch):
    """An append whose new tail fails to scan (a record still being written), while the check of the
    file's old bytes has not started yet (lirs's one checker thread busy with another build): the
    check was cancelled, then asked whether the old bytes changed, and the build raised a bare
    CancelledError. It now waits for the check and raises the scan's error, naming file and byte."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from lirs import content
    from lirs.errors import DataError
    from lirs.tfrecord import encode

    p = tmp_path / "d.tfrecord"
    p.write_bytes(encode([bytes([k % 251]) * 300 for k in range(2000)]).tobytes())
    lirs.build_index(str(p), progress=False)
    with open(p, "ab") as f:
        f.write(encode([b"x" * 100]).tobytes()[:50])  # a writer still writing: the last record is cut
    checker = ThreadPoolExecutor(1)
    monkeypatch.setattr(content, "_CHECKER", checker)
    checker.submit(time.sleep, 0.5)  # busy: the build's check waits in the queue
    with pytest.raises(DataError, match=r"d\.tfrecord: .*record 2000 at byte \d+"):
        lirs.build_index(str(p), progress=False)
    checker.shutdown()


@pytest.mark.parametrize("where", ["unchanged", "appended"])
def test_a_file_changed_after_it_was_planned_is_planned_again_not_kept_as_planned(tmp_path, monkeypatch, where):
    """A writer that appends to a file after `lirs index` judged it unchanged (or planned its
    append) but before its scan began: the index kept the old records under the new fingerprint,
    every later `lirs index` then took the file as unchanged, and the new records were never
    served (no error). The scan compares the file with what was planned and plans again; a file
    that changes again in between is refused as still being written."""
    d = tmp_path / "set"
    d.mkdir()
    for i in range(2):
        (d / f"part{i}.svm").write_text(_lines(2000, 30 + i))
    lirs.build_index(str(d), progress=False)
    if where == "appended":
        with open(d / "part1.svm", "a") as f:
            f.write(_lines(50, 40))
    real, appends = I.plan_update, []

    def plan_then_write(*a, **k):
        p = real(*a, **k)
        if len(appends) < 1:  # a writer, right after the first plan
            with open(d / "part1.svm", "a") as f:
                f.write("1 5:5\n1 6:6\n1 7:7\n")
            appends.append(1)
        return p

    monkeypatch.setattr("lirs.build.plan_update", plan_then_write)
    idx = lirs.build_index(str(d), progress=False)
    lines = sum(1 for p in sorted(d.iterdir()) for ln in open(p) if ln.strip() and not ln.startswith("#"))
    assert idx.n == lines == 4000 + (50 if where == "appended" else 0) + 3
    monkeypatch.setattr("lirs.build.plan_update", real)
    assert lirs.build_index(str(d), progress=False).n == lines  # and kept as such

    (d / "part2.svm").write_text(_lines(60000, 41))  # past a checksum block: its appends keep a head
    lirs.build_index(str(d), progress=False)

    def always(*a, **k):  # a file written to between every plan and its scan: refused, not kept
        p = real(*a, **k)
        with open(d / "part2.svm", "a") as f:
            f.write("1 8:8\n")
        return p

    monkeypatch.setattr("lirs.build.plan_update", always)
    with pytest.raises(lirs.DataError, match="part2.svm: file changed while it was being indexed"):
        lirs.build_index(str(d), progress=False)


def test_a_file_removed_from_an_indexed_directory_is_a_stale_index_with_its_command(tmp_path):
    """`rm DIR/b.svm` after `lirs index DIR`: opening said the sidecar had been moved from its data
    (an IndexFormatError naming the same path twice), which code catching StaleIndexError to
    re-index missed. A file gone from a directory indexed whole is a stale index, with the command
    that re-indexes the directory; `lirs index DIR` then drops it."""
    d = tmp_path / "set"
    d.mkdir()
    for i in range(3):
        (d / f"part{i}.svm").write_text(_lines(300, 50 + i))
    lirs.build_index(str(d), progress=False)
    os.unlink(d / "part1.svm")
    for opener in (lambda: lirs.open_index(str(d)), lambda: lirs.open_index(str(d) + ".lirs"),
                   lambda: lirs.Loader(str(d), 64)):
        with pytest.raises(lirs.StaleIndexError, match=rf"part1.svm was removed from {d} after it was indexed; "
                                                       rf"re-run `lirs index {d}`"):
            opener()
    assert lirs.build_index(str(d), progress=False).n == 600


def test_a_last_line_cut_midway_says_it_has_no_line_end(tmp_path):
    """A LIBSVM file whose writer is midway through its last line (`1 3:0.5 7:`) was refused as bad
    data with nothing said of the line being the last one, unterminated: the error says so (a
    file still being written?); the same bad token on a terminated line does not."""
    p = tmp_path / "d.svm"
    p.write_text(_lines(500, 60) + "1 3:0.5 7:")
    with pytest.raises(lirs.DataError, match=r"d.svm: line \d+, byte \d+: .*\(on the last line, which has no line "
                                             r"end: is the file still being written\?\)$"):
        lirs.build_index(str(p), progress=False)
    p.write_text(_lines(500, 60) + "1 3:0.5 7:\n")
    with pytest.raises(lirs.DataError) as e:
        lirs.build_index(str(p), progress=False)
    assert "line end" not in str(e.value)


def test_reindexing_many_files_counts_each_file_s_blocks_once(tmp_path, spy, monkeypatch):
    """Each kept file's checksums and scan marks were found by counting the blocks of every file
    before it: a re-index of many files was quadratic. Counted, not timed: linear in files."""
    import lirs.content as C

    d = tmp_path / "many"
    d.mkdir()
    for i in range(200):
        (d / f"s{i:04d}.svm").write_text(f"{i} {1 + i % 5}:1\n")
    lirs.build_index(str(d), progress=False)
    with open(d / "s0100.svm", "a") as f:
        f.write("7 2:2\n")
    calls = []
    real = C.block_count
    monkeypatch.setattr(C, "block_count", lambda size: calls.append(1) or real(size))
    idx = lirs.build_index(str(d), progress=False)
    assert sum(k is not None and k.whole for k in spy[-1]) == 199 and idx.n == 201
    assert len(calls) <= 3 * 200
    monkeypatch.setattr(C, "block_count", real)
    _same_as_full(str(d))
