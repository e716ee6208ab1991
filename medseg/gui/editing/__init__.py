"""Correcting a segmentation: the Edit panel, its tools and options, and the preview workers (grow from seeds, Interactive AI)."""
