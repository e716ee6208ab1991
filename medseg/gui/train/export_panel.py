"""Export and compare panel: export a model (ONNX opset 17, TorchScript, medseg package) with
its parity line, and evaluate several models side by side on the validation cases.

Both run what ``medseg export`` / ``medseg evaluate`` run (:func:`medseg.model.export_formats.export_model`
on a model :func:`medseg.workflows.models.open_model` opened; the use case
:func:`medseg.workflows.evaluate.evaluate`, on the device ``auto`` resolves to) in worker jobs. The evaluation keeps each model's label maps, so "Open in Segment tab with both
outputs" shows a validation case with model A's output as the editable label map and model B's
as a read-only comparison without segmenting again (a model not evaluated yet is run in a job).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from medseg.core.labels import Label
from medseg.errors import DatasetError, MedsegError
from medseg.gui.common import save_dialog
from medseg.gui.common.jobs import Job
from medseg.model.export_formats import EXPORT_TABLE


@dataclass
class ComparisonCase:
    """A validation case and two models' outputs on it (what the Segment tab opens)."""

    case: str
    image: Any  # Volume
    output_a: Any  # Volume, model A's values
    labels_a: dict[int, Label]  # model A's labels, as its card states them
    model_a: str
    output_b: Any
    labels_b: dict[int, Label]
    model_b: str


def describe_model(path: str) -> tuple[str, str]:
    """(one line for the list: name · date · base model · labels · Dice, the details with the path) of a
    model package, read from its model.json alone (no weights, no PyTorch); "" is the built-in model."""
    import datetime
    import json

    from medseg.model.package import MODEL_JSON, starter_model_path

    folder = Path(path) if path else starter_model_path()
    try:
        record = json.loads((folder / MODEL_JSON).read_text(encoding="utf-8"))
        written = datetime.datetime.fromtimestamp((folder / MODEL_JSON).stat().st_mtime)
    except (OSError, ValueError):
        return (path or "starter model (built in)"), str(folder)
    provenance = record.get("provenance") if isinstance(record.get("provenance"), dict) else {}
    labels = [str(n) for v, n in sorted((record.get("labels") or {}).items(), key=lambda item: int(item[0]))
              if str(v) != "0"]
    scores = [h.get("mean_dice") for h in provenance.get("history") or [] if isinstance(h, dict)]
    dice = [float(d) for d in scores if isinstance(d, (int, float)) and not math.isnan(d)]
    base = provenance.get("base_model")
    parts = [str(record.get("name") or folder.name) + (" (built in)" if not path else ""),
             written.strftime("%Y-%m-%d %H:%M"), f"from {base}" if base else "from scratch",
             ", ".join(labels), f"best mean Dice {max(dice):.3f}" if dice else "no validation Dice"]
    if provenance.get("stopped_by_user"):
        parts.insert(2, "stopped run")
    return " · ".join(parts), str(folder)


FORMATS = {f.listed_as: (f.key, f.suffix) for f in EXPORT_TABLE}  # the one table (medseg.model.export_formats)


