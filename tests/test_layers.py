"""The layer rule: nothing below medseg/gui imports Qt (also enforced by import-linter)."""

import ast
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
