"""The tests synchronise on conditions, never on fixed waits (issue 50).

``qtbot.wait(50)`` is enough on a quiet machine and not on a loaded CI runner, and it does not say
what the test needed to happen; ``qtbot.waitUntil`` / ``qtbot.waitSignal`` on the real condition do.
A ``time.sleep`` is allowed only as the pause of a loop that polls a condition (``while not ...:``).
These checks read the tests' source (ast).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# (file, function the call is in): why its fixed wait is not a synchronisation.
ALLOWED = {
    # A drag's mouse events paced at a real mouse's rate (about 8 ms apart), so the event loop runs between them
    # as it does for a user: the test measures the GUI's gaps under that load, it does not wait for anything.
    ("gui/test_grow_gui.py", "drag"): "paces a drag's mouse events like a real mouse",
    ("gui/test_grow_gui.py", "paint_seeds"): "paces seed strokes like a real mouse",
}


def _fixed_waits() -> set[tuple[str, str, int, str]]:
    """(file, enclosing function, line, call) of every qtbot.wait(...) and every time.sleep(...) outside a while."""
    found = set()
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        name = path.relative_to(TESTS).as_posix()

        def visit(node, function: str, in_while: bool) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function, in_while = node.name, False
            if isinstance(node, ast.While):
                in_while = True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if node.func.attr == "wait" and owner_name == "qtbot":
                    found.add((name, function, node.lineno, "qtbot.wait"))
                if node.func.attr == "sleep" and owner_name == "time" and not in_while:
                    found.add((name, function, node.lineno, "time.sleep"))
            for child in ast.iter_child_nodes(node):
                visit(child, function, in_while)

        visit(tree, "", False)
    return found


def test_no_fixed_waits_as_synchronisation():
    """Every qtbot.wait and every time.sleep outside a polling loop is on the allow-list, with its reason."""
    unexplained = sorted((f, fn, line, call) for f, fn, line, call in _fixed_waits() if (f, fn) not in ALLOWED)
    assert unexplained == [], "wait for a condition (qtbot.waitUntil / waitSignal) instead: " + repr(unexplained)


def test_the_allow_list_names_only_waits_that_exist():
    """An allowed wait that was removed leaves the list too (the list never grows stale)."""
    used = {(f, fn) for f, fn, _line, _call in _fixed_waits()}
    assert set(ALLOWED) <= used, set(ALLOWED) - used


def test_the_check_finds_a_fixed_wait(tmp_path, monkeypatch):
    """The check itself: a GUI test with qtbot.wait(50) and a bare time.sleep is caught; a polling sleep is not."""
    sample = tmp_path / "gui" / "test_sample.py"
    sample.parent.mkdir()
    sample.write_text("import time\n\ndef test_x(qtbot):\n    qtbot.wait(50)\n    time.sleep(0.2)\n"
                      "    while not ready():\n        time.sleep(0.05)\n")
    monkeypatch.setattr(sys.modules[__name__], "TESTS", tmp_path)
    assert _fixed_waits() == {("gui/test_sample.py", "test_x", 4, "qtbot.wait"),
                              ("gui/test_sample.py", "test_x", 5, "time.sleep")}
