"""The bad-input catalogue: every case against sklearn, and docs/bad-input.md generated from it.

Each LIBSVM case is run through ``sklearn.datasets.load_svmlight_file`` (default arguments) and
through ``lirs index`` (``lirs.cli.main``). Accepted by sklearn: `lirs index` accepts, and the rows
decoded from the index and those of ``lirs.load_svmlight`` equal sklearn's (data, indices, indptr,
labels). Refused by sklearn: `lirs index` exits with status 1 and one line naming the file, the
line, the byte and the token. The few deliberate differences are listed in ``DIFFERENCES``.

Regenerate the doc with ``LIRS_WRITE_DOCS=1 python -m pytest -q tests/test_bad_input.py``; a test
fails when the committed doc no longer matches the behaviour.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import lzma
import zlib
import os
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from lirs.build import build_index
from lirs.cli import main
from lirs.decode import decode_libsvm, load_svmlight, resolve_libsvm_params
from lirs.tfrecord import encode

DOC = Path(__file__).resolve().parent.parent / "docs" / "bad-input.md"

# (name, bytes of a .svm file)
LIBSVM = [
    ("plain", b"1 1:1 3:0.5\n-1 2:2\n"),
    # two pairs run together into one token of 16 bytes or more, the index of 7 or 8 digits: the
    # index-time check took its first 16 bytes for a whole pair and read on from the 17th
    ("two pairs run together", b"1 1000000:123456782000000:5\n2 1:1\n3 2:2\n"),
    ("two pairs run together, a dot", b"1 1000000:1234567.2000000:5\n2 1:1\n3 2:2\n"),
    ("UTF-8 byte-order mark", b"\xef\xbb\xbf1 1:1\n2 2:2\n"),
    ("duplicate index", b"1 1:1 1:2\n"),
    ("decreasing indices", b"1 2:1 1:2\n"),
    ("duplicate index on line 2", b"1 1:1 2:2\n2 1:1 1:1\n"),
    ("empty value '1:'", b"1 1:\n"),
    ("double colon '1::2'", b"1 1::2\n"),
    ("hex index", b"1 0x1A:1\n"),
    ("hex value", b"1 1:0x1A\n"),
    ("letters in index", b"1 2abc:1\n"),
    ("letter index 'x:1'", b"1 1:1\n1 x:1\n"),
    ("empty index ':1'", b"1 :1\n"),
    ("NBSP as separator", b"1 1:1\xa02:1\n"),
    ("NBSP after label", b"1\xa0 1:1\n"),
    ("non-UTF-8 byte in value", b"1 1:1\xff\n"),
    ("CR-only line ends", b"1 1:1\r-1 2:1\r"),
    ("one line ending in CR only", b"1 1:1\r"),
    ("CRLF line ends", b"1 1:1\r\n-1 2:1\r\n"),
    ("negative index", b"1 -1:1\n"),
    ("index 0", b"1 0:1 2:1\n"),
    ("index -0", b"1 -0:1\n"),
    ("-0 then 0 (duplicate)", b"1 -0:1 0:2\n"),
    ("index +1", b"1 +1:1\n"),
    ("leading zeros in index", b"1 00001:1\n"),
    ("28-digit index with leading zeros", b"1 0000000000000000000000000001:1\n"),
    ("largest C int index", b"1 2147483647:1\n"),
    ("index 2**31", b"1 2147483648:1\n"),
    ("index beyond int64", b"1 99999999999999999999:1\n"),
    ("label nan", b"nan 1:1\n"),
    ("label -nan", b"-nan 1:1\n"),
    ("label inf", b"inf 1:1\n-inf 2:1\n"),
    ("label word", b"abc 1:1\n"),
    ("label is a pair", b"1:1 2:1\n"),
    ("17-digit label", b"0.12345678901234567 1:1\n"),
    ("qid", b"1 qid:3 1:1\n2 qid:3 2:1\n"),
    ("qid without value", b"1 qid: 1:1\n"),
    ("qid non-numeric", b"1 qid:abc 1:1\n"),
    ("qid without colon", b"1 qid 1:1\n"),
    ("qidx:3 (taken as qid)", b"1 qidx:3 1:1\n"),
    ("qid not first", b"1 1:1 qid:2\n"),
    ("qid only", b"1 qid:1\n"),
    ("tabs", b"1\t1:1\t2:3\n"),
    ("vertical tab and form feed", b"1 1:1\x0b2:1\x0c\n"),
    ("trailing spaces", b"1 1:1   \n"),
    ("leading spaces", b"   1 1:1\n"),
    ("line of only spaces", b"1 1:1\n   \n-1 2:1\n"),
    ("blank lines", b"\n\n1 1:1\n\n"),
    ("comment line and mid-line comment", b"# header\n1 1:1 # note 5:5\n"),
    ("comment glued to a value", b"1 1:1#c 2:2\n"),
    ("unicode in comments", b"# \xe2\x82\xac\n1 1:1 # \xc3\xa9\n"),
    ("invalid UTF-8 in a comment", b"1 1:1 # \xff\xfe\n"),
    ("NUL in a value", b"1 1:1\x00\n"),
    ("NUL in a comment", b"1 1:1 # a\x00b\n"),
    ("NUL before '#'", b"1 1:1\x00#x\n"),
    ("NUL label", b"\x001 1:1\n"),
    ("binary garbage", b"\x00\x01\x02garbage\xff\n"),
    ("missing final newline", b"1 1:1\n-1 2:1"),
    ("leading +", b"+1 1:+1\n"),
    ("1e400 (inf)", b"1 1:1e400\n"),
    ("-0", b"-0 1:-0\n"),
    (".5", b".5 1:.5\n"),
    ("5.", b"5. 1:5.\n"),
    ("exponent", b"1 1:1E5 2:-2.5e-3\n"),
    ("underscores 1_0", b"1_0 1_0:1_0\n"),
    ("underscore at the end", b"1 1:1_\n"),
    ("double underscore", b"1 1:1__0\n"),
    ("value nan and inf", b"1 1:nan 2:-inf 3:Infinity\n"),
    ("value 'infinit'", b"1 1:infinit\n"),
    ("exponent without digits", b"1 1:1e\n"),
    ("two dots", b"1 1:1.2.3\n"),
    ("double sign", b"1 1:--1\n"),
    ("double sign in index", b"1 +-1:1\n"),
    ("token without colon", b"1 1:1 2\n"),
    ("space after colon", b"1 1: 2\n"),
    ("space before colon", b"1 1 :2\n"),
    ("Arabic-Indic digit index", b"1 \xd9\xa1:1\n"),
    ("control byte 0x1c in value", b"1 1:1\x1c\n"),
    ("tiny value", b"1 1:0.0000000000000000000000000000001\n"),
    ("label only", b"1\n-1\n"),
    ("only a comment", b"# nothing here\n"),
    ("empty file", b""),
]

# deliberate differences from sklearn: name -> why
DIFFERENCES = {
    "index 2**31": "lirs extension: sklearn keeps indices in a C int; lirs takes any index below 2**63 - 1",
    "only a comment": "an index of zero records is refused (sklearn returns a 0-row matrix)",
    "empty file": "an index of zero records is refused (sklearn returns a 0-row matrix)",
}

# other formats: (name, file name, bytes, extra CLI arguments); none is valid
def _npy(arr, fortran=False):
    buf = io.BytesIO()
    np.save(buf, np.asfortranarray(arr) if fortran else arr, allow_pickle=True)
    return buf.getvalue()


def _npy_header(shape, version=1) -> bytes:
    """An .npy file of float32 records whose header says ``shape`` (no data after it), format ``version``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    b = bytearray(buf.getvalue())
    b[6] = version
    return bytes(b)


