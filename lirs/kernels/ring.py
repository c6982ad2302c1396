"""The io_uring read loop of the ``uring`` engine: a whole batch submitted and reaped without the GIL.

Same conventions as :mod:`lirs.kernels.io` (whose intrinsics it uses): extents ``ext_file`` int32
(e,), ``ext_offset``/``ext_nbytes``/``buf_pos`` int64 (e,), ``got`` int64 (e,) in/out, errors in an
output array, short reads continued (an ``O_DIRECT`` one that stops off a block boundary through
the page-cache descriptor ``cfds[file]``, or ``stall[i] = 1`` while that is not open).

What keeps it cheap per read (benchmarks/bench_engines.py reports CPU time per read next to fio's
on 4 KiB random reads):

* registered files (``R_FIXED``): the data files are registered with the ring once
  (``IORING_REGISTER_FILES``, in file order), so a read names its file by index
  (``IOSQE_FIXED_FILE``) and the kernel skips the per-read file reference count;
* batched waits: with the ring full, one ``io_uring_enter`` waits for ``R_WAIT`` completions
  (:data:`lirs.constants.URING_WAIT_SHARE` of the depth, at least one); when nothing is left to
  submit it waits for all that are in flight. With ``IORING_SETUP_DEFER_TASKRUN`` (set up by the
  engine where the kernel has it) the kernel wakes the thread once per wait, not per completion;
* small submissions (``R_SUBMIT``): the kernel plugs the block queue for a submission of more
  than two reads and dispatches them together, which on the virtio disk measured here lowered 4 KiB
  QD 32 reads to ~0.8x fio's (which submits one read per call); at most two per call keep each read
  going to the device as soon as its slot frees, for less CPU than one call per read.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .io import (EAGAIN, EBUSY, EINTR, IORING_ENTER_GETEVENTS, IORING_OP_READ, NR_IO_URING_ENTER, R_CQ_HEAD,
                 R_CQ_MASK, R_CQ_TAIL, R_CQES, R_ENTRIES, R_ERRNO, R_FD, R_SQ_HEAD, R_SQ_MASK, R_SQ_TAIL, R_SQES,
                 R_SYSCALL, call_errno, call_syscall6, load_i32, load_i64, load_u32_acquire, store_i64,
                 store_u8, store_u16, store_u32, store_u32_release)

IOSQE_FIXED_FILE = 1
IORING_REGISTER_FILES = 2

# Layout of the int64 ring descriptor handed to ring_read: the fields of lirs.kernels.io's ring
# descriptor (R_FD .. R_ERRNO), then these two (filled by lirs.engines.uring).
R_FIXED = 12   # 1: the data files are registered in file order (read i names file ext_file[i])
R_WAIT = 13    # completions one io_uring_enter waits for while reads are still queued (>= 1)
R_SUBMIT = 14  # reads handed to the kernel per io_uring_enter (>= 1; lirs.constants.URING_SUBMIT_CHUNK)
RING_FIELDS = 15

_BLOCK = 4096
_MAX_LEN = 1 << 30  # a single SQE carries a 32-bit length; longer extents go in pieces


@njit(cache=True, nogil=True)
def init_array(ring, sq_array):
    """Identity map of the submission array at address ``sq_array``: SQE slot i is entry i (set once
    per ring)."""
    for i in range(ring[R_ENTRIES]):
        store_u32(sq_array + 4 * i, i)


# The helpers of ring_read are inlined into it (numba IR): compiled once with it, not each on its
# own, which takes about a second off the first read on a fresh machine.
@njit(cache=True, nogil=True, inline='always')
def _push(ring, tail, fd, sqe_flags, addr, nbytes, offset, user_data):
    """Write one read SQE at ring position ``tail`` (not yet published)."""
    sqe = ring[R_SQES] + 64 * (tail & ring[R_SQ_MASK])
    store_u8(sqe + 0, IORING_OP_READ)  # opcode
    store_u8(sqe + 1, sqe_flags)       # flags
    store_u16(sqe + 2, 0)              # ioprio
    store_u32(sqe + 4, fd)             # fd (an index into the registered files with IOSQE_FIXED_FILE)
    store_i64(sqe + 8, offset)         # off
    store_i64(sqe + 16, addr)          # addr
    store_u32(sqe + 24, nbytes)        # len
    store_u32(sqe + 28, 0)             # rw_flags
    store_i64(sqe + 32, user_data)     # user_data
    store_i64(sqe + 40, 0)             # buf_index, personality, splice_fd_in
    store_i64(sqe + 48, 0)             # addr3
    store_i64(sqe + 56, 0)


@njit(cache=True, nogil=True, inline='always')
def _fill(ring, tail, fds, cfds, ext_file, ext_offset, ext_nbytes, buf_addr, buf_pos, direct, got, stall,
          pending, state):
    """Queue reads until the ring holds ``ring[R_ENTRIES]``: first the extents waiting in ``pending``
    (short reads, retries), then the next new ones, in their order. ``state`` int64 (4,): ``[next
    new extent, pending head, pending tail, in flight]``, updated. Returns the new SQ tail."""
    e = ext_file.shape[0]
    depth = ring[R_ENTRIES]
    fixed = ring[R_FIXED] != 0
    while state[3] < depth and (state[1] < state[2] or state[0] < e):
        if state[1] < state[2]:
            i = pending[state[1] % e]
            state[1] += 1
        else:
            i = state[0]
            state[0] += 1
        n = ext_nbytes[i] - got[i]
        if n <= 0:
            continue
        if n > _MAX_LEN:
            n = _MAX_LEN
        f = ext_file[i]
        fd = fds[f]
        flags = 0
        if fixed:
            fd = f
            flags = IOSQE_FIXED_FILE
        if direct and got[i] % _BLOCK != 0:
            # a short O_DIRECT read stopped mid-block: the rest of the block through the page cache
            fd = cfds[f]
            flags = 0
            if fd < 0:
                stall[i] = 1
                continue
            room = _BLOCK - got[i] % _BLOCK
            if n > room:
                n = room
        _push(ring, tail, fd, flags, buf_addr + buf_pos[i] + got[i], n, ext_offset[i] + got[i], i)
        tail = (tail + 1) & 0xFFFFFFFF
        state[3] += 1
    return tail


@njit(cache=True, nogil=True, inline='always')
def _reap(ring, sizes, ext_file, ext_offset, ext_nbytes, direct, got, err, pending, state):
    """Take every completion the CQ holds: count bytes, queue short reads and EINTR/EAGAIN retries
    on ``pending``, record the first failure in ``err`` (then nothing more is queued)."""
    e = ext_file.shape[0]
    ch = load_u32_acquire(ring[R_CQ_HEAD])
    ct = load_u32_acquire(ring[R_CQ_TAIL])
    while ch != ct:
        cqe = ring[R_CQES] + 16 * (ch & ring[R_CQ_MASK])
        i = load_i64(cqe)
        res = load_i32(cqe + 8)
        ch = (ch + 1) & 0xFFFFFFFF
        state[3] -= 1
        failed = err[0] != 0
        if res < 0:
            if (-res == EINTR or -res == EAGAIN) and not failed:
                pending[state[2] % e] = i
                state[2] += 1
            elif not failed:
                err[0] = -res
                err[1] = i
                err[2] = ext_offset[i] + got[i]
        elif res > 0:  # 0: end of file
            got[i] += res
            if got[i] < ext_nbytes[i] and not failed:
                at_end = direct and got[i] % _BLOCK != 0 and ext_offset[i] + got[i] >= sizes[ext_file[i]]
                if not at_end:  # the usual O_DIRECT end of file is short, off a block boundary, at the size
                    pending[state[2] % e] = i
                    state[2] += 1
        if ch == ct:
            ct = load_u32_acquire(ring[R_CQ_TAIL])
    store_u32_release(ring[R_CQ_HEAD], ch)


@njit(cache=True, nogil=True)
def ring_read(ring, fds, cfds, sizes, ext_file, ext_offset, ext_nbytes, buf_addr, buf_pos, direct, got, err,
              stall, pending):
    """Read a batch of extents through one io_uring, up to ``ring[R_ENTRIES]`` reads in flight.

    ``ring`` int64 (``RING_FIELDS``,): the ring descriptor. ``fds``/``cfds`` int32 (files,): the
    descriptors and the page-cache continuation descriptors (-1: not open), ``sizes`` int64
    (files,). ``pending`` int64 (e,) scratch. ``err`` int64 (3,) output: ``[errno, extent, file
    offset]`` of the first failure (errno 0 = none); a negative errno means ``io_uring_enter``
    itself failed (reads may still be in flight: the ring must not be used again). ``stall`` uint8
    (e,) output: extents that need a continuation descriptor not yet open. Short reads are
    resubmitted for the rest; EINTR/EAGAIN completions are resubmitted; a zero-byte read, or a short
    read that reached the file's size, is the end of the file. Returns the number of
    ``io_uring_enter`` calls made.
    """
    e = ext_file.shape[0]
    st = np.zeros(4, np.int64)  # next new extent, pending head, pending tail, in flight
    enters = 0
    tail = load_u32_acquire(ring[R_SQ_TAIL])
    err[0] = 0
    while True:
        if err[0] == 0:
            old = tail
            tail = _fill(ring, tail, fds, cfds, ext_file, ext_offset, ext_nbytes, buf_addr, buf_pos, direct, got,
                         stall, pending, st)
            if tail != old:
                store_u32_release(ring[R_SQ_TAIL], tail)
        if st[3] == 0:
            break
        # with reads still queued wait for R_WAIT of them; with none left, for all in flight
        more = err[0] == 0 and (st[1] < st[2] or st[0] < e)
        wait = min(ring[R_WAIT], st[3]) if more else st[3]
        # the new reads go R_SUBMIT per call; the last call also waits
        unsent = (tail - load_u32_acquire(ring[R_SQ_HEAD])) & 0xFFFFFFFF
        while True:
            n = min(unsent, ring[R_SUBMIT])
            last = n == unsent
            r = call_syscall6(ring[R_SYSCALL], NR_IO_URING_ENTER, ring[R_FD], n, wait if last else 0,
                              IORING_ENTER_GETEVENTS if last else 0, 0, 0)
            enters += 1
            if r < 0:
                en = call_errno(ring[R_ERRNO])
                if en != EINTR and en != EAGAIN and en != EBUSY:
                    err[0] = -en  # the ring itself is broken: nothing more will complete
                    return enters
            unsent = (tail - load_u32_acquire(ring[R_SQ_HEAD])) & 0xFFFFFFFF
            if last or r <= 0:  # (nothing taken: reap, then try again)
                break
        _reap(ring, sizes, ext_file, ext_offset, ext_nbytes, direct, got, err, pending, st)
    return enters

