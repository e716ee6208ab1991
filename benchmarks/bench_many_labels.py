"""117 structures on a 512×512×300 CT: the window's responsiveness, the 3D view, SEG and statistics, with peers.

Data: TotalSegmentator's own result on its example series split to all 117 structures and stretched to
300 slices 1 mm apart (benchmarks/many_labels_study.py), written as a DICOM series.

Rows (each part in its own process, so its memory and start-up are its own):
  * window (offscreen Qt): the longest event-loop gap while scrolling (wheel over the axial view),
    hovering (the status names the structure), hiding/showing a group (ribs, 26 structures, by keyboard),
    searching (typing "vertebrae_L3") and recolouring; each view's redraw (repaint of a new slice);
    targets < 100 ms gaps, <= 5 ms a redraw;
  * 3D (Xvfb, xcb, Mesa llvmpipe): the first full set of 117 surfaces after the label map opens (<= 10 s),
    hiding a group (restyle and one repaint, <= 50 ms), a frame while turning (coarse copies) —
    wall and process-CPU time, as the machine may be shared;
  * DICOM SEG write: medseg (highdicom, frames' shared items encoded once) vs dcmqi itkimage2segimage vs
    TotalSegmentator 2.18.0's own --output_type dicom writer (save_mask_as_dicomseg, highdicom), file sizes;
    target medseg <= 1.0x dcmqi;
  * statistics: medseg's standard figures and TotalSegmentator's definitions vs TotalSegmentator's own
    get_basic_statistics on the same map.
Medians (min-max) of --repeats runs, the peers run in turn inside each repeat; ratios per run.
Run: .venv/bin/python benchmarks/bench_many_labels.py [--repeats 3] [--parts window,3d,seg,stats] [--work DIR]
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
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "gui"))  # test_real_window: the project's one way to start Xvfb


def spread(values: list[float], unit: str = "s", scale: float = 1.0) -> str:
    values = [v * scale for v in values]
    return f"{statistics.median(values):8.2f} {unit} ({min(values):.2f}-{max(values):.2f})"


def run_child(args: list[str], env: dict | None = None, timeout: int = 3600) -> dict:
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True, text=True,
                          env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _labels(structures: dict):
    from dataclasses import replace

    from medseg.catalogue import load_catalogue
    from medseg.core.labels import Provenance

    labels = load_catalogue().get("totalsegmentator/total").labels()
    made_by = Provenance.model("TotalSegmentator", "2.18.0")
    return {v: replace(label, provenance=made_by) for v, label in labels.items()}


# --- window (offscreen) ---------------------------------------------------------------------------
def child_window(work: Path) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QElapsedTimer, QPoint, QPointF, QStandardPaths, Qt, QTimer
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    QStandardPaths.setTestModeEnabled(True)
    from medseg.gui.common import app_settings
    from medseg.gui.shell.main_window import MainWindow
    from medseg.io import load

    app_settings.settings().clear()
    labels = np.load(work / "labels.npy")
    image = load(work / "series")
    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    window.document.set_volume(image, source=str(work / "series"))
    window.document.set_label_map(image.with_array(labels), _labels({}))
    for _ in range(50):
        app.processEvents()
    panel = window.overlay_panel.labels
    axial = window.viewer.views["axial"]
    beats: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    heart = QTimer()
    heart.setInterval(2)
    heart.timeout.connect(lambda: beats.append(clock.nsecsElapsed() / 1e9))
    heart.start()

    def gap_during(action, repeats: int) -> float:
        """The longest interval between heartbeats while ``action`` runs ``repeats`` times, one per turn."""
        beats.clear()
        for i in range(repeats):
            QTimer.singleShot(0, lambda i=i: action(i))
            end = clock.nsecsElapsed() / 1e9 + 0.05
            while clock.nsecsElapsed() / 1e9 < end:
                app.processEvents()
        return float(np.max(np.diff(beats))) if len(beats) > 1 else float("nan")

    centre = axial.rect().center()

    def scroll(i: int) -> None:
        event = QWheelEvent(QPointF(centre), QPointF(axial.mapToGlobal(centre)), QPoint(0, 0), QPoint(0, -120 if i % 2 else 120),
                            Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(axial, event)

    def hover(i: int) -> None:
        QTest.mouseMove(axial, centre + QPoint((i * 7) % 120 - 60, (i * 5) % 80 - 40))

    group = panel.proxy.mapFromSource(panel.model.group_index("ribs"))
    panel.tree.setCurrentIndex(group)

    def toggle(i: int) -> None:
        QTest.keyClick(panel.tree, Qt.Key.Key_Space)

    text = "vertebrae_L3"

    def search(i: int) -> None:
        if i < len(text):
            QTest.keyClick(panel.search, text[i])
        else:
            panel.search.clear()

    values = list(window.document.labels)

    def recolour(i: int) -> None:
        window.document.set_label_color(values[i * 7 % len(values)], (30 + i * 20 % 200, 200 - i * 10 % 150, 90))

    result = {"scroll_gap_s": gap_during(scroll, 30), "hover_gap_s": gap_during(hover, 40),
              "toggle_group_gap_s": gap_during(toggle, 6), "search_gap_s": gap_during(search, len(text) + 1),
              "recolour_gap_s": gap_during(recolour, 8)}
    heart.stop()
    # each view drawn again at a new slice: the slice with its 117-colour overlay (render), and the whole
    # repaint (that image scaled into the widget, crosshair, letters); the same with three labels beside it
    for tag, table in (("", None), ("_3labels", "three")):
        if table:
            window.document.set_label_map(image.with_array(np.minimum(labels, 3)))
            for _ in range(20):
                app.processEvents()
        redraws: dict[str, list[float]] = {}
        renders: dict[str, list[float]] = {}
        for name, view in window.viewer.views.items():
            times, rendered = [], []
            for step in range(20):
                window.view.move_cursor(view.axes.normal_axis, 1 if step % 2 else -1)
                started = time.perf_counter()
                view.repaint()
                times.append(time.perf_counter() - started)
                view.mark_labels_changed()
                started = time.perf_counter()
                view.render_slice()
                rendered.append(time.perf_counter() - started)
            redraws[name], renders[name] = times, rendered
        result[f"redraw_ms{tag}"] = {name: float(np.median(t) * 1000) for name, t in redraws.items()}
        result[f"render_ms{tag}"] = {name: float(np.median(t) * 1000) for name, t in renders.items()}
    window.document.mark_saved()
    window.close()
    return result


# --- 3D (xcb) --------------------------------------------------------------------------------------
def child_3d(work: Path) -> dict:
    from PySide6.QtCore import QEventLoop, QStandardPaths, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    QStandardPaths.setTestModeEnabled(True)
    from medseg.gui.common import app_settings
    from medseg.gui.shell.main_window import MainWindow
    from medseg.io import load

    def settle(ms: int = 300) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def draw(gl_view) -> tuple[float, float]:
        """One frame of the scene as it is styled now, finished by the GL (wall, process CPU seconds)."""
        from OpenGL import GL

        gl_view.makeCurrent()
        cpu, started = time.process_time(), time.perf_counter()
        gl_view.paintGL()
        GL.glFinish()
        wall, used = time.perf_counter() - started, time.process_time() - cpu
        gl_view.doneCurrent()
        return wall, used

    app_settings.settings().clear()
    labels = np.load(work / "labels.npy")
    image = load(work / "series")
    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    window.set_layout("2x2")
    window.document.set_volume(image, source=str(work / "series"))
    settle()
    view3d = window.viewer.view3d
    from medseg.gui.viewer.gl_support import gl_support

    result: dict = {"gl": view3d.ensure_gl(), "renderer": gl_support().renderer}
    table = _labels({})
    cpu = time.process_time()
    started = time.perf_counter()
    window.document.set_label_map(image.with_array(labels), table)
    view3d.wait_idle(600_000)
    app.processEvents()
    view3d.gl_view.repaint()
    result["first_full_set_s"] = time.perf_counter() - started
    result["first_full_set_cpu_s"] = time.process_time() - cpu
    result["surfaces"] = len(view3d.surfaces)
    result["triangles"] = sum(s.n_triangles for s in view3d.surfaces.values())
    result["coarse_triangles"] = sum(s.n_triangles for s in view3d.coarse_surfaces.values())
    settle()
    ribs = [v for v, e in window.document.labels.items() if e.group == "ribs"]
    toggles, toggles_cpu, settled, settled_cpu = [], [], [], []
    for step in range(6):
        cpu = time.process_time()
        started = time.perf_counter()
        window.document.set_labels_visible(ribs, step % 2 == 1)
        handled, handled_cpu = time.perf_counter() - started, time.process_time() - cpu
        wall, used = draw(view3d.gl_view)  # the scene drawn at once (from the coarse copies while changes come)
        toggles.append(handled + wall)
        toggles_cpu.append(handled_cpu + used)
        settle(400)  # the changes stop: the full surfaces come back
        wall, used = draw(view3d.gl_view)
        settled.append(wall)
        settled_cpu.append(used)
    result["toggle_s"], result["toggle_cpu_s"] = float(np.median(toggles)), float(np.median(toggles_cpu))
    result["settled_frame_s"], result["settled_frame_cpu_s"] = float(np.median(settled)), float(np.median(settled_cpu))
    gl_view = view3d.gl_view
    for mode in ("still", "turning"):
        gl_view.turning.emit(mode == "turning")  # what a drag says (the coarse copies drawn meanwhile)
        frames = []
        for step in range(20):
            gl_view.opts["azimuth"] += 2.0
            frames.append(draw(gl_view))
        result[f"{mode}_frame_s"] = float(np.median([f[0] for f in frames]))
        result[f"{mode}_frame_cpu_s"] = float(np.median([f[1] for f in frames]))
    gl_view.turning.emit(False)
    window.document.mark_saved()
    window.close()
    return result


def start_xvfb() -> tuple[subprocess.Popen, str]:
    from test_real_window import _start_xvfb

    return _start_xvfb()


# --- SEG ------------------------------------------------------------------------------------------
def child_seg_medseg(work: Path, out: Path) -> dict:
    from medseg.io import load
    from medseg.io.dicom_seg_write import write_dicom_seg

    image = load(work / "series")
    labels = np.load(work / "labels.npy")
    table = _labels({})
    started = time.perf_counter()
    write_dicom_seg(image.with_array(labels), image, out, list(table.values()))
    return {"seconds": time.perf_counter() - started}


def child_seg_totalsegmentator(work: Path, out: Path) -> dict:
    import nibabel as nib
    from totalsegmentator.dicom_io import save_mask_as_dicomseg
    from totalsegmentator.map_to_binary import class_map

    nifti = nib.load(work / "labels.nii.gz")  # the label map as TotalSegmentator holds it (its NIfTI)
    data = np.asarray(nifti.dataobj).astype(np.uint8)
    started = time.perf_counter()
    save_mask_as_dicomseg(data, class_map["total"], work / "series", out, nifti.affine)
    return {"seconds": time.perf_counter() - started}


def dcmqi_metadata(work: Path) -> Path:
    segments = []
    for value, label in _labels({}).items():
        attribute = {"labelID": value, "SegmentLabel": label.name, "SegmentAlgorithmType": "AUTOMATIC",
                     "SegmentAlgorithmName": "TotalSegmentator", "recommendedDisplayRGBValue": list(label.color)}
        for key, code in (("SegmentedPropertyCategoryCodeSequence", label.category),
                          ("SegmentedPropertyTypeCodeSequence", label.type),
                          ("SegmentedPropertyTypeModifierCodeSequence", label.modifier)):
            if code is not None:
                attribute[key] = {"CodeValue": code.value, "CodingSchemeDesignator": code.scheme,
                                  "CodeMeaning": code.meaning}
        segments.append(attribute)
    path = work / "dcmqi_meta.json"
    path.write_text(json.dumps({"ContentCreatorName": "bench", "ClinicalTrialSeriesID": "1",
                                "ClinicalTrialTimePointID": "1", "SeriesDescription": "dcmqi 117", "SeriesNumber": "300",
                                "InstanceNumber": "1", "BodyPartExamined": "ABDOMEN", "ContentLabel": "SEG",
                                "ContentDescription": "117 structures", "segmentAttributes": [segments]}))
    return path


# --- statistics -----------------------------------------------------------------------------------
def child_stats(work: Path, which: str) -> dict:
    from medseg.io import load

    image = load(work / "series")
    labels = np.load(work / "labels.npy")
    names = {v: label.name for v, label in _labels({}).items()}
    if which == "totalsegmentator":
        import nibabel as nib
        from totalsegmentator.statistics import get_basic_statistics

        seg = np.asarray(nib.load(work / "labels.nii.gz").dataobj).astype(np.uint8)
        started = time.perf_counter()
        get_basic_statistics(seg, work / "ct.nii.gz", work / "statistics.json", quiet=True)
        return {"seconds": time.perf_counter() - started}
    label_map = image.with_array(labels)
    started = time.perf_counter()
    if which == "medseg-totalseg":
        from medseg.edit.totalseg_stats import totalseg_statistics

        totalseg_statistics(image, label_map, names)
    else:
        from medseg.edit.stats import label_statistics

        label_statistics(image, label_map, names)
    return {"seconds": time.perf_counter() - started}


# --- main -----------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", default="window,3d,seg,stats")
    parser.add_argument("--work", help="work folder to keep (default: a temporary one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        work = Path(args.work)
        kind, _, arg = args.child.partition(":")
        result = {"window": lambda: child_window(work), "3d": lambda: child_3d(work),
                  "seg-medseg": lambda: child_seg_medseg(work, Path(args.out)),
                  "seg-totalsegmentator": lambda: child_seg_totalsegmentator(work, Path(args.out)),
                  "stats": lambda: child_stats(work, arg)}[kind]()
        print(json.dumps(result))
        return

    import SimpleITK as sitk
    from many_labels_study import build

    from medseg.io import load

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench_many_labels_"))
    work.mkdir(parents=True, exist_ok=True)
    series, labels = build(work, args.slices)
    image = load(series)
    if not (work / "labels.nii.gz").is_file():
        sitk.WriteImage(image.with_array(labels).to_sitk(), str(work / "labels.nii.gz"))
        sitk.WriteImage(image.to_sitk(), str(work / "ct.nii.gz"))
    present = len(np.unique(labels)) - 1
    slices = sum(int(np.any(labels == v, axis=(1, 2)).sum()) for v in range(1, 118))
    print(f"series {image.size_xyz} spacing {tuple(round(s, 3) for s in image.spacing_mm)} mm; {present} structures; "
          f"{slices} non-empty structure slices (= BINARY SEG frames)")
    parts = set(args.parts.split(","))
    common = ["--work", str(work)]
    rows: dict[str, list] = {}

    def add(key: str, value) -> None:
        rows.setdefault(key, []).append(value)

    itk2seg = shutil.which("itkimage2segimage", path=str(Path(sys.executable).parent))
    meta = dcmqi_metadata(work)
    display = None
    if "3d" in parts and not os.environ.get("DISPLAY"):
        server, display = start_xvfb()
    for repeat in range(args.repeats):
        if "window" in parts:
            env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
            for key, value in run_child(["--child", "window", *common], env).items():
                add(key, value)
        if "3d" in parts:
            env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
            env.update(QT_QPA_PLATFORM="xcb", **({"DISPLAY": display} if display else {}))
            for key, value in run_child(["--child", "3d", *common], env).items():
                add(key, value)
        if "seg" in parts:
            for name in ("medseg", "totalsegmentator"):
                out = work / f"{name}.dcm"
                out.unlink(missing_ok=True)
                add(f"seg_{name}_s", run_child(["--child", f"seg-{name}", *common, "--out", str(out)])["seconds"])
                add(f"seg_{name}_mb", out.stat().st_size / 1e6)
            out = work / "dcmqi.dcm"
            out.unlink(missing_ok=True)
            started = time.perf_counter()
            subprocess.run([itk2seg, "--inputImageList", str(work / "labels.nii.gz"), "--inputDICOMDirectory",
                            str(series), "--outputDICOM", str(out), "--inputMetadata", str(meta)], check=True,
                           capture_output=True)
            add("seg_dcmqi_s", time.perf_counter() - started)
            add("seg_dcmqi_mb", out.stat().st_size / 1e6)
        if "stats" in parts:
            for which in ("medseg", "medseg-totalseg", "totalsegmentator"):
                add(f"stats_{which}_s", run_child(["--child", f"stats:{which}", *common])["seconds"])
        print(f"run {repeat + 1}/{args.repeats} done", flush=True)
    if display:
        server.terminate()

    print()
    if "window" in parts:
        print("window (offscreen Qt), longest event-loop gap; target < 100 ms")
        for key, text in (("scroll", "scrolling (wheel)"), ("hover", "hovering"), ("toggle_group", "hide/show ribs (26)"),
                          ("search", "search as you type"), ("recolour", "recolouring")):
            print(f"  {text:<26} {spread(rows[f'{key}_gap_s'], 'ms', 1000)}")
        for name in rows["redraw_ms"][0]:
            print(f"  {name:<9} render {spread([r[name] for r in rows['render_ms']], 'ms')}   repaint "
                  f"{spread([r[name] for r in rows['redraw_ms']], 'ms')}   (3 labels: render "
                  f"{spread([r[name] for r in rows['render_ms_3labels']], 'ms')}, repaint "
                  f"{spread([r[name] for r in rows['redraw_ms_3labels']], 'ms')})   target <= 5 ms")
    if "3d" in parts:
        print(f"3D ({rows['renderer'][0]}); {rows['surfaces'][0]} surfaces, {rows['triangles'][0]} triangles "
              f"(coarse {rows['coarse_triangles'][0]})")
        print(f"  first full set            {spread(rows['first_full_set_s'])}  cpu {spread(rows['first_full_set_cpu_s'])}"
              "   target <= 10 s")
        print(f"  hide/show a group         {spread(rows['toggle_s'], 'ms', 1000)}  cpu {spread(rows['toggle_cpu_s'], 'ms', 1000)}"
              "   target <= 50 ms (restyle + a frame of the coarse copies)")
        print(f"  then the full frame       {spread(rows['settled_frame_s'], 'ms', 1000)}  cpu "
              f"{spread(rows['settled_frame_cpu_s'], 'ms', 1000)}   (250 ms after the last change)")
        for mode in ("still", "turning"):
            wall = statistics.median(rows[f"{mode}_frame_s"])
            print(f"  frame, {mode:<18} {spread(rows[f'{mode}_frame_s'], 'ms', 1000)}  cpu "
                  f"{spread(rows[f'{mode}_frame_cpu_s'], 'ms', 1000)}  ({1 / wall:.1f} frames/s wall)")
    if "seg" in parts:
        print("DICOM SEG write, 117 segments (BINARY)")
        for name in ("medseg", "dcmqi", "totalsegmentator"):
            print(f"  {name:<25} {spread(rows[f'seg_{name}_s'])}   {statistics.median(rows[f'seg_{name}_mb']):8.1f} MB")
        for peer in ("dcmqi", "totalsegmentator"):
            ratios = [a / b for a, b in zip(rows["seg_medseg_s"], rows[f"seg_{peer}_s"])]
            print(f"  medseg / {peer:<16} {statistics.median(ratios):.2f}x (per run {min(ratios):.2f}-{max(ratios):.2f}x)"
                  + ("   target <= 1.0x" if peer == "dcmqi" else ""))
    if "stats" in parts:
        print("statistics of 117 structures")
        for which, text in (("medseg", "medseg standard"), ("medseg-totalseg", "medseg, TotalSegmentator's"),
                            ("totalsegmentator", "TotalSegmentator itself")):
            print(f"  {text:<25} {spread(rows[f'stats_{which}_s'])}")
        ratios = [a / b for a, b in zip(rows["stats_medseg-totalseg_s"], rows["stats_totalsegmentator_s"])]
        print(f"  medseg (its definitions) / TotalSegmentator {statistics.median(ratios):.2f}x")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
