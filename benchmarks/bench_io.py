"""DICOM series loading: SimpleITK vs a plain pydicom loop vs medseg, on a realistic series.

Builds a 512x512x300 CT series in a temporary folder from a real slice of shared/data
(re-written with new positions and UIDs), then times in one run:
  * SimpleITK: GetGDCMSeriesFileNames + ImageSeriesReader (GDCM, C++);
  * a plain sequential pydicom loop (read, rescale, sort by position, stack);
  * medseg.io.load (scan + parallel middle-first decode), and load_series alone,
    with the time until the middle slice is displayable (on_slice);
  * the first load in a fresh process, imports included: SimpleITK's and medseg's (issue #40).
Run: .venv/bin/python benchmarks/bench_io.py [--slices 300] [--repeats 5]
Two series: GE int16 and Philips 12-bit unsigned (another stored encoding); median and spread of the runs.

--encoded: the decoders instead. The same GE slice in each compressed transfer syntax of
cornerstone_testimages, copied into a series (new UIDs and positions, the encoded pixel data as
it is), read by medseg.io.load and by SimpleITK (GDCM) side by side. Set PYTHONPATH to a folder
holding another decoder (e.g. the former pylibjpeg-libjpeg) to time the same series with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pydicom
import SimpleITK as sitk
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from medseg.io import load, load_series, scan  # noqa: E402

SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
SOURCE_SLICE = SHARED / "ct" / "cornerstone_testimages" / "CTImage.dcm"  # GE chest CT, 512x512, int16
# Philips head phantom, 512x512, 12 bits stored, unsigned, intercept -1024 (another encoding of the HU).
SOURCES = {
    "GE int16": SOURCE_SLICE,
    "Philips 12-bit unsigned": SHARED / "ct" / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series" / "S2010_I10",
}


def build_series(folder: Path, n_slices: int, source: Path = SOURCE_SLICE, keep_encoding: bool = False) -> None:
    """Copies of ``source`` at new positions with new UIDs, written in random order. Re-encoded as
    Explicit VR LE with each slice's pixels rolled (not all identical), or, with ``keep_encoding``,
    with the pixel data left encoded as it is (to time a decoder)."""
    template = pydicom.dcmread(source)
    if not keep_encoding:
        template.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        pixels = template.pixel_array
    study, series, frame = generate_uid(), generate_uid(), generate_uid()
    x0, y0, z0 = (float(v) for v in template.ImagePositionPatient)
    rng = np.random.default_rng(0)
    for index in rng.permutation(n_slices):  # written in random order, named by random UIDs
        ds = template.copy()
        uid = generate_uid()
        ds.SOPInstanceUID = uid
        ds.file_meta.MediaStorageSOPInstanceUID = uid
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = study, series, frame
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.ImagePositionPatient = [x0, y0, z0 - 1.25 * float(index)]
        ds.SliceLocation = z0 - 1.25 * float(index)
        ds.InstanceNumber = int(index) + 1
        if not keep_encoding:
            ds.PixelData = np.roll(pixels, int(index), axis=1).astype(pixels.dtype).tobytes()
        ds.save_as(folder / f"{uid}.dcm", enforce_file_format=True)


def time_simpleitk(folder: Path) -> sitk.Image:
    files = sitk.ImageSeriesReader.GetGDCMSeriesFileNames(str(folder))
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(files)
    image = reader.Execute()
    sitk.GetArrayViewFromImage(image)  # numpy access without a copy (the image must stay alive)
    return image


def time_pydicom_loop(folder: Path) -> np.ndarray:
    slices = []
    for path in sorted(folder.iterdir()):
        ds = pydicom.dcmread(path)
        hu = ds.pixel_array.astype(np.int16) * int(ds.RescaleSlope) + int(ds.RescaleIntercept)
        normal = np.cross(np.asarray(ds.ImageOrientationPatient[:3], float), np.asarray(ds.ImageOrientationPatient[3:], float))
        slices.append((float(np.dot(normal, np.asarray(ds.ImagePositionPatient, float))), hu))
    slices.sort(key=lambda item: item[0])
    return np.stack([hu for _, hu in slices])


class FirstSlice:
    def __init__(self, middle: int) -> None:
        self.middle, self.start, self.at = middle, 0.0, None

    def __call__(self, z: int, image: np.ndarray) -> None:
        if z == self.middle and self.at is None:
            self.at = time.perf_counter() - self.start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--encoded", action="store_true", help="time the compressed transfer syntaxes' decoders")
    args = parser.parse_args()
    if args.encoded:
        for name in ENCODED:
            bench_encoded(name, args.slices, args.repeats)
        return 0
    for label, source in SOURCES.items():
        bench_series(label, source, args.slices, args.repeats)
    return 0


# CTImage.dcm variants (cornerstone_testimages) whose pixel data a decoder plugin or GDCM decodes.
ENCODED = ("JPEGProcess14SV1TransferSyntax_1.2.840.10008.1.2.4.70", "JPEGProcess14TransferSyntax_1.2.840.10008.1.2.4.57",
           "JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50", "JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51",
           "JPEGLSLosslessTransferSyntax_1.2.840.10008.1.2.4.80", "JPEG2000LosslessOnlyTransferSyntax_1.2.840.10008.1.2.4.90",
           "RLELosslessTransferSyntax_1.2.840.10008.1.2.5")


def bench_encoded(name: str, n_slices: int, repeats: int) -> None:
    source = SOURCE_SLICE.parent / f"CTImage.dcm_{name}.dcm"
    with tempfile.TemporaryDirectory(prefix="medseg-bench-io-") as tmp:
        folder = Path(tmp)
        build_series(folder, n_slices, source, keep_encoding=True)
        size_mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
        reference = sitk.GetArrayFromImage(time_simpleitk(folder))
        timings: dict[str, list[float]] = {"simpleitk": [], "medseg_load": []}
        for _ in range(repeats):
            start = time.perf_counter()
            time_simpleitk(folder)
            timings["simpleitk"].append(time.perf_counter() - start)
            start = time.perf_counter()
            volume = load(folder)
            timings["medseg_load"].append(time.perf_counter() - start)
        error = float(np.abs(volume.array.astype(np.float64) - reference).max())
        ratio = [m / s for m, s in zip(timings["medseg_load"], timings["simpleitk"])]
        print(f"{name.rsplit('TransferSyntax', 1)[0]:26s} {n_slices} slices {size_mb:5.1f} MB  medseg_load {_spread(timings['medseg_load'])}"
              f"  simpleitk {_spread(timings['simpleitk'])}  ratio {_spread(ratio)}  max|HU - GDCM| {error:g}")


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):6.3f}  [{min(values):.3f} - {max(values):.3f}]"


_FRESH = {
    "simpleitk": "import SimpleITK as sitk\n"
                 "reader = sitk.ImageSeriesReader()\n"
                 "reader.SetFileNames(sitk.ImageSeriesReader.GetGDCMSeriesFileNames(FOLDER))\n"
                 "sitk.GetArrayViewFromImage(reader.Execute())\n",
    "medseg": "from medseg.io import load\nload(FOLDER)\n",
}


def fresh_first_load(kind: str, folder: Path) -> tuple[float, float]:
    """(imports + load, the whole process) in seconds: a user's first open in a new process."""
    code = ("import time\nstarted = time.perf_counter()\nFOLDER = " + repr(str(folder)) + "\n" + _FRESH[kind]
            + "print(time.perf_counter() - started)\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return float(done.stdout.strip().splitlines()[-1]), time.perf_counter() - start


def bench_series(label: str, source: Path, n_slices: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="medseg-bench-io-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        build_series(folder, n_slices, source)
        size_mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
        print(f"\n== {label}: {n_slices} x 512x512 Explicit VR LE from {source.name}, {size_mb:.0f} MB "
              f"(built in {time.perf_counter() - t0:.1f} s); CPUs: {os.cpu_count()}; {repeats} interleaved runs, "
              "files in page cache; seconds")
        reference = sitk.GetArrayFromImage(time_simpleitk(folder))  # also warms the page cache
        timings: dict[str, list[float]] = {"simpleitk": [], "pydicom_loop": [], "medseg_load": [], "medseg_scan": [],
                                           "medseg_load_series": []}
        first_load: list[float] = []
        first_series: list[float] = []
        fresh: dict[str, list[tuple[float, float]]] = {"simpleitk": [], "medseg": []}
        middle = (n_slices - 1) // 2
        for _ in range(repeats):
            for kind in fresh:
                fresh[kind].append(fresh_first_load(kind, folder))
            start = time.perf_counter()
            time_simpleitk(folder)
            timings["simpleitk"].append(time.perf_counter() - start)

            start = time.perf_counter()
            loop = time_pydicom_loop(folder)
            timings["pydicom_loop"].append(time.perf_counter() - start)

            probe = FirstSlice(middle)
            probe.start = start = time.perf_counter()
            volume = load(folder, on_slice=probe)
            timings["medseg_load"].append(time.perf_counter() - start)
            first_load.append(probe.at / timings["medseg_load"][-1])

            start = time.perf_counter()
            series = scan(folder).series[0]
            timings["medseg_scan"].append(time.perf_counter() - start)
            probe = FirstSlice(middle)
            probe.start = start = time.perf_counter()
            load_series(series, on_slice=probe)
            timings["medseg_load_series"].append(time.perf_counter() - start)
            first_series.append(probe.at / timings["medseg_load_series"][-1])
        assert np.array_equal(volume.array, reference) and np.array_equal(loop, reference), "results differ"

        for name, values in timings.items():
            print(f"  {name:20s} {_spread(values)}")
        # Ratios per run (each run's peers ran next to it), then their spread.
        vs_sitk = [m / s for m, s in zip(timings["medseg_load"], timings["simpleitk"])]
        vs_loop = [m / p for m, p in zip(timings["medseg_load"], timings["pydicom_loop"])]
        loop_sitk = [p / s for p, s in zip(timings["pydicom_loop"], timings["simpleitk"])]
        print(f"  ratio medseg_load / simpleitk     {_spread(vs_sitk)}  (goal <= 0.4, warm)")
        for index, what in ((0, "imports + load"), (1, "whole process")):
            mine, theirs = [run[index] for run in fresh["medseg"]], [run[index] for run in fresh["simpleitk"]]
            print(f"  first load in a fresh process ({what}): medseg {_spread(mine)}  simpleitk {_spread(theirs)}  "
                  f"ratio {_spread([m / t for m, t in zip(mine, theirs)])}  (goal <= 1.0)")
        print(f"  ratio medseg_load / pydicom_loop  {_spread(vs_loop)}  (goal <= 1.0)")
        print(f"  ratio pydicom_loop / simpleitk    {_spread(loop_sitk)}")
        print(f"  first displayable (middle) slice, load():        {statistics.median(first_load) * 100:5.1f}% of its "
              "total (includes the header scan, which must finish before the middle is known)")
        print(f"  first displayable (middle) slice, load_series(): {statistics.median(first_series) * 100:5.1f}% of its "
              "total (goal <= 10%)")


if __name__ == "__main__":
    sys.exit(main())
