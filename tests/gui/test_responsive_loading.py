"""Loading runs in workers: the event loop keeps ticking, slices appear early, cancel undoes."""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QTimer

from medseg.errors import Cancelled
from medseg.gui.common import app_settings


def _largest_series(browser):
    return max((i for i, s in enumerate(browser.result.series) if s.loadable),
               key=lambda i: int(np.prod(browser.result.series[i].size_xyz)))


def _tick_gaps(qtbot, action) -> tuple[np.ndarray, np.ndarray, int, float]:
    """A 10 ms QTimer ticking while ``action()`` runs in the event loop: the gaps between ticks in
    wall-clock seconds and in the GUI thread's own CPU seconds (time.thread_time), and how many ticks
    came while ``action()`` ran and how long it ran. The timer has ticked twice before the action, and
    ticks twice after it, so the gaps around its start and end are measured too."""
    ticks: list[tuple[float, float]] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append((time.perf_counter(), time.thread_time())))
    timer.start()
    qtbot.waitUntil(lambda: len(ticks) >= 2)
    started = time.perf_counter()
    action()
    ended = time.perf_counter()
    after = len(ticks)
    qtbot.waitUntil(lambda: len(ticks) >= after + 2)
    timer.stop()
    gaps = np.diff(np.array(ticks), axis=0)
    during = sum(started < tick < ended for tick, _cpu in ticks)
    return gaps[:, 0], gaps[:, 1], during, ended - started


def test_gui_thread_never_blocks_while_a_series_loads(driver, window, qtbot):
    """The demo study (96 slices) loads while a 10 ms timer keeps ticking: the GUI thread never works
    for 100 ms between two ticks, and the ticks go on while the series loads.

    The work is the GUI thread's own CPU time between ticks (time.thread_time), not the wall-clock
    gap: on a shared 2-core machine the decoder threads and other processes delay any thread (CI
    once saw a 119 ms gap where the same load without the window gave 18 ms), while the GUI thread's
    CPU time is what the application puts on it. A GUI that waited for the load instead (a join)
    would get no tick while it loads: at least two, and an eighth of the timer's ticks, must come. Wall-clock
    gaps are printed; bench_app_segment.py measures them on a quiet machine.
    """
    from medseg.io.phantom import demo_study_path

    browser = driver.open_folder(demo_study_path())
    row = _largest_series(browser)
    loaded: list = []
    wall, work, during, took = _tick_gaps(qtbot, lambda: loaded.append(driver.load_row(browser, row)))
    print(f"demo load {loaded[0].size_xyz} in {took * 1000:.0f} ms: {during} ticks meanwhile, longest gap "
          f"{wall.max() * 1000:.1f} ms, most GUI-thread work in one gap {work.max() * 1000:.1f} ms")
    assert loaded[0].size_xyz[2] >= 50
    assert during >= max(2.0, took / 0.010 / 8), (during, took)
    assert work.max() < 0.100, work


def test_middle_slice_is_shown_before_the_load_finishes(driver, window, qtbot, ct_dir):
    doc = window.document
    seen: list[tuple[bool, list[int]]] = []

    def on_pixels() -> None:
        filled = [z for z in range(doc.volume.array.shape[0]) if (doc.volume.array[z] != -1024).any()]
        seen.append((window.loader.busy, filled))

    doc.pixels_changed.connect(on_pixels)
    volume = driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")
    assert seen, "the preview never showed a decoded slice"
    busy, filled = seen[0]
    assert busy  # shown while the load was still running
    # Decoding goes middle-out, a batch of slices at a time (as many as the job's threads take): the first
    # shown lie around the middle, before the rest. Not necessarily one run (with two decoder threads the
    # first preview came with slices 7 and 9 done and 8 still in the other thread), nor one block (on a
    # loaded machine the first preview is painted after several blocks): centred on the middle, ends not yet.
    n = doc.volume.array.shape[0]
    assert len(filled) < n and (n - 1) // 2 in filled, (filled, n)
    assert abs(sum(filled) / len(filled) - (n - 1) / 2) <= 1.5, (filled, n)  # in file order: far below the middle
    assert doc.volume is volume and doc.volume.array is not None


def test_cancel_leaves_the_document_as_it_was(driver, window, qtbot, ct_dir):
    first = driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    cursor = window.view.cursor_xyz
    browser = driver.open_folder(ct_dir / "totalsegmentator" / "example_ct_dicom")
    with qtbot.waitSignal(window.loader.failed, timeout=60_000) as blocker:
        browser.table.cellDoubleClicked.emit(0, 0)
        assert window.cancel_button.isVisible()
        window.cancel_button.click()
    assert isinstance(blocker.args[0], Cancelled)
    assert window.document.volume is first and window.view.cursor_xyz == cursor
    assert not window.cancel_button.isVisible()
    assert window.messages.text() == "Cancelled; nothing was changed."  # the message area, not the readout


