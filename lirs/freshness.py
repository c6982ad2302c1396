"""Whether an index still describes its data: the data files' fingerprints (checked at every
open), the staleness verdict when one moved, and the ``lirs index`` command that rebuilds an index.

A fingerprint is cheap (size, mtime, 16 sampled blocks); the exact answer, when size or mtime
moved, comes from the per-MiB checksums the sidecar keeps (:mod:`lirs.content`). :mod:`lirs.sidecar`
knows the sidecar's bytes; this module knows what they promise about the data.
"""
from __future__ import annotations

import json
import logging
import os
import zlib

import numpy as np

from .shellwords import glob_words, listed_words, shell_word
from .dirfiles import first_few, refuse_broken_link
from .errors import IndexFormatError, LirsError, StaleIndexError
from .inputs import absolute, expand_paths, extension_format, labels_candidates, resolve_format
from .samples import SAMPLE_BLOCKS, sample_hash
from .npyformat import NpyRows
from .relpaths import beside, relpath
from .sidecar import SIDECAR_SUFFIX

log = logging.getLogger("lirs.index")


def fingerprint(path: str) -> dict:
    """What identifies the content of ``path`` cheaply: size, mtime_ns and a hash of 16 sampled
    4 KiB blocks (checked at every open). The exact check is the per-MiB checksums kept beside it
    (:mod:`lirs.content`), read again only when size or mtime moved.

    The inode is not part of it: a remount of a FUSE or network filesystem changes inodes of
    unchanged files."""
    from .content import SUM_BLOCK

    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        size = int(st.st_size)
        return {"size": size, "mtime_ns": int(st.st_mtime_ns), "sum_block": SUM_BLOCK,
                "sample_hash": sample_hash(f.fileno(), size, SAMPLE_BLOCKS, path)}


