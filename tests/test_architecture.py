"""The package's architecture (issues 21, 31): layers, imports going down only, no circle.

The layer order is data: ``[tool.importlinter]`` in pyproject.toml (read it there; the README's
"Layout" shows the same list). import-linter checks it on grimp's import graph, which counts an
import inside a function like one at module level: a lazy import is still a dependency, never a
way around a circle. Only ``if TYPE_CHECKING:`` blocks are left out (they never run).

- ``layers``: a module imports only from layers below its own (``a | b``: neither imports the
  other); ``exhaustive``: every package and module of edgepe is in a layer;
- ``acyclic_siblings``: no circle between the modules of any package, at any depth;
- below, graphlib over the same graph: no circle at all (a package and its own modules too), and
  no module imports the package root (which imports ``edgepe.graft`` and ``edgepe.runtime``).

Lazy imports stay only for the heavy third-party packages in ``HEAVY``: a function may import an
edgepe module only when importing that module loads one of them (checked in a fresh
interpreter), so ``edgepe --help`` (tests/test_cli_light.py) and ``import edgepe`` stay light.
"""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "edgepe"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# Third-party packages imported inside functions only, because they take a noticeable time or
# memory to import (or are optional extras): everything else is imported at module level.
# safetensors: only to read a checkpoint, whose tensors it hands to torch (framework "pt").
# tflite, flatbuffers, ai_edge_litert, tflite_micro: the optional [tflite] extra (issue 43).
HEAVY = ("torch", "onnx", "onnxruntime", "numpy", "matplotlib", "executorch", "openvino", "rich",
         "safetensors", "tflite", "flatbuffers", "ai_edge_litert", "tflite_micro",
         # edgepe.patch (issue 42): loading a saved model, and the LiteRT exporter.
         "transformers", "litert_torch")


