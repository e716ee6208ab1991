"""The active tool's options, and only those (as 3D Slicer's Segment Editor shows the active effect's).

The Edit panel showed every tool's options at once, a long scroll in which the brush's radius, the trace
tolerance and the scissors' slab sat side by side (issue #42.15). Here each tool's options are a group of
widgets; a tool shows the groups that hold one of its settings in the operation catalogue (a widget's object
name is its setting's name), so a new tool's settings appear with it, plus the few it uses without declaring
them: grow from seeds paints its seeds with the brush's radius, and the scissors' operation and slab are the
tool controller's own.
"""

from __future__ import annotations

from PySide6.QtWidgets import QGroupBox, QLabel, QSizePolicy, QVBoxLayout, QWidget

from medseg.edit.interaction import ToolController
from medseg.edit.operations import settings, tools

USED_WITHOUT_DECLARING = {"stroke": {"grow-from-seeds"}, "scissors": {"scissors"},
                         "prompt": {"prompt"}}  # the Interactive AI tool's prompt kind, Apply, Cancel


def group_settings(group: QWidget) -> set[str]:
    """The catalogue settings a group's widgets are bound to (by their object names)."""
    known = settings()
    return {child.objectName() for child in group.findChildren(QWidget) if child.objectName() in known}


def groups_of_tool(tool: str, groups: dict[str, QWidget]) -> list[str]:
    """The names of the groups ``tool`` shows, in the panel's order."""
    operation = tools()[tool].operation
    declared = {p.name for p in operation.settings} if operation is not None else set()
    return [name for name, group in groups.items()
            if declared & group_settings(group) or tool in USED_WITHOUT_DECLARING.get(name, ())]


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
