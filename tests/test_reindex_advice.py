"""The ``lirs index`` command a stale index advises: pasted, it must run, and rebuild the index
of the same inputs (a directory stays a directory), so that the next open serves every record."""
from __future__ import annotations

import glob
import os
import re
import shlex

import numpy as np
import pytest

from conftest import edit_first_byte
import lirs
from lirs.cli import main
from lirs.errors import StaleIndexError


pytestmark = pytest.mark.usefixtures("private_cache")


def _svm(path, n, seed=0):
    rng = np.random.default_rng(seed)
    lab = rng.integers(0, 2, n) * 2 - 1
    path.write_text("".join(f"{lab[i]} {1 + i % 7}:{rng.random():.5f}\n" for i in range(n)))
    return str(path)


def _advised(err) -> str:
    """The command between the backquotes of a StaleIndexError's "re-run `...`"."""
    return re.search(r"re-run `([^`]*)`", str(err.value)).group(1)


def _run(command: str) -> int:
    """Run the advised `lirs index ...` as a shell would: its patterns expanded."""
    words = shlex.split(command)
    assert words[:2] == ["lirs", "index"], command
    words = [x for w in words for x in (sorted(glob.glob(w)) if glob.has_magic(w) else [w])]
    return main([*words[1:], "--quiet"])


def test_a_directory_indexed_elsewhere_is_advised_as_the_directory(tmp_path):
    """`lirs index D -o idx/train.lirs`, then a shard appended to: the advice listed D's files, not
    D; pasted, it rebuilt the index as one of a file list, and a shard added to D later was never
    reported: its records were left out of every epoch, unsaid. Found at open, by a Loader's first
    epoch (a file removed after its open), mid-epoch and in a labels file: each advises D."""
    d, idx = tmp_path / "data", tmp_path / "idx"
    d.mkdir()
    idx.mkdir()
    for i in range(2):
        _svm(d / f"p{i}.svm", 2000, seed=i)
    out = str(idx / "train.lirs")
    want = f"lirs index {d} -o {out}"
    lirs.build_index(str(d), out=out, progress=False)
    with lirs.Loader(out, 64, granularity="instance", prefetch=1) as ld:  # mid-epoch
        it = ld.epoch(0)
        next(it)
        edit_first_byte(d / "p0.svm")
        with pytest.raises(StaleIndexError) as e:
            for _ in it:
                pass
    assert _advised(e) == want
    lirs.build_index(str(d), out=out, progress=False)
    with lirs.Loader(out, 64, granularity="window", seed=0) as ld:  # removed after the Loader's open
        kept = (d / "p1.svm").read_bytes()
        os.unlink(d / "p1.svm")
        with pytest.raises(StaleIndexError) as e:
            list(ld.epoch(0))
    assert _advised(e) == want
    (d / "p1.svm").write_bytes(kept)
    lirs.build_index(str(d), out=out, progress=False)
    with open(d / "p1.svm", "a") as f:  # at open
        f.write("1 3:0.5\n")
    with pytest.raises(StaleIndexError) as e:
        lirs.Loader(out, 64)
    assert _advised(e) == want
    assert _run(_advised(e)) == 0
    _svm(d / "p2.svm", 100, seed=2)  # the index is still of the directory: a shard added is found
    with pytest.raises(StaleIndexError, match="p2.svm"):
        lirs.Loader(out, 64)


def test_a_labels_file_of_a_directory_indexed_elsewhere_advises_the_directory(tmp_path):
    """The labels of `.npy` data in a directory indexed elsewhere changed: the advice names the
    directory, not its files."""
    d, idx = tmp_path / "data", tmp_path / "idx"
    d.mkdir()
    idx.mkdir()
    for i in range(2):
        np.save(d / f"x{i}.npy", np.zeros((10, 3), np.float32))
        np.save(d / f"x{i}.labels.npy", np.arange(10, dtype=np.float64))
    out = str(idx / "train.lirs")
    lirs.build_index(str(d), out=out, progress=False)
    np.save(d / "x1.labels.npy", np.arange(10, dtype=np.float64) + 1)
    with pytest.raises(StaleIndexError, match="labels") as e:
        lirs.Loader(out, 4)
    assert _advised(e) == f"lirs index {d} -o {out}"


