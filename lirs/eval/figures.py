"""Saving the evaluation commands' plots (`lirs bench --plot`, `lirs quality --plot`, `lirs demo`'s
demo.png): atomically, so that a save stopped midway (Ctrl-C, a full disk) leaves the previous plot
whole, never a truncated PNG under the final name."""
from __future__ import annotations

import os

from ..litter import clean_dead_temps, temp_name


def save_png(fig, path: str) -> None:
    """Save matplotlib ``fig`` as the PNG ``path`` atomically, under a temporary name a later run
    cleans if this one is killed (:func:`lirs.litter.temp_name`), and close it."""
    import matplotlib.pyplot as plt

    clean_dead_temps(path)
    tmp = temp_name(path)
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
