"""Add a training case: the open image and its segmentation, saved into a training set's workspace.

The Train tab's "Add current case" comes here. The case is written atomically (image, label
map, ``case.json`` last) with each label whole — name, colour, coded concept, provenance — so a
model trained on the set codes its labels as the data did. With ``deidentify`` the case gets a
keyed pseudonym instead of the series' description (the same series keeps its pseudonym).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from medseg.core.labels import Label
from medseg.core.volume import Volume


def case_pseudonym(identity: str) -> str:
    """A case name that says nothing about the patient (keyed with the user's key: the same series keeps it)."""
    from medseg.io.deidentify import user_deidentifier

    return "case-" + user_deidentifier().pseudonym("case", identity, 12)


def add_training_case(training_set: Any, image: Volume, label_map: Volume, labels: Mapping[int, Label],
                      name: str = "case", deidentify: bool = False) -> Any:
    """Save the case into ``training_set`` (a :class:`medseg.model.training_set.TrainingSet`, or the folder of a
    new one, whose manifest is then written) and list it; returns its entry. Every label value in the map
    must be named (a DatasetError says which are not)."""
    from medseg.model.training_set import TrainingSet

    created = not isinstance(training_set, TrainingSet)
    if created:
        training_set = TrainingSet(os.fspath(training_set))
    if deidentify:
        name = case_pseudonym(image.meta.series_uid or "|".join(image.meta.source_files[:1]) or name)
    entry = training_set.add_editor_case(image, label_map, {int(v): label for v, label in labels.items() if v},
                                         name=name)
    if created:
        training_set.save()
    return entry


__all__ = ["add_training_case", "case_pseudonym"]
