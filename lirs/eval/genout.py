"""Where `lirs gen` writes: its output's names checked before a byte is written (the data's
extension, the labels file of dense profiles and the names a labels file may have)."""
from __future__ import annotations

import os

from ..errors import UsageError
from ..external.outputs import read_back_as
from ..inputs import extension_format, labels_candidates, labels_path
from ..litter import clean_dead_temps, out_dir


def check_name(profile: str, ext: str, path: str) -> None:
    """Refuse an output whose extension names another format than ``profile`` writes (``ext``;
    higgs rows in ``h.svm``), a compression or a lirs index (``x.svm.gz``, ``x.lirs``: the data is
    written plain): lirs would read it back as that and fail; no extension, or one of no known
    format, is taken."""
    fmt = extension_format("x" + ext)
    why = read_back_as(path, fmt)
    if why in ("a lirs index", "compressed"):  # written plain: read back as an index or compressed
        raise UsageError(f"-o {path} would be read back as {why} (its extension), but lirs gen writes plain "
                         f"{fmt} data: name it with {ext}")
    if why is not None:
        raise UsageError(f"-o {path} would be read back as {why} (its extension), but {profile} writes {fmt}: "
                         f"name it with {ext}")


def check_outputs(path: str, labels: bool) -> list[str]:
    """The files gen writes for ``-o path`` (absolute): the data, then its labels file where
    ``labels``. UsageError, before any work, when one cannot be written there (:func:`out_dir`), and
    when a name the labels may have is taken: a labels file gen does not write (``X.labels.npy``
    beside ``X.npy``: with ``X.npy.labels.npy`` written too, the data could not be indexed, "two
    labels files beside it"), or a directory where gen writes them (named as the labels file of
    -o, a name the user never gave). Removes what a killed run left under these names."""
    mine = labels_path(path)
    if labels and os.path.isdir(mine):
        raise UsageError(f"{mine} is a directory, and it is where gen writes the labels of -o {path}: "
                         "move it away, or name another -o")
    stray = [c for c in labels_candidates(path) if labels and c != mine and os.path.lexists(c)]
    if stray:
        raise UsageError(f"{stray[0]} lies beside -o {path} and would be read as its labels too (gen writes "
                         f"them to {mine}): move it away, or name another -o")
    outs = [path] + ([mine] if labels else [])
    for p in outs:  # what a killed run left (its temporaries named as every lirs writer names them)
        out_dir(p, "-o" if p == path else f"the labels file of -o {path}:")
        clean_dead_temps(p)
    return outs
