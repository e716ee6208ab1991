"""Training datasets: cases (image + label map on the same grid) from several sources.

Sources, detected by :func:`open_dataset`:

- **nnU-Net raw layout**: a folder with ``dataset.json``, ``imagesTr/<case>_0000.ext`` and
  ``labelsTr/<case>.ext`` (single CT channel).
- **Folder of pairs**: ``images/<case>.ext`` + ``labels/<case>.ext``, or ``<case>_image.ext`` +
  ``<case>_label.ext`` (also ``_labels``, ``_seg``, ``_mask``) side by side. An optional
  ``labels.json`` names the values (``{"1": "liver"}`` or ``{"liver": 1}``).
- **Editor-saved cases**: folders holding ``case.json`` (written by :func:`save_case`).
- **A dataset manifest** (a ``.json`` file with a ``cases`` list), which can also mix in a
  DICOM series with a DICOM SEG, label maps produced by the rule-based labeller
  (``"label_rule": "starter"``), the synthetic phantom, a held-out ``validation`` list and
  a data root. This is how the starter model's training set is written down.

Label values in the files need not be consecutive: every source names its values, and
the dataset maps names onto training indices 0 (background), 1, 2, ... . What a source says
about a label beyond its name (colour, DICOM coded concept: an editor case's ``case.json``, a
manifest's ``"codes"``) is kept by name in :attr:`Dataset.described`, so a model trained on it
codes its labels as the data did (:meth:`Dataset.label_table`). Values with no
name become background, and a case says so in its ``notes``. A label map on a different
grid from its image is resampled onto the image grid with nearest neighbour, and the
case says that too.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import SimpleITK as sitk

from medseg.core.label_colors import color_for
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import DatasetError, MedsegError, ModelError
from medseg.io.atomic import atomic_path, atomic_write_text
from medseg.io.image_files import image_suffix
from medseg.io.json_files import read_json_object
from medseg.model.fingerprint import Fingerprint, fingerprint_cases  # noqa: F401 - where they were before
from medseg.model.postprocess import parse_steps

LABEL_TAGS = ("_label", "_labels", "_seg", "_mask")
CASE_FILE = "case.json"
@dataclass
class Case:
    """One training/validation case: CT image and label map (training indices) on the same grid."""

    name: str
    image: Volume
    label_map: Volume
    notes: list[str] = field(default_factory=list)


@dataclass
class CaseSpec:
    """Where a case comes from; loading happens on demand (datasets may not fit in memory)."""

    name: str
    image: Path | None = None
    label: Path | None = None
    label_values: dict[int, str] | None = None  # file value -> label name (None: the dataset's table)
    label_rule: str | None = None  # "starter": rule-based labels under the file labels
    phantom: dict[str, Any] | None = None  # keyword arguments for the synthetic phantom
    # How often training draws this case relative to the others (nnU-Net draws cases
    # uniformly; a 2D model learns more from a 112-slice scan than from a single slice).
    weight: float = 1.0
    # file value -> name of a label the file names but the run does not train (unticked): background, and said so
    left_out: dict[int, str] | None = None


@dataclass
class Dataset:
    """An ordered label table (training index -> name, colour) and the cases' specs.

    ``labels`` maps training indices to names (how cases are matched); ``described`` holds what the
    sources say about a label by its name (a Label: colour, coded concept)."""

    name: str
    labels: dict[int, str]
    colors: dict[int, tuple[int, int, int]]
    specs: list[CaseSpec]
    validation: list[str] = field(default_factory=list)  # case names held out of training
    source: str = ""
    description: str = ""  # what the data is and where it comes from (a manifest's "description")
    # steps a model trained on it declares (medseg.model.postprocess), e.g. what the label rules imply
    postprocessing: list[dict[str, Any]] = field(default_factory=list)
    described: dict[str, Label] = field(default_factory=dict)  # label name -> its source's description

    def label_table(self) -> dict[int, Label]:
        """Training index -> Label (background included): the name, the dataset's colour, the source's codes."""
        table = {}
        for index, name in sorted(self.labels.items()):
            given = self.described.get(name)
            color = self.colors.get(index)
            table[index] = (replace(given, value=index, name=name, color=color) if given is not None
                            else Label(index, name, color))
        return table

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def training_specs(self) -> list[CaseSpec]:
        return [s for s in self.specs if s.name not in self.validation]

    @property
    def validation_specs(self) -> list[CaseSpec]:
        return [s for s in self.specs if s.name in self.validation]

    def load(self, spec: CaseSpec) -> Case:
        return load_case(spec, self.labels)

    def cases(self, specs: Sequence[CaseSpec] | None = None) -> Iterator[Case]:
        for spec in specs if specs is not None else self.specs:
            yield self.load(spec)


# --------------------------------------------------------------------------------------------
# Label tables


def label_table(names: Sequence[str]) -> dict[int, str]:
    """Training indices for label names, background first, in the given order."""
    table = {0: "background"}
    for name in names:
        if name != "background" and name not in table.values():
            table[len(table)] = name
    return table


def default_colors(labels: Mapping[int, str], known: Mapping[str, Sequence[int]] | None = None) -> dict[int, tuple[int, int, int]]:
    colors: dict[int, tuple[int, int, int]] = {}
    for index, name in labels.items():
        if index == 0:
            colors[0] = (0, 0, 0)
        elif known and name in known:
            colors[index] = tuple(int(c) for c in known[name])  # type: ignore[assignment]
        else:
            colors[index] = color_for(index, name)
    return colors


def _parse_label_names(raw: Mapping[str, Any], path: Path) -> dict[int, str]:
    """``{"1": "liver"}``, ``{"liver": 1}`` or ``{"1": {"name": "liver"}}`` -> {1: "liver"}."""
    values: dict[int, str] = {}
    for key, item in raw.items():
        if isinstance(item, Mapping):
            item = item.get("name")
        if isinstance(item, (list, tuple)):
            raise DatasetError(f"region-based label '{key}' is not supported", path=path)
        try:
            if isinstance(item, str) and re.fullmatch(r"-?\d+", str(key)):
                values[int(key)] = item
            else:
                values[int(item)] = str(key)
        except (TypeError, ValueError) as error:
            raise DatasetError(f"cannot read label entry {key!r}: {item!r}", path=path) from error
    values.pop(0, None)
    return values


# --------------------------------------------------------------------------------------------
# Loading


def _read_image(path: Path) -> Volume:
    from medseg.io import load  # the I/O layer's one entry point (files and DICOM folders)

    try:
        return load(path)
    except MedsegError:
        raise
    except Exception as error:  # name the file for any reader failure
        raise DatasetError(f"cannot read image: {error}", path=path) from error


def open_label_file(path: Path, image: Volume) -> tuple[Volume, dict[int, str], list[str]]:
    """A label map (with its ``.labels.json``) or a DICOM SEG on ``image``'s grid, through the I/O layer's one
    way to open a segmentation: (label map, the names the file gives — empty when it names nothing, notes)."""
    from medseg.io import file_types, segmentations

    try:
        opened = segmentations.open_segmentation(path, image)
    except MedsegError as error:
        raise DatasetError(f"cannot place the label map on its image: {error.message}", path=path,
                           hint=error.hint) from error
    notes = list(opened.notes)
    if opened.format == file_types.DICOM_SEG:
        notes.insert(0, "DICOM SEG placed on the image grid by its geometry")
    # A header's own label table (TotalSegmentator's 117 names) does not map values for training: the dataset's
    # label table does, as before such names were read (else every structure it names would have to be in it).
    names = {label.value: label.name for label in opened.segments} if opened.named and not opened.named_by_header else {}
    return opened.label_map, names, notes


def load_case(spec: CaseSpec, labels: Mapping[int, str]) -> Case:
    """Load one case and map its label values onto the dataset's training indices."""
    index_of = {name: index for index, name in labels.items()}
    notes: list[str] = []
    if spec.phantom is not None:
        image, target = _phantom_case(spec.phantom, index_of, spec.label_rule is None, notes)
    else:
        if spec.image is None:
            raise DatasetError(f"case '{spec.name}' names no image")
        image = _read_image(spec.image)
        target = np.zeros(image.shape_zyx, dtype=np.uint8)
    if spec.label_rule is not None:
        _paint_rule_labels(image, spec.label_rule, index_of, target, notes)
    if spec.label is not None:
        _paint_file_labels(spec, image, labels, index_of, target, notes)
    if spec.label is None and spec.label_rule is None and spec.phantom is None:
        raise DatasetError(f"case '{spec.name}' has no label map", path=spec.image)
    label_map = image.with_array(target, modality="SEG", labels=dict(labels))
    return Case(spec.name, image, label_map, notes)


