"""The README's Python examples run as written (on a small generated file)."""
from __future__ import annotations

import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")


def _blocks():
    return re.findall(r"```python\n(.*?)```", open(README).read(), re.S)


def test_readme_has_usage_examples():
    text = open(README).read()
    usage = text.split("<!-- usage:start -->", 1)[1].split("<!-- usage:end -->", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", usage, re.S)
    assert len(blocks) >= 3 and any("partial_fit" in b for b in blocks)


@pytest.mark.parametrize("i", range(len(_blocks())))
def test_readme_example_runs(tmp_path, monkeypatch, i):
    import lirs
    from lirs.eval.gen import generate

    code = _blocks()[i]
    if "lirs.torch" in code:
        pytest.importorskip("torch", reason="the torch example needs the torch extra")
    generate("kdd", str(tmp_path / "train.svm"), records=3000, seed=1, progress=False)
    lirs.build_index(str(tmp_path / "train.svm"), progress=False)
    monkeypatch.chdir(tmp_path)
    code = code.replace("range(10)", "range(2)").replace("range(5)", "range(2)").replace("data.svm", "train.svm")
    exec(compile(code, f"README block {i}", "exec"), {})
