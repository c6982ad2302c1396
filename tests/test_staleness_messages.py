"""Messages and litter: broken pipes, blocked index paths, ENOSPC naming the file, litter of dead
runs under other names, EIO in the O_DIRECT probe, CSV headers, sklearn's zero_based over files."""
from __future__ import annotations

import errno
import os
import re
import subprocess
import sys

import pytest

import lirs
from lirs import litter
from lirs import sidecar as S
from lirs.cli import main
from lirs.errors import DataError


def _svm(path, text=None):
    path.write_text(text or "".join(f"{i % 2} {1 + i % 5}:{i}\n" for i in range(300)))
    return str(path)


def test_info_broken_pipe_in_process(tmp_path, monkeypatch, capsys):
    p = _svm(tmp_path / "a.svm")
    lirs.build_index(p, progress=False)
    import lirs.commands.info as info

    def boom(*a, **k):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(info, "print_summary", boom)
    monkeypatch.setattr("lirs.cli.quiet_stdout", lambda: None)
    assert main(["info", p]) == 0
    assert "Broken pipe" not in capsys.readouterr().err


def test_an_index_path_that_is_a_directory_is_named(tmp_path, capsys):
    p = _svm(tmp_path / "a.svm")
    os.mkdir(p + ".lirs")
    assert main(["index", p]) == 2
    err = capsys.readouterr().err
    assert p + ".lirs" in err and "is a directory" in err and "lirs-tmp-" not in err


def test_enospc_while_writing_the_index_names_it(tmp_path, monkeypatch, capsys):
    p = _svm(tmp_path / "a.svm")
    from lirs import sidecar as S

    real = S.SidecarWriter._put

    def full(self, b):
        if self.f.tell() > 100:
            self.f = _Full(self.f)
        return real(self, b)

    class _Full:
        def __init__(self, f):
            self._f = f

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, k):
            return getattr(self._f, k)

    monkeypatch.setattr(S.SidecarWriter, "_put", full)
    assert main(["index", p]) == 1
    err = capsys.readouterr().err
    assert p + ".lirs" in err and "No space left" in err and "-o" in err


def test_litter_of_a_dead_run_under_another_name_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    junk = [tmp_path / f".other.svm.lirs-tmp-{dead}", tmp_path / f".other.svm.lirs.lirs-tmp-{dead}",
            tmp_path / f".new\nline.svm.lirs.lirs-tmp-{dead}"]  # a newline in a name is a name too
    for j in junk:
        j.write_bytes(b"x" * 10)
    live = tmp_path / f".mine.svm.lirs-tmp-{os.getpid()}"
    live.write_bytes(b"y")
    p = _svm(tmp_path / "a.svm")
    lirs.build_index(p, progress=False)
    assert not any(j.exists() for j in junk) and live.exists()
    # and at the start of a shuffle, in the output's directory
    out = tmp_path / "out"
    out.mkdir()
    j2 = out / f".gone.svm.lirs-tmp-{dead}"
    j2.write_bytes(b"z")
    assert main(["shuffle", p, "-o", str(out / "s.svm"), "--quiet"]) == 0
    assert not j2.exists()
    assert litter.clean_dead_litter(str(tmp_path)) == []