def _paint_file_labels(
    spec: CaseSpec, image: Volume, labels: Mapping[int, str], index_of: Mapping[str, int],
    target: np.ndarray, notes: list[str],
) -> None:
    assert spec.label is not None
    label_map, file_names, file_notes = open_label_file(spec.label, image)
    notes += file_notes
    values = spec.label_values if spec.label_values is not None else (file_names or {v: n for v, n in labels.items() if v})
    raw = np.asarray(label_map.array)
    present = set(np.unique(raw).tolist()) - {0}
    left_out = spec.left_out or {}
    chosen_out = sorted(v for v in present - set(values) if v in left_out)
    unnamed = sorted(present - set(values) - set(chosen_out))
    if chosen_out:  # named, but not ticked for this run: not a problem of the file
        shown = ", ".join(f"{left_out[v]} ({v})" for v in chosen_out[:12]) + ("..." if len(chosen_out) > 12 else "")
        notes.append(f"label{'s' if len(chosen_out) != 1 else ''} {shown} not chosen for training: treated as background")
    if unnamed:
        notes.append(f"label values {unnamed[:12]}{'...' if len(unnamed) > 12 else ''} have no name: treated as background")
    for value, name in values.items():
        if name not in index_of:
            raise DatasetError(f"label '{name}' is not in the dataset's label table", path=spec.label)
        mask = raw == value
        if mask.any():
            target[mask] = index_of[name]


