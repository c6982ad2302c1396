"""The read step's small kernels (lirs.kernels.io): their results, and which of them keep the GIL."""
from __future__ import annotations

import numpy as np
import pytest

from lirs.kernels import io as KI


def test_block_positions_lay_extents_back_to_back_on_the_block():
    nbytes = np.array([1, 4096, 4097, 0, 10], np.int64)
    pos = np.empty(5, np.int64)
    total = KI.block_positions(nbytes, 4096, pos)
    assert pos.tolist() == [0, 4096, 8192, 16384, 16384]
    assert total == 16384 + 4096
    assert KI.block_positions(nbytes, 64, pos) == 8384 and pos.tolist() == [0, 64, 4160, 8320, 8320]


def test_step_totals_sum_what_was_read_and_the_records():
    got = np.array([5, 0, 7], np.int64)
    rec_len = np.arange(1, 101, dtype=np.int64)
    assert tuple(KI.step_totals(got, rec_len)) == (12, 5050)
    assert tuple(KI.step_totals(got[:0], rec_len[:0])) == (0, 0)


@pytest.mark.parametrize("case,want", [
    ({}, KI.EXTENTS_OK),
    ({"file": 2}, KI.EXTENTS_BAD_FILE),
    ({"file": -1}, KI.EXTENTS_BAD_FILE),
    ({"offset": -4096}, KI.EXTENTS_NEGATIVE),
    ({"pos": 8192 * 2}, KI.EXTENTS_OVERFLOW),
    ({"offset": 100, "direct": True}, KI.EXTENTS_UNALIGNED),
    ({"offset": 100}, KI.EXTENTS_OK),
])
def test_check_extents_gives_the_first_failed_verdict(case, want):
    ext_file = np.array([0, case.get("file", 1)], np.int32)
    ext_offset = np.array([0, case.get("offset", 4096)], np.int64)
    ext_nbytes = np.array([4096, 4096], np.int64)
    buf_pos = np.array([0, case.get("pos", 4096)], np.int64)
    assert KI.check_extents(ext_file, ext_offset, ext_nbytes, buf_pos, 2, 8192 * 2, case.get("direct", False)) == want


def test_the_microsecond_kernels_keep_the_gil_and_the_long_ones_let_it_go():
    # a thread that let the GIL go around a microsecond's work would take it back behind every
    # thread waiting for it (a dozen pool threads on 16 cores): those keep it
    keep = {"block_positions", "step_totals", "check_extents"}
    let_go = {"record_spans", "pread_worker"}
    flags = {n: getattr(KI, n).targetoptions.get("nogil", False) for n in keep | let_go}
    assert {n for n, nogil in flags.items() if not nogil} == keep
