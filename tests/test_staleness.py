"""Exact staleness: per-MiB checksums decide when size or mtime moved; a file rewritten during an
epoch fails at the next step; a corrupt offset table is a clean error under every granularity."""
from __future__ import annotations

import asyncio
import errno
import os
import re
import stat
import subprocess
import sys

import numpy as np
import pytest

from conftest import edit_first_byte
import lirs
from conftest import fill_fs
from lirs import content as C
from lirs import sidecar as S
from lirs.cli import main
from lirs.errors import DataError, IndexFormatError, StaleIndexError
from lirs.index import open_index


pytestmark = pytest.mark.usefixtures("private_cache")


def _svm(path, n, seed=0):
    rng = np.random.default_rng(seed)
    lab = rng.integers(0, 2, n) * 2 - 1
    lines = [f"{lab[i]} {1 + i % 7}:{rng.random():.5f} {9 + i % 5}:{rng.random():.5f}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A LIBSVM file of ~1.9 MiB (two checksum blocks) and its sidecar, bytes kept."""
    d = tmp_path_factory.mktemp("big")
    p = _svm(d / "x.svm", 80_000)
    lirs.build_index(p, progress=False)
    return p, open(p, "rb").read(), open(p + ".lirs", "rb").read()


def _restore(p, data, side, moved=False):
    """Put ``data`` and the sidecar ``side`` back; the data's mtime as indexed, or one second
    later (``moved``: an edit)."""
    with open(p, "wb") as f:
        f.write(data)
    with open(p + ".lirs", "wb") as f:
        f.write(side)
    st = os.stat(p)
    ent = open_index(p, check=False).fingerprints[0]
    os.utime(p, ns=(st.st_atime_ns, ent["mtime_ns"] + (10**9 if moved else 0)))


def _edit(p, data, pos, byte):
    b = bytearray(data)
    b[pos] = byte
    with open(p, "r+b") as f:
        f.write(b)
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_every_same_size_edit_with_a_moved_mtime_is_found(big):
    p, data, side = big
    rng = np.random.default_rng(7)
    digits = [i for i in rng.choice(len(data), 400, replace=False) if chr(data[i]).isdigit()][:12]
    for pos in digits:
        _restore(p, data, side)
        _edit(p, data, int(pos), ord("7") if data[pos] != ord("7") else ord("3"))
        with pytest.raises(StaleIndexError) as ei:
            open_index(p)
        blk = int(pos) // C.SUM_BLOCK
        assert p in str(ei.value) and f"bytes {blk * C.SUM_BLOCK}-" in str(ei.value)


def test_a_label_flip_and_a_moved_newline_are_found(big):
    p, data, side = big
    _restore(p, data, side)
    # the label of a line in the last block
    at = data.index(b"\n-1 ", len(data) - 5000) + 1
    b = bytearray(data)
    b[at:at + 2] = b" 1"
    _restore(p, bytes(b), side, moved=True)
    with pytest.raises(StaleIndexError, match=f"content changed at bytes {at // C.SUM_BLOCK * C.SUM_BLOCK}-"):
        open_index(p)
    # a newline moved one byte to the left: same size, same bytes but two
    nl = data.index(b"\n", C.SUM_BLOCK + 10)
    b = bytearray(data)
    b[nl - 1], b[nl] = b[nl], b[nl - 1]
    _restore(p, bytes(b), side, moved=True)
    with pytest.raises(StaleIndexError, match=f"content changed at bytes {C.SUM_BLOCK}-{min(2 * C.SUM_BLOCK, len(data)) - 1};"):
        lirs.Loader(p, 64)
    _restore(p, data, side)


def test_check_is_exact_and_touch_needs_no_reindex(big, capsys):
    p, data, side = big
    _restore(p, data, side)
    _edit(p, data, len(data) - 3, ord("0") if data[-3] != ord("0") else ord("1"))
    assert main(["index", "--check", p]) == 1
    assert "content changed" in capsys.readouterr().err
    _restore(p, data, side)
    os.utime(p)  # touch
    assert main(["index", "--check", p]) == 0
    # recorded in the sidecar: the next open takes the cheap check
    assert open_index(p, check=False).fingerprints[0]["mtime_ns"] == os.stat(p).st_mtime_ns


def test_a_verified_touch_is_recorded_where_the_sidecar_is_read_only(big, monkeypatch, tmp_path):
    p, data, side = big
    _restore(p, data, side)
    os.utime(p)

    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", p + ".lirs")

    monkeypatch.setattr(S, "rewrite_header", refuse)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    (tmp_path / "cache" / "verified").mkdir(parents=True, exist_ok=True)
    litter = tmp_path / "cache" / "verified" / f".0123.json.lirs-tmp-{dead}-1"  # a killed writer's
    litter.write_text("{")
    assert main(["index", "--check", p]) == 0
    assert os.listdir(tmp_path / "cache" / "verified") and not litter.exists()
    # a later open does not read the data again
    monkeypatch.setattr(C, "first_changed_block", lambda *a, **k: pytest.fail("read whole again"))
    assert open_index(p).n == 80_000


def test_a_touch_of_data_named_with_a_non_utf8_byte_is_recorded_in_the_cache(tmp_path, monkeypatch):
    """Data whose name holds a byte that is not UTF-8, touched, its sidecar read-only: the cache
    entry was keyed by the sidecar's path encoded as UTF-8, a UnicodeEncodeError traceback from every
    open (`lirs epoch`, Loader). The name's own bytes key it now."""
    p = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), b"v\xff.jsonl"))
    with open(p, "w") as f:
        f.write("".join(f"v:{i}\n" for i in range(50)))
    lirs.build_index(p, progress=False)
    os.utime(p, ns=(os.stat(p).st_atime_ns, os.stat(p).st_mtime_ns + 10**9))  # touched: same bytes

    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", p + ".lirs")

    monkeypatch.setattr(S, "rewrite_header", refuse)
    assert open_index(p).n == 50
    assert os.listdir(tmp_path / "cache" / "verified")
    monkeypatch.setattr(C, "first_changed_block", lambda *a, **k: pytest.fail("read whole again"))
    assert open_index(p).n == 50


