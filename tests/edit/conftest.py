"""Real CT for the editing tests: TotalSegmentator's abdomen (3 mm, 41 labels) and pyradiomics' chest
(0.57 × 0.57 × 5 mm: strongly anisotropic, for the millimetre tools)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medseg.edit.label_map import LabelMap
from medseg.io import read_image


@pytest.fixture(scope="session")
def abdomen_files(ct_dir: Path):
    folder = ct_dir / "totalsegmentator"
    return folder / "example_ct_sm.nii.gz", folder / "example_seg.nii.gz"


@pytest.fixture(scope="session")
def abdomen_image(abdomen_files):
    return read_image(abdomen_files[0])


@pytest.fixture(scope="session")
def abdomen_labels_array(abdomen_files):
    return read_image(abdomen_files[1])


@pytest.fixture
def abdomen(abdomen_image, abdomen_labels_array):
    """(image, a fresh LabelMap of TotalSegmentator's labels) — fresh per test, the tools edit it."""
    volume = abdomen_labels_array.with_array(np.array(abdomen_labels_array.array, copy=True))
    return abdomen_image, LabelMap.from_volume(volume, name_set="TotalSegmentator v2 (total)")


@pytest.fixture(scope="session")
def chest_image(ct_dir: Path):
    return read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")


@pytest.fixture
def chest(chest_image):
    return chest_image, LabelMap.empty_like(chest_image)
