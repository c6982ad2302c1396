"""Labels stored compactly in an index: the distinct values and a small code per record."""
from __future__ import annotations

import numpy as np


def encode_labels(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Compact labels: (values float64, codes of the smallest unsigned dtype) or (labels, None)."""
    labels = np.asarray(labels, np.float64)
    values, codes = np.unique(labels, return_inverse=True)
    if len(values) > 65535:
        return labels, None
    dt = np.uint8 if len(values) <= 256 else np.uint16
    return values, codes.astype(dt).reshape(labels.shape)
