"""What the torch adapter refuses as a dataset is made, before any pass: records torch makes no tensor of."""
from __future__ import annotations

import torch

from .errors import UsageError
from .firstuse import open_source
from .index import Index
from .decode import refuse_libsvm_options
from .loaderargs import source_format
from .tensors import torch_dtype


def check_tensor_records(source, loader_kwargs: dict) -> None:
    """UsageError naming the data file when the records of ``source`` (an Index, or a path a Loader opens with
    ``loader_kwargs["index"]``) have a dtype torch makes no tensor of (bytes, str, datetime64, structured; uint16
    to uint64 before torch 2.3), or where LIBSVM's ``n_features``/``zero_based`` are set for another format: at
    a dataset's construction, not as torch's bare TypeError at the first batch, in a worker. A transform is no
    way around it: it is given the batch's tensors."""
    n_features, zero_based = loader_kwargs.get("n_features"), loader_kwargs.get("zero_based", "auto")
    # the files' format detected (their first bytes read) only where LIBSVM options are set: else the
    # Loader detects it as it indexes, and only a .npy (by its name) has records to check here
    fmt, name = source_format(source, detect=n_features is not None or zero_based != "auto")
    if fmt is not None:  # the Loader's check (an unindexed .jsonl is not indexed for it)
        refuse_libsvm_options(name, fmt, n_features, zero_based)
    if not isinstance(source, Index):
        if fmt != "npy":  # raw fixed records are uint8, text formats' X is decoded to the Loader's dtype
            return
        # opened whole, not judged from the header: a stale one would be rebuilt by the Loader's open
        source = open_source(name, loader_kwargs.get("index", "auto"))
    dt, paths = source.record_dtype, source.paths
    try:
        if dt is None or torch_dtype(dt if dt.isnative else dt.newbyteorder("=")) is not None:
            return
    except (TypeError, ValueError):  # torch.from_numpy's refusal of the dtype
        pass
    name = paths[0] + (f" (and {len(paths) - 1} more files)" if len(paths) > 1 else "")
    old = dt.kind == "u" and dt.itemsize > 1  # torch.from_numpy takes uint16, uint32, uint64 from torch 2.3 on
    raise UsageError(
        f"{name}: records of dtype {dt} have no torch tensor"
        + (f" in torch {torch.__version__} (uint16, uint32 and uint64 from torch 2.3 on): upgrade torch, or save "
           "them as a signed type (a.astype(np.int64))" if old else
           ": the torch adapter takes numeric and bool records (int, uint8, float, complex, bool); save them as such "
           "(each field of a structured array as an array of its own, bytes as a.view(np.uint8), datetime64 as "
           "a.astype(np.int64))") + "; or read them as numpy arrays with lirs.Loader")
