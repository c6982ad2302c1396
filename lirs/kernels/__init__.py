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
    return _private(os.path.join(tempfile.gettempdir(), f"lirs-numba-{os.getuid()}"))


def _private(d: str) -> str:
    """``d``, made mode 0700, if it is (or now is) a directory of this user's that no one else can
    write; else a new one beside it. numba unpickles what its cache holds: in a temporary folder
    every user writes, another user could make ``d`` first and put code there that ran as us."""
    import stat

    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return d  # not writable: _writable says so, and nothing is cached there
    st = os.lstat(d)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022:
        return d
    return tempfile.mkdtemp(prefix=os.path.basename(d) + "-", dir=os.path.dirname(d))


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
