"""lirs.torch: every record exactly once per epoch over ranks and DataLoader workers; tensors equal
the data; set_epoch changes the order; the Loader's batches whatever num_workers; exact resume
through DataLoader (0, 1, 2 workers) and StatefulDataLoader; no warnings; 2-rank gloo on loopback."""
from __future__ import annotations

import collections
import contextlib
import itertools
import os
import pickle
import types
import re
import socket
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import lirs  # noqa: E402
from conftest import kdd_indexed  # noqa: E402
from lirs.eval.gen import generate, labels_path  # noqa: E402


@pytest.fixture(scope="module")
def kdd_file(tmp_path_factory):
    return kdd_indexed(tmp_path_factory, 2500)


@pytest.fixture(scope="module")
def higgs_file(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("h") / "h.npy")
    generate("higgs", p, records=3000, seed=5, progress=False)
    lirs.build_index(p)
    return p


@pytest.fixture(scope="module")
def small_svm(tmp_path_factory):
    """LIBSVM with 40 features (dense batches stay small)."""
    p = tmp_path_factory.mktemp("s") / "s.svm"
    rng = np.random.default_rng(3)
    p.write_text("".join(f"{rng.choice([-1, 1])} " + " ".join(f"{c}:{rng.integers(1, 9)}" for c in
                                                               np.sort(rng.choice(40, 5, replace=False)) + 1) + "\n"
                         for _ in range(700)))
    lirs.build_index(str(p))
    return str(p)


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
    with pytest.raises(UsageError, match="label_dtype must be a torch dtype.*'float32'"):
        LirsIterableDataset(kdd_file, 10, label_dtype="float32")  # not at the first batch, in a worker
    with pytest.raises(UsageError, match="rank 2 outside"):
        list(LirsIterableDataset(kdd_file, 10, rank=2, world_size=2))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, path, out_dir):
    import torch.distributed as dist
    import torch.utils.data as tud

    from lirs.torch import LirsIterableDataset, make_dataloader

    # made before the group: their workers (forked) read this rank's share all the same, with no
    # set_epoch (they read as rank 0 of 1: every record on every rank)
    early = make_dataloader(path, 100, num_workers=2, granularity="group", group_bytes=8192, seed=7)
    hand = tud.DataLoader(LirsIterableDataset(path, 100, granularity="group", group_bytes=8192, seed=7),
                          batch_size=None, num_workers=2)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for name, d in (("early", early), ("hand", hand)):
            np.save(os.path.join(out_dir, f"r{rank}{name}.npy"), np.concatenate([b["ids"].numpy() for b in d]))
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
    mp.start_processes(_rank_main, args=(2, _free_port(), kdd_file, str(tmp_path)), nprocs=2, join=True,
                       start_method="fork")
    for epoch in ("e0", "e1", "early", "hand"):
        parts = [np.load(tmp_path / f"r{r}{epoch}.npy") for r in range(2)]
        assert all(len(p) for p in parts), "every rank gets a share"
        allids = np.concatenate(parts)
        assert len(allids) == n and np.array_equal(np.sort(allids), np.arange(n)), f"epoch {epoch}"


def test_a_spawned_worker_gets_the_rank_the_main_process_has_when_it_starts(kdd_file, monkeypatch):
    """A spawned worker sees no process group: the copy it unpickles carries the main process's
    rank, read when the copy is made (not when the dataset was, before the group was set up)."""
    import lirs.torch as lt

    ds = lt.LirsIterableDataset(kdd_file, 100)
    monkeypatch.setattr(lt, "_dist_rank_world", lambda: (1, 2))
    copy = pickle.loads(pickle.dumps(ds))
    monkeypatch.setattr(lt, "_dist_rank_world", lambda: (0, 1))  # the worker: no group
    assert copy.shard() == (1, 2)


# --------------------------------------------------------------------------- the Loader's batches


def _loader_batches(path, B, rank=0, world=1, epoch=0, **kw):
    with lirs.Loader(path, B, rank=rank, world_size=world, **kw) as loader:
        return list(loader.epoch(epoch))


def _same_tensors(a, b):
    """Two dict batches hold the same ids, labels and CSR bytes."""
    assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["y"], b["y"])
    for f in ("crow_indices", "col_indices", "values"):
        assert torch.equal(getattr(a["X"], f)(), getattr(b["X"], f)()), f


@pytest.mark.parametrize("num_workers", [0, 2, 3])
@pytest.mark.parametrize("granularity", ["group", "window"])
def test_batches_are_the_loaders_whatever_the_workers(kdd_file, num_workers, granularity):
    from lirs.torch import make_dataloader

    kw = dict(granularity=granularity, group_bytes=8192, window=3, seed=5)
    for rank in (0, 1):
        want = _loader_batches(kdd_file, 70, rank, 2, epoch=1, **kw)
        dl = make_dataloader(kdd_file, 70, num_workers=num_workers, rank=rank, world_size=2, epoch=1, **kw)
        got = list(dl)
        assert len(got) == len(want), "as many batches as the Loader"
        for g, w in zip(got, want):
            assert np.array_equal(g["ids"].numpy(), w.ids), f"batch {w.index}"
            assert np.array_equal(g["X"].values().numpy(), w.X.data)
            assert np.array_equal(g["X"].col_indices().numpy(), w.X.indices)
            assert np.array_equal(g["y"].numpy(), w.y.astype(np.float32))


@pytest.mark.parametrize("batch_size", [233, 1])
def test_window_workers_deliver_a_ranks_empty_last_batch(small_svm, batch_size):
    """700 records on 3 ranks: 234, 233, 233. With batch 233 (or 1) ranks 1 and 2 end on a batch of
    no rows, which lies in no window: window workers each left it out, so those ranks stepped once
    less than rank 0 (a DDP job hangs) and than ``len()``. Every rank steps as its Loader does."""
    from lirs.torch import make_dataloader

    kw = dict(granularity="window", group_bytes=4096, window=2, seed=3)
    for rank in (0, 1, 2):
        want = _loader_batches(small_svm, batch_size, rank, 3, **kw)
        assert len(want[-1].ids) == (1 if rank == 0 else 0)
        for workers in (2, 3):
            dl = make_dataloader(small_svm, batch_size, num_workers=workers, rank=rank, world_size=3, **kw)
            got = [b["ids"].numpy() for b in dl]
            assert len(got) == len(want) == len(dl), (rank, workers)
            assert all(np.array_equal(g, w.ids) for g, w in zip(got, want)), (rank, workers)
            if rank and batch_size > 1:  # a resume at the empty batch gets it, and only it
                dl = make_dataloader(small_svm, batch_size, num_workers=workers, rank=rank, world_size=3, **kw)
                it = iter(dl)
                next(it)
                state = dl.state_dict()
                del it
                dl = make_dataloader(small_svm, batch_size, num_workers=workers, rank=rank, world_size=3, **kw)
                dl.load_state_dict(state)
                assert [len(b["ids"]) for b in dl] == [0]


@pytest.mark.parametrize("fmt", ["lines", "tfrecord"])
@pytest.mark.parametrize("granularity", ["window", "group", "instance"])
def test_bytes_records_cross_workers_as_the_loader_serves_them(tmp_path, fmt, granularity):
    """Lines and TFRecord records are lists of bytes, not tensors: make_dataloader's workers
    packed TFRecord batches as tensors and failed (AttributeError) at every granularity."""
    from lirs.tfrecord import encode
    from lirs.torch import make_dataloader

    rng = np.random.default_rng(8)
    recs = [b"r%d:" % i + bytes(rng.integers(32, 127, int(rng.integers(0, 300)), dtype=np.uint8)) for i in range(900)]
    path = tmp_path / ("d.tfrecord" if fmt == "tfrecord" else "d.txt")
    path.write_bytes(encode(recs).tobytes() if fmt == "tfrecord" else b"".join(r + b"\n" for r in recs))
    kw = dict(granularity=granularity, group_bytes=4096, window=3, seed=2)
    want = _loader_batches(str(path), 64, **kw)
    got = list(make_dataloader(str(path), 64, num_workers=2, **kw))
    assert [b["ids"].tolist() for b in got] == [w.ids.tolist() for w in want]
    assert [b["X"] for b in got] == [[recs[i] for i in w.ids.tolist()] for w in want]


