"""Saving the evaluation commands' plots (`lirs bench --plot`, `lirs quality --plot`, `lirs demo`'s
demo.png): atomically, so that a save stopped midway (Ctrl-C, a full disk) leaves the previous plot
whole, never a truncated PNG under the final name."""
from __future__ import annotations

import importlib.util
import logging
import os
import sys

from ..litter import clean_dead_temps, named, temp_name

log = logging.getLogger("lirs.eval")

# why the last pyplot() drew nothing (None: it found matplotlib), kept for the command that says so: trying
# the import again would repeat what a failing import prints (NumPy's page on modules built for NumPy 1.x)
_why_not: str | None = None


def pyplot(warn: bool = True):
    """``matplotlib.pyplot`` on the Agg backend (no display needed), or None where matplotlib is not
    installed or cannot be imported (said as a warning unless not ``warn``; the reason, with the command
    that fixes it, is :func:`no_plot_reason`): a plot is an extra, the results are written without it."""
    global _why_not
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        _why_not = _import_failure(e)
        if warn:
            log.warning("no plot: %s", _why_not)
        return None
    _why_not = None
    return plt


def no_plot_reason() -> str | None:
    """Why the last :func:`pyplot` returned None, with the command that fixes it; None where it found
    matplotlib (a plot not drawn for another reason, which its plotter said)."""
    return _why_not


def _import_failure(e: ImportError) -> str:
    """The import error ``e`` of matplotlib as a reason and a fix: a matplotlib that is installed but
    fails to import (one built for NumPy 1.x under NumPy 2) is not told to install itself, which pip
    answers with "already satisfied"."""
    pip = f"{sys.executable} -m pip install"
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a broken parent or a module without a spec: not importable as is
        found = True
    if not found:
        return f"matplotlib is not installed ({pip} matplotlib)"
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return (f"matplotlib is installed but cannot be imported: {first} "
            f"(reinstall or upgrade it: {pip} --upgrade matplotlib)")


def save_png(fig, path: str) -> None:
    """Save matplotlib ``fig`` as the PNG ``path`` atomically, under a temporary name a later run
    cleans if this one is killed (:func:`lirs.litter.temp_name`), and close it. An OSError (a full
    disk) names ``path``."""
    import matplotlib.pyplot as plt

    clean_dead_temps(path)
    tmp = temp_name(path)
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, path)
    except OSError as e:  # a write()'s ENOSPC names no file, a failed rename the temporary
        named(e, path, tmp)
        raise
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