def test_check_advises_full_for_an_edit_only_a_whole_read_finds(tmp_path, capsys):
    """`lirs index --check` found a same-size edit whose mtime was put back (it reads every byte)
    and advised `lirs index FILE`, whose incremental scan trusts size, mtime and sampled blocks:
    it kept the old records, and --check failed again with the same advice, forever. It advises
    `lirs index --full FILE`, after which --check passes."""
    p = _svm(tmp_path / "a.svm", 20000)
    lirs.build_index(p, progress=False)
    data = bytearray(open(p, "rb").read())
    sampled = [(int(x), int(x) + 4096) for x in np.linspace(0, len(data) - 4096, 16)]
    off = next(i + 1 for i in range(len(data) - 1) if data[i:i + 2] == b"\n1"
               and not any(a <= i + 1 < b for a, b in sampled))
    data[off] = ord("2")  # a label 1 -> 2: same size
    st = os.stat(p)
    open(p, "wb").write(data)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["index", "--check", p]) == 1
    err = capsys.readouterr().err
    command = re.search(r"re-run `([^`]*)`", err).group(1)
    assert command == f"lirs index --full {p}", err
    assert _run(command) == 0
    assert main(["index", "--check", p]) == 0


def test_an_empty_file_among_those_listed_holds_zero_records(tmp_path):
    """`lirs index a.svm b.svm c.svm -o x.lirs`, then b.svm truncated to 0 bytes: the stale advice
    repeated the command, which refused "b.svm: empty file (0 bytes); nothing to index", where a
    comment-only b.svm (and an empty shard of a directory) is zero records. Listed among others, an
    empty file is zero records, whether its format comes from its name or from the others'; alone,
    or with none but empty ones, it is still refused."""
    from lirs.errors import DataError

    files = [_svm(tmp_path / f"{n}.svm", 100, seed=i) for i, n in enumerate("abc")]
    out = str(tmp_path / "x.lirs")
    lirs.build_index(files, out=out, progress=False)
    open(files[1], "wb").close()
    with pytest.raises(StaleIndexError) as e:
        lirs.Loader(out, 64)
    assert _run(_advised(e)) == 0
    with lirs.Loader(out, 64) as ld:
        assert sum(len(b.ids) for b in ld.epoch(0)) == 200
    _svm(tmp_path / "b.svm", 10)  # once it holds records, the index is stale
    with pytest.raises(StaleIndexError, match="b.svm"):
        lirs.Loader(out, 64)
    bare = [_svm(tmp_path / "p0", 50), str(tmp_path / "p1")]  # read by content: the empty one too
    open(bare[1], "wb").close()
    assert len(lirs.build_index(bare, out=str(tmp_path / "p.lirs"), progress=False)) == 50
    for f in files:
        open(f, "wb").close()
    with pytest.raises(DataError, match=r"a\.svm: empty file \(0 bytes\), as is every file given; nothing to index"):
        lirs.build_index(files, out=out, progress=False)
    with pytest.raises(DataError, match=r"b\.svm: empty file \(0 bytes\); nothing to index"):
        lirs.build_index(files[1], progress=False)


