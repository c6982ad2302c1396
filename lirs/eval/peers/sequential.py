"""The peers that read the file in order with direct reads: a shuffle buffer, BMF (after its
one-off block rewrite) and the output of a two-pass external shuffle."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from ... import seeds
from ...build import build_index
from ...litter import BENCH_SCRATCH
from ...index import open_index
from ..reference import bmf_block_order, bmf_blocks, buffer_batches, shuffle_buffer_order
from ..spans import Records, SpanReader, take_rows, write_blocks
from .base import Runner, run_records, warm_decode


class _Sequential(Runner):
    """Shared by the peers that read a file in order: runs of whole batches, direct reads."""

    def _open_reader(self, recs, workers=2, depth=None):
        self.recs = recs
        self.rd = SpanReader(recs, self.engine)
        self.workers = workers
        self.depth = max(1, self.prefetch if depth is None else depth)
        self.run = run_records(recs, self.batch_size)
        self.reads = 0
        self.bytes_read = 0

    def _runs(self, ranges):
        """``(a, b, X, y)`` of every run of ``ranges``, read ahead on the reader's threads."""
        return self.rd.runs(ranges, self.workers, self.depth)

    def _ranges(self, n):
        return ((a, min(n, a + self.run)) for a in range(0, n, self.run))

    def _sync_counters(self):
        self.reads, self.bytes_read = self.rd.reads, self.rd.bytes_read

    def _scratch(self, name: str) -> str:
        """``name``'s path in a folder of this run's own in the work directory (the run's PID in its
        name: a later lirs run removes it if this one crashed), removed by :meth:`close`: a copy
        named beside the data (``d.shuffled.svm``) would replace a user's file of that name."""
        os.makedirs(self.workdir, exist_ok=True)
        self.scratch = tempfile.mkdtemp(prefix=f"{BENCH_SCRATCH}{os.getpid()}-", dir=self.workdir)
        return os.path.join(self.scratch, name)

    def warm(self):
        warm_decode(self.index)

    def close(self):
        rd = getattr(self, "rd", None)
        if rd is not None:
            rd.close()
            self.rd = None
        if getattr(self, "scratch", None):
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


class ShuffleBuffer(_Sequential):
    name = "shuffle_buffer"

    def warm(self):
        super().warm()
        shuffle_buffer_order(2, 1)  # its compiled order kernel, not in the first measured batch

    def prepare(self):
        self._open_reader(Records(self.index))

    def epoch(self, e):
        order = shuffle_buffer_order(self.n, self.buffer_records, seed=self.seed, epoch=e)
        src = self._runs(self._ranges(self.n))
        # runs without labels in the file take them from the index (the buffer holds both)
        runs = ((X, y if y is not None else self.index.labels_of(np.arange(a, b))) for a, b, X, y in src)
        try:
            for ids, Xb, ys in buffer_batches(runs, order, self.run, self.batch_size):
                self.payload += self.recs.nbytes(ids)
                self._sync_counters()
                yield ids, Xb, ys
        finally:
            src.close()
            self._sync_counters()


class BMF(_Sequential):
    name = "bmf"

    def prepare(self):
        idx = self.index
        layout = bmf_blocks(self.n, self.bmf_blocks, seed=self.seed)
        self.first = np.concatenate([[0], np.cumsum([len(b) for b in layout])]).astype(np.int64)
        self.path = self._scratch(os.path.basename(idx.paths[0]) + f".bmf{self.bmf_blocks}")
        self.order, recs = write_blocks(idx, layout, self.path, self.engine)  # record of each block-file position
        self.pre_what = (f"rewrite the file as {self.bmf_blocks} random blocks (read, write, fsync)")
        self._open_reader(recs, workers=1, depth=1)  # BMF holds one block while the next one loads

    def epoch(self, e):
        B = self.batch_size
        blocks = [int(b) for b in bmf_block_order(self.bmf_blocks, seed=self.seed, epoch=e)
                  if self.first[b + 1] > self.first[b]]
        rng = self._rng(e, seeds.PEER_BMF_DEAL)
        src = self._runs((int(self.first[b]), int(self.first[b + 1])) for b in blocks)
        try:
            for a, b, X, y in src:
                ids_blk = self.order[a:b]
                if y is None:
                    y = self.index.labels_of(ids_blk)
                perm = rng.permutation(b - a)
                for s in range(0, b - a, B):
                    p = perm[s:s + B]
                    self.payload += self.recs.nbytes(a + p)
                    self._sync_counters()
                    # lines records are a list of bytes: no fancy indexing
                    yield ids_blk[p], take_rows([(X, p, np.arange(len(p)))], len(p), X), None if y is None else y[p]
        finally:
            src.close()
            self._sync_counters()


class External(_Sequential):
    name = "external"

    def prepare(self):
        from ...external import shuffle as external_shuffle  # optional: skip_reason says when it is missing

        path = self.index.paths[0]
        base, dot, suf = os.path.basename(path).rpartition(".")
        self.path = self._scratch(f"{base}.shuffled.{suf}" if dot else f"{suf}.shuffled")
        size = os.path.getsize(path)
        # memory well below the file size, so that the shuffle really takes two passes
        mem = int(min(2 << 30, max(64 << 20, size // 4)))
        res = external_shuffle([path], self.path, memory=mem, tmpdir=self.scratch, seed=self.seed, index=True,
                                progress=False)
        try:
            idx = open_index(self.path)
            how = ""
        except Exception:  # noqa: BLE001 - no sidecar written: index it here (timed too)
            idx = build_index(self.path, progress=False)
            how = ", then lirs index of its output"
        self.out_index = idx
        self.pre_what = f"two-pass external shuffle (memory {mem >> 20} MiB{how})"
        if isinstance(res, dict) and res.get("piles"):
            self.pre_what += f", {res['piles']} piles"
        self._open_reader(Records(idx))

    def epoch(self, e):
        n = int(self.out_index.n)
        B = self.batch_size
        src = self._runs(self._ranges(n))
        try:
            for a, b, X, y in src:
                if y is None:
                    y = self.out_index.labels_of(np.arange(a, b))
                for s in range(a, b, B):
                    t = min(b, s + B)
                    self.payload += self._payload(s, t)
                    self._sync_counters()
                    # IDs are positions in the shuffled file (the output does not keep the originals)
                    yield np.arange(s, t, dtype=np.int64), X[s - a:t - a], None if y is None else y[s - a:t - a]
        finally:
            src.close()
            self._sync_counters()

    def _payload(self, s, t):
        lo, hi = self.recs.span(s, t)
        return hi - lo

    def close(self):
        self.out_index = None
        super().close()  # the output, its sidecar and labels are in the scratch folder
