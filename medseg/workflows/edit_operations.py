"""The model-backed editing operations, added to the edit catalogue from here (``edit`` never imports ``model``).

``segment``: segment the open image with a model (:func:`medseg.workflows.segment.segment_study`: its
checks, the one device choice, the model's post-processing) and merge the result into the label map,
``replace`` or ``add`` (:func:`medseg.edit.merge.merge_change`). Like every operation of the catalogue it
is previewable (``op.preview(document, values)`` gives the change and writes nothing), undoable and
journalled (``op.perform(...)``: one history step), a ``medseg edit --segment MODEL MODE`` flag and a
recipe step. The GUI's Segment runs the model in a worker (:func:`segment_image`) and performs this
operation with the result on the GUI thread, so the document changes in one place for every interface.

:func:`register_operations` adds them; the command line calls it before it builds its parser and the
window before it builds its panels. It imports nothing heavy: the model is opened when the operation runs
(or, on the command line, when the recipe is checked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from medseg.edit.operation import Change, Context, EditOperation, Parameter
from medseg.errors import GeometryError, ImageChangedError

if TYPE_CHECKING:
    from medseg.core.volume import Volume
    from medseg.edit.document import SegmentationDocument
    from medseg.progress import CancelToken, ProgressCallback
    from medseg.workflows.segment import SegmentedStudy

SEGMENT = "segment"
# Values a caller may add besides the declared parameters: how the model runs (a SegmentSettings; the GUI's
# Segment panel gives device, configuration and post-processing), and a result it already computed (the GUI
# runs the model in a worker; the operation then merges that result, on the thread that owns the document).
SETTINGS, RESULT = "settings", "result"
MODELS = "models"  # several model references run into one result (medseg.workflows.segment_many)

MODEL = Parameter("model", "MODEL", "model", "the model")
MODE = Parameter("mode", "MODE", "choice", "how it meets the labels here", choices=("replace", "add"))
ALLOW_MODALITY = Parameter("allow_modality", "", "flag", "Segment a series of another modality than the model's "
                           "(noted in the result)", default=False, option="--allow-modality")


def segment_image(image: "Volume", values: dict, progress: "ProgressCallback | None" = None,
                  cancel: "CancelToken | None" = None) -> "SegmentedStudy":
    """The model's half of the operation (what a worker thread runs): ``image`` segmented by
    ``values["model"]`` (a reference or an opened model) with ``values[SETTINGS]`` (default: auto device,
    the configuration the spacing chooses), ``allow_modality`` from the values. ``values[MODELS]`` (several
    references, e.g. the Segment panel's TotalSegmentator tasks) runs them all into one result
    (:mod:`medseg.workflows.segment_many`: the first keeps its values, shared steps run once)."""
    from dataclasses import replace

    from medseg.workflows.segment import SegmentRequest, SegmentSettings, segment_study

    settings = values.get(SETTINGS) or SegmentSettings()
    if values.get("allow_modality"):
        settings = replace(settings, allow_modality=True)
    several = values.get(MODELS)
    if several:
        from medseg.progress import report
        from medseg.workflows.models import open_model
        from medseg.workflows.segment_many import as_segmented, segment_with_models

        report(progress, 0.0, "loading the models", "model")
        models = [open_model(reference) for reference in several]  # every model read before the run
        return as_segmented(segment_with_models(image, models, settings, progress, cancel))
    return segment_study(SegmentRequest(image, values.get("model"), settings), progress, cancel)


def _segment(document: "SegmentationDocument", values: dict, context: Context) -> Change:
    from dataclasses import replace

    from medseg.edit.merge import REPLACE, Segmentation, merge_change

    image = document.volume
    if image is None:
        raise GeometryError("open an image first, then segment it")
    result = values.get(RESULT)
    computed_here = result is None
    if computed_here:
        result = segment_image(image, values)
    if not result.label_map.same_grid(image):
        raise ImageChangedError("the image changed while it was being segmented, so the result was not applied",
                                hint="segment again the image now open")
    change = merge_change(document, Segmentation(result.label_map, result.labels), values.get("mode") or REPLACE)
    # Whoever ran the model shows its notes (the GUI: the banner); run here, they come with the change.
    cautions = tuple([*result.notes, *(f"fell back: {text}" for text in result.fallbacks)]) if computed_here else ()
    return replace(change, cautions=change.cautions + cautions)  # the merge's own (values that moved) first


def _check(values: dict) -> None:
    """A reference that names no model is refused before anything runs (an opened model, or a result, is one)."""
    from medseg.workflows.models import model_path

    model = values.get("model")
    if values.get(RESULT) is None and (model is None or isinstance(model, str)):
        model_path(model)


SEGMENT_OPERATION = EditOperation(
    SEGMENT, "Segment",
    "segment the image with MODEL (starter, an installed catalogue id such as totalsegmentator/total, a medseg "
    "model package or an nnU-Net v2 result folder) and merge its labels into the label map: MODE replace (every "
    "unlocked voxel takes the model's result) or add (only its labels not here yet, only where there is no "
    "label); locked labels never change; --allow-modality segments a series of another modality than the "
    "model's", (MODEL, MODE, ALLOW_MODALITY), _segment, check=_check)

OPERATIONS = (SEGMENT_OPERATION,)


def register_operations() -> None:
    """Add the model-backed operations to the edit catalogue (again: nothing happens; an entry of that name
    put there otherwise, e.g. a wrapped one, stays)."""
    from medseg.edit.operations import CATALOGUE, register
    from medseg.workflows.interactive import INTERACTIVE  # the Interactive AI tool's prompts (model-backed too)

    for operation in (*OPERATIONS, INTERACTIVE):
        if operation.name not in CATALOGUE:
            register(operation)


def segment_operation() -> EditOperation:
    """The catalogue's ``segment`` operation (registered if it was not yet)."""
    from medseg.edit.operations import CATALOGUE

    register_operations()
    return CATALOGUE[SEGMENT]


def prepare_segment(document: "SegmentationDocument", result: "SegmentedStudy", mode: str) -> Change | None:
    """In the worker that ran the model: the ``segment`` operation's change for ``result`` against ``document``
    as it is now (the merge, honouring locks and ``mode``, with its voxel counts), tagged with the document's
    revision it was computed against, so the thread that owns the document only writes it
    (:func:`perform_segment`). None when it cannot be computed here (the image changed, or the document
    changed under the read): the owning thread then merges as it always could."""
    from dataclasses import replace

    revision = document.revision  # first: any write after this makes the change stale
    try:
        change = segment_operation().preview(document, {"model": result.model.id, "mode": mode, RESULT: result})
        if change.delta is not None:
            change.delta.histograms()  # the per-label counts the write updates: counted here, not on the GUI thread
    except Exception:  # noqa: BLE001 - a read raced a write (or the image changed): perform_segment merges again
        return None
    return replace(change, revision=revision)


def perform_segment(document: "SegmentationDocument", result: "SegmentedStudy", mode: str,
                    description: str, prepared: Change | None = None) -> bool:
    """Merge a result computed elsewhere (a worker) into ``document`` through the ``segment`` operation:
    one undoable, journalled step named ``description``; False when nothing changed. ``prepared``: the
    change :func:`prepare_segment` computed in the worker; written as it is while the document is still at its
    revision, else (an edit, an undo, a lock since) the merge is computed again here, against what is on screen."""
    if prepared is not None and prepared.revision == document.revision:
        changed = document.apply_change(prepared, description)
        for text in prepared.cautions if changed else ():  # as perform() says them (values that had to move)
            document.announce(text, "warning")
        return changed
    values: dict[str, Any] = {"model": result.model.id, "mode": mode, RESULT: result}
    return segment_operation().perform(document, values, description=description)


__all__ = ["ALLOW_MODALITY", "MODEL", "MODELS", "OPERATIONS", "RESULT", "SEGMENT", "SEGMENT_OPERATION", "SETTINGS",
           "perform_segment", "prepare_segment", "register_operations", "segment_image", "segment_operation"]
