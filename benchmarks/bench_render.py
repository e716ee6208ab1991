"""Slice rendering: int16 slice (+ label map) → QImage, per view, and scroll frame rate.

Real CT (pyradiomics lung1, 512×512×48, with its label map) is stacked along z to a
512×512×600 study, and upsampled in-plane to 1024² for the large case. medseg's LUT
path is timed against the peers' ways of doing the same: pyqtgraph's makeARGB +
makeQImage (what ImageView does) and a straightforward float numpy window/level.
The 3D view's rows (re-mesh after an edit, frames/s while rotating) come from bench_view3d.py.
Run: .venv/bin/python benchmarks/bench_render.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
from PySide6.QtWidgets import QApplication

from medseg.gui.viewer.slice_render import SliceRenderer, qimage_of
from medseg.gui.viewer.view_axes import VIEW_NAMES, view_axes
from medseg.io import read_image

DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "ct"
CENTER, WIDTH = 40.0, 400.0


def percentiles(times: list[float]) -> tuple[float, float]:
    p50, p95 = np.percentile(np.asarray(times) * 1000.0, [50, 95])
    return float(p50), float(p95)


# The machine these run on is shared: wall time includes waiting for a CPU. Thread CPU time
# (time.thread_time) counts this thread's work only, memory stalls included; both are shown.
CPU_P95: dict[tuple[str, str], float] = {}


def study(in_plane: int, slices: int) -> tuple[np.ndarray, np.ndarray]:
    image = read_image(DATA / "pyradiomics_lung1" / "lung1_image.nrrd").array.astype(np.int16)
    labels = read_image(DATA / "pyradiomics_lung1" / "lung1_label.nrrd").array.astype(np.uint8)
    # The nodule is tiny; add the body (HU > -400) as label 2 so the overlay covers a real area.
    labels = np.where(labels > 0, labels, (image > -400).astype(np.uint8) * 2).astype(np.uint8)
    reps = -(-slices // image.shape[0])
    image, labels = np.tile(image, (reps, 1, 1))[:slices], np.tile(labels, (reps, 1, 1))[:slices]
    if in_plane != image.shape[1]:
        factor = in_plane // image.shape[1]
        image = image.repeat(factor, axis=1).repeat(factor, axis=2)
        labels = labels.repeat(factor, axis=1).repeat(factor, axis=2)
    return np.ascontiguousarray(image), np.ascontiguousarray(labels)


def medseg_render(renderer: SliceRenderer, values: np.ndarray, labels: np.ndarray | None):
    words = renderer.render(values, labels)
    return qimage_of(words), words


def pyqtgraph_render(values: np.ndarray, labels: np.ndarray | None, label_lut: np.ndarray):
    import pyqtgraph as pg

    argb, _alpha = pg.functions.makeARGB(values, levels=(CENTER - WIDTH / 2, CENTER + WIDTH / 2))
    if labels is not None:  # a second ImageItem with a colour LUT, composited by Qt in pyqtgraph
        over, _ = pg.functions.makeARGB(labels, lut=label_lut, levels=(0, 255))
        alpha = over[..., 3:4].astype(np.float32) / 255.0
        argb[..., :3] = (argb[..., :3] * (1 - alpha) + over[..., :3] * alpha).astype(np.uint8)
    return pg.functions.makeQImage(argb, alpha=False, transpose=False), argb


def float_numpy_render(values: np.ndarray, labels: np.ndarray | None, colors: np.ndarray):
    grey = np.clip((values.astype(np.float32) - (CENTER - WIDTH / 2)) / WIDTH * 255.0, 0, 255)
    rgb = np.repeat(grey[..., None], 3, axis=2)
    if labels is not None:
        mask = labels > 0
        rgb[mask] = rgb[mask] * 0.5 + colors[labels[mask]] * 0.5
    rgba = np.empty(values.shape + (4,), np.uint8)
    rgba[..., :3] = rgb[..., ::-1]
    rgba[..., 3] = 255
    return qimage_of(rgba.view(np.uint32)[..., 0]), rgba


def scroll_times(image: np.ndarray, labels: np.ndarray | None, method, planes=None,
                 tag: str = "") -> dict[str, tuple[float, float]]:
    """Render every slice of every view (a scroll through the whole volume).

    ``planes(array, axes, position)`` picks the slice (the app's SliceRenderer.plane, which
    reads the sagittal plane from its x-major copy); by default the array is sliced directly.
    Slicing is timed with the render, as the app does both per frame.
    """
    results = {}
    for name in VIEW_NAMES:
        axes = view_axes(name, np.eye(3))
        count = image.shape[2 - axes.normal_axis]
        step = max(1, count // 200)  # at most 200 slices per view keeps the run short
        times, cpu = [], []
        for position in range(0, count, step):
            start, start_cpu = time.perf_counter(), time.thread_time()
            if planes is None:
                values = axes.slice_of(image, position)
                label_plane = axes.slice_of(labels, position) if labels is not None else None
            else:
                values = planes(image, axes, position)
                label_plane = planes(labels, axes, position) if labels is not None else None
            method(values, label_plane)
            cpu.append(time.thread_time() - start_cpu)
            times.append(time.perf_counter() - start)
        results[name] = percentiles(times)
        CPU_P95[(tag, name)] = percentiles(cpu)[1]
    return results


def frame_rate(image: np.ndarray, labels: np.ndarray, size: tuple[int, int] = (1200, 800), layout: str = "2x2",
               axis: int = 2, steps: int | None = None) -> tuple[float, float, float, float]:
    """Scroll one view through the study (along index ``axis``) with every visible view repainting."""
    from medseg.core.labels import Label
    from medseg.core.volume import Volume
    from medseg.edit.document import SegmentationDocument
    from medseg.gui.common.view_state import ViewState
    from medseg.gui.viewer.layout import ViewerPanel

    doc = SegmentationDocument()
    view = ViewState(doc)
    panel = ViewerPanel(doc, view)
    panel.resize(*size)
    panel.set_layout(layout, view={2: "axial", 1: "coronal", 0: "sagittal"}[axis])
    panel.show()
    volume = Volume(image, (0.57, 0.57, 5.0))
    doc.set_volume(volume)
    doc.set_label_map(volume.with_array(labels), {v: Label(v, str(v), (220, 90, 60)) for v in (1, 2)})
    view.set_cursor((0, 0, 0))
    QApplication.processEvents()
    for view in panel.views.values():
        view.repaint()
    panel.renderer.x_major.wait_until_built(300)
    times, cpu = [], []
    for _ in range(min(steps or 10**9, volume.size_xyz[axis] - 1)):
        # Process CPU time here: Qt scales large images in its own worker threads.
        start, start_cpu = time.perf_counter(), time.process_time()
        view.move_cursor(axis, 1)
        for view in panel.views.values():
            if view.isVisible():
                view.repaint()
        cpu.append(time.process_time() - start_cpu)
        times.append(time.perf_counter() - start)
    p50, p95 = percentiles(times)
    panel.close()
    panel.deleteLater()  # torn down now, not by the interpreter's last collection (PySide6 crashed there)
    QApplication.processEvents()
    return 1000.0 / p50, p50, p95, percentiles(cpu)[1]


def main() -> int:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    renderer = SliceRenderer()
    renderer.set_window(CENTER, WIDTH)
    colors = np.zeros((256, 3), np.uint8)
    colors[1], colors[2] = (255, 60, 60), (220, 130, 100)
    visible = np.ones(256, bool)
    renderer.set_labels(colors, visible, 0.5)
    label_lut = np.zeros((256, 4), np.uint8)
    label_lut[:, :3] = colors
    label_lut[1:, 3] = 128
    methods = {
        "medseg LUT": lambda v, l: medseg_render(renderer, v, l),
        "medseg, sliced directly": lambda v, l: medseg_render(renderer, v, l),
        "pyqtgraph makeARGB": lambda v, l: pyqtgraph_render(v, l, label_lut),
        "numpy float": lambda v, l: float_numpy_render(v, l, colors.astype(np.float32)),
    }
    print(f"CPU threads available: {os.cpu_count()}; numpy {np.__version__}")
    for in_plane, slices in ((512, 600), (1024, 96)):
        image, labels = study(in_plane, slices)
        print(f"\n== {in_plane}×{in_plane}×{slices} int16 study (lung1 CT, tiled), slice render → QImage, ms p50 / p95 ==")
        for overlay in (False, True):
            rows = {}
            # The app's path: planes through SliceRenderer.plane, x-major copies built first
            # (in the app they are built in the background right after the study opens).
            app_planes = SliceRenderer()
            for array in (image, labels):
                app_planes.plane(array, view_axes("sagittal", np.eye(3)), 0)
            app_planes.x_major.wait_until_built(300)
            tag = f"{in_plane}/{overlay}"
            for name, method in methods.items():
                planes = app_planes.plane if name == "medseg LUT" else None
                rows[name] = scroll_times(image, labels if overlay else None, method, planes, f"{tag}/{name}")
            print(f"-- {'with' if overlay else 'without'} label overlay")
            base = rows["medseg LUT"]
            for name, per_view in rows.items():
                cells = "  ".join(f"{view} {p50:6.2f} / {p95:6.2f}" for view, (p50, p95) in per_view.items())
                ratio = "  ".join(f"{per_view[v][1] / base[v][1]:4.1f}x" for v in VIEW_NAMES)
                print(f"  {name:23s} {cells}   p95 vs medseg: {ratio}")
            cells = "  ".join(f"{view} {CPU_P95[(f'{tag}/medseg LUT', view)]:6.2f}" for view in VIEW_NAMES)
            print(f"  {'medseg LUT, CPU p95':23s} {cells}   (thread CPU time: this work alone)")
            del app_planes
        del image, labels
    image, labels = study(512, 120)
    fps, p50, p95, cpu95 = frame_rate(image, labels)
    print("\n== scroll frame rate, three views repainting (2x2 layout, 1200×800, 512² slices with overlay, offscreen) ==")
    print(f"  per step p50 {p50:.2f} ms, p95 {p95:.2f} ms (process CPU p95 {cpu95:.2f} ms) → {fps:.0f} frames/s (p50)")
    print("\n== 4K screen (3840×2160 window), 512×512×120 study with overlay: full paint per scroll step, offscreen ==")
    for layout, axis in (("single", 2), ("single", 0), ("2x2", 2), ("2x2", 0)):
        fps, p50, p95, cpu95 = frame_rate(image, labels, (3840, 2160), layout, axis, steps=60)
        what = f"{layout} layout, scrolling {'axial' if axis == 2 else 'sagittal'}"
        print(f"  {what:34s} per step p50 {p50:6.2f} ms, p95 {p95:6.2f} ms (process CPU p95 {cpu95:6.2f} ms) → {fps:.0f} frames/s")
    # The 3D view's rows (re-mesh after an edit, frames/s while rotating): benchmarks/bench_view3d.py
    import bench_view3d

    label_map = bench_view3d.chest_512x512x300()
    print("\n== 3D view: re-mesh after a brush-sized edit, 512×512×300 label map (lung1 rule labels) ==")
    bench_view3d.remesh_rows(label_map, edits=7)
    print("\n== 3D view: frames/s while rotating, 700×450 pane, Xvfb + Mesa llvmpipe ==")
    bench_view3d.fps_rows(frames=40, coarse_budget=60_000)
    app.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
