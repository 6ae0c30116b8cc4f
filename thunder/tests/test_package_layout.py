"""The package's layout (docs/architecture.md): each layer imports only the layers below it, module-level imports
form no circle, patch modules do not import each other, and every subpackage says what it owns."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest
import thunder_symbolic

ROOT = pathlib.Path(thunder_symbolic.__file__).parent

# layer -> the layers it may import at module level (besides itself). The top-level modules are layers of their
# own: the public API (`thunder_symbolic`) may import anything.
ALLOWED = {
    "controls": set(),
    "activation": {"controls"},
    "guards": {"controls"},
    "diagnostics": {"guards", "controls"},
    "autodiff": {"guards"},
    "semantics": {"autodiff", "guards"},
    "distributed": {"activation", "autodiff", "guards"},
    "thunderfx": {"activation"},
    "runtime": {"guards", "controls"},
    "passes": {"guards"},
    "fusion": {"guards"},
    "testing": {"validate"},
    "validate": set(),
    "import_patches": {"activation", "autodiff"},
    "patches": {
        "activation", "autodiff", "controls", "diagnostics", "distributed", "fusion", "guards", "passes",
        "runtime", "semantics", "thunderfx",
    },
}  # fmt: skip


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports at module level (not inside functions)."""
    graph = {}
    for path in sorted(ROOT.rglob("*.py")):
        imported = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("thunder_symbolic"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    is_module = (ROOT.parent / full.replace(".", "/")).with_suffix(".py").exists()
                    imported.add(full if is_module else node.module)
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("thunder_symbolic")}
        graph[_module_name(path)] = imported
    return graph


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "thunder_symbolic"


def test_each_layer_imports_only_the_layers_below_it():
    wrong = [
        f"{module} imports {target}"
        for module, imported in _module_level_imports().items()
        if _layer(module) != "thunder_symbolic"
        for target in imported
        if _layer(target) not in (_layer(module), "thunder_symbolic") and _layer(target) not in ALLOWED[_layer(module)]
    ]
    assert not wrong, "imports against docs/architecture.md's layers:\n" + "\n".join(wrong)


def test_module_level_imports_form_no_circle():
    graph = _module_level_imports()
    done, on_path, circles = set(), [], []

    def visit(module):
        on_path.append(module)
        for target in sorted(graph.get(module, ())):
            if target in on_path:
                circles.append(" -> ".join(on_path[on_path.index(target) :] + [target]))
            elif target not in done:
                visit(target)
        on_path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module)
    assert not circles, "\n".join(circles)


def test_patch_modules_do_not_import_each_other():
    graph = _module_level_imports()
    for package in ("thunder_symbolic.patches", "thunder_symbolic.import_patches"):
        for module, imported in graph.items():
            if module.startswith(package + "."):
                assert not {t for t in imported if t.startswith(package)}, module


@pytest.mark.parametrize("package", sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()))
def test_every_subpackage_says_what_it_owns(package):
    doc = importlib.import_module(f"thunder_symbolic.{package}").__doc__
    assert doc and len(doc.split()) >= 10, f"thunder_symbolic.{package} has no docstring saying what it owns"
