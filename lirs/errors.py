"""Exceptions raised by lirs, and the note lirs adds to one (:func:`add_note`, for Python 3.10 too). Every data error
names the file, the byte offset or line, and what was expected."""


class LirsError(Exception):
    """Base class of all lirs errors."""


class DataError(LirsError, ValueError):
    """The data file is not what its format promises (bad token, empty file, garbage)."""


class StaleIndexError(LirsError):
    """The data file changed after its index was built; re-run ``lirs index``."""


class TransformError(LirsError):
    """A Loader's ``transform`` raised on a batch (the original exception is the ``__cause__``)."""


class IndexFormatError(LirsError):
    """The sidecar file is not a lirs index, is truncated, or has an unsupported version."""


class UsageError(LirsError, ValueError):
    """Arguments that cannot work together (the CLI exits with status 2)."""


def add_note(e: BaseException, note: str) -> None:
    """``note`` added to ``e``'s ``__notes__``: ``e.add_note`` where Python has it (3.11+); on 3.10, which
    lirs supports and which has no ``add_note``, appended to the list by hand, so that the note still
    travels with ``e`` (a pickle keeps it) and code reading ``__notes__`` finds it."""
    add = getattr(e, "add_note", None)
    if callable(add):
        add(note)
        return
    if not isinstance(getattr(e, "__notes__", None), list):
        e.__notes__ = []
    e.__notes__.append(note)


class ThreadLimitError(LirsError, RuntimeError):
    """No thread could start: the process is at its limit of threads (``ulimit -u``, a cgroup's
    ``pids.max``) or of memory for their stacks. A RuntimeError, as Python's own is."""
