"""Trust: a sidecar serves only its own data, fingerprints that survive remounts and touch,
checksummed arrays, litter of crashed runs removed, I/O errors as one line, no mmap needed."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import lirs
from lirs import freshness
from lirs import sidecar as S
from lirs.cli import main
from lirs.errors import IndexFormatError, StaleIndexError
from lirs.index import open_index


def _svm(path, n=200, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        k = int(rng.integers(1, 6))
        idx = np.sort(rng.choice(np.arange(1, 50), k, replace=False))
        lines.append(f"{int(rng.integers(0, 2)) * 2 - 1} " + " ".join(f"{j}:{rng.random():.4f}" for j in idx))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _all_ids(loader):
    return np.concatenate([b.ids for b in loader.epoch(0)])


# --------------------------------------------------------------------------- a sidecar serves its own data


def test_copied_sidecar_never_reads_the_original(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    orig = _svm(a / "x.svm", seed=1)
    lirs.build_index(orig, progress=False)
    other = _svm(b / "y.svm", seed=2)
    shutil.copy(orig + ".lirs", other + ".lirs")
    with pytest.raises(IndexFormatError) as ei:
        lirs.Loader(other, 16)
    msg = str(ei.value)
    assert str(b / "x.svm") in msg and str(b / "y.svm") in msg
    # opened by the sidecar itself: the file it names beside it does not exist -> error, not a/x.svm
    with pytest.raises(IndexFormatError, match="does not exist"):
        open_index(other + ".lirs")


def test_a_file_added_to_an_indexed_directory_is_named_at_open(tmp_path):
    """A directory's index names its files; one added since would be read as if absent (its
    records never served): the open says which files the index does not cover, and after
    `lirs index` every record is read."""
    d = tmp_path / "set"
    d.mkdir()
    _svm(d / "a.svm", seed=1), _svm(d / "b.svm", seed=2)
    lirs.build_index(str(d), progress=False)
    _svm(d / "c.svm", n=50, seed=3)
    for source in (str(d), str(d) + ".lirs"):  # the directory, or its sidecar
        with pytest.raises(StaleIndexError, match=r"does not cover: c\.svm; re-run `lirs index"):
            lirs.Loader(source, 64, granularity="instance")
    assert main(["index", str(d), "--check"]) != 0
    for i in range(4):  # many: the first three named, the rest counted
        _svm(d / f"d{i}.svm", n=10, seed=4 + i)
    with pytest.raises(StaleIndexError, match=r"does not cover: c\.svm, d0\.svm, d1\.svm and 2 more;"):
        lirs.Loader(str(d), 64, granularity="instance")
    lirs.build_index(str(d), progress=False)
    with lirs.Loader(str(d), 64, granularity="instance") as ld:
        assert len(_all_ids(ld)) == 490


def test_a_file_added_to_a_directory_indexed_with_o_elsewhere_is_named_at_open(tmp_path):
    """The sidecar keeps the directory it was built from: opened by its -o name in another
    directory, a file added to the data directory is still named (it was left out unsaid)."""
    d, side = tmp_path / "set", tmp_path / "side" / "ds.lirs"
    d.mkdir(), side.parent.mkdir()
    _svm(d / "a.svm", seed=1)
    assert main(["index", str(d), "-o", str(side), "--quiet"]) == 0
    _svm(d / "b.svm", n=50, seed=2)
    again = f"re-run `lirs index {d} -o {side}`"
    with pytest.raises(StaleIndexError, match=re.escape(f"does not cover: b.svm; {again}")):
        lirs.Loader(str(side), 64, granularity="instance")
    assert main(["index", str(d), "-o", str(side), "--check"]) == 1
    assert main(["index", str(d), "-o", str(side), "--quiet"]) == 0
    with lirs.Loader(str(side), 64, granularity="instance") as ld:
        assert len(_all_ids(ld)) == 250


def test_shard_directories_empty_shards_and_a_subset_named_after_its_directory(tmp_path):
    """Three ways a set of TFRecord shards went wrong: an index of two directories missed a shard
    added to one of them (served 6 of 7 records, unsaid); one empty shard (a writer's, or Spark's
    `_SUCCESS`) made the directory unreadable; an index of some of a directory's shards named
    `DIR.lirs` was refused as missing the others."""
    from lirs.tfrecord import encode

    def shard(path, *payloads):
        path.write_bytes(encode([p.encode() for p in payloads]).tobytes())

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir(), d2.mkdir()
    shard(d1 / "p0.tfrecord", "a", "b")
    shard(d1 / "p1.tfrecord", "c", "d")
    (d1 / "p2.tfrecord").write_bytes(b"")
    (d1 / "_SUCCESS").write_bytes(b"")
    shard(d2 / "q0.tfrecord", "e", "f")
    both = str(tmp_path / "both.lirs")
    assert lirs.build_index(str(d1), progress=False).n == 4
    assert lirs.build_index([str(d1), str(d2)], out=both, progress=False).n == 6
    with lirs.Loader(both, 2, granularity="instance") as ld:
        assert len(_all_ids(ld)) == 6
    shard(d2 / "q1.tfrecord", "g")
    with pytest.raises(StaleIndexError, match=re.escape(f"does not cover: d2/q1.tfrecord; re-run `lirs index {d1} {d2} -o {both}`")):
        lirs.Loader(both, 2)
    shard(d1 / "p2.tfrecord", "h")  # the empty shard got records: a file the index does not cover
    with pytest.raises(StaleIndexError, match=r"does not cover: p2\.tfrecord"):
        lirs.Loader(str(d1), 2)
    some = str(tmp_path / "d1.lirs")  # a subset named after its directory
    assert lirs.build_index([str(d1 / "p0.tfrecord"), str(d1 / "p1.tfrecord")], out=some, progress=False).n == 4
    with lirs.Loader(some, 2, granularity="instance") as ld:
        assert len(_all_ids(ld)) == 4
    e = tmp_path / "e"
    e.mkdir()
    (e / "x.tfrecord").write_bytes(b"")
    with pytest.raises(lirs.errors.DataError, match=r"e: directory holds no data files \(1 empty\)"):
        lirs.build_index(str(e), progress=False)


def test_a_directory_with_a_stray_file_opens_as_stale_not_as_the_stray_error(tmp_path):
    """Following the stray-file advice (`lirs index d/*.svm -o d.lirs`), then opening d, gave the
    same "README.md: not a .svm file" error again, never saying that d.lirs can be opened itself:
    the check for new files ran the stray rule. It lists d's files without it: the README is a
    file the index does not cover, also where it was added after a whole-directory index."""
    d = tmp_path / "d"
    d.mkdir()
    parts = [_svm(d / f"part-{i}.svm", n=10, seed=i) for i in range(2)]
    (d / "README.md").write_text("# my data\nshards of train\n")
    with pytest.raises(lirs.errors.DataError, match=r"README.md: not a .svm file like the others"):
        lirs.build_index(str(d), progress=False)
    side = str(tmp_path / "d.lirs")
    lirs.build_index(parts, out=side, progress=False)
    # `lirs index d` refuses the README: d.lirs itself is the way on
    with pytest.raises(StaleIndexError, match=re.escape(f"{d} holds files its index {side}, built from a list of "
                                                        f"files, does not cover: README.md; they are not libsvm data "
                                                        f"like the files it names, so `lirs index {d}` would refuse "
                                                        f"them: open {side} itself")):
        open_index(str(d))
    os.unlink(d / "README.md")
    lirs.build_index(str(d), progress=False)
    (d / "README.md").write_text("# my data\n")  # added after a whole-directory index
    with pytest.raises(StaleIndexError, match=re.escape(f"{d} holds files its index {side} does not cover: README.md")):
        open_index(str(d))


def test_a_tfds_directory_s_errors_name_commands_that_work(tmp_path):
    """A TFDS directory (shards `x.tfrecord-0000K-of-00002` beside dataset_info.json) led in a
    circle: `lirs index DIR` refused its two formats with no way forward, and once its shards were
    indexed as DIR.lirs, opening DIR advised `lirs index DIR` again. The first names the shards
    (a pattern matching them alone, else the files listed); the second advises re-indexing DIR
    only where the files not covered share the index's format, else opening DIR.lirs itself."""
    import glob

    from lirs.tfrecord import encode

    def shard(path, k):
        path.write_bytes(encode([b"r%d-%d" % (k, i) for i in range(10)]).tobytes())

    d = tmp_path / "mnist"
    d.mkdir()
    for k in range(2):
        shard(d / f"mnist-train.tfrecord-0000{k}-of-00002", k)
    (d / "dataset_info.json").write_text('{"name": "mnist"}\n')
    with pytest.raises(lirs.errors.DataError, match=re.escape(
            f"index the files of one format, e.g. `lirs index {d}/mnist-train.tfrecord-* -o NAME.lirs`")):
        lirs.build_index(str(d), progress=False)
    side = str(tmp_path / "mnist.lirs")
    assert main(["index", *glob.glob(f"{d}/mnist-train.tfrecord-*"), "-o", side, "--quiet"]) == 0
    with pytest.raises(StaleIndexError, match=re.escape(
            f"does not cover: dataset_info.json; they are not tfrecord data like the files it names, so "
            f"`lirs index {d}` would refuse them: open {side} itself to read only the files it names")):
        open_index(str(d))
    assert open_index(side).n == 20
    os.unlink(d / "dataset_info.json")  # a shard not covered instead: re-indexing d is advised, and works
    shard(d / "mnist-train.tfrecord-00002-of-00003", 2)
    with pytest.raises(StaleIndexError, match=re.escape(f"re-run `lirs index {d}` to index them all")):
        open_index(str(d))
    assert main(["index", str(d), "--quiet"]) == 0 and open_index(str(d)).n == 30
    # p-* matches p-x.svm too, but *.jsonl names the files alone
    e = tmp_path / "e"
    e.mkdir()
    for n in ("p-1.jsonl", "p-2.jsonl", "p-x.svm"):
        (e / n).write_text('{"x": 1}\n' if n.endswith("jsonl") else "1 1:1\n")
    with pytest.raises(lirs.errors.DataError, match=re.escape(f"`lirs index {e}/*.jsonl -o NAME.lirs`")):
        lirs.build_index(str(e), progress=False)


