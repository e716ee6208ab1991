"""The editing layer (no Qt): the label map and its table, tools, undo history and autosave journal."""

from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap, build_label_table

__all__ = ["Delta", "LabelMap", "build_label_table"]
