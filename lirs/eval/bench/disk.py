"""What kind of disk holds the data, as sysfs tells it: the label `lirs bench` prints for the disk
as it is (its ``nvme`` envelope), so that a virtio disk of a virtual machine reads "virtio", not
"nvme", and a number of one kind of disk is never quoted as another's."""
from __future__ import annotations

import os

from ...mounts import MEMORY_FS, fs_type

SYS_ROOT = "/sys"

# transport, from the resolved path of /sys/block/NAME/device (the bus the disk hangs off), checked
# in order: a virtio-scsi disk's path holds both "virtio" and a SCSI host, and virtio is what it is
_PATH_MARKS = (("/virtio", "virtio"), ("/nvme", "nvme"), ("/usb", "usb"), ("/ata", "sata"), ("/mmc", "mmc"),
               ("/vbd-", "xen"), ("/host", "scsi"))
# names of disks with no device directory (stacked or memory-backed)
_NAME_MARKS = (("loop", "loop"), ("md", "md-raid"), ("dm-", "device-mapper"), ("zram", "zram"),
               ("ram", "ramdisk"), ("nbd", "nbd"), ("rbd", "ceph-rbd"))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def describe(name: str, *, sys_root: str = SYS_ROOT) -> dict:
    """The disk ``name`` (``vda``, ``nvme0n1``, ``sda``, as :func:`lirs.eval.envelope.disk_of`
    returns it) from ``sys_root/block/NAME``: ``{"transport", "model", "rotational", "label"}``.

    ``transport`` is ``"virtio"``, ``"nvme"`` (``"nvme-tcp"``, ``"nvme-rdma"``, ``"nvme-fc"`` for
    fabrics), ``"sata"``, ``"scsi"``, ``"usb"``, ``"mmc"``, ``"xen"``, a stacked kind (``"loop"``,
    ``"device-mapper"``, ...) or ``"unknown"``; ``model`` the device's model string or None;
    ``rotational`` True/False/None (the queue's ``rotational`` flag); ``label`` one short phrase
    for output, e.g. ``"virtio disk vda"``, ``"nvme disk nvme0n1 (Samsung SSD 980)"``."""
    block = os.path.join(sys_root, "block", name)
    dev = os.path.join(block, "device")
    transport = "unknown"
    if os.path.exists(dev):
        real = os.path.realpath(dev)
        driver = os.path.basename(os.path.realpath(os.path.join(dev, "driver"))) \
            if os.path.exists(os.path.join(dev, "driver")) else ""
        if driver.startswith("virtio") or "virtio" in real:
            transport = "virtio"
        elif name.startswith("nvme") or driver == "nvme" or "/nvme" in real:
            fabric = _read(os.path.join(dev, "transport"))  # the controller's: pcie, tcp, rdma, fc, loop
            transport = "nvme" if fabric in (None, "pcie") else f"nvme-{fabric}"
        else:
            transport = next((t for mark, t in _PATH_MARKS if mark in real), "scsi" if
                             _read(os.path.join(dev, "vendor")) else "unknown")
    else:
        transport = next((t for mark, t in _NAME_MARKS if name.startswith(mark)), "unknown")
    model = _read(os.path.join(dev, "model"))
    rot = _read(os.path.join(block, "queue", "rotational"))
    rotational = None if rot not in ("0", "1") else rot == "1"
    label = f"{transport} disk {name}" + (f" ({model})" if model else "")
    return {"transport": transport, "model": model, "rotational": rotational, "label": label}


def no_disk(path: str) -> dict:
    """What holds ``path`` where no block device does (tmpfs, overlay, NFS): ``{"transport", "label"}`` named by
    the filesystem (``"tmpfs"``, ``"nfs4"``; ``"no-disk"`` where its type is unknown), so that reads from memory
    or over a network are not headed as a disk's (the ``nvme`` envelope is the data's storage as it is)."""
    fs = fs_type(path)
    if fs in MEMORY_FS:
        return {"transport": fs, "label": f"{fs}: no disk, the files are held in memory"}
    return {"transport": fs or "no-disk", "label": f"{fs or 'a filesystem'} with no block device"}
