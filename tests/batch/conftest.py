"""Archives of real CT for the batch tests, copied into a temporary folder (the shared data stays read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from batch_helpers import copy_series


@pytest.fixture
def small_archive(ct_dir: Path, tmp_path: Path) -> Path:
    """Four single real CT slices from four scanners: GE head, Hitachi (tilted, JPEG 2000 with a pixel
    representation mismatch), Toshiba (JPEG 2000), and a TCIA abdomen with flipped rows."""
    root = tmp_path / "archive"
    copy_series(ct_dir / "pydicom_data", root / "ge_head", "693_UNCR.dcm")
    copy_series(ct_dir / "pydicom_wheel_testfiles", root / "hitachi_tilt", "J2K_pixelrep_mismatch.dcm")
    copy_series(ct_dir / "cornerstone_testimages", root / "toshiba", "CT2_J2KR")
    copy_series(ct_dir / "pydicom_data", root / "tcia_abdomen", "explicit_VR-UN.dcm")
    return root
