"""Device envelopes: the same disk made to behave like a SATA SSD or an HDD with a cgroup-v1 blkio
throttle, applied only to the benchmark's own processes.

    ENVELOPES                      name -> Envelope(read_iops, read_bps, about)
    disk_of(path) -> (major, minor, name)       the whole disk holding ``path``
    blkio_unavailable(root) -> str | None       why no throttle can be set here (None: it can)
    ThrottleGroup(name, device, read_iops=None, read_bps=None, root=BLKIO_ROOT)
        .create() / .add(pid) / .stats() / .remove()     (also a context manager)

``nvme`` is the disk as it is. ``ssd`` and ``hdd`` cap the read IOPS and the read bandwidth of
the disk's ``major:minor`` inside a new cgroup ``ROOT/lirs-bench-<pid>-<envelope>``:

* **hdd**: 600 random read IOPS, from Table 2 of the LIRS paper (WD 10EZEX: 600 random reads/s,
  40,000 sequential 4 KiB reads/s); 160 MB/s is that sequential figure in bytes (40,000 x 4 KiB
  = 164 MB/s), the sustained rate of a 7,200 rpm desktop disk.
* **ssd**: a SATA SSD, the common SSD of a workstation: 90,000 random read IOPS and 530 MB/s
  (the SATA III link tops out near 550 MB/s; mainstream SATA SSDs state 90-98k random 4 KiB
  reads/s). The paper's SSD (an Intel 750, NVMe, 430,000 IOPS) is faster than most cloud NVMe
  volumes, and a throttle can only slow a disk down: on such a disk ``nvme`` is the row to read.

A throttle is a model, not a disk: it caps every request (sequential ones too: 600 requests/s of
128 KiB stay below 160 MB/s, where a real HDD would stream), and it has no seek distance (nearby
reads cost a real HDD less). Large sequential requests (lirs's coalesced extents, fio's 1 MiB
reads) meet the bandwidth cap as on the real device.

Throttled direct reads go through blkio; buffered reads of pages already cached do not: whoever
measures buffered readers must empty the cache of the data first (:func:`evict_cache`).

The group holds only the processes added to it. :meth:`ThrottleGroup.remove` moves them back to
the root group and removes the directory; it runs on exit from the ``with`` block (errors and
Ctrl-C included) and, as a last resort, at interpreter exit; :func:`remove_stale` removes groups
left by a process that was killed.
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import logging
import mmap
import os
import re
import threading
import time
from dataclasses import dataclass

from ..errors import LirsError

log = logging.getLogger("lirs.eval.envelope")

BLKIO_ROOT = "/sys/fs/cgroup/blkio"
SYS_ROOT = "/sys"
PREFIX = "lirs-bench-"
_LIMIT_FILES = ("blkio.throttle.read_iops_device", "blkio.throttle.read_bps_device")
_STAT_FILES = {"reads": "blkio.throttle.io_serviced", "bytes": "blkio.throttle.io_service_bytes"}


@dataclass(frozen=True)
class Envelope:
    """A device envelope: read IOPS and bytes/s caps (None: the disk as it is)."""

    name: str
    read_iops: int | None
    read_bps: int | None
    about: str

    @property
    def throttled(self) -> bool:
        return self.read_iops is not None or self.read_bps is not None

    def as_dict(self) -> dict:
        return {"name": self.name, "read_iops": self.read_iops, "read_bps": self.read_bps, "about": self.about}


ENVELOPES = {
    "nvme": Envelope("nvme", None, None, "the disk as it is"),
    "ssd": Envelope("ssd", 90_000, 530_000_000,
                    "SATA SSD: 90,000 random read IOPS, 530 MB/s (SATA III link; mainstream datasheets)"),
    "hdd": Envelope("hdd", 600, 160_000_000,
                    "HDD: 600 random read IOPS (LIRS paper, Table 2, WD 10EZEX); 160 MB/s "
                    "(its 40,000 sequential 4 KiB reads/s)"),
}


class EnvelopeError(LirsError):
    """A throttle group could not be set up (or removed)."""


# ------------------------------------------------------------------------------ the disk


def disk_of(path: str, *, sys_root: str = SYS_ROOT) -> tuple[int, int, str]:
    """``(major, minor, name)`` of the whole disk that holds ``path``'s filesystem.

    A partition (``vda1``) maps to its disk (``vda``): blkio throttles act on whole disks.
    Raises EnvelopeError when the filesystem has no block device (tmpfs, overlay, NFS).
    """
    st = os.stat(path)
    maj, mnr = os.major(st.st_dev), os.minor(st.st_dev)
    d = os.path.join(sys_root, "dev", "block", f"{maj}:{mnr}")
    if not os.path.isdir(d):
        raise EnvelopeError(f"{path} is on device {maj}:{mnr}, which is not a block device "
                            f"({d} does not exist: tmpfs, overlay or a network filesystem?)")
    real = os.path.realpath(d)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
        with open(os.path.join(real, "dev")) as f:
            maj, mnr = (int(x) for x in f.read().strip().split(":"))
    return maj, mnr, os.path.basename(real)


def blkio_unavailable(root: str = BLKIO_ROOT) -> str | None:
    """Why a blkio throttle cannot be set under ``root`` here, or None when it can."""
    if not os.path.isdir(root):
        return f"no cgroup-v1 blkio hierarchy at {root} (cgroup v2 only, or not mounted)"
    for f in _LIMIT_FILES + ("cgroup.procs",):
        if not os.path.exists(os.path.join(root, f)):
            return f"{root} has no {f} (blkio throttling not built into this kernel?)"
    if not os.access(root, os.W_OK):
        return f"cannot create cgroups under {root} (needs root)"
    return None


def drop_caches() -> bool:
    """Write back dirty pages and drop the whole page cache (root only). False when not allowed.

    :func:`evict_cache` is preferred: it empties the cache of the data files only, without root."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def evict_cache(paths) -> bool:
    """Drop the cached pages of ``paths`` (``posix_fadvise(DONTNEED)`` after writing back their
    dirty pages): their next buffered reads go to the disk. Pages still mapped by a live
    ``mmap`` stay. Needs no root and leaves other files' cache alone. False when a file could
    not be evicted."""
    ok = True
    for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            ok = False
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except (OSError, AttributeError):
            ok = False
        finally:
            os.close(fd)
    return ok