def test_single_process_iteration_is_torchs(kdd_file):
    """num_workers=0 steps the dataset without torch's per-batch iterator: the batches a plain
    DataLoader gives, the same draw from torch's RNG per epoch, a collate_fn still applied."""
    import torch.utils.data as tud

    from lirs.torch import LirsDataLoader, LirsIterableDataset

    ds = LirsIterableDataset(kdd_file, 300, seed=2)
    torch.manual_seed(0)
    want = list(tud.DataLoader(ds, batch_size=None))
    rng_after = torch.get_rng_state()
    torch.manual_seed(0)
    ds.set_epoch(0)  # the same epoch again (a plain second pass would be epoch 1)
    got = list(LirsDataLoader(ds, batch_size=None))
    assert torch.equal(torch.get_rng_state(), rng_after)
    assert len(got) == len(want) == ds.num_batches()
    for g, w in zip(got, want):
        assert torch.equal(g["ids"], w["ids"]) and torch.equal(g["y"], w["y"])
        assert torch.equal(g["X"].values(), w["X"].values())
        assert torch.equal(g["X"].col_indices(), w["X"].col_indices())
    ds.set_epoch(0)
    sizes = list(LirsDataLoader(ds, batch_size=None, collate_fn=lambda b: b["ids"].shape[0]))
    assert sizes == [len(w["ids"]) for w in want]
    ds.close()


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_resume_at_batch_boundaries_is_exact(kdd_file, num_workers):
    from lirs.torch import make_dataloader

    kw = dict(granularity="window", group_bytes=8192, window=3, seed=2, num_workers=num_workers)
    whole = list(make_dataloader(kdd_file, 100, **kw))
    nb = len(whole)
    for k in ((0, 3, nb - 1, nb) if num_workers == 0 else (1, nb // 2, nb - 2)):
        dl = make_dataloader(kdd_file, 100, **kw)
        it = iter(dl)
        head = [next(it) for _ in range(k)]
        state = pickle.loads(pickle.dumps(dl.state_dict()))
        del it
        assert state["epoch"] == 0 and state["next_batch"] == k and state["worker"] is None
        # the state is the rank's: it resumes with another number of workers as well
        again = make_dataloader(kdd_file, 100, **dict(kw, num_workers=(num_workers + k) % 4))
        again.load_state_dict(state)
        tail = list(again)
        assert again.state_dict()["next_batch"] == nb
        assert len(head) + len(tail) == nb, f"resumed at {k}"
        for a, b in zip(head + tail, whole):
            _same_tensors(a, b)
        assert list(again) and len(list(again)) == nb, "the next pass is a whole epoch again"


def test_resume_refuses_another_configuration(kdd_file):
    from lirs.errors import UsageError
    from lirs.torch import LirsIterableDataset

    a = LirsIterableDataset(kdd_file, 100, seed=1)
    next(iter(a))
    state = a.state_dict()
    with pytest.raises(UsageError, match="seed: saved 1, now 2"):
        LirsIterableDataset(kdd_file, 100, seed=2).load_state_dict(state)
    with pytest.raises(UsageError, match="worker 1 of 2"):
        LirsIterableDataset(kdd_file, 100, seed=1).load_state_dict(dict(state, worker=[1, 2]))
    a.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_exactly(kdd_file, num_workers):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    from lirs.torch import LirsIterableDataset

    def make():
        ds = LirsIterableDataset(kdd_file, 90, granularity="group", group_bytes=8192, seed=8)
        return sdl.StatefulDataLoader(ds, batch_size=None, num_workers=num_workers)

    whole = list(make())
    for k in (1, 4, len(whole) - 1):
        dl = make()
        it = iter(dl)
        head = [next(it) for _ in range(k)]
        state = pickle.loads(pickle.dumps(dl.state_dict()))
        del it
        again = make()
        again.load_state_dict(state)
        tail = list(again)
        assert len(head) + len(tail) == len(whole), f"resumed at {k}"
        for a, b in zip(head + tail, whole):
            _same_tensors(a, b)


# --------------------------------------------------------------------------- tensors, warnings, sizes


@pytest.mark.parametrize("sparse", ["csr", "coo", "dense"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_no_warnings_from_tensor_construction(kdd_file, higgs_file, small_svm, sparse, num_workers):
    from lirs.torch import make_dataloader

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in ((kdd_file, higgs_file) if sparse != "dense" else (small_svm, higgs_file)):
            dl = make_dataloader(path, 256, sparse=sparse, granularity="instance", num_workers=num_workers)
            n = sum(len(b["ids"]) for b in dl)
            dl.dataset.close()
            assert n == lirs.open_index(path).n


def test_pin_memory_does_not_crash(kdd_file):
    from lirs.torch import make_dataloader

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*pin_memory.*no accelerator", UserWarning)
        dl = make_dataloader(kdd_file, 500, pin_memory=True, sparse="coo")
        try:
            got = list(dl)
        except RuntimeError as e:  # pragma: no cover - depends on the torch build
            if "accelerator" in str(e) or "CUDA" in str(e):
                pytest.skip(f"pinning needs an accelerator here: {e}")
            raise
    assert sum(len(b["ids"]) for b in got) == lirs.open_index(kdd_file).n


def test_sizes_and_labels(kdd_file, higgs_file, tmp_path):
    from lirs.decode import load_svmlight
    from lirs.torch import LirsIterableDataset

    X, y = load_svmlight(kdd_file)
    ds = LirsIterableDataset(kdd_file, 64)
    idx = lirs.open_index(kdd_file)
    assert ds.n == idx.n == X.shape[0] and ds.n_features == idx.n_features == X.shape[1]
    assert np.array_equal(ds.labels, y) and np.array_equal(idx.labels, y)
    h = LirsIterableDataset(higgs_file, 64)
    assert h.n_features == np.load(higgs_file).shape[1] and h.n == 3000
    assert np.array_equal(h.labels, np.load(labels_path(higgs_file)))
    lines = tmp_path / "d.jsonl"
    lines.write_text("".join(f'{{"i": {i}}}\n' for i in range(50)))
    lirs.build_index(str(lines))
    L = LirsIterableDataset(str(lines), 8)
    assert L.n == 50 and L.n_features is None and L.labels is None
    assert lirs.open_index(str(lines)).n_features is None
    for d in (ds, h, L):
        d.close()


def test_user_transform_runs_on_the_pool(kdd_file):
    import threading

    from lirs.torch import make_dataloader

    seen = []

    def fn(b):
        seen.append(threading.get_ident())
        return b["X"].shape[0]

    dl = make_dataloader(kdd_file, 400, transform=fn)
    assert sum(dl) == lirs.open_index(kdd_file).n
    assert seen and threading.get_ident() not in seen
    dl.dataset.close()
    # without one, the tensors are built as the batch is consumed (no pool task per batch)
    ds = make_dataloader(kdd_file, 400).dataset
    assert ds.loader().transform is None and all(isinstance(b["X"], torch.Tensor) for b in ds)
    ds.close()


def _elastic_rank(rank, world, port, path, out_dir, phase):
    import torch.distributed as dist

    from lirs.torch import make_dataloader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        # the same global batch (120) over 2 ranks, then over 3
        dl = make_dataloader(path, 120 // world, num_workers=phase, granularity="window", group_bytes=8192,
                             window=3, seed=7, epoch=1)
        if phase == 0:
            it = iter(dl)
            ids = [next(it)["ids"].numpy() for _ in range(3 + rank)]  # ranks need not step together
            with open(os.path.join(out_dir, f"state{rank}.pkl"), "wb") as f:
                pickle.dump(dl.state_dict(), f)
        else:
            states = []
            for r in range(2):
                with open(os.path.join(out_dir, f"state{r}.pkl"), "rb") as f:
                    states.append(pickle.load(f))
            dl.load_state_dict(states)
            ids = [b["ids"].numpy() for b in dl]
        np.save(os.path.join(out_dir, f"p{phase}r{rank}.npy"), np.concatenate(ids))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_elastic_resume_2_then_3_ranks_gloo(kdd_file, tmp_path):
    import torch.multiprocessing as mp

    n = lirs.open_index(kdd_file).n
    # forked ranks start at once (torch and lirs already imported); each makes its own engine
    for world, phase in ((2, 0), (3, 1)):
        mp.start_processes(_elastic_rank, args=(world, _free_port(), kdd_file, str(tmp_path), phase), nprocs=world,
                           join=True, start_method="fork")
    done = np.concatenate([np.load(tmp_path / f"p0r{r}.npy") for r in range(2)])
    rest = [np.load(tmp_path / f"p1r{r}.npy") for r in range(3)]
    assert len(done) == 7 * 60 and all(len(x) for x in rest), "every new rank gets a share"
    rest = np.concatenate(rest)
    assert len(np.unique(rest)) == len(rest), "no record twice"
    assert not np.intersect1d(rest, done).size, "nothing consumed comes back"
    assert np.array_equal(np.sort(np.concatenate([done, rest])), np.arange(n)), "the rest, each once"


def test_parts_pack_into_one_buffer_at_aligned_offsets():
    """The layout a worker's Packed batch and the device Feeder's staging share: every part at a
    multiple of ALIGN, viewed back as itself (dtype, shape, values), non-contiguous parts too."""
    from lirs import tensors

    g = torch.Generator().manual_seed(0)
    ts = [torch.arange(7, dtype=torch.int64), torch.rand(5, generator=g) > 0.5, torch.empty(0, dtype=torch.int32),
          torch.rand(3, 4, generator=g).t(), torch.tensor([1.5], dtype=torch.float64)]
    spans, total = tensors.pack_spans(ts)
    assert all(a % tensors.ALIGN == 0 for a, *_ in spans) and total % tensors.ALIGN == 0
    assert total >= sum(t.numel() * t.element_size() for t in ts)
    buf = np.full(total, 0xAB, np.uint8)
    tensors.pack_into(buf, ts, spans)
    for got, t in zip(tensors.span_views(torch.from_numpy(buf), spans), ts):
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t)


@pytest.mark.parametrize("sparse", ["csr", "coo", "dense"])
@pytest.mark.parametrize("inband", [True, False])
def test_packed_batches_cross_processes_intact(small_svm, monkeypatch, sparse, inband):
    """What a DataLoader worker sends: one buffer, rebuilt as the same tensors (pickle stream or
    shared memory)."""
    import io

    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - registers the tensor reductions

    import lirs.torch as lt
    from lirs import ring, workers

    monkeypatch.setattr(ring, "INBAND_BYTES", 1 << 30 if inband else 0)
    with lirs.Loader(small_svm, 50) as loader:
        b = next(iter(loader))
    for output, label in (("dict", True), ("tuple", False)):
        b.y = b.y if label else None
        ids, X, y = lt.to_tensors(b, sparse)
        buf = io.BytesIO()
        ForkingPickler(buf).dump(workers.Packed(ids, X, y, output))
        got = pickle.loads(buf.getvalue())
        if output == "tuple":
            got = {"X": got[0], "y": got[1], "ids": got[2]}
        assert torch.equal(got["ids"], ids) and (y is None) == (got["y"] is None)
        assert y is None or torch.equal(got["y"], y)
        assert got["X"].layout == X.layout and got["X"].shape == X.shape
        assert torch.equal(got["X"].to_dense(), X.to_dense())


# --------------------------------------------------------------------------- persistent workers, pools, devices


def _order(path, B, epoch, **kw):
    return np.concatenate([b.ids for b in _loader_batches(path, B, epoch=epoch, **kw)])


def test_hand_built_persistent_dataloader_follows_set_epoch(kdd_file):
    """A user's own DataLoader(persistent_workers=True): set_epoch before each pass reaches the
    workers (their dataset copies were made once), so pass e delivers the Loader's epoch e."""
    import torch.utils.data as tud

    from lirs.torch import LirsIterableDataset

    kw = dict(granularity="window", group_bytes=8192, window=3, seed=6)
    ds = LirsIterableDataset(kdd_file, 90, **kw)
    dl = tud.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in (0, 1, 0):
        ds.set_epoch(epoch)
        assert np.array_equal(_ids(dl), _order(kdd_file, 90, epoch, **kw)), f"epoch {epoch}"
    # passes without set_epoch go on to the next epoch, as they do in the main process
    ds.set_epoch(3)
    assert np.array_equal(_ids(dl), _order(kdd_file, 90, 3, **kw))
    assert np.array_equal(_ids(dl), _order(kdd_file, 90, 4, **kw))


def test_a_hand_built_dataloaders_workers_make_the_datasets_state_an_error(kdd_file):
    """The main process of a DataLoader built by hand does not see what its workers delivered: the
    dataset's state said batch 0 after 5 batches (a resume then delivered them twice). It is a
    UsageError naming what counts, until the main process chooses a new pass (set_epoch); without
    workers the dataset counts its batches itself."""
    import torch.utils.data as tud

    from lirs.errors import UsageError
    from lirs.torch import LirsIterableDataset

    ds = LirsIterableDataset(kdd_file, 50, granularity="group", seed=1)
    it = iter(tud.DataLoader(ds, batch_size=None, num_workers=2))
    for _ in range(5):
        next(it)
    with pytest.raises(UsageError, match="make_dataloader"):
        ds.state_dict()
    del it
    ds.set_epoch(2)
    assert (ds.state_dict()["epoch"], ds.state_dict()["next_batch"]) == (2, 0)
    it = iter(tud.DataLoader(ds, batch_size=None, num_workers=0))
    for _ in range(5):
        next(it)
    assert ds.state_dict()["next_batch"] == 5


def test_make_dataloaders_own_count_stands_after_a_hand_built_dataloaders_pass(kdd_file):
    """Train with make_dataloader, evaluate with a DataLoader built by hand over its dataset, then
    checkpoint with dl.state_dict(): its own count of the batches the loop received is the state
    (it was refused, telling to take dl.state_dict()); the dataset's own state stays an error."""
    import torch.utils.data as tud

    from lirs.errors import UsageError
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=8)
    whole = _order(kdd_file, 100, 0, **kw)
    dl = make_dataloader(kdd_file, 100, num_workers=2, **kw)
    try:
        it = iter(dl)
        head = np.concatenate([next(it)["ids"].numpy() for _ in range(5)])
        before = dl.state_dict()
        assert np.array_equal(np.sort(_ids(tud.DataLoader(dl.dataset, batch_size=None, num_workers=2))),
                              np.arange(len(whole)))
        assert dl.state_dict() == before and before["next_batch"] == 5
        with pytest.raises(UsageError, match="make_dataloader"):
            dl.dataset.state_dict()
        del it
        dl.load_state_dict(dl.state_dict())
        assert np.array_equal(np.concatenate([head, _ids(dl)]), whole)
    finally:
        dl.dataset.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_make_dataloader_plain_passes_and_set_epoch(kdd_file, num_workers):
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=4)
    dl = make_dataloader(kdd_file, 110, num_workers=num_workers, **kw)
    assert dl.persistent_workers == (num_workers > 0)
    assert np.array_equal(_ids(dl), _order(kdd_file, 110, 0, **kw))
    assert np.array_equal(_ids(dl), _order(kdd_file, 110, 1, **kw)), "a plain second pass is epoch 1"
    dl.dataset.set_epoch(7)
    assert np.array_equal(_ids(dl), _order(kdd_file, 110, 7, **kw))
    dl.dataset.set_epoch(1)
    assert np.array_equal(_ids(dl), _order(kdd_file, 110, 1, **kw))


def test_persistent_workers_resume_through_the_same_dataloader(kdd_file):
    """load_state_dict on a DataLoader whose workers already run (persistent): the next pass goes
    on exactly where the state left off, and the pass after it is the next whole epoch."""
    from lirs.torch import make_dataloader

    kw = dict(granularity="window", group_bytes=8192, window=3, seed=9)
    whole = [b.ids for b in _loader_batches(kdd_file, 80, epoch=2, **kw)]
    dl = make_dataloader(kdd_file, 80, num_workers=2, epoch=2, **kw)
    for k in (3, 8):
        dl.dataset.set_epoch(2)
        it = iter(dl)
        head = [next(it)["ids"].numpy() for _ in range(k)]
        state = dl.state_dict()
        del it
        dl.load_state_dict(state)
        tail = [b["ids"].numpy() for b in dl]
        assert len(head) + len(tail) == len(whole), f"resumed at {k}"
        assert all(np.array_equal(a, b) for a, b in zip(head + tail, whole)), f"resumed at {k}"
    assert np.array_equal(_ids(dl), _order(kdd_file, 80, 3, **kw)), "then the next epoch, whole"


@pytest.mark.parametrize("granularity", ["group", "window"])
def test_a_newer_pass_of_persistent_workers_stops_the_older_one(kdd_file, granularity):
    """Two iterators of one DataLoader whose workers persist: the workers serve the newest pass, so
    the newer iterator gets its whole epoch (the next one, as a plain pass does), each record once,
    and the older one stops with a UsageError saying why at its next batch, instead of taking the
    newer pass's batches (records twice, epochs mixed)."""
    from lirs.errors import UsageError
    from lirs.torch import make_dataloader

    kw = dict(granularity=granularity, group_bytes=8192, window=3, seed=4)
    dl = make_dataloader(kdd_file, 80, num_workers=2, **kw)
    a = iter(dl)
    head = [next(a)["ids"].numpy() for _ in range(3)]
    b = iter(dl)
    got = [next(b)["ids"].numpy() for _ in range(3)]
    with pytest.raises(UsageError, match="superseded by a newer iteration"):
        next(a)
    got += [x["ids"].numpy() for x in b]
    assert np.array_equal(np.concatenate(got), _order(kdd_file, 80, 1, **kw)), "epoch 1, whole, in order"
    assert np.array_equal(np.concatenate(head), _order(kdd_file, 80, 0, **kw)[:len(np.concatenate(head))])


def _checkpoint_after_ten_batches(kdd_file):
    """(epoch 0's order, make_dataloader's state after 10 batches of 100, the Loader keywords)."""
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=5)
    first = make_dataloader(kdd_file, 100, **kw)
    it = iter(first)
    for _ in range(10):
        next(it)
    return _order(kdd_file, 100, 0, **kw), first.state_dict(), kw


@pytest.mark.parametrize("train_workers", [0, 2])
def test_a_resume_is_taken_by_its_pass_alone_not_by_a_hand_built_dataloaders_workers(kdd_file, train_workers):
    """Resume training, then evaluate with a persistent DataLoader built by hand over the same
    dataset: the training pass took the resume point, so the evaluation's workers deliver the
    whole epoch (they adopted the resume point left on the board and skipped what the checkpoint
    had consumed, silently)."""
    import torch.utils.data as tud

    from lirs.torch import make_dataloader

    whole, ckpt, kw = _checkpoint_after_ten_batches(kdd_file)
    train = make_dataloader(kdd_file, 100, num_workers=train_workers, **kw)
    ev = tud.DataLoader(train.dataset, batch_size=None, num_workers=2, persistent_workers=True)
    try:
        for resumed in (False, True):
            if resumed:
                train.load_state_dict(ckpt)
            assert np.array_equal(_ids(train), whole[1000:] if resumed else whole)
            got = _ids(ev)
            assert np.array_equal(np.sort(got), np.arange(len(whole))), f"evaluation after resumed={resumed}"
    finally:
        train.dataset.close()


