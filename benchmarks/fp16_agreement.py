"""Why medseg's labels agreed with nnU-Net's on only 99.931 % of voxels on an H200 (issue #27), measured on the CPU.

On the GPU both run the network under float16 autocast; on the CPU both run float32 and
agree on 99.9995 %. This script takes nnU-Net's real-size 3d_fullres network (6 stages,
32 -> 320, 128^3, 14 labels, random weights: benchmarks/bench_infer.py "fullres") over one
128^3 tile of real CT (lung1, 38 slices x 337 x 337 pixels: one tile at 1.5 mm) and
measures, with medseg's own sliding window and export:

* float32, two convolution algorithms (oneDNN and PyTorch's native kernel): how far two
  correct float32 runs drift apart (the CPU figure);
* float16 autocast as CUDA runs it, emulated: every convolution (and transposed
  convolution) reads float16-rounded inputs, weights and bias, sums in float32 (as cuDNN's
  fp16 kernels with fp32 accumulation do) and rounds its output to float16; instance norm
  and LeakyReLU stay float32 (autocast's float32 list). Two such runs that differ only in
  the convolution algorithm: what nnU-Net and medseg on one GPU differ by (cuDNN picks its
  algorithm per batch size and benchmark run: medseg runs 2 tiles a pass, nnU-Net 1);
* float16 against float32: what autocast itself moves;
* the logits' top-2 margins: the share of voxels whose two best classes are closer than
  float16 can tell apart. A random-weight network's classes are nearly tied everywhere
  (trained networks are not), which is what makes its labels this sensitive.

Run: .venv/bin/python benchmarks/fp16_agreement.py [--threads 2]   (about 4 network passes of one tile)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_infer import CT, build_model

CROP = (slice(5, 43), slice(87, 424), slice(87, 424))  # lung1: 38 x 337 x 337 -> 127 x 128 x 128 at 1.5 mm


def _round16(t: torch.Tensor | None, fp16: bool) -> torch.Tensor | None:
    return t.half().float() if fp16 and t is not None else t


def _conv(self, x, fp16: bool, onednn: bool):
    x, weight, bias = _round16(x, fp16), _round16(self.weight, fp16), _round16(self.bias, fp16)
    if onednn:
        out = torch.ops.aten.mkldnn_convolution(x.contiguous(), weight, bias, self.padding, self.stride,
                                                self.dilation, self.groups)
    else:
        with torch.backends.mkldnn.flags(enabled=False):
            out = self._conv_forward(x, weight, bias)
    return _round16(out, fp16)


def _transposed(self, x, fp16: bool, output_size=None):
    function = F.conv_transpose3d if isinstance(self, torch.nn.ConvTranspose3d) else F.conv_transpose2d
    out = function(_round16(x, fp16), _round16(self.weight, fp16), _round16(self.bias, fp16), self.stride,
                   self.padding, self.output_padding, self.groups, self.dilation)
    return _round16(out, fp16)


def configure(network: torch.nn.Module, fp16: bool, onednn: bool) -> None:
    """Every convolution by one algorithm; with ``fp16`` as CUDA autocast computes it (emulated)."""
    for module in network.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Conv3d)):
            module.forward = types.MethodType(lambda self, x: _conv(self, x, fp16, onednn), module)
        elif isinstance(module, (torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)):
            module.forward = types.MethodType(lambda self, x, output_size=None: _transposed(self, x, fp16), module)


def run(package, prep, algorithm: str, fp16: bool) -> tuple[np.ndarray, torch.Tensor]:
    from medseg.model.backends import TorchRunner
    from medseg.model.logits_grid import logits_to_label_map
    from medseg.model.package import build_networks
    from medseg.model.sliding_window import sliding_window_logits

    plan = package.configurations["3d_fullres"]
    networks = build_networks(package, "3d_fullres", "cpu")
    for network in networks:
        configure(network, fp16, algorithm == "onednn")
    runner = TorchRunner(networks, "cpu", onednn=False, lean=False)
    logits = sliding_window_logits(runner, prep.data, plan, tile_batch=1)
    return logits_to_label_map(logits, prep), logits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from medseg.core.volume import Volume
    from medseg.io import read_image
    from medseg.model.nnunet_import import import_nnunet
    from medseg.model.preprocess import preprocess_to

    work = Path(tempfile.mkdtemp(prefix="fp16_agreement_"))
    package = import_nnunet(build_model(work, 14, "fullres"))
    lung = read_image(CT)
    volume = Volume(np.ascontiguousarray(lung.array[CROP]), lung.spacing_mm, lung.origin_mm, lung.direction)
    prep = preprocess_to(volume, package.configurations["3d_fullres"], "cpu")
    print(f"nnU-Net 3d_fullres-sized network (6 stages, 32->320, 128^3, 14 labels, random weights); lung1 crop "
          f"{volume.shape_zyx} -> {tuple(prep.data.shape[1:])} at 1.5 mm (one tile); {args.threads} threads", flush=True)
    results = {}
    for fp16 in (False, True):
        for algorithm in ("onednn", "native"):
            started = time.perf_counter()
            results[(fp16, algorithm)] = run(package, prep, algorithm, fp16)
            print(f"  {'float16 (emulated autocast)' if fp16 else 'float32'}, {algorithm} convolutions: "
                  f"{time.perf_counter() - started:.0f} s", flush=True)

    def agree(a, b) -> str:
        return f"{float((results[a][0] == results[b][0]).mean()):.4%}"

    print(f"labels equal, float32 oneDNN vs float32 native:            {agree((False, 'onednn'), (False, 'native'))}"
          "   (the CPU: nnU-Net 99.9995 % on a whole CT)")
    print(f"labels equal, float16 oneDNN vs float16 native (emulated):  {agree((True, 'onednn'), (True, 'native'))}"
          "   (the GPU: nnU-Net vs medseg measured 99.931 %)")
    print(f"labels equal, float16 vs float32 (oneDNN):                   {agree((True, 'onednn'), (False, 'onednn'))}")
    logits = results[(False, "onednn")][1].float()
    top2 = logits.topk(2, dim=0).values
    margin = (top2[0] - top2[1]).flatten()
    scale = logits.abs().amax(dim=0).flatten()
    drift = (results[(True, "onednn")][1].float() - results[(True, "native")][1].float()).abs()
    print(f"float32 logits: |max logit| median {float(scale.median()):.3g}; top-2 margin median "
          f"{float(margin.median()):.3g}")
    print(f"float16 run-to-run logit drift (two algorithms): median {float(drift.median()):.2g}, "
          f"99th percentile {float(drift.flatten().kthvalue(int(0.99 * drift.numel())).values):.2g}")
    for threshold in (1e-3, 3e-3, 1e-2):
        print(f"  voxels (network grid) with a top-2 margin below {threshold:g}: {float((margin < threshold).float().mean()):.4%}")
    print("float16 rounds to 1/1024 of a value (about 1e-3 of a logit of 1): a voxel whose two best classes are "
          "closer than the drift flips with the algorithm; a trained network's margins are orders larger.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
