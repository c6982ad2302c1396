"""The board a DataLoader's main process posts each pass's epoch and resume point on, for its
workers (:mod:`lirs.torch`): persistent workers read it as each pass starts (:class:`PassPosition`, which
also keeps where the consumer is in a pass); and the guard that stops an older pass's iterator once a newer
pass took the workers (:func:`while_current`)."""
from __future__ import annotations

import ctypes
import inspect
import logging
import os
import pickle

import numpy as np

from .api import whole
from .errors import UsageError
from .memory import shared_raw
from .state import ResumeState

log = logging.getLogger("lirs.torch")  # set_epoch's notices are the dataset's

BOARD_BYTES = 1 << 16  # the posted pass (an epoch and a resume state: a few hundred bytes, spans aside)
HEAD = 24  # the board's int64 header: generation, payload length, began()


class PassBoard:
    """What the next pass of a dataset delivers, posted by the main process for its DataLoader
    workers: a block of shared memory (``multiprocessing.RawArray``), made with the dataset (before
    any worker starts) and travelling with every copy of it (inherited by a forked worker, passed
    as a descriptor to a spawned one), so a *persistent* worker, whose copy was made once, still
    reads the epoch and resume point chosen for each pass. Layout: int64 generation (bytes 0-8),
    int64 payload length (8-16), int64 the last generation a hand-built DataLoader's workers began
    a pass of (16-24, :meth:`began`), the pickled ``(epoch, resume state dict or None, owner)`` after.

    The main process posts before the pass starts (``DataLoader.__iter__``) and a worker reads as
    its pass starts (after torch's index queue told it to), so no lock is needed. (Not a torch
    shared tensor: allocating one in a process forked after another was shared can deadlock.)
    Pickled outside a process start (a user's ``pickle.dumps(dataset)``) it becomes a private copy."""

    __slots__ = ("raw", "a", "unshared")

    def __init__(self, raw=None):
        self.unshared = None  # why no shared memory could be made (then workers cannot follow)
        if raw is None:
            try:
                raw = shared_raw(ctypes.c_uint8, BOARD_BYTES)
            except UsageError as e:  # a read-only or full /dev/shm: num_workers=0 needs no board
                raw, self.unshared = bytearray(BOARD_BYTES), str(e)
        self.raw = raw
        self.a = np.frombuffer(self.raw, np.uint8)

    def _shared(self) -> None:
        """UsageError in a DataLoader worker when the board is no shared memory (its making failed):
        the main process's posts would never reach this worker."""
        if self.unshared is not None:
            raise UsageError(self.unshared)

    def __reduce__(self):
        from multiprocessing.context import get_spawning_popen

        spawning = get_spawning_popen() is not None
        if spawning and self.unshared is None:  # a worker starting: share the memory itself
            return PassBoard, (self.raw,)
        return _board_copy, (self.a.tobytes(), self.unshared if spawning else None)

    def post(self, epoch: int, resume, owner=None) -> int:
        """Post ``epoch`` and ``resume`` (a ResumeState or None); returns the new generation. ``owner``: the
        token of the :class:`lirs.torch.LirsDataLoader` whose pass takes ``resume`` (None: the next pass)."""
        payload = pickle.dumps((int(epoch), None if resume is None else resume.to_dict(worker=True), owner))
        if len(payload) > BOARD_BYTES - HEAD:
            raise ValueError(f"a resume state of {len(payload)} bytes does not fit the workers' board "
                             f"({BOARD_BYTES - HEAD} bytes)")
        head = self.a[:HEAD].view(np.int64)
        gen = int(head[0]) + 1
        self.a[HEAD:HEAD + len(payload)] = np.frombuffer(payload, np.uint8)
        head[1] = len(payload)
        head[0] = gen  # last: the generation names a complete post
        return gen

    def read(self, owner=None):
        """(generation, epoch, ResumeState or None) of the last post, read in a DataLoader worker of the
        DataLoader ``owner`` (None: one built by hand): a resume point posted for another's pass is not
        its own (that pass took it; the epoch holds for every pass)."""
        self._shared()
        gen, n = (int(v) for v in self.a[:16].view(np.int64))
        epoch, res, made_for = pickle.loads(self.a[HEAD:HEAD + n].tobytes())
        return gen, epoch, None if res is None or made_for not in (None, owner) else ResumeState.from_dict(res)

    def began(self, gen: int, counted: bool) -> None:
        """A DataLoader worker began the pass of post ``gen``; ``counted``: its DataLoader counts
        the batches the consumer receives in the main process (not one built by hand)."""
        if not counted:
            self.a[:HEAD].view(np.int64)[2] = gen

    def check_counted(self, gen: int) -> None:
        """UsageError when workers whose DataLoader does not count (:meth:`began`) deliver the pass
        of post ``gen`` (the main process's last): the main process cannot say where the consumer is."""
        if int(self.a[:HEAD].view(np.int64)[2]) == gen:
            raise UsageError("the workers of a DataLoader built by hand deliver this pass and its main process does "
                             "not count the batches your loop received: take the state of make_dataloader's "
                             "DataLoader (dl.state_dict()), or use torchdata's StatefulDataLoader")


