"""Training loss: soft Dice + cross-entropy, with deep supervision, as nnU-Net v2 trains.

nnU-Net's default (``DC_and_CE_loss`` wrapped in ``DeepSupervisionWrapper``):
- soft Dice over the foreground classes only (``do_bg=False``), smooth 1e-5;
- cross-entropy over all classes; both weighted 1;
- deep supervision: the decoder's outputs from full resolution down get weights 1, 1/2,
  1/4, ... with the coarsest set to 0, normalised to sum 1.

One deliberate difference: Dice is ``1 - dice`` instead of ``-dice`` so the curve the
GUI draws stays positive; the gradients are identical.

Dice is computed per sample by default (``batch_dice=False``), which makes the loss a
plain mean over samples. That is what lets a DistributedDataParallel run with the batch
split over processes reproduce a single-process run exactly (the gradient of a mean of
per-sample terms is the mean of the per-process gradients).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

DICE_SMOOTH = 1e-5  # nnU-Net MemoryEfficientSoftDiceLoss default


class SoftDiceLoss(nn.Module):
    """1 - mean soft Dice over foreground classes. ``target`` holds class indices (B, 1, ...)."""

    def __init__(self, batch_dice: bool = False, include_background: bool = False, smooth: float = DICE_SMOOTH):
        super().__init__()
        self.batch_dice = batch_dice
        self.include_background = include_background
        self.smooth = smooth

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits.float(), dim=1)
        onehot = torch.zeros_like(probs).scatter_(1, target.long(), 1.0)
        if not self.include_background:
            probs, onehot = probs[:, 1:], onehot[:, 1:]
        spatial = tuple(range(2, probs.ndim))
        intersection = (probs * onehot).sum(spatial)
        total = probs.sum(spatial) + onehot.sum(spatial)
        if self.batch_dice:
            intersection, total = intersection.sum(0), total.sum(0)
        dice = (2.0 * intersection + self.smooth) / (total + self.smooth).clamp_min(1e-8)
        return 1.0 - dice.mean()


class DiceCELoss(nn.Module):
    """Soft Dice + cross-entropy, each weighted 1 (nnU-Net ``DC_and_CE_loss``)."""

    def __init__(self, batch_dice: bool = False, weight_dice: float = 1.0, weight_ce: float = 1.0):
        super().__init__()
        self.dice = SoftDiceLoss(batch_dice=batch_dice)
        self.weight_dice = weight_dice
        self.weight_ce = weight_ce

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        ce = F.cross_entropy(logits.float(), target[:, 0].long())
        return self.weight_ce * ce + self.weight_dice * self.dice(logits, target)


def deep_supervision_weights(n_outputs: int) -> list[float]:
    """nnU-Net's weights: 1/2**i from full resolution down, the coarsest 0, normalised."""
    if n_outputs == 1:
        return [1.0]
    weights = [1.0 / (2**i) for i in range(n_outputs)]
    weights[-1] = 0.0
    total = sum(weights)
    return [w / total for w in weights]


def downsample_target(target: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """Nearest-neighbour label map at a deep-supervision output's size (nnU-Net uses nearest too)."""
    if tuple(target.shape[2:]) == tuple(size):
        return target
    return F.interpolate(target.float(), size=tuple(size), mode="nearest-exact").to(target.dtype)


class DeepSupervisionLoss(nn.Module):
    """Weighted sum of a loss over the decoder's outputs (full resolution first)."""

    def __init__(self, loss: nn.Module | None = None):
        super().__init__()
        self.loss = loss if loss is not None else DiceCELoss()

    def forward(self, outputs: torch.Tensor | Sequence[torch.Tensor], target: torch.Tensor) -> torch.Tensor:
        if isinstance(outputs, torch.Tensor):
            return self.loss(outputs, target)
        weights = deep_supervision_weights(len(outputs))
        total = outputs[0].new_zeros((), dtype=torch.float32)
        for weight, output in zip(weights, outputs):
            # Zero-weight outputs stay in the graph so DistributedDataParallel sees every head used.
            total = total + weight * self.loss(output, downsample_target(target, output.shape[2:]))
        return total
