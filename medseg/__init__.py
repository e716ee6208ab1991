"""medseg: CT segmentation with a resolution-adaptive U-Net."""

__version__ = "0.1.0"
