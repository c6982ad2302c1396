"""TFRecord kernels: CRC-32C and the record framing.

A TFRecord file is a sequence of records, each::

    uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | payload (length bytes)
    | uint32 masked CRC-32C of the payload

``mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)``; CRC-32C is the Castagnoli
polynomial (0x82F63B78 reflected, initial value and final xor 0xFFFFFFFF). A record's span in lirs
covers all four fields (16 bytes more than its payload), so the offset table points at headers.

CRC-32C runs on the SSE4.2 ``crc32`` instruction where the CPU has it (three lanes at once: see
:data:`STRIPE`), else on a table-driven slicing-by-8 loop (about 1.7 GB/s): every kernel takes ``hw`` (bool) and the
table ``T`` (uint32 (8, 256), :data:`TABLE`) and picks at run time, so both stay testable here.
"""
from __future__ import annotations

import os
import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .external import BIG, DONE, FLUSH, draw_pile
from .numbers import load_u64

memcpy = types.ExternalFunction("memcpy", types.uintp(types.uintp, types.uintp, types.uintp))

HEADER = 12          # length + its CRC
OVERHEAD = 16        # header + payload CRC
POLY = 0x82F63B78    # CRC-32C (Castagnoli), reflected
MASK_DELTA = 0xA282EAD8

# status of walk / check
OK = 0
NEED = 1             # the record at pos is not complete in the region; err[0] = bytes it needs
FULL = 2             # the starts array is full
BAD_LENGTH_CRC = 3   # err[0] stored masked CRC, err[1] computed, err[2] the length field
BAD_DATA_CRC = 4     # err[0] stored masked CRC, err[1] computed, err[2] the length field
BAD_SPAN = 5         # (check) the length field does not fill the record's span: err[2] length, err[3] span

HUGE = np.int64(1) << np.int64(62)  # a length beyond any file: compared as int64 without overflow


def _cpu_has_sse42() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " sse4_2" in line for line in f)
    except OSError:
        return False


#: True when the kernels use the SSE4.2 instruction (``LIRS_CRC32C=software`` forces the table).
HW = _cpu_has_sse42() and os.environ.get("LIRS_CRC32C", "") != "software"
_EMIT_HW = _cpu_has_sse42()  # the instruction is emitted only where LLVM can select it