def test_an_old_sidecar_asks_for_a_reindex(tmp_path):
    p = _svm(tmp_path / "o.svm", 50)
    lirs.build_index(p, progress=False)
    with open(p + ".lirs", "r+b") as f:
        f.seek(8)
        f.write((1).to_bytes(4, "little"))
    with pytest.raises(IndexFormatError, match="index version 1.*re-run `lirs index`"):
        open_index(p)


def test_checksums_of_blocks_match_a_whole_file_crc(tmp_path):
    p = tmp_path / "z.bin"
    rng = np.random.default_rng(1)
    blob = rng.integers(0, 256, C.SUM_BLOCK * 2 + 1234, dtype=np.uint8).tobytes()
    p.write_bytes(blob)
    from lirs.tfrecord import crc32c

    got = C.sum_file(str(p))
    want = [crc32c(blob[i:i + C.SUM_BLOCK]) for i in range(0, len(blob), C.SUM_BLOCK)]
    assert got.tolist() == want
    for direct in (True, False):  # O_DIRECT (a cold file), threads over the page cache (a cached one)
        assert C.first_changed_block(str(p), got, len(blob), direct=direct) is None
        b = bytearray(blob)
        b[C.SUM_BLOCK + 5] ^= 1
        p.write_bytes(bytes(b))
        assert C.first_changed_block(str(p), got, len(blob), direct=direct) == 1
        p.write_bytes(blob[:C.SUM_BLOCK * 2])  # cut: the first missing byte's block differs
        assert C.first_changed_block(str(p), got, len(blob), direct=direct) == 2
        p.write_bytes(blob)


# --------------------------------------------------------------------------- during an epoch


@pytest.mark.parametrize("granularity", ["instance", "page"])  # (a group step reads >= 4 MiB)
def test_a_file_rewritten_during_an_epoch_fails_at_the_next_step(tmp_path, granularity):
    p = _svm(tmp_path / "e.svm", 40_000)  # many read steps: the change comes before most of them
    lirs.build_index(p, progress=False)
    with lirs.Loader(p, 64, granularity=granularity, prefetch=1) as ld:
        it = ld.epoch(0)
        next(it)
        with open(p, "r+b") as f:  # same size, new content and mtime
            f.seek(10)
            f.write(b"9")
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        with pytest.raises(StaleIndexError, match="changed while it was being read"):
            for _ in it:
                pass


def test_after_a_reindex_the_error_says_to_open_a_new_loader(tmp_path):
    """A Loader keeps the index it opened: once the file changed and was indexed again, that Loader
    still stops at its next step, and the error says to open a new one (not only to re-index,
    which the user has done); a new Loader reads the new data."""
    p = _svm(tmp_path / "g.svm", 3000)
    lirs.build_index(p, progress=False)
    with lirs.Loader(p, 64, granularity="instance", seed=1) as ld:
        assert sum(len(b.ids) for b in ld.epoch(0)) == 3000
        with open(p, "a") as f:
            f.write("1 3:0.5\n")
        lirs.build_index(p, progress=False)
        with pytest.raises(StaleIndexError, match="open a new Loader"):
            sum(len(b.ids) for b in ld.epoch(1))
    with lirs.Loader(p, 64, granularity="instance", seed=1) as ld:
        assert sum(len(b.ids) for b in ld.epoch(1)) == 3001


def test_a_file_renamed_over_while_a_loader_has_it_open(tmp_path):
    """The usual atomic update (write a new file, rename it over the old name) while a Loader has
    the file open: that Loader goes on reading the file it opened, the one its index describes
    (its batches are those of the data as indexed); a Loader opened afterwards reads the new
    file, checked against the index at open."""
    p = _svm(tmp_path / "r.svm", 3000)
    lirs.build_index(p, progress=False)
    with lirs.Loader(p, 64, granularity="instance", seed=1) as ld:
        before = [(b.ids.copy(), b.X.toarray(), b.y.copy()) for b in ld.epoch(1)]
        next(iter(ld.epoch(0)))
        data = open(p, "rb").read().replace(b":0.", b":9.", 7)  # same size, other values
        open(p + ".new", "wb").write(data)
        os.replace(p + ".new", p)
        again = [(b.ids.copy(), b.X.toarray(), b.y.copy()) for b in ld.epoch(1)]
    assert len(again) == len(before)
    for (i, x, y), (i2, x2, y2) in zip(before, again):
        assert np.array_equal(i, i2) and np.array_equal(x, x2) and np.array_equal(y, y2)
    with pytest.raises(StaleIndexError, match="r.svm"):
        lirs.Loader(p, 64, granularity="instance", seed=1)


def _rename_over(p, data):
    open(p + ".new", "wb").write(data)
    os.replace(p + ".new", p)


