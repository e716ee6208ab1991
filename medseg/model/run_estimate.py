"""What a segmentation will cost, from the plan and the series' shape, before anything runs.

A 64 x 64 x 24 image at 100 mm spacing planned 36 504 tiles and reached 3.7 GB before
anyone could stop it. The plan knows the resampled shape, the tiles and the memory the
stitching needs: :func:`estimate_run` computes them (the Segment panel shows them) and
:func:`check_run` refuses a run that cannot fit in memory or would take days.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from medseg.core.volume import Volume
from medseg.errors import ResourceLimitError
from medseg.model.tiling import plan_tiles

# Far beyond any CT at any plan (a 1000-slice series planned 2D at 4 tiles a slice is 4 000);
# at about a second a tile on a CPU, this is most of a day of work.
MAX_TILES = 20_000
# A plan resamples a CT to a few times its voxels at most (5 mm slices to 2 mm: 2.5 x); a
# series whose spacing makes it grow more than this is not what the model was planned for.
MAX_UPSAMPLING = 64


@dataclass(frozen=True)
class RunEstimate:
    resampled_shape: tuple[int, ...]  # in the plan's axis order
    network_spacing: tuple[float, ...]  # the resampled image's spacing, in the same order
    upsampling: float  # resampled voxels / the series' voxels
    tiles: int
    stitching_bytes: int  # float32 class scores of the whole resampled image, plus the image
    tile_bytes: int  # first-stage activations of one tile

    @property
    def total_bytes(self) -> int:
        return self.stitching_bytes + self.tile_bytes


def estimate_run(plan: Any, num_classes: int, volume: Volume, step_size: float = 0.5) -> RunEstimate:
    """The resampled size, tiles and memory of running ``plan`` over ``volume`` (its geometry only)."""
    tiling = plan_tiles(volume, plan, step_size)
    voxels = math.prod(tiling.network_shape)
    stitching = voxels * (num_classes + 1) * 4
    tile = math.prod(int(p) for p in plan.patch_size) * (int(plan.features_per_stage[0]) * 6 + num_classes) * 4
    return RunEstimate(tiling.network_shape, tiling.network_spacing, voxels / max(1, math.prod(volume.shape_zyx)),
                       tiling.tiles, stitching, tile)


def check_run(estimate: RunEstimate, where: Any = None) -> None:
    """Refuse a run that would not fit in memory or would run for days; the message has the numbers."""
    from medseg.io.memory_budget import available_bytes

    shape = " x ".join(str(n) for n in estimate.resampled_shape)
    if estimate.upsampling > MAX_UPSAMPLING:
        raise ResourceLimitError(f"this plan would resample the series to {estimate.upsampling:.0f} times its voxels "
                                 f"({shape}, {estimate.tiles} tiles; at most {MAX_UPSAMPLING} times): the series' "
                                 "spacing is implausible for this model", path=where,
                                 hint="check the voxel spacing (medseg info, --spacing)")
    if estimate.tiles > MAX_TILES:
        raise ResourceLimitError(f"this plan would run {estimate.tiles} tiles over a {shape} resampled image "
                                 f"(at most {MAX_TILES}): the series' spacing or size is implausible for it",
                                 path=where, hint="check the voxel spacing (medseg info), or choose another "
                                                  "configuration")
    free = available_bytes()
    if estimate.total_bytes > free:
        raise ResourceLimitError(f"segmenting needs about {estimate.total_bytes / 2**30:.1f} GiB of memory for a "
                                 f"{shape} resampled image and {free / 2**30:.1f} GiB is available", path=where,
                                 hint="close other programs, or check the voxel spacing (medseg info)")