def _paint_rule_labels(
    image: Volume, rule: str, index_of: Mapping[str, int], target: np.ndarray, notes: list[str]
) -> None:
    if rule != "starter":
        raise DatasetError(f"unknown label rule '{rule}' (known: starter)")
    from medseg.model.rule_labels import STARTER_LABELS, rule_label_map

    rules = rule_label_map(image).array
    for value, name in STARTER_LABELS.items():
        if value == 0 or name not in index_of:
            continue
        target[rules == value] = index_of[name]
    notes.append("labels from the rule-based labeller (HU thresholds + connected components)")


def _phantom_case(
    options: Mapping[str, Any], index_of: Mapping[str, int], use_truth: bool, notes: list[str]
) -> tuple[Volume, np.ndarray]:
    from medseg.io import phantom

    arguments = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    drawn = phantom.make_phantom(**arguments)
    notes.append("synthetic phantom (not patient data)")
    target = np.zeros(drawn.image.shape_zyx, dtype=np.uint8)
    if use_truth:  # the labels drawn with the phantom, for the names this dataset has
        for value, name in phantom.PHANTOM_LABELS.items():
            if value and name in index_of:
                target[drawn.label_map.array == value] = index_of[name]
        notes.append("labels: the phantom's ground truth")
    return drawn.image, target


# --------------------------------------------------------------------------------------------
# Sources


