"""The editing layer (no Qt): the label map and its table, tools, undo history and autosave journal."""

from medseg.edit.delta import Delta
from medseg.edit.label_map import CodedConcept, LabelEntry, LabelMap, build_label_table

__all__ = ["Delta", "LabelMap", "LabelEntry", "CodedConcept", "build_label_table"]
