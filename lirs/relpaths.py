"""The relative paths a sidecar keeps of its data, its labels files and its directories: each
relative to the sidecar's own directory, so a dataset moved or copied whole with its sidecar
still opens.

The kernel resolves ``L/..`` through a symlink ``L`` to the link target's parent, where
``os.path.relpath`` and ``os.path.normpath`` fold it by text to ``L``'s own parent: a path that
climbs (``..``) is therefore resolved from the real sidecar directory by every reader, so a sidecar
opened through a symlinked directory finds what the kernel does. The writer keeps the text's path
(the symlinked directories on the way named, so a link switched to another dataset version is
followed) wherever that reading of it names the data, and only otherwise the one between real
directories.
"""
from __future__ import annotations

import os

from .inputs import absolute


def relpath(path: str, base_dir: str) -> str:
    """``path`` relative to ``base_dir`` (a sidecar's directory), as the sidecar keeps it: by text
    (the names of links kept) wherever :func:`beside` resolves that text to ``path`` itself; else,
    for one that climbs through a symlinked ``base_dir``, from the real ``base_dir`` to the real
    directory of ``path``, its last name kept (a link to the data stays the link)."""
    path, base_dir = absolute(path), absolute(base_dir)
    try:
        rel = os.path.relpath(path, base_dir)
        if ".." not in rel.split(os.sep) or _names(os.path.join(os.path.realpath(base_dir), rel), path):
            # the text keeps the symlinked directories on the way (proj/data -> ds_v1 kept as
            # ../data): a link moved to another version, or a project moved whole, is followed
            return rel
        head, tail = os.path.split(path)
        return os.path.relpath(os.path.join(os.path.realpath(head), tail), os.path.realpath(base_dir))
    except ValueError:  # on another drive (Windows): no relative path
        return path


def _names(candidate: str, path: str) -> bool:
    """Whether ``candidate`` (normalised by text) is the very entry ``path`` is: compared without
    following a last symlink, so another link to the same data is not taken for the link named."""
    try:
        a, b = os.lstat(os.path.normpath(candidate)), os.lstat(path)
    except OSError:  # either does not exist (yet): not known to be the same
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def beside(base_dir: str, rels) -> list[str]:
    """The absolute paths that ``rels``, kept by a sidecar in ``base_dir`` (:func:`relpath`), name:
    one that climbs joined to the real ``base_dir``, as the kernel resolves its ``..``; to the text's
    ``base_dir`` where only that one exists (a sidecar an older lirs wrote through a symlinked
    directory, whose paths climb from the link's own parent)."""
    real_base = None  # resolved once: a directory's thousands of files share it
    out = []
    for rel in rels:
        path = os.path.normpath(os.path.join(base_dir, rel))
        if ".." in rel.split(os.sep):
            real_base = real_base or os.path.realpath(base_dir)
            real = os.path.normpath(os.path.join(real_base, rel))
            path = real if os.path.exists(real) or not os.path.exists(path) else path
        out.append(path)
    return out
