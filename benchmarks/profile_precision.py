"""Where one pass of a network goes, per layer kind and runtime precision (OpenVINO's PERF_COUNT): the per-layer
profile behind docs/benchmarks.md's faster-tier rows (issue #51 item 3).

Each MODEL@PRECISION (an ONNX export or an int8 IR from the cache folder's ``cpu-onnx/`` and ``precision/``,
compiled with that INFERENCE_PRECISION_HINT) runs one pass on a random tile of SHAPE after two warm-ups;
``--all-int8 ONNX`` first quantizes every convolution of that export (calibrated on noise: for the speed only,
its labels mean nothing) and profiles it too. Printed: the pass's wall time, and the time of each layer kind.

Run: .venv/bin/python benchmarks/profile_precision.py 1,1,128,128,128 CACHE/cpu-onnx/D.onnx@f32 \
         CACHE/cpu-onnx/D.onnx@bf16 CACHE/precision/D-int8-M.xml@f32 [--all-int8 CACHE/cpu-onnx/D.onnx]
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import time

import numpy as np


def profile(core, path: str, hint: str, shape: list[int], threads: int) -> None:
    model = core.read_model(path)
    model.reshape({model.inputs[0]: shape})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY",
                                                 "INFERENCE_NUM_THREADS": threads, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    tile = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    request.infer({0: tile})
    request.infer({0: tile})
    started = time.perf_counter()
    request.infer({0: tile})
    wall = time.perf_counter() - started
    kinds: collections.Counter = collections.Counter()
    for layer in request.profiling_info:
        kinds[(layer.node_type, layer.exec_type.split("_")[-1])] += layer.real_time.total_seconds()
    total = sum(kinds.values())
    print(f"{os.path.basename(path)} @ {hint}: wall {wall:.2f} s, layers {total:.2f} s "
          f"(load average {os.getloadavg()[0]:.1f})")
    for (kind, precision), seconds in kinds.most_common(8):
        print(f"    {kind:24s} {precision:6s} {seconds:6.2f} s {seconds / total:6.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", help="the input's shape, e.g. 1,1,128,128,128")
    parser.add_argument("models", nargs="*", metavar="MODEL@PRECISION")
    parser.add_argument("--all-int8", metavar="ONNX", help="also quantize every convolution of this export")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import openvino

    core = openvino.Core()
    shape = [int(n) for n in args.shape.split(",")]
    models = [tuple(item.rsplit("@", 1)) for item in args.models]
    if args.all_int8:
        import tempfile

        import nncf

        from medseg.model.precision_gate import unquantized_types

        nncf.set_log_level(logging.ERROR)
        model = core.read_model(args.all_int8)
        model.reshape({model.inputs[0]: shape})
        noise = [np.random.default_rng(i).normal(size=shape).astype(np.float32) for i in range(2)]
        quantized = nncf.quantize(model, nncf.Dataset(noise), preset=nncf.QuantizationPreset.MIXED, subset_size=2,
                                  ignored_scope=nncf.IgnoredScope(types=unquantized_types(model), validate=False))
        path = os.path.join(tempfile.mkdtemp(prefix="profile_precision_"), "every_convolution_int8.xml")
        openvino.save_model(quantized, path, compress_to_fp16=False)
        models.append((path, "f32"))
    for path, hint in models:
        profile(core, path, hint, shape, args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
