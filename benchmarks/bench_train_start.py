"""Where the time from Start to the first plotted point goes in the Train & Export tab (issue #42.16).

The README's 5.1 s (bench_train.py --gui-only) is one 122 × 101 × 30 case; a user fine-tuning a new
label on corrected clinical cases waited about 60 s. Here the tab (offscreen) fine-tunes the starter
model, one epoch, on cases as the Segment tab's "Add current case" writes them: real CTs from
shared/data with the starter's rule labels and, on lung1, its tumour as a new label (lung1 512 × 512
× 48, the tilted GE head on its regular grid 512 × 611 × 37, example_ct_dicom 512 × 512 × 20; the
last one held out for validation). Every event is timed from Start as the GUI thread receives it,
and the steps between are printed: the engine starting (thread, imports, manifest, base model),
each case loaded and resampled, the network built, the first iteration, the first plotted point.

    .venv/bin/python benchmarks/bench_train_start.py [--repeats 3] [--cases 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data")) / "ct"


def _workspace(folder: Path, cases: int):
    """A training set of editor cases (image + label map), as "Add current case" saves them."""
    import numpy as np

    from medseg.io import load, read_image
    from medseg.model.rule_labels import STARTER_LABELS, rule_label_map
    from medseg.model.training_set import TrainingSet

    training_set = TrainingSet(folder, "bench-start")
    names = {v: n for v, n in STARTER_LABELS.items() if v}
    sources = [("lung1", DATA / "pyradiomics_lung1" / "lung1_image.nrrd", DATA / "pyradiomics_lung1" / "lung1_label.nrrd"),
               ("head", DATA / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing", None),
               ("abdomen", DATA / "totalsegmentator" / "example_ct_dicom", None)][:cases]
    for name, image_path, tumour in sources:
        image = load(image_path) if image_path.is_dir() else read_image(image_path)
        labels = np.array(rule_label_map(image).array)
        table = dict(names)
        if tumour is not None:
            labels[read_image(tumour).array == 1] = 4
            table[4] = "tumour"
        entry = training_set.add_editor_case(image, image.with_array(labels), table, name=name)
        entry.validation = name == "abdomen"
    return training_set


def _run(app, folder: Path, cases: int) -> dict[str, float]:
    from PySide6.QtCore import QEventLoop

    from medseg.gui.train.tab import TrainExportTab

    tab = TrainExportTab(workspace=Path(tempfile.mkdtemp(prefix="tab_", dir=folder.parent)))
    tab.resize(1400, 820)
    tab.show()
    panel, training = tab.dataset_panel, tab.training_panel
    panel._add_dataset(str(folder / "medseg-dataset.json"), "manifest")  # the Dataset page's Add dataset…
    events = QEventLoop()
    while panel.job is not None:
        events.processEvents()
        time.sleep(0.001)
    tab.pages.setCurrentWidget(training)
    training.refresh_labels()
    training.epochs.setValue(1)
    training.iterations.setValue(4)
    training.batch_size.setValue(2)
    training.device.setCurrentIndex(max(0, training.device.findData("cpu")))
    marks: list[tuple[float, str]] = []
    ended: list[dict] = []
    training.run_ended.connect(ended.append)
    clicked = time.monotonic()
    assert training.start()
    training.runner.record.connect(lambda r: marks.append((time.monotonic() - clicked, r.get("event") == "preparing"
                                                           and r["text"] or r.get("event"))))
    while not ended and (training.curves.first_plotted_at is None):
        events.processEvents()
        time.sleep(0.001)
    first_plot = training.curves.first_plotted_at - clicked if training.curves.first_plotted_at else float("nan")
    training.stop()
    while not ended:
        events.processEvents()
        time.sleep(0.001)
    tab.shutdown()
    tab.close()
    steps: dict[str, float] = {}
    previous, label = 0.0, "engine starting (thread, imports, manifest, base model)"
    for at, what in marks:
        if what in ("message", "fallback", "checkpoint"):
            continue
        steps[label] = steps.get(label, 0.0) + at - previous
        previous, label = at, str(what)
        if what == "iteration":
            break
    steps["first iteration -> first plotted point"] = first_plot - previous
    steps["Start -> first plotted point"] = first_plot
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", type=int, default=3, choices=(1, 2, 3))
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QStandardPaths
    from PySide6.QtWidgets import QApplication

    QStandardPaths.setTestModeEnabled(True)
    app = QApplication.instance() or QApplication([])
    work = Path(tempfile.mkdtemp(prefix="bench_train_start_"))
    _workspace(work / "workspace", args.cases).save()
    runs = [_run(app, work / "workspace", args.cases) for _ in range(args.repeats)]
    print(f"Train & Export tab, fine-tuning the starter (+ a tumour label) on {args.cases} editor case(s), CPU; "
          f"{args.repeats} runs: median [min-max] seconds")
    for step in runs[0]:
        values = [run.get(step, float("nan")) for run in runs]
        print(f"  {step:<62} {statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]")


if __name__ == "__main__":
    main()
