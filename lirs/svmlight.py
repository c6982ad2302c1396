"""The LIBSVM/SVMlight grammar as ``sklearn.datasets.load_svmlight_file`` applies it.

One place holds what a record may look like and how an error in it is named: lines split into
tokens on ASCII whitespace (bytes ``.split()``), a label read by ``float()``, an optional
``qid:``, ``INDEX:VALUE`` pairs with ``int()`` indices (sorted and unique) and ``float()``
values, ``#`` comments. The index-time check (:mod:`lirs.build`) and the decoder's exact slow path
(:mod:`lirs.decode`) both use it, so they accept and reject the same inputs, with the same
messages (file, line, byte, record, token).
"""
from __future__ import annotations

import os
import re

import numpy as np

from .errors import DataError

_INT64_MAX = 2**63 - 1
_TOKEN = re.compile(rb"[^ \t\n\r\x0b\x0c]+")
_SHOW = 40  # at most this many bytes of an offending token in a message


def _show(tok: bytes) -> str:
    s = repr(tok[:_SHOW])[1:]  # b'...' -> '...'
    return s[:-1] + "...'" if len(tok) > _SHOW else s


def line_number(path: str, offset: int) -> int | None:
    """1-based line number of byte ``offset`` of file ``path`` (newlines counted before it), or None
    when ``path`` is not a readable regular file. Reads the file up to ``offset``: error path only."""
    try:
        if not path or not os.path.isfile(path):
            return None
        count = 0
        with open(path, "rb") as f:
            left = int(offset)
            while left > 0:
                b = f.read(min(left, 1 << 22))
                if not b:
                    break
                count += b.count(b"\n")
                left -= len(b)
        return count + 1
    except OSError:
        return None


class Where:
    """Turns a position in ``buf`` into ``"SOURCE: line L, byte B (record J)"`` for error messages.

    The line is counted in the file named ``source`` (error path only); it is left out when
    ``source`` is not a file."""

    def __init__(self, source, starts, file_offsets, record_ids=None):
        self.source = source or "<buffer>"
        self.starts = starts
        self.file_offsets = file_offsets
        self.record_ids = record_ids

    def __call__(self, j: int, pos: int) -> str:
        base = self.starts[j] if self.file_offsets is None else self.file_offsets[j]
        rid = j if self.record_ids is None else int(self.record_ids[j])
        off = int(base) + int(pos) - int(self.starts[j])
        line = line_number(self.source, off)
        at = f"byte {off}" if line is None else f"line {line}, byte {off}"
        return f"{self.source}: {at} (record {rid})"


class WhereLine:
    """Location by line number, for whole-file loads (``buf`` is the file)."""

    def __init__(self, source, buf):
        self.source = source
        self.buf = buf

    def __call__(self, j: int, pos: int) -> str:
        line = int(np.count_nonzero(self.buf[:pos] == 10)) + 1
        return f"{self.source}: line {line}, byte {int(pos)}"


class TokenError(ValueError):
    """A LIBSVM line that ``load_svmlight_file`` would refuse: ``at`` is the byte of the offending
    token within the line, ``message`` says what was expected and shows the token."""

    def __init__(self, at: int, message: str):
        super().__init__(message)
        self.at = at
        self.message = message


def line_tokens(line: bytes) -> list[tuple[int, bytes]]:
    """The tokens sklearn sees on one line (no newline inside): ``[(byte in line, token)]``.

    The comment starts at the first '#' found by C ``strchr``, which stops at a NUL byte (a '#'
    behind a NUL is data); tokens are split at ``bytes.split()`` whitespace (space, \\t \\v \\f \\r)."""
    h = line.find(b"#")
    if h >= 0:
        z = line.find(b"\0", 0, h)
        if z < 0:
            line = line[:h]
    return [(m.start(), m.group()) for m in _TOKEN.finditer(line)]


