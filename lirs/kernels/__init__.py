"""All numba kernels live in this package: arrays and scalars in, preallocated outputs filled,
no globals, no RNG seeding inside. Python wrappers elsewhere validate and raise ``ValueError``."""

import logging
import os
import tempfile


def _writable(path: str) -> bool:
    """Whether numba could keep a cache in ``path`` (its own test: make it, write a file there)."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def cache_fallback(here: str, user: str) -> str | None:
    """Where numba caches the kernels when it would find nowhere (None: where it finds itself).
    numba caches beside the source (``here``/__pycache__), else in the user's cache ``user``, else
    raises "cannot cache function ... no locator available" at import: a read-only install with no
    writable home (a container) could not run lirs at all. Then: a directory of this user's in the
    temporary folder. ``$NUMBA_CACHE_DIR`` set: numba's choice stands."""
    if os.environ.get("NUMBA_CACHE_DIR") or _writable(os.path.join(here, "__pycache__")) or _writable(user):
        return None
    return os.path.join(tempfile.gettempdir(), f"lirs-numba-{os.getuid()}")


def _ensure_cache() -> None:
    from numba.core import config
    from numba.misc.appdirs import AppDirs

    d = cache_fallback(os.path.dirname(os.path.abspath(__file__)), AppDirs("numba", appauthor=False).user_cache_dir)
    if d is not None and _writable(d):
        config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"] = d  # the environment: helpers and workers agree
        logging.getLogger("lirs.kernels").warning(
            "numba can cache lirs's kernels neither beside them nor in the user's cache; they are cached in %s "
            "(set NUMBA_CACHE_DIR to choose)", d)


_ensure_cache()
