"""The label table with TotalSegmentator's 117 structures, driven through the real panel (issue 38).

Data: TotalSegmentator's own result on its example DICOM series, split to all 117 structures
(tests/many_labels_data.py), saved as a NIfTI without names and opened with the
"TotalSegmentator v2 (total)" name set, the way a user opens TotalSegmentator's output: the
labels then carry the catalogue's groups and TotalSegmentator's published codes and colours.
Oracles: the catalogue's structure table (its groups come from TotalSegmentator's own task
table, tests/catalogue), TotalSegmentator's mapping CSV, pixels of the rendered views,
highdicom for the saved SEG, the sidecar JSON as written.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import highdicom as hd
import numpy as np
import pytest
import SimpleITK as sitk
from many_labels_data import all_117
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QColorDialog
from qt_conditions import on_screen

from medseg.gui.common import save_dialog
from medseg.gui.labels.label_tree import LOCK, NAME, VOLUME

TS_NAMES = "TotalSegmentator v2 (total)"
TS_MAPPING = Path(__import__("totalsegmentator").__file__).parent / "resources" / "totalsegmentator_snomed_mapping.csv"


def _catalogue_groups() -> dict[str, list[str]]:
    document = json.loads((Path(__file__).resolve().parents[2] / "resources" / "models" / "catalogue.json").read_text())
    total = next(m for m in document["models"] if m["id"] == "totalsegmentator/total")
    groups: dict[str, list[str]] = {}
    for structure in total["structures"]:
        groups.setdefault(structure["group"], []).append(structure["name"])
    return groups


@pytest.fixture
def study(driver, window, ct_dir, tmp_path, qtbot):
    """The example series with all 117 structures on it, opened as TotalSegmentator's output."""
    folder = ct_dir / "totalsegmentator"
    image = driver.open_series(folder / "example_ct_dicom")
    grid = sitk.Image([int(n) for n in image.size_xyz], sitk.sitkUInt8)
    grid.SetSpacing([float(s) for s in image.spacing_mm])
    grid.SetOrigin([float(o) for o in image.origin_mm])
    grid.SetDirection([float(d) for d in np.asarray(image.direction).ravel()])
    placed = sitk.Resample(sitk.ReadImage(str(folder / "example_seg_dicom.nii.gz")), grid, sitk.Transform(),
                           sitk.sitkNearestNeighbor, 0)
    labels = all_117(sitk.GetArrayFromImage(placed))
    written = sitk.GetImageFromArray(labels)
    written.CopyInformation(grid)
    sitk.WriteImage(written, str(tmp_path / "total.nii.gz"))
    window.overlay_panel.names_box.setCurrentText(TS_NAMES)
    driver.open_segmentation(tmp_path / "total.nii.gz")
    assert len(window.document.labels) == 117
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)  # shortcuts reach the active window only
    return image, labels


def _rows(panel) -> dict[str, list[str]]:
    """What the table shows: group -> the names of its rows, as the proxy (search, sort) presents them."""
    proxy, shown = panel.proxy, {}
    for row in range(proxy.rowCount()):
        group = proxy.index(row, NAME)
        shown[proxy.data(group, Qt.ItemDataRole.DisplayRole)] = [
            proxy.data(proxy.index(r, NAME, group)) for r in range(proxy.rowCount(group))]
    return shown


def _group_row(panel, name: str):
    for row in range(panel.proxy.rowCount()):
        index = panel.proxy.index(row, NAME)
        if panel.model.group_at(panel.proxy.mapToSource(index)) and \
                panel.model.group_at(panel.proxy.mapToSource(index))[0] == name:
            return index
    raise AssertionError(f"no group {name}")


def _pixel(view, xyz) -> QColor:
    """The rendered slice's colour at a voxel (the view's own voxel -> pixel mapping, as test_overlay_and_presets)."""
    image = view.render_slice()
    column, row = view.axes.index_to_pixel(xyz, view.document.volume.size_xyz)
    return image.pixelColor(int(column), int(row))


