"""One optimiser step as ``medseg train`` takes it (medseg.model.training.run), for the benchmarks
that time steps without a whole run (bench_train.py, gpu_check.py)."""

from __future__ import annotations

import torch


def optimizer_step(model, network, optimizer, scaler, loss_fn, images, targets, amp: bool, device_type: str):
    """Forward (autocast when ``amp``), deep-supervision loss, scaled backward, clip at 12, step; returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, enabled=amp):
        outputs = model(images)
    loss = loss_fn(outputs, targets)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(network.parameters(), 12.0)
    scaler.step(optimizer)
    scaler.update()
    return loss
