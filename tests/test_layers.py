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
            "chunkeval.visible",
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


# inside the engine, its packages in the order a run's data moves through them (engine/__init__.py)
ENGINE_STAGES = ["moved", "settings", "inputs", "chunking", "embedding", "retrieval", "scoring", "gold", "pipeline"]


def stage_of(module: str) -> int | None:
    parts = module.split(".")
    return ENGINE_STAGES.index(parts[2]) if module.startswith("chunkeval.engine.") else None


def test_the_engines_stages_import_only_from_earlier_stages():
    """Settings → inputs → chunking → embedding → retrieval → scoring → gold → pipeline: a reader follows the
    data, and a stage never calls back into one after it (imports for type checking only are free)."""
    assert sorted(ENGINE_STAGES) == sorted(
        p.stem if p.suffix else p.name
        for p in (PACKAGE / "engine").iterdir()
        if p.name not in ("__init__.py", "__pycache__")
    )
    wrong = [
        f"{m}:{line} imports {t}"
        for m, edges in GRAPH.items()
        if stage_of(m) is not None
        for t, line, typing_only in edges
        if not typing_only and stage_of(t) is not None and stage_of(t) > stage_of(m)
    ]
    assert wrong == []


def test_the_package_imports_its_own_modules_at_the_top():
    """An import of one of chunkeval's modules inside a function is allowed only where it saves a real
    load-time cost, and then it says so in a comment on its line (Prefect, the DuckDB warehouse, the API)."""
    unexplained = []
    for module, path in MODULES.items():
        source = path.read_text(encoding="utf-8")
        lines = source.split("\n")
        for fn in ast.walk(ast.parse(source)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                named = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                if any(n.startswith("chunkeval") for n in named):
                    block = lines[node.lineno - 2 : node.end_lineno]
                    if not any("#" in line for line in block):
                        unexplained.append(f"{module}:{node.lineno}")
    assert unexplained == []


def test_the_command_line_loads_no_prefect_torch_or_mlflow_until_a_command_needs_them():
    """`chunkeval runs`, `trend` and `--help` start without the seconds Prefect, torch and MLflow take to import:
    the lazy imports that keep it so (commented where they are) are held here."""
    import subprocess
    import sys

    code = (
        "import sys, chunkeval.cli.main; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'torch', 'mlflow', 'sentence_transformers'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_engines_old_module_paths_still_import_with_a_warning():
    """One compatibility module (chunkeval.engine.moved) keeps the flat paths of before the move working
    until its removal date: the same module object, and one FutureWarning naming the new path."""
    import importlib
    import sys
    import warnings

    from chunkeval.engine import moved

    for old in ("chunkeval.engine.retrievers", "chunkeval.engine.retrievers.dense"):
        sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for old in ("chunkeval.engine.retrievers", "chunkeval.engine.retrievers.dense"):
            assert importlib.import_module(old) is importlib.import_module(moved.new_name(old))
    said = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert said == [
        f"chunkeval.engine.retrievers has moved to chunkeval.engine.retrieval.retrievers; the old path goes on {moved.REMOVAL}",
        f"chunkeval.engine.retrievers.dense has moved to chunkeval.engine.retrieval.retrievers.dense; the old path goes on {moved.REMOVAL}",
    ]
    for new in moved.MOVED.values():
        importlib.import_module("chunkeval.engine." + new)  # every target exists


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
    assert "chunkeval.engine.pipeline.sweep" in lazy


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
