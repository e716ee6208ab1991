"""The semi-automatic tools in the real Edit panel, driven with synthetic mouse events on lung1 (issue #26):
grow from seeds with a live preview computed off the GUI thread (the event loop keeps ticking), Apply as one
undo step, Undo, Cancel, a locked label, level tracing, the 3D click, and scissors on the coronal view against
skimage.draw."""

from __future__ import annotations

import time

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt, QTimer
from skimage.draw import polygon2mask

from medseg.io import read_image

RING_VOXELS = 22  # background ring radius around the nodule, in-plane voxels (12.5 mm at 0.57 mm)


@pytest.fixture
def chest(driver, ct_dir):
    return driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")


@pytest.fixture
def nodule(ct_dir):
    return read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd").array == 1


def widget_point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def drag(qtbot, view, points, pause_ms: int = 0):
    """Press, move through ``points``, release; with ``pause_ms`` the event loop runs between events, as it does
    between a real mouse's events (else the whole drag is one long turn of the test's own code)."""
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
    for p in points[1:]:
        if pause_ms:
            qtbot.wait(pause_ms)
        qtbot.mouseMove(view, p)
    if pause_ms:
        qtbot.wait(pause_ms)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[-1])


class GapMeter:
    """The longest gap between ticks of a 5 ms GUI-thread timer: how long the event loop was blocked."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setInterval(5)
        self.timer.timeout.connect(self._tick)
        self.last: float | None = None
        self.longest = 0.0

    def _tick(self) -> None:
        now = time.perf_counter()
        if self.last is not None:
            self.longest = max(self.longest, now - self.last)
        self.last = now

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.stop()


def paint_seeds(qtbot, window, centre_xyz, slices, kind):
    """Seeds on the axial view: a click at the centre (structure) or a ring dragged around it (background)."""
    panel = window.editing.panel
    panel.options.widgets["seed_kind"].setCurrentText(kind)
    view = window.viewer.views["axial"]
    for z in slices:
        window.view.set_cursor((centre_xyz[0], centre_xyz[1], z))
        if kind == "background":
            angles = np.linspace(0, 2 * np.pi, 48)
            points = [widget_point(view, (centre_xyz[0] + RING_VOXELS * np.cos(a), centre_xyz[1] + RING_VOXELS * np.sin(a), z))
                      for a in angles]
        else:
            points = [widget_point(view, (centre_xyz[0], centre_xyz[1], z))]
        drag(qtbot, view, points, pause_ms=8)  # about a mouse's event rate
        qtbot.wait(8)


def brush_floor(qtbot, window, centre) -> float:
    """The longest event-loop gap while the same strokes paint with the plain brush (then undone): the GUI's own
    cost of a stroke on this machine, without any growing."""
    doc, panel = window.document, window.editing.panel
    panel.tool_buttons["brush"].click()
    depth = doc.history.depth
    with GapMeter() as meter:
        paint_seeds(qtbot, window, centre, (32, 33, 34), "structure")
        paint_seeds(qtbot, window, centre, (31, 32, 33, 34), "background")
    while doc.history.depth > depth:
        doc.undo()
    return meter.longest


def hover(view, point: QPoint) -> None:
    """A mouse move with no button pressed, sent to the view (QTest's offscreen mouseMove may send none)."""
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    event = QMouseEvent(QMouseEvent.Type.MouseMove, QPointF(point), view.mapToGlobal(QPointF(point)),
                        Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(view, event)


def dice(a, b):
    return 2.0 * np.logical_and(a, b).sum() / (a.sum() + b.sum())


def test_grow_from_seeds_preview_apply_undo_cancel_and_locks(window, chest, nodule, qtbot, artifacts_dir):
    doc, panel = window.document, window.editing.panel
    runner, options = panel.grow_runner, panel.options
    centre = tuple(int(v) for v in np.rint(np.argwhere(nodule).mean(axis=0))[::-1])  # (x, y, z)
    doc.new_label_map()
    # a locked label inside the region of interest: grow from seeds must leave it alone
    panel.add_label("vessel")  # the Edit panel's Add: the new label becomes the active one
    locked_value = window.view.active_label
    doc.label_map.array[33, centre[1] + 8:centre[1] + 12, centre[0] - 2:centre[0] + 2] = locked_value
    doc.label_map.recount()
    doc.set_label_locked(locked_value, True)
    panel.add_label("nodule")
    panel.radius.setValue(2.0)
    before = doc.label_map.array.copy()

    # Best of two attempts (as tests/gui/test_responsive_loading.py): a GUI thread that really blocks fails both by
    # far; one scheduling hiccup of a shared machine does not fail the test.
    for attempt in range(2):
        floor = brush_floor(qtbot, window, centre)
        panel.tool_buttons["grow-from-seeds"].click()
        with GapMeter() as meter:
            with qtbot.waitSignal(runner.preview_shown, timeout=60_000):
                paint_seeds(qtbot, window, centre, (32, 33, 34), "structure")
                paint_seeds(qtbot, window, centre, (32, 33, 34), "background")
            qtbot.waitUntil(lambda: not runner.busy() and not window.view.tools.grow.pending(), timeout=60_000)
            first = window.view.tools.grow.preview
            assert first is not None and first.delta is not None
            assert (window.view.tools.grow.seeds == 255).any() and (window.view.tools.grow.seeds == window.view.active_label).any()
            assert np.array_equal(doc.label_map.array, before)  # a preview writes nothing
            # one more background stroke on slice 31 (below the nodule): the preview updates incrementally
            with qtbot.waitSignal(runner.preview_shown, timeout=60_000):
                paint_seeds(qtbot, window, centre, (31,), "background")
            qtbot.waitUntil(lambda: not runner.busy() and not window.view.tools.grow.pending(), timeout=60_000)
        assert window.view.tools.active == "grow-from-seeds"
        second = window.view.tools.grow.preview
        assert second.generation > first.generation
        print(f"attempt {attempt + 1}: longest event-loop gap while painting seeds and growing: "
              f"{meter.longest * 1000:.0f} ms; the same strokes with the plain brush: {floor * 1000:.0f} ms")
        # what grow from seeds adds to the event loop's longest gap must stay under 100 ms; the machine's own
        # hiccups (the floor: the same strokes with the plain brush, no growing) are allowed on top
        allowance = max(0.0, floor - 0.010)
        if meter.longest < 0.100 + allowance:
            break
        if attempt == 0:
            options.buttons["seeds", "cancel"].click()
    window.grab().save(str(artifacts_dir / "gui_grow_preview.png"))
    assert meter.longest < 0.100 + allowance

    grown = np.zeros(nodule.shape, dtype=bool)
    grown.reshape(-1)[second.delta.global_index(nodule.shape)] = second.delta.new == window.view.active_label
    assert dice(grown, nodule) >= 0.70

    # the locality slider is bound to the tool and recomputes the preview
    with qtbot.waitSignal(runner.preview_shown, timeout=60_000):
        options.widgets["seed_locality"].setValue(4)
    assert window.view.tools.seed_locality.value == 2.0
    qtbot.waitUntil(lambda: not runner.busy() and not window.view.tools.grow.pending(), timeout=60_000)
    expected = window.view.tools.grow.preview.delta

    assert options.buttons["seeds", "apply"].isEnabled()
    depth = doc.history.depth
    options.buttons["seeds", "apply"].click()
    assert doc.history.depth == depth + 1  # Apply: one undo step
    after = doc.label_map.array.copy()
    changed = np.zeros(after.shape, dtype=bool)
    changed.reshape(-1)[expected.global_index(after.shape)] = True
    assert np.array_equal(after[changed], expected.new) and np.array_equal(after[~changed], before[~changed])
    assert np.array_equal(after == locked_value, before == locked_value)  # the locked label is untouched
    assert window.view.tools.grow is None and not options.buttons["seeds", "apply"].isEnabled()  # seeds cleared
    window.grab().save(str(artifacts_dir / "gui_grow_applied.png"))
    window.editing.undo_action.trigger()
    assert np.array_equal(doc.label_map.array, before)  # Undo restores exactly

    # Cancel: seeds and preview go, the segmentation stays as it was
    with qtbot.waitSignal(runner.preview_shown, timeout=60_000):
        paint_seeds(qtbot, window, centre, (33,), "structure")
        paint_seeds(qtbot, window, centre, (33,), "background")
    qtbot.waitUntil(lambda: not runner.busy(), timeout=60_000)
    options.buttons["seeds", "cancel"].click()
    assert window.view.tools.grow is None
    assert np.array_equal(doc.label_map.array, before) and doc.history.depth == depth


def test_level_trace_hover_and_click_and_the_3d_click(window, chest, nodule, qtbot):
    doc, panel = window.document, window.editing.panel
    centre = tuple(int(v) for v in np.rint(np.argwhere(nodule).mean(axis=0))[::-1])
    doc.new_label_map()
    window.view.set_cursor(centre)
    view = window.viewer.views["axial"]
    panel.tool_buttons["level-trace"].click()
    panel.options.widgets["trace_tolerance_hu"].setValue(150.0)
    hover(view, widget_point(view, centre))
    qtbot.waitUntil(lambda: window.view.tools.trace is not None, timeout=5_000)
    axis, position, region = window.view.tools.trace
    assert (axis, position) == (0, centre[2]) and region[centre[1], centre[0]]
    drag(qtbot, view, [widget_point(view, centre)])
    filled = doc.label_map.array == window.view.active_label
    assert np.array_equal(filled[centre[2]], region) and filled.sum() == region.sum()

    window.editing.undo_action.trigger()
    panel.tool_buttons["confidence-connected"].click()
    drag(qtbot, view, [widget_point(view, centre)])
    clicked = doc.label_map.array == window.view.active_label
    assert dice(clicked, nodule) >= 0.70


def test_scissors_on_the_coronal_view_remove_exactly_the_prism(window, chest, qtbot, artifacts_dir):
    doc, panel = window.document, window.editing.panel
    doc.new_label_map()
    body = doc.volume.array > -400
    doc.label_map.array[body] = 1
    doc.label_map.recount()
    doc.label_map.ensure_entry(1)
    before = doc.label_map.array.copy()
    view = window.viewer.views["coronal"]
    y = 260
    window.view.set_cursor((256, y, 24))
    panel.tool_buttons["scissors"].click()
    assert window.view.tools.scissors_operation.value == "erase-inside"
    corners = [(150, y, 40), (330, y, 44), (360, y, 10), (200, y, 6), (140, y, 20)]
    points = [widget_point(view, c) for c in corners]
    drag(qtbot, view, points)
    # the outline as the view read it: continuous (x, y, z) of each mouse position, kept on the (z, x) plane
    outline = [view.widget_to_continuous(QPointF(p)) for p in points]
    plane = polygon2mask((doc.volume.shape_zyx[0], doc.volume.shape_zyx[2]), np.array([(z, x) for x, _, z in outline]))
    prism = np.broadcast_to(plane[:, None, :], before.shape)
    assert np.array_equal(doc.label_map.array, np.where(prism, 0, before))
    assert (before[prism] != 0).any()
    window.grab().save(str(artifacts_dir / "gui_scissors_coronal.png"))
    assert doc.history.depth == 1


def test_grown_liver_in_three_views_for_the_readme(driver, window, ct_dir, qtbot, artifacts_dir):
    """TotalSegmentator's example abdomen: seeds placed as a person places them (issue #26), grown in the window's
    worker, applied; the three views at the liver's centre are the README's picture."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "edit"))  # the seed placement helper
    from seed_placement import place_seeds

    from medseg.edit.grow_session import GrowSession
    from medseg.io import resample_to

    image = driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")
    liver = resample_to(read_image(ct_dir / "totalsegmentator" / "example_seg_dicom.nii.gz"), image).array == 5
    doc, panel = window.document, window.editing.panel
    doc.new_label_map()
    entry = doc.add_label("liver")
    window.view.set_active_label(entry.value)
    seeds, placed = place_seeds(liver, image.spacing_zyx, entry.value, 0xFFFF)
    panel.tool_buttons["grow-from-seeds"].click()
    session = GrowSession(doc, window.view.tools.effects["seeds"].parameters(), window.view.tools.rules())
    window.view.tools.effects["seeds"].session = session
    session.set_seed_volume(seeds)
    with qtbot.waitSignal(panel.grow_runner.preview_shown, timeout=120_000):
        panel.grow_runner.request(session)
    centre = np.rint(np.argwhere(liver).mean(axis=0)).astype(int)
    window.view.set_cursor((int(centre[2]), int(centre[1]), int(centre[0])))
    window.view.apply_preset("Liver")
    window.grab().save(str(artifacts_dir / "gui_grow_liver_preview.png"))
    assert panel.options.run("seeds", "apply")
    score = dice(doc.label_map.array == entry.value, liver)
    print(f"liver grown in the window: Dice {score:.4f}; seeds {placed}")
    assert score >= 0.90
    window.viewer.set_layout("1x3")
    qtbot.waitUntil(lambda: all(v.isVisible() and v.width() > 0 for v in window.viewer.views.values()))
    window.viewer.grab().save(str(artifacts_dir / "grow_seeds_liver.png"))


def test_lasso_polygon_clicked_vertex_by_vertex(window, chest, qtbot):
    """Clicks add vertices (the outline shows), a click near the first closes it: the slice is filled exactly
    where skimage.draw rasterises the same vertices; Escape drops an open polygon."""
    doc, panel = window.document, window.editing.panel
    doc.new_label_map()
    view = window.viewer.views["axial"]
    z = 30
    window.view.set_cursor((256, 256, z))
    panel.tool_buttons["lasso"].click()
    corners = [(180, 200, z), (330, 190, z), (350, 320, z), (200, 340, z)]
    points = [widget_point(view, c) for c in corners]
    for p in points:  # in quick succession: a click Qt turns into a double-click adds a vertex all the same
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, p)
    assert window.view.tools.polygon_open and len(window.view.tools.outline[1]) == 4 and not doc.label_map.array.any()
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0] + QPoint(1, 1))
    assert not window.view.tools.polygon_open and window.view.tools.outline is None
    vertices = [view.widget_to_continuous(QPointF(p)) for p in points]
    expected = polygon2mask(doc.volume.shape_zyx[1:], np.array([(y, x) for x, y, _ in vertices]))
    filled = doc.label_map.array == window.view.active_label
    assert np.array_equal(filled[z], expected) and filled.sum() == expected.sum() and doc.history.depth == 1
    # Escape drops a polygon being clicked
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
    assert window.view.tools.polygon_open
    qtbot.keyClick(view, Qt.Key.Key_Escape)
    assert not window.view.tools.polygon_open and window.view.tools.outline is None and doc.history.depth == 1
