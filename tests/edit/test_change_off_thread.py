"""A change computed in another thread (a Segment result's merge, in the worker that ran the model) is written only
while the document is still at the revision it was computed against; its large journal record is written by the
journal's writer thread, in order, before any later edit is. Real data: pyradiomics' chest CT (12.5 M voxels),
its body, lungs and bones by HU as the incoming segmentation."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.edit import tools
from medseg.edit.document import SegmentationDocument, StaleChange
from medseg.edit.journal import find_sessions, journal_file, read_journal, recover
from medseg.edit.merge import REPLACE, Segmentation, merge_change

LABELS = {1: Label(1, "body"), 2: Label(2, "lungs"), 3: Label(3, "bones")}


def thresholds(hu: np.ndarray) -> np.ndarray:
    labels = np.zeros(hu.shape, np.uint8)
    labels[hu > -300] = 1
    labels[(hu > -950) & (hu < -400)] = 2
    labels[hu > 250] = 3
    return labels


@pytest.fixture
def incoming(chest_image):
    return Segmentation(Volume(thresholds(chest_image.array), chest_image.spacing_mm, chest_image.origin_mm,
                               chest_image.direction.copy()), LABELS)


def _document(image) -> SegmentationDocument:
    doc = SegmentationDocument()
    doc.set_volume(image, source="lung1_image.nrrd")
    doc.new_label_map()
    return doc


def _prepared(doc, incoming, mode=REPLACE):
    """What the worker does: the revision first, then the change computed from the document."""
    revision = doc.revision
    return replace(merge_change(doc, incoming, mode), revision=revision)


def test_a_change_still_current_writes_what_the_merge_on_this_thread_writes(chest_image, incoming):
    here, there = _document(chest_image), _document(chest_image)
    for doc in (here, there):  # a nodule the user drew and locked: the merge goes around it
        doc.apply(tools.dab(doc.label_map, (24, 250, 250), 9.0, 7), "dab")
        doc.add_label("nodule", value=8)
        doc.stroke_apply(tools.dab(doc.label_map, (24, 300, 200), 6.0, 8))
        doc.end_stroke("brush")
        doc.set_labels_locked([8], True)
    drawn = here.label_map.array.copy()
    change = merge_change(here, incoming, REPLACE)
    assert here.apply(change.delta, "Segment", change.labels)
    prepared = _prepared(there, incoming)
    assert prepared.block is not None and prepared.block.shape == prepared.delta.shape
    assert there.apply_change(prepared, "Segment")
    np.testing.assert_array_equal(there.label_map.array, here.label_map.array)
    expected = thresholds(chest_image.array)  # the oracle: every voxel the model's but the locked nodule's
    expected[drawn == 8] = 8
    np.testing.assert_array_equal(there.label_map.array, expected)
    np.testing.assert_array_equal(there.label_map.counts[:9], np.bincount(expected.ravel(), minlength=9))
    assert there.labels == here.labels and there.history.depth == here.history.depth == 3
    there.undo()
    np.testing.assert_array_equal(there.label_map.array, drawn)


@pytest.mark.parametrize("edit", ["stroke piece", "undo", "lock", "new image"])
def test_a_change_computed_before_an_edit_is_refused_and_writes_nothing(chest_image, incoming, edit):
    doc = _document(chest_image)
    doc.apply(tools.dab(doc.label_map, (24, 250, 250), 9.0, 1), "dab")
    prepared = _prepared(doc, incoming)
    if edit == "stroke piece":  # the mouse still down: no history step yet, voxels already written
        doc.stroke_apply(tools.dab(doc.label_map, (30, 200, 200), 5.0, 1))
    elif edit == "undo":
        doc.undo()
    elif edit == "lock":  # no voxel changes, but the merge must now go around label 1
        doc.set_labels_locked([1], True)
    else:
        doc.set_volume(chest_image.with_array(chest_image.array.copy()))
    before = doc.label_map.array.copy() if doc.label_map is not None else None
    depth = doc.history.depth
    with pytest.raises(StaleChange):
        doc.apply_change(prepared, "Segment")
    assert doc.history.depth == depth
    if before is not None:
        np.testing.assert_array_equal(doc.label_map.array, before)


RUNNER = textwrap.dedent('''
    import os, signal, sys
    from dataclasses import replace
    from pathlib import Path
    import numpy as np
    from medseg.core.labels import Label
    from medseg.core.volume import Volume
    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.merge import Segmentation, merge_change
    from medseg.io import read_image

    image_path, root, then = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    image = read_image(image_path)
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    doc.set_volume(image, source=image_path)
    doc.new_label_map()
    doc.apply(tools.dab(doc.label_map, (24, 250, 250), 9.0, 7), "dab")
    np.save(root / "before.npy", doc.label_map.array)
    hu = image.array
    labels = np.where(hu > 250, 3, np.where((hu > -950) & (hu < -400), 2, np.where(hu > -300, 1, 0))).astype(np.uint8)
    incoming = Segmentation(Volume(labels, image.spacing_mm, image.origin_mm, image.direction.copy()),
                            {1: Label(1, "body"), 2: Label(2, "lungs"), 3: Label(3, "bones")})
    revision = doc.revision
    change = replace(merge_change(doc, incoming), revision=revision)
    assert change.delta.nbytes > 4 << 20  # a large record: journalled by the writer thread
    doc.apply_change(change, "Segment")
    np.save(root / "segmented.npy", doc.label_map.array)
    if then == "edit":  # the user's next edit: journalled only once the Segment record is on disk
        doc.apply(tools.dab(doc.label_map, (30, 200, 300), 8.0, 9), "dab")
        np.save(root / "edited.npy", doc.label_map.array)
    elif then in ("cut", "flushed"):
        doc.journal.flush(60)  # "cut": the writer kills the process half-way through the record meanwhile
        if then == "cut":
            sys.exit(3)  # the record was written whole: the test fails on this exit status
    os.kill(os.getpid(), signal.SIGKILL)
''')

# Run first in the runner for then == "cut": the Segment-sized record is written half, made durable, and the
# process killed there (by the journal's writer thread), as a crash in the middle of the write would.
CUT_WRITE = textwrap.dedent('''
    import os, signal, sys, zlib
    from medseg.edit import journal

    if sys.argv[3] == "cut":
        whole = journal.Journal._write_record

        def cut_short(self, magic, *payload):
            if magic != journal.MAGIC or sum(len(p) for p in payload) < journal.LARGE_RECORD_BYTES:
                return whole(self, magic, *payload)
            data = b"".join(bytes(p) for p in payload)
            length, crc = len(data), zlib.crc32(data)
            self._handle.write(magic + length.to_bytes(8, "little") + crc.to_bytes(4, "little") + data[: length // 2])
            os.fsync(self._handle.fileno())
            os.kill(os.getpid(), signal.SIGKILL)

        journal.Journal._write_record = cut_short
''')


@pytest.mark.parametrize("then", ["edit", "cut", "flushed"])
def test_a_kill_after_a_large_step_recovers_a_whole_prefix_of_the_edits(ct_dir, tmp_path: Path, then):
    """SIGKILL after a Segment-sized step: with an edit after it, recovery is exactly the last state (the edit
    waited for the step's record); killed half-way through writing the step's record, it is the state before
    the step (never a mix); killed once the record is written, the state after it."""
    root = tmp_path / "sessions"
    root.mkdir()
    script = tmp_path / "runner.py"
    script.write_text(CUT_WRITE + RUNNER)
    image = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    done = subprocess.run([sys.executable, str(script), str(image), str(root), then], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    (session,) = find_sessions(root)
    _, label_map = recover(session.folder)
    if then == "edit":
        np.testing.assert_array_equal(label_map.array, np.load(root / "edited.npy"))
        deltas, steps = read_journal(journal_file(session.folder))
        assert len(deltas) == 3 and steps == 3  # dab, Segment, dab: in order
    else:
        expected = np.load(root / ("before.npy" if then == "cut" else "segmented.npy"))
        np.testing.assert_array_equal(label_map.array, expected)
        assert not np.array_equal(np.load(root / "before.npy"), np.load(root / "segmented.npy"))  # two states
