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


def _tick_gaps(qtbot, action, settle_ms: int = 50) -> np.ndarray:
    """Gaps between the ticks of a 10 ms QTimer while ``action()`` runs in the event loop."""
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    qtbot.wait(settle_ms)
    action()
    qtbot.wait(settle_ms)
    timer.stop()
    return np.diff(ticks)


def test_gui_thread_never_blocks_while_a_series_loads(driver, window, qtbot):
    """The demo study (96 slices) loads while a 10 ms timer keeps ticking: no gap over 100 ms.

    On a machine shared with other processes (2-core CI runners, this dev box at load 9)
    the decoder threads and other processes alone can delay any Python thread. So the
    same load is also run without the window (io.load_series in a plain thread while the
    event loop idles) and only what the GUI adds on top of that floor counts against
    the 100 ms. On a quiet machine the floor is about one timer period.
    """
    import threading

    from medseg import io as medseg_io
    from medseg.io.phantom import demo_study_path

    browser = driver.open_folder(demo_study_path())
    row = _largest_series(browser)
    series = browser.result.series[row]

    def load_without_gui() -> None:
        worker = threading.Thread(target=medseg_io.load_series, args=(series,))
        worker.start()
        while worker.is_alive():
            qtbot.wait(5)

    # Best of two attempts: a GUI that really blocks (work on the GUI thread) fails both
    # by far; one unlucky scheduling hiccup of a shared machine does not fail the test.
    for attempt in range(2):
        floor = _tick_gaps(qtbot, load_without_gui)
        loaded: list = []
        browser = driver.open_folder(demo_study_path())
        gaps = _tick_gaps(qtbot, lambda: loaded.append(driver.load_row(browser, row)))
        allowance = max(0.0, float(floor.max()) - 0.010)
        print(f"attempt {attempt + 1}: demo load {loaded[0].size_xyz}: {len(gaps)} ticks, longest gap "
              f"{gaps.max() * 1000:.1f} ms; same load without the GUI: {floor.max() * 1000:.1f} ms")
        if gaps.max() < 0.100 + allowance:
            break
    assert loaded[0].size_xyz[2] >= 50
    assert len(gaps) >= 5
    assert gaps.max() < 0.100 + allowance


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
