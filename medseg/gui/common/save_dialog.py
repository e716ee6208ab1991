"""Save-as dialogs whose file name follows the chosen format, double extensions included.

Qt's file dialog swaps only the last suffix when the user picks another filter, so
``segmentation.nii.gz`` became ``segmentation.nii.dcm`` for DICOM SEG, and reopening Save as
showed ``tilt_seg.dcm`` under the NIfTI filter. Here the name's whole format suffix
(``.nii.gz``, ``.seg.dcm``, …) is one unit: choosing a filter replaces it, typing a name with a
known suffix selects the matching filter, and the dialog opens with the filter of the name it
starts from.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QCheckBox, QFileDialog, QGridLayout, QLabel, QLineEdit, QWidget

from medseg.io.formats import FORMATS, MESH_FORMATS
from medseg.model.export_formats import EXPORT_TABLE

# Suffixes a file name may carry from a format the user could have chosen before, longest first,
# so ".nii.gz" and ".seg.dcm" are each stripped as one. The documents (report, statistics) are here too:
# without ".pdf" the report's "x_report.pdf" became "x_report.pdf.pdf", and "x_report.pdf.html" as HTML.
KNOWN_SUFFIXES = tuple(sorted({".seg.nii.gz", ".seg.dcm", *(s for f in FORMATS for s in f.suffixes if s),
                               *(f.suffix for f in MESH_FORMATS), *(f.suffix for f in EXPORT_TABLE if f.suffix),
                               ".csv", ".json", ".pdf", ".html", ".htm", ".zip", ".gz"},
                              key=lambda s: (-len(s), s)))


def strip_format_suffix(name: str) -> str:
    """``name`` without its format suffix (repeatedly: Qt's ``seg.nii.dcm`` → ``seg``)."""
    stem = name
    while True:
        lower = stem.lower()
        suffix = next((s for s in KNOWN_SUFFIXES if lower.endswith(s) and len(stem) > len(s)), None)
        if suffix is None:
            return stem
        stem = stem[: -len(suffix)]


def with_format_suffix(name: str, suffix: str) -> str:
    """``name`` ending in exactly ``suffix``: a known format suffix is replaced, never appended to."""
    if not suffix:
        return name
    return strip_format_suffix(name) + suffix


def filter_suffix(name_filter: str) -> str:
    """".nii.gz" for "NIfTI label map (*.nii.gz)" (the first pattern of a filter)."""
    inside = name_filter[name_filter.rfind("(") + 1: name_filter.rfind(")")] if "(" in name_filter else ""
    pattern = inside.split()[0] if inside.split() else ""
    return pattern[1:] if pattern.startswith("*.") else ""


def filter_for(name: str, filters: list[str]) -> str | None:
    """The filter whose suffix ``name`` ends with (the longest match), if any."""
    lower = name.lower()
    matches = [f for f in filters if filter_suffix(f) and lower.endswith(filter_suffix(f))]
    return max(matches, key=lambda f: len(filter_suffix(f))) if matches else None


class SaveAsDialog(QFileDialog):
    """A save dialog over ``filters`` (each "Description (*.ext)") that keeps name and filter agreeing.

    Qt's own dialog is used (not the desktop's native one) so the name can be corrected as the filter
    changes, the same on every platform.
    """

    def __init__(self, parent: QWidget | None, caption: str, start: Path, filters: list[str],
                 option: tuple[str, str, bool] | None = None, note: str = "") -> None:
        """``option``: (text, tooltip, checked) of a checkbox under the file list (e.g. "De-identify");
        ``note``: a line under it (e.g. why a format is not offered)."""
        super().__init__(parent, caption, str(start.parent))
        self.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        self.setFileMode(QFileDialog.FileMode.AnyFile)
        self.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        self.filters = list(filters)
        self.setNameFilters(self.filters)
        chosen = filter_for(start.name, self.filters) or self.filters[0]
        self.selectNameFilter(chosen)
        self.selectFile(with_format_suffix(start.name, filter_suffix(chosen)))
        self.filterSelected.connect(self._on_filter)
        self.option: QCheckBox | None = None
        if option is not None:
            text, tip, checked = option
            self.option = QCheckBox(text, self)
            self.option.setToolTip(tip)
            self.option.setChecked(checked)
            layout = self._grid()  # one row more, across all its columns
            layout.addWidget(self.option, layout.rowCount(), 0, 1, layout.columnCount())
        self.note: QLabel | None = None
        if note:
            self.note = QLabel(note[:1].upper() + note[1:] + ".", self)
            self.note.setObjectName("formatNote")
            self.note.setWordWrap(True)
            layout = self._grid()
            layout.addWidget(self.note, layout.rowCount(), 0, 1, layout.columnCount())

    def _grid(self) -> QGridLayout:
        layout = self.layout()
        assert isinstance(layout, QGridLayout), "Qt's own (not the native) file dialog is laid out in a grid"
        return layout

    def current_name(self) -> str:
        line_edit = self.findChild(QLineEdit, "fileNameEdit")  # the name box of Qt's own dialog
        return line_edit.text() if line_edit is not None else ""

    def _on_filter(self, name_filter: str) -> None:
        # Qt has already swapped the last suffix (seg.nii.gz -> seg.nii.dcm): repair the whole name.
        name = self.current_name()
        if name:
            self.selectFile(with_format_suffix(name, filter_suffix(name_filter)))

    def chosen_path(self) -> Path | None:
        """After acceptance: the path, its suffix made to agree with the selected filter."""
        files = self.selectedFiles()
        return agreeing_path(files[0], self.selectedNameFilter(), self.filters) if files else None


def agreeing_path(path: str | Path, chosen_filter: str, filters: list[str]) -> Path:
    """``path`` ending in a format of ``filters``: a name typed with a known format keeps it (the user
    said so), any other gets the chosen filter's suffix."""
    path = Path(path)
    if filter_for(path.name, filters) is not None:
        return path
    return path.with_name(with_format_suffix(path.name, filter_suffix(chosen_filter)))


def ask_save_path(parent: QWidget | None, caption: str, start: Path, filters: list[str]) -> tuple[str, str]:
    """Run the dialog (window-modal); ("", "") when cancelled, else (path, the chosen filter)."""
    path, name_filter, _ = ask_save_path_with_option(parent, caption, start, filters, None)
    return path, name_filter


def ask_save_path_with_option(parent: QWidget | None, caption: str, start: Path, filters: list[str],
                              option: tuple[str, str, bool] | None, note: str = "") -> tuple[str, str, bool]:
    """:func:`ask_save_path` with a checkbox ``option`` (text, tooltip, checked): (path, filter, ticked);
    ``note``: a line shown under it."""
    dialog = SaveAsDialog(parent, caption, start, filters, option, note)
    if not dialog.exec():
        return "", "", False
    path = dialog.chosen_path()
    ticked = dialog.option is not None and dialog.option.isChecked()
    return (str(path), dialog.selectedNameFilter(), ticked) if path is not None else ("", "", False)


def results_folder(image_source: str | None) -> Path:
    """Where a result of this study is saved by default: the last folder the user saved a result in,
    else beside the study (the folder holding the file, or the one holding a DICOM folder), else
    Documents; never inside medseg's own folders (a PACS cache series, the demo study) and never
    an unwritable place (a CD, a read-only share)."""
    import os

    from medseg import app_dirs
    from medseg.settings import SETTINGS

    # The folder the user last saved a result in comes first: proposing the study's own folder every
    # time made them navigate back on each save (issue 42).
    candidates = [SETTINGS.results_folder, str(Path(image_source).parent) if image_source
                  else "", str(Path.home() / "Documents")]
    for candidate in candidates:
        folder = Path(str(candidate)) if candidate else None
        if folder is None or not folder.is_dir() or not os.access(folder, os.W_OK):
            continue
        if app_dirs.is_app_folder(folder):
            continue
        return folder
    return Path.home()


def remember_results_folder(path: str | Path) -> None:
    from medseg.settings import SETTINGS

    SETTINGS.results_folder = str(Path(path).parent)


def study_stem(image_source: str | None, description: str = "") -> str:
    """A file-name stem for this study's results: the image file's or folder's name, else the series
    description, made safe for every file system."""
    import re

    name = strip_format_suffix(Path(image_source).name) if image_source else ""
    name = name or description or "segmentation"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "segmentation"
