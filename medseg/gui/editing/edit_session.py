"""Editing in the main window: the Edit panel, undo/redo shortcuts, the autosave journal,
the recovery offer after a crash, and asking before unsaved edits are lost.

Kept apart from main_window.py, which only calls :func:`install` and
:meth:`EditSession.may_discard_edits`.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QEvent, QEventLoop, QObject, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QCheckBox, QMessageBox

from medseg.edit.journal import default_root, discard, find_sessions, recover
from medseg.edit.label_map import LabelMap
from medseg.edit.merge import ADD, REPLACE
from medseg.edit.study_lock import StudyOpenElsewhere, claim_session
from medseg.errors import MedsegError
from medseg.gui.editing import tool_keys
from medseg.gui.editing.edit_tools import EditToolsPanel
from medseg.io.owner_lock import OwnerLock

log = logging.getLogger(__name__)


def journal_root() -> Path:
    """``sessions`` in medseg's data folder ($MEDSEG_DATA_DIR or the platform's: medseg.app_dirs)."""
    return default_root()


class EditSession(QObject):
    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        document = window.document
        self.document = document
        document.enable_autosave(journal_root())  # autosave: on by default
        self.panel = EditToolsPanel(document, window.view, window)
        self.panel.error.connect(window.show_error)
        self.panel.done.connect(window.viewer.focus_active_view)  # the keys go back to the view
        self.undo_action = self._action("Undo", self.undo, "Ctrl+Z", "Undo the last edit")
        self.redo_action = self._action("Redo", self.redo, "Ctrl+Shift+Z", "Redo")
        window.addActions(list(self.panel.tool_actions.values()))  # a tool's key works wherever the focus is
        window.addAction(self.panel.prompt_options.new_object_action)
        self.tool_keys = tool_keys.install(window)
        document.history_changed.connect(self._sync_actions)
        window.loader.study_loaded.connect(self._on_study_loaded)
        window.loader.failed.connect(self._on_load_failed)
        self._recovering: tuple[Path, LabelMap, Any] | None = None
        self.recovery_box: QMessageBox | None = None
        self.close_box: QMessageBox | None = None
        self.segment_box: QMessageBox | None = None  # the question before a Segment over the user's labels
        self.question_box: QMessageBox | None = None  # the unsaved-segmentation question
        self.study_box: QMessageBox | None = None  # the study is open in another window (or was, and it died)
        self._offered: OwnerLock | None = None  # the lock of the crashed session being offered (no other window offers it too)
        self._sync_actions()
        QTimer.singleShot(0, self.offer_recovery)

    def _action(self, text: str, slot, shortcut: str, tip: str) -> QAction:
        action = QAction(text, self.window)
        action.setShortcut(QKeySequence(shortcut))
        action.setToolTip(tip)
        action.triggered.connect(slot)
        self.window.addAction(action)  # the key works without a visible menu
        return action

    def install_menu(self) -> None:
        """The Edit menu, after File (called once the window's menus exist): undo, redo and the tools."""
        menu = self.window.menuBar().addMenu("&Edit")
        menu.addAction(self.undo_action)
        menu.addAction(self.redo_action)
        menu.addSeparator()
        for action in self.panel.tool_actions.values():
            menu.addAction(action)
        actions = self.window.menuBar().actions()
        if len(actions) > 1:
            self.window.menuBar().insertMenu(actions[1], menu)

    def _sync_actions(self) -> None:
        history = self.document.history
        self.undo_action.setEnabled(history.can_undo())
        self.redo_action.setEnabled(history.can_redo())
        self.undo_action.setText(f"Undo {history.next_undo()}" if history.can_undo() else "Undo")
        self.redo_action.setText(f"Redo {history.next_redo()}" if history.can_redo() else "Redo")

    def undo(self) -> None:
        self.document.undo()

    def redo(self) -> None:
        self.document.redo()

    # --- unsaved edits --------------------------------------------------------------------
    def unsaved_text(self) -> str:
        """What is at stake, in a clinician's words (never "undo: 0 steps, 0 kb")."""
        count = self.document.unsaved_edits  # since the last save, not every step the undo history holds
        if count and self.document.history.depth:
            edits = "1 unsaved edit" if count == 1 else f"{count} unsaved edits"
            return f"The segmentation has {edits} (the last: {self.document.history.next_undo()})."
        return "The segmentation has not been saved yet."

    def _unsaved_box(self, question: str) -> QMessageBox:
        buttons = QMessageBox.StandardButton
        box = QMessageBox(QMessageBox.Icon.Warning, "Unsaved segmentation", f"{self.unsaved_text()} {question}",
                          buttons.Save | buttons.Discard | buttons.Cancel, self.window)
        box.setDefaultButton(buttons.Save)
        box.button(buttons.Discard).setText("Don't save")
        return box

    def may_discard_edits(self, what: str) -> bool:
        """True when there are no unsaved edits, the user saved them, or agrees to lose them."""
        if not self.document.unsaved:
            return True
        self.question_box = self._unsaved_box(f"Save it before you {what[:1].lower() + what[1:]}?")
        answer = self.question_box.exec()
        self.question_box = None
        if answer == QMessageBox.StandardButton.Save:
            return self._save_and_wait()
        return answer == QMessageBox.StandardButton.Discard

    # --- the study open in another window -------------------------------------------------
    def may_open_study(self, source: str) -> bool:
        """Claim ``source`` for editing in this window (medseg.edit.study_lock). When another window has it,
        the user is told which process and chooses: open a copy (autosaved apart) or cancel; when the one that
        had it died, whether to take it over. True: go on opening."""
        try:
            # a recovery the user asked for is their consent to take over from the process that crashed
            self.document.claim_study(source, take_stale=self._recovering is not None)
            return True
        except StudyOpenElsewhere as error:
            refusal = error
        except MedsegError as error:  # the lock cannot be written (a read-only data folder): edit unguarded
            log.warning("cannot lock the study for editing: %s", error)
            return True
        name = html.escape(Path(source).name or source)
        owner = html.escape(refusal.owner.describe()) if refusal.owner else "another medseg window"
        buttons = QMessageBox.StandardButton
        if refusal.stale:
            text = (f"{name} was open for editing in {owner}, which ended without closing it. Take it over? "
                    "Edits it autosaved are offered for recovery when medseg starts.")
        else:
            text = (f"{name} is already open for editing in {owner}. Editing it here too would compete with "
                    "that window: open a copy (autosaved apart; save it under its own name) or cancel and "
                    "go on in that window.")
        box = QMessageBox(QMessageBox.Icon.Warning, "Study open elsewhere", text, buttons.Cancel, self.window)
        go_on = box.addButton("Take over" if refusal.stale else "Open a copy", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(buttons.Cancel)
        self.study_box = box
        box.exec()
        self.study_box = None
        if box.clickedButton() is not go_on:
            return False
        try:
            self.document.claim_study(source, copy=not refusal.stale, take_stale=refusal.stale)
        except MedsegError as error:  # another window took it over first
            self.window.show_error(error)
            return False
        if not refusal.stale:
            self.window.notify(f"Editing a copy: {Path(source).name} is open in {self.document.study_copy_of}.",
                               "warning")
        return True

    @Slot(object)
    def _on_load_failed(self, _error: BaseException) -> None:
        """A failed open put the image shown before back: its study is held again (or, when another window
        took it meanwhile, edited as a copy), not the one that failed to open. A recovery whose image did not
        open is not applied later to another: its session stays for the next start."""
        if self._recovering is not None:
            self._recovering = None
            self._let_go_of_offer()
        source = self.document.image_source
        if self.document.volume is None or not source:
            self.document.release_study()
            return
        try:
            self.document.claim_study(source)
        except StudyOpenElsewhere:
            self.document.claim_study(source, copy=True)
        except MedsegError as error:
            log.warning("cannot lock the study for editing: %s", error)

    def _save_and_wait(self) -> bool:
        """Save (Ctrl+S's way: asks for a name the first time) and wait for the worker: True once saved."""
        files = self.window.segmentation_files
        if not files.save():
            return False  # the user cancelled the file dialog, or nothing can be saved
        loop = QEventLoop()
        files.saved.connect(loop.quit)
        files.failed.connect(loop.quit)
        if files.busy:
            loop.exec()
        files.saved.disconnect(loop.quit)
        files.failed.disconnect(loop.quit)
        return not self.document.unsaved

    def ask_then_close(self) -> None:
        """Quitting with unsaved edits: ask in a window-modal box (never blocking); Save saves then quits."""
        self.close_box = self._unsaved_box("Save it before quitting?")
        self.close_box.finished.connect(self._on_close_answer)
        self.close_box.open()

    def _on_close_answer(self, result: int) -> None:
        if result == QMessageBox.StandardButton.Discard:
            self.document.mark_saved()
            self.window.close()
        elif result == QMessageBox.StandardButton.Save:
            files = self.window.segmentation_files
            if files.save():
                files.saved.connect(self._close_after_save)

    def _close_after_save(self, _path: str) -> None:
        self.window.segmentation_files.saved.disconnect(self._close_after_save)
        if not self.document.unsaved:
            self.window.close()

    def ask_before_segment(self, model: Any, then: Callable[[str], None]) -> None:
        """Segment never destroys what is on screen unasked. When the segmentation holds a label that is
        not this model's untouched output (opened from a file, drawn, or edited), ask in a window-modal box:
        replace, add only the model's new labels, or cancel, with an offer to lock the user's labels
        first. ``then(mode)`` runs the Segment (at once when there is nothing to ask). ``model``: its card, or
        a list of the cards (name and version) of several models run together (a label any of them made
        untouched is theirs to replace)."""
        makers = list(model) if isinstance(model, (list, tuple)) else [model] if model is not None else []
        name = " + ".join(m.name for m in makers)
        theirs = [entry for entry in self.document.labels_not_made_by("")  # every label someone or something made
                  if not any(entry.provenance.made_by(m.name, m.version) for m in makers)]
        if not theirs:
            then(REPLACE)
            return
        listed = ", ".join(f"{label.name} ({label.provenance.describe()})" for label in theirs[:8])
        more = f" and {len(theirs) - 8} more" if len(theirs) > 8 else ""
        box = QMessageBox(QMessageBox.Icon.Question, "Segment over your labels",
                          f"The segmentation holds labels that {html.escape(name or 'this model')} did not make: "
                          f"{html.escape(listed)}{more}.", QMessageBox.StandardButton.NoButton, self.window)
        box.setInformativeText(
            "Replace: the model's result replaces every label that is not locked. "
            "Add new labels only: the model's labels that are not here yet go where there is no label; "
            "nothing on screen changes. Either is one step you can undo.")
        self.segment_add_button = box.addButton("Add new labels only", QMessageBox.ButtonRole.AcceptRole)
        self.segment_replace_button = box.addButton("Replace", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(self.segment_add_button)
        lock = QCheckBox(f"Lock {'this label' if len(theirs) == 1 else 'these labels'} first "
                         "(no tool and no Segment changes a locked label)", box)
        box.setCheckBox(lock)
        values = [label.value for label in theirs]
        box.finished.connect(lambda _result: self._on_segment_answer(box, lock.isChecked(), values, then))
        self.segment_box = box
        box.open()

    def _on_segment_answer(self, box: QMessageBox, lock: bool, values: list[int], then: Callable[[str], None]) -> None:
        clicked = box.clickedButton()
        self.segment_box = None
        if clicked is self.segment_add_button:
            mode = ADD
        elif clicked is self.segment_replace_button:
            mode = REPLACE
        else:
            return  # cancelled: nothing changes
        if lock:
            self.document.lock_labels(values)
        then(mode)

    def closing(self) -> None:
        """A clean quit: the journal is not needed for recovery, the study free for another window."""
        self.document.close_journal(discard=True)
        self.document.release_study()
        self._let_go_of_offer()

    # --- recovery -------------------------------------------------------------------------
    @Slot()
    def offer_recovery(self) -> None:
        root = self.document.autosave_root
        if root is None:
            return
        if not self.window.isVisible():  # shown before the window, the box ended up behind it (no window manager)
            QTimer.singleShot(50, self.offer_recovery)
            return
        sessions = [s for s in find_sessions(root) if self.document.journal is None
                    or s.folder != self.document.journal.folder]
        newest = None
        for session in sessions:  # the newest no other window is offering at the same moment
            self._offered = claim_session(session.folder)
            if self._offered is not None:
                newest = session
                break
        if newest is None:
            return
        edits = ("1 unsaved edit" if newest.edits == 1 else f"{newest.edits} unsaved edits" if newest.edits
                 else "no unsaved edits: it was saved")  # since the last save, as the quit question counts
        self.recovery_box = QMessageBox(
            QMessageBox.Icon.Question, "Recover edits",
            f"medseg did not close cleanly. Recover the segmentation you were editing "
            f"({edits}) on {Path(newest.image_source).name or 'the image'}?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Discard, self.window)
        self.recovery_box.button(QMessageBox.StandardButton.Yes).setText("Recover")  # says what it does
        steps = "1 step" if newest.steps == 1 else f"{newest.steps} steps"
        history = (f"Undo works as before the crash ({steps})." if newest.undoable and newest.steps
                   else "The recovered segmentation starts a new undo history: what was done before the crash "
                        "cannot be undone step by step." if newest.steps else "")
        self.recovery_box.setInformativeText(f"Image: {newest.image_source}" + (f"\n{history}" if history else ""))
        # nothing else can be done before it is answered, and it must be seen: on top, even with no
        # window manager to stack it (the X server stacks by the order windows are raised)
        self.recovery_box.setWindowModality(Qt.WindowModality.ApplicationModal)
        self.recovery_box.finished.connect(lambda result, s=newest: self._on_recovery_answer(result, s))
        self.recovery_box.show()  # (open() would make it window-modal only)
        self.recovery_box.raise_()
        self.recovery_box.activateWindow()
        # The window's native window is made again when the 3D view's OpenGL surface joins it, and with no
        # window manager the remade window is mapped over the box: raise the box again whenever that happens.
        self._on_top = _RaiseOnRemap(self.recovery_box, self.window)
        self.recovery_box.finished.connect(lambda _result: self._on_top.detach())

    def _on_recovery_answer(self, result: int, session) -> None:
        if result != QMessageBox.StandardButton.Yes:
            discard(session.folder)
            self._let_go_of_offer()
            return
        self.recover(session.folder)

    def _let_go_of_offer(self) -> None:
        offered, self._offered = self._offered, None
        if offered is not None:
            offered.release()

    def recover(self, folder: Path) -> None:
        from medseg.edit.journal_history import recover_history

        try:
            source, label_map = recover(folder)
            try:
                history = recover_history(folder)
            except Exception:  # the voxels came back; only their undo steps did not
                log.warning("the undo history of the recovered session could not be rebuilt", exc_info=True)
                history = None
        except MedsegError as error:
            self._let_go_of_offer()
            self.window.show_error(error)
            return
        self._recovering = (folder, label_map, history)
        self.window.opener.open_path(source, auto_load=True)

    @Slot(object)
    def _on_study_loaded(self, volume) -> None:
        if self._recovering is None:
            return
        folder, label_map, history = self._recovering
        self._recovering = None
        if not label_map.same_grid(volume):
            self.window.show_error(MedsegError("the recovered segmentation does not fit the image opened from its "
                                               "source (it changed on disk?); the autosave is kept", path=folder))
            return
        self.document.set_label_map(label_map, description="recovered")
        # the undo history comes back with it (as far as the journal holds it), and where it was saved
        self.document.mark_recovered(*((history.history, history.saved_position) if history is not None else ()))
        discard(folder)
        self._let_go_of_offer()
        depth = self.document.history.depth
        undo = (f"; {depth} step{'s' if depth != 1 else ''} to undo" if history is not None and depth
                else "; a new undo history starts here")
        saved = " (not saved yet: Ctrl+S)" if self.document.unsaved else ""
        self.window.notify(f"Recovered the segmentation from the autosave journal{undo}{saved}.", "success")
        log.info("recovered an autosaved session")


class _RaiseOnRemap(QObject):
    """Keeps ``box`` above ``window`` while it is open: after each time the window's native window is made
    or shown again (no window manager stacks them; the X server maps the newest on top)."""

    def __init__(self, box, window) -> None:
        super().__init__(box)
        self.box, self.window = box, window
        window.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        if event.type() in (QEvent.Type.WinIdChange, QEvent.Type.Show, QEvent.Type.WindowActivate):
            QTimer.singleShot(0, self._raise)
        return False

    def _raise(self) -> None:
        if self.box.isVisible():
            self.box.raise_()

    def detach(self) -> None:
        self.window.removeEventFilter(self)


def install(window) -> EditSession:
    return EditSession(window)
