"""The prompt session of the edit layer (what a model-backed prompt does to the label map), on real CT.

The model is stood in for by a geometric engine (a ball per positive point, a smaller hole per negative
one) so these tests check the edit layer's own rules exactly: the object goes into the label where the
paint rules let it, a locked label is never touched, voxels the object leaves get back the value they had
before it, undo restores the label map bit for bit, a superseded prompt is dropped. The real model behind
the same session: tests/workflows/test_interactive_edit.py and tests/gui/test_interactive_prompt.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import LabelMap
from medseg.edit.prompt_session import Prompt, PromptSession, prompt_from_outline
from medseg.edit.tools import PaintRules
from medseg.edit.tools.rules import LockedLabelError
from medseg.errors import Cancelled


class BallEngine:
    """A positive point adds a ball of radius 6 voxels, a negative one removes a ball of radius 3."""

    def __init__(self, shape):
        self.mask = np.zeros(shape, np.uint8)
        self.calls = []

    def add(self, prompt, cancel=None, progress=None):
        if cancel is not None and cancel.cancelled:
            raise Cancelled()
        self.calls.append(prompt)
        radius = 6 if prompt.positive else 3
        grid = np.indices(self.mask.shape)
        ball = sum((g - c) ** 2 for g, c in zip(grid, prompt.point)) <= radius * radius
        self.mask[ball] = 1 if prompt.positive else 0
        lo = tuple(max(0, int(c) - radius) for c in prompt.point)
        hi = tuple(min(n, int(c) + radius + 1) for c, n in zip(prompt.point, self.mask.shape))
        return lo, hi

    def new_object(self):
        self.mask[...] = 0


@pytest.fixture
def document(chest_image):
    """lung1 (real CT) with label 2 painted over a block beside the tumour region."""
    doc = SegmentationDocument()
    doc.set_volume(chest_image)
    label_map = LabelMap.empty_like(chest_image)
    label_map.array[30:34, 350:360, 200:215] = 2
    label_map.ensure_entry(2)
    doc.set_label_map(label_map.to_volume(), label_map.labels)
    return doc


def test_the_object_goes_into_the_label_and_undo_restores_exactly(document):
    before = document.label_map.array.copy()
    engine = BallEngine(before.shape)
    session = PromptSession(document, engine, label=1)
    session.add(Prompt("point", True, point=(32.0, 355.0, 212.0)))
    preview = session.compute()
    assert preview is not None and (document.label_map.array == before).all()  # a preview writes nothing
    assert session.apply()
    expected = before.copy()
    expected[engine_ball((32, 355, 212), 6, before.shape)] = 1
    assert (document.label_map.array == expected).all()  # label 2 was unlocked: the object takes it
    assert document.undo()
    assert (document.label_map.array == before).all()


def engine_ball(centre, radius, shape):
    grid = np.indices(shape)
    return sum((g - c) ** 2 for g, c in zip(grid, centre)) <= radius * radius


def test_a_negative_prompt_gives_back_what_the_voxels_were(document):
    before = document.label_map.array.copy()
    session = PromptSession(document, BallEngine(before.shape), label=1)
    session.add(Prompt("point", True, point=(32.0, 355.0, 212.0)))
    session.compute()
    session.add(Prompt("point", False, point=(32.0, 357.0, 212.0)))
    session.compute()
    session.apply()
    hole = engine_ball((32, 357, 212), 3, before.shape)
    ball = engine_ball((32, 355, 212), 6, before.shape)
    after = document.label_map.array
    assert (after[ball & ~hole] == 1).all()
    assert (after[hole] == before[hole]).all() and (before[hole] == 2).any()  # label 2 is back, not background
    assert (after[~ball] == before[~ball]).all()


def test_a_locked_label_is_never_touched_and_cannot_be_the_target(document):
    document.set_label_locked(2, True)
    before = document.label_map.array.copy()
    session = PromptSession(document, BallEngine(before.shape), label=1)
    session.add(Prompt("point", True, point=(32.0, 355.0, 212.0)))
    session.compute()
    session.apply()
    assert (document.label_map.array[before == 2] == 2).all()
    assert (document.label_map.array[engine_ball((32, 355, 212), 6, before.shape) & (before == 0)] == 1).all()
    with pytest.raises(LockedLabelError, match="locked"):
        PromptSession(document, BallEngine(before.shape), label=2)


def test_only_over_background_and_cancel(document):
    before = document.label_map.array.copy()
    session = PromptSession(document, BallEngine(before.shape), label=1, rules=PaintRules(overwrite="background"))
    session.add(Prompt("point", True, point=(32.0, 355.0, 212.0)))
    session.compute()
    target = session.preview.labels
    assert (target[before[tuple(slice(a, b) for a, b in zip(*session.preview.box))] == 2] == 2).all()
    session.cancel()
    assert session.preview is None and (document.label_map.array == before).all()
    assert not document.history.can_undo()


def test_a_newer_prompt_supersedes_a_queued_one(document):
    engine = BallEngine(document.label_map.shape_zyx)
    session = PromptSession(document, engine, label=1)
    session.add(Prompt("point", True, point=(32.0, 355.0, 212.0)))
    session.add(Prompt("point", True, point=(20.0, 300.0, 150.0)))  # before the first ran: it replaces it
    session.compute()
    assert [p.point for p in session.prompts] == [(20.0, 300.0, 150.0)] and session.dropped == 1
    assert [p.point for p in engine.calls] == [(20.0, 300.0, 150.0)]


def test_outlines_become_box_lasso_and_scribble_prompts():
    shape = (40, 100, 120)
    box = prompt_from_outline("box", [(10.2, 20, 30), (10.2, 40.4, 61)], 0, shape, positive=False)
    assert box == Prompt("box", False, box=((10, 11), (20, 41), (30, 62)))
    square = [(5, 20, 30), (5, 20, 50), (5, 40, 50), (5, 40, 30)]
    lasso = prompt_from_outline("lasso", square, 0, shape)
    assert lasso.origin[0] == 5 and lasso.mask.shape[0] == 1
    # skimage's polygon, the oracle: a square with corners on voxel centres 20..40 covers 21 x 21 voxels
    from skimage.draw import polygon

    rows, cols = polygon([20, 20, 40, 40], [30, 50, 50, 30], shape[1:])
    assert lasso.mask.sum() == len(rows) == 441
    scribble = prompt_from_outline("scribble", [(7, 10, 5), (7, 10, 25)], 0, shape)
    assert scribble.mask.sum() == 21 and scribble.origin == (7, 10, 5)
    assert prompt_from_outline("box", [(50, 1, 1), (50, 9, 9)], 0, shape) is None  # off the image
