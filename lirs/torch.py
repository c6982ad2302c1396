"""PyTorch adapter: lirs batches as torch tensors, sharded over ranks and DataLoader workers.

::

    from lirs.torch import make_dataloader

    dl = make_dataloader("train.svm", batch_size=1024, num_workers=2)
    for epoch in range(10):
        dl.dataset.set_epoch(epoch)          # a fresh permutation, the same on every rank
        for b in dl:
            loss = model(b["X"], b["y"]) ...

Every rank and every DataLoader worker reads its own disjoint part of the epoch: worker ``w`` of
``W`` on rank ``r`` of ``R`` is shard ``r * W + w`` of ``R * W`` of the lirs plan, so the union over
ranks and workers is every record exactly once per epoch (with ``drop_last=False``), and no
communication is needed to agree on the order (it is a function of seed, epoch and shard). The
engine and its threads are made lazily, in the process that reads (each worker its own).

torch is an optional dependency: it is imported only by this module.
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import torch
import torch.utils.data as tud

from .errors import UsageError
from .loader import Loader

_OUTPUTS = ("dict", "tuple")
_SPARSE = ("csr", "coo", "dense")


def _dist_rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class LirsIterableDataset(tud.IterableDataset):
    """Batches of one lirs epoch as torch tensors (an ``IterableDataset`` of whole batches: use it
    with ``DataLoader(batch_size=None)``, or :func:`make_dataloader`).

    Parameters
    ----------
    path_or_index : str or Index
        As :class:`lirs.Loader` takes it.
    batch_size : int
        Records per batch.
    sparse : {"csr", "coo", "dense"}
        LIBSVM batches as ``torch.sparse_csr_tensor`` (default), a COO tensor, or a dense tensor
        (k, n_features) (only for small n_features). npy/fixed data is always dense.
    output : {"dict", "tuple"}
        ``{"ids", "X", "y"}`` or ``(X, y, ids)``.
    label_dtype : torch dtype of y (default float32); ids are int64.
    rank, world_size : int or None
        None: from ``torch.distributed`` when it is initialized, else 0 and 1.
    epoch : int
        First epoch (change it with :meth:`set_epoch`).
    **loader_kwargs
        Passed to :class:`lirs.Loader` (granularity, group_bytes, window, seed, engine, prefetch,
        drop_last, dtype, ...).

    Yields per batch: ids int64 (k,), X float (k, d) dense / sparse, y ``label_dtype`` (k,).
    """

    def __init__(self, path_or_index, batch_size: int, *, sparse: str = "csr", output: str = "dict",
                 label_dtype=torch.float32, rank: int | None = None, world_size: int | None = None,
                 epoch: int = 0, **loader_kwargs):
        super().__init__()
        if sparse not in _SPARSE:
            raise UsageError(f"sparse must be one of {_SPARSE}, got {sparse!r}")
        if output not in _OUTPUTS:
            raise UsageError(f"output must be one of {_OUTPUTS}, got {output!r}")
        for k in ("rank", "world_size"):
            if k in loader_kwargs:  # pragma: no cover - guarded by the signature
                raise UsageError(f"pass {k} to LirsIterableDataset itself")
        if isinstance(path_or_index, (str, os.PathLike)):
            path_or_index = os.fspath(path_or_index)
        self.source = path_or_index
        self.batch_size = int(batch_size)
        self.sparse = sparse
        self.output = output
        self.label_dtype = label_dtype
        self._rank = rank
        self._world = world_size
        self.epoch = int(epoch)
        self.loader_kwargs = dict(loader_kwargs)
        self._loader = None
        self._loader_key = None
        # DataLoader workers do not see the process group: read it here, in the rank's process
        self._dist = _dist_rank_world()

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration deliver epoch ``epoch`` (call it before every epoch, as with
        ``DistributedSampler``; DataLoader workers get the new value when they start)."""
        self.epoch = int(epoch)
        self._dist = _dist_rank_world() if tud.get_worker_info() is None else self._dist

    def shard(self) -> tuple[int, int]:
        """(shard, shards) this process reads: ``rank * W + worker`` of ``world_size * W``."""
        rank, world = _dist_rank_world() if tud.get_worker_info() is None else self._dist
        if (rank, world) == (0, 1):
            rank, world = self._dist  # a worker, or the group was set up after this dataset
        if self._rank is not None:
            rank = int(self._rank)
        if self._world is not None:
            world = int(self._world)
        if not 0 <= rank < world:
            raise UsageError(f"rank {rank} outside [0, {world})")
        info = tud.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        return rank * nw + wid, world * nw

    def loader(self):
        """The :class:`lirs.Loader` of this process and shard (made on first use)."""
        shard, shards = self.shard()
        key = (os.getpid(), shard, shards)
        if self._loader is None or self._loader_key != key:
            if self._loader is not None and self._loader_key[0] == os.getpid():
                self._loader.close()
            self._loader = Loader(self.source, self.batch_size, rank=shard, world_size=shards,
                                  **self.loader_kwargs)
            self._loader_key = key
        return self._loader

    def close(self) -> None:
        """Close this process's loader (a later iteration makes a new one)."""
        if self._loader is not None and self._loader_key[0] == os.getpid():
            self._loader.close()
        self._loader = None

    def __getstate__(self):
        # workers (spawned or forked) build their own loader; never ship one across processes
        d = dict(self.__dict__)
        d["_loader"] = None
        d["_loader_key"] = None
        return d

    def __iter__(self):
        loader = self.loader()
        for b in loader.epoch(self.epoch):
            yield self._convert(b)

    def _convert(self, b):
        import scipy.sparse as sp

        ids = torch.from_numpy(np.ascontiguousarray(b.ids, np.int64))
        y = None if b.y is None else torch.as_tensor(np.asarray(b.y), dtype=self.label_dtype)
        X = b.X
        if sp.issparse(X):
            X = X.tocsr()
            if self.sparse == "dense":
                X = torch.from_numpy(np.asarray(X.toarray()))
            else:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
                    # the decoder's CSR is valid by construction: skip torch's O(nnz) checks
                    t = torch.sparse_csr_tensor(torch.from_numpy(X.indptr.astype(np.int64)),
                                                torch.from_numpy(X.indices.astype(np.int64)),
                                                torch.from_numpy(X.data), size=X.shape,
                                                check_invariants=False)
                X = t.to_sparse_coo() if self.sparse == "coo" else t
        elif isinstance(X, np.ndarray):
            X = torch.from_numpy(X)
        # lines data stays a list of bytes
        if self.output == "dict":
            return {"ids": ids, "X": X, "y": y}
        return X, y, ids


def make_dataloader(path_or_index, batch_size: int, *, num_workers: int = 0, pin_memory: bool = False,
                    prefetch_factor: int | None = None, multiprocessing_context=None, **dataset_kwargs):
    """A ready ``torch.utils.data.DataLoader(batch_size=None)`` over a :class:`LirsIterableDataset`.

    ``dataset_kwargs`` go to :class:`LirsIterableDataset` (and from it to :class:`lirs.Loader`).
    Workers are not persistent, so that each epoch's workers see the epoch given to
    ``dl.dataset.set_epoch``.
    """
    ds = LirsIterableDataset(path_or_index, batch_size, **dataset_kwargs)
    kw = {}
    if num_workers > 0:
        if prefetch_factor is not None:
            kw["prefetch_factor"] = int(prefetch_factor)
        if multiprocessing_context is not None:
            kw["multiprocessing_context"] = multiprocessing_context
    return tud.DataLoader(ds, batch_size=None, num_workers=int(num_workers), pin_memory=pin_memory,
                          persistent_workers=False, **kw)