@pytest.mark.parametrize("change", ["same-size edit", "rename over", "rename over, times kept", "append"])
def test_a_file_changed_before_the_first_epoch_is_not_read(tmp_path, change):
    """A Loader checks its files against the index when it opens, but opens them for reading at
    its first epoch: a file edited in place, renamed over or appended to in between fails that
    epoch with StaleIndexError naming it, before a batch is served from bytes its index does not
    describe (labels 2 here, where the index has -1 and 1)."""
    p = _svm(tmp_path / "b.svm", 3000)
    lirs.build_index(p, progress=False)
    data = open(p, "rb").read()
    for engine in ("buffered", "auto"):
        with open(p, "wb") as f:
            f.write(data)
        lirs.build_index(p, progress=False)
        with lirs.Loader(p, 64, granularity="group", seed=1, engine=engine) as ld:
            new = data.replace(b"\n1 ", b"\n2 ")
            if change == "same-size edit":
                with open(p, "r+b") as f:
                    f.write(new)
                st = os.stat(p)
                os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
            elif change == "rename over":
                _rename_over(p, new)
            elif change == "rename over, times kept":  # cp -p, rsync -t: the size and mtime the open found
                st = os.stat(p)
                open(p + ".new", "wb").write(new)
                os.utime(p + ".new", ns=(st.st_atime_ns, st.st_mtime_ns))
                os.replace(p + ".new", p)
            else:
                with open(p, "ab") as f:
                    f.write(b"1 3:0.5\n")
            served = []
            with pytest.raises(StaleIndexError, match=r"b\.svm changed since its index was checked.*lirs index "):
                for b in ld.epoch(0):
                    served.append(b.y)
            assert not served


