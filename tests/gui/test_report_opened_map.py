"""Issue 52 (12): the report says what an opened label map is — the file it was opened from and what named its
labels — not "drawn or opened by hand". Real data: TotalSegmentator's example CT and its own label map."""

from __future__ import annotations

from PySide6.QtWidgets import QTextBrowser

from medseg.gui.labels.report import report_from_window, report_html


def test_the_report_names_the_file_an_opened_totalsegmentator_map_came_from(window, driver, ct_dir, qtbot, tmp_path,
                                                                            artifacts_dir):
    folder = ct_dir / "totalsegmentator"
    driver.open_image_file(folder / "example_ct_sm.nii.gz")
    window.overlay_panel.names_box.setCurrentText("TotalSegmentator v2 (total)")  # the name set for files that do not say
    driver.open_segmentation(folder / "example_seg.nii.gz")
    report = report_from_window(window, identify=False)
    assert report.made_by.startswith("opened from example_seg.nii.gz (")
    assert "described by the TotalSegmentator v2 (total) name set" in report.made_by
    assert "by hand" not in report.made_by
    browser = QTextBrowser()
    qtbot.addWidget(browser)
    browser.setHtml(report_html(report, 10.0, embed=True))
    browser.resize(900, 700)
    browser.show()
    qtbot.waitExposed(browser)
    browser.grab().save(str(artifacts_dir / "report_opened_totalsegmentator_map.png"))

    window.document.clear_label_map()  # drawn from nothing: by hand
    window.document.new_label_map()
    from medseg.edit import tools

    window.document.apply(tools.dab(window.document.label_map, (10, 50, 50), 5.0, 1), "brush")
    assert report_from_window(window, identify=False).made_by == "drawn by hand"
