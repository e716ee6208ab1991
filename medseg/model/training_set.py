"""A training set the user builds case by case (the Train & Export tab's dataset, Qt-free).

It lives in a workspace folder: editor cases saved into ``cases/<name>/`` (image + label
map + ``case.json``, written atomically by :func:`medseg.model.datasets.save_case`) and a
manifest ``medseg-dataset.json`` that lists every case (also those added from folders of
image/label pairs or an nnU-Net raw dataset, by path; DICOM + DICOM SEG pairs are converted
into ``cases/`` like editor cases) with its label names and the
train/validation split. ``medseg train WORKSPACE`` reads the same manifest, so the GUI
and the command line train on exactly the same data.

Each case is inspected once (:meth:`TrainingSet.inspect`): size, spacing, labels present,
and problems flagged - label map on another grid (resampled), label values with no name,
an empty label map, a label of the set missing from the case.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import DatasetError
from medseg.io.atomic import atomic_write_text
from medseg.model.datasets import CaseSpec, Dataset, default_colors, label_table, load_case, save_case
from medseg.model.fingerprint import FOREGROUND_SAMPLES_PER_CASE, Fingerprint, plan_for_dataset
from medseg.model.plan import Plan

MANIFEST = "medseg-dataset.json"
CASES_FOLDER = "cases"


@dataclass
class CaseInfo:
    """What the table shows for one case (filled by :meth:`TrainingSet.inspect`)."""

    size_xyz: tuple[int, int, int]
    spacing_mm: tuple[float, float, float]
    labels_present: list[str]
    problems: list[str]  # from the files (grid, unknown values, empty); see TrainingSet.problems
    foreground_sample: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))


@dataclass
class CaseEntry:
    spec: CaseSpec
    source: str  # where it was added from ("editor", a folder, an nnU-Net dataset)
    validation: bool = False
    info: CaseInfo | None = None
    label_names: list[str] = field(default_factory=list)  # the labels its source names
    described: dict[str, Label] = field(default_factory=dict)  # those its source also codes, by name
    notes: list[str] = field(default_factory=list)  # problems found while converting it (e.g. a DICOM SEG's)


class TrainingSet:
    def __init__(self, folder: str | Path, name: str = "training-set") -> None:
        self.folder = Path(folder)
        self.name = name
        self.label_names: list[str] = []  # training label order (background excluded)
        self.colors: dict[str, tuple[int, int, int]] = {}
        self.described: dict[str, Label] = {}  # label name -> what its case said (coded concept)
        self.entries: list[CaseEntry] = []

    # --- building ------------------------------------------------------------------------------
    def _add_labels(self, names: Sequence[str]) -> None:
        for name in names:
            if name and name != "background" and name not in self.label_names:
                self.label_names.append(name)

    def _unique_name(self, wanted: str, avoid_folders: bool = False) -> str:
        """A case name not used yet (nor, for saved cases, an existing case folder: nothing is overwritten)."""
        base = re.sub(r"[^A-Za-z0-9_.-]+", "_", wanted).strip("._") or "case"
        taken = {e.spec.name for e in self.entries}
        name, number = base, 2
        while name in taken or (avoid_folders and (self.folder / CASES_FOLDER / name).exists()):
            name, number = f"{base}_{number}", number + 1
        return name

    def add_editor_case(
        self, image: Volume, label_map: Volume, labels: Mapping[int, Label | str],
        colors: Mapping[int, Sequence[int]] | None = None, name: str = "case",
    ) -> CaseEntry:
        """Save the open image and its segmentation into the workspace and list it (``labels``: the
        document's Labels, kept whole in the case, or names with ``colors``)."""
        entry, colors_by_name = self.convert_case(image, label_map, labels, colors, name, "editor")
        return self.add_converted(entry, colors_by_name)

    def convert_case(
        self, image: Volume, label_map: Volume, labels: Mapping[int, Label | str],
        colors: Mapping[int, Sequence[int]] | None, name: str, source: str, notes: Sequence[str] = (),
    ) -> tuple[CaseEntry, dict[str, tuple[int, int, int]]]:
        """Write a case into ``cases/<name>/`` (atomically) without listing it yet (see :meth:`add_converted`).

        Safe in a worker thread: it only reads the set (names taken, label names) and writes a new folder.
        """
        if label_map is None or not np.any(label_map.array):
            raise DatasetError(f"case '{name}' has an empty segmentation: draw or segment something first")
        described = {int(v): given for v, given in labels.items() if int(v) != 0 and isinstance(given, Label)}
        named = {int(v): (given.name if isinstance(given, Label) else str(given)) for v, given in labels.items()
                 if int(v) != 0}
        colors = {**{v: label.color for v, label in described.items()}, **dict(colors or {})}
        present = set(np.unique(label_map.array).tolist()) - {0}
        unnamed = sorted(present - set(named))
        if unnamed:
            raise DatasetError(f"label values {unnamed[:8]} of case '{name}' have no name: name them first")
        case_name = self._unique_name(name, avoid_folders=True)
        folder = save_case(self.folder / CASES_FOLDER / case_name, image, label_map,
                           {v: described.get(v) or name_ for v, name_ in named.items()}, colors, case_name)
        colors_by_name = {named[int(v)]: tuple(int(c) for c in colour) for v, colour in (colors or {}).items()
                          if int(v) in named}
        entry = CaseEntry(CaseSpec(case_name, folder / "image.nii.gz", folder / "label.nii.gz", named), source,
                          label_names=[named[v] for v in sorted(named)], notes=list(notes),
                          described={label.name: label for label in described.values() if label.coded})
        return entry, colors_by_name  # type: ignore[return-value]

    def add_converted(self, entry: CaseEntry, colors_by_name: Mapping[str, Sequence[int]] | None = None) -> CaseEntry:
        """List a case :meth:`convert_case` wrote (its labels join the set's, new names as new labels)."""
        for label, colour in (colors_by_name or {}).items():
            self.colors.setdefault(label, tuple(int(c) for c in colour))  # type: ignore[arg-type]
        for label_name, label in entry.described.items():
            self.described.setdefault(label_name, label)
        self._add_labels(entry.label_names)
        self.entries.append(entry)
        return entry

    def convert_dicom_seg_case(
        self, series: str | Path, seg: str | Path | None = None, name: str | None = None,
    ) -> tuple[CaseEntry, dict[str, tuple[int, int, int]]]:
        """A DICOM series + the DICOM SEG drawn on it, converted like an editor case (not listed yet).

        Segment labels are matched to the set's label names ignoring case ("Liver" is the set's "liver");
        other names become new labels when the case is listed.
        """
        from medseg.model.dicom_seg_case import load_seg_case

        case = load_seg_case(series, seg)
        known = {n.casefold(): n for n in self.label_names}
        labels = {v: replace(label, name=known.get(label.name.casefold(), label.name)) for v, label in case.labels.items()}
        return self.convert_case(case.image, case.label_map, labels, None, name or case.seg_path.stem,
                                 f"DICOM SEG: {case.seg_path.name}", case.notes)

    def add_dicom_seg_case(self, series: str | Path, seg: str | Path | None = None,
                           name: str | None = None) -> CaseEntry:
        return self.add_converted(*self.convert_dicom_seg_case(series, seg, name))

    def add_dataset(self, dataset: Dataset, source: str) -> list[CaseEntry]:
        """Every case of an opened dataset (folder of pairs, nnU-Net raw, editor cases, manifest)."""
        self._add_labels([dataset.labels[v] for v in sorted(dataset.labels) if v])
        for label_name, label in dataset.described.items():
            if label.coded:
                self.described.setdefault(label_name, label)
        added = []
        for spec in dataset.specs:
            values = spec.label_values
            if values is None and spec.label is not None:
                values = {v: n for v, n in dataset.labels.items() if v}
            name = self._unique_name(spec.name)
            entry = CaseEntry(CaseSpec(name, spec.image, spec.label, values, spec.label_rule, spec.phantom, spec.weight),
                              source, validation=spec.name in dataset.validation,
                              label_names=[dataset.labels[v] for v in sorted(dataset.labels) if v])
            self.entries.append(entry)
            added.append(entry)
        return added

    def remove(self, name: str) -> None:
        """Take a case out; labels that only it named leave the set too."""
        self.entries = [e for e in self.entries if e.spec.name != name]
        named = {n for e in self.entries for n in e.label_names}
        self.label_names = [n for n in self.label_names if n in named]

    def set_validation(self, name: str, validation: bool) -> None:
        self.entry(name).validation = validation

    def entry(self, name: str) -> CaseEntry:
        for entry in self.entries:
            if entry.spec.name == name:
                return entry
        raise DatasetError(f"no case named '{name}' in the training set")

    # --- the dataset the engine trains on ------------------------------------------------------------
    def labels(self, selected: Sequence[str] | None = None) -> dict[int, str]:
        names = [n for n in self.label_names if selected is None or n in selected]
        return label_table(names)

    def dataset(self, selected: Sequence[str] | None = None) -> Dataset:
        """The engine's Dataset; ``selected`` trains only those labels (the others become background)."""
        if not self.entries:
            raise DatasetError("the training set has no cases: add the current case or a folder of cases")
        labels = self.labels(selected)
        keep = set(labels.values())
        specs = []
        for entry in self.entries:
            spec = entry.spec
            values = {v: n for v, n in spec.label_values.items() if n in keep} if spec.label_values is not None else None
            left_out = {v: n for v, n in spec.label_values.items() if n not in keep} if spec.label_values else None
            specs.append(CaseSpec(spec.name, spec.image, spec.label, values, spec.label_rule, spec.phantom, spec.weight,
                                  left_out or None))
        colors = default_colors(labels, self.colors)
        validation = [e.spec.name for e in self.entries if e.validation]
        return Dataset(self.name, labels, colors, specs, validation, source=str(self.manifest_path),
                       described={n: label for n, label in self.described.items() if n in keep})

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    def save(self, selected: Sequence[str] | None = None, kept: Sequence[str] = (),
             kept_rule: str | None = None) -> Path:
        """Write the manifest ``medseg train`` reads (atomically); returns its path.

        ``kept``: a base model's labels to train as well (first, in the base model's order), their targets
        given by the label rule ``kept_rule`` (``"starter"``: the rule labeller the starter model was
        trained on) under the case's own labels, in every case that does not name them all itself.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        names = [n for n in self.label_names if selected is None or n in selected]
        if kept:
            names = [*kept, *(n for n in names if n not in kept)]
        cases = []
        for entry in self.entries:
            spec = entry.spec
            record: dict[str, Any] = {"name": spec.name}
            if kept_rule is not None and spec.label_rule is None and not set(kept) <= set(entry.label_names):
                record["label_rule"] = kept_rule
            if spec.image is not None:
                record["image"] = str(Path(spec.image).resolve())
            if spec.label is not None:
                record["label"] = str(Path(spec.label).resolve())
            if spec.label_values is not None:
                record["label_values"] = {str(v): n for v, n in spec.label_values.items() if n in names}
            if spec.label_rule is not None:
                record["label_rule"] = spec.label_rule
            if spec.phantom is not None:
                record["phantom"] = spec.phantom
            if spec.weight != 1.0:
                record["weight"] = spec.weight
            cases.append(record)
        manifest = {"name": self.name, "labels": names, "colors": {k: list(v) for k, v in self.colors.items()},
                    "cases": cases, "validation": [e.spec.name for e in self.entries if e.validation]}
        codes = {n: {part: code.as_dict() for part, code in (("category", label.category), ("type", label.type))}
                 for n, label in self.described.items() if n in names and label.coded}
        if codes:
            manifest["codes"] = codes
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=1))
        return self.manifest_path

    # --- inspection, fingerprint and plan ----------------------------------------------------------
    def inspect(self, entry: CaseEntry, seed: int = 1234) -> CaseInfo:
        """Load the case once: size, spacing, labels present, problems, a foreground intensity sample."""
        labels = self.labels()
        case = load_case(entry.spec, labels)
        problems = []
        for note in case.notes:
            if "different grid" in note:
                problems.append("label map on another grid (resampled onto the image)")
            elif "have no name" in note:
                problems.append("unknown " + note.replace(": treated as background", " (treated as background)"))
        present_values = set(np.unique(case.label_map.array).tolist()) - {0}
        present = [labels[v] for v in sorted(present_values)]
        if not present_values:
            problems.append("empty label map")
        foreground = case.image.array[case.label_map.array > 0]
        rng = np.random.default_rng(seed)
        sample = (rng.choice(foreground, size=min(FOREGROUND_SAMPLES_PER_CASE, foreground.size), replace=True)
                  if foreground.size else np.zeros(0))
        entry.info = CaseInfo(tuple(int(n) for n in case.image.size_xyz),
                              tuple(float(s) for s in case.image.spacing_mm), present, problems,
                              np.asarray(sample, dtype=np.float64))
        return entry.info

    def problems(self, entry: CaseEntry) -> list[str]:
        """The case's problems against the set as it is now (a label added later is missing here)."""
        if entry.info is None:
            return list(entry.notes)
        missing = [n for n in self.label_names if n not in entry.info.labels_present]
        if missing and entry.info.labels_present:
            return [*entry.notes, *entry.info.problems, "missing: " + ", ".join(missing)]
        return [*entry.notes, *entry.info.problems]

    def inspect_all(self) -> Iterator[CaseEntry]:
        """Inspect every case not inspected yet, yielding each as it is done."""
        for entry in self.entries:
            if entry.info is None:
                self.inspect(entry)
                yield entry

    def fingerprint(self) -> Fingerprint:
        from medseg.model.fingerprint import fingerprint_from_samples

        inspected = [e.info for e in self.entries if e.info is not None and not e.validation]
        if not inspected:
            raise DatasetError("no inspected training cases to fingerprint")
        return fingerprint_from_samples([tuple(reversed(i.spacing_mm)) for i in inspected],
                                        [tuple(reversed(i.size_xyz)) for i in inspected],
                                        [i.foreground_sample for i in inspected])

    def plan(self, **plan_options: Any) -> tuple[Fingerprint, Plan]:
        fingerprint = self.fingerprint()
        return fingerprint, plan_for_dataset(fingerprint, len(self.labels()), **plan_options)