def test_equal_shards_swapped_after_the_open_are_not_read(tmp_path):
    """Two shards of one size and mtime swapped between a Loader's open and its first epoch were
    read at the old offsets (each file's records served as the other's ids): the files a Loader
    opens must be the ones its open checked, and a DataLoader about to start workers checks so too."""
    from lirs.freshness import check_data_unmoved

    d = tmp_path / "D"
    d.mkdir()
    for name, base in (("a.txt", 10**5), ("b.txt", 10**12)):
        rows = b"".join(b"%d\n" % (base + i) for i in range(500))
        (d / name).write_bytes(rows[:7000].ljust(7000, b"x")[:-1] + b"\n")
    ns = os.stat(d / "a.txt").st_mtime_ns
    for name in ("a.txt", "b.txt"):
        os.utime(d / name, ns=(ns, ns))
    lirs.build_index(str(d), format="lines", progress=False)
    with lirs.Loader(str(d), 100, granularity="instance", index="never") as ld:
        os.replace(d / "a.txt", d / "t")
        os.replace(d / "b.txt", d / "a.txt")
        os.replace(d / "t", d / "b.txt")
        with pytest.raises(StaleIndexError, match=r"a\.txt changed since its index was checked at the Loader's open "
                                                  r"\(another file was renamed over it"):
            check_data_unmoved(ld.index)
        with pytest.raises(StaleIndexError, match="another file was renamed over it"):
            next(iter(ld.epoch(0)))
    # a byte-identical copy renamed over with its times (or an inode a FUSE or network filesystem
    # renumbered) is the same file where an open samples it: read, not refused
    lirs.build_index(str(d), format="lines", progress=False)
    with lirs.Loader(str(d), 100, granularity="instance", index="never") as ld:
        want = sorted(bytes(x) for b in ld.epoch(0) for x in b.X)
    with lirs.Loader(str(d), 100, granularity="instance", index="never") as ld:
        st = os.stat(d / "a.txt")
        (d / "t").write_bytes((d / "a.txt").read_bytes())
        os.utime(d / "t", ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(d / "t", d / "a.txt")
        check_data_unmoved(ld.index)
        assert sorted(bytes(x) for b in ld.epoch(0) for x in b.X) == want


@pytest.mark.parametrize("change", ["rewritten", "renamed over, times kept", "removed", "touched"])
def test_a_labels_file_changed_after_the_open_stops_the_first_epoch(tmp_path, change):
    """A Loader serves the labels its sidecar holds, checked against X.labels.npy at its open: a
    labels file rewritten, renamed over or removed before its first epoch went unseen (the old
    labels served beside rows read now). It stops that epoch, as a data file's change does."""
    from lirs.freshness import check_data_unmoved

    np.save(tmp_path / "X.npy", np.arange(20, dtype=np.float32).reshape(10, 2))
    lab = tmp_path / "X.labels.npy"
    np.save(lab, np.zeros(10, np.int32))
    lirs.build_index(str(tmp_path / "X.npy"), progress=False)
    with lirs.Loader(str(tmp_path / "X.npy"), 10, granularity="instance", index="never") as ld:
        st = os.stat(lab)
        if change == "removed":
            os.unlink(lab)
        elif change == "touched":  # the same labels: read, not refused, and the sidecar not rewritten mid-epoch
            os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
            side = os.stat(ld.index.sidecar)
            check_data_unmoved(ld.index)
            assert [b.y.tolist() for b in ld.epoch(0)] == [[0.0] * 10]
            now = os.stat(ld.index.sidecar)
            assert (now.st_ino, now.st_mtime_ns) == (side.st_ino, side.st_mtime_ns)
            return
        else:
            np.save(tmp_path / "new.npy", np.ones(10, np.int32))
            bump = 0 if change == "renamed over, times kept" else 10**9
            os.utime(tmp_path / "new.npy", ns=(st.st_atime_ns, st.st_mtime_ns + bump))
            os.replace(tmp_path / "new.npy", lab)
        with pytest.raises(StaleIndexError, match=r"X\.labels\.npy: the labels of .*X\.npy changed since indexing"):
            check_data_unmoved(ld.index)
        with pytest.raises(StaleIndexError, match=r"X\.labels\.npy"):
            next(iter(ld.epoch(0)))


def test_a_fifo_in_a_checked_files_place_is_not_opened_to_sample_it(tmp_path):
    """Another inode number with the size and mtime kept has its sampled blocks compared: a FIFO
    there (a 0-byte file's size) blocked that comparison's open for good."""
    from lirs.samples import same_samples

    os.mkfifo(tmp_path / "f")
    assert same_samples(str(tmp_path / "f"), 0, "0" * 32) is False
    assert same_samples(str(tmp_path / "gone"), 0, "0" * 32) is False


def test_an_io_error_sampling_a_renumbered_file_is_said_as_one(tmp_path, monkeypatch):
    """An EIO while sampling a file found under another inode number (a FUSE remount) was taken for
    "another file was renamed over it" (advice: re-index): it is raised as the read error it is."""
    import errno as E

    from lirs import samples
    from lirs.freshness import fingerprint

    p = tmp_path / "d.bin"
    p.write_bytes(bytes(range(256)) * 64)
    fp = fingerprint(str(p))
    assert samples.same_samples(str(p), fp["size"], fp["sample_hash"]) is True

    def eio(fd, n, off, path=None):
        raise OSError(E.EIO, "Input/output error", path)

    monkeypatch.setattr(samples, "pread_full", eio)
    with pytest.raises(OSError) as ei:
        samples.same_samples(str(p), fp["size"], fp["sample_hash"])
    assert ei.value.errno == E.EIO and not isinstance(ei.value, StaleIndexError)


def _gone_dataset(tmp_path, layout):
    """A dataset of one file, or a directory of three, indexed: (source, the file to remove, the
    advised command)."""
    if layout == "file":
        p = _svm(tmp_path / "g.svm", 3000)
        lirs.build_index(p, progress=False)
        return p, p, f"lirs index {p}"
    d = tmp_path / "D"
    d.mkdir()
    for i in range(3):
        _svm(d / f"g{i}.svm", 1000, seed=i)
    lirs.build_index(str(d), progress=False)
    return str(d), str(d / "g1.svm"), f"lirs index {d}"


@pytest.mark.parametrize("layout", ["file", "directory"])
@pytest.mark.parametrize("engine,direct", [("buffered", None), ("auto", None), ("auto", False)])
def test_a_file_removed_before_the_first_epoch_is_a_stale_index(tmp_path, layout, engine, direct):
    """A data file removed (another process cleaning up shards) between a Loader's open and its
    first epoch, which opens the files: StaleIndexError naming it with the re-index advice, as an
    edit is, not the engine's bare FileNotFoundError (nor, where ``auto`` tried every engine, an
    OSError of them all) that code re-indexing on StaleIndexError would miss; from ``aepoch`` too."""
    src, gone, command = _gone_dataset(tmp_path, layout)
    data = open(gone, "rb").read()
    want = rf"{re.escape(gone)} was removed .*since its index was checked at the Loader's open.*re-run `{re.escape(command)}`"
    for asynchronous in (False, True):
        with open(gone, "wb") as f:
            f.write(data)
        with lirs.Loader(src, 64, granularity="window", seed=0, engine=engine, direct=direct) as ld:
            os.unlink(gone)
            with pytest.raises(StaleIndexError, match=want):
                if asynchronous:
                    async def drain():
                        return [b async for b in ld.aepoch(0)]
                    asyncio.run(drain())
                else:
                    list(ld.epoch(0))


def test_a_dataloader_worker_finds_a_file_removed_before_its_first_pass(tmp_path):
    """A file removed after make_dataloader opened the dataset, before its first pass: a
    StaleIndexError naming it with the re-index advice (whichever of the worker's index or its
    engine finds it gone), not a FileNotFoundError out of the worker."""
    pytest.importorskip("torch")
    from lirs.torch import make_dataloader

    src, gone, command = _gone_dataset(tmp_path, "directory")
    dl = make_dataloader(src, 256, num_workers=1, granularity="window", seed=0)
    try:
        os.unlink(gone)
        with pytest.raises(StaleIndexError, match=rf"{re.escape(gone)} was removed .*re-run `{re.escape(command)}`"):
            sum(len(b["ids"]) for b in dl)
    finally:
        dl.dataset.close()


def test_a_directory_dataset_is_named_in_the_reindex_advice(tmp_path):
    """A file of an indexed directory changed, at open or while read: the error says to index the
    directory (indexing the file alone would write a sidecar the directory's Loader never reads)."""
    d = tmp_path / "D"
    d.mkdir()
    for i in range(2):
        _svm(d / f"p{i}.svm", 2000, seed=i)
    lirs.build_index(str(d), progress=False)
    with lirs.Loader(str(d), 64, granularity="instance", prefetch=1) as ld:
        it = ld.epoch(0)
        next(it)
        edit_first_byte(d / "p0.svm")
        with pytest.raises(StaleIndexError, match=f"re-run `lirs index {d}`"):
            for _ in it:
                pass
    with open(d / "p1.svm", "a") as f:
        f.write("1 3:0.5\n")
    with pytest.raises(StaleIndexError, match=f"re-run `lirs index {d}`"):
        lirs.Loader(str(d), 64)


def test_the_reindex_advice_keeps_the_options_the_index_was_built_with(tmp_path):
    """The advised `lirs index FILE` dropped `--format lines` (LIBSVM-looking lines kept whole) and
    `--record-size`: pasted, it built a LIBSVM index of the lines file, or failed on raw records."""
    lines, csv, raw = tmp_path / "a.svm", tmp_path / "h.csv", tmp_path / "r.bin"
    lines.write_bytes(b"1 1:1\n0 2:1\n")
    csv.write_bytes(b"age,label\n31,1\n")  # a header kept as a record
    raw.write_bytes(bytes(range(40)))
    lirs.build_index(str(lines), format="lines", progress=False)
    lirs.build_index(str(csv), format="lines", progress=False)
    lirs.build_index(str(raw), record_size=8, header_size=8, progress=False)
    for p, opts in ((lines, " --format lines"), (csv, " --format lines"), (raw, " --record-size 8 --header-size 8")):
        with open(p, "r+b") as f:
            f.write(b"2")
        with pytest.raises(StaleIndexError, match=f"re-run `lirs index {p}{opts}`"):
            lirs.Loader(str(p), 1)
    found = tmp_path / "b.csv"  # detection chose the format: no option
    found.write_bytes(b"1,2\n3,4\n")
    lirs.build_index(str(found), progress=False)
    found.write_bytes(b"1,2\n3,5\n")
    with pytest.raises(StaleIndexError, match=f"re-run `lirs index {found}`$"):
        lirs.Loader(str(found), 1)


def test_persistent_dataloader_workers_find_a_file_rewritten_between_passes(tmp_path):
    """make_dataloader's persistent workers keep their Loaders open from pass to pass: a file
    rewritten in place after a pass fails the next pass with StaleIndexError naming it."""
    pytest.importorskip("torch")
    from lirs.torch import make_dataloader

    p = _svm(tmp_path / "w.svm", 20_000)
    lirs.build_index(p, progress=False)
    dl = make_dataloader(p, 256, num_workers=2, granularity="window", seed=0)
    try:
        assert sum(len(b["ids"]) for b in dl) == 20_000
        with open(p, "r+b") as f:  # same size, new content and mtime
            f.seek(10)
            f.write(b"9" if f.read(1) != b"9" else b"8")
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        with pytest.raises(StaleIndexError, match="w.svm"):
            sum(len(b["ids"]) for b in dl)
    finally:
        dl.dataset.close()


# --------------------------------------------------------------------------- corrupt offset table


def _corrupt_rel(p, i, value):
    header, _ = S.read_header(p + ".lirs")
    off = header["arrays"]["offsets_rel"]["offset"] + 4 * i
    with open(p + ".lirs", "r+b") as f:
        f.seek(off)
        f.write(int(value).to_bytes(4, "little"))


@pytest.mark.parametrize("value", [0xFFFFFF00, 0])
@pytest.mark.parametrize("granularity", ["instance", "page", "group", "window"])
def test_a_corrupt_offset_word_is_a_clean_error(tmp_path, granularity, value):
    p = _svm(tmp_path / "c.svm", 3000)
    lirs.build_index(p, progress=False)
    _corrupt_rel(p, 1500, value)
    with pytest.raises(IndexFormatError) as ei:
        with lirs.Loader(p, 64, granularity=granularity) as ld:
            for _ in ld.epoch(0):
                pass
    assert p + ".lirs" in str(ei.value) and "lirs index --check" in str(ei.value)


def test_a_corrupt_offset_word_from_the_cli(tmp_path):
    p = _svm(tmp_path / "c.svm", 3000)
    lirs.build_index(p, progress=False)
    _corrupt_rel(p, 700, 0xFFFFFF00)
    r = subprocess.run([sys.executable, "-m", "lirs.cli", "epoch", p, "--granularity", "group"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "corrupt offset table" in r.stderr
    r = subprocess.run([sys.executable, "-m", "lirs.cli", "index", "--check", p],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_a_plausible_corrupt_offset_word_is_found_by_the_check(tmp_path):
    """A flipped offset word that still lies inside its file passes the open's plausibility check;
    an epoch reading that record stops with a DataError saying the index and the data disagree
    (not only blaming the data), and `lirs index --check` finds the sidecar corrupt."""
    from lirs.errors import DataError

    p = _svm(tmp_path / "c.svm", 3000)
    lirs.build_index(p, progress=False)
    header, _ = S.read_header(p + ".lirs")
    off = header["arrays"]["offsets_rel"]["offset"] + 4 * 1500
    with open(p + ".lirs", "rb") as f:
        f.seek(off)
        word = int.from_bytes(f.read(4), "little")
    _corrupt_rel(p, 1500, word + 3)  # record 1500 now starts inside its own line
    with lirs.Loader(p, 64, granularity="instance") as ld:
        with pytest.raises(DataError, match="well formed when indexed, so the index and the data disagree"):
            for _ in ld.epoch(0):
                pass
    r = subprocess.run([sys.executable, "-m", "lirs.cli", "index", "--check", p],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr and p + ".lirs" in r.stderr, r.stderr


def test_a_flipped_block_base_of_the_offset_table_is_refused_at_open(tmp_path):
    """One bit of an offset block's base moved the starts of its 1024 records by a byte, all still
    inside their file: a line format served them cut at the wrong byte, with no error. The bases (8 B
    per 1024 records) are read whole and checked against their CRC-32 at every open now."""
    from lirs.errors import IndexFormatError

    p = tmp_path / "l.jsonl"
    p.write_text("".join('{"i": %d}\n' % i for i in range(2500)))
    lirs.build_index(str(p), progress=False)
    header, _ = S.read_header(str(p) + ".lirs")
    off = header["arrays"]["offsets_base"]["offset"]
    data = bytearray((tmp_path / "l.jsonl.lirs").read_bytes())
    data[off] ^= 1  # base[0] + 1
    (tmp_path / "l.jsonl.lirs").write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match=r"l\.jsonl\.lirs: array offsets_base at byte \d+ is corrupt"):
        lirs.Loader(str(p), 64)
    assert main(["index", "--check", str(p)]) == 1


def test_a_truncated_sidecar_or_a_directory_in_its_place_says_what_to_do(tmp_path):
    """A sidecar cut short said "truncated index" and no more; a directory where the sidecar belongs
    came out of the Loader as a bare IsADirectoryError."""
    from lirs.errors import IndexFormatError

    p = tmp_path / "l.jsonl"
    p.write_text("".join('{"i": %d}\n' % i for i in range(300)))
    lirs.build_index(str(p), progress=False)
    sc = tmp_path / "l.jsonl.lirs"
    sc.write_bytes(sc.read_bytes()[:100])
    with pytest.raises(IndexFormatError, match=r"l\.jsonl\.lirs: truncated or corrupt index .*re-run `lirs index`"):
        lirs.Loader(str(p), 64)
    sc.unlink()
    sc.mkdir()
    with pytest.raises(IndexFormatError, match=r"l\.jsonl\.lirs is a directory where .*l\.jsonl's index belongs; remove"):
        lirs.Loader(str(p), 64)


def test_a_labels_file_changed_after_indexing_is_found_at_open(tmp_path):
    """The labels of .npy data are served from the sidecar: a labels file edited after indexing
    (other values, same size) or removed is StaleIndexError naming it at open and for `lirs index
    --check`; one rewritten with the same labels (its mtime moved) is compared label by label and
    opens; `lirs index` again serves the new labels."""
    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    np.save(x, np.arange(60, dtype=np.float32).reshape(20, 3))
    np.save(lab, np.arange(20, dtype=np.float64))
    lirs.build_index(str(x), progress=False)
    st = os.stat(lab)
    np.save(lab, np.arange(20, dtype=np.float64))  # the same labels, written again
    os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert np.array_equal(open_index(str(x)).labels, np.arange(20))
    np.save(lab, np.arange(20, dtype=np.float64)[::-1].copy())  # other labels, same size
    os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: the labels of .*x\.npy changed since indexing"):
        lirs.Loader(str(x), 4)
    assert main(["index", "--check", str(x)]) == 1
    lirs.build_index(str(x), progress=False)
    with lirs.Loader(str(x), 4, granularity="instance") as ld:
        got = {int(i): float(y) for b in ld.epoch(0) for i, y in zip(b.ids, b.y)}
    assert got == {i: float(19 - i) for i in range(20)}
    os.remove(lab)
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: .*\(it is gone\)"):
        open_index(str(x))


def test_labels_that_appear_or_are_missing_for_one_file_are_not_lost_unsaid(tmp_path):
    """A labels file written beside .npy data indexed without one was never seen (its records
    served without labels): named at open. A directory where one .npy has labels and another has
    none is refused at `lirs index` (every label was dropped). A labels edit that kept its mtime
    is said so, not "mtime changed (t -> t)"."""
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((20, 3), np.float32))
    lirs.build_index(str(x), progress=False)
    np.save(tmp_path / "x.labels.npy", np.ones(20))
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: a labels file for .*x\.npy appeared since indexing"):
        lirs.Loader(str(x), 4)
    assert main(["index", "--check", str(x)]) == 1
    lirs.build_index(str(x), progress=False)
    with lirs.Loader(str(x), 4) as ld:
        assert all((b.y == 1).all() for b in ld.epoch(0))
    d = tmp_path / "set"
    d.mkdir()
    np.save(d / "a.npy", np.zeros((10, 3), np.float32)), np.save(d / "a.labels.npy", np.ones(10))
    np.save(d / "b.npy", np.zeros((5, 3), np.float32))
    with pytest.raises(DataError, match=r"b\.npy: no labels file beside it .*b\.labels\.npy.*while .*a\.npy has one"):
        lirs.build_index(str(d), progress=False)
    lab = tmp_path / "x.labels.npy"
    st = os.stat(lab)
    np.save(lab, np.full(20, 2.0))  # same size, other labels, the mtime put back
    os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(StaleIndexError, match=r"\(its content changed: sampled blocks differ, its mtime kept; "
                                              r"record 0: the index has 1\.0, the file has 2\.0\)"):
        open_index(str(x))


def test_the_reindex_command_names_what_was_indexed(tmp_path):
    """The advice of a stale-index error rebuilds the index that was opened: a file's own sidecar,
    a directory's DIR.lirs, or a list's sidecar named with -o."""
    from lirs.freshness import reindex_command

    d = tmp_path / "D"
    d.mkdir()
    a, b = str(d / "a.svm"), str(d / "b.svm")
    assert reindex_command([a], a + ".lirs") == f"lirs index {a}"
    assert reindex_command([a, b], str(d) + ".lirs") == f"lirs index {d}"
    assert reindex_command([a, b], str(tmp_path / "ab.lirs")) == f"lirs index {a} {b} -o {tmp_path / 'ab.lirs'}"
    assert reindex_command([a], None) == f"lirs index {a}"


def test_a_stale_index_in_a_read_only_directory_is_rebuilt_elsewhere(tmp_path):
    """Where the sidecar cannot be rewritten (a read-only mount), the advice builds one elsewhere
    with -o and passes it as the source; rebuilding in place would fail on EROFS."""
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir(), ro.mkdir()
    (rw / "a.svm").write_bytes(b"1 1:1\n-1 2:1\n")
    lirs.build_index(str(rw / "a.svm"), progress=False)
    if subprocess.run(["mount", "--bind", str(rw), str(ro)], capture_output=True).returncode:
        pytest.skip("bind mounts need root")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode:
            pytest.skip("no read-only remount here")
        with open(rw / "a.svm", "ab") as f:
            f.write(b"1 3:1\n")
        with pytest.raises(StaleIndexError, match=rf"re-run `lirs index {ro / 'a.svm'} -o DIR/NAME.lirs` in a "
                                                  rf"directory you can write \({ro} is read-only\), then pass"):
            open_index(str(ro / "a.svm"))
        out = tmp_path / "elsewhere.lirs"
        lirs.build_index(str(ro / "a.svm"), out=str(out), progress=False)  # the advice, followed
        assert len(open_index(str(out))) == 3
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)  # lazily: a traceback may hold a file open


def test_a_touched_labels_file_is_compared_once_and_then_trusted(tmp_path, monkeypatch):
    """A labels file whose mtime moved (touch, a copy keeping its bytes) was read whole and
    compared at every open, its new mtime never recorded (gigabytes each time for a large .npy):
    once found unchanged, its mtime is recorded in the sidecar, as a data file's is. The
    comparison goes a million labels at a time."""
    import lirs.freshness as fr

    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    np.save(x, np.zeros((3_000_000, 1), np.uint8))
    np.save(lab, np.arange(3_000_000, dtype=np.float64) % 7)
    before = fr.identity(lirs.build_index(str(x), progress=False))
    st = os.stat(lab)
    os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))
    compared, chunks = [], []
    real_same, real_of = fr._label_difference, lirs.index.Index.labels_of
    monkeypatch.setattr(fr, "_label_difference", lambda *a: compared.append(1) or real_same(*a))
    monkeypatch.setattr(lirs.index.Index, "labels_of", lambda self, ids: chunks.append(len(ids)) or real_of(self, ids))
    assert np.array_equal(open_index(str(x)).labels, np.arange(3_000_000) % 7)
    assert len(compared) == 1 and max(chunks) <= 1 << 20
    # the same index to a spawned DataLoader worker that reopens it (its identity leaves mtimes out)
    assert fr.identity(open_index(str(x))) == before
    assert len(compared) == 1, "the recorded mtime is trusted at the next open"
    np.save(lab, (np.arange(3_000_000, dtype=np.float64) % 7)[::-1].copy())  # other labels: still found
    with pytest.raises(StaleIndexError, match=r"x\.labels\.npy: the labels of .*x\.npy changed since indexing"):
        open_index(str(x))


