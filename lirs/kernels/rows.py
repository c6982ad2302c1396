"""Row slicing of a decoded step on the consumer's thread, in numba holding the GIL.

Cutting a batch's rows out of a step's CSR matrix rebases its row pointers (``indptr[lo:hi + 1] -
indptr[lo]``, cast to the indices' dtype). In numpy that is a subtraction and a cast over k + 1
values, and numpy lets the GIL go for every array operation of more than 500 values: once or
twice a batch (a cast where the pointers are int64), the consumer's thread gave the GIL away and then waited to get it back behind the threads
that wanted it (on 16 cores, up to one Python stretch of each). These kernels are compiled without
``nogil``: the call keeps the GIL through its few microseconds, so the consumer never hands it over.
"""
from __future__ import annotations

from numba import njit


@njit(cache=True)
def rebase_into(indptr, lo, out):
    """``out[i] = indptr[lo + i] - indptr[lo]`` for i < len(out): a batch's row pointers (int32 or
    int64 (k + 1,), ``out``'s dtype) from a step's ``indptr`` (int32/int64 (n + 1,)), starting at 0."""
    a = indptr[lo]
    src = indptr[lo:lo + out.shape[0]]  # a view indexed from 0: the loop vectorises (2x faster, ad hoc)
    for i in range(out.shape[0]):
        out[i] = src[i] - a


@njit(cache=True)
def rebase_each(indptr, cuts, out):
    """The row pointers of rows ``cuts[i]:cuts[i + 1]`` of a step (``indptr`` int32/int64 (n + 1,)),
    each starting at 0, for every i, one after another in ``out`` (``out``'s dtype, (cuts[-1] -
    cuts[0] + len(cuts) - 1,)): those of piece i are ``out[cuts[i] - cuts[0] + i:][:cuts[i + 1] -
    cuts[i] + 1]``. ``cuts`` int64 (m + 1,), ascending. One call cuts every batch of a shared step."""
    o = 0
    for i in range(cuts.shape[0] - 1):
        lo = cuts[i]
        k = cuts[i + 1] - lo + 1
        a = indptr[lo]
        # views indexed from 0, not running indices into the whole arrays: the inner loop
        # vectorises (a 12-batch group step's pointers: 1.4 us instead of 11, ad hoc)
        src = indptr[lo:lo + k]
        dst = out[o:o + k]
        for r in range(k):
            dst[r] = src[r] - a
        o += k
