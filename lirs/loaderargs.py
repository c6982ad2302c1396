"""The checks of a :class:`~lirs.loader.Loader`'s arguments that need no data, in one function.

The Loader runs it before it opens its source (a data file without an index is scanned whole
there: a bad seed or prefetch must not wait for that), and :class:`lirs.torch.LirsIterableDataset`
runs it as the dataset is made, not at the first pass in a worker. What needs the data (the
``drop_last`` of a dataset smaller than a batch, LIBSVM's ``n_features`` against the index) is
checked once the index is open.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .api import depth_of, maybe_bool, positive_int, strict_bool, whole
from .constants import BLOCK, DEFAULT_GROUP_BYTES, DEFAULT_PREFETCH, DEFAULT_WINDOW
from .decode import check_dtype, check_n_features, check_zero_based
from .engines import check_engine
from .errors import UsageError
from .plan import check_args
from .policies import DEFAULT_GRANULARITY
from .recommendation import AUTO, check_granularity
from .units import parse_size


@dataclass(frozen=True)
class LoaderArgs:
    """A Loader's arguments as checked: ints as ints, ``group_bytes`` in bytes (``"64K"`` parsed; None
    when not given: the default, or under ``granularity="auto"`` the saved one),
    ``dtype`` a numpy dtype, the flags bools; ``window`` as given (a spec: its group count needs the
    data). ``rank``/``world_size`` are None where they are left to torch.distributed."""

    batch_size: int
    granularity: str
    group_bytes: int | None
    window: object
    seed: int
    engine: str
    prefetch: int
    rank: int | None
    world_size: int | None
    drop_last: bool
    dtype: np.dtype
    permutation: str
    depth: int | None
    direct: bool | None
    verify: bool
    threads: int | None
    decode_threads: int | None


def check_loader_args(batch_size, *, granularity=DEFAULT_GRANULARITY, group_bytes=None, window=None,
                      seed=0, engine="auto", prefetch=DEFAULT_PREFETCH, rank=0, world_size=1, drop_last=False,
                      dtype=np.float32, permutation="auto", index="auto", n_features=None, zero_based="auto",
                      depth=None, direct=None, transform=None, verify=False, threads=None, decode_threads=None,
                      shard_later: bool = False) -> LoaderArgs:
    """The :class:`LoaderArgs` of a Loader's keywords (the same names and defaults), or UsageError naming
    the first that cannot work. ``granularity="auto"`` is checked as the granularity it falls back to
    (:data:`~lirs.policies.DEFAULT_GRANULARITY`), whose group_bytes and window it then plans with.
    ``shard_later``: ``rank`` and ``world_size`` may be None (the torch dataset's: from torch.distributed
    as a pass begins), and their range is checked only when both are given. ``index`` is checked by the
    Loader's open, first of all."""
    batch_size, prefetch = positive_int("batch_size", batch_size), positive_int("prefetch", prefetch)
    threads = None if threads is None else positive_int("threads", threads)
    decode_threads = None if decode_threads is None else positive_int("decode_threads", decode_threads)
    gb = None if group_bytes is None else whole(  # "64K": the CLI's
        "group_bytes", parse_size(group_bytes) if isinstance(group_bytes, str) else group_bytes)
    seed = whole("seed", seed)
    if shard_later:  # None: torch.distributed's, known only as a pass begins
        rank = None if rank is None else whole("rank", rank)
        world_size = None if world_size is None else whole("world_size", world_size, 1)
    else:
        rank, world_size = whole("rank", rank), whole("world_size", world_size, 1)
    r = 0 if rank is None else rank
    planned = DEFAULT_GRANULARITY if check_granularity(granularity) == AUTO else granularity
    check_args(batch_size, planned, DEFAULT_GROUP_BYTES if gb is None else gb,
               DEFAULT_WINDOW if window is None else window, r, r + 1 if world_size is None else world_size, seed, 0,
               BLOCK, permutation, drop_last)
    if transform is not None and not callable(transform):
        raise UsageError(f"transform must be callable, got {transform!r}")
    check_zero_based(zero_based)
    if n_features is not None:
        check_n_features(n_features)
    return LoaderArgs(batch_size, granularity, gb, window, seed, check_engine(engine), prefetch, rank, world_size,
                      strict_bool("drop_last", drop_last), check_dtype(dtype), permutation, depth_of(depth),
                      maybe_bool("direct", direct), strict_bool("verify", verify), threads, decode_threads)


def check_windows(windows) -> tuple[int, int] | None:
    """``Loader.epoch``'s ``windows=(w, W)`` as a pair of ints with ``0 <= w < W``, or None; else UsageError
    (a float window would be compared, never matched, and a bare int failed to unpack)."""
    if windows is None:
        return None
    if not isinstance(windows, (tuple, list)) or len(windows) != 2:
        raise UsageError(f"windows must be a pair (w, W) of ints with 0 <= w < W, got {windows!r}")
    w, nw = whole("windows' w", windows[0]), whole("windows' W", windows[1], 1)
    if w >= nw:
        raise UsageError(f"windows=(w, W) needs 0 <= w < W, got ({w}, {nw})")
    return w, nw


def source_format(source, detect: bool = True) -> tuple[str | None, str]:
    """``(format, name)`` of a Loader's ``source``, told without indexing it (a source without an
    index is scanned whole at its open): an Index's own, the one its sidecar's header records, else
    the one `lirs index` would detect on its files (their extension or first bytes; without
    ``detect``, ``"npy"`` by the name alone: a directory's every file is not read for it); None where
    none can be told now (a missing file, a bad sidecar: opening the source says what is wrong)."""
    import os

    from .dirfiles import first_few
    from .errors import LirsError
    from .firstuse import one_source
    from .index import Index
    from .inputs import expand_paths, resolve_format
    from .sidecar import is_sidecar_path, read_header, sidecar_path

    if isinstance(source, Index):
        return source.format, first_few(source.paths)
    one = os.fsdecode(one_source(source))  # an empty list or several files: refused now, not at a pass
    try:  # the sidecar's header names the format: a text format's index (an O(n) check at open) is not opened
        return read_header(one if is_sidecar_path(one) else sidecar_path(one))[0].get("format"), one
    except (OSError, TypeError, LirsError):
        pass
    if not detect:
        return ("npy" if one.endswith(".npy") else None), one
    try:
        return resolve_format(expand_paths(one), "auto")[0], one
    except (OSError, LirsError):
        return None, one


def refuse_libsvm_options_of(source, n_features=None, zero_based="auto") -> None:
    """UsageError where LIBSVM's ``n_features`` or ``zero_based`` is set for a ``source`` of another
    format (:func:`lirs.decode.refuse_libsvm_options`): before the source is opened, which indexes it
    whole where it has no sidecar, only for the setting to be refused after. The Loader's check and
    the torch dataset's."""
    from .decode import refuse_libsvm_options

    if n_features is None and zero_based == "auto":
        return
    fmt, name = source_format(source)
    if fmt is not None:
        refuse_libsvm_options(name, fmt, n_features, zero_based)
