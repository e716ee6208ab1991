"""Fixtures of the robustness probes (their helpers are in probes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def three_slices(ct_dir: Path) -> Path:
    """The smallest real CT series (GE, 3 slices of 512 x 512)."""
    return ct_dir / "dcmqi_ct3slice_masks" / "image"