def file_stat(path: str) -> tuple[int, int, int, int]:
    """``(size, mtime_ns, st_dev, st_ino)`` of ``path`` (-1 each where it is missing): which file, as
    what, a Loader's open checked, so that another renamed over it with the same size and mtime
    (``cp -p``, equal shards swapped) is caught at its first epoch; one whose number alone moved is
    compared by its sampled blocks (:func:`lirs.samples.same_samples`)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return -1, -1, -1, -1
    return int(st.st_size), int(st.st_mtime_ns), int(st.st_dev), int(st.st_ino)


def staleness(path: str, expected: dict, sums, trusted_mtime: int | None = None,
              full: bool = False) -> tuple[str | None, int | None, int]:
    """Whether ``path`` still holds the data ``expected`` (a :func:`fingerprint`) and ``sums`` (its
    per-MiB CRC-32C, uint32) describe: ``(why not, None, mtime_ns)``, or ``(None, mtime_ns,
    mtime_ns)`` where the file was read whole to decide (its mtime moved: ``touch``, a copy that
    kept the bytes) and the caller should record the new time, or ``(None, None, mtime_ns)`` when
    the cheap check sufficed; the last: the modification time found (-1: no file).
    ``trusted_mtime``: a modification time already verified (recorded beside a read-only sidecar).
    ``full`` (``lirs index --check``): compared with ``sums`` even where size and mtime match (a
    same-size edit whose mtime was put back is then found too)."""
    from .content import changed_range, first_changed_block

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "the data file is missing", None, -1
    size, mtime = int(st.st_size), int(st.st_mtime_ns)
    old = expected.get("size")
    if size != old:
        grew = " (it grew: an append is re-indexed by scanning only the tail)" if old is not None and size > old else ""
        return f"its size changed ({old} -> {size}){grew}", None, mtime
    if mtime in (expected.get("mtime_ns"), trusted_mtime) and not (full and sums is not None):
        with open(path, "rb") as f:
            if sample_hash(f.fileno(), size, SAMPLE_BLOCKS, path) == expected.get("sample_hash"):
                return None, None, mtime
    if sums is None:
        return (f"its modification time changed ({expected.get('mtime_ns')} -> {mtime})" if mtime != expected.get("mtime_ns")
                else "its content changed: sampled blocks differ, its modification time kept"), None, mtime
    block = first_changed_block(path, sums, size)
    if block is not None:
        return f"its content changed at {changed_range(block, size)}", None, mtime
    if mtime in (expected.get("mtime_ns"), trusted_mtime):
        return None, None, mtime  # read whole (full): nothing to record
    log.info("%s: modification time changed, every byte checked unchanged; the index is still used", path)
    return None, mtime, mtime


def identity(index) -> int:
    """A CRC-32 of what an index serves: where its records lie (:func:`layout_crc`), its
    per-MiB checksums of the data and its ``meta`` (labels files' fingerprints included, but their
    mtimes); unchanged by a header rewritten to record a checked mtime, a data file's or a labels
    file's (a spawned worker reopening the index after a ``touch`` took it for another). 0 for an
    index without a sidecar."""
    if not index.layout:
        return 0
    meta = dict(index.meta)
    if meta.get("label_files"):
        meta["label_files"] = [dict(e, fingerprint={k: v for k, v in e["fingerprint"].items() if k != "mtime_ns"})
                               for e in meta["label_files"]]
    key = json.dumps([index.layout, meta], sort_keys=True, default=str).encode()
    return zlib.crc32(b"" if index.sums is None else np.ascontiguousarray(index.sums).tobytes(), zlib.crc32(key)) or 1


def check_identity(index, expected: int | None) -> None:
    """StaleIndexError when ``index``, opened again by path in a spawned DataLoader worker, is not
    the one a dataset's main process opened (:func:`identity` ``expected``; None or 0: unknown): the
    sidecar was rebuilt in between, and the main process's counts (``len``, resume states) are of
    the old one."""
    if expected and identity(index) != expected:
        raise StaleIndexError(f"{index.sidecar} was rebuilt after the main process opened it (its data changed): "
                              "this worker would serve other records than those counted there; make the dataset again")


def check_data_unmoved(index) -> None:
    """StaleIndexError, the one a Loader's first epoch raises (:func:`lirs.engines.open_indexed`), when a data
    file of ``index`` was removed or no longer has the size and modification time its open found
    (:attr:`lirs.index.Index.checked`), by ``os.stat`` alone: checked before DataLoader workers start, each of
    which would find it (a spawned one opening the index again, a forked one its engine)."""
    from .engines import check_indexed  # the engines' own check (as_indexed), without opening the files

    check_indexed(list(index.paths), index.checked, rebuild_command(index))
    check_labels_unmoved(index)


def check_labels_unmoved(index) -> None:
    """StaleIndexError naming a labels file of ``index`` removed, or holding other labels than its
    sidecar serves, where it moved (size, mtime, another file) since its open checked it
    (:attr:`lirs.index.Index.labels_checked`): a Loader's first epoch would serve the sidecar's
    labels beside rows read now. One moved with its labels kept (``touch``) passes."""
    paths, stats = index.labels_checked
    if not paths or index.checked is None:  # an index opened unchecked: nothing to compare
        return
    moved = {f for f, (p, was) in enumerate(zip(paths, stats)) if file_stat(p) != was}
    if moved:  # those alone, label by label; the sidecar is not rewritten mid-epoch for a touch
        check_label_files(index, only=moved, record=False)


# the arrays that say where every record lies: a plan (and so a resume state) depends on them alone
_LAYOUT_ARRAYS = ("file_starts", "data_ends", "header_sizes", "offsets_base", "offsets_rel", "offsets_wide")


def layout_crc(header: dict) -> int:
    """A CRC-32 of where the records of the sidecar ``header`` lie (its format, count, record size
    and the stored checksums of its offset arrays): equal for two indexes whose epochs plan the same
    batches, whatever their labels; never 0 (0: unknown)."""
    arrays = header.get("arrays", {})
    key = [header.get("format"), header.get("n"), header.get("record_size")]
    key += [[a, arrays[a].get("count"), arrays[a].get("crc32")] for a in _LAYOUT_ARRAYS if a in arrays]
    return zlib.crc32(json.dumps(key).encode()) or 1


def files_crc(paths) -> int:
    """A CRC-32 of the names of a dataset's files in their order (its records' ids follow that
    order), for a dataset of several files: equal shards renamed into another order move records
    without moving any offset. 0 for one file (0: not compared), whose name decides nothing."""
    if len(paths) < 2:
        return 0
    return zlib.crc32(json.dumps([os.path.basename(os.fspath(p)) for p in paths]).encode()) or 1


def reindex_command(paths, sidecar: str | None, index=None, full: bool = False) -> str:
    """The ``lirs index`` command that rebuilds the index ``sidecar`` of the data files ``paths``:
    the file (its own ``FILE.lirs``), the directory (a ``DIR.lirs`` of the files in it), else the
    files with ``-o``; with the options ``index`` (the :class:`~lirs.index.Index` being rebuilt)
    was built with (:func:`format_options`). Its files are listed, or named by a pattern matching them
    alone; where they are too many for either and are ``index``'s own, a ``python3 -c`` that rebuilds
    the index from the list its sidecar keeps (a list cut short, pasted, indexed fewer files).
    ``full``: one that scans every file again (``--full``), not only those whose size, mtime or
    sampled blocks moved."""
    paths = [os.fspath(p) for p in paths]
    words = listed_words(paths) or glob_words(paths)
    if words is None and index is not None and index.sidecar and paths == [os.fspath(p) for p in index.paths]:
        return _python_command(index, "DIR/NAME.lirs" if _read_only(index.sidecar) else index.sidecar, full)
    # (else a list no sidecar keeps: all of it, long as it is)
    command = _command(paths, sidecar, words or " ".join(map(shell_word, paths))) + (
        "" if index is None else format_options(index))
    return command.replace("lirs index ", "lirs index --full ", 1) if full else command


def _python_command(index, out: str, full: bool = False) -> str:
    """A ``python3 -c`` rebuilding ``index`` from the files its sidecar names, into ``out``, with
    the options it was built with (``full``: scanning every file again)."""
    fmt = format_options(index).split()
    opts = dict(zip(fmt[::2], fmt[1::2]))
    kw = "".join(f", {k[2:].replace('-', '_')}={v if k != '--format' else repr(v)}" for k, v in opts.items())
    code = (f"import lirs; lirs.build_index(list(lirs.open_index({index.sidecar!r}, check=False, missing_ok=True)"
            f".paths){kw}, out={out!r}, progress=True{', full=True' if full else ''})")
    return f"python3 -c {shell_word(code)}"


def format_options(index) -> str:
    """The ``lirs index`` options that build ``index``'s format again: ``--record-size`` (and
    ``--header-size``) for raw fixed records, ``--format F`` where it was given (a CSV header kept as
    a record, lines in a ``.svm`` file); "" where detection chose the format."""
    if index.format == "fixed":
        h = int(index.header_sizes[0]) if len(index.header_sizes) else 0
        return f" --record-size {index.record_size}" + (f" --header-size {h}" if h else "")
    given = index.meta.get("format_given")
    if given is None and "format_given" not in index.meta:  # (a sidecar of an older lirs: from the names)
        given = any(extension_format(p) != index.format for p in index.paths)
    return f" --format {index.format}" if given else ""


def _command(paths, sidecar: str | None, words: str) -> str:
    """:func:`reindex_command` without the format options; ``words``: the files as shell words."""
    q = shell_word  # pasted into a shell: a name with a space, or starting with "-", must come through whole
    if _read_only(sidecar):  # it cannot be rebuilt where it is: one put elsewhere is passed as the source
        return f"lirs index {words} -o DIR/NAME.lirs"
    if sidecar and len(paths) == 1 and sidecar == paths[0] + SIDECAR_SUFFIX:
        return f"lirs index {q(paths[0])}"
    d = sidecar[:-len(SIDECAR_SUFFIX)] if sidecar and sidecar.endswith(SIDECAR_SUFFIX) else None
    if d and os.path.isdir(d) and all(os.path.realpath(os.path.dirname(p)) == os.path.realpath(d) for p in paths):
        return f"lirs index {q(d)}"
    return f"lirs index {words}" + (f" -o {q(sidecar)}" if sidecar else "")


def rebuild_inputs(index) -> list[str]:
    """The inputs ``lirs index`` must be given to rebuild ``index``: the directories it was built
    from (``meta["directories"]``, kept relative to its sidecar) and its files in none of them
    (:func:`built_from`). Its files alone would rebuild a directory's index as one of a file list,
    which a shard added to the directory later no longer makes stale: its records left out, unsaid."""
    meta = index.meta or {}
    rels = meta.get("directories", [meta["directory"]] if "directory" in meta else [])
    dirs = [os.path.abspath(d) for d in beside(os.path.dirname(index.sidecar), rels)] if index.sidecar else []
    return built_from(dirs, [os.fspath(p) for p in index.paths])


def rebuild_command(index) -> str:
    """The ``lirs index`` command that rebuilds ``index`` from its inputs (:func:`rebuild_inputs`)."""
    return reindex_command(rebuild_inputs(index), index.sidecar, index)


def rebuild_advice(index, full: bool = False) -> str:
    """"re-run `COMMAND`" rebuilding ``index`` from its inputs (:func:`rebuild_inputs`, :func:`reindex_advice`);
    ``full``: with ``--full``."""
    return reindex_advice(rebuild_inputs(index), index.sidecar, index, full)


def reindex_advice(paths, sidecar: str | None, index=None, full: bool = False) -> str:
    """"re-run `COMMAND`" (:func:`reindex_command`; ``full``: with ``--full``), and where the
    sidecar's directory is read-only, that the index built elsewhere is then passed as the source."""
    advice = f"re-run `{reindex_command(paths, sidecar, index, full)}`"
    if _read_only(sidecar):
        advice += f" in a directory you can write ({os.path.dirname(sidecar)} is read-only), then pass that .lirs file as the source"
    return advice


