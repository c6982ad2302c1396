"""Conventions of the tree checked on the source with ``ast``: no module reaches into a private
member (``_name``) of another lirs module, and the granularities are named only by their policy
registry (lirs/policies.py) and the command line's choices that come from it."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "lirs"
FILES = sorted(ROOT.rglob("*.py"))
GRANULARITY_NAMES = {"instance", "page", "group", "window"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, methods, assigned names and attributes
    (``self._x = ...``), class fields, keyword names it passes (``set_defaults(_x=...)``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return {n for n in out if _private(n)}


def _uses(tree: ast.AST):
    """(line, name, how) of every private name this module takes from an object other than
    ``self``/``cls``, and of every private name it imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            yield node.lineno, node.attr, "attribute"
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if _private(a.name):
                    yield node.lineno, a.name, "import"


def private_reaches() -> list[str]:
    """``file:line name`` of every use of another lirs module's private member."""
    trees = {p: ast.parse(p.read_text()) for p in FILES}
    defined = {p: _defined(t) for p, t in trees.items()}
    out = []
    for p, tree in trees.items():
        for line, name, how in _uses(tree):
            if how == "attribute" and name in defined[p]:
                continue  # its own member (another object of a class of this module)
            owners = [q for q in FILES if q != p and name in defined[q]]
            if owners or how == "import":
                out.append(f"{p.relative_to(ROOT.parent)}:{line} {name} ({how}; defined in "
                           f"{', '.join(str(q.relative_to(ROOT.parent)) for q in owners) or 'elsewhere'})")
    return out


def test_no_module_reaches_into_another_modules_private_members():
    bad = private_reaches()
    assert not bad, "private members used across lirs modules:\n" + "\n".join(bad)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def granularity_literals(tree: ast.AST) -> list[int]:
    """Lines where a granularity name is written as a value: compared with, defaulted to, assigned,
    listed. Names used as keys (``d["window"]``, ``{"window": w}``, ``get("window")``, a tuple of
    configuration keys) are parameter names, not granularities, and docstrings are docs."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get", "setdefault", "pop") and node.args:
            skip.add(id(node.args[0]))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if any(n not in GRANULARITY_NAMES for n in names):  # a tuple of keys, not of granularities
                skip.update(id(e) for e in node.elts)
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and node.value in GRANULARITY_NAMES and id(node) not in skip)


def test_granularities_are_named_by_their_registry_only():
    bad = []
    for p in FILES:
        rel = p.relative_to(ROOT)
        if rel.parts[0] == "eval" or rel.name == "policies.py":
            continue  # the evaluation package names strategies, some of which are granularities
        bad += [f"{rel}:{line}" for line in granularity_literals(ast.parse(p.read_text()))]
    assert not bad, "granularity names written outside lirs/policies.py: " + ", ".join(bad)


def test_the_checkers_see_what_they_look_for():
    a = ast.parse("class A:\n    def _m(self):\n        pass\n")
    b = ast.parse("def f(x):\n    return x._m() + x._foreign\n")
    assert _defined(a) == {"_m"} and sorted(n for _, n, _ in _uses(b)) == ["_foreign", "_m"]
    assert granularity_literals(ast.parse('if g == "window": pass\nd = {"window": 1}\nd["group"]\n'
                                          'f(granularity="page")\nk = ("window", "seed")\n')) == [1, 4]


def test_a_new_granularity_is_one_policy(tmp_path, monkeypatch):
    """Adding a granularity is one entry in the policy dict: plan, walk, pipeline and Loader take it
    (here 4 KiB blocks kept in order inside their batch, batches sharing read steps)."""
    import numpy as np

    import lirs
    from lirs.plan import plan_epoch
    from lirs.policies import POLICIES, Policy

    monkeypatch.setitem(POLICIES, "blocks-in-order", Policy("blocks-in-order", "block", False, "batches", "test"))
    p = tmp_path / "b.svm"
    p.write_text("".join(f"{i % 2} {i % 7 + 1}:{i}\n" for i in range(3000)))
    idx = lirs.build_index(str(p), progress=False)
    plan = plan_epoch(idx, 100, "blocks-in-order", seed=1)
    order = plan.order()
    assert sorted(order) == list(range(3000)) and not np.array_equal(order, np.arange(3000))
    # a block's records stay together and in file order (the policy deals nothing)
    assert (np.diff(order) == 1).mean() > 0.9
    with lirs.Loader(idx, 100, granularity="blocks-in-order", seed=1) as ld:
        got = np.concatenate([b.ids for b in ld.epoch(0)])
    assert np.array_equal(got, order)
