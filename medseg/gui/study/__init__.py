"""Getting images and segmentations in: loading a study and segmenting it in workers, the series browser, segmentation files."""
