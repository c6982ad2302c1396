"""lirs.torch feeding a CUDA device: batches moved on a side stream, equal to the CPU batches, and a
training step on them. Skipped without CUDA (CI runs the CPU path in tests/test_torch.py, and the
Feeder's packing with stand-ins for streams and events)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - depends on the machine
    pytest.skip("needs CUDA", allow_module_level=True)

import lirs  # noqa: E402
from conftest import kdd_indexed  # noqa: E402


@pytest.fixture(scope="module")
def kdd_file(tmp_path_factory):
    return kdd_indexed(tmp_path_factory, 3000)


@pytest.fixture(scope="module")
def narrow_file(tmp_path_factory):
    """3,000 records over 60 features: batches that can be compared dense (a kdd-like file has
    millions of columns, a dense batch of it gigabytes)."""
    p = str(tmp_path_factory.mktemp("n") / "n.svm")
    rng = np.random.default_rng(4)
    with open(p, "w") as fh:
        for i in range(3000):
            cols = np.sort(rng.choice(60, rng.integers(1, 12), replace=False)) + 1
            fh.write(("+1" if i % 2 else "-1") + "".join(f" {c}:{rng.random():.3f}" for c in cols) + "\n")
    lirs.build_index(p)
    return p


def dense(X):
    return X if X.layout == torch.strided else X.to_dense()


@pytest.mark.parametrize("sparse", ["csr", "coo", "dense"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_on_the_device_equal_the_cpu_ones(narrow_file, sparse, num_workers):
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=3, sparse=sparse, num_workers=num_workers)
    want = list(make_dataloader(narrow_file, 128, **kw))
    got = []
    for b in make_dataloader(narrow_file, 128, device="cuda", **kw):
        assert b["X"].is_cuda and b["ids"].is_cuda and b["y"].is_cuda
        # work on the consumer's stream that reads the batch while the next one is copied
        got.append({k: (dense(v) * 2 if k == "X" else v + 0) for k, v in b.items()})
    torch.cuda.synchronize()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g["ids"].cpu(), w["ids"]) and torch.equal(g["y"].cpu(), w["y"])
        assert torch.equal(g["X"].cpu(), dense(w["X"]) * 2)


def test_batches_kept_by_the_consumer_stay_intact(narrow_file):
    # every batch is one device buffer of its own: holding all of them (no step, no copy) while
    # the feeder packs and copies the next ones must not let any of them be overwritten
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=5)
    want = list(make_dataloader(narrow_file, 64, **kw))
    kept = list(make_dataloader(narrow_file, 64, device="cuda", **kw))
    torch.cuda.synchronize()
    assert len(kept) == len(want)
    for g, w in zip(kept, want):
        assert torch.equal(g["ids"].cpu(), w["ids"]) and torch.equal(g["y"].cpu(), w["y"])
        assert torch.equal(dense(g["X"]).cpu(), dense(w["X"]))


def test_staging_grows_and_is_reused(narrow_file):
    # two pinned slots of 256 bytes: the first batch outgrows them and every later one reuses a
    # slot whose previous copy must have finished first
    from lirs.tensors import Feeder, Staging
    from lirs.torch import make_dataloader

    want = list(make_dataloader(narrow_file, 100, granularity="group", group_bytes=8192, seed=6))
    got = [{k: dense(v).cpu() for k, v in b.items()}
           for b in Feeder(iter(want), torch.device("cuda", torch.cuda.current_device()), Staging(2, 256))]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g["X"], dense(w["X"])) and torch.equal(g["ids"], w["ids"]) and torch.equal(g["y"], w["y"])


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


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_state_taken_on_the_device_resumes_at_the_next_batch(narrow_file, num_workers):
    # the feeder pulls batch k + 1 before handing out batch k: the state counts what was handed out
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=7, num_workers=num_workers)
    want = [b["ids"] for b in make_dataloader(narrow_file, 64, **kw)]
    dl = make_dataloader(narrow_file, 64, device="cuda", **kw)
    for i, b in enumerate(dl):
        assert dl.state_dict()["next_batch"] == i + 1
        if i == 5:
            state = dl.state_dict()
            break
    again = make_dataloader(narrow_file, 64, **kw)
    again.load_state_dict(state)
    rest = [b["ids"] for b in again]
    assert len(rest) == len(want) - 6 and all(torch.equal(a, b) for a, b in zip(rest, want[6:]))
