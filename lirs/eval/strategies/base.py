"""What every strategy shares: the result types (:class:`Cost`, :class:`StrategyOrder`), record
sizes of a source (an Index or a count), the memory budget and the unit helpers."""
from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field

import numpy as np

from ...constants import BLOCK, DEFAULT_GROUP_BYTES
from ...errors import UsageError
from ...index import Index
from ...permutation import PERMUTATIONS
from ...units import format_bytes

DEFAULT_RECORD_BYTES = 360        # kdd-like records when only a count is given
DEFAULT_MEMORY_FRACTION = 0.05    # the shared memory budget when none is given
LARGE_READ_BYTES = DEFAULT_GROUP_BYTES  # a read this large runs near an NVMe drive's sequential bandwidth

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Cost:
    """What one epoch of a strategy costs (computed from record sizes, nothing is read).

    memory_bytes: RAM the strategy holds at its peak (buffers, blocks, live shards, plan tables,
    lirs' offset index), with ``memory_what`` saying what. Per epoch: ``seq_read_bytes`` read in
    long sequential streams, ``rand_reads`` random reads of ``rand_read_bytes`` in all (median
    ``median_read_bytes``), ``write_bytes`` written. ``large_rand_read_bytes``: the bytes of the
    random reads of at least :data:`LARGE_READ_BYTES` (sequential streams always count as large).
    ``oneoff_read_bytes``/``oneoff_write_bytes``: once per run (BMF's block files, a one-off
    rewrite). ``payload_bytes``: the records' bytes.
    """

    memory_bytes: int
    memory_what: str
    payload_bytes: int
    seq_read_bytes: int = 0
    rand_reads: int = 0
    rand_read_bytes: int = 0
    median_read_bytes: float | None = None
    write_bytes: int = 0
    large_rand_read_bytes: int = 0
    oneoff_read_bytes: int = 0
    oneoff_write_bytes: int = 0
    notes: str = ""

    @property
    def read_bytes(self) -> int:
        """Bytes read per epoch (sequential + random)."""
        return int(self.seq_read_bytes + self.rand_read_bytes)

    @property
    def read_amplification(self) -> float | None:
        """Bytes read per epoch over the payload."""
        return self.read_bytes / self.payload_bytes if self.payload_bytes else None

    @property
    def large_read_share(self) -> float | None:
        """Share of the bytes read per epoch that come in reads of at least
        :data:`LARGE_READ_BYTES` (sequential streams count as large)."""
        rb = self.read_bytes
        return (self.seq_read_bytes + self.large_rand_read_bytes) / rb if rb else None

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["read_bytes"] = self.read_bytes
        d["read_amplification"] = self.read_amplification
        d["large_read_share"] = self.large_read_share
        return d


@dataclass(eq=False)
class StrategyOrder:
    """One epoch of one strategy: ``order`` int64 (n,) (record IDs in delivery order, a
    permutation of [0, n)), ``cost`` (a :class:`Cost`, computed on first access), ``params``
    (the effective parameters), ``exact`` (every permutation equally likely, fresh every epoch)
    and ``reshuffles`` (the order changes from epoch to epoch)."""

    name: str
    order: np.ndarray
    params: dict
    exact: bool
    reshuffles: bool
    _cost_fn: object = field(default=None, repr=False)
    _cost: Cost | None = field(default=None, repr=False)

    @property
    def cost(self) -> Cost:
        if self._cost is None:
            self._cost = self._cost_fn()
        return self._cost


# --------------------------------------------------------------------------- sources


@dataclass(eq=False)
class Source:
    n: int
    rec_bytes: np.ndarray    # int64 (n,)
    pos: np.ndarray          # int64 (n+1,): byte position of each record in the files laid end to end
    record_bytes: int | None  # the fixed size when built from a count

    @property
    def payload(self) -> int:
        return int(self.pos[-1])

    @property
    def mean(self) -> float:
        return self.payload / self.n if self.n else 0.0


# record sizes per index (dropped with the index) and per (count, size), a few at a time
_INDEX_SOURCES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_COUNT_SOURCES: dict = {}


def as_source(source, record_bytes: int = DEFAULT_RECORD_BYTES) -> Source:
    if isinstance(source, Index):
        hit = _INDEX_SOURCES.get(source)
        if hit is not None:
            return hit
        if source.n == 0:
            raise UsageError("the dataset has no records")
        starts, ends = source.bounds()
        rec = (ends - starts).astype(np.int64)
        src = Source(int(source.n), rec, np.concatenate([[0], np.cumsum(rec)]).astype(np.int64), None)
        _INDEX_SOURCES[source] = src
        return src
    try:
        n = int(source)
    except (TypeError, ValueError):
        raise UsageError(f"a strategy needs an Index or a record count, got {type(source).__name__}") from None
    if n < 1 or n != source:
        raise UsageError(f"the record count must be a positive integer, got {source!r}")
    if int(record_bytes) < 1:
        raise UsageError(f"record_bytes must be >= 1, got {record_bytes}")
    key = (n, int(record_bytes))
    hit = _COUNT_SOURCES.get(key)
    if hit is None:
        rec = np.full(n, int(record_bytes), np.int64)
        hit = Source(n, rec, np.arange(n + 1, dtype=np.int64) * int(record_bytes), int(record_bytes))
        if len(_COUNT_SOURCES) >= 4:
            _COUNT_SOURCES.pop(next(iter(_COUNT_SOURCES)))
        _COUNT_SOURCES[key] = hit
    return hit


