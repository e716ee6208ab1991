"""Issue 52 (2, 5): after a crash (a real process killed with SIGKILL) the recovered edits can be undone, step by
step, back to the state the session started from, with the label table of each step; the recovery offer and the
quit question count only the edits since the last save.

The oracle is the crashed process itself: it saved its label map and table after every step, so each undo of
the recovered document is compared with the state the user had seen at that point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from medseg.edit import tools
from medseg.edit.document import SegmentationDocument
from medseg.edit.journal import find_sessions, recover
from medseg.edit.journal_history import UNFINISHED, recover_history
from medseg.io import read_image

RUNNER = textwrap.dedent('''
    import json, sys
    import numpy as np
    from pathlib import Path
    from medseg.core.labels import Label, Provenance
    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.label_map import LabelMap
    from medseg.edit.merge import ADD, Segmentation
    from medseg.edit.operations import merge_segmentation
    from medseg.io import read_image

    image_path, labels_path, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    image = read_image(image_path)
    doc.set_volume(image, source=image_path)
    doc.set_label_map(LabelMap.from_volume(read_image(labels_path)))
    lm = doc.label_map
    states = []

    def record(name):
        np.save(root / f"state_{len(states)}.npy", lm.array)
        states.append({"name": name, "depth": doc.history.depth, "next_undo": doc.history.next_undo(),
                       "labels": {str(v): e.name for v, e in doc.labels.items()}, "unsaved": doc.unsaved_edits})

    record("opened")
    for k in range(5):  # a brush stroke: five pieces, one step
        doc.stroke_apply(tools.dab(lm, (10, 40 + 4 * k, 50), 3.0, 30, image=image))
    doc.end_stroke("brush")
    record("stroke")
    doc.apply(tools.dab(lm, (20, 60, 60), 5.0, 31, image=image), "dab 1")
    record("dab 1")
    doc.mark_saved()  # Ctrl+S: the two edits above are in a file now
    record("saved")
    found = lm.with_array(np.where(lm.to_volume().array == 0, 0, 0).astype(np.uint8))
    found.array[5:15, 30:70, 30:70] = 1
    model = Provenance.model("rules", "1")
    merge_segmentation(doc, Segmentation(found, {1: Label(1, "found by a model", provenance=model)}), ADD,
                       "Segment (rules)")
    record("segment")
    doc.apply(tools.dab(lm, (30, 70, 70), 4.0, 32, image=image), "dab 2")
    record("dab 2")
    doc.undo()
    record("undo dab 2")
    doc.apply(tools.dab(lm, (25, 50, 80), 4.0, 33, image=image), "dab 3")
    record("dab 3")
    for k in range(3):  # a stroke the kill cuts: written, never ended
        doc.stroke_apply(tools.dab(lm, (15, 80, 40 + 4 * k), 3.0, 31, image=image))
    doc.journal.flush()
    record("cut stroke")
    (root / "states.json").write_text(json.dumps(states))
    print("done", flush=True)
    sys.stdin.read()  # wait to be killed
''')


def _crash(abdomen_files, tmp_path: Path) -> Path:
    root = tmp_path / "sessions"
    root.mkdir()
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    process = subprocess.Popen([sys.executable, str(script), str(abdomen_files[0]), str(abdomen_files[1]), str(root)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    for line in process.stdout:  # type: ignore[union-attr]
        if line.strip() == "done":
            break
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    return root


def test_recovered_edits_can_be_undone_step_by_step_and_only_unsaved_ones_are_counted(abdomen_files, tmp_path):
    root = _crash(abdomen_files, tmp_path)
    states = json.loads((root / "states.json").read_text())
    names = [state["name"] for state in states]
    (session,) = find_sessions(root)
    # saved after "dab 1": since then segment, dab 2, its undo (gone again), dab 3, and the cut stroke
    assert session.undoable and session.steps == states[-2]["depth"] == 4
    assert session.edits == states[-2]["unsaved"] == 2  # segment, dab 3 (the undone dab 2 is no edit any more)

    source, label_map = recover(session.folder)
    recovered = recover_history(session.folder)
    doc = SegmentationDocument()
    doc.set_volume(read_image(source), source=source)
    doc.set_label_map(label_map, description="recovered")
    doc.mark_recovered(recovered.history, recovered.saved_position)

    def state(name: str) -> np.ndarray:
        return np.load(root / f"state_{names.index(name)}.npy")

    def table(name: str) -> dict[str, str]:
        return states[names.index(name)]["labels"]

    np.testing.assert_array_equal(doc.label_map.array, state("cut stroke"))
    assert doc.history.depth == 5 and doc.history.next_undo() == UNFINISHED and doc.unsaved_edits == 3
    assert doc.undo()
    np.testing.assert_array_equal(doc.label_map.array, state("dab 3"))
    assert doc.history.next_undo() == "dab 3" and doc.unsaved_edits == 2
    assert doc.undo()
    np.testing.assert_array_equal(doc.label_map.array, state("undo dab 2"))
    assert doc.history.next_undo() == "Segment (rules)"
    assert {str(v): e.name for v, e in doc.labels.items()} == table("segment")
    assert doc.undo()  # the Segment: its voxels and its label leave
    np.testing.assert_array_equal(doc.label_map.array, state("saved"))
    assert {str(v): e.name for v, e in doc.labels.items()} == table("saved")
    assert not doc.unsaved and doc.unsaved_edits == 0  # back where it was saved
    assert doc.undo() and doc.undo()  # dab 1, then the whole stroke (one step however many pieces)
    np.testing.assert_array_equal(doc.label_map.array, state("opened"))
    assert not doc.undo()  # nothing before the session's start
    assert doc.redo() and doc.redo() and doc.redo()
    np.testing.assert_array_equal(doc.label_map.array, state("segment"))
    assert {str(v): e.name for v, e in doc.labels.items()} == table("segment")


def test_a_second_crash_keeps_the_voxels_and_never_calls_unsaved_work_saved(abdomen_files, tmp_path):
    """Recovered, undone into the recovered history, crashed again: the voxels come back exactly; the history
    reaches back only to the first recovery, and the state is not taken for the saved one."""
    root = _crash(abdomen_files, tmp_path)
    (session,) = find_sessions(root)
    source, label_map = recover(session.folder)
    recovered = recover_history(session.folder)
    second = tmp_path / "second"
    doc = SegmentationDocument()
    doc.enable_autosave(second)
    doc.set_volume(read_image(source), source=source)
    doc.set_label_map(label_map, description="recovered")
    doc.mark_recovered(recovered.history, recovered.saved_position)
    for _ in range(3):  # the cut stroke, dab 3, the Segment: back at the saved state
        doc.undo()
    assert not doc.unsaved
    doc.apply(tools.dab(doc.label_map, (12, 45, 45), 3.0, 35), "dab 4")
    shown = doc.label_map.array.copy()
    (again,) = find_sessions(second)  # the document is never closed: what a crash leaves
    assert again.edits == doc.unsaved_edits == 1
    _, label_map = recover(again.folder)
    np.testing.assert_array_equal(label_map.array, shown)
    rebuilt = recover_history(again.folder)
    assert rebuilt.saved_position is None  # its history starts at the first recovery: where it was saved is not known
    third = SegmentationDocument()
    third.set_volume(doc.volume, source=source)
    third.set_label_map(label_map)
    third.mark_recovered(rebuilt.history, rebuilt.saved_position)
    assert third.unsaved and third.history.next_undo() == "dab 4"
    doc.close_journal()


def test_a_journal_that_holds_no_step_kinds_says_the_history_starts_anew(abdomen, tmp_path):
    """A journal written before step records said what each step was: its voxels come back, the history not."""
    from medseg.edit.journal import STEP_MAGIC, journal_file

    image, label_map = abdomen
    doc = SegmentationDocument()
    doc.enable_autosave(tmp_path)
    doc.set_volume(image, source="x")
    doc.set_label_map(label_map)
    doc.journal.mark_step = lambda steps, *rest: doc.journal._write_record(STEP_MAGIC, int(steps).to_bytes(8, "little"))
    doc.apply(tools.dab(doc.label_map, (10, 50, 50), 5.0, 3), "dab")
    (session,) = find_sessions(tmp_path)
    assert not session.undoable and session.steps == session.edits == 1
    assert recover_history(session.folder) is None
    assert journal_file(session.folder).exists()
    doc.close_journal()


def test_the_quit_question_counts_edits_since_the_save(abdomen):
    """Brush twice, save, brush once: 1 unsaved edit (was 3); undoing a saved edit is one."""
    image, label_map = abdomen
    doc = SegmentationDocument()
    doc.set_volume(image, source="x")
    doc.set_label_map(label_map)
    for k in range(2):
        doc.apply(tools.dab(doc.label_map, (10, 40 + 10 * k, 50), 3.0, 30), "brush")
    doc.mark_saved()
    assert doc.unsaved_edits == 0 and not doc.unsaved
    doc.apply(tools.dab(doc.label_map, (20, 60, 60), 3.0, 31), "brush")
    assert doc.unsaved_edits == 1 and doc.history.depth == 3
    doc.undo()
    doc.undo()
    assert doc.unsaved_edits == 1  # one saved edit undone
