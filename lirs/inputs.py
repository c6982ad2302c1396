"""The inputs of a scan: which files form a dataset, which format they hold, and their bytes read
sequentially in chunks with the next read in flight."""
from __future__ import annotations

import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .constants import BLOCK, FORMATS, SCAN_CHUNKS_AHEAD, SCAN_READ_BYTES, SCAN_READ_DEPTH
from .errors import DataError, UsageError
from .dirfiles import data_ext, directory_files, first_few
from .shellwords import index_command, shell_glob, shell_word
from .mounts import held_in_memory
from .preads import pread_into, read_at

log = logging.getLogger("lirs.inputs")

_EXT_FORMAT = {
    ".svm": "libsvm", ".libsvm": "libsvm", ".svmlight": "libsvm", ".scale": "libsvm", ".t": "libsvm",
    ".jsonl": "lines", ".ndjson": "lines", ".json": "lines", ".csv": "lines", ".tsv": "lines",
    ".npy": "npy", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
}
# compressed files: extension -> the command that decompresses one; magic bytes -> its name
_COMPRESSED_EXT = {".gz": ("gzip", "gunzip"), ".bz2": ("bzip2", "bunzip2"), ".xz": ("xz", "unxz"),
                   ".zst": ("zstd", "unzstd"), ".zip": ("zip", "unzip"), ".lz4": ("lz4", "unlz4"),
                   ".lzma": ("lzma", "unlzma")}
_COMPRESSED_MAGIC = ((b"\x1f\x8b", ".gz"), (b"\xfd7zXZ\x00", ".xz"), (b"\x28\xb5\x2f\xfd", ".zst"),
                     (b"PK\x03\x04", ".zip"), (b"\x04\x22\x4d\x18", ".lz4"), (b"\x5d\x00\x00", ".lzma"))
_BZIP2 = re.compile(rb"^BZh[1-9]1AY&SY")
# a label is a number (any run of digits, dots and the letters of "inf" and "nan" let IP addresses,
# versions and words such as "fine" pass as labels, and the parser then refused the file)
_LABEL = rb"[-+]?(?:(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?|(?i:inf(?:inity)?|nan))"
_LIBSVM_LINE = re.compile(rb"^\s*" + _LABEL + rb"(\s+qid[^\s:]*:\S*)?(\s+[-+]?\d+:\S+)*\s*(#.*)?$")
_HEAD = 1 << 16  # what detection reads of a file: enough for its first lines, as a rule
# where no data line ends within the head (a LIBSVM record of 9,000 features is 80 KB, and comment
# blocks can be long), detection reads on, doubling, up to this bound
_DETECT_MAX = 4 << 20


# --------------------------------------------------------------------------- inputs


def labels_path(path: str) -> str:
    """Where the labels of ``X.npy`` live: ``X.npy.labels.npy`` (float64, shape (n,))."""
    return os.fspath(path) + ".labels.npy"


def labels_candidates(path: str) -> list[str]:
    """The names the labels file of ``X.npy`` may have: ``X.labels.npy``, ``X.npy.labels.npy``."""
    path = os.fspath(path)
    return ([path[:-4] + ".labels.npy"] if path.endswith(".npy") else []) + [labels_path(path)]


def text_paths(paths):
    """``paths`` (a path or a list of them: ``str``, ``bytes`` as ``os.fsencode`` gives them, or
    ``os.PathLike``) with every path a ``str``."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        return os.fsdecode(paths)
    return [os.fsdecode(p) for p in paths]


def absolute_source(source):
    """A Loader's ``source`` with its paths made absolute (a path, ``bytes`` too, or a list of
    them); anything else (an Index) as it is."""
    if isinstance(source, (str, bytes, os.PathLike)):
        return absolute(text_paths(source))
    if isinstance(source, (list, tuple)) and all(isinstance(p, (str, bytes, os.PathLike)) for p in source):
        return [absolute(p) for p in text_paths(source)]
    return source


def absolute(path) -> str:
    """``path`` made absolute where the kernel finds it. ``os.path.abspath`` folds ``L/..`` by
    text, but where ``L`` is a symlink the kernel goes to the link target's parent: a path with a
    ``..`` has its directory resolved through links (its last name kept, so a link to the data
    stays the link); any other path is ``abspath``'s."""
    p = os.fspath(path)
    if ".." not in p.split(os.sep):
        return os.path.abspath(p)
    head, tail = os.path.split(p.rstrip(os.sep) or p)
    if tail in ("", ".", ".."):
        return os.path.realpath(p)
    return os.path.join(os.path.realpath(head or "."), tail)


