"""Grow from seeds on a 512x512x300 real CT: first preview, one more stroke, one erased stroke; peers side by side.

The CT: TotalSegmentator's example DICOM series (real, Siemens, contrast-enhanced abdomen: 512 x 512 x 20,
0.98 x 0.98 x 2 mm) resampled along z (linear) to 300 slices 0.127 mm apart; its reference liver (TotalSegmentator's,
stored LAS, put on the DICOM grid first) resampled the same way (linear, kept where >= 0.5). The liver then spans
all 300 slices and its region of interest is about as many voxels as a real liver's on a 0.8 mm thin-slice series
(17 M). The 20-slice original is run too (the same seeds' rule on its own grid).

Seeds as a person places them (tests/edit/seed_placement.py): 5 mm discs at the deepest point of the liver on the
slices at 25 / 50 / 75 % of its extent, and a 1-voxel ring 10 mm outside it on the same slices. Timed:
  * first preview: SeedGrower on the region of interest (smoothing, costs) + grow + the preview Delta;
  * one more stroke: a 5 mm background disc 12 mm outside the liver on the slice at 40 % (incremental), + Delta;
  * erasing that stroke again (incremental), + Delta.
Side by side on the same seeds and region: medseg's NumPy reference of the same algorithm (20-slice case only: it
takes minutes on the large one), scikit-image's random_walker (beta 130, mode cg_j) and SimpleITK's
MorphologicalWatershedFromMarkers on the gradient magnitude of the same smoothed image: time and Dice vs the
reference liver.

Run: .venv/bin/python benchmarks/bench_grow.py [--repeats 3] [--slices 300] [--skip-random-walker]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import SimpleITK as sitk

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "edit"))
from seed_placement import dice, place_seeds  # noqa: E402

from medseg.core.volume import Volume  # noqa: E402
from medseg.edit.delta import box_of, box_slices  # noqa: E402
from medseg.edit.label_map import LabelMap  # noqa: E402
from medseg.edit.tools import grow_seeds as grow  # noqa: E402
from medseg.io import load, read_image, resample_to  # noqa: E402

SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
LIVER = 5


def build_case(slices: int | None) -> tuple[Volume, np.ndarray]:
    folder = SHARED / "ct" / "totalsegmentator"
    image = load(folder / "example_ct_dicom")
    liver = resample_to(read_image(folder / "example_seg_dicom.nii.gz"), image).array == LIVER
    if not slices:
        return image, liver
    ct = image.to_sitk()
    size, spacing = list(ct.GetSize()), list(ct.GetSpacing())
    spacing[2] = (size[2] - 1) * spacing[2] / (slices - 1)
    size[2] = slices
    args = (size, sitk.Transform(), None, ct.GetOrigin(), spacing, ct.GetDirection())

    def resampled(source, interpolator, pixel):
        return sitk.GetArrayFromImage(sitk.Resample(source, args[0], args[1], interpolator, args[3], args[4], args[5],
                                                    0, pixel))

    array = resampled(ct, sitk.sitkLinear, sitk.sitkInt16)
    mask = sitk.Cast(image.with_array(liver.astype(np.float32)).to_sitk(), sitk.sitkFloat32)
    liver_big = resampled(mask, sitk.sitkLinear, sitk.sitkFloat32) >= 0.5
    big = Volume(array, tuple(spacing), ct.GetOrigin(), np.asarray(ct.GetDirection()).reshape(3, 3), image.meta)
    return big, liver_big


def extra_stroke(liver: np.ndarray, spacing_zyx) -> np.ndarray:
    """A 5 mm background disc 12 mm outside the liver, on the slice at 40 % of its extent."""
    from scipy import ndimage

    spanned = np.flatnonzero(liver.any(axis=(1, 2)))
    z = int(round(spanned[0] + 0.4 * (spanned[-1] - spanned[0])))
    outside = ndimage.distance_transform_edt(~liver[z], sampling=spacing_zyx[1:])
    r, c = np.argwhere(np.abs(outside - 12.0) < 0.5)[0]
    rows, cols = np.mgrid[0:liver.shape[1], 0:liver.shape[2]]
    disc = ((rows - r) * spacing_zyx[1]) ** 2 + ((cols - c) * spacing_zyx[2]) ** 2 <= 25.0
    stroke = np.zeros(liver.shape, dtype=bool)
    stroke[z] = disc
    return stroke


class Clock:
    """Wall time and this process's CPU time (all threads) since the last lap: on a shared machine the CPU time
    says what the work costs, the wall time what the user waits."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        lap = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return lap