def test_the_advice_for_a_directory_and_a_file_named_on_its_own_names_both(tmp_path):
    """`lirs index a b/x.svm -o mix.lirs`, then a file added to (or removed from) a/: the advice
    said `lirs index a -o mix.lirs`, and following it rebuilt the index without b/x.svm (its
    records gone, unsaid). It repeats every input: the directory and the file outside it."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for i in range(3):
        _svm(a / f"s{i}.svm", n=10, seed=i)
    x = _svm(b / "x.svm", n=10, seed=9)
    mix = str(tmp_path / "mix.lirs")
    assert main(["index", str(a), x, "-o", mix, "--quiet"]) == 0
    again = f"re-run `lirs index {a} {x} -o {mix}`"
    _svm(a / "s5.svm", n=10, seed=5)
    with pytest.raises(StaleIndexError, match=re.escape(f"does not cover: s5.svm; {again}")):
        open_index(mix)
    assert main(["index", str(a), x, "-o", mix, "--quiet"]) == 0 and open_index(mix).n == 50
    os.unlink(a / "s1.svm")
    with pytest.raises(StaleIndexError, match=re.escape(f"s1.svm was removed from {a} after it was indexed; {again}")):
        open_index(mix)


def test_a_directory_opened_through_an_index_of_some_of_its_files_names_the_others(tmp_path):
    """`lirs index d/part-*.svm -o d.lirs`, then `Loader("d")`: the directory was read through that
    sidecar and its files the list did not name (there before, or added after) were left out,
    unsaid. Opening the directory names them; the sidecar opened by its own name serves its list."""
    d = tmp_path / "d"
    d.mkdir()
    parts = [_svm(d / f"part-{i}.svm", n=10, seed=i) for i in range(3)]
    side = str(tmp_path / "d.lirs")
    lirs.build_index(parts[:2], out=side, progress=False)  # part-2 there before, not listed
    _svm(d / "part-3.svm", n=10, seed=3)  # and one added after
    subset = (f"{d} holds files its index {side}, built from a list of files, does not cover: part-2.svm, "
              f"part-3.svm; re-run `lirs index {d}` to index them all, or open {side} itself")
    with pytest.raises(StaleIndexError, match=re.escape(subset)):
        lirs.Loader(str(d), 64, granularity="instance")
    assert main(["info", str(d)]) != 0 and main(["epoch", str(d), "--batch-size", "8"]) != 0
    with lirs.Loader(side, 64, granularity="instance") as ld:
        assert len(_all_ids(ld)) == 20
    lirs.build_index(str(d), progress=False)
    with lirs.Loader(str(d), 64, granularity="instance") as ld:
        assert len(_all_ids(ld)) == 40


def test_a_sidecar_of_the_previous_lirs_keeps_its_directory_and_advice(tmp_path):
    """Sidecars written before `directories` and `format_given` were kept in their meta: one with
    `directory` (a directory indexed) still names a file added there, one with neither (DIR.lirs)
    falls back to its name, and the advice takes `--format` from the files' extensions."""
    def older(side, *gone):
        def update(h):
            h["meta"] = {k: v for k, v in h["meta"].items() if k not in gone}
            return h
        S.rewrite_header(side, update)

    d = tmp_path / "set"
    d.mkdir()
    _svm(d / "a.svm", seed=1)
    lirs.build_index(str(d), progress=False)
    side = str(tmp_path / "set.lirs")
    older(side, "format_given", "directories")
    meta = S.read_sidecar(side)[0]["meta"]
    assert "directories" not in meta and "format_given" not in meta
    _svm(d / "b.svm", n=50, seed=2)
    with pytest.raises(StaleIndexError, match=f"does not cover: b.svm; re-run `lirs index {d}`"):
        lirs.Loader(side, 64)  # by its name DIR.lirs
    elsewhere = str(tmp_path / "side.lirs")  # -o elsewhere, kept as `directory` (one)
    lirs.build_index(str(d), out=elsewhere, progress=False)

    def one_directory(h):
        h["meta"]["directory"] = h["meta"].pop("directories")[0]
        return h
    S.rewrite_header(elsewhere, one_directory)
    _svm(d / "c.svm", n=50, seed=3)
    with pytest.raises(StaleIndexError, match=r"does not cover: c\.svm; re-run `lirs index .* -o "):
        lirs.Loader(elsewhere, 64)
    lines = tmp_path / "l.svm"
    lines.write_bytes(b"1 1:1\n")
    lirs.build_index(str(lines), format="lines", progress=False)
    older(str(lines) + ".lirs", "format_given", "directories")
    lines.write_bytes(b"2 1:1\n")
    with pytest.raises(StaleIndexError, match=re.escape(f"re-run `lirs index {lines} --format lines`")):
        lirs.Loader(str(lines), 1)  # .svm would choose libsvm: the option is named


