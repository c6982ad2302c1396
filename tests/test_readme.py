"""The README's usage examples run as written (on a small generated file)."""
from __future__ import annotations

import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")


def _usage_blocks():
    text = open(README).read()
    usage = text.split("<!-- usage:start -->", 1)[1].split("<!-- usage:end -->", 1)[0]
    return re.findall(r"```python\n(.*?)```", usage, re.S)


def test_readme_has_usage_examples():
    blocks = _usage_blocks()
    assert len(blocks) >= 3 and any("partial_fit" in b for b in blocks)


@pytest.mark.parametrize("i", range(len(_usage_blocks())))
def test_readme_example_runs(tmp_path, monkeypatch, i):
    from lirs.gen import generate

    code = _usage_blocks()[i]
    if "lirs.torch" in code:
        pytest.skip("the torch example has a placeholder model; lirs.torch is tested in test_torch.py")
    generate("kdd", str(tmp_path / "train.svm"), records=3000, seed=1, progress=False)
    monkeypatch.chdir(tmp_path)
    code = code.replace("range(10)", "range(2)").replace("range(5)", "range(2)")
    scope = {}
    import lirs

    lirs.build_index(str(tmp_path / "train.svm"), progress=False)
    exec(compile(code, f"README block {i}", "exec"), scope)