def test_log_file_has_no_patient_names_or_ids(driver, window, ct_dir):
    volume = driver.open_series(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")
    for handler in __import__("logging").getLogger("medseg").handlers:
        handler.flush()
    log_text = (app_settings.log_directory() / "medseg.log").read_text()  # in $MEDSEG_DATA_DIR (tests/conftest.py)
    assert "image loaded" in log_text
    secrets = (volume.meta.patient_name, volume.meta.patient_id)
    assert all(secret.strip() for secret in secrets), secrets  # this series names its patient: something to leak
    for secret in secrets:
        assert secret not in log_text


def test_the_preview_and_the_loaded_volume_are_one_array(driver, window, qtbot, ct_dir):
    """The decoder writes into the preview's own array, so an open holds one copy of the voxels
    (a separate preview made a 512 x 512 x 1000 open peak at 2.1x its voxels; bench_soak.py).
    Oracle for the values: SimpleITK's series reader on the same files."""
    import SimpleITK as sitk

    doc = window.document
    shown: list = []
    doc.volume_changed.connect(lambda: shown.append(doc.volume))
    folder = ct_dir / "dcmqi_ct3slice_masks" / "image"
    volume = driver.open_series(folder)
    preview = shown[0]
    assert preview is not volume and preview.array is volume.array
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(folder)))
    oracle = reader.Execute()
    assert np.allclose(oracle.GetOrigin(), volume.origin_mm)
    assert np.array_equal(sitk.GetArrayFromImage(oracle), volume.array)
    # The loaded volume no longer changes: the renderer copies it for sagittal reads again (a plane it then
    # serves is the copy's, not a view into the volume), and the copy's planes are the volume's.
    from medseg.gui.viewer.view_axes import VIEW_NAMES, view_axes

    renderer = window.viewer.renderer
    across_x = next(axes for axes in (view_axes(n, volume.direction) for n in VIEW_NAMES) if axes.normal_axis == 0)
    renderer.plane(volume.array, across_x, 1)
    assert renderer.x_major.wait_until_built(60)
    plane = renderer.plane(volume.array, across_x, 1)
    assert not np.shares_memory(plane, volume.array) and np.array_equal(plane, across_x.slice_of(volume.array, 1))


def test_a_closed_study_frees_its_voxels(driver, window, qtbot, ct_dir):
    """Nothing keeps a closed study's voxels alive: the finished load job's closure did, and so did
    decoded slices the preview had not shown yet (views of the volume). The soak saw a closed
    512 x 512 x 1000 study keep its 500 MB until the next load."""
    import gc
    import weakref

    volume = driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    voxels = weakref.ref(volume.array)
    del volume
    window.document.mark_saved()
    window.document.close_image()
    # the finished job and the views let go on the event loop's next turns: wait for that, not a fixed time
    qtbot.waitUntil(lambda: gc.collect() is not None and voxels() is None, timeout=10_000)


_FIRST_OPEN = r"""
import json, sys, threading
importers = {}
armed = []


class Spy:  # who imports the AI runtime first, and when
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "scipy.ndimage", "medseg.model.backends") and name not in importers:
            gui = threading.current_thread() is threading.main_thread()
            importers[name] = ("gui thread, window shown" if armed else "gui thread, start-up") if gui else "a job"
        return None


sys.meta_path.insert(0, Spy())
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication

app = QApplication([])
from medseg.gui.shell.main_window import MainWindow
from medseg.io.phantom import demo_study_path

window = MainWindow()
window.show()
armed.append(True)  # what the app imports before its window shows is start-up time, not a frozen window
loaded = []
window.loader.study_loaded.connect(loaded.append)
window.opener.open_path(demo_study_path(), auto_load=True)  # at once, as `medseg gui FOLDER` does
loop = QEventLoop()
poll = QTimer()
poll.timeout.connect(lambda: loaded and window.segment_panel.runtime_ready and loop.quit())
poll.start(20)
QTimer.singleShot(120_000, loop.quit)
loop.exec()
print(json.dumps({"importers": importers, "loaded": bool(loaded),
                  "plan": window.segment_panel.plan_label.toPlainText().splitlines()[:1]}))
window.document.mark_saved()
window.close()
"""


def test_the_first_study_opened_imports_no_ai_runtime_on_the_gui_thread(tmp_path):
    """PyTorch and scipy.ndimage (1.5-2 s of imports) are imported by a job as the window opens, not
    by the Segment panel on the GUI thread when the first study opens (that froze the window for the
    whole import; the timer test above did not see it because an earlier test had imported them).
    A fresh process, the study opened at once: none of them is first imported by the GUI thread once
    the window is shown."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MEDSEG_DATA_DIR": str(tmp_path / "data"),
           "MEDSEG_CONFIG_DIR": str(tmp_path / "config"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    run = subprocess.run([sys.executable, "-c", _FIRST_OPEN], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["loaded"], result
    importers = result["importers"]
    assert importers["torch"] == "a job" and importers["medseg.model.backends"] == "a job", importers
    assert "gui thread, window shown" not in importers.values(), importers  # scipy.ndimage: at start-up
    from medseg.model.package import load_package, starter_model_path

    expected = load_package(starter_model_path()).select((2.5, 1.5, 1.5))  # the demo's spacing (z, y, x)
    assert result["plan"] and result["plan"][0].startswith(expected.name + " "), (result, expected.name)
