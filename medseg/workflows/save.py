"""Save a segmentation: the target checked once, before any work; the files written atomically and verified.

:func:`plan_save` checks an output the moment it is named — its format (by the name:
``.dcm`` for a DICOM SEG, ``.nii.gz``/``.nii``/``.nrrd``/``.mha`` for a label map with its
``.labels.json`` sidecar), a writable folder, that it is none of the inputs named so far and
not a file medseg did not write (unless forced) — and returns a :class:`SaveTarget`.
:meth:`SaveTarget.check_image` adds what only the loaded image can tell (none of its source
files is an output; a DICOM SEG can reference it). :func:`save_segmentation` then writes
through the I/O layer's writers (every file through :mod:`medseg.io.atomic`: a temporary
file, checked by its format, renamed over the old one), with no check repeated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.io.label_files import DICOM_SEG, LABEL_MAP


@dataclass(frozen=True)
class SaveTarget:
    """An output checked before the work: where, in which format, and every file the save writes."""

    path: Path
    format: str  # DICOM_SEG or LABEL_MAP
    outputs: tuple[Path, ...]  # the segmentation, and a label map's sidecar
    option: str = "the output"  # how the user named it (e.g. "-o"), for messages
    written_by: str = "medseg"  # recorded in a label map's sidecar (e.g. "medseg edit")

    def check_image(self, image: Volume) -> None:
        """What only the loaded image tells: no output is one of its source files; a SEG can reference it."""
        from medseg.io.output_paths import check_not_an_input, source_paths

        sources = source_paths(image)
        for output in self.outputs:
            check_not_an_input(output, sources, self.option)
        if self.format == DICOM_SEG:
            from medseg.io.dicom_seg_write import check_can_reference

            check_can_reference(image, self.path)


def plan_save(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (), *, force: bool = False,
              option: str = "the output", written_by: str | None = None) -> SaveTarget:
    """Check an output before the work (format, folder, not an input, not someone else's file).

    ``written_by`` (e.g. "medseg edit"): a command that may replace its own earlier output, unchanged
    since, without force (and records its name in what it writes); otherwise only a model's result
    medseg wrote and nobody changed since is replaced without force."""
    from medseg.io.atomic import check_writable
    from medseg.io.label_files import is_written_by
    from medseg.io.output_paths import check_output
    from medseg.io.segmentations import is_saved_segmentation, segmentation_format, segmentation_outputs

    if not str(path).strip():  # Path("") is "." and would be blamed as a format
        from medseg.errors import SaveError

        raise SaveError(f"no output file given ({option} is empty)", hint="name the file to write, e.g. seg.nii.gz")
    path = Path(path)
    kind = segmentation_format(path)  # an unknown suffix is refused here, once
    outputs = tuple(segmentation_outputs(path))
    # replaced without force only when it is a model's result medseg wrote and nobody changed since (issue 43)
    ours = is_saved_segmentation if written_by is None else (lambda p: is_written_by(p, written_by))
    check_output(path, inputs, force=force, ours=ours, option=option, extra_outputs=outputs[1:])
    check_writable(path)
    return SaveTarget(path, kind, outputs, option, written_by or "medseg")


@dataclass
class SavedSegmentation:
    path: Path
    files: list[Path]
    notes: list[str] = field(default_factory=list)


def save_segmentation(target: SaveTarget, label_map: Volume, image: Volume, labels: Mapping[int, Label],
                      deidentifier: Any = None) -> SavedSegmentation:
    """Write ``label_map`` (on ``image``'s grid) described by ``labels`` to a checked target.

    ``deidentifier`` (a :class:`medseg.io.deidentify.Deidentifier`): a research export — a DICOM SEG
    then references a de-identified copy of the source series written beside it."""
    segments = [label for value, label in sorted(labels.items()) if value]
    if deidentifier is not None:
        from medseg.io.deidentify import save_deidentified

        notes = save_deidentified(label_map, image, target.path, segments, deidentifier)
    else:
        from medseg.io.segmentations import write_segmentation

        notes = write_segmentation(label_map, image, target.path, segments, target.written_by)
    return SavedSegmentation(target.path, [p for p in target.outputs if p.exists()], list(notes))


__all__ = ["SaveTarget", "SavedSegmentation", "plan_save", "save_segmentation", "DICOM_SEG", "LABEL_MAP"]
