"""A DataLoader worker's error as an item of its pass (:class:`Failed`), sent after the batches it
delivered and raised as is in the main process once every batch before it was (:func:`lirs.workers.in_order`):
torch's own path wraps an error in its worker's traceback and raises it at once, out of batch order.
"""
from __future__ import annotations

import contextlib
import pickle
import traceback
from typing import NamedTuple

from .errors import add_note


class Failed(NamedTuple):
    """A worker's error, sent as an item after the batches it delivered: ``batch`` is the batch it
    belongs to, which the consumer reaches after every batch before it (:func:`lirs.workers.in_order`)."""

    batch: int
    error: BaseException


def stops_at_error(batches, loader, worker: int):
    """``batches`` (a walk of ``loader``), then on an error a :class:`Failed` at the batch the
    Loader's position names, or at batch 0 (raised as soon as it comes) where the walk failed before
    it began (the position is still the last walk's); an exception that cannot be pickled
    propagates (torch sends its text)."""
    before = loader.position  # a walk that begins sets a new one
    try:
        yield from batches
    except Exception as e:
        pos = loader.position
        yield failed(e, 0 if pos is before else pos.next_batch, worker)


def failed(e: Exception, batch: int, worker: int) -> Failed:
    """``e``, raised in DataLoader worker ``worker``, as the :class:`Failed` item of ``batch``, its traceback in a
    note; ``e`` raised again where it cannot be pickled (torch then sends its text)."""
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:  # noqa: BLE001 - any failure to pickle (or to unpickle): torch's own path
        raise e from None
    if e.__cause__ is not None:  # a pickle carries no __cause__: it travels as an attribute where
        with contextlib.suppress(Exception):  # it comes back whole (a custom __init__ may not)
            pickle.loads(pickle.dumps(e.__cause__))
            e.lirs_cause = e.__cause__
    add_note(e, f"(raised in DataLoader worker {worker}: "
             + "".join(traceback.format_exception(e)).rstrip().replace("\n", "\n    ") + ")")
    return Failed(batch, e)


def failing_early(start, worker: int):
    """``start()``, a :class:`lirs.torch.LirsDataLoader` worker's iterator of its pass; an error before its walk
    began (a spawned worker's index, opened again by path, found stale) is instead its one item, a
    :class:`Failed` at batch 0, which the main process raises as soon as it comes, as is: raised here, it left
    through torch's fetcher, wrapped in the worker's traceback."""
    try:
        return start()
    except Exception as e:
        return iter([failed(e, 0, worker)])


def with_cause(e: BaseException) -> BaseException:
    """A worker's error as raised there: its ``__cause__`` (a TransformError's original) put back."""
    e.__cause__ = e.__dict__.pop("lirs_cause", e.__cause__)
    return e
