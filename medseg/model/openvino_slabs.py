"""OpenVINO on a U-Net with the full-resolution stage run slab by slab (issue #51, item 2).

Compiled whole for a 128^3 tile of a TotalSegmentator-sized network (6 stages, 32 -> 320 features), OpenVINO
plans memory for every activation of the pass: +1.26 GB for the pass, most of it the full-resolution
stage's 32- and 64-channel tensors (256 and 512 MiB each); the network below that stage compiled on its
own needs +0.39 GB (measured 2026-12-07, 2 threads). PyTorch's lean forward (medseg.model.lean_forward)
keeps that stage's memory low by running its convolutions in slabs along the first spatial axis; this
module does the same with OpenVINO's kernels:

* the network below the top stage (encoder stages 1.., decoder stages but the last) is one compiled
  model, with exact instance norms (medseg.model.exact_norm) as the whole-network export has;
* each top-stage convolution is a small model compiled for one slab (``rows`` output rows plus the
  kernel's halo), fused with what can be fused: the previous block's norm (as a per-channel scale and
  shift: the statistics are whole-tensor, computed between slab passes by PyTorch) and LeakyReLU, the
  decoder's transposed convolution and its concatenation with the skip. A row mask zeroes the halo
  rows past the tile's ends after the activation, so the zero padding is the module's own;
* an output slab that would overwrite rows a later slab still reads is held back (as lean_forward
  does), so one full-resolution tensor per channel count is alive, and each part's OpenVINO buffers
  are released (``CompiledModel.release_memory``) before the next part runs: the pass's peak is the
  largest part's, not their sum.

Networks it does not recognise (residual encoders, 2D, a top stage that strides, a patch whose first
axis has no slab size dividing it) run compiled whole (:func:`supports` says why).

Measured on that network, one 128^3 tile, 2 threads on a 2-core machine with other work running (CPU
seconds, so the other work counts less; 2026-12-07): compiled whole +1256 MB for the pass, 13.3 s;
slab by slab +745 MB, 17.5 s (the part below the top stage 6.2 s, the top stage's slab convolutions
9.5 s, its norm statistics 1.3 s); PyTorch's lean forward about 20 s. Per convolution OpenVINO and
PyTorch's oneDNN take the same time on a slab (each reorders the planar slab to its blocked layout and
back); compiled whole, OpenVINO keeps the blocked layout from one layer to the next, which is where its
lead on the top stage went. OpenVINO 2026.4 has no setting that caps a compiled model's activation
memory (its CPU properties: threads, streams, precision, hints, pinning); ``release_memory`` is the one
way to hand a model's buffers back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from medseg.errors import Cancelled, ModelError
from medseg.io.atomic import rename_durably
from medseg.progress import CancelToken

SLAB_ROWS = 16  # output rows per slab: 8 slabs of a 128^3 tile; fewer rows cost more calls, more cost memory


def _plain_unet(network: nn.Module) -> bool:
    from medseg.model.unet import Encoder, UNet

    return isinstance(network, UNet) and isinstance(network.encoder, Encoder) and not network.decoder.deep_supervision


def _same_padding(conv: nn.Module) -> bool:
    return (all(s == 1 for s in conv.stride) and all(d == 1 for d in conv.dilation) and conv.padding_mode == "zeros"
            and not isinstance(conv.padding, str) and all(2 * p == k - 1 for k, p in zip(conv.kernel_size, conv.padding)))


def supports(network: nn.Module, shape: Sequence[int]) -> str:
    """"" when the network runs slab by slab for tiles of ``shape`` (B, C, *patch), else why not."""
    if not _plain_unet(network):
        return "not a plain-encoder U-Net without deep supervision"
    if len(shape) != 5:
        return "not a 3D network"
    top = network.encoder.stages[0][0].convs
    last = network.decoder.stages[-1].convs
    blocks = [*top, *last]
    if not all(isinstance(b.conv, nn.Conv3d) and _same_padding(b.conv) for b in blocks):
        return "its full-resolution convolutions stride or pad otherwise"
    if not all(isinstance(b.norm, nn.InstanceNorm3d) and b.norm.affine and not b.norm.track_running_stats
               for b in blocks) or not all(isinstance(b.nonlin, nn.LeakyReLU) for b in blocks):
        return "its full-resolution blocks are not conv, instance norm, LeakyReLU"
    up = network.decoder.transpconvs[-1]
    if tuple(up.kernel_size) != tuple(up.stride) or any(up.padding) or any(up.output_padding):
        return "its last transposed convolution overlaps"
    if slab_rows(int(shape[2]), int(up.stride[0])) is None:
        return f"no slab size divides the patch's {shape[2]} rows"
    return ""


def slab_rows(rows: int, stride: int, target: int = SLAB_ROWS) -> int | None:
    """The largest row count <= target (a multiple of the transposed conv's stride) dividing ``rows``."""
    for r in range(min(target, rows), 0, -1):
        if rows % r == 0 and r % stride == 0 and r < rows:
            return r
    return None


class _Inner(nn.Module):
    """The network below the top stage: the top stage's output -> the input of the last transposed conv."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.stages = network.encoder.stages[1:]
        self.transpconvs = network.decoder.transpconvs[:-1]
        self.decoder = network.decoder.stages[:-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [x]
        for stage in self.stages:
            x = stage(x)
            skips.append(x)
        x = skips.pop()
        for up, stack in zip(self.transpconvs, self.decoder):
            x = stack(torch.cat((up(x), skips.pop()), dim=1))
        return x


class _SlabConv(nn.Module):
    """conv(mask * leaky(x * scale + shift)) for one slab: the previous block's norm and activation fused in."""

    def __init__(self, conv: nn.Conv3d, slope: float):
        super().__init__()
        self.conv, self.slope = conv, float(slope)
        self.padding = (0, *conv.padding[1:])

    def forward(self, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = F.leaky_relu(x * scale + shift, self.slope) * mask
        return F.conv3d(x, self.conv.weight, self.conv.bias, 1, self.padding)


class _SlabImageConv(nn.Module):
    """conv(x) for one slab of the input (zero-padded as it is read)."""

    def __init__(self, conv: nn.Conv3d):
        super().__init__()
        self.conv = conv
        self.padding = (0, *conv.padding[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv3d(x, self.conv.weight, self.conv.bias, 1, self.padding)


class _SlabUpCatConv(nn.Module):
    """conv(mask * cat(up(low)[rows], skip)) for one slab: the decoder's last stage's first convolution."""

    def __init__(self, up: nn.ConvTranspose3d, conv: nn.Conv3d, offset: int, rows: int):
        super().__init__()
        self.up, self.conv, self.offset, self.rows = up, conv, offset, rows
        self.padding = (0, *conv.padding[1:])

    def forward(self, low: torch.Tensor, skip: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        upsampled = self.up(low)[:, :, self.offset:self.offset + self.rows]
        return F.conv3d(torch.cat((upsampled, skip), dim=1) * mask, self.conv.weight, self.conv.bias, 1, self.padding)


class _Compiled:
    """One model compiled for fixed input shapes; called with arrays, returns its output (a view, valid until
    the next call)."""

    def __init__(self, core: Any, config: dict, module: nn.Module | Callable[[], nn.Module],
                 examples: Sequence[torch.Tensor], path: Path | None = None):
        try:
            if path is not None and path.is_file():  # exported before: OpenVINO's IR, read in a fraction of a second
                model = core.read_model(os.fspath(path))
            else:
                model = self._convert(module if isinstance(module, nn.Module) else module(), examples)
                if path is not None:
                    self._save(model, path)
            self.compiled = core.compile_model(model, "CPU", config)
        except Exception as error:  # OpenVINO's frontends raise their own types
            raise ModelError(f"OpenVINO could not compile a part of the network: {error}", path=path) from error
        self.request = self.compiled.create_infer_request()

    @staticmethod
    def _convert(module: nn.Module, examples: Sequence[torch.Tensor]) -> Any:
        import io
        import warnings

        import openvino

        onnx = io.BytesIO()
        # through ONNX, as the whole-network export: OpenVINO's PyTorch frontend computed exact_norm's
        # reductions wrongly (the logits of the inner part off by their own size)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation, the norm's constant count
            torch.onnx.export(module.eval(), tuple(examples), onnx, dynamo=False, opset_version=17)
        onnx.seek(0)
        model = openvino.convert_model(onnx)
        model.reshape({port: list(example.shape) for port, example in zip(model.inputs, examples)})
        return model

    @staticmethod
    def _save(model: Any, path: Path) -> None:
        """The part as OpenVINO IR (.xml and .bin), the .xml last: a part whose .xml exists is whole."""
        import openvino

        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.stem}-{os.getpid()}.xml")
        try:
            openvino.save_model(model, os.fspath(temporary), compress_to_fp16=False)
            rename_durably(temporary.with_suffix(".bin"), path.with_suffix(".bin"))  # two files: not one atomic_path
            rename_durably(temporary, path)
        except OSError:  # an unwritable cache folder: exported again next time, nothing else
            for leftover in (temporary, temporary.with_suffix(".bin")):
                leftover.unlink(missing_ok=True)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        self.request.infer(dict(enumerate(arrays)), share_inputs=True)
        return self.request.get_output_tensor(0).data

    def release(self) -> None:
        self.compiled.release_memory()  # its activation buffers: allocated again by its next call


def _affine(block: nn.Module, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The block's instance norm of y as a per-channel scale and shift ((1, C, 1, 1, 1) float32 each)."""
    var, mean = torch.var_mean(y[0].flatten(1), dim=1, unbiased=False)
    norm = block.norm
    scale = norm.weight.detach().double() / torch.sqrt(var.double() + norm.eps)
    shift = norm.bias.detach().double() - mean.double() * scale
    return (scale.float().view(1, -1, 1, 1, 1).numpy().copy(), shift.float().view(1, -1, 1, 1, 1).numpy().copy())


class _Slabs:
    """Input slabs of ``rows`` output rows and ``halo`` rows each side, read into one reused buffer (zeros
    past the tile's ends) with its row mask."""

    def __init__(self, channels: int, rows: int, halo: int, plane: Sequence[int]):
        self.rows, self.halo = rows, halo
        self.buffer = np.zeros((1, channels, rows + 2 * halo, *plane), np.float32)
        self.mask = np.ones((1, 1, rows + 2 * halo, 1, 1), np.float32)

    def read(self, source: np.ndarray, first: int) -> np.ndarray:
        """Rows first - halo .. first + rows + halo of source (zeros outside it)."""
        start, stop = first - self.halo, first + self.rows + self.halo
        a, b = max(0, start), min(source.shape[2], stop)
        self.buffer[:, :, :a - start] = 0
        self.buffer[:, :, b - start:] = 0
        self.buffer[:, :, a - start:b - start] = source[:, :, a:b]
        self.mask[:] = 1
        self.mask[:, :, :a - start] = 0
        self.mask[:, :, b - start:] = 0
        return self.buffer


class _Fold:
    """One network's parts compiled for tiles of one shape (batch 1)."""

    def __init__(self, network: nn.Module, shape: Sequence[int], core: Any, config: dict, cache: Path | None = None):
        from medseg.model.exact_norm import with_exact_norms

        parts = iter(range(1000))

        def where() -> Path | None:  # the parts in the order they are made
            return None if cache is None else cache / f"part{next(parts)}.xml"

        _, channels, depth, height, width = (int(n) for n in shape)
        self.plane = (height, width)
        self.top = list(network.encoder.stages[0][0].convs)
        self.last = list(network.decoder.stages[-1].convs)
        self.head = network.decoder.seg_layers[-1]
        self.up = network.decoder.transpconvs[-1]
        self.stride = int(self.up.stride[0])
        self.rows = slab_rows(depth, self.stride, SLAB_ROWS) or depth
        top_channels = self.top[-1].conv.out_channels
        with torch.no_grad():
            self.inner = _Compiled(core, config, lambda: with_exact_norms(_Inner(network))[0],
                                   [torch.zeros(1, top_channels, depth, height, width)], where())

        def slab_conv(conv: nn.Conv3d, before: nn.Module | None, in_channels: int) -> tuple[_Compiled, _Slabs]:
            slabs = _Slabs(in_channels, self.rows, conv.padding[0], self.plane)
            x = torch.zeros(slabs.buffer.shape)
            if before is None:
                return _Compiled(core, config, _SlabImageConv(conv), [x], where()), slabs
            per_channel = torch.ones(1, in_channels, 1, 1, 1)
            return _Compiled(core, config, _SlabConv(conv, before.nonlin.negative_slope),
                             [x, per_channel, per_channel, torch.from_numpy(slabs.mask)], where()), slabs

        self.encoder = [slab_conv(b.conv, self.top[i - 1] if i else None, channels if not i else b.conv.in_channels)
                        for i, b in enumerate(self.top)]
        first = self.last[0].conv
        self.low_halo = -(-first.padding[0] // self.stride)
        self.skip_slabs = _Slabs(top_channels, self.rows, first.padding[0], self.plane)
        low_plane = (height // int(self.up.stride[1]), width // int(self.up.stride[2]))
        self.low_slabs = _Slabs(self.up.in_channels, self.rows // self.stride, self.low_halo, low_plane)
        self.up_cat = _Compiled(core, config, _SlabUpCatConv(self.up, first, self.low_halo * self.stride - first.padding[0],
                                                             self.skip_slabs.buffer.shape[2]),
                                [torch.zeros(self.low_slabs.buffer.shape), torch.zeros(self.skip_slabs.buffer.shape),
                                 torch.from_numpy(self.skip_slabs.mask)], where())
        self.decoder = [slab_conv(b.conv, self.last[i - 1], b.conv.in_channels) for i, b in enumerate(self.last) if i]
        self.head_model = slab_conv(self.head, self.last[-1], self.head.in_channels)

    def _slabbed(self, part: tuple[_Compiled, _Slabs], source: np.ndarray, out: np.ndarray,
                 affine: tuple[np.ndarray, np.ndarray] | None, check: Any) -> None:
        """part's convolution of source into out, slab by slab; out may be source (writes held back until no
        later slab reads the rows)."""
        model, slabs = part
        overwrite = out is source
        pending: list[tuple[int, np.ndarray]] = []
        for first in range(0, source.shape[2], slabs.rows):
            check()
            buffer = slabs.read(source, first)
            result = model(buffer) if affine is None else model(buffer, affine[0], affine[1], slabs.mask)
            if not overwrite:
                out[:, :, first:first + slabs.rows] = result
                continue
            pending.append((first, result.copy()))
            while pending and pending[0][0] + slabs.rows <= first + slabs.rows - slabs.halo:
                start, done = pending.pop(0)
                out[:, :, start:start + slabs.rows] = done
        for start, done in pending:
            out[:, :, start:start + slabs.rows] = done
        model.release()

    def __call__(self, tile: torch.Tensor, check: Any) -> torch.Tensor:
        from medseg.model.lean_forward import _finish

        source = np.ascontiguousarray(tile.numpy(), dtype=np.float32)
        depth = source.shape[2]
        y = None
        for index, part in enumerate(self.encoder):
            conv = self.top[index].conv
            out = source if index and conv.in_channels == conv.out_channels else \
                np.empty((1, conv.out_channels, depth, *self.plane), np.float32)
            affine = _affine(self.top[index - 1], torch.from_numpy(source)) if index else None
            self._slabbed(part, source, out, affine, check)
            source = y = out
        skip = _finish(self.top[-1], torch.from_numpy(y)).numpy()  # in place: PyTorch's norm, as the lean forward
        check()
        low = self.inner(skip).copy()
        self.inner.release()
        first_conv = self.last[0].conv
        out = skip if first_conv.out_channels == skip.shape[1] else np.empty(
            (1, first_conv.out_channels, depth, *self.plane), np.float32)
        self._up_cat(low, skip, out, check)
        del low
        source = out
        for index, part in enumerate(self.decoder, start=1):
            affine = _affine(self.last[index - 1], torch.from_numpy(source))
            conv = self.last[index].conv
            out = source if conv.in_channels == conv.out_channels else \
                np.empty((1, conv.out_channels, depth, *self.plane), np.float32)
            self._slabbed(part, source, out, affine, check)
            source = out
        logits = np.empty((1, self.head.out_channels, depth, *self.plane), np.float32)
        self._slabbed(self.head_model, source, logits, _affine(self.last[-1], torch.from_numpy(source)), check)
        return torch.from_numpy(logits)

    def _up_cat(self, low: np.ndarray, skip: np.ndarray, out: np.ndarray, check: Any) -> None:
        rows, halo = self.skip_slabs.rows, self.skip_slabs.halo
        overwrite = out is skip
        pending: list[tuple[int, np.ndarray]] = []
        for first in range(0, skip.shape[2], rows):
            check()
            low_buffer = self.low_slabs.read(low, first // self.stride)
            result = self.up_cat(low_buffer, self.skip_slabs.read(skip, first), self.skip_slabs.mask)
            if not overwrite:
                out[:, :, first:first + rows] = result
                continue
            pending.append((first, result.copy()))
            while pending and pending[0][0] + rows <= first + rows - halo:
                start, done = pending.pop(0)
                out[:, :, start:start + rows] = done
        for start, done in pending:
            out[:, :, start:start + rows] = done
        self.up_cat.release()


class SlabbedOpenVinoRunner:
    """The folds of one configuration in OpenVINO, the full-resolution stage slab by slab (a TileRunner)."""

    def __init__(self, networks: Sequence[nn.Module], shape: Sequence[int], threads: int | None = None,
                 name: str = "openvino-cpu", cache: Path | None = None):
        import openvino

        self.networks = [network.to("cpu").float().eval() for network in networks]
        self.config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                       "INFERENCE_NUM_THREADS": int(threads or torch.get_num_threads())}
        self.core = openvino.Core()
        self.name = name
        self.device = torch.device("cpu")
        self.shape: tuple[int, ...] = ()
        self.folds: list[_Fold] = []
        self.cache = cache  # parts exported before, for this network (a folder per tile shape and slab size)
        self._compile(tuple(int(n) for n in shape))

    def _compile(self, shape: tuple[int, ...]) -> None:
        self.folds = []
        one = (1, *shape[1:])
        with torch.no_grad():
            self.folds = [_Fold(network, one, self.core, self.config, self._folder(index, one))
                          for index, network in enumerate(self.networks)]
        self.shape = one

    def _folder(self, fold: int, shape: Sequence[int]) -> Path | None:
        if self.cache is None:
            return None
        rows = slab_rows(int(shape[2]), int(self.networks[fold].decoder.transpconvs[-1].stride[0]), SLAB_ROWS)
        return self.cache / f"{'x'.join(str(n) for n in shape[1:])}-rows{rows}" / f"fold{fold}"

    def __call__(self, tiles: torch.Tensor, cancel: CancelToken | None = None) -> torch.Tensor:
        if tuple(tiles.shape[1:]) != self.shape[1:]:
            self._compile(tuple(tiles.shape))

        def check() -> None:
            if cancel is not None and cancel.cancelled:
                raise Cancelled()

        with torch.inference_mode():
            outputs = []
            for tile in tiles.detach().to("cpu", torch.float32):
                logits = self.folds[0](tile[None], check)
                for fold in self.folds[1:]:
                    logits += fold(tile[None], check)
                if len(self.folds) > 1:
                    logits /= len(self.folds)
                outputs.append(logits)
        return torch.cat(outputs)


def openvino_runner(package: Any, configuration: str, shape: Sequence[int], name: str = "openvino-cpu",
                    threads: int | None = None) -> Any:
    """The "openvino-cpu" runner for a configuration's tiles of ``shape``: slab by slab where the network
    allows it (:func:`supports`; its parts kept in the cache folder as exact_onnx's export is), else the
    whole exact-norm export compiled at once."""
    from medseg.app_dirs import cache_dir
    from medseg.model.backends import OpenVinoRunner
    from medseg.model.cpu_runtime import EXPORT_FOLDER, exact_onnx, model_digest
    from medseg.model.package import build_networks

    networks = build_networks(package, configuration, "cpu", share_weights=True)
    if all(not supports(network, shape) for network in networks):
        cache = cache_dir() / EXPORT_FOLDER / f"{model_digest(package, configuration)}-slabs"
        return SlabbedOpenVinoRunner(networks, shape, threads, name, cache)
    return OpenVinoRunner(exact_onnx(package, configuration), "f32", threads, name=name, shape=shape)


def export_parts(package: Any, configuration: str, shape: Sequence[int]) -> None:
    """Export the slab parts into the cache folder ahead (the engine measurement: tracing stays out of the
    memory it measures); nothing for a network run whole."""
    openvino_runner(package, configuration, shape, threads=1)


__all__ = ["export_parts", "SLAB_ROWS", "SlabbedOpenVinoRunner", "openvino_runner", "slab_rows", "supports"]
