"""The window is told when its study is open in another medseg process (a real one, holding the study's
lock): it names that process and opens a copy only when asked; a lock whose holder was killed (SIGKILL) is
taken over only after the user agrees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox

from medseg.edit.journal import default_root
from medseg.edit.study_lock import study_state

REPO = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from medseg.edit.document import SegmentationDocument

    doc = SegmentationDocument()
    doc.enable_autosave(Path(sys.argv[1]))
    doc.claim_study(sys.argv[2])
    print("holding", flush=True)
    sys.stdin.read()
""")


def _answer(window, button_text: str | None, seen: list[str]) -> None:
    """Read the study prompt once it is up (it runs its own event loop), then click ``button_text``
    (None: Cancel)."""
    def answer() -> None:
        box = window.editing.study_box
        if box is None or not box.isVisible():
            QTimer.singleShot(20, answer)
            return
        seen.append(box.text())
        if button_text is None:
            box.button(QMessageBox.StandardButton.Cancel).click()
            return
        next(b for b in box.buttons() if b.text() == button_text).click()

    QTimer.singleShot(0, answer)


def test_a_study_open_in_another_process_opens_as_a_copy_or_is_taken_over_after_a_kill(window, qtbot, ct_dir):
    study = ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"
    root = default_root()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), str(study)], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n", holder.stderr.read()

        seen: list[str] = []
        _answer(window, None, seen)  # Cancel: nothing is opened
        window.opener.open_path(study)
        assert len(seen) == 1 and f"process {holder.pid} on " in seen[0] and "example_ct_sm.nii.gz" in seen[0]
        assert window.document.volume is None and not window.loader.busy

        _answer(window, "Open a copy", seen)
        with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000):
            window.opener.open_path(study)
        assert f"process {holder.pid} on " in window.document.study_copy_of
        window.document.new_label_map()
        assert "a copy" in (window.document.journal.folder / "session.json").read_text()
        found, owner = study_state(root, study)
        assert found == "held" and owner.pid == holder.pid  # the copy took nothing from the first window

        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        assert study_state(root, study)[0] == "stale"
        window.document.mark_saved()
        _answer(window, "Take over", seen)
        with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000):
            window.opener.open_path(study)
        assert "ended without closing it" in seen[-1] and f"process {holder.pid} on " in seen[-1]
        found, owner = study_state(root, study)
        assert found == "held" and owner.pid == os.getpid()
        assert window.document.study_copy_of == ""
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=60)
        for stream in (holder.stdin, holder.stdout, holder.stderr):
            stream.close()


def test_a_study_that_fails_to_open_leaves_the_one_shown_held(window, qtbot, ct_dir, tmp_path):
    shown = ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"
    broken = tmp_path / "broken.nii.gz"
    broken.write_bytes(b"not an image at all" * 100)
    root = default_root()
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000):
        window.opener.open_path(shown)
    assert study_state(root, shown)[1].pid == os.getpid()
    with qtbot.waitSignal(window.loader.failed, timeout=120_000):
        window.opener.open_path(broken)
    assert window.document.image_source == str(shown)  # the image shown before is back ...
    found, owner = study_state(root, shown)
    assert found == "held" and owner.pid == os.getpid()  # ... and held again, not the file that failed
    assert study_state(root, broken)[0] == "free"
