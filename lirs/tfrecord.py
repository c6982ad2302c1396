"""TFRecord files: framing, the index scan, and payloads out of read buffers.

A record is ``length (uint64 LE) | masked CRC-32C of length | payload | masked CRC-32C of payload``
(the kernels in :mod:`lirs.kernels.tfrecord`). lirs indexes a record by the offset of its header,
so a record's span is its 16 framing bytes plus its payload; the Loader hands out the payload.

The scan reads each file once, in chunks, checking both CRCs of every record on the way (the
payload check can be switched off); the first bad CRC, truncated record or trailing garbage stops
it with a :class:`~lirs.errors.DataError` that names the file, the record (0-based, within the file)
and its byte offset, and says what was expected.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import DataError
from .inputs import read_chunks
from .kernels import tfrecord as K

__all__ = ["masked_crc32c", "crc32c", "encode", "TFRecordScanner", "payloads", "OVERHEAD", "HEADER"]

OVERHEAD = K.OVERHEAD
HEADER = K.HEADER


def _u8(data) -> np.ndarray:
    return data if isinstance(data, np.ndarray) and data.dtype == np.uint8 else np.frombuffer(data, np.uint8)


def crc32c(data) -> int:
    """CRC-32C (Castagnoli) of ``data`` (bytes-like or uint8 ndarray)."""
    a = _u8(data)
    return int(K.crc32c_update(K.TABLE, K.HW, a, 0, a.size, 0))


def masked_crc32c(data) -> int:
    """TFRecord's masked CRC-32C of ``data``: ``((c >> 15) | (c << 17)) + 0xa282ead8 mod 2**32``."""
    a = _u8(data)
    return int(K.masked_crc(K.TABLE, K.HW, a, 0, a.size))


def encode(records) -> np.ndarray:
    """TFRecord bytes of ``records`` (an iterable of bytes-like payloads), as uint8 (m,)."""
    parts = [bytes(r) for r in records]
    bounds = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=bounds[1:])
    flat = np.frombuffer(b"".join(parts), np.uint8) if parts else np.empty(0, np.uint8)
    out = np.empty(int(bounds[-1]) + OVERHEAD * len(parts), np.uint8)
    K.frame(K.TABLE, K.HW, flat, bounds, out)
    return out


# --------------------------------------------------------------------------- error messages


def problem(status: int, err, offset: int, size: int | None = None) -> str:
    """What is wrong with the record at byte ``offset`` (one clause, for a DataError)."""
    field = int(err[3]) & ((1 << 64) - 1)  # the length field's 64 bits, as stored (err[2] is capped at 2**62)
    if status == K.BAD_LENGTH_CRC:
        return (f"length CRC mismatch: expected the stored masked CRC-32C 0x{int(err[0]):08x}, computed "
                f"0x{int(err[1]):08x} over the 8 length bytes (length field reads {field}); a record "
                "header should start here (not a TFRecord file, corrupt, or trailing garbage after the last record)")
    if status == K.BAD_DATA_CRC:
        return (f"payload CRC mismatch: expected the stored masked CRC-32C 0x{int(err[0]):08x}, computed "
                f"0x{int(err[1]):08x} over the {int(err[2])}-byte payload (corrupt data)")
    if status == K.BAD_SPAN:
        if int(err[2]) < 0:
            return f"the indexed span holds {int(err[3])} bytes, fewer than a record's 16 framing bytes"
        return (f"length field reads {int(err[2])}, so the record needs {int(err[2]) + OVERHEAD} bytes, "
                f"but the index gives it {int(err[3])} (file rewritten after indexing? re-run `lirs index`)")
    if status == K.NEED:
        need = int(err[0])
        have = "" if size is None else f", the file ends at byte {size}"
        if need == HEADER:
            return (f"truncated record header: expected {HEADER} header bytes{have} "
                    "(truncated file, or trailing garbage after the last record)")
        if int(err[2]) >= K.HUGE:  # more than any file holds: the sum would mislead
            return f"truncated record: the length field reads {field}, past any file's end{have}"
        return (f"truncated record: expected {need} bytes up to byte {offset + need} (16 + the length field's "
                f"{field}){have}")
    raise AssertionError(f"unknown TFRecord status {status}")