def _npy_with_labels(labels) -> dict:
    """x.npy (4 records of 3 float32) and the labels file beside it."""
    return {"x.npy": _npy(np.arange(12, dtype=np.float32).reshape(4, 3)), "x.labels.npy": _npy(labels)}


def _tfr(flip=None):
    """Two TFRecord records (payloads of 20 and 30 bytes), byte ``flip`` of the second one inverted."""
    data = bytearray(encode([bytes(range(20)), bytes(range(30))]))
    if flip is not None:
        data[36 + flip] ^= 0xFF
    return bytes(data)


OTHER = [
    ("npy truncated data", "x.npy", _npy(np.arange(12, dtype=np.float32).reshape(4, 3))[:-5], []),
    ("npy bytes after the data", "x.npy", _npy(np.arange(12, dtype=np.float32).reshape(4, 3)) + b"\0" * 12, []),
    ("npy bad header", "x.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': ??}   \n", []),
    ("npy object dtype", "x.npy", _npy(np.array([{"a": 1}, None], dtype=object)), []),
    ("npy Fortran order", "x.npy", _npy(np.arange(12, dtype=np.float32).reshape(4, 3), fortran=True), []),
    ("npy scalar", "x.npy", _npy(np.float32(1)), []),
    ("npy negative shape", "x.npy", _npy_header((-4, 3)), []),
    ("npy records of no bytes", "x.npy", _npy(np.zeros((4, 0), np.float32)), []),
    ("npy of no rows", "x.npy", _npy(np.zeros((0, 3), np.float32)), []),
    ("npy shape of a bool", "x.npy", _npy_header((True, 3)) + bytes(12), []),  # numpy refuses it
    ("npy format version 9", "x.npy", _npy_header((0, 3), version=9), []),
    ("npy labels of two columns", "x.npy", _npy_with_labels(np.zeros((4, 2))), []),
    ("npy labels that are objects", "x.npy", _npy_with_labels(np.array([{}, {}, {}, {}], dtype=object)), []),
    ("npy labels fewer than records", "x.npy", _npy_with_labels(np.zeros(3)), []),
    ("npy labels with bytes after them", "x.npy",
     {**_npy_with_labels(np.zeros(4)), "x.labels.npy": _npy(np.zeros(4)) + b"\0" * 8}, []),
    ("fixed size not a multiple", "x.bin", b"\x00" * 10, ["--record-size", "4"]),
    ("fixed empty after header", "x.bin", b"\x00" * 8, ["--record-size", "4", "--header-size", "8"]),
    ("lines empty file", "x.jsonl", b"", []),
    ("CSV with a header line", "x.csv", b"age,income,label\n31,1000.5,1\n45,2000,0\n", []),
    ("TSV of one header line", "x.tsv", b"a\tb\n", []),
    ("tfrecord bad length CRC", "x.tfrecord", _tfr(flip=9), []),
    ("tfrecord bad payload CRC", "x.tfrecord", _tfr(flip=40), []),
    ("tfrecord truncated record", "x.tfrecord", _tfr()[:-3], []),
    ("tfrecord truncated header", "x.tfrecord", _tfr() + _tfr()[:5], []),
    ("tfrecord trailing garbage", "x.tfrecord", _tfr() + b"garbage at the end\n", []),
    ("tfrecord named as JSON lines", "x.jsonl", _tfr(), []),
    ("gzip-compressed LIBSVM", "x.svm.gz", gzip.compress(b"1 1:1\n"), []),
    ("gzip bytes under a .svm name", "x.svm", gzip.compress(b"1 1:1\n"), []),
    ("xz-compressed lines", "x.jsonl.xz", lzma.compress(b"{}\n"), []),
    ("ZLIB-compressed TFRecord", "x.tfrecord", zlib.compress(_tfr()), []),
]


