"""The output files of `lirs shuffle`: their names, where they are written, their move into place.

One output ``OUT`` is written as ``.OUT.lirs-tmp-PID`` beside it (its labels likewise) and renamed; its
sidecar is written in place by the atomic sidecar writer. Shards are written into a staging
directory ``.OUT.lirs-tmp-PID`` under their final names (part files, labels, sidecars), which is renamed
to ``OUT`` at the end. Nothing is left behind on error.
"""
from __future__ import annotations

import os
import shutil

from ..build import build
from ..inputs import compressed, extension_format, labels_path
from ..litter import clean_dead_temps, fsync_dir, temp_name
from ..sidecar import sidecar_path
from .formats import Dataset
from .writer import Shard


def read_back_as(path: str, fmt: str) -> str | None:
    """What lirs would read an output named ``path`` back as, where that is not the plain ``fmt``
    records written there: ``"a lirs index"`` (a ``.lirs`` name), ``"compressed"`` (``.gz`` and the
    like) or the format its extension names (``o.svm`` for TFRecord records); None when the name
    fits (no extension, or one of no known format). `lirs shuffle` and `lirs gen` refuse such names."""
    if os.path.splitext(path)[1].lower() == ".lirs":
        return "a lirs index"
    if compressed(path) is not None:
        return "compressed"
    named = extension_format(path)
    return named if named is not None and named != fmt else None


def shard_names(shards: int, ext: str) -> list[str]:
    """``part-00000EXT`` ... for ``shards`` files (wider numbers past 99999)."""
    width = max(5, len(str(shards - 1)))
    return [f"part-{k:0{width}d}{ext}" for k in range(shards)]


class Layout:
    """The :class:`Shard` list of one shuffle of ``n`` records into ``out`` (a file, or with
    ``shards`` a new directory of part files with extension ``ext``); ``labels``: ``.npy`` labels go
    along; ``index``: sidecars too. Creates the staging directory of sharded output."""

    def __init__(self, out: str, parent: str, shards: int | None, ext: str, n: int, *, labels: bool,
                 index: bool):
        self.out, self.parent = out, parent
        # what a killed shuffle left under these names (GBs of output): removed, and said so
        clean_dead_temps(out)
        if labels:
            clean_dead_temps(labels_path(out))
        hidden = temp_name(out)
        staged = shards is not None
        if not staged:
            counts, finals, tmps = [n], [out], [hidden]
        else:
            counts = [n // shards + (1 if k < n % shards else 0) for k in range(shards)]
            names = shard_names(shards, ext)
            finals = [os.path.join(out, nm) for nm in names]
            tmps = [os.path.join(hidden, nm) for nm in names]
        self.shards: list[Shard] = []
        for f, t, c in zip(finals, tmps, counts):
            sh = Shard(final=f, tmp=t, count=c)
            if labels:
                sh.labels_final = labels_path(f)
                sh.labels_tmp = labels_path(t) if staged else temp_name(labels_path(f))
            if index:
                sh.sidecar = sidecar_path(f)
                # sharded sidecars are written inside the staging directory, single ones in place
                sh.sidecar_tmp = os.path.join(hidden, os.path.basename(sh.sidecar)) if staged else sh.sidecar
            self.shards.append(sh)
        self.stage: str | None = None   # the staging directory while it exists
        if staged:
            os.mkdir(hidden)
            self.stage = hidden

    def commit(self, ds: Dataset, index: bool) -> None:
        """Move the written files into place: labels before data, data before sidecars; then the
        sidecars of fixed-record outputs (nothing to scan: header, record size, count, labels)."""
        if self.stage is not None:
            for s in self.shards:  # sidecars inside the staging directory, naming the final paths
                if s.indexer is not None:
                    s.indexer.commit(s.data_end, s.tmp)
                    s.indexer = None  # after: a commit that failed is aborted (its temporary removed)
            os.replace(self.stage, self.out)
            self.stage = None
        else:
            for s in self.shards:
                if s.labels_tmp:
                    if os.path.exists(s.final):
                        # an old output goes first: a run stopped between the renames leaves new
                        # labels without data, never beside the old data they do not belong to
                        os.unlink(s.final)
                    os.replace(s.labels_tmp, s.labels_final)
                os.replace(s.tmp, s.final)
        fsync_dir(self.parent)
        for s in self.shards:
            if s.indexer is not None:
                s.indexer.commit(s.data_end, s.final)
                s.indexer = None
        if index and not ds.text:
            # the format as the user gave it (else detected again): a sidecar recording a detected
            # format as given differed from `lirs index OUT`'s, and its stale-index advice added --format
            fmt = ds.fmt if ds.given else "auto"
            for s in self.shards:
                build(s.final, format=fmt, record_size=ds.rs if ds.fmt == "fixed" else None,
                      out=s.sidecar, progress=False)

    def abort(self) -> None:
        """Remove what was written (after an error or Ctrl-C)."""
        for s in self.shards:
            if s.indexer is not None:
                s.indexer.abort()
                s.indexer = None
            for p in (s.tmp, s.labels_tmp):
                if p and self.stage is None:
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
