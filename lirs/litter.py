"""What a crashed lirs run left behind, found and removed by the next run.

Every temporary name lirs writes carries the PID of the process writing it and lirs's own mark:
``.NAME.lirs-tmp-PID-TID`` (and the writing thread's id) beside a sidecar or an output file,
``.lirs-shuffle-PID-XXXX/`` pile directories. A later run in the same directory removes those
whose process is gone (and says so); those of a live process are left alone, and so is every name
without the mark (a user's ``.notes.tmp-2023`` is not lirs's). A NAME too long for the mark within
the filesystem's 255 bytes is cut and a CRC of it added. A directory shared between machines
(NFS) or containers (PID namespaces) holds PIDs this process cannot see: an index's temporary file
is locked (``flock``) by its writer while it is written, and a locked one is left whatever its
PID says (:func:`hold`). Other temporaries of a process another host runs are removed when no
process of this host has that PID.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import threading
import zlib
from contextlib import contextmanager

from .constants import TEMP_MARK
from .errors import UsageError
from .inputs import absolute

log = logging.getLogger("lirs.litter")


def out_dir(path, what: str, directory_ok: bool = False, inputs: dict | None = None, writable: bool = True) -> str:
    """The absolute directory ``path`` (an output about to be written to a temporary name and
    renamed over ``path``) goes in. UsageError naming ``what`` (the option, e.g. "-o") before any
    work when that directory does not exist or is not writable (``writable``: an index's caller
    names the way out itself), or when ``path`` exists and is not
    a regular file: a directory (unless ``directory_ok``), or a device, FIFO or socket, which the rename would replace
    (``-o /dev/null`` run as root would leave /dev/null a regular file), or one of ``inputs``
    ({path: what it is}, :func:`lirs.sidecar.belonging`: ``--json DATA`` replaced the data)."""
    p = os.fspath(path)
    for q, kind in (inputs or {}).items():
        if absolute(q) == absolute(p) or (os.path.exists(q) and os.path.exists(p) and os.path.samefile(q, p)):
            raise UsageError(f"{what} {p} is {kind}: write it elsewhere")
    d = os.path.dirname(absolute(p))
    if not os.path.isdir(d):
        raise UsageError(f"{what} {p}: its directory {d} does not exist")
    for q, kind in (inputs or {}).items():
        if os.path.isdir(q) and os.path.samefile(q, d):
            raise UsageError(f"{what} {p} lies in {q}, {kind}, whose files are the dataset (a file written "
                             "there joins it): write it elsewhere")
    if writable and not os.access(d, os.W_OK | os.X_OK):  # else known only when written, after the work
        raise UsageError(f"{what} {p}: its directory {d} is not writable")
    check_name_length(p, what, d)
    if os.path.isdir(p):
        if not directory_ok:
            raise UsageError(f"{what} {p} is a directory; name a file")
    elif os.path.exists(p) and not os.path.isfile(p):
        raise UsageError(f"{what} {p} exists and is not a regular file (a device, FIFO or socket): the output is "
                         "written to a new file renamed over it, which would replace it; name a regular file")
    return d


def check_name_length(path: str, what: str, d: str) -> None:
    """UsageError when ``path``'s last name is longer than directory ``d``'s filesystem allows:
    else the rename that publishes it fails, after the whole scan or shuffle."""
    n = len(os.fsencode(os.path.basename(path)))
    try:
        most = os.pathconf(d, "PC_NAME_MAX")
    except (OSError, ValueError):
        most = NAME_MAX
    if n > most:
        # an index made on first use (a Loader, lirs epoch) has no -o: lirs index names one
        way = ("index the data under a shorter name (lirs index DATA -o DIR/NAME.lirs) and open that .lirs"
               if what == "the index" else "give a shorter name (-o NAME)")
        raise UsageError(f"{what} {path}: its name is {n} bytes, longer than its filesystem allows ({most}); {way}")


def hold(fd: int) -> int | None:
    """A descriptor holding an exclusive ``flock`` on the file open as ``fd`` (a temporary being
    written): the crash cleaner of another host or PID namespace, to whom the writer's PID looks
    dead, finds it locked and leaves it. The lock lasts until this descriptor is closed
    (:func:`release`), across the close of ``fd``, so it covers the rename. None where the
    filesystem has no locks; BlockingIOError where another writer holds it."""
    d = os.dup(fd)
    try:
        fcntl.flock(d, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return d
    except OSError as e:
        os.close(d)
        if isinstance(e, BlockingIOError):
            raise
        return None


def open_locked(final: str):
    """``(file, name, lock)``: a new temporary of ``final`` (:func:`temp_name`) open for writing,
    empty, and held (:func:`hold`). A process of another PID namespace can have our PID and thread
    id: its live temporary of that name is locked, and is neither truncated nor written into here
    (another name is taken)."""
    import random

    for attempt in range(16):
        name = temp_name(final) if attempt == 0 else \
            temp_name(final, tid=random.randrange(1 << 30))  # noqa: S311 - a name, not a secret
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            lock = hold(fd)
        except BlockingIOError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        return os.fdopen(fd, "wb"), name, lock
    raise FileExistsError(errno.EEXIST, "every temporary name is held by a live writer", temp_name(final))


def named(e: OSError, final: str, tmp: str | None = None) -> OSError:
    """``e``, raised writing ``final`` (through its temporary ``tmp``), made to name ``final`` where
    it names no file or only the temporary: a write()'s ENOSPC, EDQUOT or EIO names none, and the
    message would say "No space left on device" and nothing else; a temporary's name means nothing
    to the user. Returns ``e``."""
    if e.errno is not None and (not e.filename or (tmp is not None and e.filename == tmp)):
        e.filename, e.filename2 = final, None  # (an OSError without errno prints no name)
    return e


def remove_quietly(path: str) -> None:
    """Remove ``path`` (a temporary a failed write leaves) if it is there; an error doing so is
    not the one to report."""
    try:
        os.unlink(path)
    except OSError:
        pass


def release(d: int | None) -> None:
    """Close a descriptor of :func:`hold` (its lock goes with it)."""
    if d is not None:
        try:
            os.close(d)
        except OSError:
            pass


def held(path: str) -> bool:
    """Whether the file ``path`` is locked by a live writer (:func:`hold`); False where that
    cannot be known (a directory, no locks, no access: the PID alone decides)."""
    # read-write: NFS emulates flock with a write lock, which a read-only descriptor cannot take;
    # another user's temporary (no write permission): a shared lock, which the writer's excludes
    for flags, op in ((os.O_RDWR, fcntl.LOCK_EX), (os.O_RDONLY, fcntl.LOCK_SH)):
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            break
        except OSError:
            continue
    else:
        return False
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def fsync_dir(d: str) -> None:
    """Make the renames inside directory ``d`` durable."""
    try:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass


@contextmanager
def publishing(path: str):
    """Held while the files of the output ``path`` (its data, labels, sidecar: or a staged
    directory) are renamed into place: an exclusive ``flock`` on ``.NAME.lirs-publish`` beside it,
    so that two runs writing one output publish one after the other and the last one's files win
    together (else one run's data could end beside the other's labels, both exiting 0). A lock file
    of its own, not the directory: a job wrapped in ``flock DIR`` would wait for itself. The holder
    removes it before letting go; a waiter that then finds its file gone or replaced takes the
    lock again on the new one. Where it cannot be made or the filesystem refuses ``flock`` (some
    network filesystems), nothing is held: the renames go on as before."""
    head, name = os.path.split(absolute(path).rstrip(os.sep))
    lock = os.path.join(head, f".{_stem(name)}.lirs-publish")  # a long name cut as temporaries' are
    fd = _lock_publish(lock, path)
    try:
        yield
    finally:
        if fd is not None:
            remove_quietly(lock)  # before letting go: a waiter sees its file gone and takes a new one
            os.close(fd)


def _lock_publish(lock: str, path: str):
    """A descriptor of ``lock`` holding its exclusive ``flock`` while ``lock`` still names that file,
    or None where none can be had; waits, saying so once, for another run publishing ``path``."""
    said = False
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    log.warning("waiting for another run publishing %s (it holds %s)", path, lock)
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), os.stat(lock, follow_symlinks=False)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                return fd
        except FileNotFoundError:
            pass  # removed by the run that held it: lock the next one
        except OSError:  # ENOLCK, EOPNOTSUPP: no lock here, not an error of the output
            os.close(fd)
            return None
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (signal 0: nothing is sent)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


MARK = TEMP_MARK  # what every temporary name of lirs carries before its PID
# bytes a temporary name adds to its final name's at most: ".", the mark, a PID and a thread id
_ADDED = 1 + len(MARK) + 10 + 1 + 10
NAME_MAX = 255


def _stem(base: str) -> str:
    """``base`` as temporary names carry it: itself, or where ``.BASE`` and the mark, PID and
    thread id would pass ``NAME_MAX`` bytes, its first bytes and ``~`` and its CRC-32."""
    raw = os.fsencode(base)
    if len(raw) + _ADDED <= NAME_MAX:
        return base
    tag = b"~%08x" % zlib.crc32(raw)
    return os.fsdecode(raw[:NAME_MAX - _ADDED - len(tag)] + tag)


def temp_name(final: str, pid: int | None = None, tid: int | None = None) -> str:
    """``DIR/.BASENAME.lirs-tmp-PID-TID``: where this thread writes ``final`` before its atomic
    rename (the thread's id too: threads of one process opening one touched index each rewrite its
    header, and one's rename must not take another's half-written file); ``pid`` given:
    ``.BASENAME.lirs-tmp-PID``. A long BASENAME is cut (:func:`_stem`)."""
    d, base = os.path.split(absolute(final))
    stem = _stem(base)
    return os.path.join(d, f".{stem}{MARK}{int(pid)}" if pid is not None else
                        f".{stem}{MARK}{os.getpid()}-{threading.get_native_id() if tid is None else tid}")


def clean_dead(dirpath: str, pattern: str) -> list[str]:
    """Remove the entries of ``dirpath`` whose name fully matches ``pattern`` (a regex with a named
    group ``pid``) and whose process is gone; returns the removed paths (each one logged)."""
    rx = re.compile(pattern, re.DOTALL)  # a name may hold a newline
    removed = []
    try:
        names = os.listdir(dirpath or ".")
    except OSError:
        return removed
    for name in names:
        m = rx.fullmatch(name)
        if not m:
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or pid_alive(pid):
            continue
        path = os.path.join(dirpath, name)
        if held(path):  # a writer of another host or PID namespace: live
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            continue  # another run cleaned it first
        except OSError as e:
            log.warning("could not remove %s, left by a crashed lirs run (process %d): %s", path, pid, e)
            continue
        log.warning("removed %s, left by a crashed lirs run (process %d is gone)", path, pid)
        removed.append(path)
    return removed


def clean_dead_temps(final: str) -> list[str]:
    """Remove the temporary names of ``final`` (:func:`temp_name`) left by dead processes."""
    d, base = os.path.split(absolute(final))
    return clean_dead(d, re.escape(f".{_stem(base)}{MARK}") + r"(?P<pid>\d+)(?:-\d+)?")


BENCH_SCRATCH = ".lirs-bench-"  # + PID-XXXX: a benchmark's scratch folder (its peers' copies of the data)
# every temporary name lirs writes: `.NAME.lirs-tmp-PID` files and directories (outputs, sidecars,
# labels, staged shards, verification records), `.lirs-shuffle-PID-XXXX` pile directories and
# `.lirs-bench-PID-XXXX` scratch folders
LITTER_PATTERN = (r"\..+" + re.escape(MARK) + r"(?P<pid>\d+)(?:-\d+)?|\.lirs-shuffle-(?P<pid2>\d+)-[A-Za-z0-9_]+"
                  r"|" + re.escape(BENCH_SCRATCH) + r"(?P<pid3>\d+)-[A-Za-z0-9_]+")


def clean_dead_litter(dirpath: str) -> list[str]:
    """Remove every lirs temporary of a dead process in ``dirpath`` (whatever final name it was
    for): what a crashed `lirs index` or `lirs shuffle` left, found by the next run in the same
    directory even when that run writes other names. Returns the removed paths."""
    removed = []
    for alt in LITTER_PATTERN.split("|"):  # clean_dead wants one group named "pid"
        removed += clean_dead(dirpath, re.sub(r"\(\?P<pid\d>", "(?P<pid>", alt))
    return removed
