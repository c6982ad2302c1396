"""Labels stored compactly in an index: the distinct values and a small code per record."""
from __future__ import annotations

import numpy as np


def encode_labels(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Compact labels: (values float64, codes of the smallest unsigned dtype) or (labels, None).
    Values are told apart by their bits (-0.0 and 0.0, NaNs of either sign stay as they were, as
    ``labels[i] is values[codes[i]]`` bit for bit) and sorted by value, NaNs last."""
    labels = np.asarray(labels, np.float64)
    bits, codes = np.unique(np.ascontiguousarray(labels).view(np.uint64), return_inverse=True)
    order = np.lexsort((bits, bits.view(np.float64)))  # by value, then equal values by their bits
    values, codes = bits.view(np.float64)[order], np.argsort(order)[codes]
    if len(values) > 65535:
        return labels, None
    dt = np.uint8 if len(values) <= 256 else np.uint16
    return values, codes.astype(dt).reshape(labels.shape)
