"""Validation: sliding-window inference on the held-out cases at the plan's spacing."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import torch

from medseg.model.evaluate import dice_per_label
from medseg.model.plan import Plan
from medseg.model.training.sampling import PreparedCase
from medseg.model.unet import UNet
from medseg.progress import CancelToken


def validate(
    network: UNet, cases: Sequence[PreparedCase], plan: Plan, labels: Mapping[int, str],
    device: torch.device, step: float = 0.5, amp: bool = False, cancel: CancelToken | None = None,
) -> dict[str, float]:
    """Sliding-window inference on held-out cases at the plan's spacing; mean Dice per label name."""
    return validate_with_loss(network, cases, plan, labels, device, step, amp, cancel)[0]


def validate_with_loss(
    network: UNet, cases: Sequence[PreparedCase], plan: Plan, labels: Mapping[int, str],
    device: torch.device, step: float = 0.5, amp: bool = False, cancel: CancelToken | None = None,
) -> tuple[dict[str, float], float]:
    """(mean Dice per label name, mean Dice+CE loss) of sliding-window inference on held-out cases."""
    from medseg.model.losses import DiceCELoss
    from medseg.model.sliding_window import sliding_window_logits

    was_training, was_ds = network.training, network.deep_supervision
    network.eval()
    network.deep_supervision = False
    per_label: dict[str, list[float]] = {name: [] for value, name in labels.items() if value != 0}
    losses: list[float] = []
    loss_fn = DiceCELoss()
    try:
        with torch.no_grad():
            for case in cases:
                if cancel is not None:
                    cancel.raise_if_cancelled()
                # Tiles batched 8 per pass (2D tiles are small); stitching as at inference.
                logits = sliding_window_logits(network, case.image, plan, step_size=step, tile_batch=8)
                target = case.label.to(logits.device).long()
                losses.append(float(loss_fn(logits[None].float(), target[None])))
                prediction = logits.argmax(0).cpu().numpy()
                scores = dice_per_label(prediction, case.label[0].numpy(), [v for v in labels if v != 0])
                for value, dice in scores.items():
                    if not math.isnan(dice):
                        per_label[labels[value]].append(dice)
    finally:
        network.deep_supervision = was_ds
        network.train(was_training)
    dice = {name: (float(np.mean(values)) if values else math.nan) for name, values in per_label.items()}
    return dice, (float(np.mean(losses)) if losses else math.nan)
