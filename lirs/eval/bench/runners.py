"""lirs itself with the peers' runner interface (see :mod:`lirs.eval.peers`): through the Loader,
and the plan's reads alone."""
from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...constants import BLOCK, DEFAULT_GROUP_BYTES
from ...engines import aligned_empty, open_engine
from ...loader import Loader
from ...plan import plan_epoch
from .configs import Config

WARM_EPOCH = 1_000_003  # an epoch number never measured: the warm-up batch reads other records


def read_mode(engine) -> str:
    """How ``engine`` reads, for a row's ``what``: ``"O_DIRECT, ENGINE engine"``, or through the page cache (tmpfs,
    or a filesystem that refuses O_DIRECT: :func:`lirs.engines.open_engine` decides)."""
    return f"{'O_DIRECT' if engine.direct else 'through the page cache'}, {engine.name} engine"


class LirsRunner:
    """A lirs Loader with the peers' runner interface (see :mod:`lirs.eval.peers`)."""

    buffered = False
    sample_fraction = 1.0
    pre_what = None
    note = None

    def __init__(self, cfg: Config, index, task: dict):
        self.loader = Loader(index, task["batch_size"], granularity=cfg.granularity,
                             group_bytes=cfg.group_bytes or DEFAULT_GROUP_BYTES, window=cfg.window or 16, seed=task["seed"],
                             engine=task["engine"], prefetch=task["prefetch"])
        self._what = f"lirs Loader, {cfg.granularity} granularity, {{}}prefetch {task['prefetch']}"
        self.what = self._what.format("")  # until warm() opened the engine

    def warm(self):
        gen = self.loader.epoch(WARM_EPOCH)
        next(gen, None)
        gen.close()  # the epoch is left now (its steps not started are cancelled), not when collected
        # the steps it had started still read: counted after the reset they would swell the measured epoch
        self.loader.wait_idle()
        self.loader.stats.reset()
        # the engine is open now: whether its reads bypass the page cache (not on tmpfs) is known
        self.what = self._what.format(read_mode(self.loader.engine) + ", ")

    def prepare(self):
        pass

    def epoch(self, e):
        for b in self.loader.epoch(e):
            yield b.ids, b.X, b.y

    @property
    def reads(self):
        return self.loader.stats.reads

    @property
    def bytes_read(self):
        return self.loader.stats.bytes_read

    @property
    def payload(self):
        return self.loader.stats.payload_bytes

    def close(self):
        self.loader.close()


class LirsReadsRunner:
    """The read pattern of a lirs granularity alone: the epoch's planned extents read with the
    engine, gathered into calls of at least ``engine depth`` extents (or 8 MiB), no decode. What
    the device gives lirs when decoding is not the bound. Two calls are in flight, each on its own
    thread (and ring), as the Loader keeps steps in flight on its pool: one call at a time would
    let the queue drain at the end of every call (its last reads complete at a falling depth), which
    cost ~10% of a 1.4 GB/s device's bandwidth at 9 MB calls."""

    buffered = False
    sample_fraction = 1.0
    pre_what = None
    note = None
    CALL_BYTES = 8 << 20
    IN_FLIGHT = 2

    def __init__(self, cfg: Config, index, task: dict):
        self.cfg, self.index, self.task = cfg, index, task
        self.engine = open_engine(list(index.paths), task["engine"])
        self.reads = self.bytes_read = self.payload = 0
        self._local = threading.local()  # a buffer per reading thread
        self._pool = ThreadPoolExecutor(self.IN_FLIGHT, thread_name_prefix="lirs-reads")
        self.what = f"the {cfg.granularity} plan's extents read ({read_mode(self.engine)}), no decode"

    def _plan(self, e):
        c = self.cfg
        return plan_epoch(self.index, self.task["batch_size"], c.granularity, seed=self.task["seed"], epoch=e,
                          group_bytes=c.group_bytes or DEFAULT_GROUP_BYTES, window=c.window or 16)

    def _read(self, steps):
        """Read ``steps``' extents in one engine call (on the calling thread, into its buffer);
        returns (reads, bytes read, payload bytes)."""
        ef = np.concatenate([np.asarray(s.ext_file, np.int32) for s in steps])
        eo = np.concatenate([np.asarray(s.ext_offset, np.int64) for s in steps])
        en = np.concatenate([np.asarray(s.ext_nbytes, np.int64) for s in steps])
        pos = np.zeros(len(en), np.int64)
        np.cumsum(en[:-1], out=pos[1:])
        total = int(en.sum())
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) < total:
            buf = self._local.buf = aligned_empty(max(total, BLOCK))
        got = self.engine.read(ef, eo, en, buf, pos)
        return len(en), int(got.sum()), sum(s.payload_bytes for s in steps)

    def _count(self, fut):
        r, b, p = fut.result()
        self.reads += r
        self.bytes_read += b
        self.payload += p

    def warm(self):
        for b in self._plan(WARM_EPOCH).batches():
            if b.new_steps:
                self._read(b.new_steps)
            break
        self.reads = self.bytes_read = self.payload = 0

    def prepare(self):
        pass

    def epoch(self, e):
        flight = collections.deque()  # (the call's future or None, the ids of the batches it holds)
        steps, ids, n_ext, nbytes = [], [], 0, 0
        for b in self._plan(e).batches():
            for st in b.new_steps:
                steps.append(st)
                n_ext += st.reads
                nbytes += st.bytes_read
            ids.append(b.ids)
            if n_ext >= self.engine.depth or nbytes >= self.CALL_BYTES:
                flight.append((self._pool.submit(self._read, steps), ids))
                steps, ids, n_ext, nbytes = [], [], 0, 0
                if len(flight) >= self.IN_FLIGHT:
                    yield from self._deliver(flight.popleft())
        flight.append((self._pool.submit(self._read, steps) if steps else None, ids))
        while flight:
            yield from self._deliver(flight.popleft())

    def _deliver(self, call):
        fut, ids = call
        if fut is not None:
            self._count(fut)
        return ((i, None, None) for i in ids)

    def close(self):
        self._pool.shutdown(wait=True)  # no read may still be going into a buffer
        self.engine.close()