def _sklearn(path):
    try:
        X, y = load_svmlight_file(str(path))
    except Exception as e:  # noqa: BLE001 - any refusal counts
        return None, f"{type(e).__name__}: {e}"
    return (X, y), "accepts"


def _lirs_index(path, *extra):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["index", "--quiet", *extra, str(path)])
    return rc, err.getvalue()


def _run_case(root: Path, i: int, name: str, data: bytes, fname="bad.svm", extra=()):
    d = root / f"case{i:03d}"
    d.mkdir()
    p = d / fname
    for f, b in (data if isinstance(data, dict) else {fname: data}).items():  # a file and those beside it
        (d / f).write_bytes(b)
    sk, sk_msg = _sklearn(p) if fname.endswith(".svm") else (None, "n/a")
    rc, err = _lirs_index(p, *extra)
    shown = err.strip().replace(str(d) + os.sep, "")
    return dict(name=name, path=p, data=data, sk=sk, sk_msg=sk_msg, rc=rc, err=err, shown=shown)


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    rows = [_run_case(root, i, n, b) for i, (n, b) in enumerate(LIBSVM)]
    rows += [_run_case(root, len(LIBSVM) + i, n, b, f, x) for i, (n, f, b, x) in enumerate(OTHER)]
    return {r["name"]: r for r in rows}


