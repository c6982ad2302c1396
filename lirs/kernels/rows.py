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
    for i in range(out.shape[0]):
        out[i] = indptr[lo + i] - a