def test_sidecar_copied_beside_another_file_of_the_same_name_is_stale(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    orig = _svm(a / "x.svm", seed=1)
    lirs.build_index(orig, progress=False)
    other = _svm(b / "x.svm", n=300, seed=3)
    shutil.copy(orig + ".lirs", other + ".lirs")
    with pytest.raises(StaleIndexError, match=str(b / "x.svm")):
        open_index(other)


def test_moved_together_still_works(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    p = _svm(a / "x.svm")
    lirs.build_index(p, progress=False)
    shutil.copytree(a, b)  # copy keeps content; mtimes may differ
    shutil.rmtree(a)
    with lirs.Loader(str(b / "x.svm"), 32, n_features=60) as ld:
        assert sorted(_all_ids(ld)) == list(range(200))
        assert ld.index.paths == (str(b / "x.svm"),)


# --------------------------------------------------------------------------- fingerprint


def test_touch_does_not_force_a_reindex(tmp_path):
    p = _svm(tmp_path / "x.svm")
    lirs.build_index(p, progress=False)
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert open_index(p).n == 200


def test_new_inode_same_bytes_is_fresh(tmp_path):
    # what a remount of a FUSE or network filesystem does to unchanged files
    p = _svm(tmp_path / "x.svm")
    lirs.build_index(p, progress=False)
    shutil.copy2(p, p + ".new")
    os.replace(p + ".new", p)
    assert open_index(p).n == 200


def test_same_size_edit_after_touch_is_stale(tmp_path):
    p = _svm(tmp_path / "x.svm", n=40000)
    lirs.build_index(p, progress=False)
    data = bytearray(open(p, "rb").read())
    fp = freshness.fingerprint(p)
    # change one digit in a block the 256-block check reads but the 16-block one does not
    size = len(data)
    small = [int(x) for x in np.linspace(0, max(0, size - 4096), 16)]
    big = [int(x) for x in np.linspace(0, max(0, size - 4096), 256)]
    pos = next(o + 100 for o in big if all(not s <= o + 100 < s + 4096 for s in small))
    while chr(data[pos]) not in "0123456789":
        pos += 1
    data[pos] = ord("1") if data[pos] != ord("1") else ord("2")
    with open(p, "r+b") as f:
        f.write(data)
    assert freshness.fingerprint(p)["sample_hash"] == fp["sample_hash"]  # the cheap check cannot see it
    with pytest.raises(StaleIndexError, match="content changed"):
        open_index(p)


def test_fingerprint_continues_short_reads(tmp_path, monkeypatch):
    p = _svm(tmp_path / "x.svm", n=3000)
    want = freshness.fingerprint(p)
    real, calls = os.preadv, []

    def short(fd, bufs, off, *flags):  # at most 1000 bytes a read, as FUSE may return
        calls.append(off)
        return real(fd, [bufs[0][:1000]], off, *flags)

    monkeypatch.setattr(os, "preadv", short)
    assert freshness.fingerprint(p) == want and len(calls) > 16


# --------------------------------------------------------------------------- checksums


def test_flipped_offset_byte_is_found_by_verify(tmp_path, capsys):
    p = _svm(tmp_path / "x.svm")
    idx = lirs.build_index(p, progress=False)
    header, _ = S.read_header(idx.sidecar)
    spec = header["arrays"]["offsets_rel"]
    with open(idx.sidecar, "r+b") as f:
        f.seek(spec["offset"] + 4 * 7)
        b = f.read(1)
        f.seek(spec["offset"] + 4 * 7)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(IndexFormatError, match="offsets_rel is corrupt"):
        open_index(p, verify=True)
    assert main(["info", p, "--verify"]) == 1
    err = capsys.readouterr().err
    assert "corrupt" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    # without --verify the header still opens (the checksum pass reads the whole sidecar)
    assert main(["info", p]) == 0


def test_verify_passes_on_a_good_index(tmp_path, capsys):
    p = _svm(tmp_path / "x.svm")
    lirs.build_index(p, progress=False)
    assert main(["info", p, "--verify"]) == 0
    assert "CRC-32" in capsys.readouterr().out


# --------------------------------------------------------------------------- filesystems without mmap


def test_sidecar_without_mmap_is_read(tmp_path, monkeypatch):
    p = _svm(tmp_path / "x.svm")
    lirs.build_index(p, progress=False)
    want = open_index(p).offsets.copy()

    def nodev(*a, **k):
        raise OSError(errno.ENODEV, "No such device")

    monkeypatch.setattr(S.np, "memmap", nodev)
    idx = open_index(p)
    assert np.array_equal(idx.offsets, want)


# --------------------------------------------------------------------------- CLI: I/O errors as one line


def test_read_only_directory_says_use_o(tmp_path, monkeypatch, capsys):
    p = _svm(tmp_path / "x.svm")
    real_open = os.open

    def erofs(path, flags, *a, **k):  # the sidecar's temporary is created (lirs.litter.open_locked)
        if flags & os.O_CREAT and ".lirs" in os.fspath(path):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", erofs)
    assert main(["index", p, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Read-only file system" in err and "use -o" in err and "Traceback" not in err


# --------------------------------------------------------------------------- litter of crashed runs


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the kernel reuses it, far later)


def test_index_removes_temp_files_of_dead_runs_only(tmp_path, caplog):
    p = _svm(tmp_path / "x.svm")
    dead = tmp_path / f".x.svm.lirs.lirs-tmp-{_dead_pid()}"
    live = tmp_path / f".x.svm.lirs.lirs-tmp-{os.getppid()}"
    dead.write_bytes(b"half an index")
    live.write_bytes(b"someone else is writing")
    with caplog.at_level("WARNING"):
        lirs.build_index(p, progress=False)
    assert not dead.exists() and live.exists()
    assert any("crashed" in r.message and str(dead) in r.message for r in caplog.records)


def test_the_cleaner_leaves_names_without_lirs_mark_alone(tmp_path):
    """A user's `.thesis.tmp-2023` file or `.photos.tmp-1999/` directory looked like a dead run's
    temporary (a dot, a name, ".tmp-", a number): the next `lirs index` there removed them, the
    directory with rmtree. Only names with lirs's mark are its."""
    from lirs import litter

    p = _svm(tmp_path / "x.svm")
    mine = tmp_path / ".thesis.tmp-2023"
    mine.write_bytes(b"chapter 1")
    photos = tmp_path / ".photos.tmp-1999"
    photos.mkdir()
    (photos / "a.jpg").write_bytes(b"jpg")
    dead = tmp_path / os.path.basename(litter.temp_name(str(tmp_path / "other.svm.lirs"), _dead_pid()))
    dead.write_bytes(b"half an index")
    lirs.build_index(p, progress=False)
    assert mine.read_bytes() == b"chapter 1" and (photos / "a.jpg").exists() and not dead.exists()


def test_names_near_the_filesystems_limit_index_and_clean(tmp_path):
    """A data name of 250 bytes: its sidecar name fits 255 bytes, but the temporary name it was
    written under did not ("File name too long", naming the temporary). Long temporary names are
    cut and carry a CRC of the name; a dead run's one is still found."""
    from lirs import litter

    for name in ("d" * 246 + ".svm", "é" * 122 + ".svm"):
        p = _svm(tmp_path / name)
        dead = litter.temp_name(p + ".lirs", _dead_pid())
        assert len(os.fsencode(os.path.basename(dead))) <= 255
        open(dead, "wb").close()
        assert lirs.build_index(p, progress=False).n > 0 and os.path.exists(p + ".lirs")
        assert not os.path.exists(dead)
        with lirs.Loader(p, 64) as ld:
            assert sum(len(b.ids) for b in ld.epoch(0)) == lirs.open_index(p).n


def test_a_file_named_like_the_sidecar_is_not_replaced(tmp_path, capsys):
    """`lirs index x` with a data file `x.lirs` beside it (or an empty one) warned "corrupt: not
    reused" and renamed the index over it: the data was gone. Refused, before any scan."""
    from lirs.cli import main

    p = _svm(tmp_path / "x")
    for body in (open(p, "rb").read(), b""):
        (tmp_path / "x.lirs").write_bytes(body)
        assert main(["index", p, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "x.lirs exists and is not a lirs index" in err and "-o" in err and "corrupt" not in err, err
        assert (tmp_path / "x.lirs").read_bytes() == body
    assert main(["index", p, "--quiet", "-o", str(tmp_path / "elsewhere.lirs")]) == 0


def _served_labels(path):
    with lirs.Loader(path, 64, granularity="instance") as ld:
        return sorted(y for b in ld.epoch(0) for y in b.y.tolist())


def test_a_dotdot_after_a_symlinked_directory_names_what_the_kernel_reads(tmp_path, capsys):
    """`L/../x.svm` where L links to real/deep is real/x.svm to the kernel (and to cat), but
    abspath folded it by text to ./x.svm: lirs indexed and served that other file."""
    from lirs.cli import main

    (tmp_path / "real" / "deep").mkdir(parents=True)
    os.symlink(tmp_path / "real" / "deep", tmp_path / "L")
    want = _svm(tmp_path / "real" / "x.svm", n=150, seed=1)
    _svm(tmp_path / "x.svm", n=100, seed=2)  # what a textual fold names
    dotted = str(tmp_path / "L" / ".." / "x.svm")
    assert main(["index", dotted, "--quiet", "-o", str(tmp_path / "side.lirs")]) == 0
    assert main(["index", dotted, "--quiet"]) == 0 and os.path.exists(want + ".lirs")
    assert not os.path.exists(tmp_path / "x.svm.lirs")
    ref = sorted(lirs.load_svmlight(want)[1].tolist())
    assert _served_labels(str(tmp_path / "side.lirs")) == ref == _served_labels(dotted)
    # a directory named so: the directory its sidecar keeps (files added later are named) is that one
    (tmp_path / "real" / "d").mkdir()
    _svm(tmp_path / "real" / "d" / "a.svm", n=30)
    dd = str(tmp_path / "L" / ".." / "d")
    lirs.build_index(dd, progress=False)
    _svm(tmp_path / "real" / "d" / "b.svm", n=30)
    with pytest.raises(lirs.StaleIndexError, match="does not cover: b.svm"):
        lirs.open_index(str(tmp_path / "real" / "d"))


def test_a_directory_of_links_bench_results_and_hard_links(tmp_path, capsys):
    """A file of a directory that is a link to a file elsewhere: `lirs index D` worked, then every
    open by D's name said "indexes D/a.svm, not D; re-run lirs index" (a loop). A saved bench
    recommendation (`a.svm.lirs.bench.json`) in the directory was read as data. Two hard links of
    one file served its records twice."""
    from lirs.cli import main

    d = tmp_path / "D"
    d.mkdir()
    _svm(d / "a.svm", n=120, seed=3)
    os.symlink(_svm(tmp_path / "outside.svm", n=80, seed=4), d / "b.svm")
    (d / "a.svm.lirs.bench.json").write_text('{\n "schema": "lirs-bench-recommendation"\n}\n')
    assert main(["index", str(d), "--quiet"]) == 0
    assert main(["info", str(d)]) == 0
    with lirs.Loader(str(d), 50) as ld:
        assert sorted(_all_ids(ld).tolist()) == list(range(200))
    os.link(d / "a.svm", d / "c.svm")
    assert main(["index", str(d), "--quiet"]) == 2
    assert "c.svm is named twice (also as" in capsys.readouterr().err


def test_ctrl_c_is_interrupted_however_it_comes(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the command's modules (and numba) were imported printed a KeyboardInterrupt
    traceback; one a library swallowed (llvmlite's compile callback) came out as its RuntimeError.
    Both are "interrupted", exit 130; Python's SIGINT handler is back afterwards; another error
    without a Ctrl-C is not taken for one."""
    import signal

    from lirs import cli

    def no_parser():
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(cli, "build_parser", no_parser)
        assert cli.main(["info", "x"]) == 130
    assert capsys.readouterr().err == "lirs: interrupted\n"

    def swallowed(args):
        try:
            # to the main thread: a process-wide kill may land on a thread an earlier test left idle,
            # and the handler then ran only after the error had been judged (seen in a loaded suite)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # what the library did with it
        raise RuntimeError("no compiled object yet")

    from lirs.commands import info

    monkeypatch.setattr(info, "run", swallowed)
    assert cli.main(["info", "x"]) == 130
    assert capsys.readouterr().err == "lirs info: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def failed(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(info, "run", failed)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["info", "x"])


def test_a_ctrl_c_swallowed_on_the_way_to_a_finished_command_is_still_interrupted(monkeypatch, capsys):
    """Ctrl-C while a cold ``lirs epoch`` compiled its walk: numba turned it into an error, the
    walk's priming took that for a kernel that would compile later and went on, and the epoch ran
    to the end and exited 0, the Ctrl-C lost. A command that returns after one is interrupted (130)."""
    import signal

    from lirs import cli
    from lirs.commands import info

    def swallowed(args):
        try:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # swallowed, and the command goes on to the end
        return 0

    monkeypatch.setattr(info, "run", swallowed)
    assert cli.main(["info", "x"]) == 130
    assert capsys.readouterr().err == "lirs info: interrupted\n"
    monkeypatch.setattr(info, "run", lambda args: 0)
    assert cli.main(["info", "x"]) == 0  # no Ctrl-C: the command's own status


def test_a_file_still_being_written_is_said_to_change_not_to_be_bad(tmp_path, monkeypatch, capsys):
    """A file another process appends to ends mid-line while it is scanned: the scan's DataError
    ("line N, byte B: expected INDEX:VALUE") blamed the data. Where the file's fingerprint moved
    during the scan, the error says it changed; where it did not, the data's error stands."""
    from lirs import build as B
    from lirs.cli import main

    p = _svm(tmp_path / "g.svm")
    with open(p, "a") as f:
        f.write("1 3:")  # the half-written last line
    assert main(["index", p, "--quiet"]) == 1
    assert "expected" in capsys.readouterr().err
    real, calls = B.fingerprint, []

    def moving(path):
        calls.append(path)
        fp = real(path)
        return fp if len(calls) == 1 else (fp, "grown")

    monkeypatch.setattr(B, "fingerprint", moving)
    assert main(["index", p, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "g.svm: file changed while it was being indexed (still being written?)" in err, err
    assert not os.path.exists(p + ".lirs")


def test_a_header_rewrite_never_lands_on_an_index_rebuilt_meanwhile(tmp_path):
    """Recording a touched file's verification rewrites the sidecar's header: it read the header
    by one open and the arrays by another, so an index another process renamed over the path in
    between got the old header over its new arrays (`--verify` then failed: corrupt). The rewrite
    reads both through one descriptor and writes nothing where the sidecar is not the one opened,
    or was renamed over while it copied."""
    from lirs import sidecar as S
    from lirs.index import open_index

    p = _svm(tmp_path / "x.svm")
    idx = lirs.build_index(p, progress=False)

    def rebuilt_meanwhile(header):
        with open(p, "a") as f:
            f.write("1 7:1\n")
        # renamed over the path while the old arrays are copied (by another thread: its own temporary)
        t = threading.Thread(target=lirs.build_index, args=(p,), kwargs={"progress": False})
        t.start()
        t.join()
        return header

    S.rewrite_header(p + ".lirs", rebuilt_meanwhile)
    assert open_index(p, verify=True).n == idx.n + 1
    assert not [x for x in os.listdir(tmp_path) if "tmp-" in x]
    before = open(p + ".lirs", "rb").read()  # not the sidecar that was opened: left as it is
    assert S.rewrite_header(p + ".lirs", lambda h: h, header_crc=idx.header_crc) is None
    assert open(p + ".lirs", "rb").read() == before


def test_a_header_rewrite_keeps_a_symlinked_sidecar_a_link(tmp_path):
    """A sidecar reached through a symlink (an index kept on another disk) became a plain file at
    its first header rewrite (a verified touch): the link was renamed over, its target left stale."""
    from lirs import sidecar as S

    p = _svm(tmp_path / "x.svm")
    lirs.build_index(p, out=str(tmp_path / "kept.lirs"), progress=False)
    os.symlink(tmp_path / "kept.lirs", p + ".lirs")
    crc = S.rewrite_header(p + ".lirs", lambda h: dict(h, marked=1))
    assert os.path.islink(p + ".lirs") and crc is not None
    assert S.read_sidecar(str(tmp_path / "kept.lirs"))[0]["marked"] == 1
    assert not [x for x in os.listdir(tmp_path) if "tmp-" in x]


def test_advice_pastes_into_a_shell_and_a_directory_named_like_a_sidecar_opens(tmp_path, capsys):
    """The `lirs index ...` an error advises came unquoted: a name with a space (or starting with
    "-") did not paste. A data directory named `train.lirs` indexed, then every open took it for a
    sidecar ("is a directory"; the Loader an IsADirectoryError)."""
    import shlex

    from lirs.cli import main

    p = _svm(tmp_path / "my data.svm")
    lirs.build_index(p, progress=False)
    with open(p, "a") as f:
        f.write("1 3:1\n")
    with pytest.raises(lirs.StaleIndexError) as ei:
        lirs.open_index(p)
    assert f"lirs index {shlex.quote(p)}" in str(ei.value)
    d = tmp_path / "train.lirs"
    d.mkdir()
    _svm(d / "a.svm", n=90)
    assert main(["index", str(d), "--quiet"]) == 0 and os.path.isfile(str(d) + ".lirs")
    assert main(["info", str(d)]) == 0
    with lirs.Loader(str(d), 32) as ld:
        assert sorted(_all_ids(ld).tolist()) == list(range(90))


def test_order_never_writes_over_its_input(tmp_path, capsys):
    """`lirs order x.npy -o x.npy` (or -o its labels) replaced the dataset with the order, exit 0.
    Every file of the input is refused as an output: the data, its labels, a directory's files,
    the files a sidecar given as the input indexes."""
    from lirs.cli import main

    np.save(tmp_path / "x.npy", np.ones((30, 4), np.float32))
    np.save(tmp_path / "x.labels.npy", np.arange(30.0))
    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "a.npy", np.ones((20, 2), np.float32))
    np.save(d / "b.npy", np.ones((20, 2), np.float32))
    lirs.build_index(str(d), progress=False, out=str(tmp_path / "other.lirs"))
    files = {q: open(q, "rb").read() for q in (tmp_path / "x.npy", tmp_path / "x.labels.npy", d / "b.npy")}
    for data, out in (("x.npy", "x.npy"), ("x.npy", "x.labels.npy"), ("d", "d/b.npy"), ("other.lirs", "d/b.npy")):
        assert main(["order", str(tmp_path / data), "-o", str(tmp_path / out)]) == 2, (data, out)
        assert "write it elsewhere" in capsys.readouterr().err
    assert all(open(q, "rb").read() == b for q, b in files.items())
    assert main(["quality", str(d), "--epochs", "1", "--json", str(d / "a.npy")]) == 2


def test_an_output_is_not_written_into_a_directory_given_as_data(tmp_path, capsys):
    """`lirs order DIR -o DIR/order.npy` (or `quality --json DIR/q.json`, `bench --json`) wrote a
    new file among the dataset's: every later open refused the dataset for a file its index does
    not cover. An output in a directory given as the input, or named by a sidecar given as it, is
    refused before any work; beside the directory it is written."""
    from lirs.cli import main

    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "a.npy", np.ones((20, 2), np.float32))
    lirs.build_index(str(d), progress=False)
    for cmd in (["order", str(d), "-o", str(d / "order.npy")], ["order", str(d) + ".lirs", "-o", str(d / "o.npy")],
                ["quality", str(d), "--epochs", "1", "--json", str(d / "q.json")],
                ["bench", str(d), "--json", str(d / "b.json")]):
        assert main(cmd) == 2, cmd
        assert f"lies in {d}, a directory of the input" in capsys.readouterr().err, cmd
    assert sorted(os.listdir(d)) == ["a.npy"]
    assert main(["order", str(d), "-o", str(tmp_path / "order.npy")]) == 0
    assert lirs.open_index(str(d)).n == 20


def test_a_dataset_of_more_files_than_the_soft_limit_of_open_files(tmp_path):
    """A directory of 300 files under a soft limit of 256 open files indexed, then every epoch
    failed with "no engine works" (EMFILE taken for engines that cannot work here). The soft
    limit is raised toward the hard one for them; where the hard limit is too low, the error says
    how many files the dataset has and names `ulimit -n`. (In a subprocess: limits are the
    process's.)"""
    code = """
import os, resource, sys
import numpy as np
import lirs
d = sys.argv[1]
os.makedirs(d)
for i in range(300):
    with open(os.path.join(d, "p%03d.svm" % i), "w") as f:
        f.write("1 1:%d\\n-1 2:1\\n" % i)
lirs.build_index(d, progress=False)
hard = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
try:
    with lirs.Loader(d, 64) as ld:
        print(sorted(np.concatenate([b.ids for b in ld.epoch(0)]).tolist()) == list(range(600)))
except OSError as e:
    print(type(e).__name__, e.errno, e)
"""
    ok = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d"), "4096"], capture_output=True, text=True,
                        timeout=300)
    assert ok.stdout.strip() == "True", ok.stdout + ok.stderr
    low = subprocess.run([sys.executable, "-c", code, str(tmp_path / "e"), "256"], capture_output=True, text=True,
                         timeout=300)
    assert f"OSError {errno.EMFILE} " in low.stdout and "dataset's 300 files" in low.stdout, low.stdout + low.stderr
    assert "ulimit -n" in low.stdout and "no engine works" not in low.stdout


def test_json_results_are_written_under_a_name_the_cleaner_knows(tmp_path):
    """write_json (bench, quality, demo results) wrote through mkstemp: a killed run's temporary
    had no PID and stayed for ever. It carries the mark and the PID; a dead one goes."""
    from lirs import litter
    from lirs.recommendation import write_json

    out = tmp_path / "r.json"
    dead = litter.temp_name(str(out), _dead_pid())
    open(dead, "w").close()
    write_json({"a": 1}, str(out))
    assert json.load(open(out)) == {"a": 1} and os.listdir(tmp_path) == ["r.json"]


def _big_svm(path, mb=40):
    rng = np.random.default_rng(5)
    line = " ".join(f"{j}:{v:.3f}" for j, v in zip(range(1, 40), rng.random(39)))
    n = mb * 1_000_000 // (len(line) + 3)
    with open(path, "w") as f:
        f.write(("1 " + line + "\n") * n)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("frac", [0.05, 0.3, 0.6, 0.9])
def test_kill_9_during_index_leaves_no_half_index(tmp_path, frac):
    p = _big_svm(tmp_path / "big.svm")
    cmd = [sys.executable, "-m", "lirs.cli", "index", p, "--quiet", "--chunk", "64K"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    full = time.perf_counter() - t0
    os.unlink(p + ".lirs")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(frac * full)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # whatever the moment: no sidecar, or a whole one
    if os.path.exists(p + ".lirs"):
        assert open_index(p).n > 0
    # the next run finishes and leaves nothing behind
    lirs.build_index(p, progress=False)
    left = [x for x in os.listdir(tmp_path) if "tmp-" in x]
    assert left == []
    assert open_index(p, verify=True).n > 0


def test_index_check_refreshes_a_touched_index(tmp_path, capsys):
    p = _svm(tmp_path / "x.svm")
    lirs.build_index(p, progress=False)
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert main(["index", p, "--check"]) == 0
    assert "still matches" in capsys.readouterr().out
    header, _ = S.read_header(p + ".lirs")
    assert header["files"][0]["fingerprint"]["mtime_ns"] == os.stat(p).st_mtime_ns


def test_index_check_refuses_changed_data(tmp_path, capsys):
    p = _svm(tmp_path / "x.svm")
    lirs.build_index(p, progress=False)
    with open(p, "a") as f:
        f.write("1 3:1\n")
    assert main(["index", p, "--check"]) == 1
    assert "size changed" in capsys.readouterr().err


def test_eio_during_index_names_file_and_byte(tmp_path, monkeypatch, capsys):
    # the page-cache scan (a filesystem refusing O_DIRECT); tests/test_faults.py fails the O_DIRECT one
    import lirs.inputs as I
    from lirs import build as B

    p = _svm(tmp_path / "x.svm", n=3000)
    monkeypatch.setattr(I, "_scan_engine", lambda path: None)
    real = os.preadv

    def eio(fd, bufs, off, *flags):
        if off >= 4096:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, bufs, off, *flags)

    monkeypatch.setattr(B.os, "preadv", eio)
    assert main(["index", p, "--quiet", "--chunk", "4K"]) == 1
    err = capsys.readouterr().err
    # the first read that fails is named: the scan's at 4096, or a sampled block's of the fingerprint
    m = re.search(rf"{re.escape(p)}: byte (\d+): Input/output error", err)
    assert m and int(m.group(1)) >= 4096 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_labels_npy_without_mmap(tmp_path, monkeypatch):
    from lirs import build as B

    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x.npy.labels.npy", np.arange(20, dtype=np.float64))
    real = np.load

    def load(path, mmap_mode=None, **k):
        if mmap_mode:
            raise OSError(errno.ENODEV, "No such device")
        return real(path, **k)

    monkeypatch.setattr(B.np, "load", load)
    assert np.array_equal(B.labels_for_npy(str(tmp_path / "x.npy"), 20), np.arange(20))


@pytest.mark.slow
@pytest.mark.parametrize("frac", [0.1, 0.4, 0.7, 0.95])
@pytest.mark.parametrize("shards", [None, 3])
def test_kill_9_during_shuffle_leaves_nothing_behind(tmp_path, frac, shards):
    p = _big_svm(tmp_path / "big.svm", mb=30)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.svm"
    cmd = [sys.executable, "-m", "lirs.cli", "shuffle", p, "-o", str(out), "--memory", "4M", "--seed", "1",
           "--index", "--tmpdir", str(work)] + ([] if shards is None else ["--shards", str(shards)])
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    full = time.perf_counter() - t0
    want = _read_all(out)
    shutil.rmtree(out) if out.is_dir() else out.unlink()
    for q in work.iterdir():  # the sidecar of a single output
        os.unlink(q)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(frac * full)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # no half-written output under its final name: absent, or whole
    if out.exists():
        assert _read_all(out) == want
        shutil.rmtree(out) if out.is_dir() else out.unlink()
        for q in work.iterdir():
            if q.name.endswith(".lirs"):
                os.unlink(q)
    # the next run finishes, says what it removed, and leaves only its outputs
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert _read_all(out) == want
    left = sorted(q.name for q in work.iterdir())
    assert left == (["out.svm", "out.svm.lirs"] if shards is None else ["out.svm"]), left
    if any(x in r.stderr for x in ("removed",)):
        assert "crashed" in r.stderr


def _read_all(out) -> bytes:
    if os.path.isdir(out):
        return b"".join(open(os.path.join(out, n), "rb").read() for n in sorted(os.listdir(out))
                        if not n.endswith(".lirs"))
    return open(out, "rb").read()


def test_os_errors_without_a_file_name_read_as_one_line():
    from lirs.cli import describe_os_error

    msg = describe_os_error(OSError(errno.ENOSPC, "No space left on device"), "shuffle")
    assert msg == ("No space left on device (no space left on the device; free some or use -o to write "
                   "elsewhere)")
    e = OSError(errno.EROFS, "Read-only file system", "/ro/x.svm")
    assert describe_os_error(e, "shuffle").startswith("/ro/x.svm: Read-only file system (")
    assert "--tmpdir" in describe_os_error(e, "shuffle")
    # each command's own option (the demo has no -o), none where a command writes no output
    assert describe_os_error(e, "demo").endswith("(the file system is read-only; use --out to put the sample and "
                                                 "results elsewhere)")
    assert describe_os_error(e, "epoch").endswith("Read-only file system (the file system is read-only)")


@pytest.mark.parametrize("cmd", ["gen", "gen labels", "shuffle", "shuffle index", "order", "index"])
def test_an_output_that_is_a_fifo_or_a_directory_is_refused_not_replaced(tmp_path, capsys, cmd):
    """Outputs are written to a temporary renamed over the name: over a device or FIFO (`-o
    /dev/null` as root) that would replace it with a regular file. A usage error instead, before any
    work, the node left as it was; a directory named as an output file is a usage error too."""
    data, t = _svm(tmp_path / "d.svm"), str(tmp_path)
    out, argv = {"gen": ("g.svm", ["gen", "--profile", "kdd", "--records", "10", "-o", f"{t}/g.svm"]),
                 "gen labels": ("h.npy.labels.npy", ["gen", "--profile", "higgs", "--records", "10", "-o", f"{t}/h.npy"]),
                 "shuffle": ("s.svm", ["shuffle", data, "-o", f"{t}/s.svm"]),
                 "shuffle index": ("s.svm.lirs", ["shuffle", data, "--index", "-o", f"{t}/s.svm"]),
                 "order": ("o.npy", ["order", data, "-o", f"{t}/o.npy"]),
                 "index": ("d.svm.lirs", ["index", data])}[cmd]
    argv += ["--quiet"] if cmd != "order" else []
    node = tmp_path / out
    for make in (os.mkfifo, os.mkdir):
        make(node)
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert str(node) in err and ("not a regular file" in err or "is a directory" in err), err
        assert (node.is_fifo() if make is os.mkfifo else node.is_dir())
        node.rmdir() if node.is_dir() else node.unlink()


def test_threads_opening_one_touched_index_do_not_take_each_others_temporary(tmp_path):
    """Each open of a touched index records the checked mtime by rewriting the sidecar's header
    through a temporary: threads of one process named it alike, and one's rename took another's
    file (FileNotFoundError at open)."""
    import threading

    p = _svm(tmp_path / "t.svm", n=3000)
    lirs.build_index(p, progress=False)
    errors = []

    def open_close(gate):
        gate.wait()
        try:
            lirs.Loader(p, 10).close()
        except Exception as e:  # noqa: BLE001 - any failure counts
            errors.append(repr(e))

    for _ in range(8):
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        gate = threading.Barrier(4)
        threads = [threading.Thread(target=open_close, args=(gate,)) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    assert not errors, errors[:2]
    assert not [x for x in os.listdir(tmp_path) if "tmp-" in x]
    assert main(["index", "--check", p]) == 0