def test_a_temporary_locked_by_its_writer_is_left_whatever_its_pid_says(tmp_path):
    """Another host (NFS) or container writing an index in the same directory has a PID that looks
    dead here: its temporary, locked while written, is left (it was removed, and the live build
    failed at its rename); unlocked, the next run removes it. A sidecar being written is locked."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    other = tmp_path / f".a.svm.lirs.lirs-tmp-{dead}-7"
    with open(other, "wb") as f:
        lock = litter.hold(f.fileno())
        assert lock is not None and litter.held(str(other))
        p = _svm(tmp_path / "a.svm")
        lirs.build_index(p, progress=False)
        assert other.exists()
        litter.release(lock)
    assert not litter.held(str(other))
    lirs.build_index(p, progress=False)
    assert not other.exists()
    w = S.SidecarWriter(str(tmp_path / "b.lirs"))
    try:
        assert litter.held(w.tmp)
    finally:
        w.abort()
    assert not os.path.exists(w.tmp)


def test_eio_in_the_direct_probe_is_an_io_error_not_a_refusal(tmp_path, monkeypatch):
    from lirs.engines import base

    p = _svm(tmp_path / "a.svm")

    def eio(fd, bufs, off):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(base.os, "preadv", eio)
    with pytest.raises(OSError) as ei:
        base.probe_direct(p)
    assert ei.value.errno == errno.EIO and ei.value.filename == p


def test_a_csv_header_is_refused_at_index_time(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("age,income,label\n31,1000.5,1\n45,2000,0\n")
    assert main(["index", str(p)]) == 1
    err = capsys.readouterr().err
    assert "line 1" in err and "CSV header" in err and "'age,income,label'" in err
    q = tmp_path / "ok.csv"
    q.write_text("31,1000.5,1\n45,abc,0\n")  # words in records are data, not a header
    assert lirs.build_index(str(q), progress=False).n == 2
    r = tmp_path / "one.tsv"
    r.write_text("a\tb\n")
    with pytest.raises(DataError, match="CSV header.*or pass --format lines"):
        lirs.build_index(str(r), progress=False)
    # missing values (UCI's '?', 'NA') and Excel's BOM in a first record are data, not a header
    for i, text in enumerate(["1000025,5,1,?,1\n1002945,5,4,4,5\n", "3,NA,1\n4,5,6\n", "\ufeff1,2\n3,4\n"]):
        s = tmp_path / f"m{i}.csv"
        s.write_text(text, encoding="utf-8")
        assert lirs.build_index(str(s), progress=False).n == 2
    # a format given is the user's word that every line is a record: the guess is not made
    assert lirs.build_index(str(r), "lines", progress=False).n == 1
    assert lirs.build_index(str(p), "lines", progress=False).n == 3
    from lirs.external import shuffle  # the shuffle would have shuffled the header in as a record

    with pytest.raises(DataError, match="CSV header"):
        shuffle(str(p), str(tmp_path / "o.csv"), progress=False)
    assert shuffle(str(p), str(tmp_path / "o.csv"), format="lines", progress=False)["records"] == 3


def test_the_csv_header_guess_reads_rows_as_csv_does(tmp_path):
    """Headerless CSVs were refused as headers: a missing value in line 2 (what csv.writer and
    pandas write for None/NaN), a quoted separator in line 1, a first record past 64 KiB. Headers
    separated by ';' were served as records. A file of CR-only line ends was one record."""
    data = {"m.csv": "Alice,5,1\n,6,0\n", "n.csv": "Bob,5,1\nNA,6,0\n", "q.csv": '"Smith, John",42,1\nBob,33,0\n',
            "long.csv": '"' + "word " * 14_000 + '",1\nshort,0\n', "ragged.csv": "a,b\n1,2,3\n"}
    for name, text in data.items():
        (tmp_path / name).write_text(text)
        assert lirs.build_index(str(tmp_path / name), progress=False).n == 2, name
    for name, text in {"semi.csv": "age;income;label\n31;1000;1\n", "crlf.tsv": "a\tb\r\n1\t2\r\n"}.items():
        (tmp_path / name).write_text(text, newline="")
        with pytest.raises(DataError, match=r"CSV header \('(age;income;label|a\\tb)'\).*> data\." + name[-3:]):
            lirs.build_index(str(tmp_path / name), progress=False)
    cr = tmp_path / "cr.csv"
    cr.write_bytes(b"31,1000,1\r45,2000,0\r52,3000,1\r")
    with pytest.raises(DataError, match=r"cr\.csv: byte 9: a line ending in CR alone"):
        lirs.build_index(str(cr), progress=False)
    assert lirs.build_index(str(cr), "lines", progress=False).n == 1  # the user's word: one record
    for name, two in (("two.jsonl", b'{"a":1}\r{"a":2}\r'), ("two.txt", b"a\rb\r")):  # two lines: the last CR counts
        (tmp_path / name).write_bytes(two)
        with pytest.raises(DataError, match=re.escape(name) + r": byte \d+: a line ending in CR alone"):
            lirs.build_index(str(tmp_path / name), progress=False)
    (tmp_path / "one.txt").write_bytes(b"a line\r")  # one line that ends in CR: kept in its record
    assert lirs.build_index(str(tmp_path / "one.txt"), progress=False).n == 1
    inner = tmp_path / "inner.csv"  # a lone CR inside a field: csv's reader refused it unquoted (a traceback)
    inner.write_bytes(b"1,2\n3\r,4\n")
    assert lirs.build_index(str(inner), progress=False).n == 2
    long = tmp_path / "long.jsonl"  # one CR in a first record past 64 KiB (JSON whitespace) is no line end
    long.write_bytes(b'{"a":\r "' + b"x" * 70_000 + b'"}\n{"b": 1}\n')
    assert lirs.build_index(str(long), progress=False).n == 2


def test_a_pretty_printed_json_document_is_not_indexed_as_json_lines(tmp_path):
    """A `.json` file holding an indented array was indexed as lines: `[`, `  {"a": 1},` and `]`
    served as records. Refused, as `lirs shuffle` refuses it; a format given keeps its lines."""
    from lirs.external import shuffle

    doc = tmp_path / "doc.json"
    doc.write_text('[\n  {"a": 1},\n  {"a": 2}\n]\n')
    for run in (lambda: lirs.build_index(str(doc), progress=False),
                lambda: shuffle(str(doc), str(tmp_path / "o.json"), progress=False)):
        with pytest.raises(DataError, match=r"doc\.json: line 1, byte 0: expected one JSON value a line .*'\['"):
            run()
    assert lirs.build_index(str(doc), "lines", progress=False).n == 4
    (tmp_path / "ok.jsonl").write_text('{"a": [1,\n')  # a value's line, even a broken one, is a record: not a guess
    assert lirs.build_index(str(tmp_path / "ok.jsonl"), progress=False).n == 1


def test_zero_based_auto_over_several_files_follows_sklearn(tmp_path):
    from sklearn.datasets import load_svmlight_files

    a, b = tmp_path / "a.svm", tmp_path / "b.svm"
    a.write_bytes(b"1\n")
    b.write_bytes(b"2 1:5 3:7\n")
    Xa, _, Xb, _ = load_svmlight_files([str(a), str(b)])
    with lirs.Loader(lirs.build_index([str(a), str(b)], out=str(tmp_path / "ab.lirs"), progress=False), 2,
                     granularity="instance") as ld:
        X = next(iter(ld.epoch(0))).X
    assert X.shape[1] == Xb.shape[1] == 4
    # every file with a feature above 0: one-based, as sklearn
    a.write_bytes(b"1 2:1\n")
    Xa, _, Xb, _ = load_svmlight_files([str(a), str(b)])
    idx = lirs.build_index([str(a), str(b)], out=str(tmp_path / "ab.lirs"), progress=False)
    assert idx.n_features == Xb.shape[1] == 3


def test_load_svmlight_of_a_missing_file_is_file_not_found(tmp_path):
    """As scikit-learn's load_svmlight_file and the Loader: FileNotFoundError, not bad data."""
    import lirs
    from lirs.errors import DataError

    missing = tmp_path / "nope.svm"
    with pytest.raises(FileNotFoundError) as e:
        lirs.load_svmlight(str(missing))
    assert not isinstance(e.value, DataError) and e.value.filename == str(missing)