def _second_worker_waits_for_the_gate(worker_id):
    # worker 1 starts its pass only once the test opened the gate (a file), worker 0 at once
    deadline = time.monotonic() + 60
    while worker_id == 1 and not os.path.exists(os.environ["LIRS_TEST_GATE"]) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_fresh_workers_of_one_pass_deliver_one_epoch_whatever_is_posted_meanwhile(kdd_file, tmp_path, monkeypatch):
    """A hand-built DataLoader's fresh workers over make_dataloader's dataset: the training pass
    starting between its two workers' starts posts the next epoch. Worker 1 took it while worker 0
    kept the epoch of its copy: records twice and lost. A fresh copy keeps the epoch it was made with."""
    import torch.utils.data as tud

    from lirs.torch import make_dataloader

    gate = tmp_path / "gate"
    monkeypatch.setenv("LIRS_TEST_GATE", str(gate))
    kw = dict(granularity="group", group_bytes=8192, seed=2)
    train = make_dataloader(kdd_file, 100, **kw)
    ev = tud.DataLoader(train.dataset, batch_size=None, num_workers=2, worker_init_fn=_second_worker_waits_for_the_gate)
    assert np.array_equal(_ids(train), _order(kdd_file, 100, 0, **kw))
    it_ev = iter(ev)
    got = [next(it_ev)["ids"].numpy()]  # worker 0's pass began
    it_tr = iter(train)
    next(it_tr)  # the training pass posts epoch 1
    gate.touch()
    got += [b["ids"].numpy() for b in it_ev]
    assert np.array_equal(np.sort(np.concatenate(got)), np.sort(_order(kdd_file, 100, 0, **kw)))
    assert len(np.concatenate(got)) == lirs.open_index(kdd_file).n
    del it_tr


@pytest.mark.parametrize("train_workers", [0, 2])
@pytest.mark.parametrize("evaluation", ["main", "persistent", "fresh"])
def test_an_evaluation_between_a_load_and_the_resumed_pass_leaves_the_resume_to_it(kdd_file, train_workers,
                                                                                    evaluation):
    """Load a checkpoint into make_dataloader's DataLoader, validate with a DataLoader built by hand
    over the same dataset, then train: the evaluation took the resume point (its persistent workers
    from the board, fresh ones from their copy, the main process itself) and served what the
    checkpoint had not consumed, silently. It is the loading DataLoader's: the evaluation delivers
    that epoch whole, and the training pass resumes."""
    import torch.utils.data as tud

    from lirs.torch import make_dataloader

    whole, ckpt, kw = _checkpoint_after_ten_batches(kdd_file)
    train = make_dataloader(kdd_file, 100, num_workers=train_workers, **kw)
    workers = 0 if evaluation == "main" else 2
    ev = tud.DataLoader(train.dataset, batch_size=None, num_workers=workers, persistent_workers=evaluation == "persistent")
    try:
        if evaluation == "persistent":
            _ids(ev)  # its workers started before the load
        train.load_state_dict(ckpt)
        got = _ids(ev)
        assert np.array_equal(np.sort(got), np.arange(len(whole))), "the evaluation served the epoch whole"
        assert np.array_equal(_ids(train), whole[1000:]), "the training pass resumed"
    finally:
        train.dataset.close()


def test_worker_pools_take_their_share_of_the_cores(monkeypatch, kdd_file):
    import torch.utils.data as tud

    import lirs.torch as lt
    from lirs import workers

    assert lt.worker_threads(4) is None, "the main process keeps the Loader's default"
    monkeypatch.setattr(workers, "usable_cores", lambda: 16)
    monkeypatch.setattr(tud, "get_worker_info", lambda: object())
    assert [lt.worker_threads(w) for w in (1, 2, 4, 8, 16, 32)] == [17, 9, 5, 3, 2, 2]
    monkeypatch.setattr(lt, "worker_of", lambda: (1, 4))
    ds = lt.LirsIterableDataset(kdd_file, 50)
    assert ds.loader().threads == 5
    # a window is decoded on the worker's whole share: the cores but one (the main process's) split
    # between the workers, rounded up (8 workers on 16 cores: 2 each, not 1)
    assert ds.loader()._decoder.decode_threads() == 4
    assert [workers.worker_pool(w, {})["decode_threads"] for w in (1, 2, 4, 8, 16)] == [15, 8, 4, 2, 1]
    assert lt.LirsIterableDataset(kdd_file, 50, threads=3).loader().threads == 3, "the user's choice stands"
    assert lt.LirsIterableDataset(kdd_file, 50, threads=3).loader()._decoder.decode_threads() == 1, \
        "a pool the user sized keeps the Loader's rule"
    assert lt.LirsIterableDataset(kdd_file, 50, decode_threads=6).loader()._decoder.decode_threads() == 6
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)  # 2 cores: as before, one a worker
    assert [workers.worker_pool(w, {})["decode_threads"] for w in (1, 2, 4)] == [1, 1, 1]


def test_pass_board_round_trip():
    from lirs.state import ResumeState
    from lirs.passboard import BOARD_BYTES, PassBoard

    b = PassBoard()
    g1 = b.post(3, None)
    assert b.read() == (g1, 3, None)
    res = ResumeState(4, 7, ((0, 10), (20, 35)), worker=(1, 2))
    g2 = b.post(4, res)
    gen, epoch, got = b.read()
    assert (gen, epoch) == (g2, 4) and g2 == g1 + 1
    assert (got.epoch, got.next_batch, got.spans, got.worker) == (4, 7, ((0, 10), (20, 35)), (1, 2))
    g3 = b.post(4, res, owner=7)  # for one LirsDataLoader's pass: its workers alone take the resume point
    assert b.read()[:3] == (g3, 4, None) and b.read(7)[2].next_batch == 7 and b.read(8)[2] is None
    with pytest.raises(ValueError, match="does not fit"):
        b.post(5, ResumeState(5, 0, tuple((i, i + 1) for i in range(0, 4 * BOARD_BYTES, 2))))
    assert b.read()[0] == g3, "a post that does not fit leaves the last one"


def test_device_cpu_is_the_plain_path_and_cuda_needs_cuda(kdd_file, small_svm):
    from lirs.errors import UsageError
    from lirs.tensors import check_device, to_device
    from lirs.torch import make_dataloader

    assert check_device(None) is None and check_device("cpu") is None and check_device(torch.device("cpu")) is None
    with pytest.raises(UsageError, match="CUDA device"):
        check_device("meta")
    for bad in ("foo", 1.5, [0]) + (() if torch.cuda.is_available() else (0,)):  # torch's own errors before
        with pytest.raises(UsageError, match=rf"device={re.escape(repr(bad))}: .*expected 'cpu'"):
            make_dataloader(kdd_file, 100, device=bad)
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="CUDA is not available"):
            make_dataloader(kdd_file, 100, device="cuda")
    kw = dict(granularity="group", group_bytes=8192, seed=1)
    want = list(make_dataloader(kdd_file, 100, **kw))
    got = list(make_dataloader(kdd_file, 100, device="cpu", **kw))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        _same_tensors(a, b)
    # what the CUDA feeder does to each batch, on the CPU: components moved, the batch rebuilt
    for sparse in ("csr", "coo", "dense"):
        for output in ("dict", "tuple"):
            b = next(iter(make_dataloader(small_svm, 64, sparse=sparse, output=output)))
            m = to_device(b, "cpu")
            if output == "tuple":
                b, m = ({"X": t[0], "y": t[1], "ids": t[2]} for t in (b, m))
            assert m["X"].layout == b["X"].layout and torch.equal(m["X"].to_dense(), b["X"].to_dense())
            assert torch.equal(m["ids"], b["ids"]) and torch.equal(m["y"], b["y"])


def test_pass_board_pickled_outside_a_process_start_is_a_copy():
    import pickle as pk

    from lirs.passboard import PassBoard

    b = PassBoard()
    b.post(2, None)
    c = pk.loads(pk.dumps(b))
    assert c.read()[1:] == (2, None)
    b.post(5, None)
    assert c.read()[1] == 2, "a private copy"


def test_persistent_workers_under_spawn(kdd_file):
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=2)
    dl = make_dataloader(kdd_file, 300, num_workers=2, multiprocessing_context="spawn", **kw)
    assert np.array_equal(_ids(dl), _order(kdd_file, 300, 0, **kw))
    dl.dataset.set_epoch(5)
    assert np.array_equal(_ids(dl), _order(kdd_file, 300, 5, **kw)), "the spawned workers share the board"


def test_a_spawned_worker_refuses_an_index_rebuilt_after_the_main_process_opened_it(tmp_path):
    """A spawned worker opens the index again by path: one rebuilt in between (the data appended
    to) served other records than the main process counted (len, resume); a touch, whose check
    rewrites the sidecar's header, is not a rebuild."""
    import torch.utils.data as tud

    from lirs.errors import StaleIndexError
    from lirs.torch import LirsIterableDataset

    p = str(tmp_path / "w.svm")
    with open(p, "w") as f:
        f.write("".join(f"1 {i % 9 + 1}:1\n" for i in range(4000)))
    lirs.build_index(p, progress=False)
    # a hand-built DataLoader: make_dataloader's refuses any move of a data file's mtime before its workers start
    dl = tud.DataLoader(LirsIterableDataset(p, 500), batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert len(dl) == 8
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert sorted(_ids(dl)) == list(range(4000))
    with open(p, "a") as f:
        f.write("-1 1:2\n" * 300)
    lirs.build_index(p, progress=False)
    with pytest.raises(StaleIndexError, match="was rebuilt after the main process opened it"):
        _ids(dl)


def _rewrite_in_place(p, keep_mtime=False):
    """Every ``:1`` value of ``p`` made ``:2``: the same size, other bytes (its mtime put back: ``keep_mtime``)."""
    st = os.stat(p)
    with open(p, "rb") as f:
        data = f.read()
    with open(p, "r+b") as f:
        f.write(data.replace(b":1 ", b":2 "))
    # the mtime set, not left to the clock: a coarse-grained filesystem may keep it over a quick rewrite
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + (0 if keep_mtime else 10 ** 9)))


def _plain_lirs_error(e, start):
    msg = str(e)
    assert msg.startswith(start) and "lirs index" in msg, msg
    assert "Caught" not in msg and "Traceback" not in msg, "not torch's wrapped worker traceback: " + msg


@pytest.mark.parametrize("persistent", [False, True])
def test_spawned_workers_pass_on_a_data_file_changed_since_the_index_opened_as_the_plain_lirs_error(tmp_path, persistent):
    """A data file rewritten in place (same size, new mtime) after the main process opened its index, before a
    pass's spawned workers start (between passes, or before the first): the plain StaleIndexError a forked worker
    (or num_workers=0) raises, with its advice, raised before the workers start; a spawned worker opening the index
    again by path raised it through torch's fetcher, as torch's 37-line wrapped worker traceback."""
    from lirs.errors import StaleIndexError
    from lirs.torch import make_dataloader

    p = str(tmp_path / "w.svm")
    with open(p, "w") as f:
        f.write("".join(f"1 {i % 9 + 1}:1 20:{i % 7 + 1}\n" for i in range(4000)))
    lirs.build_index(p, progress=False)
    dl = make_dataloader(p, 256, num_workers=2, multiprocessing_context="spawn", persistent_workers=persistent)
    if persistent:
        assert len(dl) == 16  # the index opened
    else:
        assert sorted(_ids(dl)) == list(range(4000))
    _rewrite_in_place(p)
    with pytest.raises(StaleIndexError) as err:
        _ids(dl)
    _plain_lirs_error(err.value, f"{p} changed since its index was checked at the Loader's open")
    assert "then open a new Loader (or DataLoader)" in str(err.value)


def test_a_spawned_workers_error_before_its_walk_is_passed_on_as_the_plain_lirs_error(tmp_path):
    """A spawned worker's reopened index found stale where the main process's check could not see it (a same-size
    edit whose mtime was put back): the worker sends the error as its first item, raised as is in the main process,
    not through torch's fetcher as its wrapped worker traceback."""
    from lirs.errors import StaleIndexError
    from lirs.torch import make_dataloader

    p = str(tmp_path / "w.svm")
    with open(p, "w") as f:
        f.write("".join(f"1 {i % 9 + 1}:1 20:{i % 7 + 1}\n" for i in range(4000)))
    lirs.build_index(p, progress=False)
    dl = make_dataloader(p, 256, num_workers=2, multiprocessing_context="spawn")
    assert len(dl) == 16
    _rewrite_in_place(p, keep_mtime=True)
    with pytest.raises(StaleIndexError) as err:
        _ids(dl)
    _plain_lirs_error(err.value, f"index {p}.lirs is stale for {p}")


def test_slot_ring_batches_cross_without_the_pickle_stream(small_svm):
    """A worker's batch packed into a shared slot: only the slot's number is pickled, the main
    process gets views of it, and the slot is free again once those tensors are gone; a full ring
    or a batch too big for a slot falls back to the pickle stream."""
    import gc

    import lirs.torch as lt
    from lirs import workers

    from lirs.ring import SlotRing
    ring = SlotRing(2, 2, slot_bytes=1 << 16)
    with lirs.Loader(small_svm, 50) as loader:
        b = next(iter(loader))
    ids, X, y = lt.to_tensors(b, "csr")
    p = workers.Packed(ids, X, y, "dict", ring, 1)
    assert p.slot == (ring.token, 2) and list(ring.busy) == [0, 0, 1, 0]
    data = pickle.dumps(p)
    assert len(data) < 1000, "only the slot's number crosses"
    del p
    got = pickle.loads(data)
    assert torch.equal(got["ids"], ids) and torch.equal(got["y"], y)
    assert torch.equal(got["X"].to_dense(), X.to_dense())
    assert ring.busy[2] == 1, "held while the consumer holds the batch"
    del got
    gc.collect()
    assert ring.busy[2] == 0, "freed with the batch"
    held = [workers.Packed(ids, X, y, "dict", ring, 0) for _ in range(3)]
    assert [h.slot is not None for h in held] == [True, True, False], "a full ring falls back"
    assert workers.Packed(ids, X, y, "dict", SlotRing(1, 1, slot_bytes=64), 0).slot is None
    assert pickle.loads(pickle.dumps(ring)) is None, "outside a process start a ring is not shared"