def _read_only(sidecar: str | None) -> bool:
    """Whether the directory of ``sidecar`` exists and cannot be written (a read-only mount, no permission)."""
    d = os.path.dirname(sidecar) if sidecar else ""
    return bool(d) and os.path.isdir(d) and not os.access(d, os.W_OK)


def label_entries(paths, base: str, fingerprints=None) -> list:
    """What a sidecar in ``base`` keeps of each ``.npy`` file's labels file (``paths``): its path
    relative to ``base`` and its :func:`fingerprint` (``meta["label_files"]``): ``fingerprints``,
    taken before the labels were read, else taken now."""
    fps = fingerprints or [fingerprint(p) for p in paths]
    return [{"relpath": relpath(p, base), "fingerprint": fp} for p, fp in zip(paths, fps)]


def check_label_files(index, full: bool = False, *, only=None, record: bool = True) -> None:
    """Raise StaleIndexError naming the labels file when one beside ``index``'s ``.npy`` data
    (``meta["label_files"]``) is gone, is no regular file now (a FIFO is refused unopened: its open
    would block) or holds other labels than the index took from it (its
    labels are served from the sidecar, so an edit would otherwise go unseen). One whose size or
    mtime moved is read whole and compared, label by label; unchanged (``touch``), its new mtime is
    recorded in the sidecar where it can be rewritten, so that the next open does not read it again.
    ``full``: every labels file is compared, whatever its size and mtime; ``only``: these (numbers) are,
    the others left unread; ``record``: False, a touch is not written to the sidecar."""
    entries = index.meta.get("label_files") or ()
    if index.format == "npy" and not entries and index.label_values is None:
        _no_new_labels(index)
    base = os.path.dirname(index.sidecar or "")
    moved, seen = {}, []
    paths = beside(base, [e["relpath"] for e in entries])
    for f, (e, path) in enumerate(zip(entries, paths)):
        seen.append(file_stat(path))  # before the comparison: a file renamed over after it is caught at the epoch
        if only is not None and f not in only:
            continue
        if os.path.exists(path) and not os.path.isfile(path):  # a FIFO's open (to compare it) would block
            raise StaleIndexError(f"{path}: the labels of {index.paths[f]} changed since indexing (it is not a "
                                  "regular file now: a FIFO, device, socket or directory); the index serves the old "
                                  f"ones: {rebuild_advice(index)}")
        why = staleness(path, e["fingerprint"], None)[0]
        if why is None and not full and only is None:
            continue
        mtime = _mtime_ns(path)
        diff = _label_difference(index, f, path)
        if diff is None:
            if why is not None:
                moved[f] = mtime
            continue
        # asked again: a file rewritten while it was compared has moved since (its size, not a touch)
        why = staleness(path, e["fingerprint"], None)[0] or "its labels differ, its size and modification time kept"
        why = "it is gone" if why == "the data file is missing" else f"{why}; {diff}".replace(
            "its modification time", "its mtime")
        raise StaleIndexError(f"{path}: the labels of {index.paths[f]} changed since indexing ({why}); the index "
                              f"serves the old ones: {rebuild_advice(index)}")
    if moved and index.sidecar and record:
        from .verified import record_labels

        record_labels(index, moved)
    index.labels_checked = (tuple(paths), tuple(seen))


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _no_new_labels(index) -> None:
    """StaleIndexError naming a labels file that appeared beside ``.npy`` data indexed without one
    (its records are served without labels)."""
    for p in index.paths:
        new = next((c for c in labels_candidates(p) if os.path.exists(c)), None)
        if new is not None:
            raise StaleIndexError(f"{new}: a labels file for {p} appeared since indexing; the index serves no labels: "
                                  f"{rebuild_advice(index)}")


