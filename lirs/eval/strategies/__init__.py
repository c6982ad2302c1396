"""Shuffle strategies: the record order each system delivers in an epoch, and what it costs.

Every strategy is a plain function with one signature, registered in :data:`STRATEGIES`::

    fn(source, *, seed=0, epoch=0, batch_size=1024, **params) -> StrategyOrder

``source`` is an :class:`~lirs.index.Index` (record sizes come from ``index.bounds()``; no data is
read) or a plain record count ``n`` (records of ``record_bytes`` each, 360 B by default, like
kdd). The result holds ``order``, int64 (n,), a permutation of ``[0, n)`` (the records in
delivery order), and ``cost``, a :class:`Cost`: memory needed, and the I/O pattern of an epoch
(sequential bytes, random reads and their sizes, bytes written) plus one-off costs.

Memory-bounded strategies share one budget, ``memory_bytes`` (default: 5% of the data), from which
their own sizes default: the shuffle buffer, Deep Lake's buffer, BMF's block count, Streaming's
shuffle block (and shards a tenth of it), FFCV's page size (2 x batch pages fill it), the piles of
the two-pass shuffle, terashuf's runs, the chunks of the round-robin merge and the buffers of
CorgiPile and Corgi² (whole blocks of ``group_bytes``). Any of those can be set explicitly.

=================  ==========================================================================
name               what it delivers (uniform = every permutation equally likely, every epoch)
=================  ==========================================================================
sequential         file order, every epoch
bmf                once per run: each record to one of B blocks at random (block files);
                   every epoch: blocks in a random order, each block's records in a fresh
                   random order (LIBLINEAR cdblock visits a block's records in random order)
shuffle_buffer     tf.data ``shuffle(Q)`` / DALI: file order through a buffer of Q records
deeplake           chunks (contiguous spans of ``chunk_bytes``) in random order feed a buffer of
                   ``buffer_bytes``; each output is a uniform slot of the buffer
streaming_*        MosaicML Streaming on shards of ``shard_records`` consecutive records, shuffled
                   once per run and split over ``canonical_nodes``: py1s, py2s, py1b, py1br,
                   py1e, naive (see below)
ffcv_quasi_random  FFCV QUASI_RANDOM: records shuffled inside each page, pages in random order,
                   2 x batch pages active, each output from a uniformly chosen active page
corgipile          CorgiPile: blocks of ``group_bytes`` in random order, ``buffer_blocks`` at a
                   time into a buffer whose records are shuffled and emitted when it is full
corgi2             Corgi²: once per run, the file rewritten by one CorgiPile pass (new blocks mix
                   ``offline_blocks`` old ones); every epoch, CorgiPile on the rewritten file
two_pass           Jane Street's two-pass shuffle: records to random piles, each pile shuffled in
                   RAM, piles concatenated (uniform)
terashuf           runs of ``run_bytes`` shuffled in RAM, merged by picking a run with
                   probability proportional to its remaining records (uniform)
chunk_roundrobin   chunks shuffled, then round k emits the k-th record of every chunk, shuffled
                   (not uniform)
instance, page,    lirs (:func:`lirs.plan.plan_epoch`): a fresh permutation of records, pages,
group, window      groups or windows of groups every epoch
=================  ==========================================================================

Streaming (following its code): shards are shuffled once per run (``seed``) and the shard list is
cut into ``canonical_nodes`` equal sample ranges (a shard may be split); every epoch each node's
shard parts are put in a fresh order. ``py1s`` then shuffles inside each part; ``py2s`` also
shuffled each whole shard once per run before the split; ``py1b`` shuffles fixed blocks of
``block_records`` of each node's stream; ``py1br`` blocks of random sizes in [0.75, 1.25) x block
with a random stagger of the first block per node (here the blocks tile the node exactly;
Streaming's loop overlaps its first two blocks); ``py1e`` shuffles inside each part, then moves
every sample by a uniform shift of at most half a random block (minus the part) and sorts by the
new positions; ``naive`` is a global permutation. With several canonical nodes on one device the
node streams are interleaved round-robin (Streaming's partition); a node that runs out is skipped
(Streaming pads by repeating samples), so the result stays a permutation.

Two-pass, terashuf and chunk_roundrobin are one-off file rewrites in practice. As strategies they
are functions of (seed, epoch): a fresh shuffle every epoch, costing two rewrites of the file per
epoch; ``reshuffle_every_epoch=False`` gives the one-off use (the epoch-0 order every epoch; the
rewrite is counted once, in ``oneoff_*``).

Seeds: :mod:`lirs.seeds`, ``(seed, epoch, purpose)`` for per-epoch draws and ``(seed, 0,
purpose)`` for once-per-run layouts.
"""
from __future__ import annotations

import inspect

from ...policies import GRANULARITIES, POLICIES
from ...errors import UsageError
from .base import DEFAULT_RECORD_BYTES, LARGE_READ_BYTES, Cost, StrategyOrder, synthetic_index  # noqa: F401 - the public API
from .corgi import corgi2, corgipile
from .buffers import bmf, deeplake, ffcv_quasi_random, sequential, shuffle_buffer
from .rewrites import lirs_strategy, chunk_roundrobin, terashuf, two_pass
from .streaming import (streaming_naive, streaming_py1b, streaming_py1br, streaming_py1e, streaming_py1s,
                        streaming_py2s)

STRATEGIES = {
    "sequential": sequential,
    "bmf": bmf,
    "shuffle_buffer": shuffle_buffer,
    "deeplake": deeplake,
    "streaming_py1s": streaming_py1s,
    "streaming_py2s": streaming_py2s,
    "streaming_py1b": streaming_py1b,
    "streaming_py1br": streaming_py1br,
    "streaming_py1e": streaming_py1e,
    "streaming_naive": streaming_naive,
    "ffcv_quasi_random": ffcv_quasi_random,
    "corgipile": corgipile,
    "corgi2": corgi2,
    "two_pass": two_pass,
    "terashuf": terashuf,
    "chunk_roundrobin": chunk_roundrobin,
    **{g: lirs_strategy(g) for g in GRANULARITIES},  # lirs itself, by granularity
}
"""name -> strategy function (one signature: see the module docstring)."""

LIRS_STRATEGIES = GRANULARITIES
EXACT_STRATEGIES = ("streaming_naive", "two_pass", "terashuf") + tuple(g for g in GRANULARITIES
                                                                       if POLICIES[g].unit == "record")
_COMMON = ("seed", "epoch", "batch_size")


def strategy_params(name: str) -> tuple:
    """The keyword parameters strategy ``name`` accepts besides seed, epoch and batch_size."""
    fn = _get(name)
    return tuple(p for p in inspect.signature(fn).parameters if p not in _COMMON and p != "source")


def all_params() -> set:
    """Every parameter name some strategy accepts."""
    return {p for name in STRATEGIES for p in strategy_params(name)}


def _get(name: str):
    fn = STRATEGIES.get(name)
    if fn is None:
        raise UsageError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return fn


def run_strategy(name: str, source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
                 **params) -> StrategyOrder:
    """Call strategy ``name`` with the parameters it accepts out of ``params``; parameters meant
    for other strategies are ignored (one shared dict can drive them all), names no strategy
    knows raise :class:`~lirs.errors.UsageError`."""
    fn = _get(name)
    unknown = set(params) - all_params()
    if unknown:
        raise UsageError(f"unknown strategy parameter(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(sorted(all_params()))}")
    mine = strategy_params(name)
    return fn(source, seed=seed, epoch=epoch, batch_size=batch_size,
              **{k: v for k, v in params.items() if k in mine and v is not None})