class _Stream:
    def __init__(self, log):
        self.log = log

    def wait_event(self, e):
        self.log.append(("wait", e))


class _Event:
    def __init__(self):
        self.done = False

    def record(self, stream=None):
        self.done = True

    def synchronize(self):
        assert self.done, "waited for an event no copy recorded"


@pytest.mark.parametrize("sparse", ["csr", "coo", "dense"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_device_feeder_packs_each_batch_into_one_buffer(small_svm, monkeypatch, sparse, num_workers):
    """The Feeder of make_dataloader(device="cuda") without a GPU: CUDA's streams and events stood in
    for, plain memory for the pinned staging (two slots of 256 bytes, outgrown by the first
    batch), the copy to the "device" a copy on the CPU. Every batch comes out equal to the CPU
    one, in order, each one buffer of its own that the next batches do not overwrite (all are
    kept until the end), and each waited for (its event) before it is handed out."""
    from lirs import tensors
    from lirs.torch import make_dataloader

    log = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: _Stream(log))
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream(log))
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: log.append(("record", self.data_ptr())))
    kw = dict(granularity="group", group_bytes=4096, seed=3, sparse=sparse, num_workers=num_workers)
    want = list(make_dataloader(small_svm, 32, **kw))
    dl = make_dataloader(small_svm, 32, **kw)
    got = list(tensors.Feeder(dl._batches(), torch.device("cpu"), tensors.Staging(2, 256, pin=False)))
    dl.dataset.close()
    assert len(got) == len(want) > 4
    waits = [x for x in log if x[0] == "wait"]
    records = [x[1] for x in log if x[0] == "record"]
    assert len(waits) == len(records) == len(got) and len(set(records)) == len(got), "one buffer per batch"
    for g, w in zip(got, want):
        assert torch.equal(g["ids"], w["ids"]) and torch.equal(g["y"], w["y"])
        assert g["X"].layout == w["X"].layout and torch.equal(g["X"].to_dense(), w["X"].to_dense())


def _same_output(g, w):
    """Two batch outputs (dict or tuple) hold equal tensors of the same dtypes and layouts."""
    g, w = (g, w) if isinstance(g, dict) else (dict(zip("Xyi", g)), dict(zip("Xyi", w)))
    assert g.keys() == w.keys()
    for k in g:
        a, b = g[k], w[k]
        if b is None or not isinstance(b, torch.Tensor):
            assert a is None if b is None else a == b
            continue
        assert a.dtype == b.dtype and a.layout == b.layout and a.shape == b.shape
        assert torch.equal(a.to_dense(), b.to_dense()) if b.layout != torch.strided else torch.equal(a, b)


@pytest.mark.parametrize("data,kw", [
    ("svm", dict(sparse="csr")), ("svm", dict(sparse="csr", output="tuple", label_dtype=torch.float64)),
    ("svm", dict(sparse="coo")), ("svm", dict(sparse="dense")), ("svm", dict(label_dtype=torch.int64)),
    ("npy", dict()), ("npy", dict(output="tuple"))])
def test_a_device_feeder_packs_the_loaders_arrays_as_the_tensors_would_be(small_svm, higgs_file, monkeypatch,
                                                                          data, kw):
    """make_dataloader(device=...) with num_workers=0 and no transform hands the feeder the Loader's
    own batches: their numpy arrays are packed in one kernel call (CSR with labels float32/float64,
    dense npy); the rest (COO, dense from LIBSVM, other label dtypes) through the tensors. Either way
    each batch equals the CPU one: dtypes, layouts, shapes and values."""
    from lirs import tensors
    from lirs import torch as lt
    from lirs.torch import make_dataloader

    _stand_ins(monkeypatch, [])
    path = small_svm if data == "svm" else higgs_file
    kw = dict(granularity="group", group_bytes=4096, seed=3, **kw)
    want = list(make_dataloader(path, 32, **kw))
    dl = make_dataloader(path, 32, **kw)
    made = []
    monkeypatch.setattr(lt, "Feeder", lambda *a, **k: made.append(k["convert"]) or tensors.Feeder(*a, **k))
    empty = torch.empty  # the "device" buffer in CPU memory, for a stand-in device of type cuda
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: empty(*a, **k))
    monkeypatch.setattr(tensors, "Staging", lambda s=tensors.Staging: s(2, 256, pin=False))  # no pinned memory here
    dl.device = type("Dev", (), {"type": "cuda"})()
    packed = []
    real = tensors.pack_arrays
    monkeypatch.setattr(tensors, "pack_arrays", lambda *a: packed.append(1) or real(*a))
    got = list(dl)
    dl.dataset.close()
    assert made and made[0] is not None and made[0].output == kw.get("output", "dict")
    fast = kw.get("sparse", "csr") == "csr" and kw.get("label_dtype", torch.float32) != torch.int64
    assert len(packed) == (len(got) if fast else 0)
    assert len(got) == len(want) > 4
    for g, w in zip(got, want):
        _same_output(g, w)


@pytest.mark.parametrize("data,sparse,label", [("svm", "csr", torch.float32), ("svm", "csr", torch.float64),
                                               ("npy", "csr", torch.float32), ("svm", "coo", torch.float32),
                                               ("svm", "csr", torch.int64)])
def test_a_workers_bundle_packs_the_loaders_arrays_as_the_tensors_would_be(small_svm, higgs_file, monkeypatch,
                                                                           data, sparse, label):
    """Bundler.add_batch (a DataLoader worker's path): a Batch's numpy arrays packed as they are
    where batch_arrays carries them (CSR with float labels, dense npy), its tensors otherwise; the
    bundle unpacks to the outputs to_tensors would give, in one buffer either way."""
    import lirs.torch as lt
    from lirs import tensors, workers

    path = small_svm if data == "svm" else higgs_file
    with lirs.Loader(path, 40, granularity="group", group_bytes=4096, seed=1) as loader:
        batches = [b for _, b in zip(range(5), loader)]
    packed = []
    real = workers.pack_arrays
    monkeypatch.setattr(workers, "pack_arrays", lambda *a: packed.append(1) or real(*a))
    bundler = workers.Bundler("tuple", None, 0, max_batches=8)
    sent = [x for b in batches for x in bundler.add_batch(b.index, b, sparse, label)] + [bundler.flush()]
    got = [o for x in sent if x is not None for o in workers.unpack_bundle(x.buf, x.metas, x.indices).outputs]
    fast = sparse == "csr" and label != torch.int64
    assert len(packed) == (len(batches) if fast else 0) and len(got) == len(batches)
    for g, b in zip(got, batches):
        ids, X, y = lt.to_tensors(b, sparse, label)
        _same_output(g, (X, y, ids))
    assert tensors.batch_arrays(batches[0], sparse, label) is None or fast


def test_a_bundles_batches_unpack_as_views_of_its_buffer_as_each_one_alone():
    """unpack_many (the main process, once a bundle): each batch's output is what unpack gives it
    alone, its tensors views of the bundle's buffer (no copy); a buffer not on an ALIGN boundary
    is unpacked a batch at a time."""
    from lirs import tensors

    rng = np.random.default_rng(2)
    metas, chunks, o = [], [], 0
    for k in (3, 5, 1):
        arrays = [np.arange(k, dtype=np.int64) + o, rng.random(k).astype(np.float64),
                  rng.random((k, 4)).astype(np.float32)]
        spans, total = tensors.array_spans(arrays)
        host = np.zeros(total, np.uint8)
        tensors.pack_arrays(host, arrays, spans)
        metas.append(("dense", (k, 4), True, "tuple", [(a + o, nb, dt, sh) for a, nb, dt, sh in spans]))
        chunks.append(host)
        o += total
    buf = torch.from_numpy(np.concatenate(chunks))
    many, alone = tensors.unpack_many(buf, metas), [tensors.unpack(buf, m) for m in metas]
    for g, w in zip(many, alone):
        _same_output(g, w)
        assert all(t.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr() for t in g if t is not None)
    off = torch.zeros(o + 8, dtype=torch.uint8)
    off[8:] = buf
    assert off[8:].storage_offset() % tensors.ALIGN
    for g, w in zip(tensors.unpack_many(off[8:], metas), alone):
        _same_output(g, w)


def test_pack_arrays_lays_out_what_span_views_read():
    from lirs import tensors

    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 9, 7).astype(np.int64), rng.random(7).astype(np.float32),
              np.arange(8, dtype=np.int32), rng.integers(0, 50, 13).astype(np.int32),
              rng.random((13, 3)).astype(np.float64)]
    spans, total = tensors.array_spans(arrays)
    assert all(a % tensors.ALIGN == 0 for a, *_ in spans) and total % tensors.ALIGN == 0
    host = np.zeros(total, np.uint8)
    tensors.pack_arrays(host, arrays, spans)
    for v, a in zip(tensors.span_views(torch.from_numpy(host), spans), arrays):
        assert v.dtype == torch.from_numpy(a).dtype and torch.equal(v, torch.from_numpy(a))
    with pytest.raises(ValueError, match="do not fit"):
        tensors.pack_arrays(np.zeros(spans[-1][0] + spans[-1][1] - 1, np.uint8), arrays, spans)
    with pytest.raises(ValueError, match="6 arrays"):
        tensors.pack_arrays(np.zeros(2 * total, np.uint8), arrays + arrays[:1], tensors.array_spans(arrays + arrays[:1])[0])


def _stand_ins(monkeypatch, log):
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: _Stream(log))
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream(log))
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: None)


def test_the_device_feeder_pulls_ahead_on_a_thread_of_its_own(monkeypatch):
    """The Feeder's thread pulls and moves the batches (all but the first, made on the consumer's
    thread) at most FEED_AHEAD + 1 ahead of the one handed out; an error raised by the source comes
    out after the batches before it; a consumer that stops early stops the thread and closes the
    source on its own thread."""
    import threading

    from lirs import tensors

    _stand_ins(monkeypatch, [])
    me = threading.get_ident()
    pulled, closed = [], []

    def source(n, fail_at=None):
        try:
            for i in range(n):
                if i == fail_at:
                    raise ValueError(f"bad batch {i}")
                pulled.append((i, threading.get_ident()))
                yield {"ids": torch.arange(i, i + 3), "X": torch.full((3, 2), float(i)), "y": torch.zeros(3)}
        finally:
            closed.append(threading.get_ident())

    feed = tensors.Feeder(source(50), torch.device("cpu"), tensors.Staging(pin=False), ahead=2)
    for k, b in enumerate(feed):
        assert b["ids"].tolist() == [k, k + 1, k + 2] and float(b["X"][0, 0]) == k
        if k == 5:
            time.sleep(0.2)  # the thread fills its queue meanwhile, and no further
            assert len(pulled) <= k + 1 + 2 + 1
            break
    assert pulled[0][1] == me and all(t != me for _, t in pulled[1:]), "the first batch on the consumer's thread"
    assert closed == [me], "the source closed when the consumer stopped, on the consumer's thread"
    assert not any(t.name == "lirs-feed" for t in threading.enumerate())

    pulled.clear()
    got = []
    with pytest.raises(ValueError, match="bad batch 7"):
        for b in tensors.Feeder(source(20, fail_at=7), torch.device("cpu"), tensors.Staging(pin=False)):
            got.append(int(b["ids"][0]))
    assert got == list(range(7)), "the error comes out where its batch would have"


def test_window_workers_read_their_own_windows(kdd_file, small_svm, monkeypatch):
    """With window steps each of make_dataloader's workers walks the windows w, w + W, ... (no
    warning any more: each window is read once); a batch across windows of two workers comes in
    pieces, joined in the main process into the Loader's batch."""
    import lirs.torch as lt
    from lirs.workers import Unbundled

    items = []
    real = lt.in_order
    monkeypatch.setattr(lt, "in_order", lambda it, first: real((items.append(x) or x for x in it), first))
    for path, sparse, group_bytes, window in ((kdd_file, "csr", 8192, 3), (kdd_file, "coo", 8192, 3), (small_svm, "dense", 4096, 1)):
        kw = dict(granularity="window", group_bytes=group_bytes, window=window, seed=9, sparse=sparse)
        items.clear()
        dl = lt.make_dataloader(path, 50, num_workers=2, **kw)
        got = list(dl)
        ref = list(lt.make_dataloader(path, 50, **kw))
        assert len(got) == len(ref)
        for a, b in zip(got, ref):
            assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["y"], b["y"])
            assert a["X"].layout == b["X"].layout and a["X"].shape == b["X"].shape
            if sparse == "csr":
                _same_tensors(a, b)
            elif sparse == "coo":
                assert torch.equal(a["X"]._indices(), b["X"]._indices())
                assert torch.equal(a["X"]._values(), b["X"]._values())
            else:
                assert torch.equal(a["X"], b["X"])
        keys = [k for x in items if isinstance(x, Unbundled) for k in x.indices]
        assert any(isinstance(k, tuple) for k in keys), "some batches crossed in pieces"
        dl.dataset.close()


def test_window_workers_pieces_survive_the_pin_memory_thread(kdd_file, monkeypatch):
    """With ``pin_memory=True`` torch's pin thread rebuilds every item on its way to the main
    process, and earlier torch releases (the ``torch`` extra allows them) rebuilt a plain tuple as
    a list, their "backwards compatibility" branch: a piece's key ``(batch, window, records)``
    among them. Simulated here (no
    accelerator pins on this machine), the pieces still join into the Loader's batches; a list key
    was taken for a whole batch's and failed as a dict key."""
    import collections

    import lirs.torch as lt

    def pinned(x):  # the rebuild of those releases, each tensor kept as it is
        if isinstance(x, torch.Tensor) or isinstance(x, (str, bytes)):
            return x
        if isinstance(x, collections.abc.Mapping):
            return {k: pinned(v) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*(pinned(v) for v in x))
        if isinstance(x, (tuple, list)):
            return [pinned(v) for v in x]
        return x

    real = lt.in_order
    monkeypatch.setattr(lt, "in_order", lambda it, first: real((pinned(x) for x in it), first))
    kw = dict(granularity="window", group_bytes=8192, window=3, seed=9)
    dl = lt.make_dataloader(kdd_file, 50, num_workers=2, **kw)
    try:
        got = list(dl)
    finally:
        dl.dataset.close()
    ref = list(lt.make_dataloader(kdd_file, 50, **kw))
    assert len(got) == len(ref) > 10
    for a, b in zip(got, ref):
        _same_tensors(a, b)


