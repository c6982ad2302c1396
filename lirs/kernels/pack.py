"""A batch's arrays laid out back to back in one byte buffer, in one call that lets the GIL go once.

Copied part by part from Python, a batch of five arrays cost a dozen numpy and torch calls, each of
which let the GIL go and took it back: on a thread that feeds a GPU while the training step launches
its kernels on another, every such hand-off waited for the other thread (see :mod:`lirs.tensors`).
The bytes move with LLVM's memcpy (numba's element loop over uint8 ran at a fifteenth of its speed).
"""
from __future__ import annotations

from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic


@intrinsic
def _memcpy(typingctx, dst, src, n):
    """memcpy(dst, src, n): two addresses and a byte count (integers)."""
    if not all(isinstance(t, types.Integer) for t in (dst, src, n)):
        return None

    def codegen(context, builder, sig, args):
        i8p = ir.IntType(8).as_pointer()
        d, s, k = (context.cast(builder, v, t, types.int64) for v, t in zip(args, sig.args))
        cgutils.raw_memcpy(builder, builder.inttoptr(d, i8p), builder.inttoptr(s, i8p), k, 1)
        return context.get_dummy_value()

    return types.void(dst, src, n), codegen


@njit(cache=True, nogil=True, inline="always")
def _put(dst, at, src):
    if src.shape[0]:
        _memcpy(dst.ctypes.data + at, src.ctypes.data, src.shape[0])


@njit(cache=True, nogil=True)
def pack5(dst, offs, a0, a1, a2, a3, a4):
    """Copy the uint8 (contiguous, 1-D) arrays ``a0`` .. ``a4`` into the uint8 array ``dst`` at the
    byte offsets ``offs`` int64 (5,) (an unused part: an empty array). The caller checks that every
    part fits (``offs[i] + len(a_i) <= len(dst)``): nothing here does."""
    _put(dst, offs[0], a0)
    _put(dst, offs[1], a1)
    _put(dst, offs[2], a2)
    _put(dst, offs[3], a3)
    _put(dst, offs[4], a4)