def open_dataset(path: str | os.PathLike[str], data_root: str | os.PathLike[str] | None = None) -> Dataset:
    """Open any supported dataset source (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("dataset not found", path=path)
    if path.is_file() and path.suffix == ".json":
        return open_manifest(path, data_root)
    if path.is_dir():
        if (path / "dataset.json").is_file() and (path / "imagesTr").is_dir():
            return open_nnunet_raw(path)
        if (path / "medseg-dataset.json").is_file():
            return open_manifest(path / "medseg-dataset.json", data_root)
        if (path / CASE_FILE).is_file() or any((p / CASE_FILE).is_file() for p in path.iterdir() if p.is_dir()):
            return open_editor_cases(path)
        return open_image_label_folder(path)
    raise DatasetError("not a dataset: expected a folder or a dataset .json manifest", path=path)


def open_nnunet_raw(folder: Path) -> Dataset:
    """nnU-Net v2 raw layout (``dataset.json`` + ``imagesTr`` + ``labelsTr``), one CT channel."""
    description = _read_json(folder / "dataset.json")
    channels = description.get("channel_names") or description.get("modality") or {}
    if len(channels) != 1:
        raise DatasetError(f"only single-channel (CT) datasets are supported, found {len(channels)} channels",
                           path=folder / "dataset.json")
    values = _parse_label_names(description.get("labels", {}), folder / "dataset.json")
    suffix = description.get("file_ending", ".nii.gz")
    specs = []
    for image in sorted((folder / "imagesTr").glob(f"*_0000{suffix}")):
        name = image.name[: -len(f"_0000{suffix}")]
        label = folder / "labelsTr" / f"{name}{suffix}"
        if not label.is_file():
            raise DatasetError(f"case '{name}' has no label map", path=label)
        specs.append(CaseSpec(name, image, label, values))
    if not specs:
        raise DatasetError(f"no images matching *_0000{suffix} in imagesTr", path=folder)
    labels = label_table([values[v] for v in sorted(values)])
    return Dataset(description.get("name", folder.name), labels, default_colors(labels), specs, source=str(folder))


def _strip_suffix(name: str) -> tuple[str, str] | None:
    suffix = image_suffix(name)
    return (name[: -len(suffix)], suffix) if suffix else None


def open_image_label_folder(folder: Path) -> Dataset:
    """``images/`` + ``labels/`` sub-folders, or ``<case>_image.*`` next to ``<case>_label.*``."""
    pairs: list[tuple[str, Path, Path]] = []
    if (folder / "images").is_dir() and (folder / "labels").is_dir():
        labels_by_stem = {s[0]: p for p in (folder / "labels").iterdir() if (s := _strip_suffix(p.name))}
        for image in sorted((folder / "images").iterdir()):
            stem = _strip_suffix(image.name)
            if stem is None:
                continue
            if stem[0] not in labels_by_stem:
                raise DatasetError(f"image '{image.name}' has no label map in labels/", path=image)
            pairs.append((stem[0], image, labels_by_stem[stem[0]]))
    else:
        files = {s[0]: p for p in folder.iterdir() if p.is_file() and (s := _strip_suffix(p.name))}
        for stem, label in sorted(files.items()):
            for tag in LABEL_TAGS:
                if stem.endswith(tag):
                    base = stem[: -len(tag)]
                    image = files.get(base + "_image") or files.get(base + "_ct") or files.get(base)
                    if image is not None:
                        pairs.append((base, image, label))
                    break
    if not pairs:
        raise DatasetError("no image/label pairs found (expected images/ + labels/, or <case>_image + <case>_label)",
                           path=folder)
    names = _folder_label_names(folder, [label for _, _, label in pairs])
    labels = label_table([names[v] for v in sorted(names)])
    specs = [CaseSpec(name, image, label, names) for name, image, label in pairs]
    return Dataset(folder.name, labels, default_colors(labels), specs, source=str(folder))


def _folder_label_names(folder: Path, label_files: Sequence[Path]) -> dict[int, str]:
    table = folder / "labels.json"
    if table.is_file():
        return _parse_label_names(_read_json(table), table)
    # Without a table, every value found is a label named after its value.
    values: set[int] = set()
    for path in label_files:
        values |= set(np.unique(_read_image(path).array).astype(int).tolist())
    values.discard(0)
    return {v: f"label_{v}" for v in sorted(values)}


def open_editor_cases(folder: Path) -> Dataset:
    """Cases saved from the editor: one folder per case holding ``case.json`` (see :func:`save_case`)."""
    case_dirs = [folder] if (folder / CASE_FILE).is_file() else sorted(p for p in folder.iterdir() if (p / CASE_FILE).is_file())
    specs, names, colors, described = [], [], {}, {}
    for case_dir in case_dirs:
        record = _read_json(case_dir / CASE_FILE)
        values = _parse_label_names(record.get("labels", {}), case_dir / CASE_FILE)
        for value, entry in record.get("labels", {}).items():
            if isinstance(entry, Mapping) and "color" in entry:
                colors[entry["name"]] = entry["color"]
            if isinstance(entry, Mapping) and str(value).isdigit() and int(value) in values:
                described.setdefault(values[int(value)], _described_label(entry, int(value), case_dir / CASE_FILE))
        names += [values[v] for v in sorted(values)]
        specs.append(CaseSpec(record.get("name", case_dir.name), case_dir / record["image"], case_dir / record["label"], values))
    labels = label_table(names)
    return Dataset(folder.name, labels, default_colors(labels, colors), specs, source=str(folder), described=described)


def _described_label(entry: Mapping[str, Any], value: int, path: Path) -> Label:
    """A label row of case.json (name, colour, codes, provenance) as a Label."""
    try:
        return Label.from_dict(entry, value)
    except (KeyError, TypeError, ValueError) as error:
        raise DatasetError(f"label {value} is not readable ({error})"[:300], path=path) from None


def _described_by_codes(raw: Any, path: Path) -> dict[str, Label]:
    """A manifest's ``"codes": {"liver": {"category": {...}, "type": {...}}}`` as Labels by name."""
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise DatasetError("'codes' must map label names to their category and type", path=path)
    return {str(name): _described_label({"name": name, **dict(entry)}, 0, path) for name, entry in raw.items()
            if isinstance(entry, Mapping)}


