"""DICOM SEG write and read: medseg (highdicom) vs dcmqi, side by side in one run; STL export time.

Builds a 512x512x300 CT series from a real slice of shared/data (as bench_io does) and a
10-label segmentation on it (ten overlapping-free ellipsoids and slabs of different
sizes, 40-300 slices each). Then, each step in its own process so peak memory is that
step's own:
  * write: medseg.io.dicom_seg_write.write_dicom_seg   vs  dcmqi itkimage2segimage (label NRRD + JSON);
  * read:  medseg.io.dicom_seg_read.read_dicom_seg    vs  dcmqi segimage2itkimage (to NRRD);
  * each side reads the other's SEG back (a correctness cross-check, not timed);
  * STL export of the 10 labels (medseg.io.mesh).
Time is the wall time of the whole process for dcmqi and of the operation for medseg
(plus, for fairness, medseg's whole process including Python start-up and imports, minus
loading the CT that the app already holds). Peak memory is the process's peak RSS,
sampled every 5 ms. Prints the median and min-max of --repeats runs, and the ratios.
Run: .venv/bin/python benchmarks/bench_seg.py [--slices 300] [--repeats 3] [--label-count 117]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

N_LABELS = 10  # --labels: 117 is TotalSegmentator's label count (issue #27)
ORGANS = ["liver", "spleen", "kidney_left", "kidney_right", "aorta", "stomach", "pancreas", "heart", "lungs", "bones"]
NAMES = list(ORGANS)


def set_label_count(count: int) -> None:
    global N_LABELS, NAMES
    N_LABELS = count
    NAMES = ORGANS[:count] + [f"structure_{i}" for i in range(len(ORGANS) + 1, count + 1)]


def build_labels(shape_zyx: tuple[int, int, int]) -> np.ndarray:
    nz, ny, nx = shape_zyx
    z, y, x = np.ogrid[:nz, :ny, :nx]
    labels = np.zeros(shape_zyx, dtype=np.uint8)
    rng = np.random.default_rng(1)
    size = 1.0 if N_LABELS <= 10 else 0.35  # many labels: smaller structures, as TotalSegmentator's
    for value in range(1, N_LABELS + 1):
        while True:  # every label present (a label hidden under the others would be renumbered away)
            cz = rng.uniform(0.2, 0.8) * nz
            cy, cx = rng.uniform(0.25, 0.75) * ny, rng.uniform(0.25, 0.75) * nx
            rz = rng.uniform(20, nz / 2) * size
            ry, rx = rng.uniform(20, 90) * size, rng.uniform(20, 90) * size
            claimed = (((z - cz) / rz) ** 2 + ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1.0) & (labels == 0)
            if claimed.sum() >= 100:
                break
        labels[claimed] = value
    return labels


class PeakRss:
    """Peak resident memory of a process (and its children), sampled in a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss = self.process.memory_info().rss + sum(c.memory_info().rss for c in self.process.children(True))
                self.peak = max(self.peak, rss)
            except psutil.Error:
                pass
            self._stop.wait(0.005)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def run_timed(command: list[str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = PeakRss(process.pid)
    output, _ = process.communicate()
    seconds = time.perf_counter() - start
    peak = sampler.stop()
    if process.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({process.returncode}): {output[-1500:]}")
    return seconds, peak, output


def child(args: argparse.Namespace) -> None:
    """One medseg operation in this process: prints JSON with the operation's own time and peak RSS."""
    from medseg.io import load, read_image
    from medseg.io.dicom_seg_read import read_dicom_seg
    from medseg.io.dicom_seg_write import write_dicom_seg
    from medseg.io.mesh_files import write_label_meshes

    started = time.perf_counter()
    image = load(args.series)
    load_seconds = time.perf_counter() - started
    sampler = PeakRss(os.getpid())
    base = psutil.Process().memory_info().rss
    start = time.perf_counter()
    if args.child == "write":
        labels = read_image(args.labels)
        label_map = image.with_array(labels.array.astype(np.uint8), labels=dict(enumerate(NAMES, start=1)))
        write_dicom_seg(label_map, image, args.out)
    elif args.child == "read":
        result = read_dicom_seg(args.out, image)
        np.save(args.labels, result.label_map.array)
    elif args.child == "stl":
        labels = read_image(args.labels)
        label_map = image.with_array(labels.array.astype(np.uint8), labels=dict(enumerate(NAMES, start=1)))
        write_label_meshes(label_map, args.out, fmt="stl")
    seconds = time.perf_counter() - start
    peak = sampler.stop()
    print(json.dumps({"seconds": seconds, "peak_rss": peak, "added_rss": peak - base, "load_seconds": load_seconds}))


def dcmqi_meta() -> dict:
    from medseg.core.label_colors import color_for
    from medseg.core.labels import Label

    segments = []
    for value, name in enumerate(NAMES, start=1):
        category, type_ = Label(value, name).concept()  # as medseg writes a label without a code
        segments.append({
            "labelID": value, "SegmentLabel": name, "SegmentDescription": name, "SegmentAlgorithmType": "AUTOMATIC",
            "SegmentAlgorithmName": "bench",
            "SegmentedPropertyCategoryCodeSequence": {"CodeValue": category.value, "CodingSchemeDesignator":
                                                      category.scheme, "CodeMeaning": category.meaning},
            "SegmentedPropertyTypeCodeSequence": {"CodeValue": type_.value, "CodingSchemeDesignator": type_.scheme,
                                                  "CodeMeaning": type_.meaning},
            "recommendedDisplayRGBValue": list(color_for(value, name))})
    return {"ContentCreatorName": "bench", "ClinicalTrialSeriesID": "1", "ClinicalTrialTimePointID": "1",
            "SeriesDescription": "dcmqi bench", "SeriesNumber": "300", "InstanceNumber": "1",
            "BodyPartExamined": "CHEST", "segmentAttributes": [segments], "ContentLabel": "SEG",
            "ContentDescription": "bench"}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label-count", type=int, default=N_LABELS,
                        help="labels in the segmentation (default 10; 117 as TotalSegmentator)")
    parser.add_argument("--keep", help="work folder to keep (default: a temporary one)")
    parser.add_argument("--child", choices=("write", "read", "stl"), help=argparse.SUPPRESS)
    parser.add_argument("--series", help=argparse.SUPPRESS)
    parser.add_argument("--labels", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    set_label_count(args.label_count)
    if args.child:
        child(args)
        return

    import SimpleITK as sitk
    from bench_io import build_series

    from medseg.io import load

    bin_dir = Path(sys.executable).parent
    itk2seg, seg2itk = shutil.which("itkimage2segimage", path=str(bin_dir)), shutil.which("segimage2itkimage", path=str(bin_dir))
    if not itk2seg or not seg2itk:
        sys.exit("dcmqi is not installed: pip install -e '.[dev]' (it provides itkimage2segimage / segimage2itkimage)")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_seg_"))
    work.mkdir(parents=True, exist_ok=True)
    series = work / "series"
    if not series.is_dir():
        series.mkdir()
        build_series(series, args.slices)
    image = load(series)
    labels = build_labels(image.shape_zyx)
    label_image = image.with_array(labels).to_sitk()
    sitk.WriteImage(label_image, str(work / "labels.nrrd"), useCompression=True)
    (work / "meta.json").write_text(json.dumps(dcmqi_meta()))
    counts = np.bincount(labels.ravel(), minlength=N_LABELS + 1)[1:]
    slices_per_label = [int(np.any(labels == v, axis=(1, 2)).sum()) for v in range(1, N_LABELS + 1)]
    print(f"series {image.size_xyz} spacing {tuple(round(s, 3) for s in image.spacing_mm)}; {N_LABELS} labels, "
          f"{int(counts.sum())} labelled voxels, {sum(slices_per_label)} non-empty label slices (= BINARY frames)")

    python = [sys.executable, str(Path(__file__).resolve()), "--label-count", str(N_LABELS)]
    results: dict[str, list[tuple[float, int]]] = {k: [] for k in
                                                   ("medseg write", "medseg write (process)", "dcmqi write",
                                                    "medseg read", "medseg read (process)", "dcmqi read", "stl")}
    for repeat in range(args.repeats):
        ours, theirs = work / "medseg_seg.dcm", work / "dcmqi_seg.dcm"
        for path in (ours, theirs):
            path.unlink(missing_ok=True)
        seconds, peak, output = run_timed([*python, "--child", "write", "--series", str(series), "--labels",
                                           str(work / "labels.nrrd"), "--out", str(ours)])
        report = json.loads(output.strip().splitlines()[-1])
        results["medseg write"].append((report["seconds"], report["peak_rss"]))
        results["medseg write (process)"].append((seconds - report["load_seconds"], peak))
        seconds, peak, _ = run_timed([itk2seg, "--inputImageList", str(work / "labels.nrrd"), "--inputDICOMDirectory",
                                      str(series), "--outputDICOM", str(theirs), "--inputMetadata",
                                      str(work / "meta.json")])
        results["dcmqi write"].append((seconds, peak))

        out_npy = work / "medseg_read.npy"
        seconds, peak, output = run_timed([*python, "--child", "read", "--series", str(series), "--labels",
                                           str(out_npy), "--out", str(ours)])
        report = json.loads(output.strip().splitlines()[-1])
        results["medseg read"].append((report["seconds"], report["peak_rss"]))
        results["medseg read (process)"].append((seconds - report["load_seconds"], peak))
        dcmqi_out = work / "dcmqi_read"
        shutil.rmtree(dcmqi_out, ignore_errors=True)
        dcmqi_out.mkdir()
        seconds, peak, _ = run_timed([seg2itk, "--inputDICOM", str(ours), "--outputDirectory", str(dcmqi_out),
                                      "--outputType", "nrrd", "--prefix", "seg"])
        results["dcmqi read"].append((seconds, peak))

        stl_dir = work / "stl"
        shutil.rmtree(stl_dir, ignore_errors=True)
        stl_dir.mkdir()
        seconds, peak, output = run_timed([*python, "--child", "stl", "--series", str(series), "--labels",
                                           str(work / "labels.nrrd"), "--out", str(stl_dir)])
        report = json.loads(output.strip().splitlines()[-1])
        results["stl"].append((report["seconds"], report["peak_rss"]))
        print(f"run {repeat + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in results.items()))

    # Cross-checks: medseg's read of its own SEG, dcmqi's read of medseg's SEG, medseg's read of dcmqi's SEG.
    from medseg.io.dicom_seg_read import read_dicom_seg

    own = np.load(work / "medseg_read.npy")
    dcmqi_files = sorted((work / "dcmqi_read").glob("seg*.nrrd"))
    from medseg.io import read_image, resample_to

    dcmqi_union = np.zeros_like(labels)
    for path in dcmqi_files:  # one file per segment, cropped to the segment: placed by its geometry
        number = int(path.stem.rsplit("-", 1)[-1])
        mask = resample_to(read_image(path), image).array > 0
        dcmqi_union[mask] = number
    theirs_read = read_dicom_seg(work / "dcmqi_seg.dcm", image).label_map.array
    print(f"check: medseg reads its own SEG identically: {bool(np.array_equal(own, labels))}; "
          f"dcmqi reads medseg's SEG: {len(dcmqi_files)} segment files, voxels identical: "
          f"{bool(np.array_equal(dcmqi_union, labels))}; medseg reads dcmqi's SEG identically: "
          f"{bool(np.array_equal(theirs_read, labels))}")

    def row(name: str) -> str:
        times = [t for t, _ in results[name]]
        peaks = [m / 2**20 for _, m in results[name]]
        return f"{name:<24} {spread(times)} s   peak RSS {statistics.median(peaks):7.0f} MiB"

    print(f"\n{'':<24} {'median (min-max)':>20}")
    for name in results:
        print(row(name))
    for op in ("write", "read"):
        ours = statistics.median(t for t, _ in results[f"medseg {op}"])
        ours_process = statistics.median(t for t, _ in results[f"medseg {op} (process)"])
        theirs = statistics.median(t for t, _ in results[f"dcmqi {op}"])
        ratios = [a[0] / b[0] for a, b in zip(results[f"medseg {op}"], results[f"dcmqi {op}"])]
        print(f"{op}: medseg / dcmqi time = {ours / theirs:.2f}x (per run {min(ratios):.2f}-{max(ratios):.2f}x); "
              f"whole medseg process (minus loading the CT) / dcmqi = {ours_process / theirs:.2f}x")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
