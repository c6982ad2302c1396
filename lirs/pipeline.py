"""The prefetch pipeline: read steps read and decoded on a pool of threads, ahead of the consumer.

The consumer's thread draws each batch's plan (cheap, in order) and hands its read step to the
pool; a pool thread reads the step's extents with the engine (io_uring or pread, no GIL held) into
a pooled aligned buffer and decodes them (numba, no GIL), so reading and decoding of the next
batches use the other cores while the training step computes. One hand-off to the pool and one
back per read step. :class:`EpochRun` keeps ``prefetch + 1`` steps in flight; the consumer waits
on them either blocking (:meth:`EpochRun.wait`) or from an event loop (:func:`lirs.aepoch.await_parts`)
— the rest is shared. With a ``finish`` function (the Loader's transform), a batch is also finished
on the pool: by the task that decoded its step when it is one step, else by a task queued once its
steps are decoded (:meth:`Pipeline.after`: no pool thread waits meanwhile).

Who runs a step: it is queued unclaimed, and the first thread to claim it runs it. The pool has a
thread per usable core and one more, but only ``cores - 1`` of them claim steps whenever there are
some; a consumer that must wait for a batch claims the oldest queued step itself instead of
sleeping (not a window: the cores but one decode it already). With a direct engine, whose reads
wait for the device, or on many cores (:func:`~lirs.policies.pool_alone`), every thread claims
steps and the consumer only waits. The others claim steps only while a core is idle (the consumer
away on a GPU step). So a consumer inside the loader shares the cores with ``cores -
1`` busy threads, not ``cores + 1``: a thread preempted while it holds the GIL holds it longer, and
one more runnable thread than cores preempts them all in turn (:data:`lirs.constants.CORE_IDLE`).
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import time
from concurrent.futures import CancelledError, Future

import numpy as np

from .ahead import PlanAhead, PlanInline
from .assemble import batch_of, detached, rows_of
from .buffers import BufferPool
from .constants import BLOCK, COPY_ALIGN, CORE_IDLE, EXTRA_POLL_S, PLAN_AHEAD_MIN_THREADS, UTIL_WINDOW_S
from .cores import usable_cores
from .engines import open_indexed
from .freshness import check_labels_unmoved, rebuild_command
from .kernels import io as KI
from . import memory
from .errors import ThreadLimitError, TransformError
from .policies import POLICIES, plans_ahead, pool_alone, steps_in_flight, walk_extents, windows_in_flight
from .steps import Flight, Pending
from .taskthreads import TaskThreads
from .warmup import Warmup


class Pipeline:
    """The engine (on the files of ``index``), the pool of threads and the buffers of one process.

    ``decode(step, buf, buf_pos, got) -> (X, y)`` turns a read step's bytes into rows (see
    :class:`lirs.assemble.StepDecoder`; its ``wide(step, nbytes)``, when it has one, says whether decoding
    ``step`` spreads over several cores by itself); ``stats`` is the loader's :class:`~lirs.loader.LoaderStats`.
    ``warm`` (:class:`lirs.warmup.Warmup`): the engine opens, and the first decode runs, once the
    warm-up helper has compiled their kernels (when there is one). ``cores``: the cores the pool
    may keep busy (None: every usable one).
    """

    def __init__(self, index, *, engine: str, direct, depth, decode, workers: int, stats, warm=None,
                 cores: int | None = None):
        self.warm = warm if warm is not None else Warmup()
        self.warm.wait("read")  # the engine on the index's files, each as its open found it (StaleIndexError)
        self.engine = open_indexed(list(index.paths), index.checked, rebuild_command(index),
                                   engine, direct=direct, depth=depth)
        try:
            check_labels_unmoved(index)  # its labels are the sidecar's: their file as the open found it
        except BaseException:
            self.engine.close()
            raise
        self.workers = int(workers)
        # the first ``primary`` threads run steps whenever there are some; the others only while
        # the consumer is away (its training step): a consumer that waits runs steps itself
        # (:meth:`result`), and more threads than cores would preempt it while it holds the GIL
        # the cores this pool may keep busy: the usable ones, or a share of them (a DataLoader
        # worker's: judged against every core, its own use always looked idle to its extras)
        self.cores = max(1, min(usable_cores(), int(cores))) if cores is not None else usable_cores()
        # with a direct engine (reads wait for the device) or on many cores every thread keeps a
        # step in flight and the consumer leaves them to the pool (as it does windows)
        self.consumer_helps = not pool_alone(self.engine.direct, self.cores)
        self.primary = max(1, min(self.workers, self.cores - 1)) if self.consumer_helps else self.workers
        self._started = itertools.count()
        self._role = threading.local()
        self._window = (time.perf_counter(), time.process_time())  # start of the CPU use window
        self.busy_cores = float(self.cores)  # cores busy over the last whole window
        self.executor = TaskThreads(self.workers, "lirs-loader", initializer=self._number_thread)
        # a wide step (a window) is decoded by the cores but one at once: one at a time, so that the next
        # window is read while this one is decoded (two windows decoded together finish together,
        # and the two after them are then read together while the cores idle)
        self.wide = threading.Lock()
        self.buffers = BufferPool()
        self.decode = decode
        self.stats = stats
        self.stats_lock = threading.Lock()
        self.active: set = set()  # futures of steps in flight
        self.unclaimed: collections.OrderedDict = collections.OrderedDict()  # future -> task, not yet started
        self.claims_lock = threading.Lock()
        self.pool_only: set = set()  # futures of unclaimed steps the consumer leaves to the pool
        self.closing = False
        # the consumer is inside the loader (Loader.epoch, between being resumed and yielding): it
        # runs queued steps itself whenever it would wait, so with it and the primary threads on
        # the cores an extra thread would only preempt them, some while holding the GIL (the
        # figures: docs/engines.md). Set without a lock: it only steers the extras.
        self.consumer_in = False
        self.planners, self.planners_lock = set(), threading.Lock()  # PlanAhead of the epochs being iterated

    def plan_ahead(self, make, batches: int = 0):
        """A :class:`~lirs.ahead.PlanAhead` of ``make()`` (``batches`` plans ahead at least), stopped by :meth:`close`
        if still running; with fewer than ``PLAN_AHEAD_MIN_THREADS`` pool threads a :class:`~lirs.ahead.PlanInline`."""
        p = PlanAhead(make, batches=batches, stats=self.stats) if self.workers >= PLAN_AHEAD_MIN_THREADS else PlanInline(make)
        with self.planners_lock:
            self.planners.add(p)
        return p

    def stop_planning(self, p) -> None:
        with self.planners_lock:
            self.planners.discard(p)
        p.close()

    def submit(self, step, then=None, helpable: bool = True):
        """The future of ``step``'s decoded (X, y), or of ``then((X, y))`` computed in the same task.
        The task is run by whichever thread claims it first: a pool thread, or (``helpable``) the
        consumer while it waits (:meth:`result`)."""
        fut = Future()
        fn = (lambda: self._read_decode(step)) if then is None else (lambda: then(self._read_decode(step)))
        with self.claims_lock:
            self.unclaimed[fut] = fn
            if not helpable:
                self.pool_only.add(fut)
                fut.add_done_callback(self.pool_only.discard)
        self.active.add(fut)
        fut.add_done_callback(self._forget)
        try:
            self._hand_off()
        except RuntimeError:
            if self.closing:  # shut down: close() ran meanwhile, from another thread
                raise ValueError("this Loader is closed") from None
            raise  # no thread could start (the process's thread limit, ThreadLimitError names it)
        return fut

    def _hand_off(self) -> None:
        try:
            self.executor.submit(self._claim)
        except ThreadLimitError:
            # the optional kernel-preload thread may hold the last thread the limit allows (it
            # loads for milliseconds): the pool's threads start once it has ended
            self.warm.join_preload()
            self.executor.submit(self._claim)

    def _number_thread(self) -> None:
        self._role.extra = next(self._started) >= self.primary

    def _claim(self, _=None) -> None:
        """Run the oldest unclaimed task, then the next, until none is left (a queued ``_claim``
        wakes a thread; which task it runs is first come, first served); a thread beyond the
        ``primary`` ones runs one task, once a core is idle (:meth:`_core_idle`) while the consumer
        is away (not :attr:`consumer_in`), or at once when the consumer would not run it (a window)."""
        extra = getattr(self._role, "extra", False)
        while True:
            if extra:
                while not (self._pool_only_next() or (not self.consumer_in and self._core_idle())):
                    if not self.unclaimed or self.closing:
                        return
                    time.sleep(EXTRA_POLL_S)
            with self.claims_lock:
                if not self.unclaimed:
                    return
                fut, fn = self.unclaimed.popitem(last=False)
            _run_into(fut, fn)
            if extra:
                return  # back to the queue: the next step waits for the next look at the cores

    def _forget(self, fut: Future) -> None:
        """``fut`` is done: out of the steps in flight and, cancelled unclaimed (an epoch left, a
        closed Loader), out of the queue, whose task holds the step, its plan and the index."""
        self.active.discard(fut)
        with self.claims_lock:
            self.unclaimed.pop(fut, None)

    def _pool_only_next(self) -> bool:
        """Whether the oldest unclaimed task is one the consumer leaves to the pool (a window): no
        consumer runs it meanwhile, so any thread reads it (the next window while this one is
        decoded)."""
        with self.claims_lock:
            return next(iter(self.unclaimed), None) in self.pool_only

    def _core_idle(self) -> bool:
        """Whether this process kept fewer than ``cores - CORE_IDLE`` cores busy over the last
        whole UTIL_WINDOW_S (its CPU time over that wall time): the consumer is away (a GPU step)
        or the steps' threads wait for the device."""
        now = time.perf_counter()
        t, cpu = self._window
        if now - t >= UTIL_WINDOW_S:
            c = time.process_time()
            self.busy_cores = (c - cpu) / (now - t) if now - t < 1.0 else self.cores
            self._window = (now, c)
        return self.busy_cores < self.cores - CORE_IDLE

    def result(self, fut: Future):
        """``fut.result()``, the consumer's thread running queued steps meanwhile (the oldest first):
        a consumer that would wait does a step's work instead of sleeping while the pool's threads
        share the cores with it."""
        while self.consumer_helps and not fut.done():
            with self.claims_lock:
                other = next(iter(self.unclaimed), None)
                if other is None or other in self.pool_only:
                    break
                fn = self.unclaimed.pop(other)
            _run_into(other, fn)
        return fut.result()

    def after(self, futures: list, fn) -> Future:
        """The future of ``fn()``, run on the pool once every one of ``futures`` is done: no thread
        of the pool waits for them meanwhile (a step queued behind such a wait could not start)."""
        out = Future()
        self.active.add(out)
        out.add_done_callback(self.active.discard)
        left, lock = [max(len(futures), 1)], threading.Lock()
        # ``fn`` let go once run or cancelled: the futures keep their callbacks, and ``fn`` (the
        # batch's finish) holds its parts' futures, the step, plan and index: a cycle for the gc
        task = [fn]
        out.add_done_callback(lambda _: task.clear())

        def run():
            if out.set_running_or_notify_cancel():
                try:
                    out.set_result(task[0]())
                except BaseException as e:  # noqa: BLE001 - delivered to the consumer
                    out.set_exception(e)

        def one_done(_):
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            try:
                self.executor.submit(run)
            except RuntimeError:  # the pool was closed meanwhile: nobody waits for this batch
                out.cancel()

        for f in futures:
            f.add_done_callback(one_done)
        if not futures:  # nothing to wait for (a rank's empty last window batch): at once
            one_done(None)
        return out

    def _read_decode(self, step):
        """Read one step's extents into a pooled buffer and decode its records: (X, y). Runs on the
        pool; the buffer goes back to the pool only after the read has returned."""
        step.ready()
        ext_nbytes = np.asarray(step.ext_nbytes, np.int64)
        if len(ext_nbytes) == 0:
            return self.decode(step, None, None, None)
        # extents back to back, each starting on a block boundary (a cache line where reads are
        # copies: a plan for such an engine reads each record's bytes alone)
        buf_pos = np.empty(len(ext_nbytes), np.int64)
        nbytes = int(KI.block_positions(ext_nbytes, BLOCK if self.engine.direct else COPY_ALIGN, buf_pos))
        buf = self.buffers.take(nbytes)
        try:
            t0 = time.perf_counter()
            got = self.engine.read(step.ext_file, step.ext_offset, ext_nbytes, buf, buf_pos)
            self.warm.wait("decode")
            wide = getattr(self.decode, "wide", None)
            with self.wide if wide is not None and wide(step, nbytes) else contextlib.nullcontext():
                t1 = time.perf_counter()
                out = self.decode(step, buf, buf_pos, got)
                t2 = time.perf_counter()
        finally:
            self.buffers.give(buf)
        got_bytes, payload = KI.step_totals(got, np.asarray(step.rec_len, np.int64))
        with self.stats_lock:
            st = self.stats
            st.io_s += t1 - t0
            st.decode_s += t2 - t1
            st.reads += len(ext_nbytes)
            st.bytes_read += int(got_bytes)
            st.payload_bytes += int(payload)
        return out

    def threads(self) -> tuple:
        return self.executor.threads()

    def close(self) -> None:
        """Cancel what has not started, wait for started steps (they write into pooled buffers),
        close the files, unmap the recycled blocks waiting for reuse. Called from a pool thread, it
        cannot wait for itself: it only stops."""
        self.closing = True
        with self.planners_lock:
            planners, self.planners = list(self.planners), set()
        for p in planners:
            p.close()
        if threading.current_thread() in self.threads():
            # no other step runs: each holds a reference to the loader that was just dropped
            self.executor.shutdown(wait=False)
            self.engine.close()
            return
        for f in list(self.active):
            f.cancel()
        self.active.clear()
        self.executor.shutdown(wait=True)
        self.engine.close()
        memory.RECYCLER.trim()  # the blocks kept for the next window: a closed loader reads none


