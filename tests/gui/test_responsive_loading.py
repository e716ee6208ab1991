"""Loading runs in workers: the event loop keeps ticking, slices appear early, cancel undoes."""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QTimer

from medseg.errors import Cancelled


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

    The same timer is first measured on the idle window for as long, so that a machine
    busy with other processes (shared CI runners) is not mistaken for a blocked GUI:
    only what the load adds on top of the idle noise counts against the 100 ms.
    """
    from medseg.io.phantom import demo_study_path

    browser = driver.open_folder(demo_study_path())
    row = _largest_series(browser)
    loaded: list = []
    started = time.perf_counter()
    gaps = _tick_gaps(qtbot, lambda: loaded.append(driver.load_row(browser, row)))
    duration_ms = int((time.perf_counter() - started) * 1000)
    idle = _tick_gaps(qtbot, lambda: qtbot.wait(duration_ms))
    noise = max(0.0, float(idle.max()) - 0.010)
    print(f"demo load {loaded[0].size_xyz}: {len(gaps)} ticks in {duration_ms} ms, longest gap "
          f"{gaps.max() * 1000:.1f} ms (idle loop: {idle.max() * 1000:.1f} ms)")
    assert loaded[0].size_xyz[2] >= 50
    assert len(gaps) > 10
    assert gaps.max() < 0.100 + noise


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
    # Decoding goes middle-out (4+ slices at a time): the first shown are the middle ones.
    assert filled and all(abs(z - 10) <= 4 for z in filled)
    assert doc.volume is volume and doc.volume.array is not None


def test_cancel_leaves_the_document_as_it_was(driver, window, qtbot, ct_dir):
    first = driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    cursor = window.document.cursor_xyz
    browser = driver.open_folder(ct_dir / "totalsegmentator" / "example_ct_dicom")
    with qtbot.waitSignal(window.loader.failed, timeout=60_000) as blocker:
        browser.table.cellDoubleClicked.emit(0, 0)
        assert window.cancel_button.isVisible()
        window.cancel_button.click()
    assert isinstance(blocker.args[0], Cancelled)
    assert window.document.volume is first and window.document.cursor_xyz == cursor
    assert not window.cancel_button.isVisible()
    assert "Cancelled" in window.statusBar().currentMessage()


def test_log_file_has_no_patient_names_or_ids(driver, window, ct_dir, tmp_path):
    volume = driver.open_series(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")
    for handler in __import__("logging").getLogger("medseg").handlers:
        handler.flush()
    log_text = (tmp_path / "logs" / "medseg.log").read_text()
    assert "image loaded" in log_text
    for secret in (volume.meta.patient_name, volume.meta.patient_id):
        if secret.strip():
            assert secret not in log_text
