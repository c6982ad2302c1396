"""Progress of a quality run on stderr: a tqdm bar over epochs on a terminal, else one line per
finished step (a strategy, at one memory budget), so a long run is never silent in a log."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

from ...errors import UsageError

MODES = ("bar", "lines", "off")


def progress_mode(progress) -> str:
    """The mode for a ``progress`` argument: a mode name; ``"auto"`` (a bar on a terminal, lines
    otherwise); None (a bar on a terminal, nothing otherwise); True (a bar); False (nothing)."""
    tty = sys.stderr.isatty()
    if progress is None:
        return "bar" if tty else "off"
    if progress is True or progress is False:
        return "bar" if progress else "off"
    if progress == "auto":
        return "bar" if tty else "lines"
    if progress in MODES:
        return progress
    raise UsageError(f"progress must be None, a bool, 'auto' or one of {MODES}, got {progress!r}")


class Progress:
    """Counts ``epochs`` strategy-epochs over ``steps`` steps. :meth:`start` names a step,
    :meth:`epoch` advances by one epoch, :meth:`done` ends the step (a line in ``lines`` mode)."""

    def __init__(self, epochs: int, steps: int, progress=None, desc: str = "lirs quality"):
        self.mode = progress_mode(progress)
        self.steps = int(steps)
        self.desc = desc
        self.k = 0
        self.label = ""
        self.t0 = time.perf_counter()
        self.bar = tqdm(total=int(epochs), unit="epoch", desc=desc, disable=self.mode != "bar", leave=False)

    def start(self, label: str) -> None:
        self.label = label
        self.t0 = time.perf_counter()
        self.bar.set_postfix_str(label)

    def epoch(self) -> None:
        self.bar.update(1)

    def done(self, note: str = "") -> None:
        self.k += 1
        if self.mode == "lines":
            secs = time.perf_counter() - self.t0
            print(f"{self.desc}: [{self.k}/{self.steps}] {self.label} in {secs:.1f}s" + (f": {note}" if note else ""),
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()
