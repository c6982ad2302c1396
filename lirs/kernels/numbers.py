"""Decimal text -> float64, correctly rounded (as Python's ``float()``), in numba.

A token ``[+-]? (D+ [. D*] | . D+) ([eE] [+-]? D+)?`` is read into a decimal mantissa ``w`` (at
most 19 significant digits, so it is exact in a uint64) and a power of ten ``q``. Then:

* Clinger's fast path: ``w <= 2**53`` and ``|q| <= 22``: one IEEE multiply or divide of two exact
  doubles, a single correct rounding;
* otherwise the Eisel-Lemire algorithm (Lemire, "Number Parsing at a Gigabyte per Second",
  2021; the ``compute_float`` of fast_float): ``w`` times a 128-bit truncated power of five, with
  the exact round-to-even rule. Where the truncation could matter (the product's low word all
  ones outside ``q`` in [-27, 55]) the kernel says "not exact".

What is not handled here (more than 19 significant digits, an exponent of 100000 or more,
``inf``/``nan``, underscores) comes back as "not exact" and the caller hands the token to
Python's ``float()``. Callers thus stay bit-identical to ``float()`` on every input.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros
from numba.extending import intrinsic

# --- kind of a scanned token (scan_decimal)
EXACT = 0       # w and q hold the number exactly: decimal_to_f64 may round it
TOO_LONG = 1    # a number, but beyond the fast grammar's limits: Python's float() must parse it
NOT_NUMBER = 2  # the prefix is not a number (no digit, or "1e" without exponent digits)

_MAX_SIG = 19           # 10**19 - 1 < 2**64: any 19-digit mantissa is exact in a uint64
_MAX_EXP = 100000       # larger written exponents go to float(); then |q| never overflows int64

POW10 = np.array([1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                  1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22])
POW10_U64 = np.array([10 ** i for i in range(20)], np.uint64)

_SMALLEST_Q = -342      # below: every w rounds to zero
_LARGEST_Q = 308        # above: every w >= 1 rounds to infinity


def _power_of_five_table() -> np.ndarray:
    """128-bit approximations of 5**q, q in [-342, 308], as (high, low) uint64 pairs (flattened).

    Positive q: 5**q shifted to 128 significant bits, truncated. Negative q: 2**b / 5**-q rounded
    up, normalised to 128 bits (fast_float's table_generation.py)."""
    out = []
    for q in range(_SMALLEST_Q, 0):
        p5 = 5 ** -q
        z = p5.bit_length()  # smallest z with 2**z >= p5 (p5 is never a power of two)
        b = z + 127 if q >= -27 else 2 * z + 128
        c = 2 ** b // p5 + 1
        while c >= 1 << 128:
            c //= 2
        out.append(c)
    for q in range(0, _LARGEST_Q + 1):
        p5 = 5 ** q
        while p5 < 1 << 127:
            p5 *= 2
        while p5 >= 1 << 128:
            p5 //= 2
        out.append(p5)
    flat = []
    for c in out:
        flat += [c >> 64, c & ((1 << 64) - 1)]
    return np.array(flat, np.uint64)


POW5_128 = _power_of_five_table()

_U64 = np.uint64
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_PRECISION_MASK = np.uint64(0xFFFFFFFFFFFFFFFF >> 55)   # 52 explicit bits + 3
_MANT_MASK = np.uint64((1 << 52) - 1)
_TWO53 = np.uint64(1 << 53)

# SWAR constants: eight ASCII bytes tested and converted at once
HI4 = np.uint64(0xF0F0F0F0F0F0F0F0)
LO4 = np.uint64(0x0F0F0F0F0F0F0F0F)
THREES = np.uint64(0x3030303030303030)
SIXES = np.uint64(0x0606060606060606)
M16 = np.uint64(0x00FF00FF00FF00FF)
M32 = np.uint64(0x0000FFFF0000FFFF)


@njit(cache=True, nogil=True, _nrt=False)
def byte_at(buf, p):
    """buf[p] for p >= 0. An unsigned index spares numba's negative-index wraparound, which
    otherwise costs every byte read and keeps byte loops from vectorizing."""
    return buf[np.uintp(p)]


@intrinsic
def load_u64(typingctx, addr):
    """Unaligned little-endian 8-byte load at integer address ``addr``."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        a = context.cast(builder, args[0], sig.args[0], types.uint64)
        ptr = builder.inttoptr(a, ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return types.uint64(addr), codegen


@intrinsic
def prefetch(typingctx, addr):
    """Hint the CPU to load the cache line at integer address ``addr`` (llvm.prefetch: read,
    keep in all cache levels). Never faults; a no-op where the target has no prefetch."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        a = context.cast(builder, args[0], sig.args[0], types.uint64)
        ptr_t = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr_t, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.inttoptr(a, ptr_t), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(addr), codegen


# shuffled record spans jump around a buffer of many megabytes (a loader window): each record's
# first bytes would be a cache and TLB miss that stalls the parser, so the spans kernels ask for
# the record this many ahead while they parse one (a 64 MB window decoded 1.6x faster)
PREFETCH_AHEAD = 8
_PREFETCH_MAX = 512     # bytes of a record asked for ahead: its first lines (a record is ~300 B)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def prefetch_span(base, starts, ends, j):
    """Prefetch the first lines of span j (buf[starts[j]:ends[j]], ``base`` = buf's address), if
    there is a span j."""
    if j < starts.shape[0]:
        a = base + starts[j]
        b = base + min(ends[j], starts[j] + _PREFETCH_MAX)
        a -= a % 64
        while a < b:
            prefetch(a)
            a += 64


@intrinsic
def _mul_hi_lo(typingctx, a, b):
    """Full 64x64 -> 128-bit product of two uint64: (high, low)."""
    if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
        return None
    rtype = types.UniTuple(types.uint64, 2)

    def codegen(context, builder, sig, args):
        i64, i128 = ir.IntType(64), ir.IntType(128)
        x = builder.zext(context.cast(builder, args[0], sig.args[0], types.uint64), i128)
        y = builder.zext(context.cast(builder, args[1], sig.args[1], types.uint64), i128)
        p = builder.mul(x, y)
        hi = builder.trunc(builder.lshr(p, ir.Constant(i128, 64)), i64)
        lo = builder.trunc(p, i64)
        return context.make_tuple(builder, rtype, (hi, lo))

    return rtype(a, b), codegen


@intrinsic
def _bits_to_f64(typingctx, u):
    """Reinterpret a uint64 as the float64 with those bits."""
    if not isinstance(u, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(context.cast(builder, args[0], sig.args[0], types.uint64),
                               ir.DoubleType())

    return types.float64(u), codegen


@njit(cache=True, nogil=True, _nrt=False)
def digit_run_u64(buf, base, p, hi):
    """(value uint64, count) of the ASCII digits at buf[p:hi] (up to the first other byte).

    Eight bytes at a time (SWAR) while they lie inside ``buf``; ``base`` is the address of
    buf[0]. The value is exact when count <= 19 (meaningless beyond: the run is still measured)."""
    m = buf.shape[0]
    v = np.uint64(0)
    n = 0
    while p < hi:
        if p + 8 <= m:
            x = load_u64(base + np.uint64(p))
            bad = ((x & HI4) ^ THREES) | (((x + SIXES) & HI4) ^ THREES)
            k = 8 if bad == 0 else np.int64(trailing_zeros(bad)) >> 3
            if k > hi - p:
                k = hi - p
            if k == 0:
                return v, n
            z = (x & LO4) << np.uint64(8 * (8 - k))
            z = (z * np.uint64(2561)) >> np.uint64(8)
            z = ((z & M16) * np.uint64(6553601)) >> np.uint64(16)
            z = ((z & M32) * np.uint64(42949672960001)) >> np.uint64(32)
            if n + k <= _MAX_SIG:
                v = v * POW10_U64[k] + z
            n += k
            p += k
            if k < 8:
                return v, n
        else:
            d = np.int64(byte_at(buf, p)) - 48
            if d < 0 or d > 9:
                return v, n
            if n < _MAX_SIG:
                v = v * np.uint64(10) + np.uint64(d)
            n += 1
            p += 1
    return v, n


@njit(cache=True, nogil=True, _nrt=False)
def _exponent(buf, p, hi):
    """An optional ``[eE][+-]?D+`` at buf[p:hi]: (exponent, kind, end). No exponent: (0, EXACT, p);
    "1e" without a digit: NOT_NUMBER; |exponent| >= 100000: TOO_LONG."""
    if p < hi and (byte_at(buf, p) == 101 or byte_at(buf, p) == 69):
        q = p + 1
        eneg = False
        if q < hi and (byte_at(buf, q) == 43 or byte_at(buf, q) == 45):
            eneg = byte_at(buf, q) == 45
            q += 1
        e = 0
        ne = 0
        while q < hi:
            d = np.int64(byte_at(buf, q)) - 48
            if d < 0 or d > 9:
                break
            if e < _MAX_EXP:
                e = e * 10 + d
            ne += 1
            q += 1
        if ne == 0:
            return 0, NOT_NUMBER, q
        if e >= _MAX_EXP:
            return 0, TOO_LONG, q
        return (-e if eneg else e), EXACT, q
    return 0, EXACT, p


@njit(cache=True, nogil=True, _nrt=False)
def scan_decimal(buf, base, p, hi):
    """Read the longest number prefix of buf[p:hi] (``base``: address of buf[0]).

    Returns (w uint64, q int64, neg bool, kind, end): the number is (-1)**neg * w * 10**q when
    kind is EXACT; TOO_LONG: a number this scanner does not hold exactly (more than 19 significant
    digits, or a huge exponent); NOT_NUMBER: no number at p. ``end`` is where the prefix stops.
    """
    neg = False
    if p < hi:
        c = byte_at(buf, p)
        if c == 45:
            neg = True
            p += 1
        elif c == 43:
            p += 1
    nd = 0
    while p < hi and byte_at(buf, p) == 48:  # leading zeros carry no significance
        p += 1
        nd += 1
    w, sig = digit_run_u64(buf, base, p, hi)
    p += sig
    nd += sig
    q = 0
    if p < hi and byte_at(buf, p) == 46:
        p += 1
        if sig == 0:
            f0 = p
            while p < hi and byte_at(buf, p) == 48:
                p += 1
            nd += p - f0
            q -= p - f0
        f, nf = digit_run_u64(buf, base, p, hi)
        p += nf
        nd += nf
        if sig + nf <= _MAX_SIG:
            w = w * POW10_U64[nf] + f
        sig += nf
        q -= nf
    if nd == 0:
        return np.uint64(0), 0, neg, NOT_NUMBER, p
    e, kind, p = _exponent(buf, p, hi)
    if kind != EXACT:
        return np.uint64(0), 0, neg, kind, p
    if sig > _MAX_SIG:
        return np.uint64(0), 0, neg, TOO_LONG, p
    return w, q + e, neg, EXACT, p


@njit(cache=True, nogil=True, _nrt=False)
def decimal_to_f64(w, q, neg):
    """The float64 nearest to (-1)**neg * w * 10**q (ties to even), as Python's ``float()``.

    w uint64, q int64. Returns (value, ok); ok False in the rare cases Eisel-Lemire cannot
    decide: the caller must then use an exact method (Python's ``float()``)."""
    sign = np.uint64(1) << np.uint64(63) if neg else np.uint64(0)
    if w == 0 or q < _SMALLEST_Q:
        return _bits_to_f64(sign), True
    if q > _LARGEST_Q:
        return _bits_to_f64(sign | (np.uint64(0x7FF) << np.uint64(52))), True
    if w <= _TWO53 and -22 <= q <= 22:
        v = np.float64(w)
        v = v * POW10[q] if q >= 0 else v / POW10[-q]
        return (-v if neg else v), True
    lz = np.int64(leading_zeros(w))
    w = w << np.uint64(lz)
    i = 2 * (q - _SMALLEST_Q)
    hi, lo = _mul_hi_lo(w, POW5_128[i])
    if (hi & _PRECISION_MASK) == _PRECISION_MASK:
        hi2, lo2 = _mul_hi_lo(w, POW5_128[i + 1])
        lo = lo + hi2
        if hi2 > lo:
            hi += np.uint64(1)
        if lo == _ONES and (q < -27 or q > 55):
            return 0.0, False  # the truncated power could flip the rounding: not decided here
    upper = np.int64(hi >> np.uint64(63))
    shift = np.uint64(upper + 9)
    mant = hi >> shift
    power2 = (((152170 + 65536) * q) >> 16) + 63 + upper - lz + 1023
    if power2 <= 0:  # subnormal (or zero)
        if -power2 + 1 >= 64:
            return _bits_to_f64(sign), True
        mant = mant >> np.uint64(-power2 + 1)
        mant = (mant + (mant & np.uint64(1))) >> np.uint64(1)
        # rounding may carry into the smallest normal exponent; bit 52 then sets it
        return _bits_to_f64(sign | mant), True
    if lo <= np.uint64(1) and -4 <= q <= 23 and (mant & np.uint64(3)) == np.uint64(1):
        if (mant << shift) == hi:  # exactly halfway: round to even, i.e. down here
            mant &= ~np.uint64(1)
    mant = (mant + (mant & np.uint64(1))) >> np.uint64(1)
    if mant >= _TWO53:
        mant = np.uint64(1) << np.uint64(52)
        power2 += 1
    if power2 >= 0x7FF:
        return _bits_to_f64(sign | (np.uint64(0x7FF) << np.uint64(52))), True
    return _bits_to_f64(sign | (np.uint64(power2) << np.uint64(52)) | (mant & _MANT_MASK)), True


@njit(cache=True, nogil=True, _nrt=False)
def scan_float(buf, base, p, hi):
    """Read a number at buf[p:hi] and round it: (value float64, exact bool, end int64).

    ``exact`` False: not a number, or one that Python's ``float()`` must parse (see module)."""
    w, q, neg, kind, end = scan_decimal(buf, base, p, hi)
    if kind != EXACT:
        return 0.0, False, end
    v, ok = decimal_to_f64(w, q, neg)
    return v, ok, end