def medseg_run(image, liver, seeds, stroke, use_native: bool):
    label_map = LabelMap.empty_like(image)
    parameters = grow.GrowParameters()
    box = grow.roi_box(box_of(seeds != 0), parameters.roi_margin_mm, image.spacing_zyx, image.shape_zyx)
    block = seeds[box_slices(box)]
    times = {}
    clock = Clock()
    grower = grow.SeedGrower(image, label_map, box, parameters, use_native=use_native)
    for value in (1, grow.BACKGROUND_SEED):
        grower.seeds[block == value] = grower.class_for(value)
    grower.regrow()
    preview = grower.delta()
    times["first"] = clock.lap()
    result = np.zeros(image.shape_zyx, dtype=bool)
    result.reshape(-1)[preview.global_index(image.shape_zyx)] = preview.new == 1
    score = dice(result, liver)
    lo, hi = box_of(stroke)
    clock = Clock()
    grower.add_seeds(lo, stroke[box_slices((lo, hi))], grow.BACKGROUND_SEED)
    grower.delta()
    times["stroke"] = clock.lap()
    grower.erase_seeds(lo, stroke[box_slices((lo, hi))])
    again = grower.delta()
    times["erase"] = clock.lap()
    assert np.array_equal(again.new, preview.new) and again.box == preview.box, "erasing the stroke must restore"
    return times, score, int(np.prod(grower.shape))


def peers(image, liver, seeds, skip_random_walker: bool):
    parameters = grow.GrowParameters()
    box = grow.roi_box(box_of(seeds != 0), parameters.roi_margin_mm, image.spacing_zyx, image.shape_zyx)
    sl = box_slices(box)
    markers = np.zeros(seeds[sl].shape, dtype=np.uint8)
    markers[seeds[sl] == 1] = 1
    markers[seeds[sl] == grow.BACKGROUND_SEED] = 2
    out = {}
    clock = Clock()
    smoothed = grow.smoothed(image.array[sl], image.spacing_mm, parameters.smoothing_mm)
    itk = sitk.GetImageFromArray(smoothed.astype(np.float32))
    itk.SetSpacing(image.spacing_mm)
    gradient = sitk.GradientMagnitude(itk)
    marker_image = sitk.GetImageFromArray(markers)
    marker_image.CopyInformation(gradient)
    labels = sitk.MorphologicalWatershedFromMarkers(gradient, marker_image, markWatershedLine=False,
                                                    fullyConnected=False)
    watershed = sitk.GetArrayFromImage(labels) == 1
    out["SimpleITK MorphologicalWatershedFromMarkers"] = (clock.lap(), _dice_in(watershed, liver, sl))
    if not skip_random_walker:
        from skimage.segmentation import random_walker

        clock = Clock()
        data = (smoothed - smoothed.mean()) / (smoothed.std() or 1.0)
        walked = random_walker(data, markers, beta=130, mode="cg_j", spacing=image.spacing_zyx) == 1
        out["scikit-image random_walker (cg_j)"] = (clock.lap(), _dice_in(walked, liver, sl))
    return out


def _dice_in(block_mask, liver, sl):
    full = np.zeros(liver.shape, dtype=bool)
    full[sl] = block_mask
    return dice(full, liver)


def spread(laps: list[tuple[float, float]]) -> str:
    wall, cpu = [w for w, _ in laps], [c for _, c in laps]
    return (f"wall {statistics.median(wall):.3f} s [{min(wall):.3f}-{max(wall):.3f}], "
            f"CPU {statistics.median(cpu):.3f} s [{min(cpu):.3f}-{max(cpu):.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--skip-random-walker", action="store_true")
    parser.add_argument("--random-walker-on-large", action="store_true",
                        help="also run random_walker on the 300-slice region (many minutes, several GB)")
    args = parser.parse_args()
    print(f"native kernel: {'built' if grow.native_available() else 'NOT built (NumPy reference only)'}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for slices in (None, args.slices):
        image, liver = build_case(slices)
        seeds, placed = place_seeds(liver, image.spacing_zyx, 1, grow.BACKGROUND_SEED)
        stroke = extra_stroke(liver, image.spacing_zyx)
        name = f"{image.size_xyz[0]}x{image.size_xyz[1]}x{image.size_xyz[2]}"
        print(f"\n== {name} ({'original 20 slices' if not slices else f'resampled to {slices} slices'}); seeds: "
              f"{placed['disc_voxels']} disc + {placed['ring_voxels']} ring voxels on slices {placed['slices']}")
        kernels = [True, False] if not slices else [True]
        for native in kernels:
            if native and not grow.native_available():
                continue
            runs = [medseg_run(image, liver, seeds, stroke, native) for _ in range(args.repeats if native else 1)]
            voxels = runs[0][2]
            label = "medseg (C++ kernel)" if native else "medseg (NumPy reference)"
            print(f"{label}: ROI {voxels / 1e6:.1f} M voxels; Dice {runs[0][1]:.4f}")
            for key, what in (("first", "first preview"), ("stroke", "one more stroke"), ("erase", "stroke erased")):
                print(f"  {what:18s} {spread([r[0][key] for r in runs])}")
        # random_walker took 342 s on the 1.1 M-voxel region here; on the 16 M-voxel one it is left out unless asked
        skip_walker = args.skip_random_walker or (bool(slices) and not args.random_walker_on_large)
        for peer, ((wall, cpu), score) in peers(image, liver, seeds, skip_walker).items():
            print(f"{peer}: wall {wall:.2f} s, CPU {cpu:.2f} s, Dice {score:.4f}")


if __name__ == "__main__":
    main()
