"""The Segment flow: which model Segment runs, the catalogue window, the run itself and what it found.

Bound to the document, the study loader (which runs the job), the editing session (which asks before labels
the user has could change) and the window's services; the Segment panel shows the choices and calls here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.edit.merge import SEGMENT_STEP, moved_in_step, moved_text
from medseg.errors import MedsegError, ModalityMismatch
from medseg.gui.common.services import WindowServices
from medseg.gui.segment import model_choice
from medseg.settings import SETTINGS

if TYPE_CHECKING:  # the window hands the flow its study loader and opener (the rooms import only gui.common)
    from medseg.gui.segment.model_chooser import ModelChooser
    from medseg.gui.segment.models_dialog import ModelsDialog
    from medseg.gui.study.opening import StudyOpener
    from medseg.gui.study.study_loader import StudyLoader


class SegmentChoices(Protocol):
    """What the flow reads of the Segment panel (medseg.gui.segment.segment_panel, which imports this module:
    named here by what it offers, not imported back)."""

    model_chooser: ModelChooser

    @property
    def model_card(self) -> Any: ...
    @property
    def device(self) -> str: ...
    @property
    def postprocess(self) -> bool: ...
    @property
    def configuration(self) -> str | None: ...
    @property
    def structures(self) -> tuple[str, ...] | None: ...
    @property
    def tasks(self) -> tuple[str, ...]: ...
    @property
    def precision(self) -> str: ...
    def refresh(self) -> None: ...


class SegmentFlow(QObject):
    builtin_changed = Signal(bool)  # whether "Use the built-in model" has something to go back from

    def __init__(self, document: SegmentationDocument, loader: StudyLoader, editing: Any, services: WindowServices,
                 notice: Callable[[str], None], show_source: Callable[..., None], opener: StudyOpener,
                 parent: QWidget) -> None:
        """``editing``: asks before a run could change labels the user has (``ask_before_segment``);
        ``notice``: a line the user must read (the notice banner); ``show_source``: SourceLine.show;
        ``opener``: refuses while a study loads, knows the last folder."""
        super().__init__(parent)
        self.document, self.loader, self.editing, self.services = document, loader, editing, services
        self.notice, self.show_source, self.opener = notice, show_source, opener
        self.parent_widget = parent
        self.panel: SegmentChoices | None = None  # the Segment panel: attach() (it is made with this flow)
        self.models_dialog: ModelsDialog | None = None  # made on first use
        self.modality_box: QMessageBox | None = None
        self._install_asked: str | None = None
        self._segment_mode = "replace"
        loader.segmented.connect(self._on_segmented)

    def attach(self, panel: SegmentChoices) -> None:
        """The Segment panel whose model, device, configuration and structures a run takes."""
        self.panel = panel

    def _attached(self) -> SegmentChoices:
        assert self.panel is not None, "the window attaches the panel as it builds both, before any menu can run"
        return self.panel

    # --- which model -------------------------------------------------------------------------
    def model_path(self) -> str | None:
        """The chosen model package (None: the built-in starter model). A catalogue id is the folder it is
        installed in. A choice that no longer opens — a catalogue model removed, a folder deleted or holding no
        model (a run folder cleaned up) — is forgotten, and the window says why."""
        from medseg.catalogue.folders import is_model_id, resolve_reference
        from medseg.gui.segment.model_chooser import chosen_reference, store_reference

        reference = chosen_reference()
        if reference is None:
            return None
        try:
            if is_model_id(reference):
                return str(resolve_reference(reference))
            reason = model_choice.missing_reason(reference)
            if reason is None:
                return reference
            raise MedsegError(f"The model chosen for Segment, {reference}, cannot be used: {reason}.")
        except MedsegError as error:
            store_reference(None)
            self._model_forgotten(f"{error} Segment uses the built-in model.")
            return None

    def _model_forgotten(self, text: str) -> None:
        if self.panel is None:  # the Segment panel asks while it is being built: say it once it is there
            QTimer.singleShot(0, lambda: self._model_forgotten(text))
            return
        self.panel.model_chooser.fill()
        self.builtin_changed.emit(False)
        self.services.notify(text, "warning", "the chosen model cannot be used")

    def use_model_reference(self, reference: str | None) -> None:
        """Segment runs ``reference`` (a catalogue id or a folder; None: the built-in starter) from now on."""
        from medseg.catalogue.folders import find_installed, is_model_id
        from medseg.gui.segment.model_chooser import store_reference

        # a folder path has slashes too: only a catalogue id can name an installed interactive model
        if reference and is_model_id(reference):
            record = find_installed(reference)
            if record is not None and record.entry.get("kind") == "interactive":
                SETTINGS.interactive_model = reference  # it segments from prompts: the Interactive AI tool runs it
                self.services.notify(f"Model for the Interactive AI tool (key I): {reference}", "info", "model chosen")
                return
        store_reference(reference)
        self._attached().model_chooser.fill()
        self.builtin_changed.emit(reference is not None)
        self.services.notify(f"Model for Segment: {reference or 'the built-in starter'}", "info", "model chosen")
        self._attached().refresh()

    def choose_model(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.parent_widget, "Choose a model package, an nnU-Net result folder "
                                                  "or a folder with an exported ONNX model",
                                                  self.model_path() or self.opener.last_folder())
        if folder:
            reason = model_choice.missing_reason(folder)
            if reason is not None:  # refused when chosen, not at the next Segment
                self.services.show_error(MedsegError(f"not a model: {reason}", path=folder,
                                                     hint="choose a medseg model package, an nnU-Net result folder or a "
                                                          "folder with an exported ONNX model"))
                return
            self.use_model_reference(folder)

    def open_models_dialog(self, install: str | None = None) -> None:
        """Segmentation ▸ Models…; ``install``: select that model and start installing it (its licence first)."""
        from medseg.gui.segment.models_dialog import ModelsDialog

        dialog = self.models_dialog
        if dialog is None:
            dialog = self.models_dialog = ModelsDialog(self.parent_widget)
            dialog.model_chosen.connect(self.use_model_reference)
            dialog.installed.connect(lambda _id: self._attached().model_chooser.fill())
            dialog.installed.connect(self._use_when_asked)
        self._install_asked = install
        dialog.refresh(select=install)
        dialog.show()
        dialog.raise_()
        if install is not None:
            dialog.install_selected()

    def _use_when_asked(self, model_id: str) -> None:
        """A model installed from the Segment panel's list is the one Segment runs next."""
        if model_id == self._install_asked:
            self._install_asked = None
            self.use_model_reference(model_id)

    # --- the run -----------------------------------------------------------------------------
    def segment(self) -> None:
        """Segment with the chosen model; first ask when that could change labels the user has (see
        :meth:`EditSession.ask_before_segment`)."""
        if self.opener.refuse_when_busy():
            return
        panel = self._attached()
        if panel.tasks:  # several tasks: a label any of them made is theirs to replace
            from medseg.gui.segment.task_picker import makers

            self.editing.ask_before_segment(makers(panel.tasks), self._segment_with)
            return
        self.editing.ask_before_segment(panel.model_card, self._segment_with)

    def _segment_with(self, mode: str, allow_modality: bool = False) -> None:
        if self.opener.refuse_when_busy():
            return
        self._segment_mode = mode
        panel = self._attached()
        self.loader.segment(self.model_path(), panel.device, panel.configuration, panel.postprocess, mode,
                            allow_modality=allow_modality, structures=panel.structures, models=panel.tasks or None,
                            precision=panel.precision)

    def ask_modality(self, error: ModalityMismatch) -> None:
        """The model was trained on another modality: segment anyway only if the user says so."""
        self.modality_box = QMessageBox(QMessageBox.Icon.Warning, "medseg", error.message,
                                        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                        self.parent_widget)
        self.modality_box.setInformativeText("Segment it anyway? The result will say so.")
        self.modality_box.setDefaultButton(QMessageBox.StandardButton.No)
        self.modality_box.finished.connect(
            lambda answer: self._segment_with(self._segment_mode, allow_modality=True)
            if answer == QMessageBox.StandardButton.Yes else None)
        self.modality_box.open()

    @Slot(object)
    def _on_segmented(self, result: Any) -> None:
        found = sum(1 for ml in result.volumes_ml.values() if ml > 0)
        config = f"{result.configuration}, " if result.configuration else ""
        self.show_source(f"Model {result.model.name}: {found} label{'s' if found != 1 else ''} "
                         f"found ({config}{result.device}, {result.seconds:.1f} s)",
                         "After the network:\n" + "\n".join(result.postprocessing) if result.postprocessing else "",
                         step=self.document.history_position)
        notices = [*getattr(result, "notes", []), *(["fell back: " + "; ".join(result.fallbacks)]
                                                     if result.fallbacks else [])]
        step = self.document.history.last_step()
        moved = moved_in_step(step.labels) if step is not None and step.description.startswith(SEGMENT_STEP) else []
        # a value the run itself moved (several models into one result) is in its notes already, in its words
        mine = getattr(result, "labels", {})
        moved = [m for m in moved if not (m[2] in mine and mine[m[2]].model_value == m[1])]
        if moved:  # the model's numbers are what its users rely on: a value that had to move is said
            notices.append(moved_text(moved))
        if notices:
            self.notice("Segmentation: " + "; ".join(notices))
        precision = result.details.get("precision", "f32")
        tier = f" in {precision} (verified, not the exact float32 path)" if precision != "f32" else ""
        how = f"{result.seconds:.1f} s on {result.device}{tier}{' with ' + result.configuration if result.configuration else ''}"
        if found == 0:  # nothing found is not a success: the wrong model, or the wrong image for it
            self.services.notify(f"0 structures found by {result.model.name}: is it the model for this series? "
                                 f"(segmented in {how}; Segmentation ▸ Use the built-in model)",
                                 "warning", "segmented: 0 structures found")
        else:
            self.services.notify(f"Segmented in {how}: {found} structure{'s' if found != 1 else ''} found.",
                                 "success")
