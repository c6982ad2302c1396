"""The output files of `lirs shuffle`: their names, where they are written, their move into place.

One output ``OUT`` is written as ``.OUT.lirs-tmp-PID`` beside it (its labels and a text output's
sidecar likewise) and renamed, with Ctrl-C and SIGTERM held over the renames (:func:`signals_held`):
an interrupt leaves the old output and its sidecar, or the new ones, never new data beside an old
sidecar or none. Shards are written into a staging
directory ``.OUT.lirs-tmp-PID`` under their final names (part files, labels, sidecars), which is renamed
to ``OUT`` at the end. Nothing is left behind on error. Runs writing one output publish one at a
time (:func:`lirs.litter.publishing`): the last one's files are left, together.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import threading
from contextlib import contextmanager

from ..errors import LirsError
from ..inputs import compressed, extension_format, labels_path
from ..litter import clean_dead_temps, fsync_dir, publishing, temp_name
from ..preads import read_at
from ..sidecar import MAGIC, sidecar_path
from .sealed import seal_sidecar
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
                # sharded sidecars are written inside the staging directory, a single one beside it
                # under a temporary name: sealed before the data takes its name, renamed with it
                sh.sidecar_tmp = os.path.join(hidden, os.path.basename(sh.sidecar)) if staged else \
                    temp_name(sh.sidecar)
            self.shards.append(sh)
        self.stage: str | None = None   # the staging directory while it exists
        if staged:
            os.mkdir(hidden)
            self.stage = hidden

    def commit(self, ds: Dataset, index: bool) -> None:
        """Move the written files into place: sidecars sealed first under temporary names (a text
        output's from its buffers, another from its finished temporaries), then, with
        Ctrl-C and SIGTERM held, renames alone: labels and sidecars before data."""
        # the format as the user gave it (else detected again): a sidecar recording a detected
        # format as given differed from `lirs index OUT`'s, and its stale-index advice added --format
        given = ds.fmt if ds.given else None
        for s in self.shards:  # the sidecars name the final paths; a rename keeps the data's fingerprint
            if s.indexer is not None:
                s.indexer.commit(s.data_end, s.tmp)
                s.indexer = None  # after: a commit that failed is aborted (its temporary removed)
            elif index and not ds.text:
                seal_sidecar(s, ds.fmt, ds.rs if ds.fmt == "fixed" else None, given)
        for s in self.shards:  # sized here: once published, another run may replace it at once
            s.size = os.path.getsize(s.tmp)
        # another run writing this output publishes before or after this one, never between
        # these renames: the last run's data, labels and sidecars are the ones left, together
        with publishing(self.out), signals_held():
            if self.stage is not None:
                self._publish_stage()
            else:
                for s in self.shards:
                    self._publish(s)
            fsync_dir(self.parent)

    def _publish_stage(self) -> None:
        """Rename the staging directory to the output directory, which the up-front check found
        absent (or empty): LirsError naming it, the staging directory removed, where another run
        made it meanwhile (the rename's own error would name the temporary)."""
        try:
            os.replace(self.stage, self.out)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None
            raise LirsError(f"-o {self.out} was created by another run while this one ran; remove it or "
                            "choose another -o") from e
        self.stage = None

    @staticmethod
    def _publish(s: Shard) -> None:
        """Rename one single output's files into place. An old output goes first: a run stopped
        between the renames (killed: SIGKILL, a crash) leaves new labels or a new sidecar without
        data, never beside the old data they do not belong to; an old sidecar a run without
        ``--index`` does not replace is removed before the data is."""
        moves = [(t, f) for t, f in ((s.labels_tmp, s.labels_final), (s.sidecar_tmp, s.sidecar)) if t]
        # without --index, an older run's sidecar goes first: it described the data being replaced
        gone = [s.final] if moves and os.path.exists(s.final) else []
        old = sidecar_path(s.final)  # an index only (the run refused anything else there before it began)
        for p in gone + ([old] if not s.sidecar_tmp and _is_index(old) else []):
            try:
                os.unlink(p)
            except FileNotFoundError:  # removed meanwhile (by hand, or a run not holding the lock); or none
                pass
        for t, f in moves:
            os.replace(t, f)
        os.replace(s.tmp, s.final)

    def name_final(self, e: OSError) -> None:
        """Where ``e`` names a temporary of this layout (a write that failed: ENOSPC, EIO), name the
        file it was to become instead."""
        if not e.filename:
            return
        got = os.path.realpath(e.filename)
        for s in self.shards:
            for t, f in ((s.tmp, s.final), (s.labels_tmp, s.labels_final), (s.sidecar_tmp, s.sidecar)):
                if t and os.path.realpath(t) == got:
                    e.filename = f
                    return

    def abort(self) -> None:
        """Remove what was written (after an error or Ctrl-C)."""
        for s in self.shards:
            if s.indexer is not None:
                s.indexer.abort()
                s.indexer = None
            for p in (s.tmp, s.labels_tmp, s.sidecar_tmp):
                if p and self.stage is None:
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)


@contextmanager
def signals_held():
    """Hold Ctrl-C and SIGTERM over a few renames that must all happen or none: one that comes
    meanwhile is acted on (its handler called: KeyboardInterrupt, or the default's exit) right
    after. The handlers are swapped rather than the signals masked: a signal masked in this thread
    is still taken by another (the shuffle's writer and scan threads), and Python then runs its
    handler here anyway. Outside the main thread (where handlers cannot be set) nothing is held."""
    got: list[int] = []
    old = {}
    if threading.current_thread() is threading.main_thread():
        # a handler set outside Python (getsignal: None) could not be put back: left alone
        for sig in (s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not None):
            old[sig] = signal.signal(sig, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        for sig in dict.fromkeys(got):
            h = old[sig]
            if callable(h):
                h(sig, None)
            elif h == signal.SIG_DFL:
                os.kill(os.getpid(), sig)


def _is_index(path: str) -> bool:
    """Whether ``path`` is a file that starts as a lirs index does (gone or unreadable: not one)."""
    try:
        return os.path.isfile(path) and read_at(path, len(MAGIC)) == MAGIC
    except OSError:
        return False
