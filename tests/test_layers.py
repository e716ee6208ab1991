"""The layer rule: nothing below medseg/gui imports Qt (also enforced by import-linter)."""

import ast
import functools
from pathlib import Path

QT_MODULES = {"PySide6", "shiboken6", "pyqtgraph"}
PACKAGE = Path(__file__).resolve().parents[1] / "medseg"


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_qt_outside_gui():
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if "gui" not in path.relative_to(PACKAGE).parts[:1] and _imported_roots(path) & QT_MODULES
    ]
    assert offenders == [], f"Qt imported outside medseg/gui: {offenders}"


def test_rule_detects_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from PySide6 import QtCore\n")
    assert _imported_roots(bad) & QT_MODULES == {"PySide6"}


# --- no import cycles between medseg's modules ----------------------------------------------------------------

# Edges a cycle may still use, each with the work that removes it. Nothing else belongs here.
ALLOWED_EDGES: set[tuple[str, str]] = set()  # none left; an entry needs the work that removes it


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the medseg modules it imports, at module level or inside functions (TYPE_CHECKING too).

    ``from package import name`` points at ``package.name`` when that is a module, else at the
    package. Importing a submodule runs its package's __init__ too; that is Python's doing,
    not an edge.
    """
    modules = _module_names() if modules is None else modules
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


@functools.lru_cache(maxsize=1)
def _package_graph() -> tuple[tuple[str, frozenset[str]], ...]:
    """medseg's import graph, scanned once for the tests that read it (each gets its own copy)."""
    return tuple((name, frozenset(targets)) for name, targets in import_graph().items())


def package_graph() -> dict[str, set[str]]:
    return {name: set(targets) for name, targets in _package_graph()}


def test_no_two_medseg_modules_import_each_other():
    graph = package_graph()
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300  # the scan really saw the package
    for source, target in ALLOWED_EDGES:
        assert target in graph[source], f"{source} -> {target} is gone: take it off ALLOWED_EDGES"
        graph[source].discard(target)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_cycle_check_sees_imports_inside_functions_and_from_packages(tmp_path):
    package = tmp_path / "medseg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from medseg.sub.b import thing\n")
    (package / "sub" / "a.py").write_text("def late():\n    from medseg.sub import b\n")
    (package / "sub" / "b.py").write_text("from . import a\nthing = 1\n")
    modules = {"medseg": package / "__init__.py", "medseg.sub": package / "sub" / "__init__.py",
               "medseg.sub.a": package / "sub" / "a.py", "medseg.sub.b": package / "sub" / "b.py"}
    graph = import_graph(modules)
    assert graph["medseg.sub"] == {"medseg.sub.b"} and graph["medseg.sub.b"] == {"medseg.sub.a"}
    cycle = find_cycle(graph)  # a imports b only inside a function, b imports a relatively
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"medseg.sub.a", "medseg.sub.b"}
    graph["medseg.sub.a"].clear()
    assert find_cycle(graph) is None


# --- the command line and batch reach I/O, models and editing only through workflows (issue 50) ----------------
# import-linter says so too (pyproject.toml; `make lint`); this one also sees imports inside functions and under
# TYPE_CHECKING, and names each offending import.
INTERFACES = ("medseg.cli", "medseg.batch")
BELOW_THE_USE_CASES = ("medseg.io", "medseg.model", "medseg.edit")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def interface_imports_below(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{source} -> {target}" for source, targets in graph.items() if _within(source, INTERFACES)
                  for target in targets if _within(target, BELOW_THE_USE_CASES))


def test_the_command_line_and_batch_call_use_cases_not_the_layers_below():
    graph = package_graph()
    assert any(_within(t, ("medseg.workflows",)) for m, ts in graph.items() if _within(m, INTERFACES) for t in ts)
    assert interface_imports_below(graph) == []


def test_the_interface_rule_sees_an_import_inside_a_function(tmp_path):
    package = tmp_path / "medseg"
    for folder in ("cli", "io", "workflows"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "cli" / "stats.py").write_text("def run():\n    from medseg.io import load\n")
    (package / "cli" / "mesh.py").write_text("from medseg.workflows import meshes\n")
    (package / "workflows" / "meshes.py").write_text("from medseg.io import load\n")  # a use case may
    modules = {"medseg": package / "__init__.py"}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(tmp_path).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    assert interface_imports_below(import_graph(modules)) == ["medseg.cli.stats -> medseg.io"]


# The use cases issue 50 found composed in the interfaces, by the calls that composed them: each now lives in
# medseg.workflows (statistics, meshes, model_export, training, edit_recipe, name_sets, model_install, studies).
COMPOSING_CALLS = ("write_label_meshes(", "totalseg_statistics(", "export_model(", "combine_packages(", "TrainConfig(",
                   "install_pack(", "import_path(", "import_nnunet(", "open_segmentation(", "scan_findings(",
                   "load_or_create_key(")


def composing_calls(root: Path) -> list[str]:
    found = []
    for folder in ("cli", "batch", "gui"):
        for path in sorted((root / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                found += [f"{path.relative_to(root.parent)}:{number}: {call}" for call in COMPOSING_CALLS
                          if call in code and not code.lstrip().startswith("def ")]
    return found


def test_no_interface_composes_a_use_case_itself(tmp_path):
    assert composing_calls(PACKAGE) == []
    (tmp_path / "gui").mkdir()
    (tmp_path / "gui" / "panel.py").write_text("def work():\n    return export_model(package, 'onnx', out)\n")
    assert composing_calls(tmp_path) == [f"{tmp_path.name}/gui/panel.py:2: export_model("]
