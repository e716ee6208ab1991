"""Fine-tuning with a changed label set: output heads rebuilt, known labels keep their rows."""

from __future__ import annotations

from typing import Mapping

import torch

from medseg.model.unet import UNet


def label_set_change(base_labels: Mapping[int, str], labels: Mapping[int, str]) -> tuple[list[str], list[str]]:
    """(names new to the base model, names of the base model left out), background excluded."""
    base, chosen = set(base_labels.values()) - {"background"}, set(labels.values()) - {"background"}
    return ([n for n in labels.values() if n in chosen - base],
            [n for n in base_labels.values() if n in base - chosen])


def adapt_state_to_labels(
    state: Mapping[str, torch.Tensor], network: UNet, base_labels: Mapping[int, str], labels: Mapping[int, str]
) -> tuple[dict[str, torch.Tensor], str | None]:
    """Base weights for a network with ``labels``; output heads rebuilt when the label set changed.

    Rows of the heads for labels the base model knows (matched by name) keep their trained
    weights, new labels start from the fresh initialisation. Returns the state and a message
    (None when the labels are unchanged).
    """
    if [labels[k] for k in sorted(labels)] == [base_labels[k] for k in sorted(base_labels)]:
        return dict(state), None
    fresh = network.state_dict()
    adapted = {k: v for k, v in state.items() if not k.startswith("decoder.seg_layers.")}
    base_index = {name: index for index, name in base_labels.items()}
    kept = []
    for key, value in fresh.items():
        if not key.startswith("decoder.seg_layers."):
            continue
        new = value.clone()
        old = state.get(key)
        if old is not None:
            for index, name in labels.items():
                if name in base_index and base_index[name] < old.shape[0]:
                    new[index] = old[base_index[name]]
                    kept.append(name)
        adapted[key] = new
    added, dropped = label_set_change(base_labels, labels)
    message = (
        f"label set changed: output heads replaced ({len(labels)} classes instead of {len(base_labels)}); "
        f"kept trained rows for {sorted(set(kept))}, new: {added or 'none'}, dropped: {dropped or 'none'}"
    )
    return adapted, message

