"""A fault-injecting FUSE passthrough for the tests: EIO, short reads and delays per file and byte range.

Real filesystems that return short reads (FUSE, network filesystems) or fail on a bad sector are
where a reader's end-of-file and error handling is proven. This mounts a read-only view of a
source directory and, per file and byte range, makes reads fail with EIO, return at most N bytes,
or wait before answering.

The filesystem runs in a subprocess (``python faultfs.py SRC MNT``) so that a test that hangs or
crashes never leaves a FUSE loop inside the test process; the parent talks to it over its stdin
and stdout (one JSON line of rules in, one line ``ok`` back), so rules can change while mounted.

Files are opened with FUSE ``direct_io`` (by default): the kernel then hands every read to the
filesystem and every short answer back to the application unchanged, for ``O_DIRECT`` and page
cache descriptors alike. Without it the kernel's page cache would hide short reads (and may take a
short answer for the end of the file).

Rules (a list of dicts; a read is affected when its byte range meets ``[start, end)``)::

    {"file": "data.bin", "start": 0, "end": 1 << 60, "kind": "short", "n": 1000}
    {"file": None, "start": 8192, "end": 8193, "kind": "eio"}
    {"file": "data.bin", "start": 0, "end": 1 << 60, "kind": "delay", "seconds": 0.002}
    {"file": "data.bin", "start": 0, "end": 1 << 60, "kind": "delay", "seconds": 0.002, "jitter": True}

``file`` None means every file; a ``jitter`` delay waits a uniform random time up to ``seconds``
(so that reads issued in order complete out of order). Several rules may apply to one read: delays add up, the first
``eio`` fails it, the smallest ``n`` of the ``short`` rules wins.

:class:`FaultFS` mounts, changes rules and unmounts (``fusermount3 -u``); :func:`fuse_missing`
says why FUSE cannot be used here (None when it can).
"""
from __future__ import annotations

import errno
import json
import os
import random
import select
import shutil
import subprocess
import sys
import threading
import time

MOUNT_TIMEOUT_S = 30.0


def fuse_missing() -> str | None:
    """None when a FUSE filesystem can be mounted here, else why not (for ``pytest.skip``)."""
    if not sys.platform.startswith("linux"):
        return "FUSE tests need Linux"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401 - loads libfuse through ctypes
    except Exception as e:  # noqa: BLE001 - no libfuse: ctypes raises OSError, some versions others
        return f"the mfusepy binding (libfuse 3) is not usable: {e}"
    return None


# --------------------------------------------------------------------------- the filesystem (child)


def _fault_ops(src: str, direct_io: bool):
    import mfusepy

    class FaultOps(mfusepy.Operations):
        """Read-only passthrough of ``src`` with injected faults."""

        use_ns = True

        def __init__(self):
            self.rules: list[dict] = []
            self.mutex = threading.Lock()  # not `lock`: that name is the FUSE lock operation
            self.counts = {"reads": 0, "short": 0, "eio": 0, "delay": 0}

        def _real(self, path):
            return os.path.join(src, path.lstrip("/"))

        def getattr(self, path, fh=None):
            try:
                st = os.lstat(self._real(path))
            except OSError as e:
                raise mfusepy.FuseOSError(e.errno) from None
            keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime_ns", "st_mtime_ns",
                    "st_ctime_ns")
            out = {k.replace("_ns", ""): getattr(st, k) for k in keys}
            return out

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(self._real(path))]

        def open(self, path, fi):
            if fi.flags & (os.O_WRONLY | os.O_RDWR):
                raise mfusepy.FuseOSError(errno.EROFS)
            try:
                fi.fh = os.open(self._real(path), os.O_RDONLY)
            except OSError as e:
                raise mfusepy.FuseOSError(e.errno) from None
            # direct_io: the kernel passes each read (and its short answer) straight through
            fi.direct_io = 1 if direct_io else 0
            fi.keep_cache = 0
            return 0

        def read(self, path, size, offset, fi):
            name = path.lstrip("/")
            with self.mutex:
                rules = [r for r in self.rules
                         if (r.get("file") in (None, name)) and offset < r["end"] and offset + size > r["start"]]
                self.counts["reads"] += 1
            wait = sum(float(r.get("seconds", 0)) * (random.random() if r.get("jitter") else 1.0)
                       for r in rules if r["kind"] == "delay")
            eio = any(r["kind"] == "eio" for r in rules)
            shorts = [int(r["n"]) for r in rules if r["kind"] == "short"]
            n = size
            if shorts and min(shorts) < size:
                n = max(1, min(shorts))
            with self.mutex:
                self.counts["delay"] += bool(wait)
                self.counts["eio"] += eio
                self.counts["short"] += n < size and not eio
            if wait:
                time.sleep(wait)
            if eio:
                raise mfusepy.FuseOSError(errno.EIO)
            return os.pread(fi.fh, n, offset)

        def release(self, path, fi):
            os.close(fi.fh)
            return 0

        def statfs(self, path):
            s = os.statvfs(src)
            return {k: getattr(s, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                "f_files", "f_ffree", "f_favail", "f_namemax")}

    return FaultOps()