def crc32c_table() -> np.ndarray:
    """The slicing-by-8 tables: uint32 (8, 256); ``T[0]`` is the classic byte-at-a-time table."""
    t = np.zeros((8, 256), np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ POLY if c & 1 else c >> 1
        t[0, b] = c
    for k in range(1, 8):
        for b in range(256):
            prev = int(t[k - 1, b])
            t[k, b] = (prev >> 8) ^ int(t[0, prev & 0xFF])
    return t


TABLE = crc32c_table()

#: Bytes per lane of the three-lane CRC loop: the ``crc32`` instruction has a latency of three cycles
#: and a throughput of one, so three independent lanes over three adjacent stretches of STRIPE bytes
#: run about three times as fast as one, and are joined with the zero-feed tables below.
STRIPE = 1 << 10


def _zero_feed(nbytes: int) -> list:
    """The raw CRC-32C register after ``nbytes`` zero bytes, as a linear map over GF(2): the image
    of each of the 32 register bits (``nbytes`` a power of two; by repeated squaring)."""
    def apply(m, x):
        y = 0
        i = 0
        while x:
            if x & 1:
                y ^= m[i]
            x >>= 1
            i += 1
        return y

    m = [(int(TABLE[0, (1 << i) & 0xFF]) ^ ((1 << i) >> 8)) for i in range(32)]  # one zero byte
    n = 1
    while n < nbytes:
        m = [apply(m, m[i]) for i in range(32)]
        n *= 2
    assert n == nbytes
    return m


def _zero_tables(nbytes: int) -> np.ndarray:
    """uint32 (4, 256): the zero feed of ``nbytes`` applied a byte of the register at a time."""
    m = _zero_feed(nbytes)
    t = np.zeros((4, 256), np.uint32)
    for k in range(4):
        for v in range(256):
            y = 0
            for b in range(8):
                if v >> b & 1:
                    y ^= m[8 * k + b]
            t[k, v] = y
    return t


_Z1 = _zero_tables(STRIPE)       # shift a lane's register past one stripe
_Z2 = _zero_tables(2 * STRIPE)   # past two


@intrinsic
def _crc32_u64(typingctx, crc, data):
    """SSE4.2 ``crc32 r64, r/m64`` (reflected CRC-32C of 8 bytes; no pre/post inversion)."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        if not _EMIT_HW:  # never called there (HW is False): keep the module compilable
            return ir.Constant(ir.IntType(64), 0)
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(64)])
        fn = builder.module.declare_intrinsic("llvm.x86.sse42.crc32.64.64", fnty=fnty)
        return builder.call(fn, args)

    return sig, codegen


_FF = np.uint64(0xFF)
_U32 = np.uint64(0xFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _u32(buf, p):
    return (np.uint64(buf[p]) | (np.uint64(buf[p + 1]) << np.uint64(8)) | (np.uint64(buf[p + 2]) << np.uint64(16))
            | (np.uint64(buf[p + 3]) << np.uint64(24)))


@njit(cache=True, nogil=True, inline="always")
def _shift(Z, c):
    """A raw register ``c`` (uint64 < 2**32) moved past the zero bytes of the tables ``Z``."""
    return (np.uint64(Z[0, c & _FF]) ^ np.uint64(Z[1, (c >> np.uint64(8)) & _FF])
            ^ np.uint64(Z[2, (c >> np.uint64(16)) & _FF]) ^ np.uint64(Z[3, (c >> np.uint64(24)) & _FF]))


@njit(cache=True, nogil=True)
def crc32c_update(T, hw, buf, lo, hi, crc):
    """CRC-32C of buf[lo:hi] (uint8) continuing ``crc`` (0 to start); returns uint64 < 2**32."""
    c = (np.uint64(crc) ^ _U32) & _U32
    p = lo
    addr = np.uint64(buf.ctypes.data)
    if hw:
        stride = np.uint64(STRIPE)
        while p + 3 * STRIPE <= hi:  # three lanes, joined: reg(A|B|C) = Z2(reg A) ^ Z1(reg B) ^ reg C
            a = addr + np.uint64(p)
            b = np.uint64(0)
            d = np.uint64(0)
            q = np.uint64(0)
            while q < stride:
                c = _crc32_u64(c, load_u64(a + q))
                b = _crc32_u64(b, load_u64(a + stride + q))
                d = _crc32_u64(d, load_u64(a + stride + stride + q))
                q += np.uint64(8)
            c = _shift(_Z2, c) ^ _shift(_Z1, b) ^ d
            p += 3 * STRIPE
        while p + 8 <= hi:
            c = _crc32_u64(c, load_u64(addr + np.uint64(p)))
            p += 8
    else:
        while p + 8 <= hi:
            x = c ^ load_u64(addr + np.uint64(p))
            c = (np.uint64(T[7, x & _FF]) ^ np.uint64(T[6, (x >> np.uint64(8)) & _FF])
                 ^ np.uint64(T[5, (x >> np.uint64(16)) & _FF]) ^ np.uint64(T[4, (x >> np.uint64(24)) & _FF])
                 ^ np.uint64(T[3, (x >> np.uint64(32)) & _FF]) ^ np.uint64(T[2, (x >> np.uint64(40)) & _FF])
                 ^ np.uint64(T[1, (x >> np.uint64(48)) & _FF]) ^ np.uint64(T[0, x >> np.uint64(56)]))
            p += 8
    while p < hi:
        c = np.uint64(T[0, (c ^ np.uint64(buf[p])) & _FF]) ^ (c >> np.uint64(8))
        p += 1
    return (c ^ _U32) & _U32


@njit(cache=True, nogil=True, inline="always")
def mask(c):
    """TFRecord's masked CRC of a CRC-32C ``c`` (uint64 < 2**32)."""
    return ((((c >> np.uint64(15)) | (c << np.uint64(17))) & _U32) + np.uint64(MASK_DELTA)) & _U32


@njit(cache=True, nogil=True)
def masked_crc(T, hw, buf, lo, hi):
    """Masked CRC-32C of buf[lo:hi] (uint64 < 2**32)."""
    return mask(crc32c_update(T, hw, buf, lo, hi, 0))


@njit(cache=True, nogil=True, inline="always")
def _length(buf, p):
    """The length field at buf[p:p+8] as int64 (lengths beyond 2**62 read as 2**62)."""
    v = _u32(buf, p) | (_u32(buf, p + 4) << np.uint64(32))
    return HUGE if v > np.uint64(HUGE) else np.int64(v)


@njit(cache=True, nogil=True, inline="always")
def _raw_length(buf, p):
    """The length field at buf[p:p+8], its 64 bits as int64 (messages read it as unsigned)."""
    return np.int64(_u32(buf, p) | (_u32(buf, p + 4) << np.uint64(32)))


@njit(cache=True, nogil=True)
def walk(T, hw, verify, buf, pos, hi, base, starts, k, err):
    """Walk the records of buf[pos:hi] (uint8), whose byte ``pos`` is at file offset ``base + pos``.

    Each complete record whose length CRC (and, with ``verify``, payload CRC) checks is appended
    to ``starts`` (int64, its file offset) at index ``k``. Stops at the first record that is not
    complete in the region, a bad CRC, or a full ``starts``. Returns (k, pos, status): ``pos`` is
    the start of the record the status is about (``hi`` when every record was complete); ``err``
    int64 (4,) as described at the status codes.
    """
    while pos < hi:
        if hi - pos < HEADER:
            err[0] = HEADER
            return k, pos, NEED
        n = _length(buf, pos)
        stored = np.int64(_u32(buf, pos + 8))
        got = np.int64(masked_crc(T, hw, buf, pos, pos + 8))
        if stored != got:
            err[0], err[1], err[2], err[3] = stored, got, n, _raw_length(buf, pos)
            return k, pos, BAD_LENGTH_CRC
        if n > hi - pos - OVERHEAD:
            err[0], err[2], err[3] = (n + OVERHEAD if n < HUGE else HUGE), n, _raw_length(buf, pos)
            return k, pos, NEED
        if verify:
            stored = np.int64(_u32(buf, pos + HEADER + n))
            got = np.int64(masked_crc(T, hw, buf, pos + HEADER, pos + HEADER + n))
            if stored != got:
                err[0], err[1], err[2] = stored, got, n
                return k, pos, BAD_DATA_CRC
        if k >= starts.shape[0]:
            return k, pos, FULL
        starts[k] = base + pos
        k += 1
        pos += n + OVERHEAD
    return k, pos, OK


@njit(cache=True, nogil=True)
def check(T, hw, verify, buf, starts, ends, err):
    """Check the records buf[starts[j]:ends[j]] (int64 (k,)): each span is exactly one record (its
    length field + 16 bytes) with a good length CRC and, with ``verify``, a good payload CRC.
    Returns the first bad j (``err[4]`` its status, the rest as for :func:`walk`) or -1."""
    for j in range(starts.shape[0]):
        s, e = starts[j], ends[j]
        span = e - s
        if span < OVERHEAD:
            err[2], err[3], err[4] = -1, span, BAD_SPAN
            return j
        n = _length(buf, s)
        stored = np.int64(_u32(buf, s + 8))
        got = np.int64(masked_crc(T, hw, buf, s, s + 8))
        if stored != got:
            err[0], err[1], err[2], err[3], err[4] = stored, got, n, _raw_length(buf, s), BAD_LENGTH_CRC
            return j
        if n + OVERHEAD != span:
            err[2], err[3], err[4] = n, span, BAD_SPAN
            return j
        if verify:
            stored = np.int64(_u32(buf, e - 4))
            got = np.int64(masked_crc(T, hw, buf, s + HEADER, e - 4))
            if stored != got:
                err[0], err[1], err[2], err[4] = stored, got, n, BAD_DATA_CRC
                return j
    return -1


@njit(cache=True, nogil=True)
def frame(T, hw, payloads, bounds, out):
    """Write records into ``out`` (uint8): payload j is payloads[bounds[j]:bounds[j+1]] (uint8,
    int64 (k+1,)); ``out`` has ``bounds[k] - bounds[0] + 16 k`` bytes. Returns the bytes written."""
    pos = 0
    for j in range(bounds.shape[0] - 1):
        a, b = bounds[j], bounds[j + 1]
        n = np.uint64(b - a)
        for i in range(8):
            out[pos + i] = np.uint8((n >> np.uint64(8 * i)) & _FF)
        c = masked_crc(T, hw, out, pos, pos + 8)
        for i in range(4):
            out[pos + 8 + i] = np.uint8((c >> np.uint64(8 * i)) & _FF)
        out[pos + HEADER:pos + HEADER + (b - a)] = payloads[a:b]
        c = masked_crc(T, hw, payloads, a, b)
        q = pos + HEADER + (b - a)
        for i in range(4):
            out[q + i] = np.uint8((c >> np.uint64(8 * i)) & _FF)
        pos = q + 4
    return pos


# --------------------------------------------------------------------------- `lirs shuffle`


@njit(cache=True, nogil=True)
def record_starts(buf, n, out):
    """Start offsets (int64) of the records of buf[:n] (a pile: whole records, framing already
    checked) into ``out``; returns the count, or -1 - (offset) where a record runs past ``n``."""
    p = 0
    k = 0
    while p < n:
        if n - p < OVERHEAD:
            return -1 - p
        ln = _length(buf, p)
        if ln > n - p - OVERHEAD:
            return -1 - p
        if k < out.shape[0]:
            out[k] = p
        k += 1
        p += ln + OVERHEAD
    return k


@njit(cache=True, nogil=True)
def gather_records(src, offs, i, i_end, out, pos):
    """Copy the records starting at ``src[offs[i]]``, ``offs[i+1]``, ... (each 16 bytes plus its
    length field) into ``out[pos:]`` until ``i_end`` or until the next one does not fit.
    Returns (i, pos) after the last record copied."""
    sp = np.int64(src.ctypes.data)
    op = np.int64(out.ctypes.data)
    cap = out.shape[0]
    while i < i_end:
        s = offs[i]
        ln = _length(src, s) + OVERHEAD
        if pos + ln > cap:
            break
        memcpy(op + pos, sp + s, ln)
        pos += ln
        i += 1
    return i, pos


@njit(cache=True, nogil=True)
def record_length(buf, p):
    """Bytes of the record at buf[p] (header + payload + footer), from its length field."""
    return _length(buf, p) + OVERHEAD


@njit(cache=True, nogil=True)
def scatter_records(buf, starts, i, k, base, end, key, counter, m, piles, w, wmax, slots, fill, counts, nbytes):
    """Deal records ``i .. k-1`` of buf (uint8) to ``m`` pile buffers, as
    :func:`lirs.kernels.external.scatter_lines` deals lines (same ``piles``/``slots``/``fill``/
    ``counts``/``nbytes`` and pile draws). Record j spans buf[starts[j] - base : starts[j+1] - base]
    (int64 file offsets; the last one ends at file offset ``end``).

    Returns (i, counter, status, pile): ``DONE``; ``FLUSH`` (pile ``pile`` must be emptied before
    record ``i`` fits); ``BIG`` (record ``i`` is longer than ``wmax``: the caller streams it to
    ``pile`` and advances ``counter``).
    """
    ptr = np.int64(buf.ctypes.data)
    pb = np.int64(piles.ctypes.data)
    while i < k:
        s = starts[i] - base
        e = (starts[i + 1] if i + 1 < k else end) - base
        ln = e - s
        p = draw_pile(key, counter, m)
        if ln > wmax:
            return i, counter, BIG, p
        if fill[p] + ln > w:
            return i, counter, FLUSH, p
        memcpy(pb + slots[p] * w + fill[p], ptr + s, ln)
        fill[p] += ln
        counts[p] += 1
        nbytes[p] += ln
        counter += 1
        i += 1
    return i, counter, DONE, -1
