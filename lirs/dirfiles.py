"""Which files of a directory are its data: the regular files directly in it, less what lirs, its
users and their editors keep beside data."""
from __future__ import annotations

import errno
import os
import re

from .errors import DataError

NOT_DATA = (".lirs", ".lirs.bench.json", ".labels.npy")  # what lirs and its users keep beside data
# editors' backups and autosaves (part-1.svm~, #part-1.svm#, .bak/.orig/.swp): their text passes
# as the shard they copy, whose records were then served twice
_BACKUP_ENDS = ("~", ".bak", ".orig", ".swp")


def first_few(names, sep: str = ", ") -> str:
    """The first three of ``names`` (str) joined by ``sep``, and `` ...`` where there are more: an
    error names a dataset of thousands of files by its first ones."""
    names = list(names)
    return sep.join(names[:3]) + (" ..." if len(names) > 3 else "")


def is_backup(name: str) -> bool:
    """Whether the file name ``name`` is an editor's backup or autosave (not data)."""
    return name.endswith(_BACKUP_ENDS) or (len(name) > 1 and name.startswith("#") and name.endswith("#"))


def directory_files(d: str) -> list[str]:
    """The regular files of the directory ``d`` that may be data (``d/NAME``, in name order):
    hidden files, sidecars, labels files and editors' backups left out; DataError for a dangling
    symlink or a symlink loop among them (its shard was else left out of the index, silently), or
    for a directory without a non-empty one."""
    names = sorted(os.listdir(d))
    found = []
    for n in names:
        if n.startswith(".") or n.endswith(NOT_DATA) or is_backup(n):
            continue
        f = os.path.join(d, n)
        if os.path.islink(f) and not os.path.exists(f):
            refuse_broken_link(f)
        if os.path.isfile(f):
            found.append(f)
    if not any(os.path.getsize(f) > 0 for f in found):
        subs = [n for n in names if os.path.isdir(os.path.join(d, n)) and not n.startswith(".")]
        raise DataError(f"{d}: directory holds no data files" + (
            f" ({len(found)} empty)" if found else "") + (
            f" (its subdirectories {first_few(subs)} are not read: "
            "a directory's data are the files directly in it)" if subs else ""))
    return found


def data_ext(path: str) -> str:
    """The extension of the data file ``path`` (``".jsonl"``), a rotated file's number dropped:
    logrotate and RotatingFileHandler name the older files of ``app.jsonl`` ``app.jsonl.1``,
    ``app.jsonl.2``, which hold the same records (their ``.1`` is no format)."""
    return os.path.splitext(re.sub(r"(\.\d+)+$", "", os.path.basename(path)))[1]


def refuse_broken_link(f: str) -> None:
    """Raise DataError naming the symlink ``f``, which leads nowhere, and its target."""
    target = os.readlink(f)
    try:
        os.stat(f)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DataError(f"{f}: a symlink to {target}, which leads back to itself (a symlink loop); "
                            "expected a data file there: fix the link, or remove it") from None
    raise DataError(f"{f}: a symlink to {target}, which does not exist; expected a data file there: "
                    "mount or restore it, or remove the link")
