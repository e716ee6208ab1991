"""The U-Net's inference forward on the CPU, computing the same numbers in far less memory.

On a 128^3 tile of nnU-Net's 3d_fullres network one 32-channel activation is 256 MiB,
and the plain module forward holds up to seven of them at once at the last decoder
stage (the skip, the upsampled tensor, their 64-channel concatenation, the conv output,
the norm output, and oneDNN's reordered copies of the conv input and output): +1.7 GB
for one tile, the whole job's peak. Here, per step, at most one input and one output of
that size are alive (+0.5 GB):

* convolutions run in slabs along the first spatial axis into one output tensor, so
  oneDNN's reorder copies are slab-sized (each output voxel sums exactly the same inputs,
  with zero padding made explicit at the slab ends);
* the first decoder convolution reads its concatenated input slab by slab, made from the
  skip and the upsampled lower stage on the fly (a kernel == stride transposed conv maps
  each input slice to its own output slices), so neither the full upsampled tensor nor
  the concatenation ever exists, and each skip is freed once used;
* instance norm is computed in place by PyTorch's own batch-norm kernel (the kernel
  that nn.InstanceNorm uses, with its output aliased to its input: it reads the
  statistics first, then maps each element to itself), LeakyReLU in place as before.

Results equal the module forward bit for bit (tests/model/test_lean_forward.py checks
it); anything this module does not recognise falls back to the module forward.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from medseg import threads as medseg_threads
from medseg.model.unet import ConvNormAct, ConvStack, Encoder, ResidualBlock, ResidualEncoder, UNet

# Bytes of convolution input per slab (oneDNN reorders the slab, and its output, into
# its blocked layout: a few times this much scratch per convolution).
SLAB_BYTES = 16 * 1024 * 1024
_slab_override: ContextVar[int | None] = ContextVar("lean_forward_slab_bytes", default=None)
_cancel: ContextVar[Callable[[], None] | None] = ContextVar("lean_forward_cancel", default=None)


@contextmanager
def slab_budget(nbytes: int) -> Iterator[None]:
    """Slabs of about ``nbytes`` for the forwards in this block (this thread only).

    Larger slabs trade memory for time: each slab re-reads the rows its kernel overlaps and
    pays a call; on a 192^3 patch with 32 channels a 16 MiB slab is 3 rows.
    """
    token = _slab_override.set(int(nbytes))
    try:
        yield
    finally:
        _slab_override.reset(token)


@contextmanager
def cancellable(check: Callable[[], None] | None) -> Iterator[None]:
    """Call ``check`` before every slab of the forwards in this block (this thread only): it raises to stop
    a pass part-way (an interactive prompt superseded by a newer one)."""
    token = _cancel.set(check)
    try:
        yield
    finally:
        _cancel.reset(token)


def supports(network: nn.Module) -> bool:
    return isinstance(network, UNet) and not network.decoder.deep_supervision


def _uses_onednn(conv: nn.Module) -> bool:
    """use_onednn_convolutions rerouted this conv's forward to oneDNN (an instance attribute)."""
    return "forward" in vars(conv)


def _conv(conv: nn.Module, x: torch.Tensor, padding: tuple[int, ...]) -> torch.Tensor:
    medseg_threads.refresh()  # a concurrent medseg job started or ended: this one's thread share changed
    if _uses_onednn(conv):
        return torch.ops.aten.mkldnn_convolution(x, conv.weight, conv.bias, padding, conv.stride, conv.dilation,
                                                 conv.groups)
    function = F.conv3d if x.ndim == 5 else F.conv2d
    return function(x, conv.weight, conv.bias, conv.stride, padding, conv.dilation, conv.groups)


def _row_bytes(x: torch.Tensor, channels: int | None = None) -> int:
    """Bytes of one row (one index along the first spatial axis) of x, or of x with ``channels`` channels."""
    row = x[:, :, :1].numel() * x.element_size()
    return row if channels is None else row // max(1, x.shape[1]) * channels


