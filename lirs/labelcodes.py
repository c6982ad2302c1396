"""Labels stored compactly in an index: the distinct values and a small code per record."""
from __future__ import annotations

import numpy as np

MAX_CODED = 65535  # distinct values past which labels are stored whole (float64), not as codes
_STEP = 1 << 20    # labels converted at a time


def encode_labels(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Compact labels: (values float64, codes of the smallest unsigned dtype) or (labels, None).
    Values are told apart by their bits (-0.0 and 0.0, NaNs of either sign stay as they were, as
    ``labels[i] is values[codes[i]]`` bit for bit) and sorted by value, NaNs last."""
    labels = np.asarray(labels)
    values, codes = encode_label_parts([labels.reshape(-1)])
    return (values, codes.reshape(labels.shape)) if codes is not None else (values.reshape(labels.shape), None)


def encode_label_parts(parts) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`encode_labels` of the labels ``parts`` (1-D arrays of real numbers, or readers of
    ``.npy`` labels files) laid end to end, a million at a time: memory goes to the codes (1 or 2
    bytes a label), not to float64 copies of every label and their sort; past ``MAX_CODED``
    distinct values, the labels whole (float64)."""
    bits = np.empty(0, np.uint64)
    for c in _chunks(parts):
        bits = np.union1d(bits, c)
        if len(bits) > MAX_CODED:
            return np.concatenate([np.asarray(p, np.float64) for p in parts]), None
    order = value_order(bits)
    code_of = np.empty(len(bits), np.int64)
    code_of[order] = np.arange(len(bits))
    codes = np.empty(sum(len(p) for p in parts), np.uint8 if len(bits) <= 256 else np.uint16)
    at = 0
    for c in _chunks(parts):
        codes[at:at + len(c)] = code_of[np.searchsorted(bits, c)]
        at += len(c)
    return bits.view(np.float64)[order], codes


def value_order(bits: np.ndarray) -> np.ndarray:
    """The order of labels ``bits`` (uint64 (k,), the bits of float64 labels) by value, NaNs last,
    equal values (-0.0 and 0.0, NaNs) by their bits: how the values of an index are sorted."""
    bits = np.asarray(bits, np.uint64)
    return np.lexsort((bits, bits.view(np.float64)))


def sorted_values(bits) -> np.ndarray:
    """The distinct labels whose bits are ``bits`` (an iterable of uint64 ints, each once) as the
    float64 values of an index, in :func:`value_order`."""
    bits = np.fromiter(bits, np.uint64)
    return bits.view(np.float64)[value_order(bits)]


def label_bits(labels) -> np.ndarray:
    """The distinct bit patterns (uint64, sorted) of float64 ``labels``: labels equal in value but
    not in bits (-0.0 and 0.0, NaNs of either sign) stay apart, as the values of an index keep them."""
    return np.unique(np.ascontiguousarray(labels, np.float64).view(np.uint64))


def _chunks(parts):
    """The bits (uint64) of the labels of ``parts`` as float64, ``_STEP`` at a time."""
    for p in parts:
        for c in range(0, len(p), _STEP):
            yield np.ascontiguousarray(np.asarray(p[c:c + _STEP], np.float64)).view(np.uint64)