def cached_bytes(path: str) -> int | None:
    """Bytes of ``path`` resident in the page cache now (``mincore`` of a fresh mapping, which
    faults nothing in), or None when it cannot be told."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return None
            resident = sum(1 for v in bytes(vec) if v & 1)
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)
    return min(size, resident * page)


# ------------------------------------------------------------------------------ the group

_LIVE: "set[ThrottleGroup]" = set()
_LIVE_LOCK = threading.Lock()


def _cleanup_at_exit() -> None:
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for g in groups:
        try:
            g.remove()
        except Exception as e:  # noqa: BLE001 - interpreter exit: report and go on
            log.warning("could not remove %s at exit: %s", g.path, e)


atexit.register(_cleanup_at_exit)


def _write(path: str, text: str, append: bool = False) -> None:
    # one write() per value: cgroup files take one entry per write
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class ThrottleGroup:
    """A blkio cgroup ``ROOT/lirs-bench-<pid>-<name>`` with read caps on one disk.

    Parameters
    ----------
    name : str
        Envelope name (part of the directory name).
    device : str
        ``"MAJOR:MINOR"`` of the whole disk (see :func:`disk_of`).
    read_iops, read_bps : int or None
        Caps; None for none (a group without caps still counts the group's I/O in :meth:`stats`).
    root : str
        The blkio hierarchy (tests pass a plain directory tree).
    """

    def __init__(self, name: str, device: str, read_iops: int | None = None, read_bps: int | None = None,
                 root: str = BLKIO_ROOT):
        if not re.fullmatch(r"\d+:\d+", device):
            raise ValueError(f"device must be 'MAJOR:MINOR', got {device!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"envelope name must be [A-Za-z0-9_.-]+, got {name!r}")
        self.name = name
        self.device = device
        self.read_iops = None if read_iops is None else int(read_iops)
        self.read_bps = None if read_bps is None else int(read_bps)
        self.root = root
        self.path = os.path.join(root, f"{PREFIX}{os.getpid()}-{name}")
        self.procs = os.path.join(self.path, "cgroup.procs")
        self.created = False

    # -- setup
    def create(self) -> "ThrottleGroup":
        """Make the directory and write the caps; on any failure nothing is left behind."""
        try:
            os.mkdir(self.path)
        except FileExistsError:
            raise EnvelopeError(f"{self.path} exists already (another benchmark of this process?)") from None
        except OSError as e:
            raise EnvelopeError(f"cannot create cgroup {self.path}: {e.strerror or e}") from None
        self.created = True
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            for fname, value in zip(_LIMIT_FILES, (self.read_iops, self.read_bps)):
                if value is not None:
                    _write(os.path.join(self.path, fname), f"{self.device} {value}\n")
        except BaseException as e:
            self.remove()
            if isinstance(e, OSError):
                raise EnvelopeError(f"cannot set the throttle in {self.path}: {e.strerror or e}") from None
            raise
        log.info("cgroup %s: read_iops=%s read_bps=%s on %s", self.path, self.read_iops, self.read_bps,
                 self.device)
        return self

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group."""
        _write(self.procs, f"{int(pid)}\n", append=True)

    def members(self) -> list[int]:
        """PIDs in the group now."""
        try:
            with open(self.procs) as f:
                return [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return []

    def stats(self) -> dict | None:
        """Reads and bytes the group has read from the disk so far: ``{"reads", "bytes"}`` (ints),
        or None when the kernel keeps no such counters here, or none for the device: since Linux
        6.10 a disk on which no group ever had a cap counts nothing in an uncapped group (the nvme
        envelope's), and a row would read 0 reads and 0 MB/s (the caller counts the loader's)."""
        out = {}
        for key, fname in _STAT_FILES.items():
            try:
                with open(os.path.join(self.path, fname)) as f:
                    text = f.read()
            except OSError:
                return None
            m = re.search(rf"^{re.escape(self.device)} Read (\d+)$", text, re.M)
            if m is None:
                return None
            out[key] = int(m.group(1))
        return out

    # -- teardown
    def remove(self) -> None:
        """Move every member back to the root group and remove the directory. Idempotent."""
        if not self.created:
            return
        root_procs = os.path.join(self.root, "cgroup.procs")
        last = None
        # a member may be forking or exiting while we move it (a killed worker's DataLoader children
        # keep the group busy until they are reaped): bounded retries, with pauses (about 5 s in all)
        for k in range(60):
            for pid in self.members():
                try:
                    _write(root_procs, f"{pid}\n", append=True)
                except ProcessLookupError:
                    pass  # exited meanwhile
                except OSError as e:
                    if e.errno != errno.ESRCH:
                        last = e
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                last = e
                if e.errno == errno.ENOTEMPTY:
                    # a plain directory (no cgroupfs): remove the files this class wrote, then retry
                    for fname in os.listdir(self.path):
                        p = os.path.join(self.path, fname)
                        if os.path.isfile(p):
                            os.unlink(p)
                elif e.errno != errno.EBUSY:
                    break
                else:
                    time.sleep(min(0.1, 0.002 * (k + 1)))
        if os.path.isdir(self.path):
            raise EnvelopeError(f"cannot remove cgroup {self.path}: {last}; members: {self.members()}")
        self.created = False
        with _LIVE_LOCK:
            _LIVE.discard(self)
        log.info("cgroup %s removed", self.path)

    def __enter__(self) -> "ThrottleGroup":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        return (f"ThrottleGroup({self.path!r}, device={self.device!r}, read_iops={self.read_iops}, "
                f"read_bps={self.read_bps})")


def remove_stale(root: str = BLKIO_ROOT) -> list[str]:
    """Remove ``lirs-bench-<pid>-*`` groups whose process is gone (a benchmark killed with SIGKILL).
    Returns the paths removed."""
    gone = []
    try:
        names = os.listdir(root)
    except OSError:
        return gone
    for name in names:
        m = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)-([A-Za-z0-9_.-]+)", name)
        if not m or not os.path.isdir(os.path.join(root, name)):
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        g = ThrottleGroup(m.group(2), "0:0", root=root)
        g.path = os.path.join(root, name)
        g.procs = os.path.join(g.path, "cgroup.procs")
        g.created = True
        try:
            g.remove()
            gone.append(g.path)
            log.warning("removed a cgroup left by process %d: %s", pid, g.path)
        except EnvelopeError as e:
            log.warning("%s", e)
    return gone
