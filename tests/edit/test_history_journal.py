"""Undo/redo restores exact states; the budget evicts the oldest steps; the journal survives SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from edit_cases import LIVER, STOMACH

from medseg.edit import tools
from medseg.edit.document import SegmentationDocument
from medseg.edit.journal import HEADER, find_sessions, journal_file, recover


@pytest.fixture
def doc(abdomen):
    image, label_map = abdomen
    document = SegmentationDocument()
    document.set_volume(image, source="example_ct_sm.nii.gz")
    document.set_label_map(label_map)
    return document


def test_undo_redo_restore_exact_states(doc):
    lm = doc.label_map
    states = [lm.array.copy()]
    liver = np.argwhere(lm.array == LIVER).mean(axis=0)
    edits = [
        ("brush", tools.dab(lm, liver, 12.0, STOMACH)),
    ]
    for name, delta in edits:
        doc.apply(delta, name)
        states.append(lm.array.copy())
    for name, make in [("erase", lambda: tools.dab(lm, liver + 3, 9.0, 0, erase=True)),
                       ("grow", lambda: tools.grow(lm, STOMACH, 6.0)),
                       ("largest", lambda: tools.keep_largest(lm, STOMACH)),
                       ("threshold", lambda: tools.threshold(lm, doc.volume, 300, 3000, 50))]:
        assert doc.apply(make(), name)
        states.append(lm.array.copy())
    volumes_after = doc.label_volumes_ml()
    for state in reversed(states[:-1]):
        assert doc.undo()
        assert np.array_equal(lm.array, state)
        expected = np.bincount(lm.array.ravel())
        assert np.array_equal(lm.counts[:expected.size], expected) and not lm.counts[expected.size:].any()
    assert not doc.undo()
    for state in states[1:]:
        assert doc.redo()
        assert np.array_equal(lm.array, state)
    assert doc.label_volumes_ml() == volumes_after


def test_budget_evicts_the_oldest_steps(doc):
    lm = doc.label_map
    centre = np.argwhere(lm.array == LIVER).mean(axis=0)
    first = lm.array.copy()
    sizes = []  # each step's bytes, as the history's total grows with it
    for i in range(6):
        before = doc.history.nbytes
        doc.apply(tools.dab(lm, centre + (0, i * 3, 0), 8.0, 200 + i), f"dab {i}")
        sizes.append(doc.history.nbytes - before)
    assert all(size > 0 for size in sizes)
    doc.set_undo_budget(sum(sizes[-3:]))
    assert doc.history.depth == 3 and doc.history.evicted == 3
    assert doc.history.nbytes == sum(sizes[-3:]) <= doc.history.budget_bytes
    assert doc.history.summary().startswith("Undo: 3 steps")
    while doc.undo():
        pass
    after_three_undos = lm.array
    assert not np.array_equal(after_three_undos, first)  # the oldest three cannot be undone any more
    assert not np.isin(after_three_undos, [203, 204, 205]).any() and np.count_nonzero(after_three_undos == 202) > 0
    doc.redo()
    doc.set_undo_budget(1)  # below one step: the newest step is still kept, so the last action can be undone
    assert doc.history.depth == 1 and doc.history.redo_depth == 0


def test_memory_of_strokes_is_sparse(doc):
    lm = doc.label_map
    centre = np.argwhere(lm.array == LIVER).mean(axis=0)
    for i in range(20):
        points = [centre + (0, 0, dx) for dx in range(-10, 11, 2)]
        doc.apply(tools.stroke(lm, points, 5.0, STOMACH if i % 2 else LIVER, plane_axis=0), "stroke")
    assert doc.history.nbytes / 20 < 0.05 * lm.array.nbytes


RUNNER = textwrap.dedent('''
    import os, sys
    import numpy as np
    from pathlib import Path
    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.label_map import LabelMap
    from medseg.io import read_image

    image_path, labels_path, root, steps = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    image = read_image(image_path)
    doc.set_volume(image, source=image_path)
    doc.set_label_map(LabelMap.from_volume(read_image(labels_path)))
    lm = doc.label_map
    doc.rename_label(5, "liver")
    rng = np.random.default_rng(7)
    for i in range(steps):
        centre = np.array(lm.shape_zyx) * rng.uniform(0.2, 0.8, 3)
        if i % 5 == 3:
            doc.undo()
        elif i % 5 == 4:
            doc.apply(tools.flood_fill(lm, tuple(int(c) for c in centre), 70 + i, image=image,
                                       hu_range=(-150, 250), plane_axis=0), "fill")
        else:
            doc.apply(tools.dab(lm, centre, 6.0, 30 + i % 7, image=image), "dab")
        np.save(root / f"state_{i}.npy", lm.array)
        print(i, flush=True)
    print("done", flush=True)
    sys.stdin.read()  # wait to be killed
''')


def test_sigkill_recovery_is_voxel_exact(abdomen_files, tmp_path: Path):
    root = tmp_path / "sessions"
    root.mkdir()
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    steps = 12
    process = subprocess.Popen([sys.executable, str(script), str(abdomen_files[0]), str(abdomen_files[1]), str(root),
                                str(steps)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in process.stdout:  # type: ignore[union-attr]
        lines.append(line.strip())
        if line.strip() == "done":
            break
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL and lines[-1] == "done"

    sessions = find_sessions(root)
    assert len(sessions) == 1 and sessions[0].image_source == str(abdomen_files[0])
    assert sessions[0].edits == 8  # 10 edits, 2 of them undone: the undo counter showed 8 steps
    source, label_map = recover(sessions[0].folder)
    final = np.load(root / f"state_{steps - 1}.npy")
    assert np.array_equal(label_map.array, final)
    assert label_map.labels[LIVER].name == "liver"

    # a record torn by the kill (half written) is ignored: the state before it comes back (the journal
    # ends with the last edit's delta, then its step record)
    journal = journal_file(sessions[0].folder)
    data = journal.read_bytes()
    starts, pos = [], 0  # each record: magic, payload length, crc32 (HEADER bytes), then its payload
    while pos + HEADER <= len(data):
        starts.append(pos)
        pos += HEADER + int.from_bytes(data[pos + 4:pos + 12], "little")
    journal.write_bytes(data[:starts[-1] - 7])  # the last step record gone, the last delta torn
    _, torn = recover(sessions[0].folder)
    assert np.array_equal(torn.array, np.load(root / f"state_{steps - 2}.npy"))


def test_clean_close_leaves_nothing_to_recover(abdomen, tmp_path: Path):
    image, label_map = abdomen
    doc = SegmentationDocument()
    doc.enable_autosave(tmp_path)
    doc.set_volume(image, source="x")
    doc.set_label_map(label_map)
    doc.apply(tools.dab(doc.label_map, (10, 50, 50), 5.0, 3), "dab")
    assert len(find_sessions(tmp_path)) == 1
    doc.close_journal()
    assert find_sessions(tmp_path) == []


def test_a_stroke_is_one_edit_however_many_pieces_it_wrote(abdomen, tmp_path: Path):
    """The recovery offer counts edits as the undo counter does, not journal records (#42.6)."""
    image, label_map = abdomen
    doc = SegmentationDocument()
    doc.enable_autosave(tmp_path)
    doc.set_volume(image, source="x")
    doc.set_label_map(label_map)
    for k in range(6):  # a brush stroke: a piece written at each mouse move
        doc.stroke_apply(tools.dab(doc.label_map, (10, 40 + 3 * k, 50), 3.0, 3))
    doc.end_stroke("brush")
    doc.apply(tools.dab(doc.label_map, (20, 60, 60), 4.0, 4), "dab")
    doc.undo()
    doc.redo()
    (session,) = find_sessions(tmp_path)
    assert session.records == 6 + 1 + 2 and session.edits == doc.history.depth == 2
    doc.close_journal()
