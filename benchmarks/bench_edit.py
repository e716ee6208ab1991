"""Editing on a 512x512x300 label map over real CT: medseg.edit vs napari's Labels layer (or NumPy/scipy).

The CT is pyradiomics' real chest CT (512x512x48, 5 mm slices) resampled (linear) to
0.8 mm slices: 512x512x300. Its label map: body (HU > -500, largest island) and lungs
(HU < -400 inside the body), so the fill and islands run on large real labels.

Timed, each as p50/p95 over repeats, medseg going through the document (tool + write +
undo atom + counts + event), as the GUI does:
  * one brush dab: 10 mm sphere, HU-masked to -100..200;
  * a 50-dab stroke (50 mouse positions, dabs interpolated between them);
  * one undo (of a stroke);
  * a 3D flood fill of the lung label's region from a seed (what napari's fill does), and one
    within an HU range (-1024..-400, which here reaches the air around the body: ~40 M voxels);
  * islands: keep the largest island of the body label.
Peer: napari's ``Labels`` layer (``paint`` with a 3D brush, ``fill``, ``undo``) when napari
imports here, else a plain NumPy/scipy implementation with a full-copy undo (what 3D
Slicer does per step). The peer's dab has no HU mask (napari has none); say so in the table.
Then memory: the undo history after 1000 strokes vs one full copy of the label map per stroke.

Run: .venv/bin/python benchmarks/bench_edit.py [--repeats 30] [--strokes 1000]
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
from medseg.core.volume import Volume  # noqa: E402
from medseg.edit import tools  # noqa: E402
from medseg.edit.document import SegmentationDocument  # noqa: E402
from medseg.edit.tools import PaintRules  # noqa: E402
from medseg.io import read_image  # noqa: E402

SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
BODY, LUNGS = 1, 2


def build_case(slices: int = 300) -> tuple[Volume, np.ndarray]:
    from scipy import ndimage

    ct = read_image(SHARED / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd").to_sitk()
    size = list(ct.GetSize())
    spacing = list(ct.GetSpacing())
    extent = size[2] * spacing[2]
    spacing[2] = extent / slices
    size[2] = slices
    resampled = sitk.Resample(ct, size, sitk.Transform(), sitk.sitkLinear, ct.GetOrigin(), spacing,
                              ct.GetDirection(), -1024.0, sitk.sitkInt16)
    image = Volume.from_sitk(resampled)
    hu = image.array
    body = hu > -500
    ids, _ = ndimage.label(body)
    body = ids == np.argmax(np.bincount(ids.ravel())[1:]) + 1
    body = ndimage.binary_fill_holes(body)
    labels = np.where(body, BODY, 0).astype(np.uint8)
    labels[body & (hu < -400)] = LUNGS
    return image, labels


def stats(samples: list[float]) -> tuple[float, float]:
    ms = sorted(s * 1000 for s in samples)
    return statistics.median(ms), ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]


def timed(function, repeats: int, setup=None) -> list[float]:
    out = []
    for i in range(repeats):
        if setup is not None:
            setup(i)
        start = time.perf_counter()
        function(i)
        out.append(time.perf_counter() - start)
    return out


def stroke_path(rng, centre, n=50, step_vox=3.0):
    angle = rng.uniform(0, 2 * np.pi)
    direction = np.array([0.0, np.sin(angle), np.cos(angle)])
    return [centre + direction * step_vox * k for k in range(n)]


def medseg_bench(image: Volume, labels: np.ndarray, repeats: int, seeds) -> dict[str, list[float]]:
    doc = SegmentationDocument()
    doc.set_volume(image)
    doc.set_label_map(image.with_array(labels.copy()))
    lm = doc.label_map
    rules = PaintRules(hu_range=(-100.0, 200.0))
    rng = np.random.default_rng(1)
    results = {}
    results["dab"] = timed(lambda i: doc.apply(tools.dab(lm, seeds[i % len(seeds)], 10.0, 3, rules, image), "dab"), repeats)
    results["stroke"] = timed(lambda i: doc.apply(
        tools.stroke(lm, stroke_path(rng, seeds[i % len(seeds)]), 10.0, 3, rules, image), "stroke"), repeats)
    results["undo"] = timed(lambda i: doc.undo(), repeats)
    lung_seed = tuple(int(v) for v in np.argwhere(labels == LUNGS)[len(np.argwhere(labels == LUNGS)) // 2])
    fill_runs = max(3, repeats // 6)
    results["fill"] = timed(lambda i: doc.apply(tools.flood_fill(lm, lung_seed, 4 + i % 2), "fill"), fill_runs)
    results["fill-hu"] = timed(lambda i: doc.apply(tools.flood_fill(lm, lung_seed, 6 + i % 2, image=image,
                                                                    hu_range=(-1024, -400)), "fill HU"), fill_runs)
    results["islands"] = timed(lambda i: (doc.apply(tools.keep_largest(lm, BODY), "islands"), doc.undo()), fill_runs)
    return results


def napari_bench(image: Volume, labels: np.ndarray, repeats: int, seeds) -> dict[str, list[float]] | None:
    try:
        from napari.layers import Labels
    except Exception as error:  # noqa: BLE001 - napari absent or unable to import headless
        print(f"napari not usable here ({type(error).__name__}: {error}); peer = NumPy/scipy", file=sys.stderr)
        return None
    layer = Labels(labels.copy(), scale=image.spacing_zyx)
    layer.n_edit_dimensions = 3
    layer.brush_size = 2 * 10.0 / min(image.spacing_zyx)  # napari's brush is a diameter in data pixels
    layer.selected_label = 3
    layer.mode = "paint"  # _draw paints only in paint mode, as during a mouse drag
    rng = np.random.default_rng(1)
    results = {}
    results["dab"] = timed(lambda i: layer.paint(tuple(seeds[i % len(seeds)]), 3), repeats)

    def stroke(i):
        points = stroke_path(rng, seeds[i % len(seeds)])
        with layer.block_history():  # one undo atom per stroke, as napari's mouse drag does
            layer._draw(3, points[0], points[0])  # napari's own stroke: interpolates between mouse events
            for a, b in zip(points[:-1], points[1:]):
                layer._draw(3, a, b)
    before = int(np.count_nonzero(layer.data == 3))
    results["stroke"] = timed(stroke, repeats)
    assert np.count_nonzero(layer.data == 3) > before, "napari's stroke painted nothing"
    results["undo"] = timed(lambda i: layer.undo(), repeats)
    lung_seed = tuple(int(v) for v in np.argwhere(labels == LUNGS)[len(np.argwhere(labels == LUNGS)) // 2])
    fill_runs = max(3, repeats // 6)
    results["fill"] = timed(lambda i: layer.fill(lung_seed, 4 + i % 2), fill_runs)  # the seed's label region
    results["fill-hu"] = [float("nan")]  # napari fills label regions only
    results["islands"] = [float("nan")]  # napari has no island tool
    return results


def numpy_bench(image: Volume, labels: np.ndarray, repeats: int, seeds) -> dict[str, list[float]]:
    """The straightforward way: whole-volume operations and a full copy per undo step."""
    from scipy import ndimage

    array = labels.copy()
    hu = image.array
    spacing = np.asarray(image.spacing_zyx)
    undo: list[np.ndarray] = []

    def ball(centre):
        reach = np.ceil(10.0 / spacing).astype(int)
        c = np.rint(centre).astype(int)
        lo, hi = np.maximum(c - reach, 0), np.minimum(c + reach + 1, array.shape)
        zz, yy, xx = np.ogrid[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
        inside = ((zz - centre[0]) * spacing[0]) ** 2 + ((yy - centre[1]) * spacing[1]) ** 2 + ((xx - centre[2]) * spacing[2]) ** 2 <= 100
        return tuple(slice(a, b) for a, b in zip(lo, hi)), inside

    def dab(centre):
        sl, inside = ball(centre)
        block = hu[sl]
        array[sl][inside & (block >= -100) & (block <= 200)] = 3

    def step(function):
        undo.append(array.copy())
        del undo[:-3]  # keep memory bounded in the benchmark itself
        function()

    rng = np.random.default_rng(1)
    results = {}
    results["dab"] = timed(lambda i: step(lambda: dab(seeds[i % len(seeds)])), repeats)
    results["stroke"] = timed(lambda i: step(lambda: [dab(p) for p in stroke_path(rng, seeds[i % len(seeds)])]), repeats)

    def undo_once(i):
        if undo:
            array[...] = undo.pop()
    results["undo"] = timed(undo_once, repeats)
    lung_seed = tuple(int(v) for v in np.argwhere(labels == LUNGS)[len(np.argwhere(labels == LUNGS)) // 2])
    fill_runs = max(3, repeats // 6)

    def fill(i, hu_range=None):
        region = array == array[lung_seed] if hu_range is None else (hu >= hu_range[0]) & (hu <= hu_range[1])
        ids, _ = ndimage.label(region)
        step(lambda: array.__setitem__(ids == ids[lung_seed], 4 + i % 2))
    results["fill"] = timed(fill, fill_runs)
    results["fill-hu"] = timed(lambda i: fill(i, (-1024, -400)), fill_runs)

    def islands(i):
        ids, _ = ndimage.label(array == BODY, structure=np.ones((3, 3, 3)))
        sizes = np.bincount(ids.ravel())
        sizes[0] = 0
        step(lambda: array.__setitem__((ids > 0) & (ids != np.argmax(sizes)), 0))
    results["islands"] = timed(islands, fill_runs)
    return results


def memory_of_strokes(image: Volume, labels: np.ndarray, strokes: int, seeds) -> tuple[int, int]:
    doc = SegmentationDocument()
    doc.set_volume(image)
    doc.set_label_map(image.with_array(labels.copy()))
    lm = doc.label_map
    rng = np.random.default_rng(2)
    for i in range(strokes):
        path = stroke_path(rng, seeds[i % len(seeds)], n=10, step_vox=4.0)
        doc.apply(tools.stroke(lm, path, 10.0, 3 + i % 3, PaintRules(), image), "stroke")
    return doc.history.nbytes, lm.array.nbytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--strokes", type=int, default=1000)
    parser.add_argument("--slices", type=int, default=300)
    args = parser.parse_args()

    start = time.perf_counter()
    image, labels = build_case(args.slices)
    print(f"case: real chest CT resampled to {image.size_xyz} voxels, spacing "
          f"{tuple(round(s, 3) for s in image.spacing_mm)} mm; body {np.count_nonzero(labels == BODY):,} voxels, "
          f"lungs {np.count_nonzero(labels == LUNGS):,} voxels (built in {time.perf_counter() - start:.1f} s)")
    rng = np.random.default_rng(0)
    body = np.argwhere(labels == BODY)
    seeds = [body[i].astype(float) + 0.3 for i in rng.integers(0, len(body), 64)]

    ours = medseg_bench(image, labels, args.repeats, seeds)
    peer = napari_bench(image, labels, args.repeats, seeds)
    peer_name = "napari Labels" if peer is not None else "NumPy/scipy"
    if peer is None:
        peer = numpy_bench(image, labels, args.repeats, seeds)
    print(f"\n{'operation':<34}{'medseg p50':>12}{'p95':>10}{peer_name + ' p50':>22}{'p95':>10}{'ratio p50':>11}")
    names = {"dab": "dab 10 mm sphere (HU-masked)", "stroke": "stroke of 50 dabs", "undo": "undo (one stroke)",
             "fill": "3D fill (lung label region)", "fill-hu": "3D fill (HU -1024..-400)",
             "islands": "islands: keep largest (body)"}
    for key, name in names.items():
        m50, m95 = stats(ours[key])
        p50, p95 = stats(peer[key]) if not np.isnan(peer[key][0]) else (float("nan"), float("nan"))
        print(f"{name:<34}{m50:>10.1f}ms{m95:>8.1f}ms{p50:>20.1f}ms{p95:>8.1f}ms{p50 / m50:>10.1f}x")
    print("(the peer's dab is not HU-masked; medseg's times include the undo atom, the voxel counts and the change event)")

    history, full = memory_of_strokes(image, labels, args.strokes, seeds)
    per_stroke = history / args.strokes
    print(f"\nmemory: {args.strokes} strokes (10 dabs, 10 mm) hold {history / 1e6:.1f} MB of undo history = "
          f"{per_stroke / 1e3:.1f} kB per stroke = {100 * per_stroke / full:.3f} % of one full label-map copy "
          f"({full / 1e6:.1f} MB); full copies would need {args.strokes * full / 1e9:.1f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