def test_join_outputs_stacks_pieces_by_rows():
    from lirs.workers import join_outputs

    dense = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    dense[1, 1] = dense[2, 0] = 0
    for cut in (1, 3):
        for layout in ("csr", "coo", "dense"):
            def as_(X):
                return X.to_sparse_csr() if layout == "csr" else X.to_sparse_coo().coalesce() if layout == "coo" else X
            a = {"ids": torch.arange(cut), "X": as_(dense[:cut]), "y": torch.zeros(cut)}
            b = {"ids": torch.arange(cut, 4), "X": as_(dense[cut:]), "y": torch.ones(4 - cut)}
            j = join_outputs([a, b])
            assert torch.equal(j["ids"], torch.arange(4)) and torch.equal(j["X"].to_dense(), dense)
            assert j["X"].layout == a["X"].layout and j["y"].tolist() == [0] * cut + [1] * (4 - cut)
            t = join_outputs([(a["X"], None, a["ids"]), (b["X"], None, b["ids"])])
            assert t[1] is None and torch.equal(t[0].to_dense(), dense) and torch.equal(t[2], torch.arange(4))


@pytest.mark.parametrize("num_workers,raw", [(0, False), (0, True), (2, False)])
def test_a_device_feeder_counts_the_batches_handed_out(small_svm, monkeypatch, num_workers, raw):
    """The feeder pulls batch k + 1 before it hands out batch k: a state taken while the consumer
    holds batch k resumes at k + 1 (streams and events stood in for, as above), whether it is fed
    tensors or the Loader's own batches (``raw``, as make_dataloader(device=) without workers)."""
    from lirs import tensors
    from lirs.torch import make_dataloader

    log = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: _Stream(log))
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream(log))
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: None)
    kw = dict(granularity="group", group_bytes=4096, seed=4, num_workers=num_workers)
    want = [b["ids"] for b in make_dataloader(small_svm, 32, **kw)]
    dl = make_dataloader(small_svm, 32, **kw)
    ds = dl.dataset
    feed = tensors.Feeder(dl._batches(raw), torch.device("cpu"), tensors.Staging(pin=False),
                          position=(lambda: ds._pos, ds.handed_out), convert=ds._converter() if raw else None)
    state = None
    for i, b in enumerate(feed):
        assert torch.equal(b["ids"], want[i]) and dl.state_dict()["next_batch"] == i + 1
        if i == 3:
            state = dl.state_dict()
            break
    ds.close()
    again = make_dataloader(small_svm, 32, **kw)
    again.load_state_dict(state)
    rest = [b["ids"] for b in again]
    again.dataset.close()
    assert len(rest) == len(want) - 4 and all(torch.equal(a, b) for a, b in zip(rest, want[4:]))


def _counts_rows(b):
    return {**b, "rows": torch.tensor(len(b["ids"]))}


@pytest.mark.parametrize("num_workers,device", [(0, False), (2, False), (0, True), (2, True)])
def test_a_lirs_dataloaders_collate_fn_takes_each_batch_whatever_the_workers(small_svm, monkeypatch, num_workers,
                                                                             device):
    """LirsDataLoader(collate_fn=f): f takes every batch, in order, whatever num_workers (its workers
    handed f their bundles of batches, and the DataLoader yielded f's results as batches); with a
    device feeder (CUDA stood in for, as above) f runs before the batch is moved."""
    from lirs import tensors
    from lirs.torch import LirsDataLoader, LirsIterableDataset

    kw = dict(granularity="group", group_bytes=4096, seed=3)
    with lirs.Loader(small_svm, 32, **kw) as ld:
        want = [b.ids for b in ld.epoch(0)]
    dl = LirsDataLoader(LirsIterableDataset(small_svm, 32, **kw), batch_size=None, num_workers=num_workers,
                        collate_fn=_counts_rows)
    if device:
        _stand_ins(monkeypatch, [])
        empty = torch.empty  # the "device" buffer in CPU memory, for a stand-in device of type cuda
        monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: empty(*a, **k))
        monkeypatch.setattr(tensors, "Staging", lambda s=tensors.Staging: s(2, 256, pin=False))
        dl.device = type("Dev", (), {"type": "cuda"})()
    try:
        got = list(dl)
    finally:
        dl.dataset.close()
    assert len(got) == len(want) > 4
    for g, w in zip(got, want):
        assert np.array_equal(g["ids"].numpy(), w) and int(g["rows"]) == len(w) and g["X"].shape[0] == len(w)


class _FailsOnce:
    """A collate_fn that raises a transient error on its ``at``-th call (0-based), as a flaky one might."""

    def __init__(self, at):
        self.calls, self.at = 0, at

    def __call__(self, b):
        self.calls += 1
        if self.calls - 1 == self.at:
            raise RuntimeError("transient collate error")
        return b


@pytest.mark.parametrize("at", [0, 3])
@pytest.mark.parametrize("num_workers,persistent,pin", [(0, False, False), (0, False, True), (2, False, False),
                                                        (2, True, False)])
def test_a_batch_whose_collate_fn_raised_is_not_counted(small_svm, num_workers, persistent, pin, at):
    """A loop that catches a collate_fn's error and saves the state resumes AT that batch: it was
    counted as delivered before collate_fn ran (the dataset counted it as it yielded, or the main
    process before collating), so a resume started after it and the batch was lost. The very first
    batch of a pass as well: after the state is loaded a new iteration serves it first."""
    from lirs.torch import LirsDataLoader, LirsIterableDataset

    kw = dict(granularity="group", group_bytes=4096, seed=3)
    with lirs.Loader(small_svm, 32, **kw) as ld:
        want = [b.ids for b in ld.epoch(0)]
    dl = LirsDataLoader(LirsIterableDataset(small_svm, 32, **kw), batch_size=None, num_workers=num_workers,
                        persistent_workers=persistent, pin_memory=pin, collate_fn=_FailsOnce(at))
    got = []
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*pin_memory.*no accelerator", UserWarning)
            with pytest.raises(RuntimeError, match="transient collate error"):
                for b in dl:
                    got.append(b["ids"].numpy())
            state = dl.state_dict()
            assert (state["epoch"], state["next_batch"]) == (0, at) and len(got) == at
            dl.load_state_dict(state)
            got += [b["ids"].numpy() for b in dl]
    finally:
        dl.dataset.close()
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))


def test_a_newer_pass_stops_an_older_device_feeders_thread_before_it_takes_the_workers(small_svm, monkeypatch):
    """make_dataloader(device=..., num_workers=2) (persistent workers; CUDA stood in for, as above):
    an older iterator left open kept its feeder's thread pulling from torch's iterator over the
    workers while a newer pass reset it (a KeyError from torch, batches of the newer pass, or the
    newer pass failing). The newer pass stops that thread first: it gets its whole epoch, in order,
    and the older iterator a UsageError at its next batch."""
    from lirs import tensors
    from lirs.errors import UsageError
    from lirs.torch import make_dataloader

    _stand_ins(monkeypatch, [])
    empty = torch.empty  # the "device" buffer in CPU memory, for a stand-in device of type cuda
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: empty(*a, **k))
    monkeypatch.setattr(tensors, "Staging", lambda s=tensors.Staging: s(2, 256, pin=False))
    kw = dict(granularity="group", group_bytes=4096, seed=4)
    dl = make_dataloader(small_svm, 16, num_workers=2, **kw)
    dl.device = type("Dev", (), {"type": "cuda"})()
    try:
        for _ in range(2):
            old = iter(dl)
            next(old)
            assert np.array_equal(_ids(dl), _order(small_svm, 16, 1, **kw)), "the newer pass: epoch 1, whole"
            with pytest.raises(UsageError, match="superseded by a newer iteration"):
                next(old)
            dl.dataset.set_epoch(0)
    finally:
        dl.dataset.close()


def test_workers_send_bundles_of_batches_put_back_in_order(kdd_file, monkeypatch):
    """make_dataloader's workers send their batches in bundles (1, 2, 4, ... batches: one DataLoader
    item each), and the main process hands them out in the Loader's order, counted one by one."""
    import lirs.torch as lt
    from lirs.workers import Unbundled

    items = []
    real = lt.in_order

    def spy(it, first):
        return real((items.append(x) or x for x in it), first)

    monkeypatch.setattr(lt, "in_order", spy)
    kw = dict(granularity="group", group_bytes=8192, seed=8)
    dl = lt.make_dataloader(kdd_file, 40, num_workers=2, **kw)
    nb = len(dl)
    got = []
    for i, b in enumerate(dl):
        got.append(b["ids"].numpy())
        assert dl.state_dict()["next_batch"] == i + 1
    assert np.array_equal(np.concatenate(got), _order(kdd_file, 40, 0, **kw))
    assert all(isinstance(x, Unbundled) for x in items)
    sizes = [len(x.indices) for x in items]
    assert sum(sizes) == nb and len(items) < nb / 4, sizes
    assert sizes[:4] == [1, 1, 2, 2], "each worker's first bundles grow from one batch"
    assert items[0].indices == [0] and items[2].indices == [2, 4], "worker 0 takes batches 0, 2, 4, ..."


def test_bundles_cross_in_a_slot_and_free_it_with_their_last_batch(small_svm):
    import gc

    import lirs.torch as lt
    from lirs import workers

    from lirs.ring import SlotRing
    ring = SlotRing(1, 2, slot_bytes=1 << 16)
    with lirs.Loader(small_svm, 50) as loader:
        batches = [b for _, b in zip(range(3), loader)]
    bundler = workers.Bundler("dict", ring, 0, max_batches=2)
    sent = [x for b in batches for x in bundler.add(b.index, *lt.to_tensors(b, "csr"))]
    assert bundler.flush() is None and [b.indices for b in sent] == [[0], [1, 2]]
    assert len(pickle.dumps(sent[1])) < 2000, "only the slot's number and the layout cross"
    slot = sent[1].slot[1]
    bundle = pickle.loads(pickle.dumps(sent[1]))
    del sent
    for i, out in zip(bundle.indices, bundle.outputs):
        ids, X, y = lt.to_tensors(batches[i], "csr")
        assert torch.equal(out["ids"], ids) and torch.equal(out["y"], y)
        assert torch.equal(out["X"].to_dense(), X.to_dense())
    one = bundle.outputs[0]
    del bundle, out
    gc.collect()
    assert ring.busy[slot] == 1, "the slot is held while one of its batches is"
    del one
    gc.collect()
    assert ring.busy[slot] == 0, "and freed with the last"
    # a batch too big for a slot travels with its bundle in the pickle stream
    big = workers.Bundler("tuple", SlotRing(1, 1, slot_bytes=64), 0, max_batches=1)
    (b,) = big.add(0, *lt.to_tensors(batches[0], "csr"))
    X, y, ids = pickle.loads(pickle.dumps(b)).outputs[0]
    assert b.slot is None and torch.equal(ids, lt.to_tensors(batches[0], "csr")[0])


def test_in_order_refuses_a_missing_batch():
    import lirs.torch as lt
    from lirs.workers import Unbundled

    assert list(lt.in_order([Unbundled([1, 3], ["b", "d"]), Unbundled([0, 2], ["a", "c"])], 0)) == list("abcd")
    with pytest.raises(RuntimeError, match="batches \\[2\\] but not all of batch 1"):
        list(lt.in_order([Unbundled([0, 2], ["a", "c"])], 0))


def test_in_order_raises_a_workers_error_at_its_batch():
    """A worker's error (an item after its last bundle) is raised once every batch before its
    batch was yielded, whichever worker's items come first; the earliest of two errors wins."""
    from lirs.workers import Failed, Unbundled, in_order

    got = []
    items = [Unbundled([0, 2], "ac"), Failed(4, OSError(5, "bad read")), Unbundled([1, 3], "bd"),
             Unbundled([5, 7], "fh")]
    with pytest.raises(OSError, match="bad read"):
        for x in in_order(items, 0):
            got.append(x)
    assert got == list("abcd")
    got.clear()
    with pytest.raises(KeyError):  # worker 1's error at batch 1 comes before worker 0's at 2
        for x in in_order([Unbundled([0], "a"), Failed(2, ValueError()), Failed(1, KeyError())], 0):
            got.append(x)
    assert got == ["a"]
    got.clear()
    with pytest.raises(OSError, match="bad read"):  # items of one batch each (a transform): counted
        for x in in_order(["c", Failed(5, OSError(5, "bad read")), "d", "e", "f"], 2):
            got.append(x)
    assert got == list("cde")


def test_a_worker_sends_an_error_it_can_pickle_and_raises_one_it_cannot():
    """stops_at_error: the batches of a walk, then its error as a Failed item at the Loader's
    position (at batch 0 where the walk never began), with the worker's traceback as a note; an
    unpicklable error propagates (torch's path)."""
    import types

    from lirs.workers import Failed, stops_at_error

    loader = types.SimpleNamespace(position=types.SimpleNamespace(next_batch=3))  # the last walk's

    def walk(error, begins=True):
        if begins:  # as Loader.epoch's first step: a new position
            loader.position = types.SimpleNamespace(next_batch=7)
        yield "b0"
        raise error
    items = list(stops_at_error(walk(OSError(5, "bad read", "/d/x.svm")), loader, 1))
    assert items[0] == "b0" and type(items[1]) is Failed and items[1].batch == 7
    err = pickle.loads(pickle.dumps(items[1].error))
    assert err.errno == 5 and err.filename == "/d/x.svm" and "worker 1" in err.__notes__[0]

    class Local(Exception):  # a class pickle cannot find by name
        pass
    with pytest.raises(Local):
        list(stops_at_error(walk(Local("x")), loader, 0))
    # a walk that fails before it begins: the position is the last walk's, the error comes at once
    items = list(stops_at_error(walk(ValueError("no plan"), begins=False), loader, 0))
    assert items[1].batch == 0


