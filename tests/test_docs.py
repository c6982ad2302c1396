"""The documentation site: `mkdocs build --strict` passes (and fails on a broken link, so the check
can fail), every page is in the nav, the API reference covers the public names, and the results
page and its figures are what benchmarks/report.py makes of benchmarks/results/*.json."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import benchmark_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
NO_MKDOCS = importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None
needs_mkdocs = pytest.mark.skipif(NO_MKDOCS, reason="mkdocs and mkdocstrings are not installed "
                                                    "(pip install -e '.[docs]')")


def _report():
    return benchmark_module("report")


def _config() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with mkdocs")
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        return yaml.safe_load(f)


def _nav_pages(nav) -> list:
    out = []
    for item in nav:
        for v in (item.values() if isinstance(item, dict) else [item]):
            out += _nav_pages(v) if isinstance(v, list) else [v]
    return out


def test_results_page_is_what_report_writes_from_the_jsons():
    report = _report()
    with open(os.path.join(DOCS, "results.md")) as f:
        page = f.read()
    assert page == report.render(), "docs/results.md is stale: run python benchmarks/report.py"
    names = report.figures()
    assert names, "the page shows the benchmarks' figures"
    for n in names:
        with open(os.path.join(DOCS, "img", f"{n}.png"), "rb") as a, \
                open(os.path.join(ROOT, "benchmarks", "results", f"{n}.png"), "rb") as b:
            assert a.read() == b.read(), f"docs/img/{n}.png differs from benchmarks/results/{n}.png"
    # figures quoted on the page are the JSONs' own (one of each kind, spelled as the page spells it)
    import json

    demo = json.load(open(os.path.join(ROOT, "benchmarks", "results", "demo.json")))
    assert f"{demo['n']:,} label-sorted kdd-like records, {demo['epochs']} epochs" in page
    plan = json.load(open(os.path.join(ROOT, "benchmarks", "results", "plan.json")))
    assert f"{plan['amplification']['kdd']['group']['amplification']:.3f}" in page


def test_every_page_is_in_the_nav_and_the_api_covers_the_public_names():
    cfg = _config()
    nav = _nav_pages(cfg["nav"])
    pages = sorted(p for p in os.listdir(DOCS) if p.endswith(".md"))
    assert sorted(nav) == pages
    assert {"ARCHITECTURE.md", "bad-input.md", "results.md", "api.md", "index.md"} <= set(nav)
    assert cfg["theme"]["name"] == "material" and cfg.get("strict") is True
    api = open(os.path.join(DOCS, "api.md")).read()
    for name in ("lirs.loader.Loader", "lirs.loader.Batch", "lirs.build.build_index", "lirs.index.open_index",
                 "lirs.decode.load_svmlight", "lirs.errors", "lirs.torch.make_dataloader",
                 "lirs.torch.LirsIterableDataset", "lirs.torch.LirsDataLoader"):
        assert f"::: {name}\n" in api, name


def _build(config: str, site) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


@needs_mkdocs
def test_mkdocs_build_strict_passes(tmp_path):
    r = _build(os.path.join(ROOT, "mkdocs.yml"), tmp_path / "site")
    assert r.returncode == 0, r.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    # the reference is generated from the docstrings, not written by hand
    for name in ("Loader", "build_index", "open_index", "StaleIndexError", "make_dataloader", "LirsIterableDataset"):
        assert re.search(rf'id="[\w.]*{name}"', api), name


@needs_mkdocs
def test_strict_build_fails_on_a_broken_link(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    with open(docs / "index.md", "a") as f:
        f.write("\nSee [a page that does not exist](nowhere.md).\n")
    text = open(os.path.join(ROOT, "mkdocs.yml")).read()
    text = text.replace("docs_dir: docs", f"docs_dir: {docs}").replace("paths: [.]", f"paths: [{ROOT}]")
    (tmp_path / "mkdocs.yml").write_text(text)
    r = _build(str(tmp_path / "mkdocs.yml"), tmp_path / "site")
    assert r.returncode != 0 and "nowhere.md" in r.stderr, r.stderr[-3000:]


def test_the_strategy_list_names_every_strategy():
    """docs/granularity.md lists `lirs.eval.STRATEGIES` (two were left out)."""
    from lirs.eval import STRATEGIES

    text = open(os.path.join(DOCS, "granularity.md")).read()
    listed = text[text.index("Strategies (`lirs.eval.STRATEGIES`"):]
    assert [s for s in STRATEGIES if f"`{s}`" not in listed] == []


def options_md() -> str:
    """The options section of docs/cli.md: every command's options as `--help` has them."""
    from lirs.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    out = ["## Every command's options", "",
           "Generated from the parser by `tests/test_docs.py` (`LIRS_WRITE_DOCS=1 python -m pytest -q "
           "tests/test_docs.py`); a test fails when this list and `lirs COMMAND --help` disagree.", ""]
    for name, p in sub.choices.items():
        out += [f"### `lirs {name}`", "", "| option | what |", "| --- | --- |"]
        for a in p._actions:
            if "--help" in a.option_strings:
                continue
            what = p._get_formatter()._expand_help(a) if a.help else ""  # as --help prints it: 5%% is 5%
            if a.choices:
                what = f"{what} (one of {', '.join(map(str, a.choices))})".strip()
            flags = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.metavar or a.dest}`"
            if a.option_strings and a.nargs != 0:
                flags += f" {a.metavar or a.dest.upper()}"
            out.append(f"| {flags} | {what.replace('|', chr(92) + '|')} |")
        out.append("")
    return "\n".join(out)


def test_cli_md_lists_every_option_of_every_command():
    path = os.path.join(DOCS, "cli.md")
    text = open(path).read()
    start, end = "<!-- options:start -->\n", "<!-- options:end -->"
    want = start + options_md() + end
    got = text[text.index(start):text.index(end) + len(end)]
    if os.environ.get("LIRS_WRITE_DOCS") and got != want:
        with open(path, "w") as f:
            f.write(text.replace(got, want))
        got = want
    assert got == want, "docs/cli.md's options differ from the parser: LIRS_WRITE_DOCS=1 python -m pytest -q tests/test_docs.py"
