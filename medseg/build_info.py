"""Which medseg this is: a source checkout, or an installer bundle built for one AI runtime.

The installer build (installers/medseg.spec) writes ``build_info.json`` into
``medseg.resources``; a source checkout has none and reports the variant ``"source"``.
Variants: ``cpu`` (Linux, CPU PyTorch), ``cuda`` (Windows, PyTorch with CUDA),
``directml`` (Windows, ONNX Runtime with DirectML: inference only), ``mps`` (macOS).
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from importlib import resources
from typing import Any

from medseg.errors import DeviceError

SOURCE = "source"
BUILD_INFO_FILE = "build_info.json"

# Variants that ship without what training needs, and why (shown to the user as is).
NO_TRAINING = {
    "directml": "this DirectML build of medseg runs models through ONNX Runtime and cannot train: "
                "PyTorch has no DirectML device. Train on a machine with the CUDA build (or a Linux/macOS "
                "install), then open the model package here.",
}


@lru_cache(maxsize=1)
def build_info() -> dict[str, Any]:
    """The bundle's build facts (variant, platform, build time), or ``{"variant": "source"}``."""
    info: dict[str, Any] = {"variant": SOURCE}
    try:
        recorded = resources.files("medseg.resources") / BUILD_INFO_FILE
        if recorded.is_file():
            info.update(json.loads(recorded.read_text(encoding="utf-8")))
    except (OSError, ValueError, ModuleNotFoundError):  # a damaged file must not stop the app
        info["variant"] = SOURCE
    info["frozen"] = bool(getattr(sys, "frozen", False))
    return info


def variant() -> str:
    return str(build_info().get("variant", SOURCE))


def training_unavailable_reason() -> str | None:
    """Why this build cannot train, or None when it can."""
    return NO_TRAINING.get(variant())


def require_training() -> None:
    """Raise a clear DeviceError in builds that cannot train (before any work starts)."""
    reason = training_unavailable_reason()
    if reason:
        raise DeviceError(f"training is not available: {reason}")
