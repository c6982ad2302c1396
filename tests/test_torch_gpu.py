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
