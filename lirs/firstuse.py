"""Index on first use: a Loader opened on a data file with no sidecar builds it, as `lirs index`
would (the same scan, validation and atomic write), with a progress bar on stderr for long scans."""
from __future__ import annotations

import contextlib
import errno
import logging
import os

from .errors import UsageError
from .shellwords import shell_word
from .sidecar import is_sidecar_path, sidecar_path

log = logging.getLogger("lirs.index")
INDEX_MODES = ("auto", "never")  # a Loader's ``index=``: index a file that has no sidecar, or refuse it


def needs_index(path: str) -> bool:
    """True when ``path`` is a data file or directory that exists and has no sidecar beside it."""
    if is_sidecar_path(path) or not os.path.exists(path):
        return False
    return not os.path.exists(sidecar_path(path))


def index_on_first_use(path: str) -> None:
    """Build the sidecar of ``path`` beside it. A directory that cannot take it (read-only, no
    permission) raises UsageError naming the sidecar and how to put it elsewhere."""
    from .build import build_index  # the scanner is needed only the first time

    log.info("%s has no index: building %s", path, sidecar_path(path))
    with sidecar_beside(path):
        build_index(path)


@contextlib.contextmanager
def sidecar_beside(path: str, source: str = "as the source"):
    """Around building the sidecar of ``path`` beside it (``DATA.lirs``): where its directory cannot take it
    (read-only, no permission), UsageError naming the sidecar and ``lirs index PATH -o DIR/NAME.lirs``, whose
    ``.lirs`` is then passed ``source`` — options that move a command's other outputs do not move the index."""
    try:
        yield
    except OSError as e:
        # the sidecar's error (named after it), not the data's: an unreadable data file is said as it is
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and is_sidecar_path(str(e.filename or ".lirs")):
            raise UsageError(f"{path}: its index {sidecar_path(path)} cannot be written ({os.strerror(e.errno)}); "
                             f"build it where you can write: `lirs index {shell_word(path)} -o DIR/NAME.lirs`, then pass "
                             f"that .lirs file {source}") from e
        raise


def open_or_index(path: str, *, index: str = "auto"):
    """:func:`lirs.index.open_index` of ``path``, indexing it first when it has no sidecar and
    ``index`` is ``"auto"`` (``"never"``: the missing index is an error, as before)."""
    from .index import open_index

    path = str(path)
    if index == "auto" and needs_index(path):
        index_on_first_use(path)
    return open_index(path)


def open_source(src, index: str = "auto"):
    """The :class:`~lirs.index.Index` of a Loader's ``source`` (a data file, a directory, a .lirs
    sidecar, a one-item list of one of them, or an opened Index): :func:`open_or_index` with
    ``index`` (one of :data:`INDEX_MODES`). UsageError for what is not a source."""
    from .index import Index

    if isinstance(index, Index):
        raise TypeError("Loader takes its index as the source: Loader(index, batch_size, ...)")
    if index not in INDEX_MODES:
        raise UsageError(f"index must be one of {', '.join(map(repr, INDEX_MODES))}, got {index!r}")
    if isinstance(src, Index):
        return src
    return open_or_index(os.fsdecode(one_source(src)), index=index)


def one_source(src):
    """The one path (str, bytes or PathLike) a Loader's ``source`` names: itself, or a one-item list's
    item. UsageError for an empty list, a list of several (they form one dataset through their
    sidecar) or None: checked where a source is taken (a torch dataset's as it is made)."""
    if isinstance(src, (list, tuple)):
        if not src:
            raise UsageError("no data files given: source is an empty list; expected a data file, a directory, "
                             "a .lirs sidecar or an Index")
        if len(src) != 1:
            raise UsageError("several data files form one dataset: pass their .lirs sidecar "
                             "(lirs index FILES -o NAME.lirs) or an opened Index")
        src = src[0]
    if src is None:
        raise UsageError("Loader needs a source: a data file, a directory, a .lirs sidecar or an Index")
    return src