def test_an_index_its_directory_refuses_is_named_with_the_way_out(tmp_path, monkeypatch, capsys):
    """A directory the user cannot write (not root): `lirs index` said "permission denied" of a
    temporary's name, with no way out; it names the index and -o, as a Loader's first use does. An
    unreadable data file is still said as it is."""
    p = _svm(tmp_path / "a.svm")
    real = os.open

    def refuse(f, flags, *a, **k):
        if ".lirs-tmp-" in os.fspath(f) and flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(f))
        return real(f, flags, *a, **k)

    monkeypatch.setattr(os, "open", refuse)
    assert main(["index", p]) == 2
    err = capsys.readouterr().err
    assert f"{p}.lirs cannot be written (Permission denied); name the index where you can write with -o" in err
    assert "lirs-tmp" not in err


def test_a_live_temporary_of_our_own_name_is_neither_truncated_nor_removed(tmp_path, monkeypatch):
    """Two PID namespaces sharing a directory can both be PID 1 with thread 1: the second writer
    truncated the first's live temporary and wrote into it. A locked name is left for another.
    And a temporary of another user (no write permission) is seen locked through a shared lock."""
    dest = str(tmp_path / "x.svm.lirs")
    theirs = litter.temp_name(dest)
    with open(theirs, "wb") as f:
        f.write(b"their bytes")
        f.flush()
        lock = litter.hold(f.fileno())
        w = S.SidecarWriter(dest)
        try:
            assert w.tmp != theirs and litter.held(w.tmp)
        finally:
            w.abort()
        real = os.open
        monkeypatch.setattr(os, "open", lambda p, fl, *a: (_ for _ in ()).throw(
            PermissionError(errno.EACCES, "Permission denied", p)) if fl & os.O_RDWR else real(p, fl, *a))
        assert litter.held(theirs)
        monkeypatch.undo()
        litter.release(lock)
    assert open(theirs, "rb").read() == b"their bytes" and not os.path.exists(w.tmp)


