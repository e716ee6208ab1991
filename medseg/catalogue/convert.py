"""nnU-Net result folders -> the medseg packages an installed model holds.

Each checkpoint is read by the safe loader (``medseg.model.nnunet_import``: weights only, nothing
unpickled) and saved as safetensors; no ``.pth`` file stays in the models folder.

Layout of a version folder:

    model/                the package medseg opens: every configuration that one network makes
                          (e.g. TotalSegmentator's 3 mm and 6 mm), named as in the catalogue,
                          so that the series' spacing chooses between them
    parts/DatasetNNN/     one package per network of a configuration made of several networks
                          (TotalSegmentator's five 1.5 mm parts), for the pipeline that merges them
    source/DatasetNNN/    the publisher's dataset.json and plans.json, as they came

Each model kind (:mod:`medseg.model.kinds`, the catalogue entry's ``kind``) has its converter in
:data:`CONVERTERS`: nnU-Net networks, a TotalSegmentator task, an interactive model.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from medseg.catalogue.entries import Configuration, ModelEntry
from medseg.core.labels import Label
from medseg.errors import ModelError
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import save_package
from medseg.model.package_model import ModelPackage, combine_packages
from medseg.progress import CancelToken, ProgressCallback, report

RUN_FOLDER = "model"
PARTS_FOLDER = "parts"
SOURCE_FOLDER = "source"


@dataclass(frozen=True)
class Converted:
    run: str | None  # the package medseg opens (relative), None when no configuration runs on its own
    parts: dict[str, str]  # dataset id -> its package (relative)
    configurations: list[str]


Converter = Callable[[ModelEntry, list[Configuration], dict[int, Path], Path, ProgressCallback | None,
                      CancelToken | None], Converted]
# model kind -> its converter (filled below, one line per kind)
CONVERTERS: dict[str, Converter] = {}


def convert(entry: ModelEntry, configurations: list[Configuration], results: dict[int, Path], out: Path,
            progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> Converted:
    """Write the packages of ``configurations`` (their networks' result folders in ``results``) into ``out``."""
    converter = CONVERTERS.get(entry.kind)
    if converter is None:
        raise ModelError(f"{entry.id}: medseg cannot install a model of kind {entry.kind!r} from downloaded weights")
    return converter(entry, configurations, results, out, progress, cancel)


def convert_nnunet(entry: ModelEntry, configurations: list[Configuration], results: dict[int, Path], out: Path,
                   progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> Converted:
    singles = [c for c in configurations if len(c.datasets) == 1]
    needed = sorted({d for c in configurations for d in c.datasets})
    done = 0

    def step(text: str) -> None:
        nonlocal done
        if cancel is not None:
            cancel.raise_if_cancelled()
        report(progress, done / max(len(needed), 1), text, "convert")
        done += 1

    for dataset in needed:
        _keep_source(results[dataset], out / SOURCE_FOLDER / f"Dataset{dataset:03d}")
    packages = []
    for configuration in singles:
        dataset = configuration.datasets[0]
        step(f"converting {configuration.name} (dataset {dataset}) without unpickling")
        packages.append(_as_configuration(import_nnunet(results[dataset]), entry, configuration, results[dataset]))
    run = None
    if packages:
        model = packages[0] if len(packages) == 1 else combine_packages(packages, name=entry.id)
        model.name = entry.id
        model.provenance.update({"catalogue_id": entry.id, "version": entry.version,
                                 "source": f"{entry.publisher or entry.id} via the medseg catalogue"})
        save_package(model, out / RUN_FOLDER)
        run = RUN_FOLDER
    parts: dict[str, str] = {}
    for configuration in configurations:
        if len(configuration.datasets) < 2:
            continue
        for dataset in configuration.datasets:
            if str(dataset) in parts:
                continue
            step(f"converting part dataset {dataset} of {configuration.name} without unpickling")
            package = import_nnunet(results[dataset])
            _check_part_labels(entry, package, results[dataset])
            package.provenance.update({"catalogue_id": entry.id, "version": entry.version, "dataset": dataset})
            relative = f"{PARTS_FOLDER}/Dataset{dataset:03d}"
            save_package(package, out / relative)
            parts[str(dataset)] = relative
    report(progress, 1.0, "converted", "convert")
    return Converted(run, parts, [c.name for c in configurations])


def _as_configuration(package: ModelPackage, entry: ModelEntry, configuration: Configuration,
                      folder: Path) -> ModelPackage:
    """The package of one network as the catalogue's configuration, with the catalogue's structure names
    (TotalSegmentator names its outputs from its own class map, not from dataset.json)."""
    if len(package.configurations) != 1:
        raise ModelError(f"expected one nnU-Net configuration, found {sorted(package.configurations)}", path=folder)
    (old, plan), = package.configurations.items()
    labels = dict(package.labels)
    if entry.structures:
        expected = {s.value: s.name for s in entry.structures}
        if sorted(v for v in labels if v) != sorted(expected):
            raise ModelError(f"this network segments {len(labels) - 1} structures, {entry.id}'s "
                             f"{configuration.name} configuration {len(expected)}: not the published model",
                             path=folder / "dataset.json")
        # the catalogue's names; a renamed label takes its new name's colour (a name the file kept keeps its own)
        labels = {0: labels[0], **{v: labels[v] if labels[v].name == name else Label(v, name)
                                   for v, name in expected.items()}}
    package = dataclasses.replace(
        package, labels=labels,
        configurations={configuration.name: dataclasses.replace(plan, name=configuration.name)},
        weights={configuration.name: package.weights[old]},
        onnx={configuration.name: package.onnx[old]} if old in package.onnx else {},
        provenance=dict(package.provenance))
    package.provenance["catalogue_configuration"] = configuration.name
    return package


def _check_part_labels(entry: ModelEntry, package: ModelPackage, folder: Path) -> None:
    names = {s.name for s in entry.structures}
    unknown = sorted(n for v, n in package.names.items() if v and n not in names)
    if names and unknown:
        raise ModelError(f"this part segments {', '.join(unknown[:5])}, which {entry.id} does not list: "
                         "not the published model", path=folder / "dataset.json")


def convert_totalsegmentator(entry: ModelEntry, configurations: list[Configuration], results: dict[int, Path],
                             out: Path, progress: ProgressCallback | None = None,
                             cancel: CancelToken | None = None) -> Converted:
    """A TotalSegmentator task through medseg's TotalSegmentator pipeline (medseg.model.totalseg), which runs
    it as TotalSegmentator does, when every network it needs is here: its own and those of the runs that
    crop or refine it (e.g. the 'total' 6 mm network that finds the liver for liver_segments). Otherwise
    its networks are converted as plain nnU-Net networks, as before."""
    from medseg.model.totalseg import import_totalsegmentator_task, required_runs, task_spec

    weights = {folder.parent.parent for folder in results.values()}  # <weights>/DatasetNNN_x/<trainer folder>
    task = entry.task or ""
    try:
        runs = required_runs(task, [c.name for c in configurations])
    except ModelError:  # a task the table does not know
        return convert_nnunet(entry, configurations, results, out, progress, cancel)
    needed = {n.dataset for task, mode in runs for n in task_spec(task).modes[mode].networks}
    # the crop network may be beside the task's own without being one of its results (`medseg models import`
    # of a TotalSegmentator weights folder matches each entry's own networks only): found there, it is used
    beside = {d for d in needed - set(results) if len(weights) == 1
              and any(next(iter(weights)).glob(f"Dataset{d:03d}_*"))}
    if len(weights) != 1 or not needed <= set(results) | beside:
        return convert_nnunet(entry, configurations, results, out, progress, cancel)
    report(progress, 0.0, f"converting {entry.id} without unpickling", "convert")
    import_totalsegmentator_task(next(iter(weights)), out=out / RUN_FOLDER, task=task)
    for dataset, folder in results.items():
        _keep_source(folder, out / SOURCE_FOLDER / f"Dataset{dataset:03d}")
    return Converted(RUN_FOLDER, {}, [c.name for c in configurations])




def convert_interactive(entry: ModelEntry, configurations: list[Configuration], results: dict[int, Path], out: Path,
                        progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> Converted:
    """An nnInteractive model folder -> medseg's interactive model (weights only, nothing unpickled), then the
    CPU runtimes measured on it once (:mod:`medseg.model.interactive.calibration`: the choice and the ONNX
    export the faster runtimes read are kept beside the weights). Without OpenVINO there is nothing to
    compare PyTorch with, and nothing is measured."""
    from medseg.model.interactive.calibration import calibrate
    from medseg.model.interactive.model_files import import_nninteractive, save_interactive_model
    from medseg.model.interactive.runtimes import openvino_available

    (folder,) = results.values()
    report(progress, 0.0, f"converting {entry.id} without unpickling", "convert")
    model = import_nninteractive(folder)
    model.license = f"{entry.licence.spdx}: {entry.licence.terms}"
    model.provenance.update({"catalogue_id": entry.id, "version": entry.version})
    run = out / RUN_FOLDER
    save_interactive_model(model, run)
    for name in ("dataset.json", "plans.json", "inference_session_class.json", "inference_info.json"):
        if (folder / name).is_file():
            (out / SOURCE_FOLDER).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / name, out / SOURCE_FOLDER / name)
    if openvino_available():
        if cancel is not None:
            cancel.raise_if_cancelled()
        report(progress, 0.3, "measuring which CPU runtime runs this model fastest (once)", "convert")
        from medseg.model.interactive.model_files import load_interactive_model

        calibrate(load_interactive_model(run), run, progress=lambda text: report(progress, 0.5, text, "convert"))
    report(progress, 1.0, "converted", "convert")
    return Converted(RUN_FOLDER, {}, [c.name for c in configurations])



def _keep_source(folder: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    for name in ("dataset.json", "plans.json"):
        if (folder / name).is_file():
            shutil.copyfile(folder / name, destination / name)


CONVERTERS.update({"nnunet": convert_nnunet, "totalsegmentator": convert_totalsegmentator,
                   "nninteractive": convert_interactive})