def test_groups_come_from_the_model_and_codes_from_its_published_table(window, study):
    panel = window.overlay_panel.labels
    shown = _rows(panel)
    groups = _catalogue_groups()
    assert {name.rsplit(" (", 1)[0]: len(rows) for name, rows in shown.items()} == \
        {name: len(names) for name, names in groups.items()}
    assert [name.rsplit(" (", 1)[0] for name in shown] == ["organs", "vertebrae", "cardiac", "muscles", "ribs"]
    with open(TS_MAPPING, newline="", encoding="utf-8") as handle:
        published = {row["Structure"]: row for row in csv.DictReader(handle)}
    for entry in window.document.labels.values():
        row = published[entry.name]
        assert entry.type.value == row["SegmentedPropertyTypeCodeSequence.CodeValue"]
        assert (entry.modifier.value if entry.modifier else "") == row["SegmentedPropertyTypeModifierCodeSequence.CodeValue"]
        assert entry.color == tuple(int(c) for c in row["DicomRGBColor"].split(","))
    kidney = panel.model.index_of(2)
    assert "Kidney, right" in panel.model.data(kidney, Qt.ItemDataRole.ToolTipRole)


def test_search_as_you_type_finds_vertebrae_l3_and_enter_jumps_to_it(window, study, qtbot):
    panel = window.overlay_panel.labels
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is panel.search
    qtbot.keyClicks(panel.search, "l3")
    assert _rows(panel) == {"vertebrae (26)": ["vertebrae_L3"]}
    qtbot.keyClick(panel.search, Qt.Key.Key_Return)  # the one match is current: Enter jumps to it
    value = next(v for v, e in window.document.labels.items() if e.name == "vertebrae_L3")
    assert window.view.active_label == value
    assert window.document.label_at(window.view.cursor_xyz) == value  # the crosshair is on the vertebra
    # part of a name with a space for the underscore; a value; a group's name shows the whole group
    panel.search.setText("rib left")
    assert _rows(panel) == {"ribs (26)": [f"rib_left_{i}" for i in range(1, 13)]}
    panel.search.setText("51")
    assert _rows(panel) == {"cardiac (18)": ["heart"]}
    panel.search.setText("ribs")
    assert len(_rows(panel)["ribs (26)"]) == 26
    qtbot.keyClick(panel.search, Qt.Key.Key_Escape)  # clears and goes back to the list
    assert panel.search.text() == "" and sum(len(r) for r in _rows(panel).values()) == 117
    assert QApplication.focusWidget() is panel.tree