def test_temporaries_where_locks_fail_or_every_name_is_held(tmp_path, monkeypatch):
    """A filesystem without locks (ENOLCK): the sidecar is written unlocked, as before. Every name
    held by live writers: a one-line error naming the temporary, nothing truncated."""
    import fcntl

    dest = str(tmp_path / "x.svm.lirs")
    real = fcntl.flock

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    w = S.SidecarWriter(dest)
    assert w._held is None and os.path.exists(w.tmp)
    w.abort()

    def all_held(fd, op):
        if op & fcntl.LOCK_NB and op & fcntl.LOCK_EX:
            raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable")
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", all_held)
    with pytest.raises(FileExistsError, match="every temporary name is held by a live writer"):
        litter.open_locked(dest)


def _pasted(cmd, cwd):
    """The argv bash gives `lirs` when ``cmd`` is pasted (a `lirs` that prints its arguments)."""
    r = subprocess.run(["bash", "-c", 'lirs() { printf "%s\\0" "$@"; }; ' + cmd], cwd=cwd, capture_output=True)
    assert r.returncode == 0, r.stderr
    return [os.fsdecode(a) for a in r.stdout.split(b"\0")[:-1]]


def _quoted(text, opening="`"):
    import re

    return re.search(r"`(lirs index [^`]*)`" if opening == "`" else r"\((lirs index [^)]*)\)", text).group(1)