def record_error(path: str, record: int, offset: int, status: int, err, size: int | None = None) -> DataError:
    """The DataError of record ``record`` (0-based, within ``path``) at byte ``offset``."""
    return DataError(f"{path}: record {record} at byte {offset}: {problem(status, err, offset, size)}")


# --------------------------------------------------------------------------- the index scan


def _zlib_head(b) -> bool:
    """Whether two bytes open a ZLIB stream (RFC 1950: deflate, a 32 KiB window or less, the check
    bits making the pair a multiple of 31)."""
    b = bytes(b)
    return len(b) == 2 and b[0] & 0x0F == 8 and b[0] >> 4 <= 7 and (b[0] << 8 | b[1]) % 31 == 0


class TFRecordScanner:
    """Scan state of one TFRecord dataset (files one after another): record offsets stream into
    ``writer`` (a sidecar writer's ``append``) or go to ``sink``; ``n`` counts records.

    ``verify``: check payload CRCs too (the length CRCs are always checked: the framing depends on
    them). The interface is the one :func:`lirs.build._build_variable` drives (``labels_file`` and
    ``pool`` unused: no labels, and the CRC outruns the disk on one core). A record longer than a
    chunk is assembled from its pieces (memory: about its size)."""

    def __init__(self, fmt: str, writer, labels_file, chunk_bytes: int, bar, pool, *, verify: bool = True,
                 sink=None):
        self.w = writer
        # sink(buf, base, starts, end): the records found in buf (file offsets ``starts`` int64 (k,),
        # the last one ending at file offset ``end``), while buf is valid; default: offsets to ``writer``
        self.sink = sink
        self.chunk_bytes = max(int(chunk_bytes), 1)
        self.bar = bar
        self.verify = bool(verify)
        self.n = 0
        self.stats = np.array([0, -1, 0, 0], np.int64)
        self.qid_count = 0
        self.distinct = None
        self._starts = np.empty(max(self.chunk_bytes // OVERHEAD + 2, 1024), np.int64)
        self._err = np.zeros(5, np.int64)

    def scan_region(self, path: str, buf, lo: int, hi: int, base: int, n0: int) -> int:
        """Index the complete records of buf[lo:hi] (buf[0] at file offset ``base``); returns the
        offset in ``buf`` of the first record that is not complete (``hi`` when none)."""
        pos = lo
        while True:
            k, pos, status = K.walk(K.TABLE, K.HW, self.verify, buf, pos, hi, base, self._starts, 0, self._err)
            if k:
                if self.sink is None:
                    self.w.append(self._starts[:k])
                else:
                    self.sink(buf, base, self._starts[:k], base + pos)
                self.n += k
            if status == K.OK or status == K.NEED:
                return pos
            if status != K.FULL:
                err = record_error(path, self.n - n0, base + pos, status, self._err)
                if base + pos == 0 and status == K.BAD_LENGTH_CRC and _zlib_head(buf[pos:pos + 2]):
                    err = DataError(f"{err}; its first bytes look like a ZLIB stream (TFRecordWriter's "
                                    "compression_type='ZLIB'): decompress it first, e.g. python -c \"import sys, "
                                    "zlib; sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))\"")
                raise err

    def _need(self, pending) -> int:
        """Bytes the record begun in ``pending`` (list of uint8 pieces) needs: 12 while its header is
        incomplete, else 16 + its length (a bad length CRC shows as needing only the header)."""
        # the header lies in the first 12 bytes: never join a long record's pieces to read it
        head = np.concatenate([p[:HEADER] for p in pending[:HEADER]])[:HEADER]
        if head.size < HEADER:
            return HEADER
        k, _, status = K.walk(K.TABLE, K.HW, False, head, 0, HEADER, 0, self._starts[:0], 0, self._err)
        return HEADER if status == K.BAD_LENGTH_CRC else int(self._err[0])

    def scan_file(self, path: str) -> tuple[int, int, int]:
        """Scan one file; returns (records, -1, data end = file size)."""
        size = os.path.getsize(path)
        if size == 0:
            raise DataError(f"{path}: empty file (0 bytes); nothing to index")
        return self.scan_range(path, 0, size), -1, size

    def scan_range(self, path: str, start: int, size: int, first: int = 0) -> int:
        """Scan the records of bytes [start, size) of ``path`` (``first``: the file's records before
        ``start``, so that an error names the record's number in the file); returns their count."""
        n0 = self.n
        e0 = n0 - int(first)  # an error's record: self.n - e0
        pending: list = []     # pieces of a record that continues into the next chunk
        have = pend_base = 0
        for buf, nb, base in read_chunks(path, start, size, self.chunk_bytes, direct=True):
            lo = 0
            while pending and lo < nb:
                need = self._need(pending)
                if need > HEADER and need > size - pend_base:
                    # its header (CRC good) says it runs past the end: said now, not after the rest
                    # of the file was gathered into memory for it
                    raise record_error(path, self.n - e0, pend_base, K.NEED, self._err, size)
                take = min(need - have, nb - lo)
                if take > 0:
                    pending.append(buf[lo:lo + take].copy())
                    have += take
                    lo += take
                if have >= need and (need > HEADER or self._need(pending) == HEADER):
                    joined = np.concatenate(pending)
                    self.scan_region(path, joined, 0, have, pend_base, e0)  # one record (or its error)
                    pending, have = [], 0
            if not pending:
                pos = self.scan_region(path, buf, lo, nb, base, e0)
                if pos < nb:
                    pending, have, pend_base = [buf[pos:nb].copy()], nb - pos, base + pos
            if self.bar is not None:
                self.bar.update(nb)
        if pending:
            joined = np.concatenate(pending)
            k, pos, status = K.walk(K.TABLE, K.HW, self.verify, joined, 0, have, pend_base, self._starts,
                                    0, self._err)
            raise record_error(path, self.n - e0, pend_base, status, self._err, size)
        return self.n - n0


# --------------------------------------------------------------------------- reading


def payloads(buf, starts, ends, *, verify: bool = False, source: str = "", file_offsets=None,
             record_ids=None) -> list:
    """The payloads of the records ``buf[starts[j]:ends[j]]`` (uint8 buf, int64 (k,) spans of whole
    records), as a list of k ``bytes``.

    Every span must hold exactly one record with a good length CRC; with ``verify`` the payload
    CRCs are checked too. A bad record raises DataError naming ``source``, the record
    (``record_ids[j]``, else j) and its file offset (``file_offsets[j]``, else ``starts[j]``).
    """
    buf = _u8(buf)
    starts = np.ascontiguousarray(starts, np.int64)
    ends = np.ascontiguousarray(ends, np.int64)
    err = np.zeros(5, np.int64)
    j = K.check(K.TABLE, K.HW, bool(verify), buf, starts, ends, err)
    if j >= 0:
        rec = int(record_ids[j]) if record_ids is not None else j
        off = int(file_offsets[j]) if file_offsets is not None else int(starts[j])
        raise record_error(source or "<buffer>", rec, off, int(err[4]), err)
    if not starts.size:
        return []
    # one copy of the spans' bytes, then slices of it: several times faster than a memoryview
    # slice's tobytes() per record
    lo, hi = int(starts.min()), int(ends.max())
    whole = buf[lo:hi].tobytes()
    return [whole[s:e] for s, e in zip((starts + (HEADER - lo)).tolist(), (ends - (4 + lo)).tolist())]
