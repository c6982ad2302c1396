"""Native read loops of the engines: one call reads a whole batch of extents without the GIL.

libc entry points (``syscall``, ``pread``, ``__errno_location``) are passed in as integer
addresses and called through tiny LLVM intrinsics, so the kernels hold no ctypes globals and can be
cached. Ring memory of io_uring is touched through explicit acquire/release atomics: the kernel
writes the completion ring from another context, and the compiler must neither cache nor reorder
those loads.

Conventions of every kernel here:
  * ``ext_file`` int32 (e,), ``ext_offset`` int64 (e,), ``ext_nbytes`` int64 (e,): what to read;
  * ``buf_addr`` int: address of the caller's buffer; ``buf_pos`` int64 (e,): where extent i goes;
  * ``got`` int64 (e,) in/out: bytes already read per extent (zero on a first call; a call resumes
    from it), on return the bytes read (short only at end of file);
  * errors are reported in an output array, never raised (numba cannot raise with context).

Short reads. Some filesystems (FUSE, network filesystems) answer a read with fewer bytes than asked
well before the end of the file. An ``O_DIRECT`` read that comes back ending off a 4096 boundary
cannot be continued on the same descriptor (the next offset is unaligned, which most filesystems
refuse), so the rest of that block is read through ``cfds[file]``, a page-cache descriptor of the
same file, and ``O_DIRECT`` reads resume at the next boundary. The end of the file is a read that
returns 0 bytes, or a short read that reached ``sizes[file]`` (the size when the engine opened the
file, so the common end-of-file case costs no extra read); a short read is never taken for it.
``cfds[file]`` is -1 until the engine has opened it: an extent that needs it is left with
``stall[i] = 1`` and the engine calls again, after opening, on the stalled extents.
"""
from __future__ import annotations

import errno

from llvmlite import ir
import numpy as np
from numba import njit
from numba.core import types
from numba.extending import intrinsic

# errno values the kernels compare against, this platform's (numba freezes them at compile time;
# its cache is per machine)
EINTR = errno.EINTR
EAGAIN = errno.EAGAIN
EBUSY = errno.EBUSY

NR_IO_URING_SETUP = 425
NR_IO_URING_ENTER = 426
NR_IO_URING_REGISTER = 427
IORING_OP_READ = 22
IORING_ENTER_GETEVENTS = 1

# Layout of the int64 ring descriptor handed to lirs.kernels.ring (filled by lirs.engines.uring).
R_FD, R_SQ_HEAD, R_SQ_TAIL, R_SQ_MASK, R_SQES, R_CQ_HEAD, R_CQ_TAIL, R_CQ_MASK, R_CQES, R_ENTRIES, \
    R_SYSCALL, R_ERRNO = range(12)
RING_FIELDS = 12

_BLOCK = 4096
_MAX_EAGAIN = 100000  # retries of an EAGAIN read before it counts as an error


# --------------------------------------------------------------------------- intrinsics


def _i64(context, builder, typ, val):
    return context.cast(builder, val, typ, types.int64)