class _TwoArgs(Exception):
    def __init__(self, a, b):  # pickles, but does not unpickle (one argument comes back)
        super().__init__(f"{a} {b}")


def test_a_workers_transform_error_keeps_its_cause():
    """A TransformError through DataLoader workers came without its __cause__ (a pickle carries
    none): the original comes back where it unpickles whole; one that does not is left out rather
    than turning the whole error into unpickling's TypeError."""
    from lirs.errors import TransformError
    from lirs.workers import Failed, in_order, stops_at_error

    loader = types.SimpleNamespace(position=types.SimpleNamespace(next_batch=0))

    def walk(cause):
        try:
            raise cause
        except Exception as c:
            raise TransformError("transform raised on batch 0") from c
        yield

    for cause, back in ((ValueError("bad 1500"), ValueError), (_TwoArgs(1, 2), None)):
        (failed,) = list(stops_at_error(walk(cause), loader, 1))
        sent = pickle.loads(pickle.dumps(failed))  # as it crosses from the worker
        with pytest.raises(TransformError) as got:
            list(in_order(iter([Failed(sent.batch, sent.error)]), 0))
        assert type(got.value.__cause__) is back if back else got.value.__cause__ is None
        if back:
            assert str(got.value.__cause__) == "bad 1500"


def test_a_hand_built_dataloaders_window_workers_are_warned_about(small_svm, tmp_path, monkeypatch, caplog):
    """A hand-built DataLoader's workers take every W-th batch (they cannot join pieces), so with
    window steps each reads nearly every window: worker 0 says so; make_dataloader's do not, but
    for batches of bytes (lines), which cross one an item there too (the warning named
    make_dataloader as the way out to a user of make_dataloader)."""
    import types

    import torch.utils.data as tud

    import lirs.torch as lt

    lines = tmp_path / "l.txt"
    lines.write_bytes(b"".join(b"line %d\n" % i for i in range(300)))
    with caplog.at_level("WARNING", logger="lirs.torch"):
        for path, bundle, gran in ((small_svm, 0, "group"), (small_svm, 16, "window"), (small_svm, 0, "window"),
                                   (str(lines), 16, "window")):
            ds = lt.LirsIterableDataset(path, 32, granularity=gran, group_bytes=4096)
            ds._bundle = bundle
            with monkeypatch.context() as m:  # as worker 0 of 2 sees it
                m.setattr(tud, "get_worker_info", lambda: types.SimpleNamespace(id=0, num_workers=2))
                next(iter(ds))
                next(iter(ds))  # a persistent worker's next pass: said once
            ds.close()
    head = "2 DataLoader workers with granularity='window', one batch an item: each worker reads nearly every window"
    assert [r.getMessage() for r in caplog.records] == [
        head + " (make_dataloader's workers without a transform read their own windows)",
        head + " (batches of bytes cross so)"]


def test_bundle_slots_are_sized_by_the_records():
    import types

    from lirs.ring import BUNDLE_BATCHES, BUNDLE_SLOT_BYTES, SLOT_BYTES, bundle_slot_bytes

    def index(record_bytes):
        return types.SimpleNamespace(n=1000, payload_bytes=1000 * record_bytes)

    assert bundle_slot_bytes(1024, index(20)) == SLOT_BYTES, "small records: the smallest slot"
    assert bundle_slot_bytes(1024, index(360)) == BUNDLE_SLOT_BYTES, "kdd-like: the largest"
    mid = bundle_slot_bytes(1024, index(200))
    assert SLOT_BYTES < mid < BUNDLE_SLOT_BYTES and mid % 4096 == 0
    assert mid >= BUNDLE_BATCHES * 1024 * 200


def test_items_cross_in_band_where_shared_memory_is_full(kdd_file, monkeypatch):
    """With /dev/shm nearly full, torch's move of an item into shared memory failed in the queue's
    feeder thread of a worker: the item was dropped and the main process waited for it for ever.
    An item that cannot have a segment crosses in the pickle stream. (Every item here takes the
    segment path: no ring, nothing small enough for the stream.)"""
    import signal

    from lirs import ring, workers
    from lirs.torch import make_dataloader

    def full(self, *a, **k):
        raise RuntimeError("unable to allocate shared memory(shm) for file </torch_1_2_3>: No space left on device (28)")

    def hung(signum, frame):
        raise TimeoutError("the DataLoader hung")

    kw = dict(granularity="group", group_bytes=8192, seed=3)
    want = _loader_batches(kdd_file, 100, **kw)
    for where in (ring, workers):  # (where the size is read: ring's; workers' before the fix)
        monkeypatch.setattr(where, "INBAND_BYTES", 0, raising=False)
    monkeypatch.setattr(workers, "ring_for", lambda *a, **k: None)
    monkeypatch.setattr(torch.UntypedStorage, "_share_fd_cpu_", full)  # inherited by the forked workers
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        got = list(make_dataloader(kdd_file, 100, num_workers=2, **kw))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert [g["ids"].tolist() for g in got] == [w.ids.tolist() for w in want]


def test_a_bundle_without_a_slot_crosses_in_band_or_as_shared_memory(small_svm, monkeypatch):
    """No ring (or no free slot): a small bundle travels in the pickle stream, a large one as one
    shared-memory tensor; both unpack to the same batches."""
    import io
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - registers the tensor reductions

    import lirs.torch as lt
    from lirs import ring, workers

    with lirs.Loader(small_svm, 50) as loader:
        batches = [b for _, b in zip(range(3), loader)]
    for inband in (1 << 30, 0):
        monkeypatch.setattr(ring, "INBAND_BYTES", inband)
        bundler = workers.Bundler("dict", None, 0, max_batches=4)
        sent = [x for b in batches for x in bundler.add(b.index, *lt.to_tensors(b, "csr"))]
        sent += [x for x in [bundler.flush()] if x is not None]
        got = []
        for x in sent:
            assert x.slot is None
            buf = io.BytesIO()
            ForkingPickler(buf).dump(x)
            got += pickle.loads(buf.getvalue()).outputs
        assert len(got) == 3
        for out, b in zip(got, batches):
            ids, X, y = lt.to_tensors(b, "csr")
            assert torch.equal(out["ids"], ids) and torch.equal(out["X"].to_dense(), X.to_dense())


def test_ring_slots_hold_a_window_of_each_worker_within_the_budget(kdd_file):
    from lirs import policies
    from lirs.policies import plans_ahead, ring_slots

    with lirs.Loader(kdd_file, 8, granularity="window", group_bytes=8192, window=40) as ld:
        plan = ld.plan(0)
        items = -(-plans_ahead(plan) // 16) + 4  # a window's bundles, and a pass's first small ones
        assert items > 4
        assert ring_slots(plan, 2, 2, 1 << 21, 16, by_window=True) == 4 + items
        assert ring_slots(plan, 2, 3, 1 << 21, 16, by_window=False) == 5  # a hand-built DataLoader's items
        assert ring_slots(plan, 1, 2, 1 << 21, 16, by_window=True) == 4  # one worker holds nothing back
        assert ring_slots(plan, 2, 2, 1 << 21, 16, True, max_bytes=2 * 6 * (1 << 21)) == 6  # 6 slots a worker
        assert ring_slots(plan, 2, 2, 1 << 21, 16, True, max_bytes=1 << 21) == 4  # never below the items asked
        assert 2 * (4 + items) * (1 << 21) < policies.RING_MAX_BYTES  # the default budget left it whole
    with lirs.Loader(kdd_file, 8, granularity="group", group_bytes=8192) as ld:
        assert ring_slots(ld.plan(0), 2, 2, 1 << 21, 16, by_window=True) == 4


def test_a_ring_takes_at_most_half_the_free_shared_memory(monkeypatch):
    import collections

    from lirs import ring

    vfs = collections.namedtuple("vfs", "f_bavail f_frsize")
    monkeypatch.setattr(ring.os, "statvfs", lambda p: vfs(16 << 10, 4096))  # 64 MiB free
    assert ring.ring_budget() == 32 << 20
    monkeypatch.setattr(ring.os, "statvfs", lambda p: vfs(1 << 30, 4096))
    assert ring.ring_budget() == ring.RING_MAX_BYTES

    def missing(p):
        raise FileNotFoundError(p)
    monkeypatch.setattr(ring.os, "statvfs", missing)
    assert ring.ring_budget() == ring.RING_MAX_BYTES


def test_window_workers_items_all_cross_in_slots(kdd_file, monkeypatch):
    """With window steps the main process holds the other workers' items while it hands out one
    worker's window (torch takes the workers' items in turn): each worker's ring has slots for a
    window's items, so none crosses as a shared-memory segment of its own (with prefetch + 2 slots,
    over a third did); the batches are those of one process."""
    from lirs import ring
    from lirs.torch import make_dataloader
    from lirs.workers import CROSSED

    # the ring's budget as on a machine with room in /dev/shm (a small one caps the slots: tested apart)
    monkeypatch.setattr(ring, "ring_budget", lambda: ring.RING_MAX_BYTES)
    kw = dict(granularity="window", group_bytes=8192, window=40, seed=3)
    ref = list(make_dataloader(kdd_file, 8, **kw))
    dl = make_dataloader(kdd_file, 8, num_workers=2, **kw)
    try:
        for _ in range(2):  # a persistent worker's second pass too
            before, n = dict(CROSSED), 0
            for a, b in itertools.zip_longest(dl, ref):  # each batch let go once used, as a training loop does
                assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["y"], b["y"])
                _same_tensors(a, b)
                n += 1
            crossed = {k: v - before.get(k, 0) for k, v in CROSSED.items() if v - before.get(k, 0)}
            assert n == len(ref) and crossed.get("slot", 0) > 20 and set(crossed) <= {"slot", "arena"}, crossed
            dl.dataset.set_epoch(0)
    finally:
        dl.dataset.close()


_FRESH_WORKERS = r"""
import sys
from lirs.torch import make_dataloader
dl = make_dataloader(sys.argv[1], 300, num_workers=2, granularity="group", engine="buffered")
print(sum(int(b["X"].shape[0]) for b in dl))
"""


_FRESH_COMPILES = r"""
import os, sys
from numba.core import event
main = os.getpid()

class Rec(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        f = ev.data["dispatcher"].py_func
        if os.getpid() != main:
            print("worker compiled", f.__module__ + "." + f.__qualname__, flush=True)

event.register("numba:compile", Rec())
""" + _FRESH_WORKERS


def _fresh_process(path: str, timeout: float, script: str = _FRESH_WORKERS, **env) -> str:
    """Run ``script`` over ``path`` in a new process (its own session, so that on a timeout its
    hung DataLoader workers go with it); its standard output."""
    import signal
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", script, path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=root, **env))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"a fresh process's DataLoader with 2 workers hung for {timeout:.0f} s") from None
    assert proc.returncode == 0, err[-3000:]
    return out


def test_workers_of_a_fresh_process_start(kdd_file):
    """A fresh process with numba's cache warm: the Loader made in the main process to size the
    workers' ring loads the cached kernels on a thread, and the workers forked meanwhile hung on
    numba's compiler lock (copied held) at their first plan, every time."""
    _fresh_process(kdd_file, 600)  # fills the cache where it was cold (no preload thread then)
    assert _fresh_process(kdd_file, 180).split() == ["2500"]


