"""The relative paths a sidecar keeps of its data, its labels files and its directories: each
relative to the sidecar's own directory, so a dataset moved or copied whole with its sidecar
still opens.

The kernel resolves ``L/..`` through a symlink ``L`` to the link target's parent, where
``os.path.relpath`` and ``os.path.normpath`` fold it by text to ``L``'s own parent: a path that
climbs (``..``) is therefore computed and resolved between real directories, by the writer and
every reader alike, so a sidecar opened through a symlinked directory finds what the kernel does.
"""
from __future__ import annotations

import os

from .inputs import absolute


def relpath(path: str, base_dir: str) -> str:
    """``path`` relative to ``base_dir`` (a sidecar's directory), as the sidecar keeps it: one that
    climbs is taken from the real ``base_dir`` to the real directory of ``path``, its last name
    kept (a link to the data stays the link); any other, by text (the names of links kept)."""
    path, base_dir = absolute(path), absolute(base_dir)
    try:
        rel = os.path.relpath(path, base_dir)
        if ".." not in rel.split(os.sep):
            return rel
        head, tail = os.path.split(path)
        return os.path.relpath(os.path.join(os.path.realpath(head), tail), os.path.realpath(base_dir))
    except ValueError:  # on another drive (Windows): no relative path
        return path


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
