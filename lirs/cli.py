"""The ``lirs`` command. Exit codes: 0 ok, 1 data error, 2 usage error."""
from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import pkgutil
import sys

from . import __version__
from .commands import STDOUT, quiet_stdout
from .errors import DataError, IndexFormatError, LirsError, StaleIndexError, UsageError

EXIT_OK, EXIT_DATA, EXIT_USAGE = 0, 1, 2

# Order in `lirs --help`; modules not listed here are appended alphabetically.
_ORDER = ["demo", "gen", "index", "info", "order", "epoch", "bench", "quality", "shuffle"]


def _command_modules():
    from . import commands

    names = [m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    names.sort(key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))
    return [importlib.import_module(f"lirs.commands.{n}") for n in names]


_PATH_OPTIONS = ("out", "json", "plot", "workdir", "tmpdir")  # the dests of options that name a file or folder


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lirs",
        description="Full random shuffling of huge training sets, read straight from NVMe.",
    )
    parser.add_argument("--version", action="version", version=f"lirs {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules():
        p = mod.add_parser(sub)
        # every command's positionals name data (PATH, IN), and these options files it writes: an empty one is refused
        p.set_defaults(_run=mod.run, _positionals=[a.dest for a in p._actions if not a.option_strings],
                       _path_options={a.dest: a.option_strings[0] for a in p._actions
                                      if a.dest in _PATH_OPTIONS and a.option_strings and a.nargs != 0})
    return parser


def main(argv: list[str] | None = None) -> int:
    _usable_streams()
    seen = _Interrupts()
    try:
        with seen:
            return _main(argv, seen)
    except KeyboardInterrupt:  # before the command ran: while its modules (and numba) were imported
        print(f"lirs: {seen.said}", file=sys.stderr)
        return seen.status


def _usable_streams() -> None:
    """Print a file name that is not valid in the locale's encoding as its bytes, as ``ls`` does:
    stdout's strict default failed on it (after ``lirs index`` had written the sidecar), stderr's
    ``backslashreplace`` printed ``\\udcff`` for the byte. Other unencodable text is escaped. A
    stream closed when Python started (None) is the null device."""
    import codecs

    def escape(e):
        try:
            return codecs.lookup_error("surrogateescape")(e)  # the bytes os.fsdecode took in
        except UnicodeError:
            return codecs.lookup_error("backslashreplace")(e)

    codecs.register_error("lirs.names", escape)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:  # closed when Python started (`2>&-`): progress bars and messages go nowhere
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
        elif getattr(stream, "errors", None) in ("strict", "backslashreplace", "surrogateescape") \
                and hasattr(stream, "reconfigure"):  # surrogateescape: an ASCII locale's, which failed on ²
            stream.reconfigure(errors="lirs.names")


class _Interrupts:
    """While the command runs, Ctrl-C is remembered as well as raised: an interrupt a library
    swallows (llvmlite's compile callback does, and numba then fails with a RuntimeError) still ends
    the command as interrupted, not with that error's traceback. SIGTERM (`kill`, a job scheduler's
    stop) is raised as the same KeyboardInterrupt, so that the command removes its temporaries and
    piles as on Ctrl-C, and exits 143. Python's own handlers only: one a caller installed is left."""

    def __init__(self):
        self.hit, self.signum, self.old = False, None, {}

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
                if signal.getsignal(sig) is default:
                    self.old[sig] = signal.signal(sig, self._handler)
        return self

    def _handler(self, signum, frame):
        self.hit, self.signum = True, signum
        raise KeyboardInterrupt

    @property
    def status(self) -> int:
        """The exit status of the interrupted command: 128 + the signal (130 Ctrl-C, 143 SIGTERM)."""
        import signal

        return 128 + int(self.signum or signal.SIGINT)

    @property
    def said(self) -> str:
        import signal

        return "terminated" if self.signum == signal.SIGTERM else "interrupted"

    def __exit__(self, *exc):
        import signal

        for sig, old in self.old.items():
            signal.signal(sig, old)
        return False


def _main(argv, seen: _Interrupts) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits with 2 on usage errors
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="lirs: %(levelname)s: %(message)s")
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        _refuse_empty_paths(args)
        status = int(args._run(args) or 0)
        if seen.hit:  # a library swallowed the Ctrl-C and lirs went on (a fallback took it for a failure)
            print(f"lirs {args.command}: {seen.said}", file=sys.stderr)
            return seen.status
        return status
    except KeyboardInterrupt:
        print(f"lirs {args.command}: {seen.said}", file=sys.stderr)
        return seen.status
    except Exception:
        if seen.hit:  # a library turned the Ctrl-C into its own error
            print(f"lirs {args.command}: {seen.said}", file=sys.stderr)
            return seen.status
        return _failed(args)


