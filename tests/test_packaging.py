"""What `pip install` does to a user's environment: the torch extra is a range that an installed
torch satisfies (so installing the extra never replaces it), the extras the README and CI name
exist, the type hints and the licence ship, and the changelog has an entry for this version."""
from __future__ import annotations

import glob
import os
import re

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
from packaging.requirements import Requirement  # noqa: E402  (after the skip: pip vendors it, so it is there)
from packaging.version import Version  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _extra(name: str) -> list[Requirement]:
    return [Requirement(r) for r in _project()["project"]["optional-dependencies"][name]]


def test_torch_extra_is_a_range_that_keeps_an_installed_torch():
    (req,) = [r for r in _extra("torch") if r.name == "torch"]
    assert not any(s.operator in ("==", "===", "~=") for s in req.specifier), \
        f"{req}: an exact pin makes `pip install -e '.[torch]'` replace the user's torch"
    assert req.specifier.contains("2.1.0") and not req.specifier.contains("2.0.1"), req
    torch = pytest.importorskip("torch", reason="no torch installed: nothing an install could replace")
    installed = Version(torch.__version__)
    if installed < Version("2.1"):
        pytest.skip(f"torch {installed} is older than the extra's floor")
    # pip keeps an installed distribution whose version the requirement contains (local tags like
    # +cpu included): no download, no replacement
    assert req.specifier.contains(installed, prereleases=True), (str(req), str(installed))


def test_exact_torch_pin_lives_only_in_ci_and_the_readme_test_command():
    pinned = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "**", "*"), recursive=True)
              if os.path.isfile(p) and not re.search(r"(^|/)(\.venv|site|build|\.git|[^/]*\.egg-info)(/|$)", os.path.relpath(p, ROOT))
              and p.endswith((".toml", ".md", ".yml", ".cfg", ".txt", "run", ".sh"))
              and "torch==" in open(p, errors="replace").read()}
    assert pinned <= {".ci/run", "README.md", "tools/fresh_venv_check.sh", "CHANGELOG.md"}, pinned
    assert "pip install -q torch==2.13.0" in open(os.path.join(ROOT, ".ci", "run")).read()


def test_extras_the_docs_and_ci_name_exist():
    names = lambda extra: {r.name for r in _extra(extra)}  # noqa: E731
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= names("docs")
    assert "python" in next(r for r in _extra("docs") if r.name == "mkdocstrings").extras
    assert {"pytest", "py-spy"} <= names("test")
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert "-e '.[test,torch,docs]'" in ci and "mkdocs build --strict" in ci
    assert ci.index("mkdocs build --strict") < ci.index("python -m pytest")


def test_matplotlib_floor_imports_under_every_numpy_allowed():
    """numpy>=1.24 allows NumPy 2, and matplotlib 3.7.0-3.7.2 declare no numpy<2 cap but fail to import
    under it: `lirs demo` drew no plot in an install pip called consistent. 3.8.4 is the first built for
    NumPy 2 (3.7.3-3.8.3 cap numpy<2, which would hold NumPy back)."""
    p = _project()["project"]
    for reqs in ([Requirement(r) for r in p["dependencies"]], _extra("plots")):
        (req,) = [r for r in reqs if r.name == "matplotlib"]
        assert req.specifier.contains("3.8.4") and not req.specifier.contains("3.8.3"), req


def test_type_hints_and_licence_ship():
    p = _project()
    assert os.path.isfile(os.path.join(ROOT, "lirs", "py.typed"))
    assert "py.typed" in p["tool"]["setuptools"]["package-data"]["lirs"]
    assert p["project"]["license"] == "Apache-2.0"
    text = open(os.path.join(ROOT, "LICENSE")).read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_changelog_has_an_entry_for_this_version():
    version = _project()["project"]["version"]
    text = open(os.path.join(ROOT, "CHANGELOG.md")).read()
    assert "Keep a Changelog" in text
    m = re.search(rf"^## \[{re.escape(version)}\]( - \d{{4}}-\d{{2}}-\d{{2}})?$", text, re.M)
    assert m, f"CHANGELOG.md has no `## [{version}]` section"
    entry = text[m.end():].split("\n## ", 1)[0]
    assert re.search(r"^### (Added|Changed|Removed|Fixed)$", entry, re.M)


def test_the_sdist_ships_the_package_and_changelog_not_half_the_tests(tmp_path):
    """setuptools put tests/test_*.py in the sdist without conftest.py and faultfs.py they import
    (nor benchmarks/ and docs/ they read): tests that could not run. The sdist ships none, and
    CHANGELOG.md; the version in lirs/__init__.py is pyproject's."""
    import shutil
    import subprocess
    import sys
    import tarfile

    import lirs

    assert lirs.__version__ == _project()["project"]["version"]
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.egg-info")
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    for d in ("lirs", "tests"):
        shutil.copytree(os.path.join(ROOT, d), src / d, ignore=skip)
    code = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=src, capture_output=True,
                       text=True, timeout=300)
    if r.returncode and "No module named" in r.stderr:
        pytest.skip(f"setuptools cannot build here: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-2000:]
    names = tarfile.open(tmp_path / "dist" / r.stdout.strip().splitlines()[-1]).getnames()
    top = names[0].split("/")[0]
    assert f"{top}/CHANGELOG.md" in names and f"{top}/lirs/loader.py" in names and f"{top}/lirs/py.typed" in names
    assert not [n for n in names if "/tests/" in n or n.endswith((".nbi", ".nbc"))]


def test_lirs_torch_without_torch_says_how_to_install_it(tmp_path):
    """`import lirs.torch` where torch is missing raised a bare "No module named 'torch'"."""
    import subprocess
    import sys

    (tmp_path / "torch").mkdir()  # a torch that fails to import, as a missing one does
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    code = "import sys; sys.path.insert(0, sys.argv[1]); import lirs.torch"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 1 and "lirs.torch needs PyTorch: pip install 'lirs[torch]'" in r.stderr, r.stderr[-1500:]