def expand_paths(paths, name: str = "paths", strays: bool = True) -> list[str]:
    """Files of a dataset: one file, several files, or the regular files of a directory (sorted);
    UsageError naming the parameter ``name`` for an empty list.

    Sidecars (``*.lirs``), saved bench recommendations (``*.lirs.bench.json``), hidden files,
    editors' backups and autosaves (``*~``, ``#*#``, ``*.bak``, ``*.orig``, ``*.swp``) and
    ``*.labels.npy`` label files are not data; nor is a directory's empty file, which holds no
    records (a shard a writer left empty, Spark's ``_SUCCESS``): once it holds some, it is a file
    the index does not cover. A directory whose files are named by a known extension must hold no
    other (:func:`refuse_strays`; ``strays=False``: listed, as a check for files an index misses does)."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:  # else each caller failed its own way once at work (StopIteration, max() of nothing)
        raise UsageError(f"no data files given: {name} is an empty list; expected a data file, a directory or a list of them")
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            data = [absolute(f) for f in directory_files(p) if os.path.getsize(f) > 0]
            if strays:
                refuse_strays(p, data)
            out += data
        elif os.path.exists(p):
            if not os.path.isfile(p):
                raise DataError(f"{p}: not a regular file")
            out.append(absolute(p))
        else:
            raise FileNotFoundError(2, "No such file or directory", p)
    seen: dict = {}
    for p in out:  # (through links, hard ones too) a file twice would serve each of its records twice
        st = os.stat(p)
        twin = seen.setdefault((st.st_dev, st.st_ino), p)
        if twin is not p:
            raise UsageError(f"{p} is named twice{'' if twin == p else f' (also as {twin})'}; a dataset reads each file once")
    return out


def refuse_strays(d: str, files) -> None:
    """DataError for a file of the directory ``d`` (``files``: its data files) without a known extension
    where most have one (a README.md beside .jsonl shards, a VERSION file beside .svm ones): its format
    would be guessed from its content, its text served as records. A rotated file's number is no
    extension (``app.jsonl.1`` is a .jsonl file: :func:`lirs.dirfiles.data_ext`). Where at most half
    have one (Spark's part-00000, TFDS shards beside their .json metadata), all are read by content."""
    known = {f: data_ext(f) for f in files if extension_format("x" + data_ext(f)) is not None}
    # a compressed file is left to its own error, which says to decompress it
    stray = next((f for f in files if f not in known and compressed(f) is None), None)
    if stray is not None and 2 * len(known) > len(files):
        exts = sorted(set(known.values()))
        g = shell_glob(d, "*" + shell_word(exts[0]))  # d quoted, the glob outside the quotes
        rotated = f" {g}.[0-9]*" if any(not f.endswith(e) for f, e in known.items()) else ""
        raise DataError(f"{os.path.basename(stray)}: not a {' or '.join(exts)} file like the others in {d}; "
                        f"move it out, or index the files you mean (lirs index {g}{rotated} -o NAME.lirs)")


def _head(path: str) -> bytes:
    """The first 64 KiB of ``path`` (what detection looks at)."""
    return read_at(path, _HEAD)


def compressed(path: str, head: bytes = b"") -> str | None:
    """The compression of ``path`` (its extension, e.g. ``".gz"``) from its name or its first bytes
    ``head``; None when it looks uncompressed."""
    ext = os.path.splitext(path)[1].lower()
    if ext in _COMPRESSED_EXT:
        return ext
    kind = _magic(head)
    # a TFRecord file's first length may begin with 1f 8b, say: its header CRC tells them apart
    return None if kind is None or _tfrecord_head(head) else kind


def _magic(head: bytes) -> str | None:
    """The compression whose magic bytes ``head`` starts with (its extension), else None."""
    kind = next((k for magic, k in _COMPRESSED_MAGIC if head.startswith(magic)), None)
    return ".bz2" if kind is None and _BZIP2.match(head) else kind


def _not_so(head: bytes, kind: str) -> bool:
    """Whether a file named ``kind`` (".gz", ...) starting with ``head`` surely is not (its format's
    magic bytes missing; ``.lzma`` has none, and an lz4 file may be of the legacy frame)."""
    if not head or kind == ".lzma":
        return False
    if kind in (".zip", ".lz4"):
        return not head.startswith(b"PK" if kind == ".zip" else (b"\x04\x22\x4d\x18", b"\x02\x21\x4c\x18"))
    if kind in (".zst", ".bz2") and (head[1:4] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50 or head[:3] == b"BZh"):
        return False  # a skippable frame first (pzstd), an empty bzip2 stream
    return _magic(head) != kind


def refuse_compressed(path: str, kind: str) -> DataError:
    """The error for a compressed input: lirs reads records at their offsets in the file itself."""
    name, tool, q = *_COMPRESSED_EXT[kind], shell_word(path)  # as given, quoted: pasted, it comes whole
    if _not_so(read_at(path, 64), kind):  # named so, but not so (a shuffle written to NAME.gz): decompressing fails
        return DataError(f"{path}: named {kind}, but its first bytes are not {name}'s: if it is not compressed, "
                         f"rename it without {kind}; if it is, decompress it first")
    if path.lower().endswith(kind) and kind != ".zip":
        hint = f"{tool} {q}"
    else:  # a name the tool would not recognize: write the bytes out under a new name
        hint = f"unzip -p {q} > DATA" if kind == ".zip" else f"{tool} -c {q} > DATA"
    return DataError(f"{path}: compressed input ({name}) is not supported; decompress first (e.g. {hint}): "
                     "lirs reads records at their byte offsets in the file")


def _tfrecord_head(head: bytes) -> bool:
    """The first 12 bytes are a TFRecord header (length + its masked CRC-32C)."""
    from .kernels import tfrecord as K  # numba loads only when a file needs it

    if len(head) < K.OVERHEAD:
        return False
    a = np.frombuffer(head[:8], np.uint8)
    return int(K.masked_crc(K.TABLE, K.HW, a, 0, 8)) == int.from_bytes(head[8:12], "little")


def format_reason(path: str) -> tuple[str, str]:
    """``(format, why)`` of one file: from its extension, else from its first bytes.

    Raises DataError for an empty or compressed file, or binary data that is no known format."""
    ext = os.path.splitext(path)[1].lower()
    head = _head(path)
    kind = compressed(path, head)
    if kind is not None:
        raise refuse_compressed(path, kind)
    if ext in _EXT_FORMAT:
        fmt = _EXT_FORMAT[ext]
        why = f"from the {ext} extension"
        if fmt == "lines" and _tfrecord_head(head):  # lines are not checked: they would be served as "lines" of it
            raise DataError(f"{path}: named {ext}, but its first 12 bytes are a TFRecord header (length and its "
                            "CRC-32C check out); name it .tfrecord or pass --format tfrecord (--format lines to "
                            "read it as lines all the same)")
        nul = head.find(b"\0") if fmt == "lines" else -1
        if nul >= 0:  # text does not hold NUL: compressed or binary bytes, misnamed
            raise DataError(f"{path}: byte {nul}: NUL byte in what its {ext} name says is text (compressed or "
                            "binary data?); to read its lines all the same, index it with --format lines "
                            "(lirs.build_index(path, format=\"lines\"))")
        if fmt == "lines":
            refuse_cr_only(path, head)
            what = "CSV" if ext in (".csv", ".tsv") else "JSON"
            why += f"; {what} is not parsed: records are delivered as raw lines (bytes, without their line ends)"
        return fmt, why
    if head.startswith(b"\x93NUMPY"):
        return "npy", "NumPy magic bytes at byte 0"
    if not head:
        raise DataError(f"{path}: empty file (0 bytes); nothing to index")
    if _tfrecord_head(head):
        return "tfrecord", "the first 12 bytes are a TFRecord header (length and its CRC-32C check out)"
    nul = head.find(b"\0")
    if nul >= 0:
        raise DataError(f"{path}: byte {nul}: NUL byte in what should be text; for binary records use "
                        "--format fixed --record-size N (or --format tfrecord, npy)")
    lines = _data_lines(path, head)
    if lines and all(_LIBSVM_LINE.match(ln) for ln in lines):
        return "libsvm", f"the first {len(lines)} data lines read as LIBSVM (label index:value ...)"
    refuse_cr_only(path, head)
    return "lines", "the first lines are not LIBSVM; records are delivered as raw lines (bytes, without their line ends)"


def _data_lines(path: str, head: bytes) -> list[bytes]:
    """The first data lines (at most 20; blank and comment lines skipped) of the text file ``path``,
    whose first bytes are ``head``: whole lines only; a last one at end of file without its LF only
    where no whole data line precedes it (a one-line file; a record cut off by a writer not done
    yet is no evidence against the lines before it, which the parser then refuses as cut off).

    Where none ends in ``head`` but the cut one may still be LIBSVM (its whole tokens read so), the
    file is read on, up to ``_DETECT_MAX`` bytes: deciding from the cut line alone served a LIBSVM
    file of long records as raw lines. Raises DataError when no data line ends within that bound."""
    buf, at_end = head, len(head) < _HEAD
    while True:
        parts = buf.split(b"\n")
        cut = parts.pop()  # after the last LF: cut off by the read, or the file's unterminated end
        lines = [ln for ln in parts if ln.strip() and not ln.lstrip().startswith(b"#")][:20]
        if at_end and not lines and cut.strip() and not cut.lstrip().startswith(b"#"):
            lines = [cut]
        if lines or at_end or not _may_be_libsvm(cut):
            return lines
        refuse_cr_only(path, head)  # no LF read on for: its own error, not "no line ends"
        if len(buf) >= _DETECT_MAX:
            raise DataError(f"{path}: no data line ends in its first {len(buf)} bytes (a LIBSVM record or a "
                            "comment block that long?), so its format cannot be told from them: pass "
                            "--format libsvm or --format lines (format=\"libsvm\" or \"lines\")")
        want = min(len(buf), _DETECT_MAX - len(buf))
        more = read_at(path, want, len(buf))
        buf, at_end = buf + more, len(more) < want


def _may_be_libsvm(cut: bytes) -> bool:
    """Whether ``cut``, a line's start, may be of a LIBSVM data line, or a comment or blank line's
    (what follows decides): its whole tokens (those before its last whitespace) read as LIBSVM."""
    s = cut.lstrip()
    if not s or s.startswith(b"#"):
        return True
    whole = re.match(rb".*\s", s, re.S)  # a 64 KiB token without whitespace is no label
    return whole is not None and _LIBSVM_LINE.match(whole.group().rstrip()) is not None


def refuse_cr_only(path: str, head: bytes) -> None:
    """Raise DataError where the text ``head`` (a file's first bytes) ends its lines with CR alone
    (classic Mac OS) and holds no LF: lines end at LF, so the file would be one record."""
    cr = head.find(b"\r")
    # two line ends at least (`a\rb\r`): one CR, inside a long first record or ending the one line, is none
    if b"\n" not in head and 0 <= cr and head.count(b"\r") >= 2:
        raise DataError(f"{path}: byte {cr}: a line ending in CR alone, and no LF in the first {len(head)} bytes; "
                        "lines end at LF, so its lines would be served as one record: convert its line ends "
                        "(`tr '\\r' '\\n' < OLD > NEW`), or pass --format lines (format=\"lines\") to read it "
                        "split at LF only")


def extension_format(path: str) -> str | None:
    """The format a file named ``path`` is read as from its extension alone (None: no known one)."""
    return _EXT_FORMAT.get(os.path.splitext(os.fspath(path))[1].lower())


def detect_format(path: str) -> str:
    """Guess a file's format from its extension, else from its first bytes (see :func:`format_reason`)."""
    return format_reason(path)[0]


def resolve_format(files, format: str = "auto", record_size=None) -> tuple[str, str]:
    """``(format, why)`` of the dataset ``files``: ``format`` itself (with a reason naming the
    option), ``fixed`` with a ``record_size``, else the one format every file is found to have.
    Raises UsageError for an unknown format, DataError when the files disagree."""
    if format not in ("auto",) + FORMATS:
        raise UsageError(f"unknown format {format!r}; expected auto, {', '.join(FORMATS)}")
    sized = [p for p in files if os.path.getsize(p)]  # an empty file among others: zero records, its format theirs
    if not sized:  # (a directory's empty files are no data; directory_files refuses a directory of none else)
        raise DataError(f"{files[0]}: empty file (0 bytes){'' if len(files) == 1 else ', as is every file given'}; nothing to index")
    if format != "auto":
        # an explicit text or TFRecord format still refuses a compressed file (raw fixed records: by name alone)
        for p in files:
            kind = compressed(p, _head(p) if format in ("libsvm", "lines", "tfrecord") else b"")
            if kind is not None:
                raise refuse_compressed(p, kind)
        return format, f"--format {format}"
    if record_size is not None:
        for p in files:  # by name alone, as with --format fixed
            if compressed(p) is not None:
                raise refuse_compressed(p, compressed(p))
        npy = next((p for p in files if extension_format(p) == "npy" or _head(p).startswith(b"\x93NUMPY")), None)
        if npy is not None:  # its NumPy header would be read as records
            raise UsageError(f"{npy} is .npy data, whose rows are its records: drop --record-size (or pass "
                             "--format fixed to read the file's bytes as raw records, header included)")
        return "fixed", f"--record-size {record_size}"
    found = {p: format_reason(p) for p in sized}  # an empty file's format is the others
    kinds = {k for k, _ in found.values()}
    if len(kinds) > 1:  # each format with its count and first files: the odd one out is named
        by = {k: [p for p, (k2, _) in found.items() if k2 == k] for k in sorted(kinds)}
        detail = "; ".join(f"{k} ({len(ps)}: {first_few(map(os.path.basename, ps))})" for k, ps in by.items())
        most = max(by.values(), key=lambda ps: (len(ps), sum(map(os.path.getsize, ps))))  # ties: the most bytes (shards, not metadata)
        raise DataError(f"files of one dataset must share a format; found {detail}: index the files of one format, "
                        f"e.g. {index_command(most, 'NAME.lirs')}")
    fmt, why = next(iter(found.values()))
    return fmt, why if len(files) == 1 else f"{why} (first of {len(files)} files; all agree)"


# --------------------------------------------------------------------------- chunked reading


def cached(path: str, end: int, probes: int = 16, start: int = 0) -> bool:
    """Whether bytes [start, end) of ``path`` seem to be in the page cache: ``probes`` 4 KiB reads
    spread over them all succeed with RWF_NOWAIT (which refuses to wait for the device). A file
    just written or appended to is, and is then read fastest through the cache (O_DIRECT would
    first write its dirty pages back); a cold one is read with O_DIRECT at device bandwidth
    without pushing other data out of the cache."""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None or end <= start:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        buf = bytearray(BLOCK)
        lo = start // BLOCK * BLOCK
        for off in np.linspace(lo, max(lo, end - BLOCK), probes).astype(np.int64) // BLOCK * BLOCK:
            try:
                os.preadv(fd, [buf], int(off), flag)
            except OSError:  # EAGAIN: not cached; EOPNOTSUPP: cannot tell
                return False
        return True
    finally:
        os.close(fd)


# path -> a lirs.content.BlockSums fed every chunk read_chunks yields of that file: the index scan
# sums the bytes it reads anyway (set and removed by lirs.build around a file's scan)
SUM_TAPS: dict = {}


def read_chunks(path: str, start: int, end: int, chunk: int, *, direct: bool = False):
    """Yield (buf uint8, nbytes, file offset) over [start, end) of ``path``, the next reads in flight
    on threads. A few buffers of ``chunk`` bytes take turns: a yielded buffer stays valid until the
    next one is asked for. A file that ends before ``end`` raises DataError; a failed read raises
    OSError naming the file and the byte offset.

    ``direct``: read each chunk with O_DIRECT (:func:`_direct_chunks`) where the filesystem allows
    it, the file is not held in memory (tmpfs, ramfs: :func:`lirs.mounts.held_in_memory`; there a
    direct read is a copy of the same memory, as a page-cache one is) and the range is not in the
    page cache already (:func:`cached`), else (some FUSE mounts and overlays, said once per
    filesystem) through the page cache."""
    tap = SUM_TAPS.get(path)
    engine = None
    if direct and end > start and held_in_memory([path]) is None and not cached(path, end, start=start):
        engine = _scan_engine(path)
    if engine is None:
        chunks = _buffered_chunks(path, start, end, chunk)
    else:
        chunks = _direct_chunks(engine, path, start, end, chunk)
    try:
        for buf, nb, off in chunks:
            if tap is not None:
                tap.feed(buf, 0, nb, off)
            yield buf, nb, off
    finally:
        chunks.close()  # its reads in flight end before the engine closes
        if engine is not None:
            engine.close()


_WARNED_DEVICES: set = set()


def _scan_engine(path: str):
    """An engine reading ``path`` with O_DIRECT, SCAN_READ_DEPTH reads in flight; None (logged)
    where the filesystem refuses O_DIRECT or no engine works."""
    from .engines import open_engine, probe_direct  # engines load numba kernels: only when reading

    why = probe_direct(path)
    if why is None:
        try:
            return open_engine([path], direct=True, depth=SCAN_READ_DEPTH)
        except (OSError, UsageError) as e:
            why = f"no engine reads {path} with O_DIRECT ({e})"
    dev = os.stat(path).st_dev
    # a dataset of many files on tmpfs would repeat the same line per file: warn once per filesystem
    level = logging.DEBUG if dev in _WARNED_DEVICES else logging.WARNING
    _WARNED_DEVICES.add(dev)
    log.log(level, "%s; scanning through the page cache", why)
    return None


def _direct_chunks(engine, path: str, start: int, end: int, chunk: int):
    """:func:`read_chunks` through ``engine`` (opened on ``path`` with O_DIRECT).

    A chunk [off, off + chunk) is read as the 4096-aligned span around it, in pieces of
    SCAN_READ_BYTES, into an aligned buffer; the yielded view starts at ``off``. Neighbouring
    chunks may both read the block they share (one block per chunk: nothing next to 16 MiB).
    SCAN_CHUNKS_AHEAD chunks are read while the caller scans one, so the device's queue never
    drains at a chunk's end (one chunk's last pieces complete one by one)."""
    from .engines import aligned_empty

    size = (chunk + 2 * BLOCK + BLOCK - 1) // BLOCK * BLOCK
    bufs = [aligned_empty(size) for _ in range(SCAN_CHUNKS_AHEAD + 1)]
    files = np.zeros((size + SCAN_READ_BYTES - 1) // SCAN_READ_BYTES + 1, np.int32)

    def read(buf, off):
        want = min(chunk, end - off)
        lo = off // BLOCK * BLOCK
        hi = (off + want + BLOCK - 1) // BLOCK * BLOCK
        pos = np.arange(0, hi - lo, SCAN_READ_BYTES, dtype=np.int64)
        nbytes = np.minimum(SCAN_READ_BYTES, hi - lo - pos)
        got = engine.read(files[:pos.size], lo + pos, nbytes, buf, pos)
        short = np.flatnonzero(got < nbytes)  # engines answer short only where the file ends
        reached = lo + (int(pos[short[0]] + got[short[0]]) if short.size else hi - lo)
        if reached < off + want:
            raise DataError(f"{path}: byte {reached}: file ended early (expected {end} bytes); "
                            "did it change while being read?")
        return want

    offs = range(start, end, chunk)
    with ThreadPoolExecutor(SCAN_CHUNKS_AHEAD) as ex:
        submit = lambda c: ex.submit(read, bufs[c % len(bufs)], offs[c])  # noqa: E731
        futs = {c: submit(c) for c in range(min(SCAN_CHUNKS_AHEAD, len(offs)))}
        for c, off in enumerate(offs):
            n = futs.pop(c).result()
            if c + SCAN_CHUNKS_AHEAD < len(offs):  # into the buffer the caller has just given back
                futs[c + SCAN_CHUNKS_AHEAD] = submit(c + SCAN_CHUNKS_AHEAD)
            skip = off % BLOCK
            yield bufs[c % len(bufs)][skip:skip + chunk], n, off


def _buffered_chunks(path: str, start: int, end: int, chunk: int):
    """:func:`read_chunks` through the page cache: one ``preadv`` of a whole chunk in flight, the
    kernel's readahead (POSIX_FADV_SEQUENTIAL) filling ahead of it."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except (AttributeError, OSError):
            pass
        bufs = [np.empty(chunk, np.uint8), np.empty(chunk, np.uint8)]

        def read(i, off):
            want = min(chunk, end - off)
            got = pread_into(fd, memoryview(bufs[i])[:want], off, path)
            if got < want:
                raise DataError(f"{path}: byte {off + got}: file ended early (expected {end} bytes); "
                                "did it change while being read?")
            return got

        with ThreadPoolExecutor(1) as ex:
            off, i = start, 0
            fut = ex.submit(read, 0, off) if off < end else None
            while fut is not None:
                n = fut.result()
                nxt = off + n
                fut = ex.submit(read, 1 - i, nxt) if nxt < end else None
                yield bufs[i], n, off
                off, i = nxt, 1 - i
    finally:
        os.close(fd)


def file_chunks(path: str, chunk_bytes: int, *, direct: bool = False):
    """The whole file in chunks (see :func:`read_chunks`)."""
    return read_chunks(path, 0, os.path.getsize(path), chunk_bytes, direct=direct)
