"""What the peers share: their names, descriptions, bounds and caveats, whether one can run here
(:func:`skip_reason`), and the :class:`Runner` interface."""
from __future__ import annotations

import importlib.util
import os

import numpy as np

from ... import seeds
from ...constants import BYTES_FORMATS
from ...decode import decode_fixed, decode_libsvm
from ...errors import UsageError
from ..spans import Records

PEERS = ("inmemory", "torch", "memmap", "shuffle_buffer", "bmf", "external")

RUN_BYTES = 4 << 20        # sequential peers read runs of about this many bytes
SKLEARN_BYTES_PER_S = 40e6  # sklearn's parse rate here (README facts): sizes the prefix of a sampled load

DESCRIPTIONS = {
    "inmemory": "whole file in RAM (sklearn load_svmlight_file / np.load), in-memory permutation",
    "torch": "torch DataLoader, map-style dataset, os.pread per record, RandomSampler, 2 workers",
    "memmap": "np.memmap, fancy-indexed gathers of a random permutation",
    "shuffle_buffer": "sequential reads through a shuffle buffer of 10,000 records (tf.data / DALI)",
    "bmf": "BMF: one-off rewrite into random blocks, whole-block reads in random block order",
    "external": "two-pass external shuffle once, then sequential reads of its output",
}

# what a peer gives up for its speed (said when it beats the recommended lirs configuration)
CAVEATS = {
    "inmemory": "but only while the whole data set fits in RAM",
    "torch": "",
    "memmap": "",
    "shuffle_buffer": "but its order is only locally random (a buffer of 10,000 records)",
    "bmf": "but only the block order changes between epochs (batch mates never change)",
    "external": "but every epoch repeats one order unless the shuffle is redone",
}

# what bounds a peer's epoch: ("iops", fio job) or ("bw", fio job); None: no device I/O per epoch
BOUNDS = {
    "inmemory": None,
    "torch": ("iops", "rand4k_qd1"),
    "memmap": ("iops", "rand4k_qd1"),
    "shuffle_buffer": ("bw", "seq1m_qd16"),
    "bmf": ("bw", "seq1m_qd16"),
    "external": ("bw", "seq1m_qd16"),
}
BUFFERED = {"inmemory": True, "torch": True, "memmap": True, "shuffle_buffer": False, "bmf": False,
            "external": False}


def mem_available() -> int:
    """MemAvailable from /proc/meminfo in bytes (0 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def inmemory_bytes(index) -> int:
    """Estimated peak bytes of loading the whole dataset in memory (sklearn: float64 values and
    int64 indices per non-zero, held twice while its arrays grow and convert; dense: the array)."""
    if index.format == "libsvm":
        nnz = int(index.meta.get("nnz") or index.payload_bytes // 8)
        return 2 * 16 * nnz + 16 * index.n
    if index.is_fixed:
        return int(index.n) * int(index.record_size)
    return 3 * int(index.payload_bytes)


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def skip_reason(name: str, index, *, workdir: str | None = None, memory: int | None = None) -> str | None:
    """Why peer ``name`` cannot run on this dataset here (None: it can)."""
    if name not in PEERS:
        raise UsageError(f"unknown peer {name!r}; expected some of {', '.join(PEERS)}")
    if index.nfiles != 1:
        return "peers read one file; this dataset has several"
    fmt = index.format
    if name == "inmemory":
        if fmt == "libsvm" and not _has_module("sklearn"):
            return "scikit-learn is not installed (pip install scikit-learn)"
        if fmt in BYTES_FORMATS:
            return f"no in-memory loader for {fmt} records (bytes)"
        need = inmemory_bytes(index)
        have = mem_available() if memory is None else memory
        if need > have // 2:
            return f"does not fit in memory: needs about {need / 1e9:.1f} GB, {have / 1e9:.1f} GB available"
    if name == "torch" and not _has_module("torch"):
        return "torch is not installed (pip install 'lirs[torch]')"
    if name == "memmap" and not index.is_fixed:
        return "np.memmap gathers need fixed-size (dense) records"
    if name == "external" and not _has_module("lirs.external"):
        return "lirs.external (the two-pass shuffle) is not available in this version"
    if name in ("bmf", "external"):
        d = workdir or os.path.dirname(index.paths[0])
        where = os.path.abspath(d)
        while not os.path.exists(where) and os.path.dirname(where) != where:
            where = os.path.dirname(where)  # prepare() makes the directory: the free space is its parent's
        try:
            st = os.statvfs(where)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = 0
        need = int(2.2 * os.path.getsize(index.paths[0])) if name == "external" else \
            int(1.1 * os.path.getsize(index.paths[0]))
        if free < need:
            return f"needs {need / 1e9:.1f} GB free in {d} for its copy of the data, has {free / 1e9:.1f} GB"
    return None


# ------------------------------------------------------------------------------ shared pieces


def labels(index, ids, y):
    return y if y is not None else index.labels_of(ids)


def run_records(recs: Records, batch_size: int) -> int:
    """Records per sequential run: a whole number of batches, about RUN_BYTES."""
    mean = max(1.0, recs.index.payload_bytes / max(recs.n, 1))
    return batch_size * max(1, int(RUN_BYTES // (batch_size * mean)))


# ------------------------------------------------------------------------------ runners


class Runner:
    """Base of the peers (see the module docstring)."""

    name = ""
    buffered = False

    def __init__(self, index, *, batch_size: int = 1024, seed: int = 0, engine: str = "auto",
                 workdir: str | None = None, budget_s: float = 20.0, buffer_records: int = 10_000,
                 bmf_blocks: int = 40, prefetch: int = 4):
        self.index = index
        self.n = int(index.n)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.engine = engine
        self.workdir = workdir or os.path.dirname(index.paths[0])
        self.budget_s = float(budget_s)
        self.buffer_records = int(buffer_records)
        self.bmf_blocks = int(bmf_blocks)
        self.prefetch = int(prefetch)
        self.reads = None
        self.bytes_read = None
        self.payload = 0
        self.sample_fraction = 1.0  # < 1: prepare() and every epoch cover only this share of the data
        self.what = DESCRIPTIONS.get(self.name, self.name)
        self.pre_what = None
        self.note = None

    def warm(self) -> None:
        """Load code paths (imports, compiled kernels) before anything is timed."""

    def prepare(self) -> None:
        """One-off work before the first epoch (timed by the caller as pre-processing)."""

    def epoch(self, e: int):
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _rng(self, e: int, purpose: int) -> np.random.Generator:
        return seeds.rng(self.seed, e, purpose)


def warm_decode(index):
    """Decode the first record once: loads the decoder's compiled kernels."""
    if index.n == 0:
        return
    recs = Records(index) if not index.is_fixed else None
    f, s, e = index.spans(np.array([0]))
    with open(index.paths[0], "rb") as fh:
        fh.seek(int(s[0]))
        b = np.frombuffer(fh.read(int(e[0] - s[0])), np.uint8)
    if index.is_fixed:
        decode_fixed(b, np.zeros(1, np.int64), index.record_dtype, index.record_shape)
    elif index.format == "libsvm":
        decode_libsvm(b, np.zeros(1, np.int64), np.array([len(b)]), n_features=recs.n_features,
                      zero_based=recs.zero_based)
