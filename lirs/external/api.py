"""`lirs shuffle`: an exact two-pass external shuffle of files larger than RAM.

    shuffle(inputs, out, *, shards=None, memory="2G", tmpdir=None, seed=0, index=False,
            progress=None, format="auto", record_size=None, header_size=0) -> dict
    plan_memory(input_bytes, mean_record_bytes, memory, ...) -> MemoryPlan

Pass 1 streams the inputs in large chunks and deals every record to one of M piles on disk, the
pile drawn uniformly at random for each record; each pile has a write buffer, so pile writes are
large. Pass 2 loads one pile at a time, shuffles its records in RAM (Fisher-Yates over the start
offsets) and appends them to the output: one file, or K shards of consecutive records. Reading,
dealing/gathering and writing overlap on threads (the kernels release the GIL); piles and output
are written with O_DIRECT in whole blocks where the filesystem takes it (probed), which keeps the
CPU out of the page cache, and through the page cache otherwise.

The output is a uniformly random permutation of the input records: choosing pile j for record i is
the first digit (base M) of a uniform key U_i, and the shuffle inside a pile sorts on the remaining
digits. The sizes of the piles carry no information about the order inside them, so a pile that
turns out too big for memory is split again (another pass over that pile alone, into sub-piles
with fresh draws) and never truncated: no bias.

Randomness follows the seed scheme (:mod:`lirs.seeds`): ``SeedSequence([seed, 0, SHUFFLE_PILES],
spawn_key=path)`` keys the pile draws of the top level (path ``()``) and of every re-split pile (its
path of pile numbers); ``SHUFFLE_ORDER`` keys the shuffle inside each final pile. A record's pile
depends only on the key and the record's number in the input, not on chunk sizes, so the output is
a function of the input records, ``seed`` and the memory plan's shape (pile count M,
``stats["piles"]``, and pile cap, chosen from ``memory``); ``--index`` does not change it.

Records:

* ``lines``: every line is a record, empty lines included; its bytes (``\\r\\n`` too) are kept.
* ``libsvm``: a record is a line that is not blank or comment-only (the definition of
  :mod:`lirs.build`); blank and comment-only lines are dropped (counted in ``stats``), a comment
  after a record's features stays on its line.
* text: the last line of an input without a trailing newline gets one (``\\n``) in the output, so
  records never merge (``stats["added_newlines"]``).
* ``npy``: records are rows; the output is a ``.npy`` with a header for its row count, and labels in
  ``INPUT.labels.npy`` follow their rows into ``OUT.labels.npy`` (``lirs.inputs.labels_path``).
* ``fixed``: records of ``record_size`` bytes after a ``header_size``-byte header in every input;
  the output holds the records only (no header).

The output is written under temporary names and renamed at the end; piles live in a temporary
directory under ``tmpdir`` (default: next to the output) that is removed on success, on error and
on Ctrl-C.

The parts: :mod:`.formats` (inputs), :mod:`.memory` (the plan), :mod:`.piles` (dealing),
:mod:`.writer` (the output writer), :mod:`.indexer` (sidecars of text outputs), :mod:`.passes`
(both passes), :mod:`.outputs` (names and the move into place), :mod:`.disk` (I/O helpers).
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..api import whole
from ..dirfiles import data_ext
from ..inputs import absolute, expand_paths, extension_format, labels_candidates, labels_path
from ..sidecar import belonging, check_replaceable, sidecar_path
from ..errors import DataError, LirsError, UsageError
from ..kernels import external as K
from ..litter import clean_dead, clean_dead_litter, out_dir
from ..units import format_bytes, parse_size
from .disk import check_space, direct_ok
from .formats import Dataset, open_dataset
from .memory import MemoryPlan, fd_pile_limit, plan_memory
from .outputs import Layout, read_back_as
from .passes import Pass2, pass1, pass2
from .writer import Output

log = logging.getLogger("lirs.external")


PILE_DIR_PATTERN = r"\.lirs-shuffle-(?P<pid>\d+)-\w+"  # pile directories: .lirs-shuffle-PID-XXXX


def shuffle(inputs, out, *, shards=None, memory="2G", tmpdir=None, seed=0, index=False, progress=None,
            format="auto", record_size=None, header_size=0, _max_piles=None) -> dict:
    """Write a uniformly random permutation of the records of ``inputs`` to ``out``.

    Parameters
    ----------
    inputs : path or list of paths
        Data files (or a directory of them) of one format; several inputs concatenate into one
        dataset before shuffling.
    out : path
        The output file; with ``shards=K`` a directory (created; must not exist or be empty) that
        receives ``part-00000.EXT`` ... ``part-{K-1}.EXT``, each holding consecutive records of the
        shuffled order (record counts differ by at most one).
    memory : int or str
        The memory cap, like ``"2G"``: read chunks, pile write buffers and the pile being shuffled
        stay within it (see :class:`MemoryPlan`).
    tmpdir : path, optional
        Where the pile directory goes (default: the output's directory). Needs about the input's
        size in free space, the output directory as much again (with ``index``, and the sidecar's
        ~5 B a record); checked before any work.
    seed : int
        Same inputs, seed and memory plan (pile count) → byte-identical output, with or without
        ``index``.
    index : bool
        Also write each output's lirs sidecar (``OUT.lirs``, or ``part-*.lirs`` per shard),
        identical to what ``lirs index`` would write; text formats build it from the output
        buffers as they are written (and LIBSVM inputs are checked in pass 1).
    progress : bool or None
        tqdm bars for both passes; None = only when stderr is a terminal.
    format : "auto", "libsvm", "lines", "npy", "tfrecord" or "fixed"
        As in ``lirs index``; ``record_size`` (and ``header_size``) select raw fixed records.

    Returns
    -------
    dict with ``records``, ``bytes`` (input record bytes), ``output_bytes``, ``format``, ``piles``
    (M), ``splits`` (piles split again), ``seconds_pass1``, ``seconds_pass2``, ``seconds``,
    ``memory``, ``peak_memory_estimate`` (bytes of buffers held at the fullest point),
    ``outputs`` (paths), ``labels`` (label files, npy), ``sidecars`` (with ``index``),
    ``skipped_lines``/``skipped_bytes`` (LIBSVM blank and comment-only lines),
    ``added_newlines``, ``seed`` and the memory plan.
    """
    t_start = time.perf_counter()
    shards, seed = _check_numbers(shards, seed)
    # as build() checks them: 16.0 failed with a TypeError in pass 1, 1.5 as "1.0 trailing bytes"
    record_size = None if record_size is None else whole("record_size", record_size, 1)
    header_size = whole("header_size", header_size, 0)
    mem = parse_size(memory)
    if not out:
        raise UsageError("name the output with -o OUT")
    out = absolute(out)
    files = expand_paths(inputs, "inputs")
    ds = open_dataset(files, format, record_size, header_size, index=index)
    _check_name(out, shards, ds)
    parent, tmpdir = _check_places(inputs, files, out, shards, tmpdir, labels=ds.linfo is not None,
                                   npy=ds.fmt == "npy", index=index)
    max_piles = int(_max_piles or fd_pile_limit())
    mean = ds.mean_record()
    plan = plan_memory(ds.pile_bytes, mean, mem, record_bytes=ds.rr,
                       label_ratio=(ds.ls / ds.rs if ds.rs else 0.0), index=index and ds.text,
                       validate=index and ds.fmt == "libsvm", max_piles=max_piles)
    check_space(tmpdir, parent, ds.pile_bytes, ds.out_bytes, ds.sidecar_bytes(mean) if index else 0)
    # piles of a killed shuffle (GBs) are removed by the next one; a live one's are left alone
    clean_dead(tmpdir, PILE_DIR_PATTERN)
    clean_dead_litter(parent)  # outputs and sidecar temps of a killed shuffle, whatever their names
    pile_dir = tempfile.mkdtemp(prefix=f".lirs-shuffle-{os.getpid()}-", dir=tmpdir)
    pool = ThreadPoolExecutor(2) if index and ds.text else None  # the index scans of text outputs
    try:
        direct = {"piles": direct_ok(pile_dir), "output": direct_ok(parent)}
        res = _run(ds, plan, out, parent, pile_dir, shards=shards, seed=seed, index=index, direct=direct,
                   max_piles=max_piles, pool=pool, quiet=None if progress is None else not progress)
    finally:
        shutil.rmtree(pile_dir, ignore_errors=True)
        if pool is not None:
            pool.shutdown(wait=True)
    st = _stats(ds, plan, res, shards=shards, seed=seed, index=index, direct=direct,
                secs=time.perf_counter() - t_start)
    log.info("shuffled %d records (%s) into %d file(s) in %.2fs (pass 1 %.2fs, pass 2 %.2fs, %d piles)",
             st["records"], format_bytes(st["bytes"]), len(st["outputs"]), st["seconds"], st["seconds_pass1"],
             st["seconds_pass2"], plan.piles)
    return st


def _check_numbers(shards, seed) -> tuple[int | None, int]:
    """``shards`` and ``seed`` as ints, after checking them."""
    if shards is not None:
        if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or shards < 1:
            raise UsageError(f"--shards must be a positive integer, got {shards!r}")
        shards = int(shards)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {seed!r}")
    return shards, int(seed)


def _check_name(out: str, shards, ds) -> None:
    """Refuse a single output whose extension names another format than its records' (a
    TFRecord shuffle written to ``o.svm`` would be read back as LIBSVM and fail), a compression
    (the records are written plain: ``o.svm.gz`` would be refused as a misnamed gzip file) or a
    lirs index (``o.lirs``: read as one, it is not)."""
    why = None if shards is not None else read_back_as(out, ds.fmt)  # a --shards directory is read as files
    if why in ("a lirs index", "compressed"):
        raise UsageError(f"output {out} would be read back as {why} (its extension), but lirs shuffle writes "
                         f"plain records: name it without {os.path.splitext(out)[1].lower()}")
    if why is not None:
        raise UsageError(f"output {out} would be read back as {why} (its extension), but the records are "
                         f"{ds.fmt}; name it with {_output_ext(ds)}")


# a TFDS shard's "-00000-of-00004" (x.tfrecord-00000-of-00004): kept, every part file claimed to
# be shard 0 of the input's count
_TFDS_SHARD = re.compile(r"-\d+-of-\d+$")


def _output_ext(ds) -> str:
    """The extension of an output of ``ds``'s records: the first input's where it names their
    format (a rotated file's ``.1`` and a TFDS shard's ``-00000-of-00004`` dropped), else ``.bin``
    (raw fixed records of ``x.npy`` are not a .npy file; ``data.v2``'s ``.v2`` names no format)."""
    if ds.fmt == "npy":
        return ".npy"
    ext = data_ext(_TFDS_SHARD.sub("", ds.files[0]))
    return ext if extension_format("x" + ext) == ds.fmt else ".bin"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _check_places(inputs, files, out: str, shards, tmpdir, *, labels: bool, npy: bool = False,
                  index: bool = False) -> tuple[str, str]:
    """(output directory, pile directory's parent) after checking that the output, its labels
    file and its index overwrite no input nor a file that belongs to one, and that the
    directories exist."""
    written = [out] + ([labels_path(out)] if labels else []) + ([sidecar_path(out)] if index else [])
    for p in files:
        for q, what in belonging(p).items():
            hit = next((w for w in written if _same_file(w, q)), None) if shards is None else None
            if hit is not None:
                raise UsageError(f"output {hit} would be {what} of the input {p}: write the shuffle elsewhere"
                                 if what != "the data" else
                                 f"output {out} is one of the inputs; write the shuffle to a new file")
    parent = out_dir(out, "-o", directory_ok=True)
    for p in written[1:] if shards is None else ():  # the labels file and the index written beside it
        out_dir(p, "-o")
    _check_beside(inputs, files, out, shards, labels, npy)
    if shards is None:
        if os.path.isdir(out):
            raise UsageError(f"output {out} is a directory; name a file, or write shards into it with --shards K")
    else:
        if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
            raise UsageError(f"output {out} exists and is not an empty directory; --shards writes a new "
                             "directory of part files")
        for p in files:
            if os.path.commonpath([p, out]) == out:
                raise UsageError(f"input {p} lies inside the output directory {out}")
    tmpdir = os.path.abspath(tmpdir) if tmpdir else parent
    if not os.path.isdir(tmpdir):
        raise UsageError(f"--tmpdir {tmpdir} is not a directory")
    if shards is not None and os.path.commonpath([tmpdir, out]) == out:  # the piles would block its rename
        raise UsageError(f"--tmpdir {tmpdir} lies inside the output directory {out}; put the piles elsewhere")
    return parent, tmpdir


def _check_beside(inputs, files, out: str, shards, labels: bool, npy: bool) -> None:
    """Refuse a single output written into a directory read as the dataset (the next read of it
    takes the shuffle as more data: every record twice), a file not an index (or a directory) where
    its sidecar goes (:func:`lirs.sidecar.check_replaceable`), and a labels file beside an output of
    ``.npy`` rows (``npy``) that this run does not write (it would be read as the new rows' labels)."""
    if shards is not None:
        return
    # OUT.lirs: this run's sidecar replaces it (--index), or it goes with the old output (without)
    if os.path.isdir(sidecar_path(out)):
        raise UsageError(f"{sidecar_path(out)} is a directory where the output's index goes: move it away")
    check_replaceable(sidecar_path(out))
    for d in [absolute(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]:
        if os.path.isdir(d) and _same_file(os.path.dirname(out), d):  # through a link too
            raise UsageError(f"output {out} lies in the input directory {d}, whose files are the dataset: write "
                             "it elsewhere")
    stray = [c for c in labels_candidates(out) if npy and os.path.exists(c) and not (labels and c == labels_path(out))]
    if stray:
        raise UsageError(f"{stray[0]} lies beside the output and would be read as its labels ("
                         f"{'this shuffle writes ' + labels_path(out) if labels else 'its records have none'}): "
                         "move it away, or write the output elsewhere")


@dataclass
class _Result:
    records: int
    info: np.ndarray       # int64 (3,): skipped lines, skipped bytes, added newlines
    pass2: Pass2
    layout: Layout
    seconds_pass1: float
    seconds_pass2: float


def _run(ds: Dataset, plan: MemoryPlan, out: str, parent: str, pile_dir: str, *, shards, seed: int,
         index: bool, direct: dict, max_piles: int, pool, quiet) -> _Result:
    """Both passes and the move into place. Removes the output's temporaries on any error (the
    caller removes the piles)."""
    layout = output = None
    try:
        t1 = time.perf_counter()
        piles, info = pass1(ds, plan, pile_dir, seed, direct=direct["piles"], index=index, pool=pool,
                            quiet=quiet)
        t_pass1 = time.perf_counter() - t1
        n = int(piles.counts.sum())
        if n == 0:
            raise DataError(f"{ds.files[0]}: no records found (only blank or comment lines)")
        if shards is not None and shards > n:
            raise UsageError(f"--shards {shards} is more than the {n} records")
        ext = _output_ext(ds)
        layout = Layout(out, parent, shards, ext, n, labels=ds.linfo is not None, index=index)
        output = Output(ds, layout.shards, plan, index=index, scratch=pile_dir, pool=pool,
                        direct=direct["output"])
        t2 = time.perf_counter()
        run = pass2(piles, ds, plan, seed, pile_dir, output, max_piles=max_piles, direct=direct["piles"],
                    quiet=quiet)
        if output.records != n or len(output.done) != len(layout.shards):
            raise LirsError(f"wrote {output.records} of {n} records; the piles were changed during the shuffle")
        output.close()
        t_pass2 = time.perf_counter() - t2
        layout.commit(ds, index)
    except BaseException as e:
        if layout is not None and isinstance(e, OSError):
            layout.name_final(e)  # ENOSPC in a temporary: the output it was to be is what the user knows
        if output is not None:
            try:
                output.close()
            except Exception:  # noqa: BLE001,S110 - the original error matters more
                pass
        if layout is not None:
            layout.abort()
        raise
    return _Result(n, info, run, layout, t_pass1, t_pass2)


def _stats(ds: Dataset, plan: MemoryPlan, res: _Result, *, shards, seed: int, index: bool, direct: dict,
           secs: float) -> dict:
    """The dict :func:`shuffle` returns."""
    peak1, peak2 = plan.pass1_bytes, res.pass2.peak_pile + plan.out_fixed
    done = res.layout.shards
    st = {
        "records": res.records,
        "bytes": int(ds.in_bytes),
        "output_bytes": int(sum(s.size for s in done)),
        "format": ds.fmt,
        "inputs": ds.files,
        "outputs": [s.final for s in done],
        "shards": shards,
        "seed": seed,
        "piles": plan.piles,
        "splits": res.pass2.splits,
        "split_bytes": res.pass2.split_bytes,
        "depth": res.pass2.max_depth,
        "direct_io": direct,
        "seconds_pass1": round(res.seconds_pass1, 4),
        "seconds_pass2": round(res.seconds_pass2, 4),
        "seconds": round(secs, 4),
        "memory": plan.memory,
        "peak_memory_estimate": int(max(peak1, peak2)),
        "pass1_memory_estimate": int(peak1),
        "pass2_memory_estimate": int(peak2),
        "plan": {"chunk": plan.chunk, "write_buffer": plan.write_buffer, "piles": plan.piles,
                 "pile_cap": plan.pile_cap, "out_buffer": plan.out_buffer,
                 "expected_pile": plan.expected_pile},
        "skipped_lines": int(res.info[K.INFO_SKIPPED_LINES]),
        "skipped_bytes": int(res.info[K.INFO_SKIPPED_BYTES]),
        "added_newlines": int(res.info[K.INFO_ADDED_NEWLINES]),
    }
    if ds.linfo is not None:
        st["labels"] = [s.labels_final for s in done]
    if index:
        st["sidecars"] = [s.sidecar for s in done]
    return st
