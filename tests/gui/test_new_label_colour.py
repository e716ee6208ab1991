"""A label the user adds gets a colour that stands apart from those in the table (issue #42: after Segment on a
head, where there are no lungs, the new label was value 2, whose colour is a brown next to body's, and a grow
from seeds preview over body was all but invisible).

Oracle: the rendered axial view. A voxel of the grow preview must look clearly different from a body voxel of
the same grey (before: about 14 apart in RGB at the default opacity)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, Qt

TILT = ("dcm_qa_ct", "GE_HiSpeedDual_head_tilt_varspacing")
RING = 22  # voxels: the background seeds' ring around the structure seed


def _point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def _drag(qtbot, view, points) -> None:
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
    for p in points[1:]:
        qtbot.mouseMove(view, p)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[-1])


def _rgb(image, view, xyz, size_xyz) -> np.ndarray:
    column, row = view.axes.index_to_pixel(xyz, size_xyz)
    c = image.pixelColor(int(round(column)), int(round(row)))
    return np.array([c.red(), c.green(), c.blue()], dtype=float)


def test_a_label_added_after_segment_is_drawn_apart_from_body(driver, window, ct_dir, qtbot, artifacts_dir):
    from skimage.color import deltaE_ciede2000, rgb2lab

    from medseg.model.package import load_package, starter_model_path
    from medseg.model.rule_labels import rule_label_map

    volume = driver.open_series(ct_dir.joinpath(*TILT))
    doc, panel, view = window.document, window.editing.panel, window.viewer.views["axial"]
    # what Segment with the starter leaves on a head: body and bones, in the model's colours, and no lungs
    segmented = rule_label_map(volume).array
    starter = load_package(starter_model_path()).labels
    present = [int(v) for v in np.unique(segmented) if v]
    assert present == [1, 3]
    doc.set_label_map(volume.with_array(segmented), {v: starter[v] for v in present}, description="Segment")
    body, bones = doc.labels[1].color, doc.labels[3].color

    panel.add_label("lesion")  # the Edit panel's Add, named
    new = window.view.active_label
    assert new == 2 and doc.labels[new].name == "lesion"
    colour = doc.labels[new].color

    def lab(c) -> np.ndarray:
        return rgb2lab(np.asarray(c, float).reshape(1, 1, 3) / 255)[0, 0]

    assert min(deltaE_ciede2000(lab(colour), lab(other)) for other in (body, bones)) >= 25

    # grow from seeds inside the brain (body): a seed at the middle, background seeds on a ring around it
    z = volume.shape_zyx[0] // 2
    inside = np.argwhere(segmented[z] == 1)
    y, x = (int(v) for v in np.rint(inside.mean(axis=0)))
    assert segmented[z, y, x] == 1
    panel.tool_buttons["grow-from-seeds"].click()
    panel.radius.setValue(2.0)
    window.view.set_cursor((x, y, z))
    runner, options = panel.grow_runner, panel.options
    with qtbot.waitSignal(runner.preview_shown, timeout=60_000):
        options.widgets["seed_kind"].setCurrentText("structure")
        _drag(qtbot, view, [_point(view, (x, y, z))])
        options.widgets["seed_kind"].setCurrentText("background")
        _drag(qtbot, view, [_point(view, (x + RING * np.cos(a), y + RING * np.sin(a), z))
                            for a in np.linspace(0, 2 * np.pi, 48)])
    qtbot.waitUntil(lambda: not runner.busy() and not window.view.tools.grow.pending(), timeout=60_000)
    preview = window.view.tools.grow.preview
    grown = np.zeros(volume.shape_zyx, bool)
    grown.reshape(-1)[preview.delta.global_index(volume.shape_zyx)] = preview.delta.new == new
    seeds = window.view.tools.grow.seeds[z] != 0
    candidates = np.argwhere(grown[z] & ~seeds)
    assert len(candidates) > 20

    image = view.render_slice()
    hu = volume.array[z]
    # pairs of a preview voxel and a body voxel (outside the ring) of the same grey: the overlay makes the difference
    far = np.argwhere((segmented[z] == 1) & ~grown[z] & ((np.arange(hu.shape[0])[:, None] - y) ** 2
                                                          + (np.arange(hu.shape[1])[None, :] - x) ** 2 > (RING + 6) ** 2))
    differences = []
    for gy, gx in candidates[:: max(1, len(candidates) // 15)]:
        same = far[np.abs(hu[far[:, 0], far[:, 1]] - hu[gy, gx]) <= 2]
        if len(same) == 0:
            continue
        by, bx = same[0]
        shown = _rgb(image, view, (int(gx), int(gy), z), volume.size_xyz)
        around = _rgb(image, view, (int(bx), int(by), z), volume.size_xyz)
        differences.append(float(np.linalg.norm(shown - around)))
    assert len(differences) >= 5
    assert min(differences) > 40, differences  # label 2's old brown was about 14 from body here
    view.update()
    window.grab().save(str(artifacts_dir / "new_label_colour_grow_over_body.png"))
    options.buttons["seeds", "apply"].click()
    assert doc.labels[new].color == colour and (doc.label_map.array == new).sum() == (preview.delta.new == new).sum()
