"""Running a model on the study: the Segment panel, the model chooser and catalogue window, structure choice, comparison of two models."""
