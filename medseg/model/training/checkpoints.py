"""The checkpoint format: weights, optimiser state and progress in one safetensors file.

No pickle: tensors go to safetensors, everything else to JSON in its metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from safetensors.torch import load_file, save_file

from medseg.errors import ModelError
from medseg.io.atomic import atomic_path
from medseg.model.plan import Plan


def _flatten_optimizer(state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors, scalars = {}, {}
    for index, entry in state["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{key}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value
    for name, value in meta.get("scalars", {}).items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    path: Path, network: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: Mapping[str, Any]
) -> None:
    """Weights, optimiser state and progress in one safetensors file, written atomically.

    Write to a temporary file, fsync, then rename over the old one: a crash or cancel at any
    moment leaves either the previous complete checkpoint or the new one, never half a file.
    """
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in network.state_dict().items()}
    optimizer_tensors, optimizer_meta = _flatten_optimizer(optimizer.state_dict())
    tensors.update(optimizer_tensors)
    metadata = {"medseg_checkpoint": json.dumps({**meta, "optimizer": optimizer_meta})}
    with atomic_path(path) as temporary:
        save_file(tensors, str(temporary), metadata=metadata)


def load_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None, dict[str, Any]]:
    """(model state dict, optimiser state dict, progress metadata) from :func:`save_checkpoint`."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = json.loads((handle.metadata() or {})["medseg_checkpoint"])
        tensors = load_file(str(path))
    except Exception as error:  # any failure means an unusable checkpoint
        raise ModelError(f"cannot read training checkpoint: {error}", path=path) from error
    model = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    optimizer = _unflatten_optimizer(tensors, metadata.pop("optimizer")) if "optimizer" in metadata else None
    return model, optimizer, metadata


def package_from_checkpoint(
    path: str | Path, name: str, colors: Mapping[int, Sequence[int]] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Any:
    """A model package from a training checkpoint (e.g. the best one of a run that is still going)."""
    from medseg.model.package_model import ModelPackage, package_labels

    state, _, meta = load_checkpoint(Path(path))
    plan = Plan.from_dict(meta["plan"])
    labels = {int(k): v for k, v in meta["labels"].items()}
    record = {"trained_with": "medseg train", "weights": f"checkpoint {Path(path).name} after epoch "
              f"{int(meta['epoch']) + 1} of {meta.get('epochs')}", "config": meta.get("config"),
              "history": meta.get("history"), **dict(provenance or {})}
    return ModelPackage(name=name, configurations={plan.name: plan},
                        labels=package_labels(labels, {int(k): tuple(v) for k, v in (colors or {}).items()}),
                        weights={plan.name: [state]}, provenance=record)

