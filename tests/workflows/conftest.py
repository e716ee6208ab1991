"""Real CT for the use-case tests: the smallest real series, and copies of it with a changed header."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def three_slices(ct_dir: Path) -> Path:
    """The smallest real CT series (GE LightSpeed, 3 slices of 512 x 512, Modality CT)."""
    return ct_dir / "dcmqi_ct3slice_masks" / "image"


@pytest.fixture(scope="session")
def three_slices_as_mr(three_slices: Path, tmp_path_factory) -> Path:
    """The same slices with the header saying MR (what a user meets when an MR study is opened)."""
    import pydicom

    target = tmp_path_factory.mktemp("mr")
    for path in sorted(three_slices.iterdir()):
        dataset = pydicom.dcmread(path)
        dataset.Modality = "MR"
        dataset.save_as(target / path.name)
    return target
