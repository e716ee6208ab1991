"""A label's colour as the views and panels draw it."""

from __future__ import annotations

from medseg.core.labels import Label


def label_rgb(label: Label) -> tuple[int, int, int]:
    """``label.color``, which is typed optional but always set (``Label.__post_init__`` gives every label one)."""
    assert label.color is not None, "Label.__post_init__ gives every label a colour"
    return label.color
