"""The autosaved label table is written off the GUI thread (issue #38: hiding a group waited for an fsync),
and a crash still recovers it: after the writer's flush, and before any journal record made with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
from edit_cases import LIVER, STOMACH

from medseg.edit import session_writer as writer_module
from medseg.edit import tools
from medseg.edit.document import SegmentationDocument
from medseg.edit.journal import find_sessions, recover
from medseg.edit.session_writer import SessionWriter

RUNNER = textwrap.dedent('''
    import sys
    from pathlib import Path
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.label_map import LabelMap
    from medseg.io import read_image

    image_path, labels_path, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    doc.set_volume(read_image(image_path), source=image_path)
    doc.set_label_map(LabelMap.from_volume(read_image(labels_path), name_set="TotalSegmentator v2 (total)"))
    doc.rename_label(int(sys.argv[4]), "my liver")
    doc.set_label_color(int(sys.argv[4]), (12, 34, 56))
    doc.set_labels_visible([int(sys.argv[5])], False)
    doc.set_labels_locked([int(sys.argv[5])], True)
    assert doc.journal.flush(timeout=60)
    print("flushed", flush=True)
    sys.stdin.read()  # wait to be killed
''')


def test_table_changes_survive_a_kill_once_the_writer_has_flushed(abdomen_files, tmp_path: Path):
    root = tmp_path / "sessions"
    root.mkdir()
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    process = subprocess.Popen([sys.executable, str(script), str(abdomen_files[0]), str(abdomen_files[1]), str(root),
                                str(LIVER), str(STOMACH)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline().strip()  # type: ignore[union-attr]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert line == "flushed" and process.returncode == -signal.SIGKILL

    (session,) = find_sessions(root)
    _, label_map = recover(session.folder)
    liver, stomach = label_map.labels[LIVER], label_map.labels[STOMACH]
    assert (liver.name, liver.color, liver.visible) == ("my liver", (12, 34, 56), True)
    assert (stomach.visible, stomach.locked) == (False, True)


def _blocking_writes(monkeypatch):
    """Every atomic write of session.json waits for ``release``; ``started`` is set when one waits."""
    started, release = threading.Event(), threading.Event()
    real = writer_module.atomic_write_text

    def write(path, text, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            assert release.wait(60)
        return real(path, text, *args, **kwargs)

    monkeypatch.setattr(writer_module, "atomic_write_text", write)
    return started, release


def test_a_table_change_returns_before_the_disk_and_an_edit_after_it_waits_for_it(abdomen, tmp_path, monkeypatch):
    image, label_map = abdomen
    doc = SegmentationDocument()
    doc.enable_autosave(tmp_path)
    doc.set_volume(image, source="x")
    doc.set_label_map(label_map)
    folder = doc.journal.folder
    started, release = _blocking_writes(monkeypatch)

    def table_on_disk() -> dict:
        return {row["value"]: row for row in json.loads((folder / "session.json").read_text())["labels"]}

    doc.rename_label(LIVER, "hepar")  # returns while the writer thread is held at the disk
    assert started.wait(60)
    assert table_on_disk()[LIVER]["name"] == "liver"
    doc.set_label_color(LIVER, (1, 2, 3))  # waits behind the rename: the latest table wins

    # The writer is let go only when something waits for it: an edit's journal record must not reach the
    # disk before the table it was made with, so the edit waits for the pending table (were it written
    # first, the writer would still be held and the recovered table would lack the rename).
    writer = doc.journal.session_writer
    real_flush = writer.flush

    def flush(timeout=None):
        release.set()
        return real_flush(timeout)

    monkeypatch.setattr(writer, "flush", flush)
    center = tuple(int(c) for c in np.argwhere(label_map.array == LIVER)[0])
    doc.apply(tools.dab(doc.label_map, center, 3.0, LIVER), "dab")
    assert release.is_set()
    _, recovered = recover(folder)
    assert recovered.labels[LIVER].name == "hepar"
    assert np.array_equal(recovered.array, doc.label_map.array)
    assert writer.flush(timeout=60) and table_on_disk()[LIVER]["color"] == [1, 2, 3]
    doc.close_journal()
    assert find_sessions(tmp_path) == []


def test_a_generation_switch_is_never_overtaken_by_an_older_table(tmp_path, monkeypatch):
    """write_now (the switch to a new base) while a background write of the old table waits at the disk:
    the file ends with the switch's text, whatever order the threads run in."""
    writer = SessionWriter(tmp_path / "session.json")
    started, release = _blocking_writes(monkeypatch)
    writer.request({"generation": 1})
    assert started.wait(60)  # held at the disk
    writer.request({"generation": 1, "labels": "newer"})  # waiting behind it
    switched = threading.Thread(target=writer.write_now, args=({"generation": 2},))
    switched.start()  # given after both: neither may land after it
    release.set()
    switched.join(60)
    assert writer.flush(timeout=60)
    writer.stop()
    assert json.loads((tmp_path / "session.json").read_text())["generation"] == 2
