"""Editing tools: each one reads the label map (and the image for HU masks) and returns a
sparse :class:`~medseg.edit.delta.Delta`, or None when nothing would change. None of them
writes: the document applies the delta, so every tool is undoable, journaled and
respects the same locks.
"""

from medseg.edit.tools.brush import dab, stroke
from medseg.edit.tools.click_region import confidence_connected, level_trace
from medseg.edit.tools.fill import flood_fill
from medseg.edit.tools.grow_seeds import SeedGrower, grow_from_seeds
from medseg.edit.tools.holes import fill_holes
from medseg.edit.tools.interpolate import interpolate_slices
from medseg.edit.tools.islands import keep_clicked, keep_largest, remove_smaller
from medseg.edit.tools.logical import intersect, subtract, union
from medseg.edit.tools.margin import grow, shrink
from medseg.edit.tools.rules import LockedLabelError, PaintRules, paint_mask
from medseg.edit.tools.scissors import lasso, scissors
from medseg.edit.tools.smooth import smooth
from medseg.edit.tools.threshold import threshold

__all__ = ["dab", "stroke", "confidence_connected", "level_trace", "SeedGrower", "grow_from_seeds", "lasso",
           "scissors", "flood_fill", "fill_holes", "interpolate_slices", "keep_clicked", "keep_largest",
           "remove_smaller", "intersect", "subtract", "union", "grow", "shrink", "LockedLabelError",
           "PaintRules", "paint_mask", "smooth", "threshold"]
