"""Issue 52 (2, 5) in the window: the quit question counts only the edits since the save; after a crash (a real
process killed with SIGKILL) the recovery offer counts the unsaved edits, says that undo works as before, and the
recovered edits can be undone with the window's Undo (the Edit panel's counter reads the steps).
Real data: pyradiomics' chest CT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QMessageBox

CRASHING = textwrap.dedent('''
    import sys
    import numpy as np
    from pathlib import Path
    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.io import read_image

    image_path, root, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    doc.set_volume(read_image(image_path), source=image_path)
    doc.new_label_map()
    np.save(out / "state_0.npy", doc.label_map.array)
    for step, centre in enumerate([(24, 200, 200), (24, 260, 260), (26, 300, 180)], start=1):
        doc.apply(tools.dab(doc.label_map, centre, 10.0, step), f"brush {step}")
        np.save(out / f"state_{step}.npy", doc.label_map.array)
        if step == 2:
            doc.mark_saved()  # Ctrl+S after the second edit
    print("done", flush=True)
    sys.stdin.read()  # wait to be killed
''')


def _drag(qtbot, view, points):
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
    for point in points[1:]:
        qtbot.mouseMove(view, point)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[-1])


def _point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def test_quit_counts_only_the_edits_since_the_save(window, driver, ct_dir, qtbot, tmp_path, artifacts_dir):
    driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    doc, view = window.document, window.viewer.views["axial"]
    window.editing.panel.tool_buttons["brush"].click()
    z = window.view.cursor_xyz[2]
    for x in (150, 250):  # brush twice
        _drag(qtbot, view, [_point(view, (x, 200, z)), _point(view, (x + 20, 200, z))])
    files = window.segmentation_files
    with qtbot.waitSignal(files.saved, timeout=60_000):
        assert files.save_to(tmp_path / "seg.nii.gz")
    _drag(qtbot, view, [_point(view, (200, 300, z)), _point(view, (220, 300, z))])  # brush once
    assert doc.history.depth == 3
    window.close()
    box = window.editing.close_box
    assert box.isVisible() and "1 unsaved edit " in box.text() and "3 unsaved" not in box.text()
    box.grab().save(str(artifacts_dir / "quit_counts_edits_since_save.png"))
    box.done(QMessageBox.StandardButton.Cancel)
    window.editing.undo_action.trigger()
    window.editing.undo_action.trigger()  # the new edit and one saved edit undone: both differ from the file
    assert doc.unsaved_edits == 1


def test_recovered_edits_can_be_undone_in_the_window(window, qtbot, ct_dir, tmp_path, artifacts_dir):
    from medseg.gui.editing.edit_session import journal_root

    image = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    script = tmp_path / "crashing.py"
    script.write_text(CRASHING)
    process = subprocess.Popen([sys.executable, str(script), str(image), str(journal_root()), str(tmp_path)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert process.stdout.readline().strip() == "done"  # type: ignore[union-attr]
    os.kill(process.pid, signal.SIGKILL)  # kill -9
    process.wait()
    assert process.returncode == -signal.SIGKILL

    window.editing.offer_recovery()
    box = window.editing.recovery_box
    assert box is not None and box.isVisible()
    assert "(1 unsaved edit)" in box.text()  # saved after two of the three
    assert "Undo works as before the crash (3 steps)." in box.informativeText()
    box.grab().save(str(artifacts_dir / "recovery_offer_counts_unsaved_edits.png"))
    doc = window.document
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: doc.label_map is not None and doc.history.depth == 3, timeout=60_000)
    np.testing.assert_array_equal(doc.label_map.array, np.load(tmp_path / "state_3.npy"))
    panel = window.editing.panel
    assert panel.history_label.text().startswith("Undo: 3 steps") and doc.unsaved_edits == 1
    assert window.editing.undo_action.text() == "Undo brush 3"
    window.grab().save(str(artifacts_dir / "recovered_with_undo_history.png"))
    for step in (2, 1, 0):
        window.editing.undo_action.trigger()
        np.testing.assert_array_equal(doc.label_map.array, np.load(tmp_path / f"state_{step}.npy"))
        if step == 2:
            assert not doc.unsaved  # back at the state that was saved before the crash
    assert panel.history_label.text().startswith("Undo: 0 steps") and not window.editing.undo_action.isEnabled()