def _label_difference(index, f: int, path: str) -> str | None:
    """None when the labels file ``path`` holds exactly the labels ``index`` has for file ``f``, else
    what differs: the first record (numbered within that file) whose label differs, with both
    labels, or the file's shape, or why it could not be read. Compared a million at a time (not
    whole float64 copies of both), read by pread: a memory map of a file rewritten in place
    meanwhile (np.save) killed the opening process with SIGBUS."""
    a, b = int(index.file_starts[f]), int(index.file_starts[f + 1])
    step = 1 << 20
    try:
        now = NpyRows(path)
        if now.shape != (b - a,):
            return f"it holds labels of shape {now.shape}; the index has {b - a} labels"
        for c in range(a, b, step):
            e = min(b, c + step)
            new, old = np.asarray(now[c - a:e - a], np.float64), index.labels_of(np.arange(c, e))
            # NaN is its own label here (np.array_equal's equal_nan), and -0.0 is 0.0
            bad = np.flatnonzero((new != old) & ~(np.isnan(new) & np.isnan(old)))
            if len(bad):
                i = int(bad[0])
                return f"record {c - a + i}: the index has {float(old[i])}, the file has {float(new[i])}"
    except FileNotFoundError:
        return "it is gone"
    # not labels, or cut short while read (DataError: rewritten); an I/O error names its byte
    except (ValueError, EOFError) as e:
        return f"it is no .npy of labels now: {e}"
    return None


