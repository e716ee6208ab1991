"""What the Segment panel's plan says, as rich text: a model pipeline's :class:`PlanReport` (the
configuration that will run and why, the grid, tiles and memory or every configuration's estimate,
the steps after the network, where it runs) rendered the same way for every kind of model."""

from __future__ import annotations

import html
from typing import Any


def plan_html(report: Any) -> str:
    """``report`` (medseg.model.kinds.PlanReport) as the panel's rich text."""
    title = f"<b>{html.escape(report.title)}</b>"
    if report.title_note:  # "(3D U-Net)" after the title, the reason on its own line
        head = f"{title} {html.escape(report.title_note)}<br>{html.escape(report.why)}"
    else:
        head = f"{title} — {html.escape(report.why)}"
    lines = "".join(f"<br>{html.escape(line)}".replace("  ", "&nbsp;&nbsp;") for line in report.lines)
    table = ""
    if report.table_header:
        header = "".join(f"<th>{html.escape(cell)}</th>" for cell in report.table_header)
        rows = []
        for index, row in enumerate(report.table_rows):
            bold = index == report.bold_row
            cells = "".join(f"<td>{'<b>' + html.escape(c) + '</b>' if bold else html.escape(c)}</td>" for c in row)
            rows.append(f"<tr>{cells}</tr>")
        table = f"<table><tr>{header}</tr>{''.join(rows)}</table>"
    else:
        lines += "<br>"
    footer = "<br>".join(html.escape(line) for line in report.footer)
    return f"{head}{lines}{table}{footer}"