def test_the_check_reads_every_file_even_where_size_and_mtime_match(tmp_path, capsys):
    """A same-size edit whose mtime was put back (os.utime) passes the cheap check of an open, 16
    sampled blocks (the README says so); `lirs index --check`, which promises an exact answer,
    said "still matches": it now reads every data file and labels file whole."""
    p = tmp_path / "d.svm"
    lines = [f"{1 if i % 3 else -1} {i % 50 + 1}:{i % 7}\n" for i in range(200_000)]
    p.write_text("".join(lines))
    lirs.build_index(str(p), progress=False)
    st = os.stat(p)
    data = bytearray(p.read_bytes())
    at = data.index(b"\n-1 ", 1_000_003) + 1
    data[at:at + 2] = b" 0"  # a label, same size, deep inside a sampled-out block
    p.write_bytes(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    open_index(str(p))  # the cheap check: size and mtime match, the sampled blocks too
    assert main(["index", "--check", str(p)]) == 1
    assert "content changed at" in capsys.readouterr().err
    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    np.save(x, np.zeros((50, 2), np.float32))
    np.save(lab, np.arange(50, dtype=np.float64))
    lirs.build_index(str(x), progress=False)
    st = os.stat(lab)
    np.save(lab, np.arange(50, dtype=np.float64)[::-1].copy())
    os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["index", "--check", str(x)]) == 1
    assert "labels of" in capsys.readouterr().err


