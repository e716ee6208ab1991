"""The ONNX graph of a configuration's network: below both inference and export.

Opset 17, the highest DirectML supports; the tile shape is fixed to the plan's patch, the
batch (tiles per pass) is dynamic. The legacy TorchScript-based exporter is used because
it writes one self-contained file and needs no onnxscript at run time. Inference
(``medseg.model.infer``, for the ONNX Runtime backends) and export (``medseg.model.export``)
both use this module, so neither imports the other.
"""

from __future__ import annotations

import copy
import io
import os
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Sequence

import torch
from torch import nn

from medseg.errors import ModelError

ONNX_OPSET = 17
ONNX_INPUT = "image"
ONNX_OUTPUT = "logits"


class FoldEnsemble(nn.Module):
    """The folds of one configuration as one network whose logits are the folds' mean."""

    def __init__(self, networks: Sequence[nn.Module]):
        super().__init__()
        self.folds = nn.ModuleList(networks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.folds[0](x)
        for fold in self.folds[1:]:
            logits = logits + fold(x)
        return logits / len(self.folds) if len(self.folds) > 1 else logits


def export_onnx(
    network: nn.Module | Sequence[nn.Module], plan: Any, path: str | Path | BinaryIO, exact_norm: bool = False
) -> str | Path | BinaryIO:
    """Write ``network`` (or the mean of several folds) as ONNX for tiles of the plan's patch size.

    ``exact_norm``: instance norms as short reductions that the runtime computes to float precision
    (:mod:`medseg.model.exact_norm`), not as InstanceNormalization."""
    model = network if isinstance(network, nn.Module) else FoldEnsemble(list(network))
    model = copy.deepcopy(model).to("cpu").float().eval()  # the caller's network stays where it is
    if exact_norm:
        from medseg.model.exact_norm import with_exact_norms

        model, _ = with_exact_norms(model)
    channels = int(getattr(plan, "num_input_channels", 1) or 1)
    example = torch.zeros(1, channels, *[int(p) for p in plan.patch_size])
    target = os.fspath(path) if isinstance(path, (str, Path)) else path
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # the legacy exporter announces its deprecation, and instance norm's "train=True"
            # note is harmless (nnU-Net's InstanceNorm has no running statistics).
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (example,),
                target,
                dynamo=False,
                opset_version=ONNX_OPSET,
                input_names=[ONNX_INPUT],
                output_names=[ONNX_OUTPUT],
                dynamic_axes={ONNX_INPUT: {0: "tiles"}, ONNX_OUTPUT: {0: "tiles"}},
                do_constant_folding=True,
            )
    except Exception as error:  # the exporter raises many types; the user needs one message
        raise ModelError(f"the network could not be exported to ONNX: {error}", path=path if isinstance(path, (str, Path)) else None) from error
    return path


def add_onnx_to_package(package: Any, configuration: str) -> bytes:
    """Export a configuration's folds (averaged) to ONNX and keep it in ``package.onnx``.

    ``save_package`` then writes it next to the weights, so it is exported only once.
    """
    from medseg.model.package import build_networks

    if configuration not in package.configurations:
        raise ModelError(f"model {package.name!r} has no configuration {configuration!r}")
    networks = build_networks(package, configuration, "cpu")
    buffer = io.BytesIO()
    export_onnx(networks, package.configurations[configuration], buffer)
    data = buffer.getvalue()
    if getattr(package, "onnx", None) is None:
        package.onnx = {}
    package.onnx[configuration] = data
    return data


def package_onnx(package: Any, configuration: str) -> bytes | str:
    """The configuration's ONNX model (bytes or a file path), exported on first use."""
    stored = (getattr(package, "onnx", None) or {}).get(configuration)
    if stored is None:
        return add_onnx_to_package(package, configuration)
    if isinstance(stored, io.BytesIO):
        return stored.getvalue()
    if isinstance(stored, (bytes, bytearray)):
        return bytes(stored)
    return os.fspath(stored)
