"""An exported ONNX model: the network file and its sidecar, written and read here.

``medseg export --format onnx -o liver.onnx`` writes the network (``liver.onnx``: one configuration's folds
averaged inside it, tiles of the plan's patch, any number of tiles a pass) and beside it ``liver.onnx.json``:
plain JSON with what ONNX Runtime needs around the network to segment a CT — the configuration's plan (target
spacing, patch, normalisation scheme and the CT intensity statistics), the labels with their colours and codes,
the post-processing steps and the provenance (licence). Nothing in either file is code or a pickle.

:func:`read_onnx_model` turns the pair into a ModelPackage with no weights whose one configuration's network is
the ONNX file; :mod:`medseg.model.kinds.onnx_kind` runs it. Without its sidecar an ``.onnx`` file is refused in
words: the network alone does not say its spacing, normalisation or labels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medseg.errors import ModelError

if TYPE_CHECKING:  # the package code imports PyTorch; the export table imports this module at start-up
    from medseg.model.package_model import ModelPackage

FORMAT_NAME = "medseg-onnx-model"
FORMAT_VERSION = 1
ONNX_SUFFIX = ".onnx"  # the export table's ONNX row writes this suffix (medseg.model.export_formats), the kind opens it
SIDECAR_SUFFIX = ".json"  # appended: liver.onnx -> liver.onnx.json
MAX_SIDECAR_BYTES = 16 << 20  # plans and names: kilobytes


def sidecar_path(onnx_path: str | Path) -> Path:
    onnx_path = Path(onnx_path)
    return onnx_path.with_name(onnx_path.name + SIDECAR_SUFFIX)


def onnx_sidecar(package: ModelPackage, configuration: str, onnx_path: Path) -> tuple[Path, bytes]:
    """Where the sidecar of ``configuration``'s export to ``onnx_path`` goes, and its bytes."""
    from medseg.model.onnx_graph import ONNX_INPUT, ONNX_OPSET, ONNX_OUTPUT
    from medseg.model.package import package_description

    description = package_description(package, [configuration])
    sidecar = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "onnx": Path(onnx_path).name,
               "configuration": configuration, "input": ONNX_INPUT, "output": ONNX_OUTPUT, "opset": ONNX_OPSET,
               **description}
    return sidecar_path(onnx_path), json.dumps(sidecar, indent=1).encode("utf-8")


def read_onnx_model(onnx_path: str | Path) -> ModelPackage:
    """The ONNX file and its sidecar as a package without weights (its one configuration runs the file)."""
    onnx_path = Path(onnx_path)
    sidecar = sidecar_path(onnx_path)
    if not onnx_path.is_file():
        raise ModelError("the ONNX model file is missing", path=onnx_path)
    if not sidecar.is_file():
        raise ModelError(f"an ONNX network without its sidecar {sidecar.name}: the file alone does not say its "
                         "spacing, normalisation or labels", path=onnx_path,
                         hint="export it again with `medseg export --format onnx` (it writes both files), or "
                              "keep the two files together")
    if sidecar.stat().st_size > MAX_SIDECAR_BYTES:
        raise ModelError(f"{sidecar.name} is {sidecar.stat().st_size / 2**20:.0f} MiB; a model description is "
                         "kilobytes", path=sidecar)
    try:
        raw = json.loads(sidecar.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ModelError(f"{sidecar.name} is not valid JSON: {error}"[:300], path=sidecar) from None
    description = _checked(raw, sidecar)
    from medseg.model.package import package_from_description

    package = package_from_description(description, sidecar, weights={}, onnx={raw["configuration"]: onnx_path})
    package.source_path = onnx_path  # what the card names (the sidecar goes with it)
    return package


def _checked(raw: Any, sidecar: Path) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise ModelError(f"{sidecar.name} does not describe a {FORMAT_NAME}", path=sidecar)
    version = raw.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelError(f"ONNX model format version {version} is newer than this medseg understands "
                         f"({FORMAT_VERSION})", path=sidecar, hint="update medseg")
    expected = {"name": str, "configuration": str, "onnx": str, "configurations": dict, "labels": dict}
    for key, kind in expected.items():
        if not isinstance(raw.get(key), kind):
            raise ModelError(f"{sidecar.name}: {key!r} is missing or not a JSON {'string' if kind is str else 'object'}",
                             path=sidecar)
    for key in ("colors", "codes", "provenance"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise ModelError(f"{sidecar.name}: {key!r} must be a JSON object", path=sidecar)
    if list(raw["configurations"]) != [raw["configuration"]]:
        raise ModelError(f"{sidecar.name} must describe exactly its one configuration {raw['configuration']!r}",
                         path=sidecar)
    return raw


__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "ONNX_SUFFIX", "onnx_sidecar", "read_onnx_model", "sidecar_path"]