def test_the_check_compares_labels_a_filesystem_cannot_map(tmp_path, monkeypatch, capsys):
    """Where a labels file cannot be memory-mapped (ENODEV: some FUSE and network filesystems), it
    is read by pread and compared: `lirs index --check` said its unchanged labels differed."""
    import errno

    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    np.save(x, np.zeros((40, 2), np.float32))
    np.save(lab, np.arange(40, dtype=np.float64))
    lirs.build_index(str(x), progress=False)
    real = np.load

    def no_map(path, *a, mmap_mode=None, **k):
        if mmap_mode and str(path).endswith(".labels.npy"):
            raise OSError(errno.ENODEV, "No such device", str(path))
        return real(path, *a, mmap_mode=mmap_mode, **k)

    monkeypatch.setattr(np, "load", no_map)
    assert main(["index", "--check", str(x)]) == 0, capsys.readouterr().err
    np.save(lab, np.arange(40, dtype=np.float64)[::-1].copy())
    assert main(["index", "--check", str(x)]) == 1 and "labels of" in capsys.readouterr().err


@pytest.mark.parametrize("err", [errno.EROFS, errno.ENOSPC])
def test_a_touched_labels_file_beside_a_read_only_sidecar_is_compared_at_every_open(tmp_path, monkeypatch, err):
    """Where the sidecar cannot be rewritten (a read-only mount, a full disk), the labels file's new
    mtime is not recorded: every open compares it again, and opens."""
    import lirs.freshness as fr
    import lirs.sidecar as sc

    x, lab = tmp_path / "x.npy", tmp_path / "x.labels.npy"
    np.save(x, np.zeros((30, 1), np.uint8))
    np.save(lab, np.arange(30, dtype=np.float64))
    lirs.build_index(str(x), progress=False)
    st = os.stat(lab)
    os.utime(lab, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))

    def read_only(*a, **k):
        raise OSError(err, os.strerror(err))

    compared = []
    real = fr._label_difference
    monkeypatch.setattr(sc, "rewrite_header", read_only)
    monkeypatch.setattr(fr, "_label_difference", lambda *a: compared.append(1) or real(*a))
    for _ in range(2):
        assert np.array_equal(open_index(str(x)).labels, np.arange(30))
    assert len(compared) == 2