def _make_load(bits, ordering):
    @intrinsic
    def load(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None
        rtype = types.uint32 if bits == 32 else types.int64

        def codegen(context, builder, sig, args):
            a = _i64(context, builder, sig.args[0], args[0])
            ptr = builder.inttoptr(a, ir.IntType(bits).as_pointer())
            if ordering is None:
                v = builder.load(ptr, align=bits // 8)
            else:
                v = builder.load_atomic(ptr, ordering, bits // 8)
            if bits == 32:
                return v
            return v

        return rtype(addr), codegen

    return load


def _make_store(bits, ordering):
    @intrinsic
    def store(typingctx, addr, value):
        if not isinstance(addr, types.Integer) or not isinstance(value, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            a = _i64(context, builder, sig.args[0], args[0])
            ity = ir.IntType(bits)
            v = context.cast(builder, args[1], sig.args[1], types.int64)
            if bits < 64:
                v = builder.trunc(v, ity)
            ptr = builder.inttoptr(a, ity.as_pointer())
            if ordering is None:
                builder.store(v, ptr, align=bits // 8)
            else:
                builder.store_atomic(v, ptr, ordering, bits // 8)
            return context.get_dummy_value()

        return types.void(addr, value), codegen

    return store


load_u32_acquire = _make_load(32, "acquire")
store_u32_release = _make_store(32, "release")
load_i64 = _make_load(64, None)
store_u8 = _make_store(8, None)
store_u16 = _make_store(16, None)
store_u32 = _make_store(32, None)
store_i64 = _make_store(64, None)


@intrinsic
def load_i32(typingctx, addr):
    """Signed 32-bit load (the ``res`` field of a completion, ``errno``)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        a = _i64(context, builder, sig.args[0], args[0])
        return builder.load(builder.inttoptr(a, ir.IntType(32).as_pointer()), align=4)

    return types.int32(addr), codegen


@intrinsic
def fetch_add_i64(typingctx, addr, value):
    """Atomically add ``value`` to the int64 at ``addr``; returns the previous value."""
    if not isinstance(addr, types.Integer) or not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        a = _i64(context, builder, sig.args[0], args[0])
        v = _i64(context, builder, sig.args[1], args[1])
        ptr = builder.inttoptr(a, ir.IntType(64).as_pointer())
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return types.int64(addr, value), codegen


@intrinsic
def call_syscall6(typingctx, fn, nr, a1, a2, a3, a4, a5, a6):
    """``long syscall(long nr, ...)`` through the libc function at address ``fn``."""
    args_t = (fn, nr, a1, a2, a3, a4, a5, a6)
    if not all(isinstance(t, types.Integer) for t in args_t):
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        vals = [_i64(context, builder, t, v) for t, v in zip(sig.args, args)]
        fnty = ir.FunctionType(i64, [i64], var_arg=True)
        f = builder.inttoptr(vals[0], fnty.as_pointer())
        return builder.call(f, vals[1:])

    return types.int64(*args_t), codegen


@intrinsic
def call_pread(typingctx, fn, fd, addr, nbytes, offset):
    """``ssize_t pread(int fd, void *buf, size_t n, off_t off)`` through the function at ``fn``."""
    args_t = (fn, fd, addr, nbytes, offset)
    if not all(isinstance(t, types.Integer) for t in args_t):
        return None

    def codegen(context, builder, sig, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        vals = [_i64(context, builder, t, v) for t, v in zip(sig.args, args)]
        fnty = ir.FunctionType(i64, [i32, ir.IntType(8).as_pointer(), i64, i64])
        f = builder.inttoptr(vals[0], fnty.as_pointer())
        buf = builder.inttoptr(vals[2], ir.IntType(8).as_pointer())
        return builder.call(f, [builder.trunc(vals[1], i32), buf, vals[3], vals[4]])

    return types.int64(*args_t), codegen


@intrinsic
def call_errno(typingctx, fn):
    """Value of this thread's ``errno`` via ``int *__errno_location(void)`` at address ``fn``."""
    if not isinstance(fn, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        a = _i64(context, builder, sig.args[0], args[0])
        fnty = ir.FunctionType(i32.as_pointer(), [])
        f = builder.inttoptr(a, fnty.as_pointer())
        p = builder.call(f, [])
        return builder.load(p, align=4)

    return types.int32(fn), codegen


# --------------------------------------------------------------------------- a read step's buffer

# block_positions, step_totals and check_extents keep the GIL: each is about a microsecond a read
# step (ad hoc, a 12k-record group step: 0.4, 1.2 and 0.5 us, mostly the call), and a thread that
# lets the GIL go around that takes it back behind every thread waiting for it (on 16 cores a dozen
# pool threads, the planning thread and the consumer). record_spans (23 us for the same step), the
# reads and the decodes let it go.


@njit(cache=True)  # keeps the GIL (see above)
def block_positions(ext_nbytes, block, buf_pos):
    """Lay a read step's extents (``ext_nbytes`` int64 (e,)) back to back in one buffer, each from
    a multiple of ``block``: ``buf_pos`` int64 (e,) (out) gets where extent i goes. Returns the
    buffer's size (the last extent rounded up to the block too)."""
    at = 0
    for i in range(ext_nbytes.shape[0]):
        buf_pos[i] = at
        at += (ext_nbytes[i] + block - 1) // block * block
    return at


@njit(cache=True, nogil=True)
def record_spans(buf_pos, got, rec_extent, rec_pos, rec_len, starts, ends):
    """Where each record of a read step lies in its buffer: ``starts``/``ends`` int64 (k,) (out)
    from the extents' ``buf_pos`` and ``got`` int64 (e,) (bytes each read returned) and the
    records' ``rec_extent`` int32 (k,), ``rec_pos``/``rec_len`` int64 (k,). Returns (the first
    record whose bytes the read did not return (its file ended early), or -1: every record whole;
    the records' bytes, the sum of ``rec_len``: a LIBSVM decoder sizes its outputs from it)."""
    short = -1
    payload = 0
    for j in range(rec_extent.shape[0]):
        e = rec_extent[j]
        starts[j] = buf_pos[e] + rec_pos[j]
        ends[j] = starts[j] + rec_len[j]
        payload += rec_len[j]
        if short < 0 and rec_pos[j] + rec_len[j] > got[e]:
            short = j
    return short, payload


@njit(cache=True)  # keeps the GIL (see above)
def step_totals(got, rec_len):
    """(bytes the reads returned, bytes of the records) of a read step: the sums of ``got`` int64
    (e,) and ``rec_len`` int64 (k,), in one call."""
    a = 0
    for i in range(got.shape[0]):
        a += got[i]
    b = 0
    for j in range(rec_len.shape[0]):
        b += rec_len[j]
    return a, b


# --------------------------------------------------------------------------- pread workers


# check_extents' verdicts
EXTENTS_OK = 0
EXTENTS_BAD_FILE = 1       # a file number outside [0, files)
EXTENTS_NEGATIVE = 2       # a negative offset, size or buffer position
EXTENTS_OVERFLOW = 3       # an extent that does not fit the buffer
EXTENTS_UNALIGNED = 4      # (direct) an offset, size or buffer position not a multiple of 4096


@njit(cache=True)  # keeps the GIL (see above)
def check_extents(ext_file, ext_offset, ext_nbytes, buf_pos, files, buf_len, direct):
    """One pass over a read's extents (int32/int64 (e,) each): EXTENTS_OK, or the first verdict
    that fails (see above), before any byte is read into the buffer."""
    for i in range(ext_file.shape[0]):
        if ext_file[i] < 0 or ext_file[i] >= files:
            return EXTENTS_BAD_FILE
        if ext_offset[i] < 0 or ext_nbytes[i] < 0 or buf_pos[i] < 0:
            return EXTENTS_NEGATIVE
        if buf_pos[i] + ext_nbytes[i] > buf_len:
            return EXTENTS_OVERFLOW
        if direct and ((ext_offset[i] | ext_nbytes[i] | buf_pos[i]) & 4095) != 0:
            return EXTENTS_UNALIGNED
    return EXTENTS_OK


@njit(cache=True, nogil=True)
def pread_worker(fn_pread, fn_errno, fds, cfds, sizes, ext_file, ext_offset, ext_nbytes, buf, buf_pos,
                 direct, got, errs, stall, counter):
    """Read extents until none is left; several threads run this on the same batch.

    ``buf`` is the uint8 buffer (the arrays are passed, not their addresses: numba reads a pointer
    where Python's ``.ctypes`` builds an object per call). Extents are handed out one at a time
    through an atomic counter, ``counter`` int64 (3,), zero on entry, so threads that finish early
    take more; its second and third items count the extents that failed and stalled (the caller
    looks at two numbers, not at every extent). ``fds``/``cfds`` int32 (files,): the
    descriptors and the page-cache continuation descriptors (-1: not open), ``sizes`` int64
    (files,). ``errs`` int32 (e,) receives the errno of a failed extent (0 = fine), ``stall`` uint8
    (e,) is set for an extent that needs a continuation descriptor not yet open (see the module
    doc). Returns the number of extents this thread read.
    """
    e = ext_file.shape[0]
    buf_addr = np.int64(buf.ctypes.data)  # int64: uint64 + int64 offsets would be float64
    counter_addr = np.int64(counter.ctypes.data)
    mine = 0
    while True:
        i = fetch_add_i64(counter_addr, 1)
        if i >= e:
            break
        mine += 1
        f = ext_file[i]
        want = ext_nbytes[i]
        retries = 0
        while got[i] < want:
            fd = fds[f]
            n = want - got[i]
            if direct and got[i] % _BLOCK != 0:
                # a short O_DIRECT read stopped mid-block: the rest of the block through the page cache
                fd = cfds[f]
                if fd < 0:
                    stall[i] = 1
                    fetch_add_i64(counter_addr + 16, 1)
                    break
                room = _BLOCK - got[i] % _BLOCK
                if n > room:
                    n = room
            r = call_pread(fn_pread, fd, buf_addr + buf_pos[i] + got[i], n, ext_offset[i] + got[i])
            if r < 0:
                en = call_errno(fn_errno)
                if en == EINTR:
                    continue
                if en == EAGAIN and retries < _MAX_EAGAIN:
                    retries += 1
                    continue
                errs[i] = en
                fetch_add_i64(counter_addr + 8, 1)
                break
            if r == 0:
                break  # end of file
            got[i] += r
            if direct and got[i] % _BLOCK != 0 and ext_offset[i] + got[i] >= sizes[f]:
                break  # the usual O_DIRECT end of file: short, off a block boundary, at the size
    return mine