def test_hiding_the_ribs_group_hides_its_rows_overlay_and_only_them(window, study, qtbot):
    image, labels = study
    doc, panel = window.document, window.overlay_panel.labels
    ribs = [v for v, e in doc.labels.items() if e.group == "ribs"]
    assert len(ribs) == 26 and sum(doc.labels[v].name.startswith("rib_") for v in ribs) == 24
    # a rib voxel in the axial view: coloured before
    z, y, x = (int(c) for c in np.argwhere(labels == ribs[0])[0])
    window.view.set_cursor((x, y, z))
    axial = window.viewer.views["axial"]
    axial.update()
    before = _pixel(axial, (x, y, z))
    assert not before.red() == before.green() == before.blue()  # the rib's colour over the CT
    group = _group_row(panel, "ribs")
    panel.tree.setFocus()
    panel.tree.setCurrentIndex(group)
    qtbot.keyClick(panel.tree, Qt.Key.Key_Space)  # the group's visibility, by keyboard
    assert [v for v, e in doc.labels.items() if not e.visible] == ribs
    assert panel.proxy.data(group, Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Unchecked
    for row in range(panel.proxy.rowCount(group)):
        assert panel.proxy.data(panel.proxy.index(row, NAME, group), Qt.ItemDataRole.CheckStateRole) == \
            Qt.CheckState.Unchecked
    after = _pixel(axial, (x, y, z))
    assert after.red() == after.green() == after.blue()  # the rib shows as plain CT
    qtbot.keyClick(panel.tree, Qt.Key.Key_Space)
    assert all(e.visible for e in doc.labels.values())
    assert _pixel(axial, (x, y, z)) == before


def test_solo_shows_only_the_selection_and_all_brings_everything_back(window, study, qtbot):
    doc, panel = window.document, window.overlay_panel.labels
    liver = next(v for v, e in doc.labels.items() if e.name == "liver")
    panel.jump_to(liver)
    panel.solo_button.click()
    assert [v for v, e in doc.labels.items() if e.visible] == [liver]
    panel.tree.setCurrentIndex(_group_row(panel, "vertebrae"))
    panel.tree.selectionModel().clearSelection()
    panel.solo_button.click()  # a group row: its structures
    assert sorted(v for v, e in doc.labels.items() if e.visible) == \
        sorted(v for v, e in doc.labels.items() if e.group == "vertebrae")
    panel.all_button.click()
    assert all(e.visible for e in doc.labels.values())


def test_a_locked_group_keeps_its_voxels_under_the_brush(window, study, qtbot):
    image, labels = study
    doc, panel = window.document, window.overlay_panel.labels
    vertebrae = [v for v, e in doc.labels.items() if e.group == "vertebrae"]
    group = _group_row(panel, "vertebrae")
    panel.tree.setFocus()
    panel.tree.setCurrentIndex(group)
    qtbot.keyClick(panel.tree, Qt.Key.Key_Space, Qt.KeyboardModifier.ShiftModifier)  # lock, by keyboard
    assert all(doc.labels[v].locked for v in vertebrae)
    assert panel.proxy.data(group.siblingAtColumn(LOCK), Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    # paint with a big brush in another label right over a vertebra
    target = vertebrae[len(vertebrae) // 2]
    z, y, x = (int(c) for c in np.argwhere(labels == target)[len(np.argwhere(labels == target)) // 2])
    window.view.set_cursor((x, y, z))
    window.view.set_active_label(next(v for v, e in doc.labels.items() if e.name == "spleen"))
    editing = window.editing.panel
    editing.tool_buttons["brush"].click()
    editing.hu_masked.setChecked(False)
    editing.radius.setValue(25.0)
    view = window.viewer.views["axial"]
    view.update()
    point = view.index_to_widget((x, y, z))
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point.toPoint())
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point.toPoint())
    now = doc.label_map.array
    assert np.count_nonzero(now != labels) > 0  # the brush painted around it…
    for value in vertebrae:
        assert np.array_equal(now == value, labels == value)  # …but no vertebra changed


def test_recolour_persists_to_the_saved_seg_and_the_sidecar(window, study, qtbot, monkeypatch, tmp_path):
    doc, panel = window.document, window.overlay_panel.labels
    liver = next(v for v, e in doc.labels.items() if e.name == "liver")
    panel.jump_to(liver)
    monkeypatch.setattr(QColorDialog, "getColor", lambda *a, **k: QColor(12, 200, 34))
    panel.colour_button.click()
    assert doc.labels[liver].color == (12, 200, 34)
    icon = panel.proxy.data(panel.proxy.mapFromSource(panel.model.index_of(liver)), Qt.ItemDataRole.DecorationRole)
    assert QColor(icon.pixmap(12, 12).toImage().pixel(5, 5)).getRgb()[:3] == (12, 200, 34)
    for path, chosen in ((tmp_path / "total.dcm", ""), (tmp_path / "total", "NIfTI label map (*.nii.gz)")):
        monkeypatch.setattr(save_dialog, "ask_save_path_with_option", lambda *a, **k: (str(path), chosen, False))
        with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000):
            window.save_as_action.trigger()
    seg = hd.seg.segread(tmp_path / "total.dcm")
    item = next(s for s in seg.SegmentSequence if s.SegmentLabel == "liver")
    assert hd.color.CIELabColor.from_dicom_value(item.RecommendedDisplayCIELabValue).to_rgb() == (12, 200, 34)
    assert len(seg.SegmentSequence) == 117
    sidecar = json.loads((tmp_path / "total.labels.json").read_text())
    row = next(r for r in sidecar["labels"] if r["name"] == "liver")
    assert row["color"] == [12, 200, 34] and row["group"] == "organs"
    kidney = next(r for r in sidecar["labels"] if r["name"] == "kidney_left")
    assert kidney["modifier"] == {"value": "7771000", "scheme": "SCT", "meaning": "Left"}


def test_sort_by_volume_inside_groups_and_keyboard_navigation(window, study, qtbot):
    doc, panel = window.document, window.overlay_panel.labels
    volumes = doc.label_volumes_ml()
    panel.tree.header().setSortIndicator(VOLUME, Qt.SortOrder.DescendingOrder)  # a click on the "ml" header
    shown = _rows(panel)
    assert [name.rsplit(" (", 1)[0] for name in shown] == ["organs", "vertebrae", "cardiac", "muscles", "ribs"]
    by_name = {e.name: v for v, e in doc.labels.items()}
    for rows in shown.values():
        sizes = [volumes[by_name[name]] for name in rows]
        assert sizes == sorted(sizes, reverse=True)
    # arrows walk the rows, Left collapses a group, Right opens it again, Space hides a structure
    panel.tree.setFocus()
    panel.tree.setCurrentIndex(panel.proxy.index(0, NAME))  # the organs group
    qtbot.keyClick(panel.tree, Qt.Key.Key_Left)
    assert not panel.tree.isExpanded(panel.proxy.index(0, NAME))
    qtbot.keyClick(panel.tree, Qt.Key.Key_Down)  # next group: vertebrae
    assert panel.model.group_at(panel.proxy.mapToSource(panel.tree.currentIndex()))[0] == "vertebrae"
    qtbot.keyClick(panel.tree, Qt.Key.Key_Down)  # its largest structure
    value = panel.model.value_at(panel.proxy.mapToSource(panel.tree.currentIndex()))
    assert doc.labels[value].group == "vertebrae"
    qtbot.keyClick(panel.tree, Qt.Key.Key_Space)
    assert not doc.labels[value].visible
    qtbot.keyClick(panel.tree, Qt.Key.Key_Return)
    assert window.view.active_label == value


def test_the_117_row_table_is_dense_and_readable(window, study, qtbot, artifacts_dir):
    panel = window.overlay_panel.labels
    row_height = panel.tree.rowHeight(panel.proxy.index(0, NAME, panel.proxy.index(0, NAME)))
    font = panel.tree.fontMetrics().height()
    assert font <= row_height <= font + 8  # one line of text per row, nothing more
    window.resize(1400, 1000)
    window.side_scroll.ensureWidgetVisible(panel.tree)
    qtbot.waitUntil(lambda: on_screen(panel.tree) and window.width() == 1400)
    path = artifacts_dir / "gui_many_labels_table.png"
    assert window.grab().save(str(path))


def test_one_page_report_as_pdf_and_html(window, study, qtbot, monkeypatch, tmp_path, artifacts_dir):
    from html.parser import HTMLParser

    from pypdf import PdfReader

    doc = window.document
    hidden = next(v for v, e in doc.labels.items() if e.name == "costal_cartilages")
    doc.set_label_visible(hidden, False)
    for suffix in (".pdf", ".html"):
        monkeypatch.setattr(save_dialog, "ask_save_path", lambda *a, s=suffix, **k: (str(tmp_path / f"report{s}"), ""))
        window.report_action.trigger()
    (artifacts_dir / "many_labels_report.pdf").write_bytes((tmp_path / "report.pdf").read_bytes())
    pdf = PdfReader(tmp_path / "report.pdf")
    assert len(pdf.pages) == 1
    text = " ".join(pdf.pages[0].extract_text().split())  # words as the page shows them
    volumes = doc.label_volumes_ml()
    for value, entry in doc.labels.items():
        if value != hidden:
            assert entry.name in text, entry.name
    assert "costal_cartilages" not in text and "1 hidden structure left out" in text
    liver = next(v for v, e in doc.labels.items() if e.name == "liver")
    assert f"{volumes[liver]:.1f}" in text
    assert "Patient ID" in text and text.split("Structures")[1].startswith(" 116,")  # the shown ones
    images = [obj for obj in pdf.pages[0].images]
    assert len(images) == 3  # the three slice views (no OpenGL offscreen: the 3D view says so in words)
    assert "3D view not available" in text

    class Count(HTMLParser):
        rows, pictures = 0, 0

        def handle_starttag(self, tag, attrs):
            self.rows += tag == "tr"
            self.pictures += tag == "img" and dict(attrs)["src"].startswith("data:image/png;base64,")

    parser = Count()
    parser.feed((tmp_path / "report.html").read_text())
    assert parser.pictures == 3 and parser.rows > 116


def test_a_seg_totalsegmentator_wrote_opens_grouped_with_its_names_and_colours(driver, window, ct_dir, tmp_path):
    """TotalSegmentator's --output_type dicom writer on its own result: the table shows its groups (the SEG
    names TotalSegmentator as the algorithm), names and published colours."""
    import nibabel as nib
    from totalsegmentator.dicom_io import save_mask_as_dicomseg
    from totalsegmentator.map_to_binary import class_map

    folder = ct_dir / "totalsegmentator"
    nifti = nib.load(folder / "example_seg_dicom.nii.gz")
    save_mask_as_dicomseg(np.asarray(nifti.dataobj).astype(np.uint8), class_map["total"], folder / "example_ct_dicom",
                          tmp_path / "ts.dcm", nifti.affine)
    driver.open_series(folder / "example_ct_dicom")
    driver.open_segmentation(tmp_path / "ts.dcm")
    doc, panel = window.document, window.overlay_panel.labels
    groups = {name: group for group, names in _catalogue_groups().items() for name in names}
    with open(TS_MAPPING, newline="", encoding="utf-8") as handle:
        published = {row["Structure"]: row for row in csv.DictReader(handle)}
    assert len(doc.labels) == 31
    for entry in doc.labels.values():
        assert entry.group == groups[entry.name] and entry.provenance.algorithm_name == "TotalSegmentator"
        assert np.abs(np.array(entry.color) - [int(c) for c in published[entry.name]["DicomRGBColor"].split(",")]).max() <= 1
    shown = _rows(panel)
    assert sum(len(rows) for rows in shown.values()) == 31 and all(" (" in name for name in shown)


def test_the_case_list_counts_117_structures_and_names_them_all_on_hover(window, study, qtbot, tmp_path, artifacts_dir):
    """Train & Export: the case holding all 117 structures is added from the Segment tab; its row and the
    status line stay one readable line (count and first names), every name is in the tooltip."""
    panel = window.train_tab.dataset_panel
    panel.set_workspace(tmp_path / "workspace")
    panel.add_current_button.click()
    window.document.mark_saved()
    qtbot.waitUntil(lambda: panel.job is None and all(e.info is not None for e in panel.training_set.entries),
                    timeout=120_000)
    (entry,) = panel.training_set.entries
    names = [e.name for e in window.document.labels.values()]
    assert sorted(entry.info.labels_present) == sorted(names)  # the inspection's own reading of the saved case
    cell = panel.table.item(0, 4)
    assert cell.text().startswith("117 labels: ") and cell.text().endswith("(+111 more)")
    assert sorted(cell.toolTip().split(", ")) == sorted(names)
    assert "117 labels: " in panel.status.text() and sorted(panel.status.toolTip().split(", ")) == sorted(names)
    assert panel.table.columnWidth(4) < panel.fontMetrics().horizontalAdvance(", ".join(names)) / 5
    window.tabs.setCurrentIndex(window.tabs.indexOf(window.train_tab.parentWidget().parentWidget()))
    qtbot.waitUntil(lambda: on_screen(panel.table))
    assert window.grab().save(str(artifacts_dir / "gui_many_labels_case_list.png"))