@pytest.mark.slow
def test_workers_forked_on_a_cold_cache_inherit_the_kernels(kdd_file, tmp_path):
    """On an empty numba cache the main process compiles the walk's kernels and waits for the
    warm-up helpers (loading what they compiled) before the workers fork: each worker compiled the
    planning, read and decode kernels again, side by side with the others (a 2-worker DataLoader's
    first batch took twice as long as with num_workers=0, on 2 cores). Only the packing kernels of
    the workers' own path are left to them."""
    out = _fresh_process(kdd_file, 600, _FRESH_COMPILES, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    lines = out.split("\n")
    assert lines[-2:] == ["2500", ""]
    compiled = {ln.split()[-1] for ln in lines if ln.startswith("worker compiled")}
    assert compiled and all(k.startswith("lirs.kernels.pack.") for k in compiled), sorted(compiled)


def test_joined_pieces_keep_their_dtypes_and_take_no_intra_op_threads(monkeypatch):
    """Pieces of a window batch are joined by numpy on the consumer's thread: torch.cat (which
    splits a large copy over torch's intra-op threads, slow beside busy workers) is not called for
    numpy's dtypes; int64 column indices widen the joined row pointers; a bfloat16 label (a dtype
    numpy lacks) still joins."""
    from lirs import ring, workers

    dense = torch.arange(1, 13, dtype=torch.float64).reshape(4, 3)
    a = {"ids": torch.arange(2), "X": dense[:2].to_sparse_csr(), "y": torch.zeros(2, dtype=torch.bfloat16)}
    b64 = dense[2:].to_sparse_csr()
    b64 = torch.sparse_csr_tensor(b64.crow_indices().long(), b64.col_indices().long(), b64.values(), size=b64.shape)
    a32 = torch.sparse_csr_tensor(a["X"].crow_indices().int(), a["X"].col_indices().int(), a["X"].values(), size=(2, 3))
    cats = []
    real = torch.cat
    monkeypatch.setattr(torch, "cat", lambda ts, *args, **kw: cats.append(ts[0].dtype) or real(ts, *args, **kw))
    j = workers.join_outputs([{**a, "X": a32}, {"ids": torch.arange(2, 4), "X": b64, "y": torch.ones(2, dtype=torch.bfloat16)}])
    assert cats == [torch.bfloat16]  # the labels only
    assert j["X"].crow_indices().dtype == j["X"].col_indices().dtype == torch.int64
    assert torch.equal(j["X"].to_dense(), dense) and j["X"].values().dtype == torch.float64
    assert j["y"].dtype == torch.bfloat16 and j["y"].tolist() == [0, 0, 1, 1] and torch.equal(j["ids"], torch.arange(4))
    k = workers.join_outputs([{**a, "X": a32, "y": None}, {**a, "X": a32, "y": None}])
    assert k["X"].crow_indices().dtype == torch.int32 and k["X"].crow_indices().tolist() == [0, 3, 6, 9, 12]
    assert cats == [torch.bfloat16] and k["y"] is None


def test_joined_row_pointers_past_2_31_values_widen():
    """Row pointers of a joined batch whose values pass 2**31 are int64 and not cut short (pieces
    made unchecked: only their row pointers are that large)."""
    from lirs import workers

    def piece(end):
        return torch.sparse_csr_tensor(torch.tensor([0, end], dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                                       torch.ones(1), size=(1, 5), check_invariants=False)
    X = workers._stack_rows([piece(2**31 - 10), piece(20)])
    assert X.crow_indices().dtype == X.col_indices().dtype == torch.int64
    assert X.crow_indices().tolist() == [0, 2**31 - 10, 2**31 + 10]


def test_each_set_of_workers_packs_into_a_ring_of_its_own(kdd_file):
    """Two processes taking a free slot of one ring at once would both write it. A DataLoader left
    mid-pass (its persistent workers still filling the items asked of them), a second DataLoader
    over the same dataset, and each pass of one without persistent workers (a fresh set of workers)
    pack into rings of their own; every pass's batches are the Loader's."""
    from lirs.torch import LirsDataLoader, LirsIterableDataset

    kw = dict(granularity="group", group_bytes=8192, seed=3)
    with lirs.Loader(kdd_file, 16, **kw) as ld:
        want = {e: [b.ids.tolist() for b in ld.epoch(e)] for e in (1, 2)}
    ds = LirsIterableDataset(kdd_file, 16, **kw)
    one = LirsDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    two = LirsDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=False)
    try:
        ds.set_epoch(1)
        left = iter(one)
        assert [next(left)["ids"].tolist() for _ in range(3)] == want[1][:3]
        rings = [one._ring]
        for e in (2, 1):
            ds.set_epoch(e)
            assert [b["ids"].tolist() for b in two] == want[e]
            rings.append(two._ring)
        assert len({r.token for r in rings}) == 3 and all(r.workers == 2 for r in rings)
        ds.set_epoch(2)
        assert [b["ids"].tolist() for b in one] == want[2] and one._ring is rings[0]
    finally:
        ds.close()


def test_a_hand_built_dataloader_after_make_dataloader_gets_plain_batches(kdd_file):
    """make_dataloader's workers send bundles of batches into their ring, put back in order by
    LirsDataLoader; a plain DataLoader over the same dataset afterwards (say for evaluation) has
    no one to unbundle them: its workers must send plain batches, every one the Loader's."""
    import torch.utils.data as tud

    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=8192, seed=3)
    with lirs.Loader(kdd_file, 16, **kw) as ld:
        want = sorted(b.ids.tolist() for b in ld.epoch(0))
    dl = make_dataloader(kdd_file, 16, num_workers=2, **kw)
    try:
        assert sorted(b["ids"].tolist() for b in dl) == want
        dl.dataset.set_epoch(0)
        got = list(tud.DataLoader(dl.dataset, batch_size=None, num_workers=2))
        assert all(isinstance(b, dict) for b in got)
        assert sorted(b["ids"].tolist() for b in got) == want
    finally:
        dl.dataset.close()


def test_workers_that_fail_to_start_leave_the_dataset_to_a_hand_built_dataloader(kdd_file):
    """A LirsDataLoader pass whose workers fail to start (prefetch_factor=0, refused by torch only
    then) left the dataset marked as its own: a hand-built DataLoader over it afterwards got
    lirs's bundles instead of batches. make_dataloader refuses such a prefetch_factor at once."""
    import torch.utils.data as tud

    from lirs.errors import UsageError
    from lirs.torch import LirsDataLoader, LirsIterableDataset, make_dataloader

    for bad in (0, -1, 2.5, True, "2"):
        with pytest.raises(UsageError, match="prefetch_factor"):
            make_dataloader(kdd_file, 100, num_workers=2, prefetch_factor=bad)
    ds = LirsIterableDataset(kdd_file, 100, granularity="group", group_bytes=8192, seed=1)
    with pytest.raises((AssertionError, ValueError)):
        next(iter(LirsDataLoader(ds, batch_size=None, num_workers=2, prefetch_factor=0)))
    got = list(tud.DataLoader(ds, batch_size=None, num_workers=2))
    ds.close()
    assert all(type(b) is dict for b in got)
    assert np.array_equal(np.sort(np.concatenate([b["ids"].numpy() for b in got])), np.arange(lirs.open_index(kdd_file).n))


def test_a_lirs_dataloader_needs_batch_size_none_and_says_so(small_svm):
    """LirsDataLoader(ds) with torch's default batch_size=1 failed at the first batch with a bare
    KeyError: 0 from torch's collate: it is refused when made, naming batch_size=None."""
    from lirs.errors import UsageError
    from lirs.torch import LirsDataLoader, LirsIterableDataset

    ds = LirsIterableDataset(small_svm, 100, seed=1)
    for kw in (dict(), dict(batch_size=4), dict(batch_size=None, batch_sampler=[[0]])):
        with pytest.raises(UsageError, match="pass batch_size=None"):
            LirsDataLoader(ds, **kw)
    assert sum(len(b["ids"]) for b in LirsDataLoader(ds, None)) == 700


def test_make_dataloader_names_the_dataloader_options_it_does_not_take(small_svm):
    """make_dataloader(collate_fn=...) failed as "LirsIterableDataset() got an unexpected keyword
    argument": a UsageError names make_dataloader and the options; drop_last is still the Loader's."""
    from lirs.errors import UsageError
    from lirs.torch import make_dataloader

    with pytest.raises(UsageError, match=r"make_dataloader does not take the DataLoader options collate_fn, generator: "
                                         r"build LirsDataLoader"):
        make_dataloader(small_svm, 100, generator=torch.Generator(), collate_fn=list)
    assert sum(len(b["ids"]) for b in make_dataloader(small_svm, 100, drop_last=True)) == 700


def _mark_worker(worker_id):
    import torch.utils.data as tud

    open(os.path.join(os.environ["LIRS_TEST_MARKS"], f"w{worker_id}"), "w").close()
    assert tud.get_worker_info().id == worker_id


def test_make_dataloader_takes_worker_init_fn_and_timeout(kdd_file, tmp_path, monkeypatch):
    """DataLoader keywords users pass (worker_init_fn, timeout) went to the dataset and failed as
    unexpected keywords there: they reach the DataLoader, each worker runs the function once."""
    monkeypatch.setenv("LIRS_TEST_MARKS", str(tmp_path))
    from lirs.torch import make_dataloader

    dl = make_dataloader(kdd_file, 300, num_workers=2, granularity="group", seed=3, worker_init_fn=_mark_worker,
                         timeout=120, persistent_workers=False)
    assert dl.timeout == 120 and dl.worker_init_fn is _mark_worker
    n = sum(len(b["ids"]) for b in dl)
    assert n == lirs.open_index(kdd_file).n and sorted(os.listdir(tmp_path)) == ["w0", "w1"]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_big_endian_npy_comes_as_native_tensors_and_structured_is_refused_clearly(tmp_path, num_workers):
    """A big-endian .npy the Loader serves failed in torch ("byte order different from the native
    byte order"), and a structured one with numpy's "can't convert np.ndarray of type numpy.void"."""
    from lirs.torch import make_dataloader

    x = np.arange(300, dtype=">f4").reshape(100, 3)
    np.save(tmp_path / "be.npy", x)
    dl = make_dataloader(str(tmp_path / "be.npy"), 16, num_workers=num_workers, granularity="group", seed=1)
    got = {int(i): row for b in dl for i, row in zip(b["ids"], b["X"].numpy())}
    assert sorted(got) == list(range(100)) and all(np.array_equal(got[i], x[i]) for i in got)
    np.save(tmp_path / "st.npy", np.zeros(50, [("a", "<f4"), ("b", "<i2")]))
    with pytest.raises(lirs.errors.UsageError, match=r"st\.npy: records of dtype .* have no torch tensor.*lirs\.Loader"):
        make_dataloader(str(tmp_path / "st.npy"), 16, num_workers=num_workers, granularity="group")


@pytest.mark.parametrize("dtype", ["S4", "U3", "M8[s]", [("a", "<i4"), ("b", "<f4")]])
def test_npy_records_no_tensor_holds_are_refused_when_the_dataset_is_made(tmp_path, dtype):
    """Records the Loader serves as numpy but torch makes no tensor of (bytes, str, datetime64, structured)
    were accepted, then failed at the first batch with torch's bare TypeError (naming no file; in a worker,
    "Caught TypeError in DataLoader worker process 0"): now a UsageError as the dataset is made, naming the
    file, the dtype and what torch takes, whatever the source (path, sidecar, Index) and with a transform,
    which is given the batch's tensors and so cannot convert the records."""
    from lirs.torch import LirsIterableDataset, make_dataloader

    p = str(tmp_path / "r.npy")
    np.save(p, np.zeros(40, dtype))
    with lirs.Loader(p, 10) as L:  # the Loader serves them
        assert sum(len(b) for b in L.epoch(0)) == 40
    for make in (LirsIterableDataset, make_dataloader):
        for src, kw in ((p, {}), (p + ".lirs", {}), (lirs.open_index(p), {}), (p, {"transform": lambda o: o})):
            with pytest.raises(lirs.errors.UsageError, match=rf"{re.escape(p)}: records of dtype .* have no torch "
                                                             r"tensor: .*numeric and bool.*lirs\.Loader"):
                make(src, 10, **kw)


def test_the_early_record_check_indexes_a_fresh_npy_alone(tmp_path, monkeypatch):
    """With no index yet, a .npy file is indexed as the dataset is made (its dtype refused then); a LIBSVM
    file is not indexed by the check (the Loader does it once, at its first pass)."""
    import lirs.torchchecks
    from lirs.torch import make_dataloader

    p = str(tmp_path / "fresh.npy")
    np.save(p, np.zeros(40, "S4"))
    with pytest.raises(lirs.errors.UsageError, match=rf"{re.escape(p)}: records of dtype \|S4 have no torch tensor"):
        make_dataloader(p, 10)
    svm = tmp_path / "fresh.svm"
    svm.write_text("".join(f"{i % 2} 1:{i}\n" for i in range(40)))
    monkeypatch.setattr(lirs.torchchecks, "open_source", lambda *a, **k: pytest.fail("indexed by the check"))
    dl = make_dataloader(str(svm), 10)
    monkeypatch.undo()
    assert sum(len(b["y"]) for b in dl) == 40


def test_an_empty_or_several_file_source_is_refused_when_the_dataset_is_made(tmp_path):
    """LirsIterableDataset([]) or of two files was taken and failed at the first pass (in a worker):
    refused as it is made, with the Loader's words."""
    from lirs.torch import LirsIterableDataset, make_dataloader

    a, b = tmp_path / "a.svm", tmp_path / "b.svm"
    for p in (a, b):
        p.write_text("1 1:1\n-1 2:1\n")
    for make in (LirsIterableDataset, make_dataloader):
        with pytest.raises(lirs.errors.UsageError, match="no data files given: source is an empty list"):
            make([], 8)
        with pytest.raises(lirs.errors.UsageError, match="several data files form one dataset"):
            make([str(a), str(b)], 8)
    assert sum(len(x["y"]) for x in make_dataloader([str(a)], 1)) == 2


def test_unsigned_npy_records_are_refused_early_where_torch_has_no_such_tensor(tmp_path, monkeypatch):
    """torch.from_numpy takes uint16, uint32, uint64 from torch 2.3 on; lirs supports torch 2.1: there such
    records are refused as the dataset is made, saying so, and served where torch has them."""
    import lirs.torchchecks
    from lirs.torch import make_dataloader

    p = str(tmp_path / "u.npy")
    np.save(p, np.arange(40, dtype=np.uint16).reshape(20, 2))
    got = np.concatenate([b["X"].numpy() for b in make_dataloader(p, 8, granularity="group")])
    assert got.dtype == np.uint16 and sorted(got[:, 0]) == list(range(0, 40, 2))
    real = lirs.torchchecks.torch_dtype

    def old_torch(dt):  # torch 2.1's from_numpy: "can't convert np.ndarray of type numpy.uint16"
        if np.dtype(dt).kind == "u" and np.dtype(dt).itemsize > 1:
            raise TypeError(f"can't convert np.ndarray of type numpy.{np.dtype(dt).name}")
        return real(dt)

    monkeypatch.setattr(lirs.torchchecks, "torch_dtype", old_torch)
    with pytest.raises(lirs.errors.UsageError, match=rf"{re.escape(p)}: records of dtype uint16 have no torch tensor "
                                                     r"in torch .*torch 2\.3.*a\.astype\(np\.int64\)"):
        make_dataloader(p, 8)
    np.save(tmp_path / "b.npy", np.arange(40, dtype=np.uint8))  # uint8 every torch has
    assert sum(len(b["ids"]) for b in make_dataloader(str(tmp_path / "b.npy"), 8)) == 40


