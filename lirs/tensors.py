"""lirs batches as torch tensors: built from the decoded arrays, laid out in one buffer, moved to a
device.

A batch becomes ``(ids, X, y)`` tensors (:func:`to_tensors`); its tensors can be laid out back to
back in one uint8 buffer (:func:`pack_spans`, :func:`pack_into`) and rebuilt as views of it
(:func:`unpack`): how a batch crosses from a DataLoader worker (:mod:`lirs.workers`) and how it
reaches a GPU (:class:`Feeder`). Used by :mod:`lirs.torch`; torch is imported only by the modules
of the torch adapter (this one, :mod:`lirs.workers`, :mod:`lirs.torch`).
"""
from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp
import torch

from .batch import TorchBatch
from .decode import check_dtype, check_zero_based
from .errors import UsageError
from .kernels import pack as KP


def _quiet_torch_notices() -> None:
    """torch warns once per process that sparse CSR is in beta, and that sparse invariant checks
    are implicitly off (when a sparse tensor from a DataLoader worker is rebuilt here). Emit both
    once, silenced, at import on the importing thread: ``catch_warnings`` is not thread-safe and
    the tensors are built on pool threads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = torch.zeros(1, dtype=torch.int64)
        torch.sparse_csr_tensor(z, z[:0], torch.zeros(0), size=(0, 1), check_invariants=False)
        torch.sparse_coo_tensor(torch.zeros((2, 0), dtype=torch.int64), torch.zeros(0), (1, 1))


_quiet_torch_notices()


def to_tensors(b, sparse: str = "csr", label_dtype=torch.float32):
    """(ids int64 (k,), X, y) tensors of a :class:`lirs.loader.Batch` (see the module docstring)."""
    ids = torch.from_numpy(np.ascontiguousarray(b.ids, np.int64))
    y = None if b.y is None else torch.as_tensor(np.asarray(b.y), dtype=label_dtype)
    X = b.X
    if sp.issparse(X):
        X = X.tocsr()
        if sparse == "dense":
            X = torch.from_numpy(dense_of(X))
        else:
            # the decoder's arrays as they are (no copy: int32 indices unless they need int64, as
            # scipy has them); valid by construction, so torch's O(nnz) checks are skipped
            indptr, indices = X.indptr, X.indices
            if indptr.dtype != indices.dtype:
                indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
            t = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                        torch.from_numpy(X.data), size=X.shape, check_invariants=False)
            X = t.to_sparse_coo() if sparse == "coo" else t
    elif isinstance(X, np.ndarray):
        X = torch.from_numpy(dense_native(X))
    return ids, X, y  # lines data stays a list of bytes


def dense_of(X) -> np.ndarray:
    """The dense (n, d) array of CSR matrix ``X``, its dtype kept: scipy densifies no float16, so
    such values pass through float32 (exact both ways)."""
    if X.dtype == np.float16:
        return X.astype(np.float32).toarray().astype(np.float16)
    return np.asarray(X.toarray())


def tuples(batches, ds, ours: bool = True):
    """``batches`` of ``ds``, a list made of its "tuple" output (no transform's) a TorchBatch, or a tuple where not ``ours`` (a user's collate_fn's)."""
    if ds.output != "tuple" or ds.transform is not None:
        return batches
    return ((TorchBatch(*b) if ours and len(b) == 3 else tuple(b)) if type(b) is list else b for b in batches)


def dense_native(X: np.ndarray) -> np.ndarray:
    """Dense records in the machine's byte order (a big-endian ``.npy``'s: torch takes no other);
    UsageError for records of a structured dtype, which no tensor holds."""
    if X.dtype.names is not None:
        raise UsageError(f".npy records of a structured dtype ({X.dtype}) have no torch tensor; read them with "
                         "lirs.Loader, or save each field as a plain array")
    return X if X.dtype.isnative else X.astype(X.dtype.newbyteorder("="))


def x_parts(X) -> tuple[str, list]:
    """(kind, tensors) of a batch's X: ``"csr"`` (crow, col, values), ``"coo"`` (indices, values),
    ``"dense"`` (X), or ``"other"`` (no tensor: lines data, a list of bytes)."""
    if not isinstance(X, torch.Tensor):
        return "other", []
    if X.layout == torch.sparse_csr:
        return "csr", [X.crow_indices(), X.col_indices(), X.values()]
    if X.layout == torch.sparse_coo:
        return "coo", [X._indices(), X._values()]
    return "dense", [X]


def build_output(ts: list, kind: str, shape, has_y: bool, output: str, other=None):
    """The batch output (dict or tuple) from ``ts`` = [ids, (y), *parts of X] as :func:`x_parts`
    gave them (possibly moved or copied since); ``other``: X itself for kind ``"other"``."""
    ids, y = ts[0], (ts[1] if has_y else None)
    rest = ts[2:] if has_y else ts[1:]
    X = other if kind == "other" else x_built(kind, rest, shape)
    return {"ids": ids, "X": X, "y": y} if output == "dict" else TorchBatch(X, y, ids)


ALIGN = 64                # bytes: every tensor of a packed batch starts aligned


def pack_spans(ts, at: int = 0) -> tuple[list, int]:
    """The layout of tensors ``ts`` packed in one uint8 buffer from byte ``at`` (a multiple of
    ``ALIGN``): ``[(offset, nbytes, dtype, shape)]`` (each offset a multiple of ``ALIGN``, so
    every part can be viewed as its dtype there) and the end of the last part, rounded up to
    ``ALIGN`` (the buffer's length when ``at`` is 0)."""
    spans = []
    for t in ts:
        nb = t.numel() * t.element_size()
        spans.append((at, nb, t.dtype, tuple(t.shape)))
        at += -(-nb // ALIGN) * ALIGN
    return spans, at


def span_views(buf, spans) -> list:
    """Tensors viewing the parts :func:`pack_spans` laid out in the uint8 tensor ``buf`` (no copy)."""
    return [buf[a:a + nb].view(dt) if len(sh) == 1 else buf[a:a + nb].view(dt).view(sh) for a, nb, dt, sh in spans]


def pack_into(host: np.ndarray, ts, spans) -> None:
    """Copy CPU tensors ``ts`` into the uint8 array ``host`` at their ``spans`` (:func:`pack_spans`)."""
    for t, (a, nb, _, _) in zip(ts, spans):
        if nb:
            try:
                b = t.contiguous().numpy()
            except TypeError:  # bfloat16, and torch's other dtypes numpy has not: their bytes
                b = t.contiguous().reshape(-1).view(torch.uint8).numpy()
            host[a:a + nb] = b.reshape(-1).view(np.uint8)


_TORCH_DTYPES: dict = {}
_LABELS = {torch.float32: np.float32, torch.float64: np.float64}  # label dtypes numpy casts as torch does
_NO_PART = np.empty(0, np.uint8)


def torch_dtype(dt) -> torch.dtype:
    """The torch dtype of numpy dtype ``dt`` (found once per dtype)."""
    t = _TORCH_DTYPES.get(dt)
    if t is None:
        t = _TORCH_DTYPES[dt] = torch.from_numpy(np.empty(0, dt)).dtype
    return t


def batch_arrays(b, sparse: str = "csr", label_dtype=torch.float32):
    """``(kind, shape, arrays)`` of a :class:`lirs.loader.Batch`: its arrays in packing order
    ``[ids int64 (k,), (y label_dtype (k,)), *parts of X]`` (X a CSR matrix: indptr, indices of one
    dtype, data; an ndarray: itself), the numpy arrays :func:`to_tensors` would wrap; None for a
    batch only tensors carry (lines, ``sparse`` "coo" or "dense", a label dtype numpy casts otherwise)."""
    ydt = _LABELS.get(label_dtype)
    X = b.X
    if ydt is None or not (isinstance(X, np.ndarray) or (sparse == "csr" and isinstance(X, sp.csr_matrix))):
        return None
    if isinstance(X, np.ndarray):
        kind, xs = "dense", [np.ascontiguousarray(dense_native(X))]
    else:
        kind, (indptr, indices) = "csr", (X.indptr, X.indices)
        if indptr.dtype != indices.dtype:
            indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
        xs = [indptr, indices, X.data]
    ys = [] if b.y is None else [np.ascontiguousarray(b.y, ydt)]
    return kind, tuple(X.shape), [np.ascontiguousarray(b.ids, np.int64)] + ys + xs


def array_spans(arrays, at: int = 0) -> tuple[list, int]:
    """:func:`pack_spans` of numpy ``arrays`` (torch dtypes in the spans, for :func:`span_views`).
    A loop of its own, not a generator and a call a part: a DataLoader worker lays out every
    batch it sends (five parts a CSR batch)."""
    spans, known = [], _TORCH_DTYPES
    for a in arrays:
        nb = a.nbytes
        spans.append((at, nb, known.get(a.dtype) or torch_dtype(a.dtype), a.shape))
        at += -(-nb // ALIGN) * ALIGN
    return spans, at


def pack_arrays(host: np.ndarray, arrays, spans) -> None:
    """Copy up to five contiguous numpy ``arrays`` into the uint8 array ``host`` at their ``spans``
    (:func:`array_spans`), in one kernel call (:mod:`lirs.kernels.pack`)."""
    need = spans[-1][0] + spans[-1][1] if spans else 0
    if len(arrays) > 5 or need > len(host):
        raise ValueError(f"{len(arrays)} arrays of {need} bytes do not fit in 5 parts of a {len(host)}-byte buffer")
    parts = [a.reshape(-1).view(np.uint8) for a in arrays] + [_NO_PART] * (5 - len(arrays))
    offs = np.zeros(5, np.int64)
    offs[:len(spans)] = [a for a, *_ in spans]
    KP.pack5(host, offs, *parts)


def unpack(buf, meta):
    """The output of a :class:`Packed` batch, its tensors views of ``buf``."""
    kind, shape, has_y, output, spans = meta
    return build_output(span_views(buf, spans), kind, shape, has_y, output)


def unpack_many(buf, metas: list, shared: dict | None = None) -> list:
    """:func:`unpack` of each batch of a bundle (``metas``, their spans in the uint8 tensor ``buf``):
    each part is a slice of a view of ``buf`` as its dtype, made once a dtype (every part starts
    at an ALIGN boundary), so one torch call a part rather than two, in the main process of
    DataLoader workers, once a batch. ``shared``: ``{block: (uint8 tensor, its first byte)}`` for
    the parts a DataLoader worker left in its arena (:mod:`lirs.arena`), whose spans are
    ``(byte in the arena, nbytes, dtype, shape, block)``."""
    if buf.numel() % ALIGN or buf.storage_offset() % ALIGN:
        if not shared:
            return [unpack(buf, m) for m in metas]
        buf = _aligned(buf)
    if shared:
        return _unpack_shared(buf, metas, shared)
    typed: dict = {}
    out = []
    for kind, shape, has_y, output, spans in metas:
        ts = []
        for a, nb, dt, sh in spans:
            got = typed.get(dt)
            if got is None:
                got = typed[dt] = (buf.view(dt), torch.empty((), dtype=dt).element_size())
            t, size = got
            v = t[a // size:(a + nb) // size]
            ts.append(v if len(sh) == 1 else v.view(sh))
        out.append(build_output(ts, kind, shape, has_y, output))
    return out


def _unpack_shared(buf, metas: list, shared: dict) -> list:
    """:func:`unpack_many` of a bundle some of whose parts lie in its worker's arena (spans of five:
    their views made once a block and dtype, each starting ``a0`` bytes into the arena). A loop of
    its own: the check a part costs is not paid by bundles without such parts."""
    typed: dict = {}
    out = []
    for kind, shape, has_y, output, spans in metas:
        ts = []
        for sp in spans:
            if len(sp) == 4:
                a, nb, dt, sh = sp
                got = typed.get(dt)
                if got is None:
                    got = typed[dt] = (buf.view(dt), torch.empty((), dtype=dt).element_size(), 0)
            else:
                a, nb, dt, sh, b = sp
                got = typed.get((dt, b))
                if got is None:
                    src, a0 = shared[b]
                    got = typed[dt, b] = (src.view(dt), torch.empty((), dtype=dt).element_size(), a0)
            t, size, a0 = got
            v = t[(a - a0) // size:(a - a0 + nb) // size]
            ts.append(v if len(sh) == 1 else v.view(sh))
        out.append(build_output(ts, kind, shape, has_y, output))
    return out


def _aligned(buf):
    """A copy of the uint8 tensor ``buf`` starting on an ALIGN boundary, padded to a multiple of it."""
    out = torch.empty(-(-buf.numel() // ALIGN) * ALIGN, dtype=torch.uint8)
    out[:buf.numel()] = buf
    return out


# --------------------------------------------------------------------------- feeding a device


OUTPUTS = ("dict", "tuple")
SPARSE = ("csr", "coo", "dense")


def check_outputs(sparse, output, dtype, zero_based="auto") -> None:
    """UsageError for a ``sparse`` or ``output`` the torch adapter has not, a Loader ``dtype`` no
    batch holds (:func:`lirs.decode.check_dtype`) or no tensor does (not native, long double), a
    ``zero_based`` that is no bool: now, not at the first pass in a worker."""
    if sparse not in SPARSE:
        raise UsageError(f"sparse must be one of {SPARSE}, got {sparse!r}")
    if output not in OUTPUTS:
        raise UsageError(f"output must be one of {OUTPUTS}, got {output!r}")
    dt = check_dtype(dtype)
    try:
        held = dt.isnative and torch_dtype(dt) is not None
    except TypeError:  # long double, and numpy's other dtypes torch has not
        held = False
    if not held:
        raise UsageError(f"dtype {dtype!r}: no torch tensor holds it; give a native one torch has (np.float32, "
                         f"'float64', ...)")
    check_zero_based(zero_based)


def check_label_dtype(label_dtype) -> torch.dtype:
    """``label_dtype`` when it is a torch dtype; UsageError otherwise (a string such as "float32"
    would fail only at the first batch, in a DataLoader worker)."""
    if not isinstance(label_dtype, torch.dtype):
        raise UsageError(f"label_dtype must be a torch dtype such as torch.float32, got {label_dtype!r}")
    return label_dtype


def check_device(device):
    """None for None or a CPU device (batches are handed out as made), else the ``torch.device``
    of a CUDA device; UsageError when CUDA is not available or the device is of another kind."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:  # device=0 on a torch without CUDA, "foo", 1.5
        said = (str(e).strip().splitlines() or [""])[0].rstrip(".:")
        raise UsageError(f"device={device!r}: {said}; expected 'cpu', a CUDA device ('cuda', 'cuda:1') or None") from None
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise UsageError(f"device must be 'cpu' or a CUDA device, got {device!r}")
    if not torch.cuda.is_available():
        raise UsageError(f"device={device!r} asked, but CUDA is not available to this torch "
                         f"({torch.__version__}); use device='cpu' or None")
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


def _parts(out):
    """(rebuild, tensors) of a batch output, or of what a ``transform`` made of it: every tensor in
    it (dicts, lists and tuples walked; a sparse tensor as its components) and a function of those
    tensors, moved, that builds the same structure again; what is no tensor is kept as it is."""
    ts: list = []

    def walk(o):
        if isinstance(o, torch.Tensor):
            kind, xs = tensor_parts(o)
            at, shape = len(ts), tuple(o.shape)
            ts.extend(xs)
            return lambda m: x_built(kind, m[at:at + len(xs)], shape)
        if isinstance(o, (Mapping, list, tuple)):
            keys = list(o.keys()) if isinstance(o, Mapping) else range(len(o))
            fs = [walk(o[k]) for k in keys]
            return lambda m: remade(o, keys, [f(m) for f in fs])
        return lambda m: o
    return walk(out), ts


def tensor_parts(t) -> tuple[str, list]:
    """:func:`x_parts` of any tensor a batch output may hold; UsageError for a sparse layout other
    than CSR and COO (no staging buffer carries its parts)."""
    kind, xs = x_parts(t)
    if kind == "dense" and t.layout != torch.strided:
        raise UsageError(f"a batch output's tensor of layout {t.layout} cannot be moved to the device by lirs; "
                         f"make it CSR, COO or dense (in the transform)")
    return ("coo_uncoalesced" if kind == "coo" and not t.is_coalesced() else kind), xs


def x_built(kind: str, parts: list, shape):
    """The tensor of ``kind`` (:func:`tensor_parts`) from its moved ``parts``."""
    if kind == "csr":
        return torch.sparse_csr_tensor(*parts, size=shape, check_invariants=False)
    if kind in ("coo", "coo_uncoalesced"):
        return torch.sparse_coo_tensor(*parts, size=shape, is_coalesced=kind == "coo", check_invariants=False)
    return parts[0]


def remade(o, keys, values):
    """Container ``o`` (a mapping, list, tuple, named tuple) of the same type with ``values`` at
    ``keys`` (a mapping copied, so that a defaultdict keeps its factory, a UserDict its class)."""
    if isinstance(o, Mapping):
        d = copy.copy(o)
        d.update(zip(keys, values))
        return d
    if isinstance(o, tuple):
        return type(o)(*values) if hasattr(o, "_fields") else type(o)(values)
    return type(o)(values)


def to_device(out, device, non_blocking: bool = False):
    """A batch output (dict or tuple) with every tensor on ``device``; a sparse X moves as its
    components (CSR: crow, col, values) and is rebuilt there."""
    rebuild, ts = _parts(out)
    return rebuild([t.to(device, non_blocking=non_blocking) for t in ts])


STAGING_SLOTS = 4         # pinned staging buffers a Feeder cycles through (a copy k is done long before k+4)
STAGING_BYTES = 1 << 20   # each one's first size; grown (doubled, at least to the batch) when a batch needs it
FEED_AHEAD = 2            # batches a Feeder's thread moves ahead of the one the consumer holds


class Staging:
    """Pinned host buffers a :class:`Feeder` packs batches into before one copy to the device: a
    slot is written again only after the copy that read it last is done (its event). ``pin=False``
    (tests without CUDA) allocates plain memory."""

    def __init__(self, slots: int = STAGING_SLOTS, nbytes: int = STAGING_BYTES, pin: bool = True):
        self.bufs = [None] * slots
        self.arrays = [None] * slots  # each buffer's numpy view (made once: a torch call lets the GIL go)
        self.events = [None] * slots
        self.nbytes, self.k, self.pin = int(nbytes), 0, bool(pin)

    def take(self, nbytes: int) -> tuple[int, torch.Tensor]:
        """(slot, pinned uint8 tensor of at least ``nbytes``) free to write now."""
        s = self.k = (self.k + 1) % len(self.bufs)
        if self.events[s] is not None:
            self.events[s].synchronize()  # its last copy to the device has read it
            self.events[s] = None
        buf = self.bufs[s]
        if buf is None or buf.numel() < nbytes:
            self.nbytes = max(self.nbytes, 1 << max(int(nbytes) - 1, 1).bit_length())
            buf = self.bufs[s] = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=self.pin)
            self.arrays[s] = buf.numpy()
        return s, buf

    def used(self, s: int, event) -> None:
        """Slot ``s`` is read by the copy ``event`` follows."""
        self.events[s] = event


class Feeder:
    """Batches moved to a CUDA ``device`` ahead of the consumer, on a thread of their own: the tensors
    of a batch (ids, y, the arrays of X) are packed into one pinned staging buffer and copied to one
    device buffer on a side stream, up to ``FEED_AHEAD`` batches ahead, while the consumer's step
    runs on its current stream. One allocation, one copy and one event per batch, not one pin, copy
    and allocation per tensor. The feeding thread also pulls the batches from ``batches`` (the
    Loader's Python per batch, the tensors' construction) and rebuilds them as views of the device
    buffer, so the consumer's thread, which launches the training step, only waits for the copy's
    event on its current stream and marks the device buffer as used by that stream
    (``record_stream``: the caching allocator does not reuse it while the step may still read it).
    The batch's tensors are views of that buffer, kept alive as long as the consumer holds any of
    them. The first batch is made on the consumer's thread (no hand-off before it); an error comes
    out where its batch would have (:class:`lirs.ahead.PlanAhead`).

    With ``convert`` (:class:`lirs.workers.Convert`: its ``sparse``, ``output`` and ``label_dtype``),
    ``batches`` yields :class:`lirs.loader.Batch` objects, and a batch's numpy arrays go into the
    staging buffer in one kernel call (:func:`batch_arrays`, :func:`pack_arrays`) without CPU
    tensors made and taken apart first: every torch or numpy call lets the GIL go and takes it
    back, and each such hand-off with the thread launching the training step waited for it (the
    CPU tensors, their packing and the rebuilt batch cost 65 of them a batch, 29 without the
    tensors: ``benchmarks/results/stages.json``). A batch they cannot carry is made
    into tensors by ``convert``, as without it."""

    def __init__(self, batches, device, staging: Staging | None = None, position=None, ahead: int | None = None,
                 convert=None):
        self.batches, self.device, self.convert = batches, device, convert
        self.staging = staging
        # (get, set) of the consumer's position: taken as each batch is pulled from ``batches`` (on
        # the feeding thread), set as that batch is handed out (later ones are pulled first, and a
        # state_dict taken while the consumer holds batch k must resume at k + 1)
        self.position = position
        self.ahead = FEED_AHEAD if ahead is None else max(1, int(ahead))

    def _moved(self):
        """The batches, each moved: (output on the device, its device buffer, the copy's event, the
        position taken as it was pulled); runs on the feeding thread, the first on the consumer's."""
        side = torch.cuda.Stream(self.device)
        staging = self.staging or Staging()
        get = self.position[0] if self.position else (lambda: None)
        try:
            for item in self.batches:
                pos = get()
                rebuild, spans, total, s, host = self._packed(item, staging)
                with torch.cuda.stream(side):
                    dev = torch.empty(max(total, 1), dtype=torch.uint8, device=self.device)
                    dev.copy_(host[:max(total, 1)], non_blocking=True)
                    done = torch.cuda.Event()
                    done.record(side)
                staging.used(s, done)
                # views and a sparse tensor's metadata only (no kernel reads the buffer here)
                yield rebuild(span_views(dev, spans)), dev, done, pos
        finally:  # a consumer that stopped early: the source's cleanup now (its epoch, its workers)
            close = getattr(self.batches, "close", None)
            if close is not None:
                close()

    def _packed(self, item, staging: Staging):
        """``(rebuild, spans, bytes, slot, host buffer)`` of one batch packed into a staging slot: a
        :class:`~lirs.loader.Batch`'s arrays (with ``convert``; its tensors where they cannot
        carry it), or a batch output's tensors."""
        c = self.convert
        got = None if c is None else batch_arrays(item, c.sparse, c.label_dtype)
        if got is not None:
            kind, shape, arrays = got
            spans, total = array_spans(arrays)
            s, host = staging.take(total)
            pack_arrays(staging.arrays[s], arrays, spans)
            has_y, output = item.y is not None, c.output
            return (lambda moved: build_output(moved, kind, shape, has_y, output)), spans, total, s, host
        rebuild, ts = _parts(item if c is None else c(item))
        spans, total = pack_spans(ts)
        s, host = staging.take(total)
        pack_into(staging.arrays[s], ts, spans)
        return rebuild, spans, total, s, host

    def __iter__(self):
        from .ahead import PlanAhead

        put = self.position[1] if self.position else (lambda p: None)
        moved = PlanAhead(self._moved, chunk=1, ahead=self.ahead, name="lirs-feed")
        try:
            for out, dev, done, pos in moved:
                cur = torch.cuda.current_stream(self.device)
                cur.wait_event(done)
                dev.record_stream(cur)  # one storage: every view of it is covered
                put(pos)
                yield out
        finally:
            moved.close()
