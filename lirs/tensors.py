"""lirs batches as torch tensors, and their packing across DataLoader worker processes.

A batch becomes ``(ids, X, y)`` tensors (:func:`to_tensors`); in a DataLoader worker it travels
packed in one buffer (:class:`Packed`): one pickle or shared-memory transfer instead of one per
tensor, rebuilt in the main process as views of that buffer (:func:`unpack`). Used by
:mod:`lirs.torch`; torch is imported only by these two modules.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.utils.data as tud


def to_tensors(b, sparse: str = "csr", label_dtype=torch.float32):
    """(ids int64 (k,), X, y) tensors of a :class:`lirs.loader.Batch` (see the module docstring)."""
    ids = torch.from_numpy(np.ascontiguousarray(b.ids, np.int64))
    y = None if b.y is None else torch.as_tensor(np.asarray(b.y), dtype=label_dtype)
    X = b.X
    if sp.issparse(X):
        X = X.tocsr()
        if sparse == "dense":
            X = torch.from_numpy(np.asarray(X.toarray()))
        else:
            # the decoder's arrays as they are (no copy: int32 indices unless they need int64, as
            # scipy has them); valid by construction, so torch's O(nnz) checks are skipped
            indptr, indices = X.indptr, X.indices
            if indptr.dtype != indices.dtype:
                indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
            t = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                        torch.from_numpy(X.data), size=X.shape, check_invariants=False)
            X = t.to_sparse_coo() if sparse == "coo" else t
    elif isinstance(X, np.ndarray):
        X = torch.from_numpy(X)
    return ids, X, y  # lines data stays a list of bytes


class Convert:
    """The Loader transform of a dataset: a Batch to its torch output (picklable, stateless). In a
    DataLoader worker the output travels packed in one buffer (see :class:`Packed`)."""

    def __init__(self, sparse, output, label_dtype, user):
        self.sparse, self.output, self.label_dtype, self.user = sparse, output, label_dtype, user

    def __call__(self, b):
        ids, X, y = to_tensors(b, self.sparse, self.label_dtype)
        if self.user is not None:
            return self.user({"ids": ids, "X": X, "y": y} if self.output == "dict" else (X, y, ids))
        if isinstance(X, torch.Tensor) and tud.get_worker_info() is not None:
            return Packed(ids, X, y, self.output)
        return {"ids": ids, "X": X, "y": y} if self.output == "dict" else (X, y, ids)


ALIGN = 64                # bytes: every tensor of a packed batch starts aligned
INBAND_BYTES = 4 << 20    # packed batches up to this size travel inside the pickle stream


class Packed:
    """A batch on its way from a DataLoader worker to the main process: every tensor of it (ids, y,
    the arrays of X) copied into one uint8 buffer, so that the batch crosses processes in the
    pickle stream (up to ``INBAND_BYTES``) or as one shared-memory segment, not as one segment
    and one file descriptor per tensor (about a millisecond each). The main process rebuilds the
    output from views of the buffer, without copying (:func:`unpack`)."""

    __slots__ = ("buf", "meta")

    def __init__(self, ids, X, y, output):
        if X.layout == torch.sparse_csr:
            kind, parts = "csr", [X.crow_indices(), X.col_indices(), X.values()]
        elif X.layout == torch.sparse_coo:
            kind, parts = "coo", [X._indices(), X._values()]
        else:
            kind, parts = "dense", [X]
        parts = [ids] + ([] if y is None else [y]) + parts
        spans, o = [], 0
        for t in parts:
            nb = t.numel() * t.element_size()
            spans.append((o, nb, t.dtype, tuple(t.shape)))
            o += -(-nb // ALIGN) * ALIGN
        self.buf = torch.empty(max(o, 1), dtype=torch.uint8)
        for t, (a, nb, _, _) in zip(parts, spans):
            if nb:
                self.buf[a:a + nb].view(t.dtype).view(t.shape).copy_(t)
        self.meta = (kind, tuple(X.shape), y is not None, output, spans)

    def __reduce__(self):
        # a small batch is cheaper in the pickle stream; a large one as one shared-memory segment
        if self.buf.numel() <= INBAND_BYTES:
            return unpack_array, (self.buf.numpy(), self.meta)
        return unpack, (self.buf, self.meta)


def unpack_array(a: np.ndarray, meta):
    return unpack(torch.from_numpy(a), meta)


def unpack(buf, meta):
    """The output of a :class:`Packed` batch, its tensors views of ``buf``."""
    kind, shape, has_y, output, spans = meta
    ts = [buf[a:a + nb].view(dt).view(sh) for a, nb, dt, sh in spans]
    ids, y = ts[0], (ts[1] if has_y else None)
    rest = ts[2:] if has_y else ts[1:]
    if kind == "csr":
        X = torch.sparse_csr_tensor(*rest, size=shape, check_invariants=False)
    elif kind == "coo":
        X = torch.sparse_coo_tensor(*rest, size=shape, is_coalesced=True, check_invariants=False)
    else:
        X = rest[0]
    return {"ids": ids, "X": X, "y": y} if output == "dict" else (X, y, ids)
