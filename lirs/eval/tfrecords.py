"""Random TFRecord files for benchmarks: payloads of random bytes with sizes drawn around a mean.

    write_random(path, size, *, mean=2048, spread=512, seed=0) -> int (records)

The framing and CRCs come from :mod:`lirs.tfrecord` (checked against the spec in the tests).
"""
from __future__ import annotations

import os

import numpy as np

from .. import seeds
from ..litter import remove_quietly, temp_name
from ..kernels import tfrecord as K

_BATCH = 32 << 20  # payload bytes framed and written per step


def write_random(path, size: int, *, mean: int = 2048, spread: int = 512, seed: int = 0) -> int:
    """Write about ``size`` bytes of TFRecord records to ``path``: payload sizes uniform in
    [mean - spread, mean + spread] bytes, payload bytes uniform. Returns the record count."""
    if spread < 0 or mean - spread < 0:
        raise ValueError(f"payload sizes [{mean - spread}, {mean + spread}] must be >= 0")
    rng = seeds.rng(seed, 0, seeds.GEN_TFRECORD)
    n = 0
    written = 0
    # a temporary of this process and thread (lirs.litter.temp_name): runs writing one file never
    # write into each other's, and one a killed run leaves is removed by the crash cleaner
    tmp = temp_name(os.fspath(path))
    try:
        with open(tmp, "wb") as f:
            while written < size:
                k = max(1, min(_BATCH, size - written) // (mean + K.OVERHEAD))
                lens = rng.integers(mean - spread, mean + spread + 1, k).astype(np.int64)
                bounds = np.zeros(k + 1, np.int64)
                np.cumsum(lens, out=bounds[1:])
                payload = np.frombuffer(rng.bytes(int(bounds[-1])), np.uint8)
                out = np.empty(int(bounds[-1]) + K.OVERHEAD * k, np.uint8)
                K.frame(K.TABLE, K.HW, payload, bounds, out)
                f.write(memoryview(out))
                written += out.size
                n += k
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)  # no partial file left, whatever stopped the write (Ctrl-C included)
        raise
    return n
