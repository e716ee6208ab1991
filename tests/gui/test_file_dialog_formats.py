"""The file dialogs ask the one table of formats (medseg.io.formats), issue 42 items 12 and 13:

- Open files shows every file first: most scanners write DICOM files without a suffix, and the
  "*.dcm" filter hid the whole Philips series;
- Save as offers only the formats this study can be saved in (no DICOM SEG for an NRRD study, with
  the reason on the dialog, instead of a refusal after a name was chosen), and opens in the folder
  the user last saved a result in.

The dialogs are Qt's own, shown and grabbed (test-artifacts/*.png), answered as a user would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import SimpleITK as sitk
from PySide6.QtWidgets import QFileDialog, QLineEdit, QListView

from medseg.edit.tools.threshold import threshold
from medseg.gui.common import save_dialog
from medseg.io import read_image, write_image

PHILIPS = ("dcm_qa_ct", "Philips_Ingenuity_phantom_mixed_series")


def _listed(dialog: QFileDialog) -> list[str]:
    view = dialog.findChild(QListView, "listView")
    model = view.model()
    root = view.rootIndex()
    return [model.index(row, 0, root).data() for row in range(model.rowCount(root))]


def test_open_files_lists_dicom_files_without_a_suffix(window, qtbot, ct_dir, monkeypatch, artifacts_dir) -> None:
    folder = ct_dir.joinpath(*PHILIPS)
    seen = {}

    def user_looks(parent, caption, start, filters):
        dialog = QFileDialog(parent, caption, str(folder))
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setNameFilters(filters.split(";;"))
        dialog.resize(900, 560)
        dialog.show()
        qtbot.waitUntil(lambda: len(_listed(dialog)) >= 40, timeout=20_000)
        dialog.grab().save(str(artifacts_dir / "open_files_dicom_without_suffix.png"))
        seen["filter"], seen["names"], seen["filters"] = dialog.selectedNameFilter(), _listed(dialog), filters
        dialog.close()
        return [], ""  # the user cancels: nothing is loaded

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", user_looks)
    window.open_files_action.trigger()
    assert seen["filter"] == "DICOM files and images (*)"
    assert {"S2010_I10", "S2020_I160", "S1000_I10"} <= set(seen["names"])  # no suffix, all listed
    assert len([n for n in seen["names"] if n.startswith("S2010_")]) == 28
    assert "*.nii.gz" in seen["filters"] and "*.nrrd" in seen["filters"] and "*.mha" in seen["filters"]


def _nrrd_study(ct_dir: Path, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    image = read_image(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    return write_image(image, folder / name)


def test_save_as_an_nrrd_study_offers_no_dicom_seg_says_why_and_remembers_the_folder(
        window, driver, qtbot, ct_dir, tmp_path, monkeypatch, artifacts_dir) -> None:
    study = _nrrd_study(ct_dir, tmp_path / "studies", "abdomen.nrrd")
    driver.open_image_file(study)
    doc = window.document
    doc.new_label_map()
    doc.apply(threshold(doc.label_map, doc.volume, 300, 3000, 1), "bone")
    results = tmp_path / "results"
    results.mkdir()
    seen: list[dict] = []

    def user_saves(dialog) -> int:
        dialog.resize(900, 600)
        dialog.show()
        seen.append({"filters": dialog.nameFilters(), "note": dialog.note.text() if dialog.note else "",
                     "folder": Path(dialog.directory().absolutePath())})
        dialog.grab().save(str(artifacts_dir / f"save_as_nrrd_study_{len(seen)}.png"))
        dialog.findChild(QLineEdit, "fileNameEdit").setText(str(results / f"bone{len(seen)}"))
        return 1

    monkeypatch.setattr(save_dialog.SaveAsDialog, "exec", user_saves)
    with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000) as blocker:
        window.save_as_action.trigger()
    first = seen[0]
    assert not any("DICOM SEG" in f for f in first["filters"]), first["filters"]
    assert first["filters"][0] == "NIfTI label map (*.nii.gz)" and "NRRD label map (*.nrrd)" in first["filters"]
    assert "DICOM SEG is not offered" in first["note"] and "not opened from DICOM" in first["note"]
    assert first["folder"] == study.parent  # nothing saved before: beside the study
    written = Path(blocker.args[0])
    assert written == results / "bone1.nii.gz"
    saved = sitk.GetArrayFromImage(sitk.ReadImage(str(written)))
    np.testing.assert_array_equal(saved, doc.label_map.array)

    # Another study: Save as opens where the user saved last, not beside the new study.
    other = _nrrd_study(ct_dir, tmp_path / "elsewhere", "second.nrrd")
    driver.open_image_file(other)
    doc.new_label_map()
    doc.apply(threshold(doc.label_map, doc.volume, 300, 3000, 1), "bone")
    with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000):
        window.save_as_action.trigger()
    assert seen[1]["folder"] == results


def test_save_as_a_dicom_study_offers_dicom_seg_without_a_note(window, driver, qtbot, ct_dir, monkeypatch) -> None:
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    doc = window.document
    doc.new_label_map()
    doc.apply(threshold(doc.label_map, doc.volume, 300, 3000, 1), "bone")
    seen = {}

    def user_cancels(dialog) -> int:
        seen["filters"], seen["note"] = dialog.nameFilters(), dialog.note
        return 0

    monkeypatch.setattr(save_dialog.SaveAsDialog, "exec", user_cancels)
    window.save_as_action.trigger()
    assert "DICOM SEG (*.dcm)" in seen["filters"] and seen["note"] is None
