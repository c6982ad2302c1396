"""Exceptions raised by lirs. Every data error names the file, the byte offset or line, and what was expected."""


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


class ThreadLimitError(LirsError, RuntimeError):
    """No thread could start: the process is at its limit of threads (``ulimit -u``, a cgroup's
    ``pids.max``) or of memory for their stacks. A RuntimeError, as Python's own is."""
