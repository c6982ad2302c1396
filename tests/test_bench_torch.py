"""benchmarks/bench_torch.py's summary of where a pass with workers spent its time."""
from __future__ import annotations

import pytest

from conftest import benchmark_module


def _row(start, first, end, wait, pack=0.0, torch_s=0.0, cpu=0.0):
    return {"start": start, "first": first, "end": end, "wait_s": wait, "pack_s": pack, "torch_s": torch_s,
            "cpu_s": cpu, "batches": 1, "items": 1}


def test_pass_shares_are_parts_of_the_main_process_wall_time():
    bm = benchmark_module("bench_torch")
    t = {"main": _row(0.0, 0.1, 2.0, 1.5, cpu=0.2),
         "workers": [_row(0.0, 0.1, 2.0, 1.0, 0.2, 0.4, 1.8), _row(0.0, 0.1, 1.9, 0.6, 0.2, 0.8, 1.4),
                     _row(0.0, None, None, 0.0)]}  # a worker that never finished is left out
    sh = bm.pass_shares(t)
    assert sh["main_wait"] == pytest.approx(0.75) and sh["main_cpu"] == pytest.approx(0.1)
    assert sh["first_batch_s"] == pytest.approx(0.1)
    assert sh["worker_wait"] == pytest.approx(0.4) and sh["worker_pack"] == pytest.approx(0.1)
    assert sh["worker_torch"] == pytest.approx(0.3) and sh["worker_cpu"] == pytest.approx(0.8)
    assert bm.pass_shares({}) == {} and bm.pass_shares({"main": _row(0.0, None, None, 0.0), "workers": []}) == {}
