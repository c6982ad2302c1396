"""The public surface's one rule for calls: the data source and the batch size by position,
everything else by keyword, with an error that names the keyword when an old positional call is met.
"""
from __future__ import annotations

import functools
import inspect
import numbers

import numpy as np

from .constants import MAX_DEPTH
from .errors import UsageError


def keyword_only(old_order: tuple):
    """Decorate ``__init__(self, source, batch_size, *, ...)`` so that a call passing more positional
    arguments (the order ``old_order`` of an earlier release) raises a TypeError naming the
    keyword each extra argument must be passed as. ``inspect.signature`` shows the real signature."""

    def wrap(init):
        sig = inspect.signature(init)
        positional = [p.name for p in sig.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

        @functools.wraps(init)
        def checked(self, *args, **kwargs):
            extra = args[len(positional) - 1:]  # positional counts self
            if extra:
                owner = type(self).__name__
                names = list(old_order[:len(extra)]) + ["?"] * max(0, len(extra) - len(old_order))
                pairs = ", ".join(f"{n}={v!r}" for n, v in zip(names, extra))
                raise TypeError(f"{owner}() takes {len(positional) - 1} positional arguments "
                                f"({', '.join(positional[1:])}); pass the others by keyword: "
                                f"{owner}(..., {pairs})")
            return init(self, *args, **kwargs)
        return checked
    return wrap


def whole(name: str, value, low: int | None = 0) -> int:
    """``value`` as an int (>= ``low`` unless None), or UsageError: a bool, a float (even 256.0) or
    a string such as ``"256"`` is refused rather than silently truncated or converted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError(f"{name} must be an int{'' if low is None else f' >= {low}'}, got {value!r} "
                         f"({type(value).__name__})")
    if low is not None and int(value) < low:
        raise UsageError(f"{name} must be >= {low}, got {value}")
    return int(value)


def known_keywords(fn, given, owner: str) -> None:
    """TypeError naming the first of ``given`` (keyword names) that ``fn`` does not take, as
    Python's own, but at once: for keywords kept to be passed on later (a dataset's Loader)."""
    names = inspect.signature(fn).parameters
    unknown = [k for k in given if k not in names or names[k].kind in (inspect.Parameter.VAR_POSITIONAL,
                                                                        inspect.Parameter.VAR_KEYWORD)]
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}")


def maybe_bool(name: str, value) -> bool | None:
    """``value`` as True, False or None, or UsageError: ``0`` or ``"no"`` would read as true where
    a bool is tested for identity, and as false where it is tested for truth."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    raise UsageError(f"{name} must be True, False or None, got {value!r} ({type(value).__name__})")


def flag(name: str, value) -> bool:
    """``value`` as True or False, or UsageError: a string such as ``"False"`` is true to Python, and was
    taken as True where a flag is tested for truth."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise UsageError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def depth_of(value) -> int | None:
    """An engine's ``depth`` (reads in flight) as an int in [1, MAX_DEPTH], or None (the engine's
    default); else UsageError."""
    if value is None:
        return None
    depth = whole("depth", value, 1)
    if depth > MAX_DEPTH:
        raise UsageError(f"depth must be at most {MAX_DEPTH} reads in flight, got {depth}")
    return depth


def positive_int(name: str, value) -> int:
    """``value`` as an int >= 1, or UsageError (see :func:`whole`)."""
    return whole(name, value, 1)
