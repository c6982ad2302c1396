"""Small helpers shared by the CLI and the library: sizes like ``500MB`` or ``2G``, progress bars."""
from __future__ import annotations

import re
import sys

from .errors import UsageError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 10**3, "KIB": 1 << 10, "M": 1 << 20, "MB": 10**6,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 10**9, "GIB": 1 << 30, "T": 1 << 40, "TB": 10**12, "TIB": 1 << 40}


def parse_size(text) -> int:
    """``"64K"`` → 65536, ``"500MB"`` → 500_000_000, ``"2G"`` → 2**31; plain ints pass through."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise UsageError(f"cannot read size {text!r}; expected a number with an optional unit like 64K, 500MB, 2G")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_bytes(n) -> str:
    """``1234567`` → ``"1.2 MB"`` (decimal units); None → ``"-"``."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def progress_bar(total: int, desc: str, show: bool | None = None, *, unit: str = "B", min_total: int = 0):
    """A tqdm bar on stderr (``leave=False``): shown where ``show``, or with ``show`` None where
    stderr is a terminal and ``total`` is ``min_total`` or more; never where stderr is closed (None:
    a daemon's, ``pythonw``'s), where tqdm raised at its first write."""
    from tqdm import tqdm

    err = sys.stderr
    off = err is None or show is False or (show is None and (total < min_total or not err.isatty()))
    return tqdm(total=total, unit=unit, unit_scale=True, desc=desc, disable=off, leave=False, file=err)
