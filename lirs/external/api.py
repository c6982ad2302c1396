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

Randomness follows the seed scheme: ``SeedSequence([seed, 0, PURPOSE_PILES], spawn_key=path)``
keys the pile draws of the top level (path ``()``) and of every re-split pile (its path of pile
numbers); ``PURPOSE_ORDER`` keys the shuffle inside each final pile. A record's pile depends only
on the key and the record's number in the input, not on chunk sizes, so the output is a function
of the input records, ``seed`` and the pile count M (``stats["piles"]``, chosen from ``memory``).

Records:

* ``lines``: every line is a record, empty lines included; its bytes (``\\r\\n`` too) are kept.
* ``libsvm``: a record is a line that is not blank or comment-only (the definition of
  :mod:`lirs.scan`); blank and comment-only lines are dropped (counted in ``stats``), a comment
  after a record's features stays on its line.
* text: the last line of an input without a trailing newline gets one (``\\n``) in the output, so
  records never merge (``stats["added_newlines"]``).
* ``npy``: records are rows; the output is a ``.npy`` with a header for its row count, and labels in
  ``INPUT.labels.npy`` follow their rows into ``OUT.labels.npy`` (``lirs.build.labels_path``).
* ``fixed``: records of ``record_size`` bytes after a ``header_size``-byte header in every input;
  the output holds the records only (no header).

The output is written under temporary names and renamed at the end; piles live in a temporary
directory under ``tmpdir`` (default: next to the output) that is removed on success, on error and
on Ctrl-C.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..constants import BLOCK
from ..errors import DataError, LirsError, UsageError
from ..index import VARIABLE_FORMATS
from ..kernels import external as K
from ..sidecar import sidecar_path
from ..units import format_bytes, parse_size
from .disk import _check_space, _direct_ok, _fsync_dir
from .formats import _detect, _mean_text_record, _sources
from .memory import MemoryPlan, _fd_pile_limit, _max_line, plan_memory  # noqa: F401
from .passes import PURPOSE_PILES, _key, _Run
from .piles import _Dealer, _Piles
from .writer import _Output, _Shard

log = logging.getLogger("lirs.external")