def _board_copy(data: bytes, unshared: str | None = None) -> PassBoard:
    b = PassBoard()
    b.a[:] = np.frombuffer(data, np.uint8)
    b.unshared = unshared or b.unshared
    return b


class PassPosition:
    """Where the passes of a :class:`lirs.torch.LirsIterableDataset` (a base of it) are: what a DataLoader
    worker's copy takes from the dataset's :class:`PassBoard` as its pass starts, and the consumer's
    position in the pass the main process delivers (``_pos``, what ``state()`` reports), and the epoch its next
    pass delivers (:meth:`set_epoch`). The dataset holds ``epoch``, ``_chosen``, ``_resume`` (and ``_resume_for``),
    ``_shown``, ``_board``, ``_seen`` and ``_iter_pid``, and makes :meth:`publish`."""

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration deliver epoch ``epoch`` (call it before every epoch, as with
        ``DistributedSampler``; DataLoader workers get the new value when they start). A loaded
        state of another epoch is dropped; a pass :class:`lirs.torch.LirsDataLoader` is delivering keeps
        its position until it ends (:func:`delivering`)."""
        self.epoch = whole("epoch", epoch)
        self._chosen = True
        if self._resume is not None and self._resume.epoch != self.epoch:
            log.warning("resume state is for epoch %d, epoch %d starts from its first batch",
                        self._resume.epoch, self.epoch)
            self._resume = None
        if self._resume is None and not getattr(self, "in_pass", False):  # delivering(), below
            self._pos = ResumeState(self.epoch)
        self._shown = None
        self.publish()

    def pass_ended(self) -> None:
        """A delivered pass ended: an epoch chosen meanwhile starts at its first batch."""
        if self._chosen and self._resume is None and self._pos.epoch != self.epoch:
            self._pos = ResumeState(self.epoch)

    def begin_at(self, position: ResumeState) -> None:
        """An iteration started (its workers took the resume point): forget it; the consumer is at ``position``."""
        self._resume = self._resume_for = None
        self._pos = position

    def own_resume(self, owner) -> None:
        """The resume point loaded last is for the pass of the :class:`lirs.torch.LirsDataLoader` whose
        token is ``owner`` alone (None: the next pass's): another DataLoader's pass over the dataset (an
        evaluation's) delivers its epoch whole and leaves it; posted for persistent workers."""
        self._resume_for = owner
        self.publish(owner)

    def resume_for(self, taker) -> ResumeState | None:
        """The loaded resume point where the pass of ``taker`` (a LirsDataLoader's token, None: another
        DataLoader's or a plain iteration) may take it (:meth:`own_resume`), else None."""
        owner = getattr(self, "_resume_for", None)
        return self._resume if owner is None or owner == taker else None

    def delivered(self, start: ResumeState, next_batch: int) -> None:
        """The consumer received every batch before ``next_batch`` of the pass begun at ``start``."""
        self._at, self._next = start, next_batch

    @property
    def _pos(self) -> ResumeState:
        # this process's position, folded when read (a state a batch was a few Python calls there)
        return self._at if self._next is None else self._at.at(self._next)

    @_pos.setter
    def _pos(self, pos: ResumeState) -> None:
        self._at, self._next = pos, None

    def handed_out(self, position: ResumeState) -> None:
        """The consumer is at ``position`` (taken when its batch was made; batches made after it
        are still held back, by a device feeder, which calls this on the consumer's thread)."""
        self._shown = position

    def _follow_board(self) -> None:
        """In a DataLoader worker, as a pass starts: a copy's later pass (a persistent worker's) takes
        the epoch and resume point the main process posted since its last pass, or goes on to the next
        epoch when it chose nothing new, as a plain pass in the main process does. A fresh copy's first
        pass keeps what it holds: it was made after the main process posted this pass, and a post made
        since is for a later pass (of this dataset in the main process, or another DataLoader's), which a
        sibling worker that started earlier would not see: the two would deliver pieces of two epochs."""
        self._board._shared()  # a hand-built DataLoader's first pass too: began() must reach the main process
        if self._iter_pid == os.getpid():
            gen, epoch, resume = self._board.read(getattr(self, "_owner", None))
            if gen != self._seen:  # (the board gives a resume point only to the pass it is for)
                self.epoch, self._resume, self._seen, self._resume_for = epoch, resume, gen, None
            else:
                self.epoch, self._resume = self.epoch + 1, None
        self._iter_pid = os.getpid()
        self._board.began(self._seen, counted=getattr(self, "_ordered", False))  # False: a hand-built DataLoader's


def delivering(ds, batches):
    """``batches`` of one pass of the dataset ``ds`` (a :class:`lirs.torch.LirsIterableDataset`),
    ``ds.in_pass`` set meanwhile: a ``set_epoch`` then chooses the next pass and leaves this one's
    position (a state taken before its next batch named the new epoch, and skipped the rest of this
    one); ``ds.pass_ended()`` once the pass ends or is let go."""
    ds.in_pass = True
    try:
        yield from batches
    finally:
        ds.in_pass = False
        ds.pass_ended()


def while_current(items, current, mine: int):
    """``items`` while ``current()`` is ``mine``; UsageError before taking the next one once it is
    not: a persistent DataLoader's workers serve one pass at a time, each new iteration resets them
    for its own pass, and an older iterator must not take the newer pass's batches."""
    items = iter(items)
    while current() == mine:
        try:
            item = next(items)
        except StopIteration:
            return
        yield item
    raise superseded()


class Fed:
    """The batches a device feeder hands out (``feed``: its iterator, a thread pulling them ahead) in one
    pass of a DataLoader whose persistent workers serve one pass at a time: :meth:`stop`, as a newer pass
    takes the workers, ends the feeder and waits for its thread, which would otherwise pull from torch's
    iterator over the workers while the newer pass resets it; the consumer's next batch is a UsageError."""

    def __init__(self, feed):
        self.feed, self.stopped = feed, False

    def __iter__(self):
        return self

    def __next__(self):
        if self.stopped:
            raise superseded()
        return next(self.feed)

    def stop(self) -> None:
        """Stop this pass if it is under way: not the newer one (running now), nor one not begun or ended."""
        if inspect.getgeneratorstate(self.feed) == inspect.GEN_SUSPENDED:
            self.stopped = True
            self.feed.close()  # the feeder's finally: its thread stopped and waited for, then the pass let go

    def close(self) -> None:
        """Let the pass go (the feeder's thread stopped and waited for)."""
        self.feed.close()


def superseded() -> UsageError:
    """The error of an older pass's iterator once a newer pass took the persistent workers."""
    return UsageError("this pass over the DataLoader was superseded by a newer iteration of it (its "
                      "persistent workers serve one pass at a time, the newest): iterate the newer one")
