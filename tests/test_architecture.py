"""The package's architecture (issue 21): no import circles between ``edgepe``'s modules.

The graph is built from the source with ``ast``, from module-level imports only: the statements
a module runs when it is imported (its body, with ``if``/``try``/``with``/class bodies, not
function bodies, which import lazily, nor ``if TYPE_CHECKING:`` blocks, which never run).
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``;
relative imports are resolved. ``graphlib`` then finds any cycle and the test names it.

That ``edgepe --help`` imports no torch, onnx or onnxruntime is ``tests/test_cli_light.py``'s
(run in a fresh interpreter, the real import set).
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import edgepe

ROOT = Path(edgepe.__file__).parent


def module_names(package: Path, name: str) -> dict[str, Path]:
    """Every module of the package at ``package`` (named ``name``): dotted name -> file."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = [name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _run_at_import(body: list[ast.stmt]):
    """The statements of ``body`` that run when the module is imported, nested ones included."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _run_at_import(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _run_at_import(inner)  # ExceptHandlers: their body, next


def import_graph(package: Path, name: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level."""
    modules = module_names(package, name)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        here = module.split(".") if is_package else module.split(".")[:-1]
        edges = set()
        for node in _run_at_import(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here[: len(here) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != module)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (first module repeated at the end), or ``None``."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_edgepe_has_no_import_cycle():
    graph = import_graph(ROOT, "edgepe")
    assert {"edgepe.formats.bin", "edgepe.formats.c", "edgepe.runtime"} <= graph.keys()
    assert "edgepe.formats.bin" in graph["edgepe.formats.npy"]  # the graph does see imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_tables_and_c_do_not_import_each_other_even_lazily():
    """The circle issue 21 named (c imports the table bytes, the table size check named c's
    schemes) is gone, not just deferred into a function."""
    for module, other in (("bin", "edgepe.formats.c"), ("npy", "edgepe.formats.c")):
        source = (ROOT / "formats" / f"{module}.py").read_text()
        imported = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
        assert other not in imported, f"edgepe.formats.{module} imports {other}"


@pytest.mark.parametrize("lazy", [False, True])
def test_a_cycle_is_found_and_named_and_a_lazy_import_is_not_one(tmp_path, lazy):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import a\n")
    (pkg / "sub" / "a.py").write_text("from pkg.b import thing\n")
    b = "def f():\n    from pkg.sub.a import x\n" if lazy else "try:\n    import pkg.sub.a\n" \
        "except ImportError:\n    pass\nthing = 1\n"
    (pkg / "b.py").write_text(b)
    graph = import_graph(pkg, "pkg")
    cycle = find_cycle(graph)
    if lazy:
        assert cycle is None
    else:
        assert cycle is not None and set(cycle) == {"pkg.sub.a", "pkg.b"}
