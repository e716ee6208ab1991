"""A stateful tool is one object (issue 50 item 2): its state, mouse handling, drawing and options in one module of
medseg/edit/effects, registered once. Oracle: the package's files and the catalogue, and a tool added the way the
developer guide says (tests/edit/effect_example.py), driven through the tool controller as a view drives it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import medseg.edit.effects as effects
from medseg.edit.document import SegmentationDocument
from medseg.edit.effects import EFFECTS, forms_of, register_effect, unregister_effect
from medseg.edit.effects.base import Circle, Effect
from medseg.edit.operations import CATALOGUE, register, tools, unregister
from medseg.errors import MedsegError
from tests.edit.effect_example import SIZE, Marks, mark_operation

PACKAGE = Path(effects.__file__).parent
GUI = Path(effects.__file__).parents[2] / "gui"


@pytest.fixture
def marks_tool():
    register_effect(Marks)
    operation = register(mark_operation())
    yield operation
    unregister(operation.name)
    unregister_effect(Marks.name)


def test_each_effect_module_holds_one_registered_effect_and_each_gesture_has_one():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "base"}
    holders = {}
    for name in modules:
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        holders[name] = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    registered = {inspect.getmodule(cls).__name__.rsplit(".", 1)[1]: cls.__name__ for cls in EFFECTS.values()}
    assert registered == {name: classes[0] for name, classes in holders.items()}  # one module, one effect
    assert all(len(classes) == 1 for classes in holders.values())
    # every tool's gesture is a registered effect (the Interactive AI tool's "prompts" is registered by workflows)
    assert {op.gesture for op in CATALOGUE.values() if op.gesture} | {"prompts"} == set(EFFECTS)
    with pytest.raises(MedsegError, match="built-in"):
        unregister_effect("seeds")
    with pytest.raises(MedsegError, match="unknown gesture 'marks'"):
        register(mark_operation())  # its effect is not registered


def test_no_drawing_or_form_code_names_a_tool():
    """The slice view draws what each effect says and the panel builds each effect's forms: neither names one."""
    names = set(EFFECTS) | set(tools()) | {f.name for e in EFFECTS.values() for f in e.forms}
    for path in (GUI / "viewer" / "slice_view.py", GUI / "viewer" / "tool_overlay.py", GUI / "editing" / "option_form.py",
                 GUI / "editing" / "tool_options.py", GUI / "viewer" / "layout.py"):
        constants = {node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)}
        assert not constants & names, (path.name, constants & names)


def test_a_tool_added_as_one_module_and_one_registration_works_everywhere(marks_tool, chest_image):
    from medseg.gui.common.view_state import ViewState  # Qt-free: the controller's owner in the app

    document = SegmentationDocument()
    document.set_volume(chest_image)
    controller = ViewState(document).tools
    assert tools()["mark"].shortcut == "J" and forms_of(marks_tool) == ["marks"]
    option = controller.settings["mark_ring_px"]  # a Property made from the effect's Parameter
    assert (option.minimum, option.maximum, option.value, option.unit) == (1.0, 20.0, SIZE.default, "px")
    option.set(50.0)
    assert option.value == 20.0  # clamped to the Parameter's range

    controller.tool.set("mark")
    assert controller.wants_mouse() and not controller.claims_shift()
    assert controller.press((100.4, 200.6, 24.0), 2)  # x, y, z in an axial view
    controller.release()
    effect = controller.effects["marks"]
    assert isinstance(effect, Effect) and effect.marks == [(24, 201, 100)] and effect.active
    assert effect.shapes(0, 24) == [Circle((24, 201, 100), 20.0, (((255, 0, 255, 255), 1.0),))]
    assert effect.shapes(0, 23) == []
    assert controller.preview() is None  # it has nothing for Apply to write into the label map
    with pytest.raises(MedsegError, match="another effect's"):
        register_effect(type("Copy", (Marks,), {"name": "copy"}))