def test_without_shared_memory_no_workers_serve_and_workers_are_refused_clearly(small_svm, monkeypatch):
    """A read-only or full /dev/shm (multiprocessing's heap cannot make its file): num_workers=0
    needs no shared memory and serves every batch; with workers, make_dataloader's and a hand-built
    DataLoader's, an error says what is missing and what to do, instead of multiprocessing's OSError
    from deep inside (or, for the pass board, before any batch with num_workers=0)."""
    import errno
    import multiprocessing.heap
    from lirs.torch import LirsIterableDataset, make_dataloader

    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", "/dev/shm/pym-1")

    with lirs.Loader(small_svm, 64, seed=2) as L:
        want = np.concatenate([b.ids for b in L.epoch(0)])
    monkeypatch.setattr(multiprocessing, "RawArray", refuse)
    monkeypatch.setattr(multiprocessing.heap, "BufferWrapper", refuse)
    assert np.array_equal(_ids(make_dataloader(small_svm, 64, seed=2)), want)
    with pytest.raises(lirs.errors.UsageError, match="workers need shared memory.*Read-only file system.*num_workers=0"):
        _ids(make_dataloader(small_svm, 64, seed=2, num_workers=2))
    ds = LirsIterableDataset(small_svm, 64, seed=2)
    with pytest.raises(Exception, match="workers need shared memory.*num_workers=0"):
        _ids(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1))


def _same_tree(g, w):
    """``g`` and ``w`` have the same structure (types, keys, lengths) and equal tensors (dtypes,
    layouts, shapes, values)."""
    assert type(g) is type(w), (type(g), type(w))
    if isinstance(w, torch.Tensor):
        assert g.dtype == w.dtype and g.layout == w.layout and g.shape == w.shape
        assert torch.equal(g.to_dense(), w.to_dense()) if w.layout != torch.strided else torch.equal(g, w)
    elif isinstance(w, (dict, collections.UserDict)):
        assert list(g) == list(w)
        for k in w:
            _same_tree(g[k], w[k])
    elif isinstance(w, (list, tuple)):
        assert len(g) == len(w)
        for a, b in zip(g, w):
            _same_tree(a, b)
    else:
        assert g == w


Pair = collections.namedtuple("Pair", "X ids")


def _adds_a_key(b):
    return {**b, "w": torch.ones(len(b["ids"]), dtype=torch.bfloat16)}


def _x_alone(b):
    return b["X"].to_dense()


def _nested(b):
    dd = collections.defaultdict(list, ids=b["ids"], n=3)
    return [b["X"], (b["y"], "tag", None), dd, Pair(b["X"].to_sparse_coo(), b["ids"]), collections.UserDict(y=b["y"])]


def _uncoalesced(b):
    c = b["X"].to_sparse_coo()
    return torch.sparse_coo_tensor(torch.cat([c.indices(), c.indices()], 1), torch.cat([c.values(), c.values()]),
                                   c.shape)


@pytest.mark.parametrize("transform", [_adds_a_key, _x_alone, _nested, _uncoalesced])
def test_a_device_feeder_moves_whatever_a_transform_returns(small_svm, monkeypatch, transform):
    """make_dataloader(device="cuda", transform=fn) hands the consumer what fn returned, moved: a
    dict with keys of its own (a bfloat16 tensor among them), one tensor, nested lists, tuples and
    named tuples with other values kept as they are, an uncoalesced COO tensor; each equal to
    the batch without a device (the copy to the "device" a CPU copy here: CUDA stood in for)."""
    from lirs import tensors
    from lirs.torch import make_dataloader

    _stand_ins(monkeypatch, [])
    kw = dict(granularity="group", group_bytes=4096, seed=3, transform=transform)
    want = list(make_dataloader(small_svm, 32, **kw))
    dl = make_dataloader(small_svm, 32, **kw)
    empty = torch.empty  # the "device" buffer in CPU memory, for a stand-in device of type cuda
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: empty(*a, **k))
    monkeypatch.setattr(tensors, "Staging", lambda s=tensors.Staging: s(2, 256, pin=False))
    dl.device = type("Dev", (), {"type": "cuda"})()
    got = list(dl)
    dl.dataset.close()
    assert len(got) == len(want) > 4
    for g, w in zip(got, want):
        _same_tree(g, w)


def test_a_device_feeder_refuses_a_tensor_layout_it_cannot_carry(small_svm, monkeypatch):
    from lirs import tensors

    with pytest.raises(lirs.errors.UsageError, match="layout torch.sparse_csc cannot be moved"):
        tensors._parts({"X": torch.eye(3).to_sparse_csc()})
    # every tensor of any mapping is moved (a UserDict's were left where they were)
    rebuild, ts = tensors._parts({"a": collections.UserDict(y=torch.ones(3)), "b": [torch.zeros(2)]})
    assert len(ts) == 2
    out = rebuild([t + 1 for t in ts])
    assert torch.equal(out["a"]["y"], torch.full((3,), 2.0)) and type(out["a"]) is collections.UserDict


@pytest.mark.parametrize("num_workers", [0, 2])
def test_bfloat16_labels_and_float16_dense_batches(small_svm, num_workers):
    """label_dtype=torch.bfloat16 (which numpy has not) crosses from workers as its bytes; a dense
    batch of float16 values (which scipy does not densify) equals its CSR batch made dense."""
    from lirs.torch import make_dataloader

    kw = dict(granularity="group", group_bytes=4096, seed=3)
    want = list(make_dataloader(small_svm, 32, label_dtype=torch.float32, **kw))
    got = list(make_dataloader(small_svm, 32, label_dtype=torch.bfloat16, num_workers=num_workers, **kw))
    assert len(got) == len(want) > 4
    for g, w in zip(got, want):
        assert g["y"].dtype == torch.bfloat16 and torch.equal(g["y"], w["y"].to(torch.bfloat16))
    csr = list(make_dataloader(small_svm, 32, dtype=np.float16, **kw))
    dense = list(make_dataloader(small_svm, 32, dtype=np.float16, sparse="dense", num_workers=num_workers, **kw))
    for d, c in zip(dense, csr):
        assert d["X"].dtype == torch.float16 and torch.equal(d["X"], c["X"].to_dense())


@pytest.mark.parametrize("num_workers,pin_memory", [(0, False), (0, True), (2, False), (2, True)])
def test_tuple_output_is_a_tuple_whatever_the_workers_and_pinning(small_svm, num_workers, pin_memory):
    # torch's default_convert and pin_memory make lists of tuples ("backwards compatibility")
    from lirs.torch import make_dataloader

    from lirs.torch import TorchBatch

    dl = make_dataloader(small_svm, 100, output="tuple", num_workers=num_workers, pin_memory=pin_memory, seed=1)
    got = list(dl)
    assert got and all(type(b) is TorchBatch and len(b) == 3 for b in got)


@pytest.mark.parametrize("fmt", ["libsvm", "npy", "lines"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_tuple_output_is_one_type_under_a_plain_dataloader(small_svm, tmp_path, fmt, num_workers):
    """A hand-built DataLoader (docs/torch.md) made a list of the plain tuple without workers (and
    for lines data with them): the batch is a named tuple (X, y, ids), which torch keeps."""
    import warnings

    import torch.utils.data as tud

    from lirs.torch import LirsIterableDataset, TorchBatch

    path = small_svm
    if fmt == "npy":
        path = str(tmp_path / "x.npy")
        np.save(path, np.arange(400, dtype=np.float32).reshape(200, 2))
    elif fmt == "lines":
        path = str(tmp_path / "l.txt")
        open(path, "wb").write(b"".join(b"line %d\n" % i for i in range(200)))
    ds = LirsIterableDataset(path, 50, output="tuple")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the DataLoader's advice to use LirsDataLoader
        got = list(tud.DataLoader(ds, batch_size=None, num_workers=num_workers))
    assert got and all(type(b) is TorchBatch for b in got)
    X, y, ids = got[0]
    assert got[0].X is X and got[0].y is y and got[0].ids is ids and ids.dtype == torch.int64
    assert (y is None) == (fmt != "libsvm") and isinstance(X, list) == (fmt == "lines")  # no labels file: None
    ds.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_set_epoch_during_a_pass_leaves_the_state_on_the_pass_delivered(small_svm, num_workers):
    """set_epoch(e) chooses the *next* pass's epoch: a state taken after it, while the current pass
    is still delivered, names that pass and its next batch, with or without workers; resumed, it
    gives the rest of that pass."""
    from lirs.torch import make_dataloader

    dl = make_dataloader(small_svm, 50, seed=7, num_workers=num_workers)
    dl.dataset.set_epoch(1)
    it = iter(dl)
    first = [next(it)["ids"] for _ in range(4)]
    dl.dataset.set_epoch(5)
    before = dl.state_dict()  # before the pass's next batch: still that pass
    first.append(next(it)["ids"])
    sd = dl.state_dict()
    rest = [b["ids"] for b in it]
    assert (before["epoch"], before["next_batch"]) == (1, 4)
    assert (sd["epoch"], sd["next_batch"]) == (1, 5)
    after = dl.state_dict()  # the pass ended: the epoch chosen meanwhile, from its first batch
    assert (after["epoch"], after["next_batch"]) == (5, 0)
    again = make_dataloader(small_svm, 50, seed=7, num_workers=num_workers)
    again.load_state_dict(sd)
    assert np.array_equal(np.concatenate([b["ids"] for b in again]), np.concatenate(rest))
    assert dl.dataset.epoch == 5


def test_a_torch_dtype_for_the_values_is_refused_when_the_dataset_is_made(small_svm):
    from lirs.torch import LirsIterableDataset, make_dataloader

    for make in (LirsIterableDataset, make_dataloader):
        with pytest.raises(lirs.errors.UsageError, match=r"dtype must be a numpy dtype.*torch\.float16.*np\.float32"):
            make(small_svm, 10, dtype=torch.float16)
        for bad in (">f8", np.longdouble):  # numbers, but no tensor holds them
            with pytest.raises(lirs.errors.UsageError, match="no torch tensor holds it"):
                make(small_svm, 10, dtype=bad)
        with pytest.raises(lirs.errors.UsageError, match="zero_based must be True, False or 'auto'"):
            make(small_svm, 10, zero_based=1)


def test_make_dataloader_takes_bools_for_its_switches(small_svm):
    """persistent_workers="no" turned persistence on (a non-empty string is true), pin_memory="yes"
    pinned: a switch is True, False (numpy's bools too), or refused naming it."""
    from lirs.torch import make_dataloader

    for k, v in (("persistent_workers", "no"), ("pin_memory", "yes"), ("pin_memory", 1)):
        with pytest.raises(lirs.errors.UsageError, match=f"{k} must be True, False or None"):
            make_dataloader(small_svm, 10, num_workers=1, **{k: v})
    dl = make_dataloader(small_svm, 10, num_workers=1, persistent_workers=np.False_)
    assert dl.persistent_workers is False


def test_a_relative_path_names_the_file_it_named_when_the_dataset_was_made(tmp_path, monkeypatch):
    """The first pass may run after the process changed directory (a run manager, a notebook): it
    reads the file the relative path named at construction, not one of that name in the new
    directory, and writes no sidecar there."""
    from lirs.torch import make_dataloader

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "d.svm").write_text("".join(f"1 {i + 1}:1\n" for i in range(30)))
    (b / "d.svm").write_text("".join(f"-1 {i + 1}:1\n" for i in range(20)))
    monkeypatch.chdir(a)
    dls = [make_dataloader(src, batch_size=8, granularity="instance") for src in ("d.svm", ["d.svm"], b"d.svm")]
    monkeypatch.chdir(b)
    for dl in dls:
        ys = [float(v) for batch in dl for v in batch["y"]]
        assert len(ys) == 30 and set(ys) == {1.0}
    assert not (b / "d.svm.lirs").exists()


def test_libsvm_options_for_another_format_are_refused_when_the_dataset_is_made(tmp_path):
    """``n_features``/``zero_based`` set for a .npy (or an indexed lines file) were refused only at
    the first pass, in a worker: now as the dataset is made, naming the file; an unindexed lines
    file too (it was indexed whole at the first pass, then refused), before it is indexed."""
    from lirs.errors import UsageError
    from lirs.torch import LirsIterableDataset, make_dataloader
    npy, lines = tmp_path / "x.npy", tmp_path / "l.jsonl"
    np.save(npy, np.arange(12, dtype=np.float32).reshape(6, 2))
    lines.write_text('{"a": 1}\n{"a": 2}\n')
    with pytest.raises(UsageError, match=f"n_features=4 applies to LIBSVM data only; {re.escape(str(lines))} is lines"):
        LirsIterableDataset(str(lines), 2, n_features=4)
    assert not os.path.exists(f"{lines}.lirs")
    lirs.build_index(str(lines), progress=False)
    with pytest.raises(UsageError, match=f"n_features=4 applies to LIBSVM data only; {re.escape(str(npy))} is npy"):
        LirsIterableDataset(str(npy), 2, n_features=4)
    with pytest.raises(UsageError, match=f"zero_based=True applies to LIBSVM data only; {re.escape(str(lines))} is lines"):
        make_dataloader(str(lines), 2, zero_based=True)
    with pytest.raises(UsageError, match="n_features=3 applies to LIBSVM data only; .*l.jsonl is lines"):
        make_dataloader(lirs.open_index(str(lines)), 2, n_features=3)


def _reversed_list(b):
    return list(reversed(b))  # a user's collate_fn: a 3-item list, not (X, y, ids)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_users_collate_fn_list_is_not_named_as_a_torch_batch(small_svm, num_workers):
    """LirsDataLoader gives a list torch made of the tuple output back as a TorchBatch; a 3-item list
    the user's collate_fn returns was named the same, its fields (X, y, ids) not its own: it comes
    back a plain tuple (as before TorchBatch)."""
    from lirs.torch import LirsDataLoader, LirsIterableDataset, TorchBatch

    ds = LirsIterableDataset(small_svm, 50, output="tuple")
    got = list(LirsDataLoader(ds, batch_size=None, num_workers=num_workers, collate_fn=_reversed_list))
    assert got and all(type(b) is tuple and len(b) == 3 for b in got)
    assert all(b[0].dtype == torch.int64 for b in got)  # ids first: the user's order kept
    plain = list(LirsDataLoader(LirsIterableDataset(small_svm, 50, output="tuple"), batch_size=None,
                                num_workers=num_workers))
    assert plain and all(type(b) is TorchBatch for b in plain)
