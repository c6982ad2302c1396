"""lirs.torch feeding a CUDA device: batches moved on a side stream, equal to the CPU batches, and a
training step on them. Skipped without CUDA (CI runs the CPU path in tests/test_torch.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - depends on the machine
    pytest.skip("needs CUDA", allow_module_level=True)

import lirs  # noqa: E402
from lirs.eval.gen import generate  # noqa: E402


@pytest.fixture(scope="module")
def kdd_file(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("g") / "k.svm")
    generate("kdd", p, records=3000, seed=4, order="sorted", progress=False)
    lirs.build_index(p)
    return p


@pytest.mark.parametrize("sparse", ["csr", "coo"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_on_the_device_equal_the_cpu_ones(kdd_file, sparse, num_workers):
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=3, sparse=sparse, num_workers=num_workers)
    want = list(make_dataloader(kdd_file, 128, **kw))
    got = []
    for b in make_dataloader(kdd_file, 128, device="cuda", **kw):
        assert b["X"].is_cuda and b["ids"].is_cuda and b["y"].is_cuda
        # work on the consumer's stream that reads the batch while the next one is copied
        got.append({k: (v.to_dense() * 2 if k == "X" else v + 0) for k, v in b.items()})
    torch.cuda.synchronize()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g["ids"].cpu(), w["ids"]) and torch.equal(g["y"].cpu(), w["y"])
        assert torch.equal(g["X"].cpu(), w["X"].to_dense() * 2)


def test_training_step_on_the_device(kdd_file):
    from lirs.torch import make_dataloader

    dl = make_dataloader(kdd_file, 256, device="cuda", granularity="group", group_bytes=8192)
    w = torch.nn.EmbeddingBag(dl.dataset.n_features, 1, mode="sum", sparse=True).cuda()
    torch.nn.init.zeros_(w.weight)
    opt = torch.optim.SGD(w.parameters(), lr=0.5)
    losses = []
    for _ in range(3):
        for b in dl:
            X = b["X"]
            logits = w(X.col_indices(), X.crow_indices()[:-1], per_sample_weights=X.values()).squeeze(1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, (b["y"] > 0).float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
    assert np.isfinite(losses).all() and np.mean(losses[-10:]) < losses[0], "the model learns"


def test_batches_kept_by_the_consumer_stay_intact(kdd_file):
    # every batch is one device buffer of its own: holding all of them (no step, no copy) while
    # the feeder packs and copies the next ones must not let any of them be overwritten
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=5)
    want = list(make_dataloader(kdd_file, 64, **kw))
    kept = list(make_dataloader(kdd_file, 64, device="cuda", **kw))
    torch.cuda.synchronize()
    assert len(kept) == len(want)
    for g, w in zip(kept, want):
        assert torch.equal(g["ids"].cpu(), w["ids"]) and torch.equal(g["y"].cpu(), w["y"])
        assert torch.equal(g["X"].to_dense().cpu(), w["X"].to_dense())


@pytest.mark.parametrize("sparse", ["csr", "dense"])
def test_staging_grows_and_is_reused(kdd_file, sparse):
    # two pinned slots of 256 bytes: the first batch outgrows them and every later one reuses a
    # slot whose previous copy must have finished first
    from lirs.tensors import Feeder, Staging
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=6, sparse=sparse)
    want = list(make_dataloader(kdd_file, 100, **kw))
    got = [{k: v.to_dense().cpu() if k == "X" and v.layout != torch.strided else v.cpu() for k, v in b.items()}
           for b in Feeder(iter(want), torch.device("cuda", torch.cuda.current_device()), Staging(2, 256))]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        wx = w["X"].to_dense() if w["X"].layout != torch.strided else w["X"]
        assert torch.equal(g["X"], wx) and torch.equal(g["ids"], w["ids"]) and torch.equal(g["y"], w["y"])