def _same_rows(X, y, X2, y2):
    X2 = X2.tocsr()
    np.testing.assert_array_equal(X.indptr, X2.indptr)
    np.testing.assert_array_equal(X.indices, X2.indices)
    np.testing.assert_array_equal(X.data.view(np.uint64), np.asarray(X2.data, np.float64).view(np.uint64))
    np.testing.assert_array_equal(np.asarray(y).view(np.uint64), np.asarray(y2, np.float64).view(np.uint64))
    assert X.shape == X2.shape


def test_catalogue_is_big():
    assert len(LIBSVM) >= 40
    assert len({n for n, _ in LIBSVM} | {n for n, *_ in OTHER}) == len(LIBSVM) + len(OTHER)
    assert set(DIFFERENCES) <= {n for n, _ in LIBSVM}


@pytest.mark.parametrize("name", [n for n, _ in LIBSVM])
def test_libsvm_case_agrees_with_sklearn(catalogue, name):
    r = catalogue[name]
    if name in DIFFERENCES:
        if "extension" in DIFFERENCES[name]:
            assert r["sk"] is None and r["rc"] == 0, r["err"]
        else:
            assert r["sk"] is not None and r["rc"] == 1
            assert "no records" in r["err"] or "empty file" in r["err"]
        return
    if r["sk"] is not None:
        assert r["rc"] == 0, r["err"]
        X, y = r["sk"]
        # the rows the Loader decodes from the index, and load_svmlight's, are sklearn's bit for bit
        idx = build_index(str(r["path"]), progress=False)
        n_features, zero_based = resolve_libsvm_params(idx)
        s, e = idx.bounds()
        buf = np.fromfile(r["path"], np.uint8)
        X2, y2 = decode_libsvm(buf, s, e, n_features=n_features, zero_based=zero_based, dtype=np.float64,
                               source=str(r["path"]))
        _same_rows(X, y, X2, y2)
        np.testing.assert_array_equal(idx.labels.view(np.uint64), y.view(np.uint64))
        _same_rows(X, y, *load_svmlight(r["path"]))
        return
    # refused: exit status 1, one line naming the file, the line, the byte and the token
    assert r["rc"] == 1, f"lirs index accepted what sklearn refused ({r['sk_msg']})"
    err = r["err"]
    assert err.count("\n") == 1 and "Traceback" not in err, err
    m = re.match(r"lirs index: error: (.+): line (\d+), byte (\d+): .*'(.*)'", err)
    assert m, err
    assert m.group(1) == str(r["path"])
    line, byte = int(m.group(2)), int(m.group(3))
    data = r["data"]
    assert line == data[:byte].count(b"\n") + 1, "line number does not match the byte"
    first = repr(data[byte:byte + 1])[2:-1]
    assert f"'{first}" in err, f"the message does not show the token at byte {byte}"


def test_a_byte_order_mark_is_named_as_such(catalogue):
    # the label token shows the mark's three bytes, which a user does not see in an editor
    assert "byte-order mark" in catalogue["UTF-8 byte-order mark"]["err"]
    assert "byte-order mark" not in catalogue["letters in index"]["err"]


@pytest.mark.parametrize("name", [n for n, *_ in OTHER])
def test_other_format_case_is_refused_on_one_line(catalogue, name):
    r = catalogue[name]
    assert r["rc"] == 1, r["err"]
    assert r["err"].count("\n") == 1 and "Traceback" not in r["err"]
    assert str(r["path"]) in r["err"]