def _serve(src: str, mnt: str, direct_io: bool) -> None:
    import mfusepy

    ops = _fault_ops(src, direct_io)
    out = sys.stdout

    def init_with_config(conn, config):
        print("ready", file=out, flush=True)

    ops.init_with_config = init_with_config

    def control():
        # one JSON line of rules (or "counts") in, one line back; EOF on stdin: the parent is gone
        for line in sys.stdin:
            line = line.strip()
            if line == "counts":
                with ops.mutex:
                    print(json.dumps(ops.counts), file=out, flush=True)
                continue
            rules = json.loads(line)
            with ops.mutex:
                ops.rules = rules
            print("ok", file=out, flush=True)

    threading.Thread(target=control, daemon=True).start()
    mfusepy.FUSE(ops, mnt, raw_fi=True, foreground=True, ro=True, fsname="lirs-faultfs",
                 attr_timeout=0, entry_timeout=0)


# --------------------------------------------------------------------------- the parent side


class FaultFS:
    """A mounted fault-injecting view of ``src`` at ``mnt`` (both existing directories).

    ``with FaultFS(src, mnt) as fs: fs.set_rules([...]); open(fs.path("data.bin"))``. Unmounts on
    exit (also when the body raised) and kills the server if it does not stop.
    """

    def __init__(self, src, mnt, *, direct_io: bool = True):
        self.src, self.mnt = os.fspath(src), os.fspath(mnt)
        self.direct_io = direct_io
        self.proc: subprocess.Popen | None = None
        self.log = None

    def path(self, name: str) -> str:
        """Path of ``name`` (relative to ``src``) through the mount."""
        return os.path.join(self.mnt, name)

    def mount(self) -> "FaultFS":
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        # the server's log goes to a file: a pipe nobody drains would fill and stall the filesystem
        self.log = open(self.mnt.rstrip("/") + ".log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), self.src, self.mnt, "1" if self.direct_io else "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        try:
            line = self._reply(MOUNT_TIMEOUT_S)
            if line != "ready":
                raise RuntimeError(f"faultfs did not mount: {line!r}")
        except BaseException:
            self.unmount()
            raise
        return self

    def _reply(self, timeout: float) -> str:
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise TimeoutError(f"faultfs gave no answer in {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError(f"faultfs exited (rc={self.proc.poll()}): {self.log.read()[-2000:]}")
        return line.strip()

    def set_rules(self, rules) -> None:
        """Replace the fault rules (list of dicts, see the module doc); takes effect for the next read."""
        self.proc.stdin.write(json.dumps(list(rules)) + "\n")
        self.proc.stdin.flush()
        if self._reply(10) != "ok":
            raise RuntimeError("faultfs refused the rules")

    def counts(self) -> dict:
        """How many reads the filesystem served, and how many it cut short, failed or delayed."""
        self.proc.stdin.write("counts\n")
        self.proc.stdin.flush()
        return json.loads(self._reply(10))

    def unmount(self) -> None:
        """Unmount (lazily if busy) and stop the server. Safe to call twice."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        # not os.path.ismount: a mount whose server died answers ENOTCONN, which ismount calls "not
        # mounted"; the mount table knows
        if self._mounted():
            r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
            if r.returncode != 0 and self._mounted():  # busy (a descriptor still open): detach now
                subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        self.log.close()

    def _mounted(self) -> bool:
        mnt = os.path.realpath(self.mnt)
        with open("/proc/self/mountinfo") as f:
            # field 5 is the mount point, with spaces and the like escaped as octal
            return any(line.split()[4].encode().decode("unicode_escape") == mnt for line in f)

    def __enter__(self):
        return self.mount() if self.proc is None else self

    def __exit__(self, *exc):
        self.unmount()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3] != "0" if len(sys.argv) > 3 else True)
