"""A one-page report of a segmentation: study, model and version, structures with volumes, and pictures.

Made with Qt's own document engine: the page is HTML laid out by QTextDocument and printed by
QPdfWriter (PDF), or the same HTML written with the pictures inside it (one .html file a record
system can take). One A4 page holds 117 structures: they are listed in three columns, grouped as
the label table groups them, and the type shrinks until the page holds everything.

The pictures are what the window shows: the axial, coronal and sagittal views and the 3D view
(or a line saying why there is none).
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF, QSizeF, QUrl
from PySide6.QtGui import QImage, QPageLayout, QPageSize, QPdfWriter, QTextDocument

from medseg.errors import SaveError

COLUMNS = 3
FONT_SIZES = (8.0, 7.0, 6.5, 6.0, 5.5, 5.0, 4.5)  # points: the largest that keeps the report on one page
PICTURE_HEIGHT_MM = 45.0
PAGE_WIDTH_PX = 700  # A4 less its margins, at QTextDocument's 96 units per inch


@dataclass
class ReportRow:
    value: int
    name: str
    group: str
    volume_ml: float
    hu_mean: float | None
    color: tuple[int, int, int]


@dataclass
class Report:
    """What the page says (no Qt widgets: the window fills it, tests can too)."""

    title: str
    study: list[tuple[str, str]]  # (what, value): patient, study date, series…
    made_by: str  # the model(s) and versions, the file it was opened from, or "drawn by hand"
    rows: list[ReportRow]
    pictures: list[tuple[str, QImage | None, str]] = field(default_factory=list)  # (caption, image, why none)
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: datetime.now().strftime("%Y-%m-%d %H:%M"))


def _png(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    # PySide6 6.x stubs type the format as bytes, but its QImage.save takes a str there (bytes: ValueError)
    image.save(buffer, "PNG")  # type: ignore[call-overload]
    return bytes(data.data())


def _fitted(image: QImage, count: int) -> tuple[int, int]:
    """The size a picture is shown at: its share of the page's width, at most PICTURE_HEIGHT_MM tall."""
    width, height = PAGE_WIDTH_PX / max(count, 1) - 8, PICTURE_HEIGHT_MM / 25.4 * 96
    scale = min(width / max(image.width(), 1), height / max(image.height(), 1))
    return max(1, int(image.width() * scale)), max(1, int(image.height() * scale))