def parse_tokens(toks, *, zero_based: bool = True, query_id: bool = False, n_features: int | None = None,
                 values: bool = True):
    """Parse the tokens of one data line exactly as sklearn's ``_load_svmlight_file`` does.

    ``toks``: non-empty ``[(position, token bytes)]`` (:func:`line_tokens`). ``n_features`` None:
    no column bound but lirs's own limit (indices below 2**63 - 1). ``values`` False: values are
    checked with ``float()`` but not kept. Returns (label float, qid int or None, indices list[int]
    (shifted when one-based), values list[float]); raises :class:`TokenError` at the first token
    sklearn refuses, in sklearn's order (label, qid, then each pair: index, order, value).
    """
    at, tok = toks[0]
    try:
        label = float(tok)
    except ValueError:
        raise TokenError(at, f"expected a numeric label, got {_show(tok)}") from None
    feats = toks[1:]
    qid = None
    i0 = 0
    if feats and feats[0][1].startswith(b"qid"):
        at, tok = feats[0]
        i0 = 1
        if b":" not in tok:
            raise TokenError(at, f"expected qid:VALUE, got {_show(tok)}")
        if query_id:
            value = tok.split(b":", 1)[1]
            try:
                qid = int(value)
            except ValueError:
                raise TokenError(at, f"expected an integer qid, got {_show(tok)}") from None
            if not -2**63 <= qid <= _INT64_MAX:
                raise TokenError(at, f"qid out of the int64 range in {_show(tok)}")
        else:
            qid = 0  # present; its value is not looked at (sklearn does not either)
    shift = 0 if zero_based else 1
    prev = -1
    cols, vals = [], []
    for n in range(i0, len(feats)):
        at, tok = feats[n]
        parts = tok.split(b":", 1)
        if len(parts) != 2:
            raise TokenError(at, f"expected INDEX:VALUE, got {_show(tok)}")
        try:
            idx = int(parts[0])
        except ValueError:
            raise TokenError(at, f"expected INDEX:VALUE, got {_show(tok)} (INDEX is not an integer)") from None
        if idx < 0:
            raise TokenError(at, f"negative feature index {idx} in {_show(tok)}; expected INDEX >= 0")
        if idx < shift:
            raise TokenError(at, f"invalid feature index 0 in {_show(tok)}: indices are one-based here "
                                 f"(zero_based=False)")
        if idx <= prev:
            why = "duplicate" if idx == prev else f"after {prev}"
            raise TokenError(at, f"feature indices must be sorted and unique, got {_show(tok)} ({why})")
        if n_features is None:
            if idx >= _INT64_MAX:
                raise TokenError(at, f"feature index {idx} in {_show(tok)} is too large "
                                     f"(lirs keeps indices below 2**63 - 1)")
        elif idx - shift >= n_features:
            raise TokenError(at, f"feature index {idx} is out of range for n_features={n_features} "
                                 f"({'zero' if zero_based else 'one'}-based) in {_show(tok)}")
        try:
            val = float(parts[1])
        except ValueError:
            raise TokenError(at, f"expected a number after ':' in INDEX:VALUE, got {_show(tok)}") from None
        prev = idx
        cols.append(idx - shift)
        if values:
            vals.append(val)
    return label, qid, cols, vals


def parse_record(buf, j, s, e, zero_based, query_id, n_features, where):
    """Parse record j (buf[s:e]) exactly as sklearn does, or raise DataError.

    Returns (label float, qid int or None, indices list[int] (shifted), values list[float]).
    """
    raw = bytes(buf[s:e])
    data_lines = []
    pos = 0
    for line in raw.split(b"\n"):
        toks = [(at + pos, tok) for at, tok in line_tokens(line)]
        if toks:
            data_lines.append(toks)
        pos += len(line) + 1
    if len(data_lines) != 1:
        if not data_lines:
            raise DataError(f"{where(j, s)}: expected one data line (LABEL INDEX:VALUE ...), "
                            f"found only blank or comment lines")
        raise DataError(f"{where(j, s + data_lines[1][0][0])}: expected one data line per record, "
                        f"found {len(data_lines)}")
    try:
        label, qid, cols, vals = parse_tokens(data_lines[0], zero_based=zero_based, query_id=query_id,
                                              n_features=n_features)
    except TokenError as err:
        raise DataError(f"{where(j, s + err.at)}: {err.message}") from None
    return label, (qid if query_id else None), cols, vals
