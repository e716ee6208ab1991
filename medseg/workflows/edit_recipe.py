"""Apply the editor's tools to a segmentation in batch (a recipe), on the image's grid, and save it.

``medseg edit`` parses its options into an :class:`EditRequest`; :func:`edit_segmentation` checks the
output (the save use case), opens the image and the starting segmentation (under a name set),
checks every operation before any runs (a bad number, an unknown label or a locked target is named
first), runs them in order and writes the result. The operations are the one catalogue's
(:mod:`medseg.edit.operations`, the model-backed ones registered by :mod:`medseg.workflows.edit_operations`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from medseg.edit.operations import CATALOGUE, options  # declarations only: no image-processing import
from medseg.errors import MedsegError
from medseg.workflows.name_sets import FROM_FILE, TOTALSEGMENTATOR

WRITTEN_BY = "medseg edit"


@dataclass(frozen=True)
class EditRequest:
    image: str | os.PathLike  # the CT: DICOM folder or image file
    output: str | os.PathLike  # a label map (with its sidecar) or a DICOM SEG (.dcm)
    operations: Sequence[tuple[str, tuple[str, ...]]] = ()  # (catalogue name, its arguments as typed), in order
    labels: str | os.PathLike | None = None  # the segmentation to start from (default: empty)
    name_set: str = FROM_FILE  # TOTALSEGMENTATOR: name the labels by TotalSegmentator v2's class map
    settings: Mapping[str, Any] = field(default_factory=dict)  # the operations' settings given (Parameter names)
    hu_range: tuple[float, float] | None = None  # painting changes only voxels in this HU range
    only_background: bool = False  # painting changes only background voxels (default: any unlocked label)
    background_seed: int | None = None  # the seed value that marks background (default: the one named so)
    spacing_mm: tuple[float, float, float] | None = None
    force: bool = False
    option: str = "-o"  # how the user named the output, for messages


@dataclass
class EditResult:
    image: Any  # the Volume edited on
    written: Path
    done: list[tuple[str, int]]  # (operation, voxels changed), in order
    threads: int  # the CPU threads the operations computed with (medseg.threads)
    label_map: Any  # the edited LabelMap
    volumes_ml: dict[int, float] = field(default_factory=dict)


def operation_inputs(name: str, raw: Sequence[str]) -> list[str | Path]:
    """The files an operation reads (with their label sidecars): inputs, never the output."""
    from medseg.edit.prompt_session import MASK_KINDS
    from medseg.workflows.studies import sidecar_of

    inputs: list[str | Path] = []
    spec = CATALOGUE.get(name)
    for parameter, text in zip(spec.positional if spec else (), raw):
        if parameter.kind.endswith("-file"):
            inputs.append(text)
        if parameter.kind in ("seeds-file", "segmentation-file"):  # read with their label sidecars
            inputs.append(sidecar_of(text))
        if parameter.kind == "prompt-spec" and text.split(":", 1)[0].strip().lower() in MASK_KINDS:
            inputs.append(text.split(":", 1)[1].rsplit(":neg", 1)[0].rsplit(":pos", 1)[0])  # its mask file
    return inputs


def edit_segmentation(request: EditRequest, say: Callable[[str, int], None] | None = None,
                      note: Callable[[str], None] | None = None) -> EditResult:
    """Run ``request``'s operations; ``say(operation, voxels changed)`` after each, ``note(text)`` for what the
    user must read (a moved segmentation, a fill that flooded, a model's notes)."""
    from medseg import threads
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.recipe import Operation, run_operations, validate
    from medseg.edit.tools import PaintRules
    from medseg.workflows.name_sets import opened_label_map
    from medseg.workflows.save import plan_save, save_segmentation
    from medseg.workflows.studies import OpenStudyRequest, open_segmentation_on, open_study, sidecar_of

    tell = note or (lambda text: None)
    operations = [Operation(name, raw) for name, raw in request.operations]
    if not operations and not request.labels:
        raise MedsegError("no operations given and no --labels to write: name at least one operation (see medseg "
                          "edit --help), or give a segmentation with --labels to write it as -o says (a label map, "
                          "or a DICOM SEG: .dcm)")
    inputs = [request.image, request.labels, sidecar_of(request.labels) if request.labels else None]
    for operation in operations:  # files an operation reads are inputs too: never the output
        inputs += operation_inputs(operation.name, operation.raw)
    # the output checked once, before anything is read (the save use case every interface uses); an earlier
    # output of medseg edit, unchanged since, is replaced without --force
    target = plan_save(request.output, inputs, force=request.force, option=request.option, written_by=WRITTEN_BY)
    image = open_study(OpenStudyRequest(request.image, spacing_mm=request.spacing_mm)).volume
    target.check_image(image)
    document = SegmentationDocument()
    document.set_undo_budget(0)  # a batch needs no undo: keep only the newest step
    document.set_volume(image, source=str(request.image))
    if request.labels:
        opened = open_segmentation_on(image, request.labels)
        for text in [*opened.notes, *opened.naming]:
            tell(text)
        document.set_label_map(opened_label_map(opened, request.name_set))
    else:
        document.new_label_map()

    def load_seeds(path: str):
        return load_seeds_file(Path(path), image, request.background_seed)

    def load_segmentation(path: str):
        from medseg.edit.merge import Segmentation

        opened = open_segmentation_on(image, path)
        for text in [*opened.notes, *opened.naming]:
            tell(text)
        return Segmentation(opened.label_map, opened.labels)

    def load_model(reference: str):
        from medseg.workflows.models import open_model

        return open_model(reference)

    rules = PaintRules(hu_range=tuple(sorted(request.hu_range)) if request.hu_range else None,
                       overwrite="background" if request.only_background else "unlocked")
    validate(operations, document.label_map, image, load_seeds, dict(request.settings), load_segmentation,
             load_model)
    # what an operation wants read once it is done (a fill that flooded, a model's notes)
    document.notice.connect(lambda text, level: tell(text) if level == "warning" else None)
    with threads.job("edit") as lease:
        done = run_operations(document, operations, rules, say or (lambda op, count: None))
        used = lease.threads
    label_map = document.label_map
    kept = {value: entry for value, entry in label_map.labels.items() if label_map.voxel_count(value) or entry.locked}
    written = save_segmentation(target, label_map.to_volume(), image, kept).path
    return EditResult(image, Path(written), done, used, label_map, label_map.volumes_ml())


def load_seeds_file(path: Path, image: Any, background: int | None) -> Any:
    """A seeds label image on ``image``'s grid (resampled by nearest neighbour), background seeds as BACKGROUND_SEED."""
    import numpy as np

    from medseg.edit.tools.grow_seeds import BACKGROUND_SEED
    from medseg.io import load, resample_to

    if not path.exists():
        raise MedsegError("the seeds file does not exist", path=path)
    seeds = load(path)
    if not seeds.same_grid(image):
        seeds = resample_to(seeds, image, interpolation="nearest")
    array = np.asarray(seeds.array)
    if array.dtype.kind == "f" and not np.array_equal(array, np.rint(array)):
        raise MedsegError("a seeds file must hold whole label values", path=path)
    if array.size and (array.min() < 0 or array.max() >= BACKGROUND_SEED):
        raise MedsegError(f"seed values must lie in 0…{BACKGROUND_SEED - 1}", path=path)
    array = array.astype(np.uint16)
    if background is None:  # the label its sidecar names "background" (read by the one sidecar reader)
        from medseg.io.label_files import read_sidecar

        found = read_sidecar(path)
        named = [label.value for label in (found[0] if found else []) if label.name.strip().lower() == "background"]
        background = named[0] if named else None
    if background is not None:
        if not (array == background).any():
            raise MedsegError(f"the seeds hold no voxel of the background value {background}", path=path)
        array[array == background] = BACKGROUND_SEED
    return array


__all__ = ["CATALOGUE", "options", "FROM_FILE", "TOTALSEGMENTATOR", "EditRequest", "EditResult", "edit_segmentation",
           "operation_inputs", "load_seeds_file"]
