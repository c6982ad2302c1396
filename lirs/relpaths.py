"""The relative paths a sidecar keeps of its data, its labels files and its directories: each
relative to the sidecar's own directory, so a dataset moved or copied whole with its sidecar
still opens."""
from __future__ import annotations

import os


def relpath(path: str, base_dir: str) -> str:
    try:
        return os.path.relpath(path, base_dir)
    except ValueError:
        return path