def built_from(dirs, paths) -> list[str]:
    """The inputs an index was built from, as `lirs index` must be given them again: its
    directories ``dirs`` and those of its data ``paths`` in none of them (files named on their own,
    which re-indexing the directories alone would drop, unsaid)."""
    real = {os.path.realpath(d) for d in dirs}
    return [*dirs, *(p for p in paths if os.path.realpath(os.path.dirname(p)) not in real)]


def check_no_new_files(idx, path: str) -> None:
    """Raise StaleIndexError when a directory the index was built from (``meta["directories"]``;
    older sidecars: ``meta["directory"]``, else ``path`` or the one of its sidecar ``DIR.lirs``
    holding all its files), or the directory ``path`` itself, holds data files its index does not
    name (added after `lirs index`, or left out of the file list a ``DIR.lirs`` was built from)."""
    base = os.path.dirname(idx.sidecar or "")
    rels = idx.meta.get("directories", [idx.meta["directory"]] if "directory" in idx.meta else None)
    if rels is None:
        d = absolute(path.removesuffix(SIDECAR_SUFFIX))
        dirs = [d] if all(os.path.dirname(os.path.abspath(p)) == d for p in idx.paths) else []
    else:
        dirs = [os.path.abspath(d) for d in beside(base, rels)]
    dirs = [d for d in dirs if os.path.isdir(d)]
    # a directory opened through a DIR.lirs built from a list of its files: serving only the listed
    # ones would leave its other files out, unsaid
    subset = os.path.isdir(path) and os.path.realpath(path) not in {os.path.realpath(d) for d in dirs}
    if subset:
        dirs.append(absolute(path))
    known = {_entry(p) for p in idx.paths}
    # less the stray rule: a DIR.lirs built from the shards its error named, or a README added
    # after the index, is a file the index does not cover
    new = [os.path.relpath(p, os.path.dirname(d)) for d in dirs
           for p in sorted(expand_paths(d, strays=False)) if _entry(p) not in known]
    if new:
        where = dirs[0] if len(dirs) == 1 else ", ".join(dirs)
        names = [os.path.basename(n) if len(dirs) == 1 else n for n in new]
        refused = None if subset else next(((d, why) for d in dirs if (why := _refusal(d, idx))), None)
        if subset and _refusal(dirs[-1], idx):  # advising `lirs index DIR` led to its refusal
            how = (f"they are not {idx.format} data like the files it names, so `lirs index {shell_word(dirs[-1])}` "
                   f"would refuse them: open {idx.sidecar} itself to read only the files it names")
        elif refused:  # (an extensionless shard, a README added to .svm shards): its refusal says what works
            how = f"lirs index would refuse {refused[0]} as it is now: {refused[1]}"
        else:
            how = (f"{reindex_advice([dirs[-1]], idx.sidecar, idx)} to index them all, or open {idx.sidecar} itself "
                   "to read only the files it names" if subset else
                   f"{reindex_advice(built_from(dirs, idx.paths), idx.sidecar, idx)} (it scans only them)")
        raise StaleIndexError(f"{where} holds files its index {idx.sidecar}{', built from a list of files,' if subset else ''}"
                              f" does not cover: {', '.join(names[:3])}"
                              f"{f' and {len(names) - 3} more' if len(names) > 3 else ''}; {how}")


