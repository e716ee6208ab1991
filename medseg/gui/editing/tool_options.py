"""The active tool's options, and only those (as 3D Slicer's Segment Editor shows the active effect's).

The Edit panel showed every tool's options at once, a long scroll in which the brush's radius, the trace
tolerance and the scissors' slab sat side by side (issue #42.15). Here each tool's options are the forms its
effect declares (:mod:`medseg.edit.effects`, built by :mod:`medseg.gui.editing.option_form`); a tool shows the
forms that hold one of its operation's settings, that name it, or that its effect asks for
(:func:`medseg.edit.effects.forms_of`), so a new tool's options appear with it.
"""

from __future__ import annotations

from PySide6.QtWidgets import QGroupBox, QLabel, QSizePolicy, QVBoxLayout, QWidget

from medseg.edit.effects import forms_of
from medseg.edit.interaction import ToolController
from medseg.edit.operations import tools


def groups_of_tool(tool: str, groups: dict[str, QWidget]) -> list[str]:
    """The names of the groups ``tool`` shows, in the panel's order."""
    shown = set(forms_of(tools()[tool].operation))
    return [name for name in groups if name in shown]


class ToolOptions(QGroupBox):
    """A box titled with the active tool and its key, holding its groups; the other groups are hidden."""

    def __init__(self, controller: ToolController, groups: dict[str, QWidget], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller, self.groups = controller, groups
        self.setObjectName("tool-options")
        self.no_options = QLabel("No options.", self)
        layout = QVBoxLayout(self)
        layout.addWidget(self.no_options)
        for group in groups.values():
            layout.addWidget(group)
        # As wide as the widest group needs, whichever is shown: the side panel's width is set once, from the
        # least width of what it holds at the start, and must not clip a group shown later.
        margins = layout.contentsMargins()
        self.setMinimumWidth(max(group.minimumSizeHint().width() for group in groups.values())
                             + margins.left() + margins.right())
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        controller.tool.changed.connect(self.show_tool)
        self.show_tool(controller.tool.value)

    def show_tool(self, name: str) -> None:
        tool = tools()[name]
        shown = groups_of_tool(name, self.groups)
        for group_name, group in self.groups.items():
            group.setVisible(group_name in shown)
        self.no_options.setVisible(not shown)
        self.setTitle(f"{tool.title} ({tool.shortcut})" if tool.shortcut else tool.title)
        self.setToolTip(tool.help)