def _refuse_empty_paths(args) -> None:
    """UsageError for an empty PATH (``''``: an unset shell variable), before the command opens it:
    it was said as "no such file: [Errno 2] No such file or directory: ''", a missing file's error;
    and for an empty ``-o``, ``--json``, ``--plot``, ``--workdir`` or ``--tmpdir``."""
    for name in getattr(args, "_positionals", ()):  # path, paths, shuffle's inputs...
        value = getattr(args, name, None)
        if value == "" or (isinstance(value, list) and "" in value):
            raise UsageError(f"PATH is empty (''; an unset shell variable?): name the data, as "
                             f"`lirs {args.command} --help` says")
    for name, flag in getattr(args, "_path_options", {}).items():  # -o '': it was taken for the current folder
        if getattr(args, name, None) == "":
            raise UsageError(f"{flag} is empty (''; an unset shell variable?): name the file or folder it writes")


def _failed(args) -> int:
    """The exit code of the exception being handled, said in one line (re-raised when unknown)."""
    try:
        raise
    except UsageError as e:
        print(f"lirs {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (DataError, StaleIndexError, IndexFormatError, LirsError) as e:
        print(f"lirs {args.command}: error: {e}", file=sys.stderr)
        return EXIT_DATA
    except FileNotFoundError as e:
        print(f"lirs {args.command}: error: no such file: {e.filename or e}", file=sys.stderr)
        return EXIT_DATA
    except IsADirectoryError as e:
        print(f"lirs {args.command}: error: is a directory: {e.filename or e}", file=sys.stderr)
        return EXIT_DATA
    except PermissionError as e:
        print(f"lirs {args.command}: error: permission denied: {e.filename or e}", file=sys.stderr)
        return EXIT_DATA
    except BrokenPipeError:  # `lirs info DATA | head`: the reader left; quiet, as Unix tools are
        quiet_stdout()
        return EXIT_OK
    except OSError as e:  # EIO, EROFS, ENOSPC, ...: one line, no traceback
        print(f"lirs {args.command}: error: {describe_os_error(e, args.command)}", file=sys.stderr)
        if e.filename == STDOUT:  # what stdout still buffers would fail again at exit ("Exception ignored", 120)
            quiet_stdout()
        return EXIT_DATA


_HINTS = {
    errno.EROFS: "the file system is read-only; use {flag} to put the {what} elsewhere",
    errno.ENOSPC: "no space left on the device; free some or use {flag} to write elsewhere",
    errno.EDQUOT: "disk quota exceeded; use {flag} to write elsewhere",
    errno.EIO: "the device reported an I/O error",
}
_WHAT = {"index": "index", "shuffle": "output (and --tmpdir the piles)", "demo": "sample and results"}
# the option that says where a command writes (-o unless named here; None: it writes no output)
_FLAG = {"demo": "--out", "bench": "--workdir (and --json, --plot)", "quality": "--json and --plot",
         "epoch": None, "info": None}


def describe_os_error(e: OSError, command: str = "") -> str:
    """One line for an OSError: the file, the byte offset where known, what failed and what to do."""
    where = [str(e.filename)] if e.filename else []
    offset = getattr(e, "lirs_offset", None)  # set by lirs.inputs.read_chunks
    if offset is not None:
        where.append(f"byte {offset}")
    hint = _HINTS.get(e.errno, "")
    flag, what = _FLAG.get(command, "-o"), _WHAT.get(command, "output")
    if command == "shuffle" and "/.lirs-shuffle-" in str(e.filename):  # a pile: --tmpdir moves those
        flag, what = "--tmpdir", "piles"
    if hint and (flag is None or e.filename == STDOUT):  # no option moves it: what happened, without advice
        hint = hint.split(";")[0]
    hint = hint.format(what=what, flag=flag) if hint else ""
    return ": ".join(where + [e.strerror or str(e)]) + (f" ({hint})" if hint else "")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
