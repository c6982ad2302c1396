"""The sidecar of a text output of `lirs shuffle`, built from its buffers as they are written:
the same sidecar ``lirs index`` would write for the finished file, without reading it again."""
from __future__ import annotations

import numpy as np

from ..build import Tap, VarScanner, index_meta, labels_scratch, write_labels
from ..content import BlockSums
from ..index import Index, header_for
from ..kernels import scan as KS
from ..freshness import fingerprint
from ..sidecar import SidecarWriter


class TextIndexer:
    """Builds the sidecar of one text output file from its buffers as they are written; the result
    is the sidecar ``lirs index`` would write for the finished file.

    ``data_tmp``: where the data is being written (named in scan errors); ``final_path`` and
    ``sidecar_final``: where data and sidecar end up; ``sidecar_tmp_dest``: where the sidecar is
    written; ``scratch``: a directory for the LIBSVM labels' temporary file; ``out_buffer``: the
    output buffer size (the scan piece); ``label_block``: labels converted per step;
    ``format_given``: the shuffle's format where it was given (None: detected).
    """

    def __init__(self, fmt: str, data_tmp: str, final_path: str, sidecar_tmp_dest: str,
                 sidecar_final: str, scratch: str, out_buffer: int, pool, label_block: int,
                 format_given: str | None = None):
        self.fmt, self.format_given = fmt, format_given
        self.out_buffer = out_buffer
        self.data_tmp, self.final_path = data_tmp, final_path
        self.sidecar_final = sidecar_final
        self.label_block = max(1 << 12, int(label_block))
        self.w = SidecarWriter(sidecar_tmp_dest)
        self.tap = Tap(self.w)
        self.lab = None
        self.sc = None
        self.starts = None
        try:
            # the checksums of every MiB and (LIBSVM) the scan marks `lirs index` keeps
            self.sums = BlockSums()
            if fmt == "libsvm":
                # its ENOSPC names the pile directory (--tmpdir moves it), not a bare "No space"
                self.lab = labels_scratch(scratch)
                self.sc = VarScanner("libsvm", self.tap, self.lab, out_buffer, None, pool)
                sc = self.sc
                sc.begin_stream()
            self.w.begin("offsets", np.int64)
        except BaseException:
            self.abort()
            raise

    def add(self, buf: np.ndarray, n: int, base: int) -> None:
        """Index buf[:n] (complete lines) written at byte ``base`` of the output."""
        self.sums.feed(buf, 0, n, base)
        if self.sc is not None:
            self.sc.scan_region(self.data_tmp, buf, 0, n, base)
        else:
            k = KS.count_byte(buf, 0, n, 10) + 1
            if self.starts is None or self.starts.size < k:
                self.starts = np.empty(k, np.int64)
            k = KS.lines_scan(buf, 0, n, base, self.starts)
            self.tap.append(self.starts[:k])
            if n > self.out_buffer:
                self.starts = None

    def commit(self, data_end: int, data_path: str) -> str:
        """Finish the sidecar and rename it into place; ``data_path`` is the complete, closed data
        file (its fingerprint goes into the sidecar; a rename keeps it). Returns the sidecar path."""
        w, tap = self.w, self.tap
        tap.finish(data_end)
        n = tap.n
        # the next add() closes the streamed offsets
        w.add("file_starts", np.asarray([0, n], np.int64))
        w.add("data_ends", np.asarray([data_end], np.int64))
        w.add("header_sizes", np.asarray([0], np.int64))
        st = tap.st
        meta = {  # as `lirs index` of the output writes it
            **index_meta(self.final_path, self.sidecar_final, self.format_given), "record_bytes_min": int(st[0]), "record_bytes_max": int(st[1]),
            "record_bytes_mean": float(st[2] / n), "records_under_4k": int(st[3]),
            "records_straddling_4k": int(st[4]),
        }
        if self.fmt == "libsvm":
            sc = self.sc
            lo = int(sc.stats[0]) if sc.stats[1] >= 0 else 0  # one file: least_index is min_index
            meta.update(min_index=lo, least_index=lo, max_index=int(sc.stats[1]) if sc.stats[1] >= 0 else -1,
                        qid_records=sc.qid_count)
            write_labels(self.w, self.lab, n, self.sc.distinct, self.sc.pool, self.label_block)
        w.add("content_sums", self.sums.finish())
        if self.sc is not None:  # the boundaries after the last line start, then the total
            self.sc.close_marks(data_end)
            w.add("scan_marks", np.asarray(self.sc.marks, np.int64).reshape(-1))
        shell = Index(format=self.fmt, paths=(self.final_path,), n=n, file_starts=np.asarray([0, n], np.int64),
                      data_ends=np.asarray([data_end], np.int64), header_sizes=np.asarray([0], np.int64),
                      fingerprints=(fingerprint(data_path),), meta=meta)
        try:
            dest = w.commit(header_for(shell, self.sidecar_final))
        finally:
            self._close_labels()
        return dest

    def _close_labels(self) -> None:
        if self.lab is not None:
            self.lab.close()
            self.lab = None

    def abort(self) -> None:
        """Remove the unfinished sidecar and the labels' temporary file."""
        try:
            self.w.abort()
        finally:
            self._close_labels()