def report_html(report: Report, font_pt: float, embed: bool) -> str:
    """The page as HTML. ``embed``: pictures as data URIs (a standalone file); else ``picture://N`` resources."""
    e = html.escape
    study = "".join(f"<tr><td><b>{e(k)}</b></td><td>{e(v)}</td></tr>" for k, v in report.study)
    pictures = []
    for index, (caption, image, why) in enumerate(report.pictures):
        if image is None or image.isNull():
            cell = f"<i>{e(why or 'not available')}</i>"
        else:
            source = (f"data:image/png;base64,{base64.b64encode(_png(image)).decode()}" if embed
                      else f"picture://{index}")
            width, height = _fitted(image, len(report.pictures))
            cell = f'<img src="{source}" width="{width}" height="{height}">'
        pictures.append(f"<td align='center'>{cell}<br><small>{e(caption)}</small></td>")
    groups: dict[str, list[ReportRow]] = {}
    for row in report.rows:
        groups.setdefault(row.group or "", []).append(row)
    lines: list[str] = []
    for group, rows in groups.items():
        if group:
            lines.append(f"<tr><td colspan='3'><b>{e(group)}</b> ({len(rows)})</td></tr>")
        for row in rows:
            r, g, b = row.color
            hu = "" if row.hu_mean is None else f"{row.hu_mean:.0f}"
            lines.append(f"<tr><td><font color='#{r:02x}{g:02x}{b:02x}'>■</font> {e(row.name)}</td>"
                         f"<td align='right'>{row.volume_ml:.1f}</td><td align='right'>{hu}</td></tr>")
    per_column = -(-len(lines) // COLUMNS) if lines else 0
    header = "<tr><th align='left'>Structure</th><th align='right'>ml</th><th align='right'>HU</th></tr>"
    columns = "".join(
        f"<td valign='top' width='{100 // COLUMNS}%'><table cellspacing='0' cellpadding='1' width='100%'>{header}"
        f"{''.join(lines[i * per_column:(i + 1) * per_column])}</table></td>" for i in range(COLUMNS))
    total = sum(row.volume_ml for row in report.rows)
    notes = "".join(f"<li>{e(n)}</li>" for n in report.notes)
    return (f"<html><head><meta charset='utf-8'><title>{e(report.title)}</title></head>"
            f"<body style='font-family: sans-serif; font-size: {font_pt}pt'>"
            f"<h3>{e(report.title)}</h3>"
            f"<table cellspacing='0' cellpadding='1'>{study}"
            f"<tr><td><b>Segmentation</b></td><td>{e(report.made_by)}</td></tr>"
            f"<tr><td><b>Structures</b></td><td>{len(report.rows)}, {total:.1f} ml in all (HU: mean over the "
            f"structure)</td></tr></table>"
            f"<table width='100%' cellspacing='4'><tr>{''.join(pictures)}</tr></table>"
            f"<table width='100%' cellspacing='2'><tr>{columns}</tr></table>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + f"<p><small>medseg · {e(report.created)} · volumes are voxel count × voxel volume; not a diagnosis."
              f"</small></p></body></html>")


def _document(report: Report, font_pt: float, page: QSizeF) -> QTextDocument:
    document = QTextDocument()
    document.setDocumentMargin(0)
    for index, (_caption, image, _why) in enumerate(report.pictures):
        if image is not None and not image.isNull():
            document.addResource(QTextDocument.ResourceType.ImageResource, QUrl(f"picture://{index}"), image)
    document.setHtml(report_html(report, font_pt, embed=False))
    document.setPageSize(page)
    return document


def write_report_pdf(report: Report, path: str | Path) -> float:
    """One A4 page (the type shrinks until it fits); returns the point size used."""
    from medseg.io.atomic import atomic_path

    path = Path(path)
    with atomic_path(path, suffix=".pdf") as temp:
        writer = QPdfWriter(str(temp))
        writer.setResolution(300)
        writer.setTitle(report.title)
        writer.setCreator("medseg")
        writer.setPageLayout(QPageLayout(QPageSize(QPageSize.PageSizeId.A4), QPageLayout.Orientation.Portrait,
                                         QMarginsF(12, 12, 12, 12), QPageLayout.Unit.Millimeter))
        # QTextDocument lays out at 96 units per inch and print_() scales that to the writer's resolution
        area = writer.pageLayout().paintRect(QPageLayout.Unit.Point)
        page = QSizeF(area.width() * 96 / 72, area.height() * 96 / 72)
        for size in FONT_SIZES:
            document = _document(report, size, page)
            if document.pageCount() == 1:
                break
        document.print_(writer)
        del writer  # the file is finished when the writer goes
    return size


def write_report_html(report: Report, path: str | Path) -> Path:
    """The same page as one HTML file with its pictures inside."""
    from medseg.io.atomic import atomic_write_text

    return atomic_write_text(Path(path), report_html(report, 9.0, embed=True))


def write_report(report: Report, path: str | Path) -> Path:
    """PDF or HTML by the file's suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        write_report_pdf(report, path)
    elif suffix in (".html", ".htm"):
        write_report_html(report, path)
    else:
        raise SaveError("a report is a .pdf or an .html file", path=path, hint="e.g. report.pdf")
    return path


__all__ = ["Report", "ReportRow", "report_html", "write_report", "write_report_pdf", "write_report_html"]


# --- from the window ------------------------------------------------------------------------------
def report_from_window(window, identify: bool = True) -> Report:
    """The report of what ``window`` shows: its study, the labels' provenance, volumes and mean HU, the views.

    ``identify``: the patient's name and ID on the page (a report goes into the patient's record;
    without them it is for teaching or research).
    """
    from medseg.workflows.statistics import measure

    document = window.document
    volume, labels = document.volume, document.labels
    if volume is None or document.label_map is None:
        raise SaveError("there is no segmentation to report: open or segment one first")
    meta = volume.meta
    study = []
    if identify:
        study += [("Patient", meta.patient_name or "—"), ("Patient ID", meta.patient_id or "—")]
    study += [("Study date", meta.study_date or "—"), ("Study", meta.study_description or "—"),
              ("Series", f"{meta.series_description or '—'} ({volume.size_xyz[0]}×{volume.size_xyz[1]}×"
                         f"{volume.size_xyz[2]}, {' × '.join(f'{s:.2f}' for s in volume.spacing_mm)} mm)")]
    makers = sorted({(entry.provenance.algorithm_name, entry.provenance.algorithm_version)
                     for entry in labels.values() if entry.provenance.algorithm_name})
    edited = sum(entry.provenance.algorithm_type == "SEMIAUTOMATIC" for entry in labels.values())
    # a label map opened from a file is not "by hand": say which file, and what named its labels
    opened = window.segmentation_files.opened_from() if hasattr(window, "segmentation_files") else None
    made_by = ", ".join(f"{name} {version}".strip() for name, version in makers) or opened or "drawn by hand"
    if edited:
        made_by += f" ({edited} structure{'s' if edited != 1 else ''} edited by hand)"
    figures = {s.value: s for s in measure(volume, document.label_map, labels).labels}
    rows = [ReportRow(value, entry.name, entry.group, figures[value].volume_ml if value in figures else 0.0,
                      figures[value].hu_mean if value in figures else None, entry.color)
            for value, entry in labels.items() if entry.visible]
    hidden = len(labels) - len(rows)
    pictures: list[tuple[str, QImage | None, str]] = []
    for name in ("axial", "coronal", "sagittal"):
        view = window.viewer.views[name]
        pictures.append((name.capitalize(), view.grab().toImage(), ""))
    view3d = window.viewer.view3d
    image = view3d.render_image() if view3d.gl_view is not None else None
    pictures.append(("3D", image, "3D view not available here (no OpenGL)"))
    notes = [f"{hidden} hidden structure{'s' if hidden != 1 else ''} left out"] if hidden else []
    if document.unsaved:
        notes.append("the segmentation has changes that are not saved")
    return Report(f"Segmentation report: {meta.series_description or 'CT'}", study, made_by, rows, pictures, notes)


def export_report_dialog(window) -> Path | None:
    """File ▸ Export report…: ask where, write PDF or HTML, say where it went."""
    from medseg.errors import MedsegError
    from medseg.gui.common import save_dialog

    document = window.document
    source = document.image_source if document.volume is not None else ""
    description = document.volume.meta.series_description if document.volume is not None else ""
    start = save_dialog.results_folder(source) / (save_dialog.study_stem(source, description) + "_report.pdf")
    path, _ = save_dialog.ask_save_path(window, "Export report", start, ["PDF (*.pdf)", "HTML (*.html)"])
    if not path:
        return None
    try:
        written = write_report(report_from_window(window), path)
    except MedsegError as error:
        window.show_error(error)
        return None
    save_dialog.remember_results_folder(path)
    return written
