"""Where lirs keeps its per-user files: the checks it recorded for sidecars it could not rewrite
(:mod:`lirs.verified`) and ``lirs demo``'s sample, index and results. One rule for both, so that
``LIRS_CACHE_DIR`` moves all of them."""
from __future__ import annotations

import os
import tempfile


def cache_dir() -> str:
    """The directory of lirs's per-user cache (``str``, absolute): ``$LIRS_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/lirs``, else ``~/.cache/lirs``; with no home directory (``~`` left as it was),
    ``$TMPDIR/lirs-UID``: one per user, since a shared temporary directory holds other users' files,
    and never a relative path, which would land in the current directory."""
    d = os.environ.get("LIRS_CACHE_DIR")
    if d:
        return os.path.abspath(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return os.path.join(tempfile.gettempdir(), f"lirs-{os.getuid()}")
    return os.path.join(base, "lirs")