class ExportComparePanel(QWidget):
    exported = Signal(object)  # ExportResult
    compared = Signal(object)  # {model name: [CaseScore]}
    open_requested = Signal(object)  # ComparisonCase: the window opens it in the Segment tab
    failed = Signal(object)

    def __init__(self, dataset: Callable[[], Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.dataset = dataset  # returns the training set's Dataset (validation cases are compared)
        self.models: list[str] = []  # package paths; "" = the starter model
        # From the last evaluation: display name -> package path, and (path, case) -> label map.
        self.model_names: dict[str, str] = {}
        self.predictions: dict[tuple[str, str], Any] = {}
        self.job: Job | None = None
        self.model_list = QListWidget(self)
        self.model_list.setMaximumHeight(110)
        add_starter = QPushButton("Add starter model", self)
        add_other = QPushButton("Add model package…", self)
        add_starter.clicked.connect(lambda: self.add_model(""))
        add_other.clicked.connect(self._choose_model)
        self.format_combo = QComboBox(self)
        self.format_combo.addItems(list(FORMATS))
        self.export_button = QPushButton("Export selected…", self)
        self.export_button.clicked.connect(lambda: self.export_selected())
        self.parity_label = QLabel("", self)
        self.parity_label.setWordWrap(True)
        self.parity_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.compare_button = QPushButton("Evaluate all on the validation cases", self)
        self.compare_button.clicked.connect(self.compare)
        self.table = QTableWidget(0, 0, self)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.status = QLabel("", self)
        self.case_combo = QComboBox(self)
        self.model_a_combo = QComboBox(self)
        self.model_b_combo = QComboBox(self)
        self.open_button = QPushButton("Open in Segment tab with both outputs", self)
        self.open_button.setToolTip("Model A's output as the editable label map, model B's as read-only outlines")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(lambda: self.open_comparison())
        open_row = QHBoxLayout()
        for text, widget in (("Case", self.case_combo), ("A (editable)", self.model_a_combo),
                             ("B (outlines)", self.model_b_combo)):
            open_row.addWidget(QLabel(text, self))
            open_row.addWidget(widget, 1)
        open_row.addWidget(self.open_button)
        models = QHBoxLayout()
        models.addWidget(add_starter)
        models.addWidget(add_other)
        models.addStretch(1)
        export = QHBoxLayout()
        export.addWidget(QLabel("Format", self))
        export.addWidget(self.format_combo)
        export.addWidget(self.export_button)
        export.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Models</b>", self))
        layout.addWidget(self.model_list)
        layout.addLayout(models)
        layout.addLayout(export)
        layout.addWidget(self.parity_label)
        layout.addWidget(self.compare_button)
        layout.addWidget(self.table, 1)
        layout.addLayout(open_row)
        layout.addWidget(self.status)

    def add_model(self, path: str) -> None:
        if path in self.models:
            return
        self.models.append(path)
        text, details = describe_model(path)
        self.model_list.addItem(text)
        self.model_list.item(self.model_list.count() - 1).setToolTip(details)
        self.model_list.setCurrentRow(self.model_list.count() - 1)

    def _choose_model(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model package")
        if folder:
            self.add_model(folder)

    def _busy(self) -> bool:
        if self.job is not None:
            self.status.setText("Still working: wait for the running export or evaluation.")
            return True
        return False

    # --- export ----------------------------------------------------------------------------------------
    def export_selected(self, out: str | None = None, check_image: Any = None, check_name: str = "") -> None:
        """Export the selected model; the parity check runs on ``check_image`` (default: a training-set case)."""
        if self._busy():
            return
        row = self.model_list.currentRow()
        if row < 0:
            self.failed.emit(MedsegError("add and select a model to export"))
            return
        fmt, suffix = FORMATS[self.format_combo.currentText()]
        model = self.models[row]
        if out is None:
            name = save_dialog.study_stem(model or "", "starter") if model else "starter"
            start = save_dialog.results_folder(None) / f"{name}{suffix or '_package'}"
            kind = self.format_combo.currentText()
            out, _ = save_dialog.ask_save_path(self, "Export to", start,
                                               [f"{kind} (*{suffix})" if suffix else f"{kind}, a new folder (*)"])
            if not out:
                return
            save_dialog.remember_results_folder(out)
        dataset_source = self.dataset

        def work(progress=None, cancel=None):
            from medseg.workflows.model_export import ExportRequest, export_models

            image, name = check_image, check_name
            if image is None:
                dataset = dataset_source()
                spec = (dataset.validation_specs or dataset.specs)[0]
                image, name = dataset.load(spec).image, f"case {spec.name}"
            return export_models(ExportRequest([model or None], fmt, out, check_volume=image, check_name=name),
                                 progress).result

        self.parity_label.setText("Exporting and checking parity…")
        self._run("export", work, self._on_exported)

    @Slot(object)
    def _on_exported(self, result: Any) -> None:
        self.job = None
        lines = [self.parity_line(report) for report in result.parity]
        self.parity_label.setText("\n".join([*lines, f"Written: {result.path}"]))
        self.exported.emit(result)

    @staticmethod
    def parity_line(report: Any) -> str:
        runtime = {"onnxruntime-cpu": "ONNX Runtime", "torchscript": "TorchScript"}.get(report.runtime, report.runtime)
        return (f"{runtime} vs PyTorch: {100 * report.agreement:.3f} % equal labels on {report.image} "
                f"({'PASS' if report.passed else 'FAIL'})")

    # --- comparison ---------------------------------------------------------------------------------------
    def compare(self) -> None:
        if self._busy():
            return
        if not self.models:
            self.failed.emit(MedsegError("add the models to compare first"))
            return
        models, dataset_source = list(self.models), self.dataset

        def work(progress=None, cancel=None):
            from medseg.workflows.evaluate import EvaluateRequest, evaluate
            from medseg.workflows.models import open_model

            dataset = dataset_source()
            specs = dataset.validation_specs
            if not specs:
                raise DatasetError("no validation cases: tick 'Validation' for at least one case")
            results, names, predictions = {}, {}, {}
            for number, model in enumerate(models):
                opened = open_model(model or None)
                yield f"evaluating {opened.name} ({number + 1} of {len(models)})"
                where = f"{Path(model).parent.name}/{Path(model).name}" if model else "built in"
                evaluation = evaluate(EvaluateRequest(opened, dataset, specs=specs, keep_predictions=True),
                                      cancel=cancel)
                results[f"{opened.name} [{where}]"] = evaluation.cases
                names[f"{opened.name} [{where}]"] = model
                predictions.update({(model, case): volume for case, volume in evaluation.predictions.items()})
            return results, names, predictions

        self.status.setText("Evaluating…")
        self._run("evaluate", work, self._on_compared)

    @Slot(object)
    def _on_compared(self, evaluated: tuple[dict[str, Any], dict[str, str], dict[tuple[str, str], Any]]) -> None:
        self.job = None
        results, self.model_names, self.predictions = evaluated
        labels = sorted({label.name for scores in results.values() for case in scores for label in case.labels})
        self.table.clear()
        headers = ["Model", "Case"] + [f"{name} Dice" for name in labels] + [f"{name} vol. diff %" for name in labels]
        self.table.setColumnCount(len(headers))
        self.table.setHorizontalHeaderLabels(headers)
        rows = [(model, case) for model, scores in results.items() for case in scores]
        self.table.setRowCount(len(rows))
        for row, (model, case) in enumerate(rows):
            by_name = {label.name: label for label in case.labels}
            cells = [model, case.case]
            cells += [_number(by_name[n].dice, "{:.3f}") if n in by_name else "" for n in labels]
            cells += [_number(by_name[n].volume_difference_percent, "{:+.1f}") if n in by_name else "" for n in labels]
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
        self.status.setText(f"{len(results)} model(s) on {len({c.case for _, c in rows})} validation case(s)")
        self._fill_open_choices(list(results), sorted({c.case for _, c in rows}))
        self.compared.emit(results)

    # --- open a case with two models' outputs ---------------------------------------------------------------
    def _fill_open_choices(self, models: list[str], cases: list[str]) -> None:
        for combo, items in ((self.case_combo, cases), (self.model_a_combo, models), (self.model_b_combo, models)):
            combo.clear()
            combo.addItems(items)
        if len(models) > 1:
            self.model_b_combo.setCurrentIndex(1)
        self.open_button.setEnabled(bool(cases) and len(models) > 0)

    def open_comparison(self, case: str | None = None, model_a: str | None = None, model_b: str | None = None) -> None:
        """Load the case's image (and any output not kept from the evaluation) in a job, then ask the
        window to open it with both outputs (``open_requested``)."""
        if self._busy():
            return
        case = case or self.case_combo.currentText()
        model_a = model_a or self.model_a_combo.currentText()
        model_b = model_b or self.model_b_combo.currentText()
        if not case or model_a not in self.model_names or model_b not in self.model_names:
            self.failed.emit(MedsegError("evaluate the models on the validation cases, then choose a case and two models"))
            return
        path_a, path_b = self.model_names[model_a], self.model_names[model_b]
        kept = {path: self.predictions.get((path, case)) for path in (path_a, path_b)}
        dataset_source = self.dataset

        def work(progress=None, cancel=None):
            from medseg.workflows.segment import Segmenter

            dataset = dataset_source()
            spec = next((s for s in dataset.specs if s.name == case), None)
            if spec is None:
                raise DatasetError(f"the case '{case}' is no longer in the training set")
            image = dataset.load(spec).image
            outputs, names = {}, {}
            for path in (path_a, path_b):
                segmenter = Segmenter(path or None)  # the device "auto" resolves to, as the evaluation's
                names[path] = dict(segmenter.card.labels)
                output = kept[path]
                if output is None or not output.same_grid(image):
                    output = segmenter.segment(image, cancel=cancel).label_map
                outputs[path] = output
            return ComparisonCase(case, image, outputs[path_a], names[path_a], model_a,
                                  outputs[path_b], names[path_b], model_b)

        self.status.setText(f"Opening {case}…")
        self._run("open comparison", work, self._on_comparison_ready)

    @Slot(object)
    def _on_comparison_ready(self, comparison: ComparisonCase) -> None:
        self.job = None
        self.status.setText(f"Opened {comparison.case}: A = {comparison.model_a}, B = {comparison.model_b}")
        self.open_requested.emit(comparison)

    def _run(self, name: str, work, on_done) -> None:
        self.job = Job(name, work, self, computes=True)  # evaluating and exporting run models
        self.job.yielded.connect(self.status.setText)
        self.job.finished_ok.connect(on_done)
        self.job.finished_error.connect(self._on_failed)
        self.job.start()

    @Slot(object)
    def _on_failed(self, error: BaseException) -> None:
        self.job = None
        self.parity_label.setText("")
        self.status.setText(f"Failed: {error}")
        self.failed.emit(error)

    def shutdown(self) -> None:
        if self.job is not None:
            self.job.wait_stopped()


def _number(value: float, pattern: str) -> str:
    return "n/a" if value is None or math.isnan(value) else pattern.format(value)