def _run_into(fut: Future, fn) -> None:
    """Run ``fn`` for ``fut`` (skipped when it was cancelled): its result or exception into ``fut``."""
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn())
    except BaseException as e:  # noqa: BLE001 - delivered to whoever waits on the future
        fut.set_exception(e)


class EpochRun:
    """One pass over an epoch's batches from batch ``start``: ``prefetch + 1`` read steps in flight.

    A window step feeds many batches and holds a whole window, so for granularity ``window`` the
    count follows the bytes: two windows (the one being consumed and the next one, read while the
    current one is consumed; three where the reads wait for a device or on many cores:
    :func:`~lirs.policies.windows_in_flight`), or as many small windows as ``prefetch + 1`` batches
    span — memory stays about two or three windows whatever ``prefetch``. The batch that ends a window also needs the next
    one: once it is taken, the ended window's rows in it are copied out and the window let go, so
    the window after is read while the next one is still being read or decoded."""

    def __init__(self, pipeline: Pipeline, plan, epoch: int, start: int, prefetch: int, empty, *,
                 stride: int = 1, finish=None, windows=None, units: bool = False):
        self.pipeline = pipeline
        self.epoch = int(epoch)
        self.prefetch = int(prefetch)
        self.empty = empty
        self.finish = finish  # finish(bp, X, y) -> what the consumer gets, run on the pool
        # planned on a thread of its own, ahead of the consumer (lirs.ahead): a window's batches ahead
        # extents deferred to the pool thread that reads each step, or found ahead (walk_extents)
        # units (no finish): a shared step's batches are one pending item (lirs.steps.SharedStep)
        ext, units = walk_extents(plan.granularity, pipeline.engine.direct, pipeline.cores), units and finish is None
        self.batches = pipeline.plan_ahead(lambda: plan.batches(int(start), extents=ext, stride=int(stride), windows=windows,
                                                                 units=units), plans_ahead(plan, units))
        self.steps: dict = {}                       # read step number -> future of its (X, y)
        self.helpable = POLICIES[plan.granularity].consumer_helps
        self.pending: collections.deque = collections.deque()  # Pending batches, in order
        self.heads = 0  # pending batches whose finish task exists: the first ones, up to prefetch + 1
        # every thread of the pool has a step to work on, whatever ``prefetch``
        self.max_steps = steps_in_flight(plan, max(self.prefetch, pipeline.workers - 1), pipeline.workers,
                                         windows_in_flight(pipeline.engine.direct, pipeline.cores))

    def next(self) -> Pending | None:
        """The oldest submitted batch, after topping up so that ``prefetch`` batches are in flight
        while it is waited for and consumed; None at the end of the epoch."""
        self._top_up()
        if not self.pending:
            return None
        item = self.pending.popleft()
        self.heads = max(0, self.heads - 1)
        if len(item.parts) > 1 and self._detach_ended(item.parts):
            self._top_up()  # a step it ended is no longer held: the next one can be read already
        return item

    def _top_up(self) -> None:
        stats = self.pipeline.stats
        while len(self.steps) < self.max_steps or not self.pending:
            t = time.perf_counter()
            bp = next(self.batches, None)
            stats.plan_s += time.perf_counter() - t
            if bp is None:
                break
            self.pending.append(self._submit(bp))
        if self.finish is not None:
            self._finish_ahead()

    def _finish_ahead(self) -> None:
        """Queue the finish task of the first ``prefetch + 1`` pending batches (transform path): the
        steps of later batches are read and decoded ahead, but a batch is transformed only once
        it is that close to the consumer, so that ``prefetch`` bounds the transformed batches
        held, even when one step feeds many batches."""
        while self.heads < min(len(self.pending), self.prefetch + 1):
            item = self.pending[self.heads]
            if item.finishing and item.head is None:
                item.head = self.pipeline.after([f.future for f in item.parts], self._assembler(item))
            self.heads += 1

    def _detach_ended(self, parts: list) -> bool:
        """In a batch that spans steps, copy out the rows of each step it ends that is already
        decoded, and forget that step (replacing its part in ``parts``): when a window ends in
        this batch, the window after the next one is then read while the next one is still
        being read or decoded, instead of after it (the batch waits for it). Only rows of one
        batch are copied. True when a step was forgotten."""
        freed = False
        for i, f in enumerate(parts[:-1]):
            fut = f.future
            if not (f.last and f.step is not None and fut.done()) or fut.cancelled() or fut.exception() is not None:
                continue
            own = Future()
            own.set_result(detached(fut.result(), f.lo, f.hi))
            parts[i] = Flight(own, 0, f.hi - f.lo, True, None)
            self.steps.pop(f.step.number, None)
            freed = True
        return freed

    def _submit(self, bp) -> Pending:
        if self.finish is not None:
            return self._submit_finished(bp)
        return Pending(bp, self._flights(bp))

    def _flights(self, bp) -> list:
        """The :class:`Flight` of each of a batch's parts (of a :class:`~lirs.steps.SharedStep`: its
        one step); a step other batches share is submitted once."""
        parts = []
        for part in bp.parts:
            step = part.step
            fut = self.steps.get(step.number)
            if fut is None:
                fut = self.steps[step.number] = self.pipeline.submit(step, helpable=self.helpable)
            parts.append(Flight(fut, part.lo, part.hi, part.last, step))
        return parts

    def _submit_finished(self, bp) -> Pending:
        """A batch finished on the pool: the consumer waits on its ``head`` only, then
        :meth:`release` its parts. An exception of ``finish`` becomes a TransformError naming the
        batch and the epoch."""
        empty, finish = self.empty, self._finish
        if len(bp.parts) == 1:
            step, lo, hi, last = bp.parts[0]
            if lo == 0 and last and step.number not in self.steps:  # the batch is its own step
                fut = self.pipeline.submit(step, lambda r: finish(bp, *batch_of([(r, lo, hi)], empty)))
                self.steps[step.number] = fut  # counted in flight until the consumer releases it
                return Pending(bp, [Flight(fut, 0, 0, True, step)], finishing=True, head=fut)
        # the head is queued by _finish_ahead once the batch is near
        return Pending(bp, self._flights(bp), finishing=True)

    def _finish(self, bp, X, y):
        """The user's finish of batch ``bp``; its exception becomes a TransformError naming the batch."""
        try:
            return self.finish(bp, X, y)
        except Exception as e:
            raise TransformError(f"transform raised {type(e).__name__} on batch {bp.index} of epoch "
                                 f"{self.epoch}: {e}") from e

    def _assembler(self, item: Pending):
        """fn() that assembles batch ``item`` from its decoded steps and finishes it."""
        empty, finish = self.empty, self._finish

        def assemble():
            # read from the list: a step that :meth:`_detach_ended` replaced is read from its copy
            got = [(f.future.result(), f.lo, f.hi) for f in item.parts]
            return finish(item.plan, *batch_of(got, empty))
        return assemble

    def release(self, item: Pending) -> None:
        """Forget the steps a batch used last."""
        for f in item.parts:
            if f.last and f.step is not None:
                self.steps.pop(f.step.number, None)

    def wait(self, item: Pending) -> list:
        """Block until a batch's futures (:meth:`Pending.waits`) are done: their results in order."""
        t = time.perf_counter()
        try:
            return [self.pipeline.result(f) for f in item.waits()]
        except CancelledError:  # only close() cancels a step the consumer waits for (another thread's)
            raise ValueError("this Loader is closed") from None
        finally:
            self.pipeline.stats.wait_s += time.perf_counter() - t

    def deliver(self, item: Pending, results: list):
        """What the consumer gets for ``item`` given the results of its waits: the finished batch,
        or (X, y) assembled from its parts' decoded steps. Releases the steps it used last."""
        if item.finishing:
            self.release(item)
            return results[0]
        parts = item.parts
        if len(parts) == 1:  # most batches: rows of one step (no lists built for batch_of)
            f = parts[0]
            if f.last and f.step is not None:
                self.steps.pop(f.step.number, None)
            return rows_of(results[0], f.lo, f.hi)
        self.release(item)
        return batch_of([(r, f.lo, f.hi) for r, f in zip(results, parts)], self.empty)

    def abandon(self) -> None:
        """The consumer left the epoch: cancel what has not started (started steps run to the end)."""
        self.pipeline.stop_planning(self.batches)
        for item in self.pending:
            for f in item.parts:
                f.future.cancel()
            if item.head is not None:
                item.head.cancel()
        self.pending.clear()
        self.heads = 0
        for f in self.steps.values():
            f.cancel()
        self.steps.clear()