def _pad_first_axis(slab: torch.Tensor, before: int, after: int) -> torch.Tensor:
    if not before and not after:
        return slab
    return F.pad(slab, [0, 0] * (slab.ndim - 3) + [before, after])  # F.pad lists the last axis first


def _slabbed(conv: nn.Module, n_in: int, read: Callable[[int, int], torch.Tensor], row_bytes: int,
             into: torch.Tensor | None = None) -> torch.Tensor:
    """conv over an input of n_in rows along the first spatial axis, ``read(a, b)`` giving rows a..b.

    ``into``: write the result over this tensor, which ``read`` reads from (it must have the
    output's shape, the conv stride 1): each output slab is held back until no later slab
    reads the rows it overwrites, so at most two slabs' outputs exist besides it.
    """
    k, s, p, d = conv.kernel_size[0], conv.stride[0], conv.padding[0], conv.dilation[0]
    n_out = (n_in + 2 * p - d * (k - 1) - 1) // s + 1
    padding = (0, *conv.padding[1:])
    channel_row = row_bytes // max(1, conv.in_channels)
    out_row = channel_row * conv.out_channels // max(1, math.prod(conv.stride[1:]))
    rows = max(1, (_slab_override.get() or SLAB_BYTES) // max(1, row_bytes * s, out_row))  # bounds the slab's output (and its reorder) too
    out = into
    pending: list[tuple[int, int, torch.Tensor]] = []
    check = _cancel.get()
    for o0 in range(0, n_out, rows):
        if check is not None:
            check()
        o1 = min(n_out, o0 + rows)
        i0, i1 = o0 * s - p, (o1 - 1) * s - p + d * (k - 1) + 1
        a, b = max(0, i0), min(n_in, i1)
        slab = _pad_first_axis(read(a, b), a - i0, i1 - b)
        result = _conv(conv, slab.contiguous(), padding)
        del slab
        if out is None:
            out = result.new_empty((result.shape[0], result.shape[1], n_out, *result.shape[3:]))
        if into is None:
            out[:, :, o0:o1] = result
            continue
        pending.append((o0, o1, result))
        first_row_still_read = o1 * s - p  # by the next slab
        while pending and pending[0][1] <= first_row_still_read:
            start, stop, done = pending.pop(0)
            out[:, :, start:stop] = done
    for start, stop, done in pending:
        out[:, :, start:stop] = done  # type: ignore[index]
    assert out is not None
    return out


def _can_overwrite(conv: nn.Module, x: torch.Tensor) -> bool:
    """The conv's output has x's shape and layout (stride 1, "same" padding, as many channels)."""
    return (all(s == 1 for s in conv.stride) and all(2 * p == d * (k - 1) for k, p, d in
                                                     zip(conv.kernel_size, conv.padding, conv.dilation))
            and conv.out_channels == x.shape[1] and x.is_contiguous() and x.dtype == conv.weight.dtype)


def conv_slabs(conv: nn.Module, x: torch.Tensor, overwrite: bool = False) -> torch.Tensor:
    """conv(x), computed slab by slab along the first spatial axis; ``overwrite`` lets it reuse x's memory."""
    if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        return conv(x)
    into = x if overwrite and _can_overwrite(conv, x) else None
    return _slabbed(conv, x.shape[2], lambda a, b: x[:, :, a:b], _row_bytes(x), into)


def instance_norm_(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """nn.InstanceNorm's result, written over its input."""
    if norm.track_running_stats or not x.is_contiguous() or norm.weight is None:
        return norm(x)
    batch, channels = x.shape[:2]
    flat = x.view(1, batch * channels, *x.shape[2:])  # what F.instance_norm hands to batch_norm
    weight = norm.weight.repeat(batch) if batch > 1 else norm.weight
    bias = norm.bias.repeat(batch) if batch > 1 else norm.bias
    mean, invstd = x.new_empty(batch * channels), x.new_empty(batch * channels)
    try:
        torch.ops.aten.native_batch_norm.out(flat, weight, bias, None, None, True, 0.0, norm.eps,
                                             out=flat, save_mean=mean, save_invstd=invstd)
    except RuntimeError:  # a PyTorch that refuses the aliased output: the module's result, in new memory
        return norm(x)
    return x


def _finish(block: ConvNormAct, y: torch.Tensor) -> torch.Tensor:
    instance = isinstance(block.norm, (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d))
    y = instance_norm_(y, block.norm) if instance else block.norm(y)
    return block.nonlin(y)  # LeakyReLU(inplace=True) or Identity


def conv_norm_act(block: ConvNormAct, x: torch.Tensor, overwrite: bool = False) -> torch.Tensor:
    """The block on x; ``overwrite``: x is referenced nowhere else, its memory may take the result."""
    return _finish(block, conv_slabs(block.conv, x, overwrite))


def _stack(stack: ConvStack, x: torch.Tensor, overwrite_input: bool = False) -> torch.Tensor:
    for index, block in enumerate(stack.convs):
        x = conv_norm_act(block, x, overwrite=overwrite_input or index > 0)  # later blocks: x is our own
    return x


def _module_or_lean(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return conv_norm_act(module, x) if isinstance(module, ConvNormAct) else module(x)


def _residual_block(block: ResidualBlock, x: torch.Tensor) -> torch.Tensor:
    if isinstance(block.skip, nn.Sequential):
        residual = x
        for module in block.skip:
            residual = _module_or_lean(module, residual)
    else:
        residual = block.skip(x)
    y = conv_norm_act(block.conv2, conv_norm_act(block.conv1, x), overwrite=True)
    y += residual  # the module computes y + residual: the same sum
    return block.nonlin2(y)


def _encode(encoder: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    skips = []
    if isinstance(encoder, Encoder):
        for stage in encoder.stages:
            x = _stack(stage[0], x)
            skips.append(x)
    else:
        assert isinstance(encoder, ResidualEncoder)
        x = _stack(encoder.stem, x)
        for stage in encoder.stages:
            for block in stage.blocks:
                x = _residual_block(block, x)
            skips.append(x)
    return skips


def _up_cat_conv(up: nn.Module, low: torch.Tensor, skip: torch.Tensor, conv: nn.Module) -> torch.Tensor:
    """conv(cat(up(low), skip)) without the full up(low) or the concatenation, written over skip if it fits."""
    s = up.stride[0]
    upsampled_rows = low.shape[2] * s
    simple = (tuple(up.kernel_size) == tuple(up.stride) and not any(up.padding) and not any(up.output_padding)
              and upsampled_rows == skip.shape[2] and not isinstance(conv.padding, str) and conv.padding_mode == "zeros")
    if not simple:
        return conv_slabs(conv, torch.cat((up(low), skip), dim=1))

    def read(a: int, b: int) -> torch.Tensor:
        first, last = a // s, -(-b // s)
        upsampled = up(low[:, :, first:last])[:, :, a - first * s:b - first * s]
        return torch.cat((upsampled, skip[:, :, a:b]), dim=1)

    into = skip if _can_overwrite(conv, skip) else None  # the skip is ours (popped): its memory takes the result
    return _slabbed(conv, skip.shape[2], read, _row_bytes(skip, skip.shape[1] + up.out_channels), into)


def _decode(decoder: nn.Module, skips: list[torch.Tensor]) -> torch.Tensor:
    x = skips.pop()
    last = len(decoder.stages) - 1
    for d, (up, stack, head) in enumerate(zip(decoder.transpconvs, decoder.stages, decoder.seg_layers)):
        skip = skips.pop()
        first, rest = stack.convs[0], stack.convs[1:]
        x = _finish(first, _up_cat_conv(up, x, skip, first.conv))
        del skip
        for block in rest:
            x = conv_norm_act(block, x, overwrite=True)
        if d == last:
            return conv_slabs(head, x)
    raise AssertionError("a U-Net has at least one decoder stage")


@torch.inference_mode()
def lean_forward(network: UNet, x: torch.Tensor) -> torch.Tensor:
    """network(x) for inference (no deep supervision), in a fraction of the memory."""
    if not supports(network):
        return network(x)
    return _decode(network.decoder, _encode(network.encoder, x))
