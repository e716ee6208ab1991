"""The structures of a segmentation: the label table at 117 rows, statistics and the one-page report."""
