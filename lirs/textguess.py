"""Guesses that a text file named for a line format would be misread: its lines are delivered as
records, unparsed, so a CSV header, or the lines of a pretty-printed JSON document, would silently
become training records (:func:`refuse_misread`). Used where the format was detected, not given
(``--format lines`` is the user's word that every line is a record)."""
from __future__ import annotations

import os

from .errors import DataError
from .preads import read_at

_CSV_EXT = (".csv", ".tsv")


_MISSING = {b"?", b"na", b"n/a", b"nan", b"null", b"none", b"-", b""}  # a value left out, in any column
_HEAD = 1 << 16  # the bytes the header guess reads


def _missing(field: bytes) -> bool:
    """Whether a CSV field is a value left out (UCI's '?', 'NA', pandas' empty NaN): neither a
    header's name nor a number."""
    return field.strip().strip(b'"').lower() in _MISSING


def _number(field: bytes) -> bool:
    """Whether a CSV field reads as a number."""
    try:
        float(field.strip().strip(b'"'))
        return True
    except ValueError:
        return False


def _text(field: bytes) -> bool:
    """Whether a CSV field is a word: neither a number nor a missing value (a header's name)."""
    return not _missing(field) and not _number(field)


def _rows(lines: list, sep: bytes) -> list:
    """``lines`` (bytes, without their line ends) as CSV rows of bytes fields: quotes honoured (a
    quoted separator is not a column)."""
    import csv

    text = [ln.decode("utf-8", "replace").replace("\r", " ") for ln in lines]  # a lone CR: csv refuses it unquoted
    return [[f.encode() for f in row] for row in csv.reader(text, delimiter=sep.decode())]


def _separator(path: str, first: bytes) -> bytes:
    """The column separator of a CSV/TSV file whose first line is ``first``: its extension's, else
    ';' or '|' where only that one occurs (Excel's CSV in locales with a decimal comma)."""
    sep = b"\t" if path.lower().endswith(".tsv") else b","
    if sep not in first:
        sep = next((c for c in (b";", b"|") if c in first), sep)
    return sep


def _header_guess(path: str, head: bytes, whole: bool) -> bool:
    """Whether the CSV/TSV ``head`` (the file's first bytes; ``whole``: all of them) begins with a
    header: a column holding a word in line 1 and a number in line 2, or a one-line file of words.
    No guess where line 1 does not end within ``head`` or the two lines' columns differ in number."""
    lines = [ln.rstrip(b"\r") for ln in head.split(b"\n")]
    if len(lines) == 1 and not whole:  # line 1 runs past what was read: a long record, not a header
        return False
    lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")  # Excel's "CSV UTF-8" BOM
    sep = _separator(path, lines[0])
    if len(lines) < 2 or not lines[1].strip():  # one line (or a blank second): a header of words alone
        first = _rows(lines[:1], sep)[0]
        return bool(first) and all(_text(x) for x in first)
    if len(lines) == 2 and not whole:  # line 2 runs past what was read
        return False
    first, second = (_rows(lines[:2], sep) + [[], []])[:2]
    if len(first) != len(second):
        return False
    return any(_text(a) and _number(b) and not _missing(b) for a, b in zip(first, second))


def refuse_csv_header(path: str) -> None:
    """Raise DataError when the first line of the CSV/TSV file ``path`` is a header (a field that is
    a word where the second line has a number, or a one-line file of words): lirs delivers every
    line as a record, and a header would silently become a training record. A guess: a header of
    all-text columns over text data is not seen (docs/formats.md)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in _CSV_EXT:
        return
    head = read_at(path, _HEAD)
    if _header_guess(path, head, len(head) < _HEAD or os.path.getsize(path) <= _HEAD):
        shown = head.split(b"\n", 1)[0].rstrip(b"\r")[:60].decode("utf-8", "replace")
        raise DataError(f"{path}: line 1, byte 0: expected a record, got what looks like a CSV header "
                        f"({shown!r}); lirs delivers every line as a record: remove the header "
                        f"(e.g. `tail -n +2 {os.path.basename(path)} > data{ext}`) and index that file, or "
                        "pass --format lines (format=\"lines\") to keep that line as a record")


_JSON_EXT = (".json", ".jsonl", ".ndjson")


def refuse_json_document(path: str) -> None:
    """Raise DataError when the JSON-lines file ``path`` begins with a JSON document spread over
    lines (a pretty-printed array or object: line 1 is a lone ``[`` or ``{``), whose lines would be
    served as records (``[``, ``  {"a": 1},``, ...)."""
    if os.path.splitext(path)[1].lower() not in _JSON_EXT:
        return
    first = read_at(path, _HEAD).split(b"\n", 1)[0].removeprefix(b"\xef\xbb\xbf").strip()
    if first in (b"[", b"{"):
        name = os.path.basename(path)
        raise DataError(f"{path}: line 1, byte 0: expected one JSON value a line (JSON lines), got {first.decode()!r} "
                        "alone, the start of a JSON document spread over lines; lirs delivers every line as a record: "
                        f"write one value a line (e.g. `jq -c '.[]' {name} > data.jsonl`) and index that file, or pass "
                        "--format lines (format=\"lines\") to keep its lines as records")


def refuse_misread(path: str) -> None:
    """Raise DataError where the text file ``path``, read as lines, would serve what is no record:
    a CSV header (:func:`refuse_csv_header`), a JSON document over lines (:func:`refuse_json_document`)."""
    refuse_csv_header(path)
    refuse_json_document(path)