def synthetic_index(n: int, record_bytes: int = DEFAULT_RECORD_BYTES, labels=None):
    """An in-memory LIBSVM-format :class:`~lirs.index.Index` of ``n`` records of ``record_bytes``
    each, back to back in one (absent) file, with ``labels`` float64 (n,) if given. Planning and
    the strategies work on it; nothing is ever read."""
    n, rb = int(n), int(record_bytes)
    if n < 1 or rb < 1:
        raise UsageError(f"need n >= 1 and record_bytes >= 1, got {n}, {rb}")
    return Index.from_arrays([f"<{n} records of {rb} B>"], "libsvm", offsets=np.arange(n, dtype=np.int64) * rb,
                             data_ends=[n * rb], labels=labels)


@functools.lru_cache(maxsize=2)
def _synthetic_cached(n: int, record_bytes: int):
    return synthetic_index(n, record_bytes)


def index_of(source, src: Source):
    return source if isinstance(source, Index) else _synthetic_cached(src.n, src.record_bytes)


def budget_bytes(src: Source, memory_bytes) -> int:
    if memory_bytes is None:
        return max(BLOCK, int(src.payload * DEFAULT_MEMORY_FRACTION))
    m = int(memory_bytes)
    if m < 1:
        raise UsageError(f"memory_bytes must be >= 1, got {memory_bytes}")
    return m


def check_common(seed, epoch, batch_size) -> None:
    if int(seed) < 0 or int(epoch) < 0:
        raise UsageError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    if int(batch_size) < 1:
        raise UsageError(f"batch_size must be >= 1, got {batch_size}")


#: the parameters whose values are names (the others are counts, or byte sizes when named *_bytes)
PARAM_CHOICES = {"inner": ("shuffle", "file"), "remainder": ("last", "spread"), "permutation": PERMUTATIONS,
                 "reshuffle_every_epoch": (True, False)}


def check_choice(name: str, value):
    """``value`` of parameter ``name`` (:data:`PARAM_CHOICES`), or UsageError naming both."""
    if value not in PARAM_CHOICES[name] or type(value) is not type(PARAM_CHOICES[name][0]):
        raise UsageError(f"{name} must be one of {', '.join(map(repr, PARAM_CHOICES[name]))}, got {value!r}")
    return value


def positive_param(name: str, value) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a positive integer, got {value!r}") from None
    if v < 1 or v != value:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
    return v


def byte_units(src: Source, unit_bytes: int) -> np.ndarray:
    """int64 (u+1,): first record of each non-empty unit, where a unit holds the records whose
    start lies in one span of ``unit_bytes`` of the files laid end to end; then n."""
    which = src.pos[:-1] // int(unit_bytes)
    first = np.flatnonzero(np.concatenate([[True], which[1:] != which[:-1]]))
    return np.concatenate([first, [src.n]]).astype(np.int64)


def count_units(n: int, size: int) -> np.ndarray:
    """int64 (u+1,): first record of units of ``size`` consecutive records (last one shorter)."""
    return np.concatenate([np.arange(0, n, size, dtype=np.int64), [n]]).astype(np.int64)


def unit_sizes(src: Source, first: np.ndarray) -> np.ndarray:
    return (src.pos[first[1:]] - src.pos[first[:-1]]).astype(np.int64)


def aligned_bytes(src: Source, first: np.ndarray) -> np.ndarray:
    """Bytes of an aligned read covering each unit (4 KiB blocks)."""
    a = src.pos[first[:-1]] // BLOCK * BLOCK
    b = -(-src.pos[first[1:]] // BLOCK) * BLOCK
    return (b - a).astype(np.int64)


def unit_of_record(first: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(np.arange(len(first) - 1, dtype=np.int64), np.diff(first))


def median_or_none(a) -> float | None:
    return float(np.median(a)) if len(a) else None


def large_read_bytes(reads: np.ndarray) -> int:
    """Bytes of the reads (int64 sizes) of at least :data:`LARGE_READ_BYTES`."""
    reads = np.asarray(reads, np.int64)
    return int(reads[reads >= LARGE_READ_BYTES].sum())


def rewrite_cost(src: Source, reshuffle: bool, memory: int, what: str, notes: str) -> Cost:
    """Cost of an external shuffle that rewrites the file twice (input -> temporary files ->
    output) and is then read sequentially by training."""
    P = src.payload
    if reshuffle:
        return Cost(memory, what, P, seq_read_bytes=3 * P, write_bytes=2 * P,
                    notes=notes + "; per epoch: read input, write + read temporary files, write the "
                                  "shuffled file, read it for training")
    return Cost(memory, what, P, seq_read_bytes=P, oneoff_read_bytes=2 * P, oneoff_write_bytes=2 * P,
                notes=notes + "; one-off rewrite (read input, write + read temporary files, write the "
                              "shuffled file), then a sequential read per epoch")


def strategy_result(name, src, order, params, exact, reshuffles, cost_fn) -> StrategyOrder:
    assert len(order) == src.n
    return StrategyOrder(name=name, order=order, params=params, exact=exact, reshuffles=reshuffles,
                         _cost_fn=cost_fn)


def fmt(b) -> str:
    return format_bytes(float(b))
