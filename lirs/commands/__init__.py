"""`lirs` subcommands. Each module defines ``add_parser(subparsers)`` and ``run(args) -> int``.

The CLI discovers every module in this package, so a new subcommand is a new file here.
"""
import contextlib
import json
import os
import sys

STDOUT = "standard output"  # the file name an OSError gets when writing a command's output there failed


def quiet_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's flush at exit must not fail on the closed pipe."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


def say(*args, **kwargs) -> None:
    """``print`` for what a command says before its work: a reader that has gone (``lirs index D |
    head -c0``) does not stop the work (the index was not written, and the exit status said 0); what
    follows goes to the null device. A failed write (``> /dev/full``) names standard output
    (:func:`printing_results`), not a disk to free."""
    try:
        with printing_results():
            print(*args, **kwargs)
    except BrokenPipeError:
        quiet_stdout()


def print_json(obj, **kw) -> None:
    """``obj`` as indented JSON on standard output, then a line end (``kw``: :func:`json.dump`'s)."""
    json.dump(obj, sys.stdout, indent=2, **kw)
    print()


@contextlib.contextmanager
def printing_results():
    """Around what a command prints on stdout: a write that fails (``> /dev/full``: ENOSPC; EIO)
    raises an OSError naming standard output, as a failed ``-o`` write names its file; stdout's
    own error names nothing ("No space left on device" alone). Flushed here, so that the failure
    comes while the command can say it, not at the interpreter's exit. A gone reader
    (BrokenPipeError) and an error that names its own file pass as they are."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror or str(e), STDOUT) from e


def check_results_and_plot(json_path, plot_path) -> None:
    """UsageError when ``--json`` and ``--plot`` name one file (the same path, or two names of it): the plot is
    written after the results and would replace them, both announced as written."""
    from ..errors import UsageError
    from ..inputs import absolute

    if not (json_path and plot_path):
        return
    if absolute(json_path) == absolute(plot_path) or (
            os.path.exists(json_path) and os.path.exists(plot_path) and os.path.samefile(json_path, plot_path)):
        raise UsageError(f"--json and --plot both name {plot_path}: the plot would replace the results")


def check_unit_options(granularity: str, group_bytes, window) -> None:
    """UsageError when ``--group-bytes`` or ``--window`` is given (not None) to a granularity that does
    not use it: accepted silently, the run measured or planned something other than what was asked.
    ``auto`` takes both (it may choose a granularity that uses them, or a saved one's settings)."""
    from ..errors import UsageError
    from ..policies import POLICIES
    from ..recommendation import AUTO

    if granularity == AUTO or granularity not in POLICIES:  # an unknown one: argparse's choices refuse it
        return
    for flag, value, uses in (("--group-bytes", group_bytes, "uses_group_bytes"), ("--window", window, "uses_window")):
        if value is not None and not getattr(POLICIES[granularity], uses):
            takers = [g for g, pol in POLICIES.items() if getattr(pol, uses)]
            raise UsageError(f"{flag} {value} applies to --granularity {' or '.join(takers)} only; "
                             f"--granularity {granularity} does not use it: leave {flag} out")


def option(flag: str, value, check=lambda v: v):
    """``check(value)``, with its UsageError said with ``flag`` first (``--size: must be positive,
    got '0'``): the library's checks name its parameter (``size``), which the user of the command
    line never typed. Call it before any work."""
    from ..errors import UsageError

    try:
        return check(value)
    except UsageError as e:
        said = str(e)
        param = flag.lstrip("-").replace("-", "_") + " "
        if said.startswith(param):  # a library check's "batch_size must be ...": the flag says it once
            said = said[len(param):]
        raise UsageError(f"{flag}: {said}") from None


def at_least_one(value: int) -> int:
    """``value`` when it is 1 or more (a count: workers, epochs, records per batch), else UsageError."""
    from ..errors import UsageError

    if value < 1:
        raise UsageError(f"must be >= 1, got {value}")
    return value


def at_least_zero(value: int) -> int:
    """``value`` when it is 0 or more (a seed, an epoch number), else UsageError."""
    from ..errors import UsageError

    if value < 0:
        raise UsageError(f"must be >= 0, got {value}")
    return value


def planner_group_size(text) -> int:
    """The bytes of ``text`` when they make a group the planner takes (a positive multiple of
    4096 up to 2**62: :func:`lirs.plan.check_args`), else UsageError."""
    from ..constants import BLOCK, GROUP_BYTES_MAX
    from ..errors import UsageError

    n = positive_size(text)
    if n % BLOCK or n > GROUP_BYTES_MAX:
        raise UsageError(f"must be a multiple of {BLOCK} bytes up to 2**62 (like 64K or 1M), got {text!r}")
    return n


def positive_size(text) -> int:
    """The bytes of ``text`` (``"64K"``, ``"2G"``: :func:`lirs.units.parse_size`) when more than
    none, else UsageError."""
    from ..errors import UsageError
    from ..units import parse_size

    n = parse_size(text)
    if n < 1:
        raise UsageError(f"must be positive, got {text!r}")
    return n


def window_spec(text):
    """``text`` when it is a window the Loader takes (a group count, a size, a share or auto:
    :func:`lirs.windows.window_groups`), else UsageError."""
    from ..windows import window_groups

    window_groups(text, 4096, 1)  # the spec alone: any group size and data size take it alike
    return text
