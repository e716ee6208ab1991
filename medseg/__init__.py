"""medseg: CT segmentation with a resolution-adaptive U-Net."""

import os

# ONNX Runtime records a device id, the OS, the CPU and the Python path in
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db when it is imported, unless
# this is set first. Set here, before anything of medseg can import it: the app, the CLI,
# the frozen launcher and notebooks all import this package first. A user may set it to 0.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"
