"""Render resources/icons/medseg.svg into the raster icons the installers need.

    .venv/bin/python installers/make_icons.py

Writes medseg-256.png (Linux hicolor), medseg.ico (Windows: 16-256 px) and medseg.icns
(macOS) next to the SVG. The outputs are committed; rerun after changing the SVG.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(QColor(0, 0, 0, 0))
    painter = QPainter(image)
    QSvgRenderer(str(ICONS / "medseg.svg")).render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PIL import Image
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (fonts/SVG need it)
    big = Image.open(io.BytesIO(render_png(1024))).convert("RGBA")
    (ICONS / "medseg-256.png").write_bytes(render_png(256))
    big.save(ICONS / "medseg.ico", sizes=[(s, s) for s in (16, 24, 32, 48, 64, 128, 256)])
    big.save(ICONS / "medseg.icns")
    for name in ("medseg-256.png", "medseg.ico", "medseg.icns"):
        print(f"{ICONS / name}: {(ICONS / name).stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