def _shard_names(out: str, shards: int, ext: str) -> list[str]:
    width = max(5, len(str(shards - 1)))
    return [f"part-{k:0{width}d}{ext}" for k in range(shards)]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


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
        size in free space, the output directory as much again.
    seed : int
        Same inputs, seed and memory plan (pile count) → byte-identical output.
    index : bool
        Also write each output's lirs sidecar (``OUT.lirs``, or ``part-*.lirs`` per shard),
        identical to what ``lirs index`` would write; text formats build it from the output
        buffers as they are written (and LIBSVM inputs are checked in pass 1).
    progress : bool or None
        tqdm bars for both passes; None = only when stderr is a terminal.
    format : "auto", "libsvm", "lines", "npy" or "fixed"
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
    from tqdm import tqdm

    from ..build import expand_paths, labels_path

    t_start = time.perf_counter()
    if shards is not None:
        if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or shards < 1:
            raise UsageError(f"--shards must be a positive integer, got {shards!r}")
        shards = int(shards)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    if record_size is not None and (isinstance(record_size, bool) or int(record_size) <= 0):
        raise UsageError("--record-size must be a positive number of bytes")
    mem = parse_size(memory)
    if not out:
        raise UsageError("name the output with -o OUT")
    out = os.path.abspath(os.fspath(out))
    files = expand_paths(inputs)
    fmt = _detect(files, format, record_size)
    srcs, rs, dtype, shape, linfo = _sources(files, fmt, record_size, header_size)
    text = fmt in VARIABLE_FORMATS
    ls = linfo[2] if linfo else 0

    # where things go
    for p in files:
        if _same_file(p, out) or (linfo and _same_file(labels_path(out), p)):
            raise UsageError(f"output {out} is one of the inputs; write the shuffle to a new file")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise FileNotFoundError(2, "No such file or directory", parent)
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
        raise FileNotFoundError(2, "No such file or directory", tmpdir)

    # memory plan
    in_bytes = sum(s.end - s.start for s in srcs)
    if text:
        mean = _mean_text_record(srcs[0].path, srcs[0].end)
        pile_bytes = in_bytes + len(srcs)   # a newline may be added per input
        rr = 0
    else:
        rr = rs + ls
        mean = rr
        pile_bytes = sum(s.n for s in srcs) * rr
    max_piles = int(_max_piles or _fd_pile_limit())
    plan = plan_memory(pile_bytes, mean, mem, record_bytes=rr, label_ratio=(ls / rs if rs else 0.0),
                       index=index and text, validate=index and fmt == "libsvm", max_piles=max_piles)
    out_bytes = in_bytes + (sum(s.n for s in srcs) * ls if ls else 0) + (len(srcs) if text else 1 << 16)
    _check_space(tmpdir, parent, pile_bytes, out_bytes)

    disable = None if progress is None else not progress
    pid = os.getpid()
    pile_dir = tempfile.mkdtemp(prefix=".lirs-shuffle-", dir=tmpdir)
    direct_piles = _direct_ok(pile_dir)
    direct_out = _direct_ok(parent)
    block = BLOCK if direct_piles else 1
    stage = None                    # sharded output: the directory being filled
    shard_list: list[_Shard] = []
    output = None
    run = None
    pool = ThreadPoolExecutor(2) if index and text else None
    try:
        # ---- pass 1
        t1 = time.perf_counter()
        piles = _Piles(pile_dir, "p", plan.piles, max(plan.write_buffer, rr + block), direct_piles)
        try:
            with tqdm(total=in_bytes, unit="B", unit_scale=True, desc="lirs shuffle pass 1", disable=disable,
                      leave=False) as bar:
                dealer = _Dealer(fmt, piles, _key(seed, PURPOSE_PILES, ()), plan.chunk,
                                 skip_blank=(fmt == "libsvm"), rs=rs or 0, ls=ls,
                                 validate=plan.validate_piece if index and fmt == "libsvm" else 0,
                                 max_record=_max_line(plan, index) if text else None,
                                 bar=bar, memory=mem, pool=pool)
                for s in srcs:
                    dealer.deal(s)
            piles.finish()
        except BaseException:
            piles.close()
            raise
        t_pass1 = time.perf_counter() - t1
        n = int(piles.counts.sum())
        if n == 0:
            raise DataError(f"{files[0]}: no records found (only blank or comment lines)")
        if shards is not None and shards > n:
            raise UsageError(f"--shards {shards} is more than the {n} records")

        # ---- outputs
        ext = os.path.splitext(files[0])[1] if fmt != "npy" else ".npy"
        if shards is None:
            counts = [n]
            finals = [out]
            tmps = [os.path.join(parent, f".{os.path.basename(out)}.tmp-{pid}")]
        else:
            counts = [n // shards + (1 if k < n % shards else 0) for k in range(shards)]
            stage = os.path.join(parent, f".{os.path.basename(out)}.tmp-{pid}")
            os.mkdir(stage)
            names = _shard_names(out, shards, ext)
            finals = [os.path.join(out, nm) for nm in names]
            tmps = [os.path.join(stage, nm) for nm in names]
        for f, t, c in zip(finals, tmps, counts):
            sh = _Shard(final=f, tmp=t, count=c)
            if linfo is not None:
                sh.labels_final = labels_path(f)
                sh.labels_tmp = labels_path(t) if stage else os.path.join(
                    parent, f".{os.path.basename(labels_path(f))}.tmp-{pid}")
            if index:
                sh.sidecar = sidecar_path(f)
            shard_list.append(sh)

        def sidecar_tmp(s: _Shard) -> str:
            # sharded sidecars are written inside the staging directory, single ones in place
            return os.path.join(stage, os.path.basename(s.sidecar)) if stage else s.sidecar

        output = _Output(fmt, shard_list, plan, rs=rs or 0, ls=ls, dtype=dtype, shape=shape, linfo=linfo,
                         index=index, scratch=pile_dir, pool=pool, sidecar_tmp=sidecar_tmp, direct=direct_out)

        # ---- pass 2
        t2 = time.perf_counter()
        with tqdm(total=int(piles.nbytes.sum()), unit="B", unit_scale=True, desc="lirs shuffle pass 2",
                  disable=disable, leave=False) as bar:
            run = _Run(fmt, plan, seed, pile_dir, output, rs or 0, ls, bar, max_piles, direct_piles)
            run.emit(piles)
        if output.records != n or len(output.done) != len(shard_list):
            raise LirsError(f"wrote {output.records} of {n} records; the piles were changed during the shuffle")
        output.close()
        t_pass2 = time.perf_counter() - t2

        # ---- into place: labels before data, data before sidecars
        if stage is not None:
            for s in shard_list:  # sidecars inside the staging directory, naming the final paths
                if s.indexer is not None:
                    s.indexer, ix = None, s.indexer
                    ix.commit(s.data_end, s.tmp)
            os.replace(stage, out)
            stage = None
        else:
            for s in shard_list:
                if s.labels_tmp:
                    os.replace(s.labels_tmp, s.labels_final)
                os.replace(s.tmp, s.final)
        _fsync_dir(parent)
        for s in shard_list:
            if s.indexer is not None:
                s.indexer, ix = None, s.indexer
                ix.commit(s.data_end, s.final)
        if index and not text:
            from ..build import build  # nothing to scan: header, record size and count, labels

            for s in shard_list:
                build(s.final, format=fmt, record_size=rs if fmt == "fixed" else None,
                      out=s.sidecar, progress=False)
    except BaseException:
        if output is not None:
            try:
                output.close()
            except Exception:  # the original error matters more
                pass
        for s in shard_list:
            if s.indexer is not None:
                s.indexer.abort()
                s.indexer = None
            for p in (s.tmp, s.labels_tmp):
                if p and stage is None:
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        if run is not None:
            run.close()
        shutil.rmtree(pile_dir, ignore_errors=True)
        if pool is not None:
            pool.shutdown(wait=True)

    secs = time.perf_counter() - t_start
    peak1 = plan.pass1_bytes
    peak2 = run.peak_pile + plan.out_fixed
    stats = {
        "records": n,
        "bytes": int(in_bytes),
        "output_bytes": int(sum(os.path.getsize(s.final) for s in shard_list)),
        "format": fmt,
        "inputs": files,
        "outputs": [s.final for s in shard_list],
        "shards": shards,
        "seed": seed,
        "piles": plan.piles,
        "splits": run.splits,
        "split_bytes": run.split_bytes,
        "depth": run.max_depth,
        "direct_io": {"piles": direct_piles, "output": direct_out},
        "seconds_pass1": round(t_pass1, 4),
        "seconds_pass2": round(t_pass2, 4),
        "seconds": round(secs, 4),
        "memory": plan.memory,
        "peak_memory_estimate": int(max(peak1, peak2)),
        "pass1_memory_estimate": int(peak1),
        "pass2_memory_estimate": int(peak2),
        "plan": {"chunk": plan.chunk, "write_buffer": plan.write_buffer, "piles": plan.piles,
                 "pile_cap": plan.pile_cap, "out_buffer": plan.out_buffer,
                 "expected_pile": plan.expected_pile},
        "skipped_lines": int(dealer.info[K.INFO_SKIPPED_LINES]),
        "skipped_bytes": int(dealer.info[K.INFO_SKIPPED_BYTES]),
        "added_newlines": int(dealer.info[K.INFO_ADDED_NEWLINES]),
    }
    if linfo is not None:
        stats["labels"] = [s.labels_final for s in shard_list]
    if index:
        stats["sidecars"] = [s.sidecar for s in shard_list]
    log.info("shuffled %d records (%s) into %d file(s) in %.2fs (pass 1 %.2fs, pass 2 %.2fs, %d piles)",
             n, format_bytes(in_bytes), len(shard_list), secs, t_pass1, t_pass2, plan.piles)
    return stats
