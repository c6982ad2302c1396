"""The sidecar of a non-text output of `lirs shuffle` (``.npy``, raw fixed records, TFRecord), built
from the finished temporary files before they take their names: the sidecar ``lirs index`` would write
for the output in place, so that the move into place is renames alone (nothing left to fail or be
interrupted between the old output's removal and the new one's sidecar)."""
from __future__ import annotations

import os

from ..build import fixed_meta, index_before_rename, index_meta, npy_layout, raw_fixed_count
from ..freshness import fingerprint, label_entries
from ..index import Index, data_sums, write_index
from ..labelcodes import encode_label_parts
from ..npyformat import NpyRows
from .writer import Shard


def seal_sidecar(s: Shard, fmt: str, record_size: int | None, format_given: str | None) -> str:
    """Write the sidecar of the shard ``s`` (format ``fmt``: ``"npy"``, ``"tfrecord"`` (scanned), or
    ``"fixed"`` records of ``record_size`` bytes) to ``s.sidecar_tmp``, from its temporaries ``s.tmp`` and
    ``s.labels_tmp``, naming ``s.final`` and ``s.labels_final`` as seen from ``s.sidecar``; a
    rename keeps the fingerprints taken here. ``format_given``: the format as the user gave it
    (None: detected), which a stale index's advice repeats. Returns the path written."""
    if fmt == "tfrecord":
        return index_before_rename(s.tmp, fmt, s.sidecar_tmp, s.final, s.sidecar, format_given)
    if fmt == "npy":
        header, rs, n, dtype, shape = npy_layout(s.tmp)
    else:
        header, rs, n, dtype, shape = 0, record_size, raw_fixed_count(s.tmp, 0, record_size), None, None
    named = os.path.dirname(os.path.abspath(s.sidecar))
    # the header names the final data as seen from the final sidecar (a shard's temporaries lie in
    # the staging directory that becomes the output: their own path there was kept, a folder gone)
    idx = Index.from_arrays([os.path.abspath(s.final)], fmt, file_starts=[0, n], header_sizes=[header], record_size=rs,
                            record_dtype=dtype, record_shape=shape)
    idx.meta = fixed_meta(idx, index_meta(s.final, s.sidecar, format_given))
    if s.labels_tmp is not None:
        idx.meta["label_files"] = label_entries([s.labels_final], named, [fingerprint(s.labels_tmp)])
        idx.label_values, idx.label_codes = encode_label_parts([NpyRows(s.labels_tmp)])
    idx.fingerprints, idx.sums = (fingerprint(s.tmp),), data_sums([s.tmp])
    return write_index(idx, s.sidecar_tmp, named=s.sidecar)
