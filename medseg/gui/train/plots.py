"""Live training curves (pyqtgraph): loss per iteration (raw and smoothed), validation loss,
per-label Dice per epoch, learning rate. Events are buffered and drawn at most 5 times a
second, so a fast run cannot flood the GUI thread; hovering a plot shows the nearest value.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyqtgraph as pg
import shiboken6
from pyqtgraph.exporters import ImageExporter  # imported at the first save, it stalled the GUI
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from medseg.gui.common import wheel_guard
from medseg.io.atomic import atomic_path

REDRAW_MS = 200
SMOOTHING = 0.9  # exponential moving average of the loss (TensorBoard's default is 0.6-0.99)
PLOTS = ("loss", "validation", "dice", "lr")
PNG_SIZE = (1200, 800)


class LiveCurves(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pg.setConfigOptions(antialias=True, background="w", foreground="k")
        self.plots: dict[str, pg.PlotWidget] = {}
        grid = QGridLayout()
        titles = {"loss": "Training loss (per iteration)", "validation": "Validation loss (per epoch)",
                  "dice": "Validation Dice per label", "lr": "Learning rate"}
        for index, key in enumerate(PLOTS):
            plot = pg.PlotWidget(self, title=titles[key])
            # No grid: pyqtgraph draws it through the axes' cached pictures with alpha blending,
            # which made every repaint of the four plots 3-4x dearer (9 vs 33 ms, measured),
            # and repaints compete with the training thread. Hover gives exact values.
            plot.setLabel("bottom", "iteration" if key in ("loss", "lr") else "epoch")
            plot.setMinimumHeight(150)
            self.plots[key] = plot
            grid.addWidget(plot, index // 2, index % 2)
        self.plots["dice"].setYRange(0, 1)
        self.plots["dice"].addLegend(offset=(-5, 5))
        self.raw_curve = self.plots["loss"].plot(pen=pg.mkPen((160, 160, 160), width=1), name="raw")
        self.smooth_curve = self.plots["loss"].plot(pen=pg.mkPen((20, 90, 200), width=2), name="smoothed")
        self.validation_curve = self.plots["validation"].plot(pen=pg.mkPen((200, 80, 20), width=2), symbol="o",
                                                              symbolSize=6)
        self.lr_curve = self.plots["lr"].plot(pen=pg.mkPen((40, 140, 60), width=2))
        self.dice_curves: dict[str, pg.PlotDataItem] = {}
        self.hover = QLabel(" ", self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(grid, 1)
        layout.addWidget(self.hover)
        for key, plot in self.plots.items():
            plot.scene().sigMouseMoved.connect(lambda position, key=key: self._on_hover(key, position))
            # the wheel scrolls the page the plots are on; Ctrl + wheel zooms a plot (as in the slice views)
            plot.viewport().installEventFilter(self)
            plot.setToolTip("Ctrl + wheel zooms; drag pans; right-click for the plot's menu (View All)")
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self.redraw)
        self.clear()

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        if (event.type() == QEvent.Type.Wheel
                and not event.modifiers() & Qt.KeyboardModifier.ControlModifier):
            wheel_guard.pass_to_ancestors(watched.parentWidget(), event)  # the plot's parent, not the plot
            return True
        return False

    # --- data ------------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.steps: list[int] = []
        self.losses: list[float] = []
        self.smoothed: list[float] = []
        self.learning_rates: list[float] = []
        self.epochs: list[int] = []
        self.validation_losses: list[float] = []
        self.dice: dict[str, list[tuple[int, float]]] = {}
        self.points_plotted = 0  # points drawn so far (what the eye sees, not what arrived)
        self.first_plotted_at: float | None = None  # time.monotonic() of the first drawn point
        self._dirty = False
        for curve in (self.raw_curve, self.smooth_curve, self.validation_curve, self.lr_curve,
                      *self.dice_curves.values()):
            curve.setData([], [])

    def add(self, event: dict[str, Any]) -> None:
        """Take one event record (the ``--json`` stream); drawing happens on the timer."""
        kind = event.get("event")
        if kind == "iteration":
            loss = float(event["loss"])
            self.steps.append(int(event["step"]) + 1)
            self.losses.append(loss)
            previous = self.smoothed[-1] if self.smoothed else loss
            self.smoothed.append(SMOOTHING * previous + (1 - SMOOTHING) * loss if self.smoothed else loss)
            self.learning_rates.append(float(event["learning_rate"]))
        elif kind == "epoch":
            epoch = int(event["epoch"]) + 1
            validation = event.get("validation_loss")
            if validation is not None and not (isinstance(validation, float) and math.isnan(validation)):
                self.epochs.append(epoch)
                self.validation_losses.append(float(validation))
            for name, value in (event.get("validation_dice") or {}).items():
                if value is not None and not math.isnan(value):
                    self.dice.setdefault(name, []).append((epoch, float(value)))
        else:
            return
        self._dirty = True
        if not self._timer.isActive():
            self._timer.start()

    def redraw(self) -> None:
        if not self._dirty:
            self._timer.stop()
            return
        self._dirty = False
        self.raw_curve.setData(self.steps, self.losses)
        self.smooth_curve.setData(self.steps, self.smoothed)
        self.lr_curve.setData(self.steps, self.learning_rates)
        self.validation_curve.setData(self.epochs, self.validation_losses)
        for index, (name, points) in enumerate(self.dice.items()):
            curve = self.dice_curves.get(name)
            if curve is None:
                colour = pg.intColor(index, hues=max(len(self.dice), 3), values=1, maxValue=220)
                curve = self.plots["dice"].plot(pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=6,
                                                symbolBrush=colour, name=name)
                self.dice_curves[name] = curve
            curve.setData([p[0] for p in points], [p[1] for p in points])
        plotted = len(self.steps) + len(self.epochs) + sum(len(p) for p in self.dice.values())
        if plotted and self.first_plotted_at is None:
            self.first_plotted_at = time.monotonic()
        self.points_plotted = plotted

    # --- hover and export ----------------------------------------------------------------------------------
    def _on_hover(self, key: str, position) -> None:
        plot = self.plots[key]
        if not plot.sceneBoundingRect().contains(position):
            return
        x = plot.getPlotItem().vb.mapSceneToView(position).x()
        series = {"loss": (self.steps, self.losses, "loss"), "lr": (self.steps, self.learning_rates, "lr"),
                  "validation": (self.epochs, self.validation_losses, "validation loss")}
        if key in series:
            xs, ys, what = series[key]
            if xs:
                i = int(np.argmin(np.abs(np.asarray(xs) - x)))
                unit = "iteration" if key != "validation" else "epoch"
                self.hover.setText(f"{unit} {xs[i]}: {what} {ys[i]:.4g}")
        elif self.dice:
            epoch = max(1, round(x))
            values = [f"{n} {v:.3f}" for n, points in self.dice.items() for e, v in points if e == epoch]
            self.hover.setText(f"epoch {epoch}: Dice " + ", ".join(values) if values else " ")

    def save_png(self, folder: str | Path, size: tuple[int, int] = PNG_SIZE) -> list[Path]:
        """Each plot as a PNG in ``folder`` (the run folder keeps them), drawn at a fixed size, now."""
        from PySide6.QtWidgets import QApplication

        images = []
        for item in self.render_steps(size):
            if item is None:
                QApplication.processEvents()  # what the event loop does between steps
            else:
                images.append(item)
        return write_pngs(folder, images)

    def render_steps(self, size: tuple[int, int] = PNG_SIZE) -> Iterator[tuple[str, QImage] | None]:
        """Render the plots one small step at a time: yields (plot key, image) or None (a set-up step).

        The GUI drives the steps from its event loop and encodes the PNGs in a worker
        (:func:`write_pngs`): rendering and encoding the four plots at once blocked it for
        0.3-0.6 s at the end of every run; PNG encoding was 80 % of that. Plots on screen are
        rendered by pyqtgraph's ImageExporter at ``size[0]`` pixels wide (~8 ms each); plots
        on a hidden page (never laid out) by an off-screen copy of this widget at ``size``,
        whose construction is a first step of ~0.1 s.
        """
        self.redraw()
        if all(plot.isVisible() and plot.width() > 1 and plot.height() > 1 for plot in self.plots.values()):
            for key, plot in self.plots.items():
                exporter = ImageExporter(plot.getPlotItem())
                exporter.parameters()["width"] = size[0]
                yield key, exporter.export(toBytes=True)
            return
        yield from self._render_steps_off_screen(size)

    def _render_steps_off_screen(self, size: tuple[int, int]) -> Iterator[tuple[str, QImage] | None]:
        from PySide6.QtCore import Qt

        copy = LiveCurves()
        try:
            yield None
            copy.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
            copy.resize(*size)
            for name in ("steps", "losses", "smoothed", "learning_rates", "epochs", "validation_losses"):
                setattr(copy, name, list(getattr(self, name)))
            copy.dice = {name: list(points) for name, points in self.dice.items()}
            copy._dirty = True
            copy.show()
            yield None
            copy.redraw()
            yield None
            for key, plot in copy.plots.items():
                yield key, plot.grab().toImage()
        finally:
            if shiboken6.isValid(copy):  # not when the application was torn down between steps
                copy.close()
                copy.deleteLater()


def write_pngs(folder: str | Path, images: list[tuple[str, QImage]]) -> list[Path]:
    """``plot_<key>.png`` for each rendered plot, written atomically (QImage is safe in a worker thread)."""
    written = []
    for key, image in images:
        path = Path(folder) / f"plot_{key}.png"
        with atomic_path(path) as temporary:
            # PySide6 6.x stubs type the format as bytes, but its QImage.save takes a str there (bytes: ValueError)
            if not image.save(str(temporary), "PNG"):  # type: ignore[call-overload]
                from medseg.errors import SaveError

                raise SaveError("could not write the plot image", path=path)
        written.append(path)
    return written
