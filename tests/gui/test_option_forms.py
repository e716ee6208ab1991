"""The tools' option widgets are built from what the tools declare (issue 50 item 2): each field's widget from the
Parameter behind it (range, unit, default, choices), each action a button enabled while its tool has work
pending. Oracle: the Parameters of the catalogue and of the effects, and a tool added as one module and one
registration (tests/edit/effect_example.py), whose options appear with it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSlider, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.edit.effects import EFFECTS, register_effect, unregister_effect
from medseg.edit.operations import register, settings, unregister
from medseg.gui.common.view_state import ViewState
from medseg.gui.editing.option_form import OptionForms
from medseg.gui.editing.tool_options import ToolOptions
from medseg.io import read_image
from tests.edit.effect_example import SIZE, Marks, mark_operation


def test_a_new_tools_options_are_built_from_its_parameters_and_shown_with_it(qtbot, ct_dir):
    register_effect(Marks)
    operation = register(mark_operation())
    try:
        document = SegmentationDocument()
        document.set_volume(read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"))
        controller = ViewState(document).tools
        parent = QWidget()
        qtbot.addWidget(parent)
        forms = OptionForms(controller, parent, custom={"prompt": QWidget(parent)})
        box = ToolOptions(controller, forms.groups, parent)
        parameters = dict(settings())
        parameters.update((p.name, p) for effect in EFFECTS.values() for p in effect.options)
        for name, widget in forms.widgets.items():  # every field, the built-in tools' and the new one's
            parameter = parameters[name]
            assert widget.objectName() == name
            if parameter.kind == "flag":
                assert isinstance(widget, QCheckBox) and widget.isChecked() == parameter.default
            elif parameter.kind == "choice":
                assert isinstance(widget, QComboBox)
                assert [widget.itemText(i) for i in range(widget.count())] == list(parameter.choices)
                assert widget.currentText() == parameter.default
            elif isinstance(widget, QSlider):  # the seed locality, in half units
                assert widget.maximum() / 2 == parameter.maximum and widget.value() / 2 == parameter.default
            else:
                assert isinstance(widget, QDoubleSpinBox)
                assert (widget.minimum(), widget.maximum(), widget.value()) == \
                    (parameter.minimum, parameter.maximum, parameter.default)
                assert widget.suffix().strip() == parameter.unit
        assert "mark_ring_px" in forms.widgets and forms.widgets["mark_ring_px"].maximum() == SIZE.maximum

        parent.show()
        controller.tool.set("mark")  # the new tool shows its own form only
        assert box.title() == "Mark (J)"
        assert [name for name, group in forms.groups.items() if group.isVisible()] == ["marks"]
        clear = forms.buttons["marks", "clear"]
        assert not clear.isEnabled()  # nothing to clear yet
        assert controller.press((100.0, 200.0, 24.0), 2)
        assert clear.isEnabled()
        qtbot.mouseClick(clear, Qt.MouseButton.LeftButton)
        assert controller.effects["marks"].marks == [] and not clear.isEnabled()
        controller.tool.set("brush")
        assert [name for name, group in forms.groups.items() if group.isVisible()] == ["stroke"]
    finally:
        unregister(operation.name)
        unregister_effect(Marks.name)