def test_an_open_that_records_a_touch_keeps_the_sidecar_s_mode_and_owner(big, monkeypatch, tmp_path):
    """Recording a verified touch rewrote the sidecar as a new file of the opener's: under umask
    077 a 644 sidecar became 600, and another user's open took the file over (others then could
    not read it). The mode is kept; another user's sidecar is left, the touch recorded in the cache."""
    p, data, side = big
    _restore(p, data, side)
    sc = p + ".lirs"
    os.chmod(sc, 0o644)
    os.utime(p)
    old = os.umask(0o077)
    try:
        open_index(p)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(sc).st_mode) == 0o644
    assert open_index(p, check=False).fingerprints[0]["mtime_ns"] == os.stat(p).st_mtime_ns  # recorded there
    os.utime(p)
    before = os.stat(sc)
    monkeypatch.setattr(os, "geteuid", lambda: before.st_uid + 1)  # as another user would
    open_index(p)
    assert os.stat(sc).st_ino == before.st_ino and os.listdir(tmp_path / "cache" / "verified")


def _another_group() -> int:
    """A group the sidecar can be given other than ours (any, as root; else one we are in)."""
    if os.geteuid() == 0:
        return os.getegid() + 1 if os.getegid() < 65534 else 1
    others = [g for g in os.getgroups() if g != os.getegid()]
    if not others:
        pytest.skip("in no group but our own: no other group to give a sidecar")
    return others[0]


