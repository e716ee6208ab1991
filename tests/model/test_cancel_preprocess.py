"""A Cancel while the image is being prepared stops the preparation itself (#42.17): the cancel token is
looked at before every slab of the resampling, not only once the whole image is resampled."""

from __future__ import annotations

from pathlib import Path

import pytest

from medseg.errors import Cancelled
from medseg.io import read_image
from medseg.model.infer import prepare, segment
from medseg.model.package import load_package, starter_model_path
from medseg.progress import CancelToken


class CountingToken(CancelToken):
    """Counts the looks; cancelled from the ``at``-th look on (None: never)."""

    def __init__(self, at: int | None = None) -> None:
        super().__init__()
        self.at, self.looks = at, 0

    def raise_if_cancelled(self) -> None:
        self.looks += 1
        if self.at is not None and self.looks >= self.at:
            self.cancel()
        super().raise_if_cancelled()


@pytest.fixture(scope="module")
def chest(ct_dir: Path):
    return read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")  # 512 × 512 × 48


def test_preparing_the_image_stops_at_the_next_slab(chest):
    package = load_package(starter_model_path())
    never = CountingToken()
    prepare(chest, package, cancel=never)
    looks = never.looks
    assert looks >= 6  # the steps around the resampling, and one look per slab (several for a 512 × 512 CT)
    for at in (looks // 2, looks - 1):  # in the middle of the resampling, and at its last slab
        token = CountingToken(at)
        with pytest.raises(Cancelled):
            prepare(chest, package, cancel=token)
        assert token.looks == at  # stopped at that look: the rest of the image was not resampled


def test_segment_hands_its_cancel_to_the_preparation(chest):
    token = CountingToken(3)
    with pytest.raises(Cancelled):
        segment(chest, load_package(starter_model_path()), device="cpu", cancel=token)
    assert token.looks == 3


def test_the_use_case_hands_its_cancel_to_the_preparation(chest):
    """What the GUI's Segment, ``medseg segment`` and batch run (medseg.workflows): the same looks."""
    from medseg.workflows.segment import Segmenter, SegmentSettings

    never = CountingToken()
    segmenter = Segmenter(None, SegmentSettings(device="cpu"))
    segmenter.prepare(chest, cancel=never)
    token = CountingToken(never.looks - 1)  # the last look inside the preparation
    with pytest.raises(Cancelled):
        segmenter.segment(chest, cancel=token)
    assert token.looks == never.looks - 1
