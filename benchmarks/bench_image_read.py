"""What the checks of issue 43 cost when an image file is opened: SimpleITK alone vs medseg.io.read_image.

read_image checks the header itself, inflates a .nii.gz once to verify gzip's CRC-32 (ITK does not) and
keeps those voxel bytes (ITK reads only the header then), and, for float voxels, counts NaN as the bytes
pass (ITK turns a NIfTI's NaN into 0); other files SimpleITK reads after the checks. nibabel, which checks the CRC as it reads, is the third column. A 512 x 512 x N CT volume made
from the real TotalSegmentator CT (its 30 slices tiled in z, resampled in-plane to 512) is written as
.nii.gz and .nii, int16 and float32; each reader runs --repeats times, alternating; the median, the spread
(min-max) and medseg's ratio to SimpleITK are printed.

Run: .venv/bin/python benchmarks/bench_image_read.py [--slices 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import SimpleITK as sitk

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from medseg.io import read_image  # noqa: E402

SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))


def make_volume(slices: int) -> sitk.Image:
    source = sitk.ReadImage(str(SHARED / "ct" / "totalsegmentator" / "example_ct_sm.nii.gz"))
    array = sitk.GetArrayFromImage(source)
    tiled = np.concatenate([array] * (slices // array.shape[0] + 1))[:slices]
    image = sitk.GetImageFromArray(tiled)
    image.SetSpacing(source.GetSpacing())
    image.SetDirection(source.GetDirection())
    resampled = sitk.Resample(image, [512, 512, slices], sitk.Transform(), sitk.sitkLinear, image.GetOrigin(),
                              [source.GetSpacing()[0] * array.shape[2] / 512, source.GetSpacing()[1] * array.shape[1] / 512,
                               source.GetSpacing()[2]], image.GetDirection(), -1024, sitk.sitkInt16)
    return resampled


def timed(function, path: Path) -> float:
    started = time.perf_counter()
    function(path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import nibabel

    readers = {
        "SimpleITK": lambda p: sitk.GetArrayFromImage(sitk.ReadImage(str(p))).sum(),
        "medseg": lambda p: read_image(p).array.sum(),
        "nibabel": lambda p: np.asanyarray(nibabel.load(str(p)).dataobj).sum(),
    }
    volume = make_volume(args.slices)
    print(f"a {volume.GetSize()} CT volume, {args.repeats} runs each, alternating; seconds: median (min-max)")
    with tempfile.TemporaryDirectory(prefix="medseg-bench-read-") as folder:
        for kind, image in (("int16", volume), ("float32", sitk.Cast(volume, sitk.sitkFloat32))):
            for suffix in (".nii.gz", ".nii"):
                path = Path(folder) / f"ct_{kind}{suffix}"
                sitk.WriteImage(image, str(path), suffix == ".nii.gz")
                times: dict[str, list[float]] = {name: [] for name in readers}
                for name, reader in readers.items():
                    reader(path)  # warm the page cache and the imports
                for _ in range(args.repeats):
                    for name, reader in readers.items():
                        times[name].append(timed(reader, path))
                base = statistics.median(times["SimpleITK"])
                cells = [f"{name} {statistics.median(t):.3f} ({min(t):.3f}-{max(t):.3f})" for name, t in times.items()]
                ratio = statistics.median(times["medseg"]) / base
                print(f"{kind:8} {suffix:7} {path.stat().st_size / 2**20:7.1f} MiB | " + " | ".join(cells)
                      + f" | medseg/SimpleITK {ratio:.2f}x")


if __name__ == "__main__":
    main()