def _entry(p: str) -> tuple[str, str]:
    """The file ``p`` names, as its real directory and its own name: the same file listed through a
    symlinked directory (proj/data -> store) and kept through the link's target compares equal,
    where a second link to a file in the same directory is still a file of its own."""
    p = os.path.abspath(p)
    return os.path.realpath(os.path.dirname(p)), os.path.basename(p)


def _refusal(d: str, idx) -> str | None:
    """None where `lirs index d`, with the format options ``idx`` was built with, reads every data
    file of the directory ``d`` as ``idx``'s format; else why not: its refusal (files of several
    formats, a file without the shards' extension, one unreadable), or the format it would find
    (TFDS shards beside their dataset_info.json)."""
    rs = idx.record_size if idx.format == "fixed" else None
    try:
        fmt = resolve_format(expand_paths(d), idx.meta.get("format_given") or "auto", rs)[0]
    except (LirsError, OSError) as e:
        return str(e)
    return None if fmt == idx.format else f"it would read them as {fmt} data, not {idx.format}"


def data_paths(sidecar: str, header: dict, opened_as: str | None, missing_ok: bool = False) -> list[str]:
    """The data files of a sidecar: its relative paths resolved against its own directory, never
    the absolute paths it was built with (those may name another machine's or another copy's
    files). ``opened_as``: the data path the caller named, which the sidecar must index."""
    base = os.path.dirname(sidecar)
    paths = beside(base, [fi["relpath"] for fi in header["files"]])
    if opened_as is not None:
        # compared through symlinks: the data may be named by a link to it; a directory's files are
        # the names in it, whose own links may lead out of it
        want = os.path.realpath(opened_as)
        inside = ([os.path.realpath(p) for p in paths] == [want]) if not os.path.isdir(want) else all(
            os.path.realpath(os.path.dirname(p)) == want for p in paths)
        if not inside:
            raise IndexFormatError(
                f"{sidecar} indexes {first_few(paths)}, not {want}; "
                f"re-run `lirs index {shell_word(opened_as)}`")
    dirs = sorted({os.path.realpath(d) for d in beside(base, header.get("meta", {}).get("directories", []))})
    for p, fi in zip(paths, header["files"]):
        if not os.path.exists(p) and not missing_ok:  # (missing_ok: an incremental index drops it)
            if os.path.lexists(p):  # a link whose target is gone (a store not mounted): not a file removed
                refuse_broken_link(p)
            whole = os.path.realpath(os.path.dirname(p)) in dirs
            # a file removed from a directory indexed whole; where the directory itself is missing,
            # the sidecar was moved from it (or it renamed): `lirs index` of it would fail
            if whole and os.path.isdir(os.path.dirname(p)):
                raise StaleIndexError(f"{p} was removed from {os.path.dirname(p)} after it was indexed; "
                                      f"{reindex_advice(built_from(dirs, paths), sidecar)}")
            left = [q for q in paths if os.path.exists(q)]
            if left:  # its other files are where it says: not a sidecar moved from its data, but a file removed
                raise StaleIndexError(f"{p} was removed since indexing; {reindex_advice(built_from([d for d in dirs if os.path.isdir(d)], left), sidecar)} "
                                      "to index the files that remain")
            built = "" if fi["path"] == p else f" (the index was built for {fi['path']})"
            if whole:  # the directory is what was indexed, and what is missing
                was = os.path.dirname(fi["path"])
                p, built = os.path.dirname(p), "" if was == os.path.dirname(p) else f" (the index was built for the directory {was})"
            raise IndexFormatError(
                f"{sidecar} indexes {p}, which does not exist{built}; "
                f"a sidecar serves only the files beside it: move it back with its data or run `lirs index` "
                f"on the data you want to read")
    return paths