def test_advice_to_paste_keeps_a_name_with_a_space_a_quote_or_a_leading_dash_whole(tmp_path, monkeypatch, capsys):
    """Commands printed to paste named files unquoted: `lirs index my data.jsonl`, a stray file's
    `lirs index my data/*.jsonl`, the read-only `lirs index .../it's.jsonl -o DIR/NAME.lirs` (first
    use, `lirs bench --auto`), `gunzip -v.svm.gz` (the bare name, an option to gunzip): pasted, bash
    split them or took them as options. They are quoted (a glob left outside the quotes)."""
    import gzip

    from lirs.errors import IndexFormatError
    from lirs.firstuse import sidecar_beside

    d = tmp_path / "my data"
    d.mkdir()
    for s in "ab":
        (d / f"{s}.jsonl").write_text("".join(f'{{"{s}": {i}}}\n' for i in range(5)))
    (d / "README.md").write_text("hello\n")
    with pytest.raises(DataError) as e:
        lirs.build_index(str(d), progress=False)
    assert _pasted(_quoted(str(e.value), "("), tmp_path)[1:3] == [f"{d}/a.jsonl", f"{d}/b.jsonl"]
    # a sidecar copied beside another file
    os.unlink(d / "README.md")
    lirs.build_index(str(d / "a.jsonl"), progress=False)
    mine = d / "it's -x.jsonl"
    mine.write_text('{"x": 1}\n')
    os.link(d / "a.jsonl.lirs", str(mine) + ".lirs")
    with pytest.raises(IndexFormatError) as e:
        lirs.open_index(str(mine))
    assert _pasted(_quoted(str(e.value)), tmp_path)[1:] == [str(mine)]
    # its sidecar's directory read-only: at first use and for bench --auto
    with pytest.raises(lirs.errors.UsageError) as e, sidecar_beside(str(mine)):
        raise OSError(errno.EROFS, "Read-only file system", str(mine) + ".lirs")
    assert _pasted(_quoted(str(e.value)), tmp_path)[1:] == [str(mine), "-o", "DIR/NAME.lirs"]
    os.unlink(str(mine) + ".lirs")
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    assert main(["bench", str(mine), "--auto", "--smoke", "--no-fio"]) == 2
    assert _pasted(_quoted(capsys.readouterr().err), tmp_path)[1:] == [str(mine), "-o", "DIR/NAME.lirs"]
    monkeypatch.undo()
    # a compressed file: its hint, pasted in another directory, decompresses it
    z = tmp_path / "-v.svm.gz"
    with gzip.open(z, "wb") as f:
        f.write(b"1 1:1\n")
    with pytest.raises(DataError, match=r"e\.g\. (.*)\): lirs reads") as e:
        lirs.build_index(str(z), progress=False)
    hint = str(e.value).split("(e.g. ")[1].split("): lirs reads")[0]
    assert subprocess.run(["bash", "-c", hint], cwd=d).returncode == 0 and (tmp_path / "-v.svm").exists()


def test_stale_advice_for_many_listed_files_rebuilds_them_all(tmp_path):
    """An index of more than 3 files named one by one advised `lirs index a b c ... -o all.lirs`:
    pasted, no file "..."; without it, an index of 3 files. Up to 10 are listed; more, a pattern
    that matches them alone; else a command that rebuilds from the list the sidecar keeps."""
    from lirs.errors import StaleIndexError

    def stale(names, d, extra=()):
        d.mkdir()
        for n in extra:  # files of the directory the index leaves out
            (d / n).write_text("o\n")
        files = []
        for n in names:
            (d / n).write_text("".join(f"{n} {i}\n" for i in range(3)))
            files.append(str(d / n))
        side = str(tmp_path / f"{d.name}.all.lirs")
        lirs.build_index(files, out=side, progress=False)
        with open(files[-1], "a") as f:
            f.write("grown 1\n")
        with pytest.raises(StaleIndexError) as e:
            lirs.open_index(side)
        return str(e.value).split("re-run `")[1].split("`")[0], files, side

    cmd, files, side = stale([f"{s} x.lines" for s in "abcde"], tmp_path / "few")
    assert _pasted(cmd, tmp_path)[1:] == [*files, "-o", side]
    cmd, files, side = stale([f"p-{i:02}.lines" for i in range(12)], tmp_path / "glob", ["other.lines"])
    assert sorted(_pasted(cmd, tmp_path)[1:-2]) == files
    cmd, files, side = stale([f"{'pq'[i % 2]}{i:02}.lines" for i in range(12)], tmp_path / "many", ["p99.lines", "q99.lines"])
    assert cmd.startswith("python3 -c ")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run(["bash", "-c", f"python3() {{ {sys.executable} \"$@\"; }}; {cmd}"], env=env, check=True,
                   capture_output=True)
    assert list(lirs.open_index(side).paths) == files and lirs.open_index(side).n == 37


def test_sidecar_path_takes_a_bytes_path():
    """`lirs.sidecar_path(b"...")` took the bytes as a sequence of ints: TypeError "not int",
    while build_index, open_index and Loader take bytes paths."""
    assert os.fsencode(lirs.sidecar_path(b"/d/\xff data.jsonl")) == b"/d/\xff data.jsonl.lirs"
    assert lirs.sidecar_path([b"/d/x.svm"]) == "/d/x.svm.lirs"