def _escape(data: bytes, limit=48) -> str:
    s = repr(data)[2:-1]
    s = s if len(s) <= limit else s[:limit] + "…"
    return "`" + s.replace("|", "\\|").replace("`", "'") + "`" if s else "(empty)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(cat) -> str:
    """docs/bad-input.md from the catalogue's verdicts."""
    out = ["# Bad input: what `lirs index` accepts and refuses", "",
           "Generated by `tests/test_bad_input.py` (`LIRS_WRITE_DOCS=1 python -m pytest -q "
           "tests/test_bad_input.py`); a test fails when this page and the behaviour disagree.", "",
           "LIBSVM files are judged against `sklearn.datasets.load_svmlight_file` (default arguments). "
           "`lirs index` does a full validating parse of every line: whatever sklearn accepts it "
           "accepts, with the same rows (data, indices, indptr, labels, bit for bit); whatever sklearn "
           "refuses it refuses at index time, with one line naming the file, line, byte and token "
           "(exit status 1). Deliberate differences are marked **difference**.", ""]
    names = [n for n, _ in LIBSVM]
    agree = sum(1 for n in names if n not in DIFFERENCES)
    acc = sum(1 for n in names if cat[n]["rc"] == 0)
    out += [f"{len(names)} LIBSVM cases: sklearn accepts {sum(cat[n]['sk'] is not None for n in names)}, "
            f"`lirs index` accepts {acc} and refuses {len(names) - acc}; same verdict on {agree}, "
            f"{len(DIFFERENCES)} deliberate differences.", "",
            "| case | input | sklearn | lirs index |", "| --- | --- | --- | --- |"]
    for n in names:
        r = cat[n]
        sk = "accepts" if r["sk"] is not None else "refuses: " + r["sk_msg"]
        li = "accepts" if r["rc"] == 0 else "refuses: " + r["shown"].removeprefix("lirs index: error: ")
        if n in DIFFERENCES:
            li += f" — **difference**: {DIFFERENCES[n]}"
        out.append(f"| {_cell(n)} | {_escape(r['data'])} | {_cell(sk)} | {_cell(li)} |")
    out += ["", "## Other formats", "", "| case | file | lirs index |", "| --- | --- | --- |"]
    for n, f, _, x in OTHER:
        r = cat[n]
        li = "accepts" if r["rc"] == 0 else "refuses: " + r["shown"].removeprefix("lirs index: error: ")
        out.append(f"| {_cell(n)} | `{' '.join(['lirs index', *x, f])}` | {_cell(li)} |")
    out += ["", CHANGES]
    return "\n".join(out) + "\n"