def save_case(
    folder: str | Path, image: Volume, label_map: Volume, labels: Mapping[int, Label | str],
    colors: Mapping[int, Sequence[int]] | None = None, name: str | None = None,
) -> Path:
    """Write an editor case (image + label map NIfTI + ``case.json``) that :func:`open_dataset` reads.

    Each label is written whole (name, colour, coded concept, provenance: a Label row); ``colors``
    colour labels given by name only."""
    folder = Path(folder)
    if not label_map.same_grid(image):
        raise DatasetError("the label map is not on the image grid", path=folder)
    folder.mkdir(parents=True, exist_ok=True)
    # Each file atomically, case.json last: a case folder is either complete or not a case.
    for volume, file_name in ((image, "image.nii.gz"), (label_map, "label.nii.gz")):
        with atomic_path(folder / file_name) as temporary:
            sitk.WriteImage(volume.to_sitk(), str(temporary), useCompression=True)
    entries = {}
    for value, given in labels.items():
        if int(value) == 0:
            continue
        label = given if isinstance(given, Label) else Label(int(value), str(given),
                                                              colors[value] if colors and value in colors else None)
        row = label.as_dict()
        del row["value"]  # the key says it
        entries[str(int(value))] = row
    record = {"name": name or folder.name, "image": "image.nii.gz", "label": "label.nii.gz", "labels": entries}
    atomic_write_text(folder / CASE_FILE, json.dumps(record, indent=2))
    return folder


def open_manifest(path: Path, data_root: str | Path | None = None) -> Dataset:
    """A medseg dataset manifest::

        {"name": "...", "data_root": "${MEDSEG_SHARED_DATA}",       # optional, else the file's folder
         "labels": ["body", "lungs", "bones"], "colors": {"body": [r, g, b]},
         "cases": [{"name": "lung1", "image": "ct/.../lung1_image.nrrd", "label_rule": "starter"},
                   {"name": "liver", "image": "...", "label": "...", "label_values": {"5": "liver"}},
                   {"name": "dicom", "image": "series_dir/", "label": "seg.dcm"},
                   {"name": "phantom", "phantom": {}, "label_rule": "starter", "weight": 0.5}],
         "validation": ["lung1"],
         "postprocessing": [{"op": "fill_holes"}]}     # optional: medseg.model.postprocess
    """
    record = _read_json(path)
    root = Path(data_root) if data_root is not None else _resolve_root(record.get("data_root"), path)
    if "cases" not in record or not record["cases"]:
        raise DatasetError("the manifest lists no cases", path=path)
    specs = []
    for entry in record["cases"]:
        name = entry.get("name") or Path(entry.get("image", "case")).name
        image = root / entry["image"] if "image" in entry else None
        label = root / entry["label"] if "label" in entry else None
        for member in (image, label):
            if member is not None and not member.exists():
                raise DatasetError(f"case '{name}': file not found", path=member)
        values = _parse_label_names(entry["label_values"], path) if "label_values" in entry else None
        weight = entry.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not weight > 0:
            raise DatasetError(f"case '{name}': weight must be a positive number, not {weight!r}", path=path)
        specs.append(CaseSpec(name, image, label, values, entry.get("label_rule"), entry.get("phantom"),
                              float(weight)))
    labels = label_table(record.get("labels", []))
    validation = list(record.get("validation", []))
    unknown = set(validation) - {s.name for s in specs}
    if unknown:
        raise DatasetError(f"validation names unknown cases: {sorted(unknown)}", path=path)
    postprocessing = record.get("postprocessing") or []
    try:
        parse_steps(postprocessing, labels)
    except ModelError as error:
        raise DatasetError(error.message, path=path) from None
    return Dataset(record.get("name", path.stem), labels, default_colors(labels, record.get("colors")), specs,
                   validation, source=str(path), description=str(record.get("description", "")),
                   postprocessing=postprocessing, described=_described_by_codes(record.get("codes"), path))


def _resolve_root(raw: str | None, manifest: Path) -> Path:
    if not raw:
        return manifest.parent
    expanded = os.path.expandvars(raw)
    if "$" in expanded:
        raise DatasetError(f"data_root '{raw}' uses an unset environment variable", path=manifest,
                           hint="set it, or pass --data-root")
    root = Path(expanded)
    return root if root.is_absolute() else manifest.parent / root


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, "dataset description", DatasetError)


ProgressFn = Callable[[int, int, str], None]
