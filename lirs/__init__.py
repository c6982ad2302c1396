"""lirs: a fresh full permutation of a huge training set every epoch, read straight from NVMe.

Public API (imported lazily so that ``import lirs`` stays cheap)::

    lirs.build_index(paths, format="auto") -> Index        # scan once, write DATA.lirs
    lirs.open_index(path) -> Index
    lirs.plan_epoch(index, batch_size, granularity, ...)   # an epoch's batches and reads, no I/O
    lirs.Loader(source, batch_size, *, granularity="window", ...)  # a fresh permutation per epoch
    lirs.ResumeState                                       # where a consumer is (state_dict's value)
    lirs.shuffle(inputs, out, memory="2G", ...)            # one-off exact external shuffle
    lirs.torch.make_dataloader(path, batch_size, ...)      # PyTorch (optional extra)

The reference shuffle strategies are measured by the evaluation package: ``lirs.eval.STRATEGIES``.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "Index": "lirs.index",
    "build_index": "lirs.build",
    "open_index": "lirs.index",
    "write_index": "lirs.index",
    "sidecar_path": "lirs.sidecar",
    "StaleIndexError": "lirs.errors",
    "DataError": "lirs.errors",
    "IndexFormatError": "lirs.errors",
    "LirsError": "lirs.errors",
    "UsageError": "lirs.errors",
    "TransformError": "lirs.errors",
    "ThreadLimitError": "lirs.errors",
    "plan_epoch": "lirs.plan",
    "EpochPlan": "lirs.plan",
    "Loader": "lirs.loader",
    "Batch": "lirs.loader",
    "decode_libsvm": "lirs.decode",
    "decode_fixed": "lirs.decode",
    "decode_lines": "lirs.decode",
    "load_svmlight": "lirs.decode",
    "ResumeState": "lirs.state",
    "GRANULARITIES": "lirs.policies",
    "POLICIES": "lirs.policies",
    "shuffle": "lirs.external",
}


__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'lirs' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
