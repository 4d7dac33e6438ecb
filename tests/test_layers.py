"""The package's shape is a contract: each layer imports only from the layers below it, and no module
imports itself back, at module level or inside a function (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "chunkeval"

# bottom to top; a module belongs to the first layer with a prefix it starts with
LAYERS = [
    (
        "vocabulary",
        [
            "chunkeval._version",
            "chunkeval.errors",
            "chunkeval.vocabulary",
            "chunkeval.paths",
            "chunkeval.limits",
            "chunkeval.files",
            "chunkeval.faults",
            "chunkeval.progress",
            "chunkeval.run_result",
        ],
    ),
    ("statistics", ["chunkeval.stats"]),
    ("engine", ["chunkeval.engine"]),
    ("analysis", ["chunkeval.analysis"]),
    ("warehouse", ["chunkeval.warehouse"]),
    ("reports", ["chunkeval.report", "chunkeval.publish"]),  # publishing beside the reports: both read the warehouse
    ("interfaces", ["chunkeval.cli", "chunkeval.api", "chunkeval.flows", "chunkeval"]),
]
# caps that catch a module grown several concepts, not one concept that needs its length (issue 31: the
# experiment's settings table is one concept, one field per setting)
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported chunkeval module, line, whether only for type checking) for every import in the file."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    out = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != module:
                out.append((target, node.lineno, id(node) in typing_only))
    return out


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_each_layer_imports_only_from_the_layers_below():
    wrong = [
        f"{m}:{line} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, edges in GRAPH.items()
        for t, line, _ in edges
        if layer_of(t) > layer_of(m)
    ]
    assert wrong == []


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), runtime imports only."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w, _, typing_only in GRAPH[v]:
            if typing_only:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles() == []


def test_the_graph_sees_imports_inside_functions():
    """The checker reads imports wherever they are: the CLI's commands import their engine lazily."""
    lazy = [t for t, _, _ in GRAPH["chunkeval.api"]]
    assert "chunkeval.engine.sweep" in lazy


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_and_classes_stay_small(module):
    source = MODULES[module].read_text(encoding="utf-8")
    assert source.count("\n") <= MAX_MODULE_LINES, f"{module} has {source.count(chr(10))} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= MAX_CLASS_LINES, f"{module}.{node.name} has {lines} lines"


def test_reading_history_imports_no_engine():
    """The warehouse, the analysis and the reports read recorded runs: none of them imports the engine
    (so `runs`, `trend`, `compare` and `report` never load numpy-heavy engine code, and the warehouse's
    storage names no engine type)."""
    readers = ("chunkeval.analysis", "chunkeval.warehouse", "chunkeval.report")
    wrong = [
        f"{m}:{line} imports {t}"
        for m, edges in GRAPH.items()
        if m.startswith(readers)
        for t, line, _ in edges
        if t.startswith("chunkeval.engine")
    ]
    assert wrong == []
