"""The public surface's one rule for calls: the data source and the batch size by position,
everything else by keyword, with an error that names the keyword when an old positional call is met.
"""
from __future__ import annotations

import functools
import inspect
import numbers

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


def positive_int(name: str, value) -> int:
    """``value`` as an int >= 1, or UsageError: a bool, a float (even 256.0) or a string such as
    ``"256"`` is refused rather than silently converted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError(f"{name} must be an int >= 1, got {value!r} ({type(value).__name__})")
    if int(value) < 1:
        raise UsageError(f"{name} must be >= 1, got {value}")
    return int(value)