def test_a_shard_removed_from_a_listed_dataset_is_a_stale_index(tmp_path):
    """One of the files of `lirs index data/train-*.svm -o train.lirs` deleted: IndexFormatError
    "indexes X, which does not exist (the index was built for X) ... move it back with its data",
    the same path twice and a moved sidecar blamed, no command to run. Its other files are where the
    sidecar says: a StaleIndexError naming the file removed, advising the files that remain."""
    from lirs.errors import IndexFormatError

    d = tmp_path / "data"
    d.mkdir()
    train = [_svm(d / f"train-{i:02d}.svm", 50, seed=i) for i in range(12)]
    _svm(d / "test-00.svm", 50)
    out = str(tmp_path / "train.lirs")
    lirs.build_index(train, out=out, progress=False)
    os.unlink(train[5])
    with pytest.raises(StaleIndexError, match=rf"{re.escape(train[5])} was removed since indexing") as e:
        lirs.Loader(out, 64)
    assert _run(_advised(e)) == 0
    with lirs.Loader(out, 64) as ld:
        assert sum(len(b.ids) for b in ld.epoch(0)) == 550
    one = _svm(tmp_path / "one.svm", 10)  # a sidecar of one file, gone: its path said once
    lirs.build_index(one, progress=False)
    os.unlink(one)
    with pytest.raises(IndexFormatError) as e:
        lirs.open_index(one + ".lirs")
    assert f"indexes {one}, which does not exist;" in str(e.value) and "built for" not in str(e.value), e.value


@pytest.mark.parametrize("added", ["part-4.svm", "README.md"])
def test_a_file_added_where_lirs_index_dir_would_refuse_the_directory_says_so(tmp_path, added):
    """A directory read by content (part-0, part-1, part-2.svm, part-3.svm) gains part-4.svm (its
    shards now mostly .svm), or a README.md: the error advised `lirs index DIR`, which then refused
    the directory ("part-0: not a .svm file like the others"). It says that `lirs index DIR` would
    refuse it, naming the file and what the refusal advises (move it out, or the files to index)."""
    d = tmp_path / "data"
    d.mkdir()
    names = ["part-0", "part-1", "part-2.svm", "part-3.svm"] if added == "part-4.svm" else ["a.svm", "b.svm"]
    for i, n in enumerate(names):
        _svm(d / n, 50, seed=i)
    lirs.build_index(str(d), progress=False)
    (d / added).write_text(open(_svm(tmp_path / "x.svm", 5)).read() if added.endswith(".svm") else "# data\n")
    stray = "part-0" if added == "part-4.svm" else "README.md"
    with pytest.raises(StaleIndexError, match=rf"does not cover: {re.escape(added)}; lirs index would refuse "
                       rf"{re.escape(str(d))} as it is now: {stray}: not a \.svm file like the others .*move it out") as e:
        lirs.Loader(str(d), 64)
    assert "re-run" not in str(e.value)


@pytest.mark.parametrize("move", ["sidecar", "directory"])
def test_a_directory_s_sidecar_moved_from_it_is_a_moved_sidecar_not_a_removed_shard(tmp_path, move):
    """a/shards.lirs moved to b/ (or a/shards renamed): the error said "b/shards/part-0.svm was removed
    from b/shards after it was indexed; re-run `lirs index b/shards`", a directory that does not exist.
    It says the sidecar indexes b/shards, which does not exist, built for a/shards: move it back."""
    from lirs.errors import IndexFormatError

    a = tmp_path / "a" / "shards"
    a.mkdir(parents=True)
    (tmp_path / "b").mkdir()
    for k in range(2):
        _svm(a / f"part-{k}.svm", 50, seed=k)
    lirs.build_index(str(a), progress=False)
    if move == "sidecar":
        os.rename(tmp_path / "a" / "shards.lirs", tmp_path / "b" / "shards.lirs")
        side, gone = tmp_path / "b" / "shards.lirs", tmp_path / "b" / "shards"
    else:
        os.rename(a, tmp_path / "a" / "renamed")
        side, gone = tmp_path / "a" / "shards.lirs", a
    with pytest.raises(IndexFormatError) as e:
        lirs.open_index(str(side))
    msg = str(e.value)
    assert f"indexes {gone}, which does not exist" in msg, msg
    assert (f"built for the directory {a}" in msg) == (move == "sidecar"), msg
    assert "move it back" in msg and "was removed" not in msg, msg
