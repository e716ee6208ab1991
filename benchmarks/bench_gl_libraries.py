"""Which 3D library for the 3D view: frames/s rotating a ~500k-triangle surface under Xvfb + Mesa llvmpipe.

The surface is lung1's body (HU > -400, largest component, smoothed, meshed by scikit-image) —
512k triangles. Each library draws it with its own Qt widget in an 800×700 window, one library per
process; every frame turns the camera 4° and waits for the GL pipeline (glFinish / VTK's
WaitForCompletion) and for Qt's events. Printed: wall and process-CPU time per frame.

pyqtgraph.opengl needs only PyOpenGL (a dependency of medseg). VTK and vispy are not: install
them into a scratch folder and name it, e.g.
    pip install --target /tmp/gl-peers vtk==9.7.1 vispy==0.17.0 freetype-py hsluv
    DISPLAY=:N QT_QPA_PLATFORM=xcb PYTHONPATH=/tmp/gl-peers .venv/bin/python benchmarks/bench_gl_libraries.py pyqtgraph|vtk|vispy
(run under Xvfb: `Xvfb :N -screen 0 1600x1000x24 &`). Results and sizes are in medseg/gui/viewer/view3d.py.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def surface():
    from scipy import ndimage
    from skimage.measure import marching_cubes

    from medseg.io import read_image
    data = os.environ.get("MEDSEG_SHARED_DATA", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))
    v = read_image(os.path.join(data, "ct", "pyradiomics_lung1", "lung1_image.nrrd"))
    body = ndimage.binary_opening(v.array > -400, iterations=2)
    lab, n = ndimage.label(body); sizes = ndimage.sum(body, lab, range(1, n+1)); body = lab == (np.argmax(sizes)+1)
    field = ndimage.gaussian_filter(np.pad(body, 1).astype(np.float32), (0.6, 1.2, 1.2))
    field = ndimage.zoom(field, (1, 1/1.67, 1/1.67), order=1)
    sp = np.array(v.spacing_mm[::-1]) * np.array([1, 1.67, 1.67])
    verts, faces, normals, _ = marching_cubes(field, 0.5, spacing=tuple(sp))
    vv, ff, nn = verts[:, ::-1].astype(np.float32), faces.astype(np.uint32), -normals[:, ::-1].astype(np.float32)
    vv -= vv.mean(axis=0)
    return vv, ff, nn

FRAMES = int(os.environ.get("FRAMES", "20"))
W, H = 800, 700

CPU = []
def report(name, times, tris):
    t = np.asarray(times) * 1000
    p50, p95 = np.percentile(t, [50, 95])
    cpu = np.percentile(np.asarray(CPU) * 1000, 50) if CPU else 0
    print(json.dumps({"lib": name, "triangles": int(tris), "p50_ms": round(p50, 2), "p95_ms": round(p95, 2), "fps_p50": round(1000 / p50, 1), "cpu_ms_p50": round(cpu, 1)}))

def run_pyqtgraph():
    import pyqtgraph.opengl as gl
    from OpenGL import GL
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    v, f, n = surface()
    w = gl.GLViewWidget(); w.resize(W, H); w.show()
    md = gl.MeshData(vertexes=v, faces=f)
    md._vertexNormals = n
    item = gl.GLMeshItem(meshdata=md, smooth=True, color=(0.8, 0.5, 0.4, 1), shader="shaded")
    w.addItem(item); w.setCameraPosition(distance=600)
    for _ in range(10): app.processEvents(); time.sleep(0.02)
    w.repaint(); app.processEvents()
    times = []
    for i in range(FRAMES):
        t = time.perf_counter(); c = time.process_time()
        w.orbit(4, 0); w.repaint()
        w.makeCurrent(); GL.glFinish(); w.doneCurrent()
        app.processEvents()
        times.append(time.perf_counter() - t); CPU.append(time.process_time() - c)
    report("pyqtgraph.opengl", times, len(f))

def run_vtk():
    from PySide6.QtWidgets import QApplication
    from vtkmodules.qt.QVTKRenderWindowInteractor import QVTKRenderWindowInteractor
    from vtkmodules.util.numpy_support import numpy_to_vtk, numpy_to_vtkIdTypeArray
    from vtkmodules.vtkCommonCore import vtkPoints
    from vtkmodules.vtkCommonDataModel import vtkCellArray, vtkPolyData
    from vtkmodules.vtkRenderingCore import vtkActor, vtkPolyDataMapper, vtkRenderer
    app = QApplication([])
    v, f, n = surface()
    pts = vtkPoints(); pts.SetData(numpy_to_vtk(v, deep=True))
    cells = vtkCellArray()
    offsets = np.arange(0, 3 * len(f) + 1, 3, dtype=np.int64)
    cells.SetData(numpy_to_vtkIdTypeArray(offsets, deep=True), numpy_to_vtkIdTypeArray(f.astype(np.int64).ravel(), deep=True))
    poly = vtkPolyData(); poly.SetPoints(pts); poly.SetPolys(cells)
    poly.GetPointData().SetNormals(numpy_to_vtk(n, deep=True))
    mapper = vtkPolyDataMapper(); mapper.SetInputData(poly)
    actor = vtkActor(); actor.SetMapper(mapper); actor.GetProperty().SetColor(0.8, 0.5, 0.4)
    ren = vtkRenderer(); ren.AddActor(actor)
    widget = QVTKRenderWindowInteractor(); widget.resize(W, H); widget.show()
    rw = widget.GetRenderWindow(); rw.SetMultiSamples(0); rw.AddRenderer(ren); widget.Initialize()
    ren.ResetCamera()
    for _ in range(10): app.processEvents(); time.sleep(0.02)
    rw.Render()
    print("GL:", rw.ReportCapabilities().splitlines()[:3], file=sys.stderr)
    times = []
    for i in range(FRAMES):
        t = time.perf_counter(); c = time.process_time()
        ren.GetActiveCamera().Azimuth(4); rw.Render(); rw.WaitForCompletion()
        app.processEvents()
        times.append(time.perf_counter() - t); CPU.append(time.process_time() - c)
    report("vtk", times, len(f))

def run_vispy():
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from vispy import gloo, scene
    from vispy.scene.visuals import Mesh
    v, f, n = surface()
    canvas = scene.SceneCanvas(app="pyside6", size=(W, H), show=True, bgcolor="black")
    view = canvas.central_widget.add_view()
    mesh = Mesh(vertices=v, faces=f, color=(0.8, 0.5, 0.4, 1), shading="smooth")
    view.add(mesh)
    view.camera = scene.TurntableCamera(distance=600)
    for _ in range(10): app.processEvents(); time.sleep(0.02)
    canvas.native.repaint(); app.processEvents()
    print("GL:", gloo.gl.glGetParameter(gloo.gl.GL_RENDERER), file=sys.stderr)
    times = []
    for i in range(FRAMES):
        t = time.perf_counter(); c = time.process_time()
        view.camera.azimuth = view.camera.azimuth + 4
        canvas.native.repaint()
        gloo.gl.glFinish()
        app.processEvents()
        times.append(time.perf_counter() - t); CPU.append(time.process_time() - c)
    report("vispy", times, len(f))

RUNNERS = {"pyqtgraph": run_pyqtgraph, "vtk": run_vtk, "vispy": run_vispy}
MODULES = {"pyqtgraph": "OpenGL", "vtk": "vtkmodules", "vispy": "vispy"}


def main() -> int:
    if len(sys.argv) > 1:
        RUNNERS[sys.argv[1]]()
        return 0
    import importlib.util
    import subprocess

    from bench_view3d import private_xvfb

    print(f"== 3D libraries: {FRAMES} frames turning lung1's body (512k triangles), 800×700, Xvfb + Mesa ==")
    with private_xvfb() as env:
        if env is None:
            print("  (Xvfb missing: .ci/system-deps installs it)")
            return 0
        for name, module in MODULES.items():
            if importlib.util.find_spec(module) is None:
                print(f"  {name}: not installed (see the module docstring)")
                continue
            done = subprocess.run([sys.executable, __file__, name], env=env, capture_output=True, text=True, timeout=1800)
            rows = [line for line in done.stdout.splitlines() if line.startswith("{")]
            print(f"  {rows[-1] if rows else name + ' failed: ' + done.stderr[-500:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