def lint_imports(config: Path, path: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with ``config``, importing from ``path`` (no cache: the tree is read)."""
    pythonpath = os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": pythonpath, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
                          capture_output=True, text=True, cwd=path, env=env, timeout=120)


def test_edgepe_keeps_its_layers_and_has_no_circle():
    result = lint_imports(REPO / "pyproject.toml", REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "edgepe's layers: imports go down only KEPT" in result.stdout
    assert "Contracts: 2 kept, 0 broken." in result.stdout


LAYERED = """
[tool.importlinter]
root_packages = ["pkg"]
exclude_type_checking_imports = true

[[tool.importlinter.contracts]]
id = "layers"
name = "layers"
type = "layers"
containers = ["pkg"]
exhaustive = true
layers = ["high", "mid_a | mid_b", "low"]

[[tool.importlinter.contracts]]
id = "acyclic"
name = "acyclic"
type = "acyclic_siblings"
ancestors = ["pkg"]
"""


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"pkg/__init__.py": "", "pkg/high.py": "", "pkg/mid_a.py": "",
                       "pkg/mid_b.py": "", "pkg/low/__init__.py": "", **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "pyproject.toml").write_text(LAYERED)
    return tmp_path


def test_the_contract_holds_for_downward_and_type_checking_imports(tmp_path):
    path = _package(tmp_path, {
        "pkg/high.py": "from pkg import mid_a\n",
        "pkg/mid_a.py": "def f():\n    from pkg.low import x\n",
        "pkg/low/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from pkg.high import thing\n",
    })
    result = lint_imports(path / "pyproject.toml", path)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("where", ["module", "function"])
def test_an_upward_import_fails_naming_both_modules_even_inside_a_function(tmp_path, where):
    line = "import pkg.high\n" if where == "module" else "def f():\n    import pkg.high\n"
    path = _package(tmp_path, {"pkg/low/x.py": line})
    result = lint_imports(path / "pyproject.toml", path)
    assert result.returncode == 1
    assert "layers BROKEN" in result.stdout
    assert "pkg.low.x -> pkg.high (l.2)" in result.stdout or "pkg.low.x -> pkg.high (l.1)" \
        in result.stdout, result.stdout


def test_independent_layer_members_and_a_circle_fail_naming_both_modules(tmp_path):
    path = _package(tmp_path, {"pkg/mid_a.py": "import pkg.mid_b\n",
                               "pkg/low/x.py": "def f():\n    from pkg.low import y\n",
                               "pkg/low/y.py": "from pkg.low import x\n"})
    result = lint_imports(path / "pyproject.toml", path)
    assert result.returncode == 1
    assert "pkg.mid_a -> pkg.mid_b" in result.stdout, result.stdout
    assert "acyclic BROKEN" in result.stdout
    broken = result.stdout.split("acyclic BROKEN")[1]
    assert "No cycles are allowed in pkg.low." in broken
    assert "- .y -> .x" in broken or "- .x -> .y" in broken, broken


def test_a_module_outside_every_layer_fails(tmp_path):
    path = _package(tmp_path, {"pkg/stray.py": ""})
    result = lint_imports(path / "pyproject.toml", path)
    assert result.returncode == 1 and "pkg.stray" in result.stdout, result.stdout


# -- the whole graph ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph():
    sys.path.insert(0, str(REPO))
    try:
        return grimp.build_graph("edgepe", cache_dir=None, exclude_type_checking_imports=True)
    finally:
        sys.path.remove(str(REPO))


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``edges`` (first module repeated at the end), or ``None``."""
    try:
        tuple(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_no_import_circle_at_all_lazy_imports_included(graph):
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert "edgepe.formats.bin" in edges["edgepe.formats.npy"]  # the graph does see imports
    # ... and lazy ones (formats.onnx imports the int8 builder inside a function)
    assert "edgepe.graphs.int8" in edges["edgepe.formats.onnx"]
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_the_package_root(graph):
    importers = graph.find_modules_that_directly_import("edgepe") - {"edgepe"}
    assert not importers, f"{sorted(importers)} import the package root edgepe"


def test_a_cycle_is_found_and_named():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert set(find_cycle({"a": {"b"}, "b": {"a"}})) == {"a", "b"}


# -- lazy imports -------------------------------------------------------------------------------


def lazy_imports() -> dict[str, list[str]]:
    """Module imported inside a function (not under ``TYPE_CHECKING``) -> where ("file:line")."""
    found: dict[str, list[str]] = {}

    def walk(node, in_function: bool, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if inside and isinstance(child, ast.Import):
                for alias in child.names:
                    found.setdefault(alias.name, []).append(f"{where}:{child.lineno}")
            elif inside and isinstance(child, ast.ImportFrom) and not child.level:
                for name in (f"{child.module}.{a.name}" for a in child.names):  # a module?
                    module = name if name in modules else child.module
                    found.setdefault(module, []).append(f"{where}:{child.lineno}")
            walk(child, inside, where)

    modules = module_files()
    for path in sorted(ROOT.rglob("*.py")):
        walk(ast.parse(path.read_text()), False, str(path.relative_to(REPO)))
    return found


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
                yield from _run_at_import(inner)


def module_files() -> dict[str, Path]:
    """Every module of edgepe: dotted name -> file."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["edgepe", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def loads_heavy(module: str, modules: dict[str, Path], seen: set[str] | None = None) -> bool:
    """Whether importing ``module`` loads a package of ``HEAVY``: its module-level imports, and
    those of the packages above it, followed through edgepe's modules."""
    seen = set() if seen is None else seen
    parts = module.split(".")
    for name in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
        if name in seen or name not in modules:
            continue
        seen.add(name)
        path = modules[name]
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in _run_at_import(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here[: len(here) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                if target.split(".")[0] in HEAVY:
                    return True
                if target in modules and loads_heavy(target, modules, seen):
                    return True
    return False


def test_loads_heavy_agrees_with_a_fresh_interpreter():
    modules = module_files()
    code = ("import sys, {}; print(sorted(h for h in {!r} if h in sys.modules))")
    for module in ("edgepe.formats.bin", "edgepe.contract.manifest", "edgepe.graphs.quant"):
        result = subprocess.run([sys.executable, "-c", code.format(module, HEAVY)],
                                capture_output=True, text=True, check=True, timeout=120,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert loads_heavy(module, modules) == (result.stdout.strip() != "[]"), module


def test_lazy_imports_are_heavy_packages_or_modules_that_load_one():
    lazy = lazy_imports()
    modules = module_files()
    ours = sorted(m for m in lazy if m == "edgepe" or m.startswith("edgepe."))
    assert "edgepe.graphs.int8" in ours  # the walk sees imports inside functions
    third_party = {m.split(".")[0] for m in lazy if not m.startswith("edgepe")}
    extra = third_party - set(sys.stdlib_module_names) - set(HEAVY) - {"google", "typer", "click"}
    assert not extra, f"imported inside functions, not listed in HEAVY: {sorted(extra)}"
    light = {m: lazy[m] for m in ours if not loads_heavy(m, modules)}
    assert not light, ("edgepe modules that load no heavy package, imported inside a function "
                       f"(import them at module level): {light}")