# what happens to data that changes after `lirs index` and to an index that fails (tests named)
CHANGES = """## Data that changes, an index that fails

| event | what lirs does | test |
| --- | --- | --- |
| data file's size and mtime as indexed | cheap open: 16 sampled 4 KiB blocks compared | `test_trust.py` |
| mtime moved (`touch`, a copy that kept the bytes) | the file is read whole and every MiB compared with its CRC-32C; unchanged: used, the new mtime recorded (in the sidecar, or in `~/.cache/lirs` where the sidecar is read-only, another user's, of a group the opener is not in, or on a full disk, else nowhere; its mode and group are kept) | `test_staleness.py::test_check_is_exact_and_touch_needs_no_reindex` |
| any same-size edit (a digit, a label, a moved newline) | `StaleIndexError` naming the file and the changed byte range; `lirs index --check` exits 1 | `test_staleness.py::test_every_same_size_edit_with_a_moved_mtime_is_found` |
| appended to, edited, files added or removed in a directory | `lirs index` scans only the changed files from their first changed MiB (an append: the tail); the sidecar is byte for byte the full re-index's | `test_incremental.py` |
| the labels file beside `.npy` data edited or removed after indexing | `StaleIndexError` at open naming the labels file (its fingerprint kept in the sidecar; one whose mtime moved is compared label by label, unchanged: opened), and the first record whose label differs, with the index's label and the file's; `lirs index --check` exits 1 | `test_staleness.py::test_a_labels_file_changed_after_indexing_is_found_at_open`, `test_labels_npy.py::test_the_check_names_the_first_record_whose_label_changed` |
| a labels file beside `.npy` data that is not a regular file (a FIFO, device, socket or directory), at `lirs index` or in place of an indexed one | `lirs index`: `DataError` naming it, before it is opened (opening a FIFO waits for a writer, forever); at open: `StaleIndexError` naming it; `lirs index --check` exits 1 | `test_labels_npy.py::test_a_labels_file_that_is_no_regular_file_is_refused_before_it_is_opened`, `test_labels_npy.py::test_an_index_whose_labels_file_became_a_fifo_opens_to_a_stale_error_not_a_hang` |
| a file added to an indexed directory | `StaleIndexError` at open naming the files its index does not cover (`lirs index --check` exits 1); `lirs index` then scans only them | `test_trust.py::test_a_file_added_to_an_indexed_directory_is_named_at_open` |
| a labels file written beside `.npy` data indexed without one | `StaleIndexError` at open naming it (its records were served without labels); `lirs index --check` exits 1 | `test_staleness.py::test_labels_that_appear_or_are_missing_for_one_file_are_not_lost_unsaid` |
| a directory of `.npy` files, labelled but one | `DataError` at `lirs index` naming the file without labels (every label was dropped) | `test_staleness.py::test_labels_that_appear_or_are_missing_for_one_file_are_not_lost_unsaid` |
| a file added to an indexed directory that `lirs index DIR` would then refuse (a `.svm` shard beside extensionless ones read by content, a `README.md` beside `.svm` shards) | `StaleIndexError` at open naming the new file and saying `lirs index` would refuse the directory as it is now, with its refusal (the file to move out, or the files to index), not advising a re-run that fails | `test_reindex_advice.py::test_a_file_added_where_lirs_index_dir_would_refuse_the_directory_says_so` |
| a file added to a directory indexed with `-o` elsewhere | the sidecar keeps its directory: `StaleIndexError` at open however it is opened, the advice naming `-o` | `test_trust.py::test_a_file_added_to_a_directory_indexed_with_o_elsewhere_is_named_at_open` |
| the index rebuilt after `make_dataloader` opened it, before a spawned worker opens it again | `StaleIndexError` in the worker (its index is not the one the main process counted batches of); a `touch` is not a rebuild | `test_torch.py::test_a_spawned_worker_refuses_an_index_rebuilt_after_the_main_process_opened_it` |
| threads of one process opening one touched index | each records the checked mtime through a temporary of its own (process and thread id) | `test_trust.py::test_threads_opening_one_touched_index_do_not_take_each_others_temporary` |
| a file rewritten while a Loader reads it | `StaleIndexError` at the next read step (one `statx`, or `fstat`, per file the step reads) | `test_staleness.py::test_a_file_rewritten_during_an_epoch_fails_at_the_next_step` |
| a file edited, appended to or renamed over (equal shards swapped with their times kept: where their sampled blocks differ), or a labels file changed, between a Loader's open and its first epoch | `StaleIndexError` naming the file as the epoch opens it (its size, mtime and which file it is against those the open checked), before a batch is served | `test_staleness.py::test_a_file_changed_before_the_first_epoch_is_not_read`, `test_staleness.py::test_equal_shards_swapped_after_the_open_are_not_read`, `test_staleness.py::test_a_labels_file_changed_after_the_open_stops_the_first_epoch` |
| a file of an index of listed files deleted (its other files where the sidecar says) | `StaleIndexError` at open naming it (`... was removed since indexing`) and the `lirs index` of the files that remain; a sidecar none of whose files is beside it: `IndexFormatError` (moved from its data) | `test_reindex_advice.py::test_a_shard_removed_from_a_listed_dataset_is_a_stale_index` |
| a data file removed (or renamed away) between a Loader's open and its first epoch | `StaleIndexError` naming the file and the `lirs index` to re-run as the epoch opens the files (`epoch`, `aepoch`, a DataLoader worker), not a bare `FileNotFoundError` | `test_staleness.py::test_a_file_removed_before_the_first_epoch_is_a_stale_index`, `test_staleness.py::test_a_dataloader_worker_finds_a_file_removed_before_its_first_pass` |
| a data file changed where its sidecar's directory is read-only | the error's command builds the index elsewhere (`lirs index DATA -o DIR/NAME.lirs`) and says to pass that `.lirs` as the source (rebuilding in place would fail) | `test_staleness.py::test_a_stale_index_in_a_read_only_directory_is_rebuilt_elsewhere` |
| a data file never indexed, in a read-only directory, given to `lirs bench` or `lirs demo --data` | `UsageError` naming the sidecar that cannot be written and `lirs index DATA -o DIR/NAME.lirs` (`--workdir` and `--out` do not move the index); that `.lirs` is then given in place of the data (bench's PATH, demo's `--data`) | `test_bench.py::test_data_in_a_read_only_directory_is_indexed_elsewhere_not_moved_by_workdir`, `test_demo.py::test_data_in_a_read_only_directory_is_indexed_elsewhere_and_given_as_data` |
| a file of an indexed directory changed | the error says to re-run `lirs index DIR` (the directory, not the file; `lirs index DIR -o OUT` for one indexed with `-o` elsewhere, whose files alone would rebuild an index of a file list that a shard added later no longer makes stale) | `test_staleness.py::test_a_directory_dataset_is_named_in_the_reindex_advice`, `test_reindex_advice.py::test_a_directory_indexed_elsewhere_is_advised_as_the_directory` |
| a same-size edit whose mtime was put back, outside the sampled blocks | not seen at open (size, mtime and sampled blocks as indexed); `lirs index --check` reads every byte, exits 1 and advises `lirs index --full` (an incremental `lirs index` trusts size, mtime and sampled blocks: it would keep the old records) | `test_reindex_advice.py::test_check_advises_full_for_an_edit_only_a_whole_read_finds` |
| a shard added to one of several indexed directories; an empty shard (or `_SUCCESS`) in a directory | `StaleIndexError` at open naming `DIR/FILE` and the `lirs index D1 D2 -o ...` to re-run; an empty file holds no records and is not read (once it holds some, it is named) | `test_trust.py::test_shard_directories_empty_shards_and_a_subset_named_after_its_directory` |
| a file indexed with `--format lines` or `--record-size` changed | the advised `lirs index` keeps those options (`--format lines`; `--record-size N --header-size H`) | `test_staleness.py::test_the_reindex_advice_keeps_the_options_the_index_was_built_with` |
| a file renamed over (a new file under the old name) while a Loader has it open | that Loader goes on reading the file it opened, the one its index describes; a Loader opened afterwards checks the new file at open (`StaleIndexError` if it differs) | `test_staleness.py::test_a_file_renamed_over_while_a_loader_has_it_open` |
| a file rewritten between passes of `make_dataloader`'s persistent workers | `StaleIndexError` naming the file from the next pass (each worker's Loader checks it at every read step) | `test_staleness.py::test_persistent_dataloader_workers_find_a_file_rewritten_between_passes` |
| a corrupt offset table: a word that puts a record outside its file | `IndexFormatError` naming the sidecar at open, under every granularity | `test_staleness.py::test_a_corrupt_offset_word_is_a_clean_error` |
| a corrupt offset table: a word still inside its file | not seen at open (plausibility only); `lirs index --check` and `lirs info --verify` find it by the table's checksum, and `lirs index` does not reuse it (every file scanned anew); an epoch that reads it stops with a `DataError` saying the index and the data disagree where it breaks a record (LIBSVM grammar, TFRecord framing), but a line format's two records around it are served cut at the wrong byte (an offset block's base, 8 B per 1024 records, is checked against its CRC-32 at every open: `IndexFormatError`): run `lirs index --check` (or `open_index(..., verify=True)`) on a sidecar you doubt | `test_staleness.py::test_a_plausible_corrupt_offset_word_is_found_by_the_check`, `test_incremental.py::test_a_corrupt_old_sidecar_is_not_reused` |
| EIO inside the sidecar (FUSE, page cache or direct I/O) | one line naming the sidecar and byte, exit status 1; no SIGBUS (no maps on FUSE and network filesystems), no short array | `test_faults.py::test_eio_in_the_sidecar_is_one_line_naming_it` |
| a sidecar of an older lirs | `IndexFormatError`: re-run `lirs index` | `test_staleness.py::test_an_old_sidecar_asks_for_a_reindex` |
| a sidecar cut short, or a directory where it belongs | `IndexFormatError` naming it: "truncated or corrupt index", re-run `lirs index`; the directory: remove it, or name the index elsewhere with `-o` | `test_staleness.py::test_a_truncated_sidecar_or_a_directory_in_its_place_says_what_to_do` |"""


def test_doc_matches_behaviour(catalogue):
    text = render(catalogue)
    if os.environ.get("LIRS_WRITE_DOCS") == "1":
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(text, encoding="utf-8")
    assert DOC.exists(), "docs/bad-input.md is missing: run with LIRS_WRITE_DOCS=1"
    assert DOC.read_text(encoding="utf-8") == text, "docs/bad-input.md is stale: run with LIRS_WRITE_DOCS=1"
