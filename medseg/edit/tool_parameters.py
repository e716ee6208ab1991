"""The semi-automatic tools' parameters, with their units and ranges: the one declaration.

Kept apart from the tools (which need scipy) so that the operation catalogue, and with it
``medseg edit --help``, can read the ranges without loading the image-processing stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from medseg.errors import MedsegError

SCISSORS_OPERATIONS = ("erase-inside", "erase-outside", "fill-inside", "fill-outside")


def _check_ranges(parameters) -> None:
    for name, (low, high, unit) in parameters.RANGES.items():
        value = getattr(parameters, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
            raise MedsegError(f"{name.replace('_', ' ')} must be a number from {low:g} to {high:g} {unit}".rstrip()
                              + f", got {value!r}")


@dataclass(frozen=True)
class LevelTraceParameters:
    tolerance_hu: float = 50.0  # the region holds voxels within this many HU of the clicked one

    RANGES = {"tolerance_hu": (0.0, 2000.0, "HU")}

    def __post_init__(self) -> None:
        _check_ranges(self)


@dataclass(frozen=True)
class ConfidenceParameters:
    k: float = 2.5  # the range is mean ± k·SD
    iterations: int = 4  # times the mean and SD are recomputed over the region
    neighbourhood_voxels: int = 1  # radius of the first neighbourhood around the click
    reach_mm: float = 100.0  # the region stays inside a box of this half-width around the click

    RANGES = {"k": (0.1, 10.0, ""), "iterations": (0, 20, ""), "neighbourhood_voxels": (1, 5, "voxels"),
              "reach_mm": (5.0, 1000.0, "mm")}

    def __post_init__(self) -> None:
        _check_ranges(self)


@dataclass(frozen=True)
class GrowParameters:
    roi_margin_mm: float = 15.0  # the region of interest: the seeds' bounding box grown by this much
    seed_locality: float = 0.0  # extra path cost, HU per mm: how far a seed may reach
    smoothing_mm: float = 1.5  # Gaussian sigma applied to the image before the path costs
    # labels already in the map are seeds of themselves (locked ones always are). Off by default: a model's
    # "body" label covers every voxel a structure could grow into, and would leave it no room.
    use_existing_labels: bool = False

    RANGES = {"roi_margin_mm": (0.0, 200.0, "mm"), "seed_locality": (0.0, 50.0, "HU/mm"),
              "smoothing_mm": (0.0, 5.0, "mm")}

    def __post_init__(self) -> None:
        _check_ranges(self)


@dataclass(frozen=True)
class ScissorsParameters:
    operation: str = "erase-inside"
    slab_mm: float | None = None  # None: the whole volume along the view's normal

    def __post_init__(self) -> None:
        if self.operation not in SCISSORS_OPERATIONS:
            raise MedsegError(f"the scissors operation must be one of {', '.join(SCISSORS_OPERATIONS)}, "
                              f"not {self.operation!r}")
        if self.slab_mm is not None and not (math.isfinite(self.slab_mm) and self.slab_mm > 0):
            raise MedsegError(f"the slab must be a positive number of millimetres, got {self.slab_mm!r}")
