"""The dependency rule of the tree (docs/ARCHITECTURE.md), checked on the source with ``ast``.

* no import cycle among lirs modules (imports inside functions count: they are edges too);
* the core (everything outside ``lirs/eval``, ``lirs/cli.py``, ``lirs/__main__.py`` and ``lirs/commands``) never imports
  the evaluation package or the command line;
* the evaluation package never imports the command line;
* no module over 500 lines (the split by job keeps them small).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "lirs"
MAX_LINES = 500


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    return mods


MODULES = _modules()


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _target(name: str) -> str | None:
    """The lirs module an imported name lives in (``lirs.kernels.plan`` for ``from .kernels import
    plan``), or None outside lirs."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(mod: str) -> set[str]:
    """Every lirs module ``mod`` imports, at the top or inside functions."""
    path = MODULES[mod]
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, is_pkg, node)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for n in names:
            if n.startswith("lirs"):
                t = _target(n)
                if t and t != mod and not (t == "lirs" and n != "lirs"):
                    out.add(t)
    # a package's __init__ is imported with any of its submodules; that is no edge of ours
    return {t for t in out if not mod.startswith(t + ".")}


GRAPH = {m: imports_of(m) for m in MODULES}


def _layer(mod: str) -> str:
    if mod == "lirs.eval" or mod.startswith("lirs.eval."):
        return "eval"
    if mod in ("lirs.cli", "lirs.__main__") or mod.startswith("lirs.commands"):
        return "cli"
    return "core"


def test_no_import_cycles():
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for t in sorted(GRAPH[m]):
            visit(t)
        stack.pop()

    for m in sorted(GRAPH):
        visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("layer,forbidden", [("core", {"eval", "cli"}), ("eval", {"cli"})])
def test_layers_import_downwards(layer, forbidden):
    bad = sorted(f"{m} imports {t}" for m, ts in GRAPH.items() if _layer(m) == layer
                 for t in ts if _layer(t) in forbidden)
    assert not bad, f"the {layer} must not import {sorted(forbidden)}: " + "; ".join(bad)


def test_modules_stay_small():
    big = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    big = {m: n for m, n in big.items() if n > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_the_checker_sees_edges():
    # the walker itself must find what is there, or the tests above pass on nothing
    assert "lirs.pipeline" in GRAPH["lirs.loader"]
    assert "lirs.kernels.plan" in GRAPH["lirs.plan"]
    assert any(_layer(t) == "core" for t in GRAPH["lirs.eval.strategies"])