def test_an_open_that_records_a_touch_keeps_the_sidecar_s_group(big, monkeypatch, tmp_path):
    """Recording a verified touch rewrote a 640 sidecar of group G with the opener's own group: G's
    other members could no longer read the index. The group is kept; where it cannot be (a group
    the opener is not in), the sidecar is left as it is and the touch recorded in the cache."""
    p, data, side = big
    _restore(p, data, side)
    sc = p + ".lirs"
    gid = _another_group()
    os.chown(sc, -1, gid)
    os.chmod(sc, 0o640)
    os.utime(p)
    open_index(p)
    after = os.stat(sc)
    assert (after.st_gid, stat.S_IMODE(after.st_mode)) == (gid, 0o640)
    assert open_index(p, check=False).fingerprints[0]["mtime_ns"] == os.stat(p).st_mtime_ns  # recorded there

    def refused(fd, uid, g):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    os.utime(p)
    monkeypatch.setattr(os, "fchown", refused)  # as for a group the opener is not in
    open_index(p)
    assert os.stat(sc).st_ino == after.st_ino and os.listdir(tmp_path / "cache" / "verified")
    assert open_index(p).fingerprints[0]["mtime_ns"] != os.stat(p).st_mtime_ns  # the cache holds it


def _many_files(tmp_path, n):
    """A directory of ``n`` one-record LIBSVM files, indexed."""
    d = tmp_path / "many"
    d.mkdir()
    for i in range(n):
        (d / f"s{i:04d}.svm").write_text(f"{i} 1:1\n")
    lirs.build_index(str(d), progress=False)
    return str(d)


def test_opening_an_index_of_many_files_counts_each_file_s_blocks_once(tmp_path, monkeypatch):
    """Each file's checksums were found by counting the blocks of every file before it, for every
    file: an open of 20,000 files took minutes. Counted, not timed: the work is linear in files."""
    d = _many_files(tmp_path, 200)
    calls = []
    real = C.block_count
    monkeypatch.setattr(C, "block_count", lambda size: calls.append(1) or real(size))
    idx = open_index(d)
    assert idx.nfiles == 200 and len(calls) <= 3 * 200
    assert [int(idx.file_sums(f)[0]) for f in (0, 199)] == [int(C.sum_file(idx.paths[f])[0]) for f in (0, 199)]
    assert len(idx.file_marks(199)) == 2 and len(calls) <= 3 * 200


def test_a_read_only_sidecar_s_recorded_touches_are_read_once_per_open(tmp_path, monkeypatch):
    """The verifications recorded in the cache (the sidecar read-only) were read again for every
    data file: once per open now, and still trusted (no data file read again)."""
    import json

    d = _many_files(tmp_path, 150)
    for name in os.listdir(d):
        os.utime(os.path.join(d, name), ns=(10 ** 18, 10 ** 18))

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(S, "rewrite_header", read_only)
    assert len(open_index(d).check_fresh()) == 0  # the first open recorded every file in the cache
    loads = []
    real = json.load
    cache = str(tmp_path / "cache")
    monkeypatch.setattr(json, "load", lambda f, **k: (loads.append(1) if f.name.startswith(cache) else None)
                        or real(f, **k))
    monkeypatch.setattr(C, "first_changed_block", lambda *a, **k: pytest.fail("read whole again"))
    assert open_index(d).nfiles == 150
    assert len(loads) == 1



def test_a_touched_file_on_a_full_disk_is_read_its_check_recorded_where_it_can_be(full_fs, tmp_path, monkeypatch,
                                                                                 capsys):
    """A data file whose mtime moved, its sidecar on a full filesystem: the open failed with a bare "No
    space left on device" (rewriting the sidecar's header to record the check). Recording is optional,
    as on a read-only mount: the data is read, the check recorded in the cache, or, where the cache is
    full too, nowhere, and no empty temporary of it is left there."""
    p = _svm(full_fs / "a.svm", 2000)
    lirs.build_index(p, progress=False)
    fill_fs(full_fs)
    os.utime(p, ns=(10 ** 18, 10 ** 18))
    cache = full_fs / "cache"
    monkeypatch.setenv("LIRS_CACHE_DIR", str(cache))  # full too: recorded nowhere
    assert open_index(p).n == 2000
    assert main(["info", p]) == 0, capsys.readouterr().err
    assert [n for n in os.listdir(cache / "verified") if ".lirs-tmp-" in n] == []
    assert open_index(p, check=False).fingerprints[0]["mtime_ns"] != 10 ** 18  # the sidecar as it was
    monkeypatch.setenv("LIRS_CACHE_DIR", str(tmp_path / "cache"))
    with lirs.Loader(p, 100) as loader:
        assert sum(len(b.ids) for b in loader.epoch(0)) == 2000
    assert os.listdir(tmp_path / "cache" / "verified")  # recorded there: the next open is cheap
    monkeypatch.setattr(C, "first_changed_block", lambda *a, **k: pytest.fail("read whole again"))
    assert open_index(p).n == 2000


def test_a_header_rewrite_on_a_full_disk_names_the_sidecar(full_fs):
    p = _svm(full_fs / "a.svm", 2000)
    lirs.build_index(p, progress=False)
    fill_fs(full_fs)
    with pytest.raises(OSError) as ei:
        S.rewrite_header(p + ".lirs", lambda h: h)
    assert ei.value.errno == errno.ENOSPC and ei.value.filename == p + ".lirs"
    assert sorted(os.listdir(full_fs)) == ["a.svm", "a.svm.lirs", "fill"]
