"""What a new user gets by default: window granularity, epochs that advance on plain passes, an index
built on first use, a keyword-only Loader with clear errors, short reprs."""
from __future__ import annotations

import inspect
import os
import stat
import subprocess
import sys
import warnings

import numpy as np
import pytest

import lirs
from lirs.errors import IndexFormatError, UsageError


def _svm(path, n=600, seed=0):
    rng = np.random.default_rng(seed)
    lines = [f"{int(rng.integers(0, 2))} " + " ".join(f"{c}:{rng.integers(1, 9)}" for c in
             np.sort(rng.choice(40, 3, replace=False)) + 1) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def svm(tmp_path):
    p = _svm(tmp_path / "d.svm")
    lirs.build_index(p, progress=False)
    return p


def test_window_is_the_default_everywhere():
    assert inspect.signature(lirs.Loader).parameters["granularity"].default == "window"
    from lirs.plan import plan_epoch
    assert inspect.signature(plan_epoch).parameters["granularity"].default == "window"
    for cmd in ("epoch", "order"):
        out = subprocess.run([sys.executable, "-m", "lirs.cli", cmd, "--help"], capture_output=True, text=True)
        assert "(default: window)" in " ".join(out.stdout.split()), out.stdout


def test_the_loader_takes_two_arguments_by_position():
    params = inspect.signature(lirs.Loader).parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    assert [p.name for p in positional] == ["source", "batch_size"]


def test_an_old_positional_call_names_the_keyword(svm):
    with pytest.raises(TypeError, match=r"granularity='group'"):
        lirs.Loader(svm, 64, "group")
    with pytest.raises(TypeError, match=r"group_bytes=8192"):
        lirs.Loader(svm, 64, "group", 8192)
    with pytest.raises(TypeError, match="as the source"):
        lirs.Loader(None, 64, index=lirs.open_index(svm))


@pytest.mark.parametrize("bad", ["256", 256.7, 256.0, True, 0, -3, None])
def test_batch_size_must_be_a_positive_int(svm, bad):
    with pytest.raises(UsageError, match="batch_size"):
        lirs.Loader(svm, bad)


def test_granularity_error_lists_auto(svm):
    with pytest.raises(UsageError, match=r"window, auto, got 'windows'|auto, got 'windows'"):
        lirs.Loader(svm, 64, granularity="windows")


def test_two_plain_passes_give_two_epochs(svm):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing warns
        with lirs.Loader(svm, 64, granularity="window", seed=1) as ld:
            first = np.concatenate([b.ids for b in ld])
            second = np.concatenate([b.ids for b in ld])
            assert not np.array_equal(first, second)
            assert sorted(first) == sorted(second) == list(range(600))
            assert np.array_equal(first, np.concatenate([b.ids for b in ld.epoch(0)]))
            assert np.array_equal(second, np.concatenate([b.ids for b in ld.epoch(1)]))
            # after epoch(e) a plain pass is e + 1; set_epoch chooses the next one
            third = np.concatenate([b.ids for b in ld])
            assert np.array_equal(third, np.concatenate([b.ids for b in ld.epoch(2)]))
            ld.set_epoch(0)
            assert np.array_equal(np.concatenate([b.ids for b in ld]), first)


def test_resume_across_plain_passes_is_exact(svm):
    with lirs.Loader(svm, 64, seed=2) as ld:
        list(ld)  # epoch 0
        it = iter(ld)  # epoch 1
        head = [next(it).ids for _ in range(3)]
        state = ld.state_dict()
        it.close()
        rest_want = [b.ids for b in ld.epoch(1)][3:]
    assert state["epoch"] == 1 and state["next_batch"] == 3
    with lirs.Loader(svm, 64, seed=2) as again:
        again.load_state_dict(state)
        rest = [b.ids for b in again]  # the plain pass resumes the saved epoch
        after = [b.ids for b in again]  # and the next one is epoch 2
        assert all(np.array_equal(a, b) for a, b in zip(rest, rest_want)) and len(rest) == len(rest_want)
        assert np.array_equal(np.concatenate(after), np.concatenate([b.ids for b in again.epoch(2)]))
    assert len(head) == 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_two_passes_over_a_dataloader_differ(svm, num_workers):
    pytest.importorskip("torch")
    from lirs.torch import make_dataloader

    dl = make_dataloader(svm, 64, num_workers=num_workers, seed=3)
    first = np.concatenate([b["ids"].numpy() for b in dl])
    second = np.concatenate([b["ids"].numpy() for b in dl])
    assert not np.array_equal(first, second) and sorted(first) == sorted(second)
    dl.dataset.set_epoch(0)  # DistributedSampler semantics stay exact
    assert np.array_equal(np.concatenate([b["ids"].numpy() for b in dl]), first)
    assert len(dl) == dl.dataset.num_batches() == 10
    assert repr(dl.dataset).startswith(f"LirsIterableDataset({svm!r}, batch_size=64, epoch=0")


def test_an_unindexed_file_is_indexed_on_first_use(tmp_path):
    p = _svm(tmp_path / "fresh.svm", n=300, seed=4)
    assert not os.path.exists(p + ".lirs")
    with pytest.raises(IndexFormatError, match="run `lirs index"):
        lirs.Loader(p, 32, index="never")
    with lirs.Loader(p, 32) as ld:
        assert sorted(np.concatenate([b.ids for b in ld])) == list(range(300))
    idx = lirs.open_index(p, verify=True)  # a valid sidecar, CRCs and all
    assert idx.n == 300
    with pytest.raises(UsageError, match="index must be one of"):
        lirs.Loader(p, 32, index="sometimes")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_names_where_to_put_the_index(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    p = _svm(d / "x.svm", n=50)
    os.chmod(d, stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(UsageError, match=r"cannot be written.*lirs index .* -o"):
            lirs.Loader(p, 8)
    finally:
        os.chmod(d, stat.S_IRWXU)


def test_a_read_only_directory_error_is_clear(tmp_path, monkeypatch):
    """Where the sidecar cannot be written (EROFS, as on a read-only mount), the error names it."""
    import errno

    from lirs import build

    p = _svm(tmp_path / "y.svm", n=50)

    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", p + ".lirs")
    monkeypatch.setattr(build, "build_index", refuse)
    with pytest.raises(UsageError, match=r"y\.svm\.lirs cannot be written \(Read-only file system\).*-o"):
        lirs.Loader(p, 8)


def test_a_batch_repr_is_short(svm):
    with lirs.Loader(svm, 64) as ld:
        b = next(iter(ld))
    r = repr(b)
    assert r.startswith("Batch(epoch=0, index=0, records=64, X=csr_matrix(64, ") and len(r) < 120, r
