"""Where a consumer is in an epoch: the one resume state of the Loader, the torch dataset and the
DataLoader wrapper.

A :class:`ResumeState` is a small frozen value: the epoch, the next batch the consumer would get,
the position ranges an elastic resume walks (or None: the whole epoch), the configuration that
planned it, and the DataLoader worker that took it (None: the main process). It travels as a plain
dict (:meth:`ResumeState.to_dict`, :meth:`ResumeState.from_dict`) that carries its format version,
so a checkpoint written by this release is read by later ones.

A state loaded by a Loader of the same rank, world size and batch size resumes at that batch, byte
for byte. A state saved with another world size (or batch size, or by another rank) resumes
*elastically*: the records every old rank had not yet consumed (a prefix of its slice was) are
split over the new ranks, each delivered exactly once (``drop_last=True``: cut again to full batches
of the new ranks, fewer than ``batch_size * world_size`` skipped) — pass the list of every old rank's state,
or one state when the ranks stepped together (``next_batch`` the same on all). Every granularity
supports it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .errors import UsageError

STATE_VERSION = 1
_KEYS = ("version", "epoch", "next_batch", "spans", "config", "worker")
# which dataset a state is for: where the records lie (:func:`lirs.freshness.layout_crc`) and its
# files' names in order (:func:`lirs.freshness.files_crc`); not in states of older releases, 0 where
# unknown (no sidecar; one file); compared where both states know them
_DATASET = {"layout": "its index's offsets differ: other data, or data changed and indexed again",
            "files": "its files are others, or in another order: renamed and indexed again"}


@dataclass(frozen=True)
class ResumeState:
    """``epoch`` int or None (nothing delivered yet); ``next_batch`` int >= 0: the next batch of
    this rank (with a stride, the next of the consumer's own sequence); ``spans``: None or a tuple
    of ``(lo, hi)`` position ranges of the epoch's global order; ``config``: the planning
    configuration (a dict, compared on resume); ``worker``: None or ``(id, num_workers)``."""

    epoch: int | None = None
    next_batch: int = 0
    spans: tuple | None = None
    config: dict = field(default_factory=dict, compare=False, hash=False)
    worker: tuple | None = None

    def __post_init__(self):
        if (self.epoch is not None and int(self.epoch) < 0) or int(self.next_batch) < 0:
            raise UsageError(f"a resume state needs epoch >= 0 and next_batch >= 0, got epoch={self.epoch}, "
                             f"next_batch={self.next_batch}")
        # spans as a hashable tuple of int pairs, whatever array or list they came as
        if self.spans is not None and not _is_pairs(self.spans):
            object.__setattr__(self, "spans", tuple((int(a), int(b)) for a, b in _pairs(self.spans)))
        object.__setattr__(self, "next_batch", int(self.next_batch))
        if self.epoch is not None:
            object.__setattr__(self, "epoch", int(self.epoch))
        if self.worker is not None:
            object.__setattr__(self, "worker", tuple(int(x) for x in self.worker))

    def at(self, next_batch: int, epoch: int | None = None) -> "ResumeState":
        """The same state at another batch (and epoch). Called once per delivered batch, so it
        copies the fields as they are rather than validating them again."""
        new = object.__new__(ResumeState)
        d = new.__dict__  # a frozen dataclass's fields, set as __init__ sets them, in one update
        d.update(self.__dict__)
        d["next_batch"] = int(next_batch)
        if epoch is not None:
            d["epoch"] = int(epoch)
        return new

    def replace(self, **changes) -> "ResumeState":
        """A copy with ``changes`` (field names of this class)."""
        return dataclasses.replace(self, **changes)

    def spans_list(self) -> list | None:
        """The spans as a list of ``[lo, hi]`` (what JSON and :func:`lirs.ranges.as_spans` take)."""
        return None if self.spans is None else [list(s) for s in self.spans]

    def to_dict(self, *, worker: bool = False) -> dict:
        """``{"version", "epoch", "next_batch", "spans", "config"}`` (and ``"worker"`` when
        ``worker`` or it names one): plain Python values, ready for ``torch.save`` or JSON."""
        d = {"version": STATE_VERSION, "epoch": self.epoch, "next_batch": self.next_batch,
             "spans": self.spans_list(), "config": dict(self.config)}
        if worker or self.worker is not None:
            d["worker"] = None if self.worker is None else list(self.worker)
        return d

    @classmethod
    def from_dict(cls, d) -> "ResumeState":
        """The state of a :meth:`to_dict` dict (a ResumeState passes through). A dict without a
        ``version`` is the first format; a newer version than this release reads is refused."""
        if isinstance(d, ResumeState):
            return d
        if not isinstance(d, dict):
            raise UsageError(f"a resume state is a dict from state_dict(), got {type(d).__name__}")
        version = d.get("version", 1)
        if not isinstance(version, int) or version > STATE_VERSION:
            raise UsageError(f"this resume state has format version {version!r}; this lirs reads versions up "
                             f"to {STATE_VERSION} (upgrade lirs)")
        unknown = sorted(set(d) - set(_KEYS))
        if unknown:
            raise UsageError(f"unknown keys in a resume state: {', '.join(unknown)}")
        return cls(epoch=d.get("epoch"), next_batch=d.get("next_batch", 0), spans=d.get("spans"),
                   config=dict(d.get("config") or {}), worker=d.get("worker"))


def _is_pairs(spans) -> bool:
    """True when ``spans`` is already a tuple of ``(int, int)`` tuples."""
    return isinstance(spans, tuple) and all(type(p) is tuple and len(p) == 2 and type(p[0]) is int
                                            and type(p[1]) is int for p in spans)


def _pairs(spans):
    """Rows of a spans array or list as pairs."""
    try:
        import numpy as np

        return np.asarray(spans, dtype=np.int64).reshape(-1, 2).tolist()
    except (TypeError, ValueError):
        raise UsageError(f"spans must be pairs of positions, got {spans!r}") from None


def states_of(state) -> list:
    """A list of :class:`ResumeState` from one state (dict or ResumeState) or a list of them."""
    if isinstance(state, (dict, ResumeState)):
        return [ResumeState.from_dict(state)]
    return [ResumeState.from_dict(s) for s in state]


def check_config(saved: dict, now: dict, elastic: tuple = ()) -> None:
    """Raise UsageError unless a state planned with ``saved`` (its configuration) resumes under
    ``now`` (a Loader's): every key but the ``elastic`` ones (which may change for an elastic
    resume, and must be saved) equal; ``layout``, where both know it, the same dataset layout."""
    for key, why in _DATASET.items():
        if saved.get(key) and now.get(key) and saved[key] != now[key]:
            raise UsageError(f"cannot resume: the state was saved for a dataset whose records lie elsewhere ({why}), "
                             "so its remaining batches are not these; start the epoch from its first batch")
    diff = {k: (saved.get(k), v) for k, v in now.items()
            if k not in elastic and k not in _DATASET and saved.get(k) != v}
    missing = [k for k in elastic if k not in saved]
    if diff or missing:
        what = ", ".join([f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items()]
                         + [f"{k}: not saved" for k in missing])
        # a window is saved as its group count: "auto" resolves anew (fewer groups of tiny records
        # since STEP_RECORD_COST), and the saved count given as window= plans the saved windows
        hint = (f"; window={diff['window'][0]} (the saved group count) plans the saved windows"
                if isinstance(diff.get("window", (None,))[0], int) else "")
        raise UsageError(f"cannot resume: the loader's configuration differs ({what}){hint}")


def ranks_progress(states, world: int) -> list:
    """Batches consumed by every one of ``world`` old ranks (list of int) from their states (a list
    of :class:`ResumeState`); one state stands for ranks that stepped together. UsageError unless
    the states are those of every old rank, once."""
    if len(states) == 1:
        return [states[0].next_batch] * int(world)
    ranks = sorted(int(st.config["rank"]) for st in states)
    if ranks != list(range(int(world))):
        raise UsageError(f"elastic resume needs the state of every one of {world} old ranks, once; "
                         f"got ranks {ranks}")
    return [st.next_batch for st in sorted(states, key=lambda st: int(st.config["rank"]))]
