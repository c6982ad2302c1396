"""lirs.torch: every record exactly once per epoch over ranks and DataLoader workers; tensors equal
the data; set_epoch changes the order; 2-rank gloo on loopback."""
from __future__ import annotations

import os
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import lirs  # noqa: E402
from lirs.eval.gen import generate, labels_path  # noqa: E402


@pytest.fixture(scope="module")
def kdd_file(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("t") / "k.svm")
    generate("kdd", p, records=2500, seed=4, order="sorted", progress=False)
    lirs.build_index(p)
    return p


@pytest.fixture(scope="module")
def higgs_file(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("h") / "h.npy")
    generate("higgs", p, records=3000, seed=5, progress=False)
    lirs.build_index(p)
    return p


def _ids(dl):
    return np.concatenate([b["ids"].numpy() for b in dl])


def test_single_process_tensors_equal_data(kdd_file):
    from lirs.decode import load_svmlight
    from lirs.torch import make_dataloader

    X, y = load_svmlight(kdd_file, dtype=np.float32)
    dl = make_dataloader(kdd_file, 300, granularity="group", seed=3)
    seen = []
    for b in dl:
        assert b["X"].layout == torch.sparse_csr
        ids = b["ids"].numpy()
        t = b["X"]
        ref = X[ids]
        assert tuple(t.shape) == ref.shape
        assert np.array_equal(t.crow_indices().numpy(), ref.indptr)
        assert np.array_equal(t.col_indices().numpy(), ref.indices)
        assert np.array_equal(t.values().numpy(), ref.data)
        assert np.array_equal(b["y"].numpy(), y[ids].astype(np.float32))
        assert b["y"].dtype == torch.float32
        seen.append(ids)
    ids0 = np.concatenate(seen)
    assert np.array_equal(np.sort(ids0), np.arange(len(y)))
    dl.dataset.set_epoch(1)
    ids1 = _ids(dl)
    assert np.array_equal(np.sort(ids1), np.arange(len(y)))
    assert not np.array_equal(ids0, ids1), "a new epoch is a new order"
    dl.dataset.set_epoch(0)
    assert np.array_equal(_ids(dl), ids0), "an epoch's order is a function of the seed"
    dl.dataset.close()


def test_dense_npy_tuples(higgs_file):
    from lirs.torch import LirsIterableDataset

    X = np.load(higgs_file)
    y = np.load(labels_path(higgs_file))
    ds = LirsIterableDataset(higgs_file, 512, output="tuple", granularity="instance", label_dtype=torch.float64)
    got = 0
    for Xb, yb, ids in ds:
        assert isinstance(Xb, torch.Tensor) and Xb.layout == torch.strided
        assert np.array_equal(Xb.numpy(), X[ids.numpy()])
        assert np.array_equal(yb.numpy(), y[ids.numpy()])
        got += len(ids)
    assert got == len(X)
    ds.close()


@pytest.mark.parametrize("granularity", ["instance", "window"])
def test_two_workers_disjoint_and_complete(kdd_file, granularity):
    from lirs.torch import make_dataloader

    n = lirs.open_index(kdd_file).n
    dl = make_dataloader(kdd_file, 128, num_workers=2, granularity=granularity, seed=1, sparse="coo")
    for epoch in (0, 1):
        dl.dataset.set_epoch(epoch)
        ids = _ids(dl)
        assert len(ids) == n and np.array_equal(np.sort(ids), np.arange(n)), f"epoch {epoch}"


def test_bad_arguments(kdd_file):
    from lirs.errors import UsageError
    from lirs.torch import LirsIterableDataset

    with pytest.raises(UsageError, match="sparse"):
        LirsIterableDataset(kdd_file, 10, sparse="bsr")
    with pytest.raises(UsageError, match="rank 2 outside"):
        list(LirsIterableDataset(kdd_file, 10, rank=2, world_size=2))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, path, out_dir):
    import torch.distributed as dist

    from lirs.torch import make_dataloader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        dl = make_dataloader(path, 100, num_workers=2, granularity="group", group_bytes=8192, seed=7)
        assert dl.dataset.shard() == (rank, world)  # in the main process of the rank: worker 0 of 1
        for epoch in (0, 1):
            dl.dataset.set_epoch(epoch)
            ids = np.concatenate([b["ids"].numpy() for b in dl])
            np.save(os.path.join(out_dir, f"r{rank}e{epoch}.npy"), ids)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_gloo_every_record_once(kdd_file, tmp_path):
    import torch.multiprocessing as mp

    n = lirs.open_index(kdd_file).n
    mp.spawn(_rank_main, args=(2, _free_port(), kdd_file, str(tmp_path)), nprocs=2, join=True)
    for epoch in (0, 1):
        parts = [np.load(tmp_path / f"r{r}e{epoch}.npy") for r in range(2)]
        assert all(len(p) for p in parts), "every rank gets a share"
        allids = np.concatenate(parts)
        assert len(allids) == n and np.array_equal(np.sort(allids), np.arange(n)), f"epoch {epoch}"
