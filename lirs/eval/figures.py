"""Saving the evaluation commands' plots (`lirs bench --plot`, `lirs quality --plot`, `lirs demo`'s
demo.png): atomically, so that a save stopped midway (Ctrl-C, a full disk) leaves the previous plot
whole, never a truncated PNG under the final name."""
from __future__ import annotations

import logging
import os

from ..litter import clean_dead_temps, named, temp_name

log = logging.getLogger("lirs.eval")


def pyplot(warn: bool = True):
    """``matplotlib.pyplot`` on the Agg backend (no display needed), or None where matplotlib is not
    installed (said as a warning unless not ``warn``): a plot is an extra, the results are written
    without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if warn:
            log.warning("no plot: matplotlib is not installed (pip install matplotlib)")
        return None
    return plt


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
