"""Build a model's faster tier and gate it against the exact path on a reference series (issue #51 item 3).

The reference series is preprocessed for the configuration; the exact path (PyTorch float32, what
``--device cpu`` runs) labels it on the network's grid; the tier is built (int8: NNCF post-training
quantization of the exact-norm export, calibrated on tiles of that series) and labels it too; the two
label maps are compared (:func:`medseg.model.precision_tier.judge`) and the record stored, offered or not.

int8 calibration: NNCF's MIXED preset (symmetric weights, asymmetric activations: a U-Net's activations
after a leaky ReLU are lopsided), and only the convolutions are quantized (:data:`QUANTIZED_TYPES`: where
the time goes). Everything else stays float32 by type, the instance norms above all: the exact-norm export
writes a 3D norm as reductions, subtractions, multiplications and a square root, not as one MVN, and
NNCF's CPU defaults put a FakeQuantize on each of those element-wise inputs (198 quantizers where the
network has 23 convolutions): a 64^3 network then ran 0.71x of float32's time where quantizing the
convolutions alone runs 0.40x, and its labels moved further from float32's (2026-12-08, 2 threads).

The candidates are tried, the fastest first, each checked on the calibration tiles against the exact
export's labels (within :data:`TILE_DROP`): every convolution int8; then, where the CPU computes bf16
natively, the layers at the full resolution (the first encoder stage, the last decoder stage and the
segmentation head: the labels' edges) in bf16 (in float32 they held two thirds of a 128^3 network's int8
time); then those layers in float32
(quantizing those left the starter's labels 99.88 % equal on TotalSegmentator's example CT, its lungs'
Dice 0.987, short of the gate; kept float32, 99.97 % equal, lowest Dice 0.997, 2026-12-07). Where both
fall short, NNCF's accuracy-aware quantization (``accuracy_control``) keeps more layers in float32 until
the tiles' labels are within :data:`TILE_DROP` of the exact ones (slow: minutes for the starter on two busy
cores). The record's method says which candidate was kept and the tiles' agreement of each.
"""

from __future__ import annotations

import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medseg.model import precision_tier
from medseg.model.precision_tier import BF16, EXACT, INT8, TierRecord
from medseg.progress import ProgressCallback, report

CALIBRATION_TILES = 32  # tiles of the reference series NNCF collects its statistics on (fewer if it has fewer)
# The gate compares single passes: at step 1 every voxel comes from one tile, with no overlap averaging to hide
# a difference (stricter than a run's step 0.5), in a quarter of a 2D network's passes.
GATE_STEP = 1.0
TILE_DROP = 0.0005  # accuracy control: the tiles' labels may differ from the exact ones on at most this share
# accuracy control: at most this many rounds of putting layers back to float32 (each ranks and re-runs the tiles;
# a network without confident outputs, random weights, would otherwise be reverted layer by layer for hours)
MOST_REVERT_ROUNDS = 12
QUANTIZED_TYPES = ("Convolution", "GroupConvolution", "ConvolutionBackpropData")  # the rest stays float32


def calibration_tiles(image: torch.Tensor, plan: Any, count: int = CALIBRATION_TILES) -> list[np.ndarray]:
    """Up to ``count`` tiles of a preprocessed image (C, z, y, x), spread evenly over the sliding window's own
    tile positions (a 2D network: over its slices), each a batch of one as the runner passes them."""
    from medseg.model.sliding_window import pad_to_patch
    from medseg.model.tiling import tile_slicers

    padded, _ = pad_to_patch(image, plan.patch_size)
    slicers = tile_slicers(padded.shape[1:], plan.patch_size, 0.5)  # a run's own positions: more tiles than step 1
    picks = sorted({round(i) for i in np.linspace(0, len(slicers) - 1, min(count, len(slicers)))})
    tiles = []
    for index in picks:
        tile = padded[slicers[index]].unsqueeze(0)  # (1, C, *patch); a 2D network's slicer picks one slice
        tiles.append(np.ascontiguousarray(tile.numpy(), dtype=np.float32))
    return tiles


def _labels(runner: Any, image: torch.Tensor, plan: Any) -> tuple[np.ndarray, float]:
    from medseg.model.sliding_window import sliding_window_logits

    started = time.perf_counter()
    with torch.inference_mode():
        logits = sliding_window_logits(runner, image, plan, step_size=GATE_STEP)
    return logits.argmax(0).to(torch.uint8).numpy(), round(time.perf_counter() - started, 3)


def quantize_int8(onnx: Path, shape: list[int], tiles: list[np.ndarray], out_xml: Path, threads: int,
                  accuracy_control: bool, bf16: bool = False) -> tuple[str, str]:
    """Quantize the export for ``shape`` into ``out_xml`` (and its .bin); returns (the method in words, the
    precision its float layers compute in: "f32", or "bf16" where ``bf16``, the CPU computing it natively,
    kept the tiles' labels within :data:`TILE_DROP`)."""
    import nncf
    import openvino

    core = openvino.Core()

    def read() -> Any:
        model = core.read_model(str(onnx))
        model.reshape({model.inputs[0]: list(shape)})
        return model

    def tile_agreement(model: Any, hint: str) -> float:
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": hint,
                                                     "INFERENCE_NUM_THREADS": int(threads)})
        return float(np.mean([np.mean(compiled(t)[0].argmax(1) == w) for t, w in zip(tiles, wanted)]))

    exact = core.compile_model(read(), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": int(threads)})
    wanted = [exact(tile)[0].argmax(1) for tile in tiles]
    del exact
    dataset = nncf.Dataset(tiles)
    preset = nncf.QuantizationPreset.MIXED
    others = unquantized_types(read())
    kept = full_resolution_layers(read(), shape)
    every = ("every convolution int8", nncf.IgnoredScope(types=others, validate=False))
    edges = nncf.IgnoredScope(names=kept, types=others, validate=False)  # validate: a name NNCF skips anyway
    # (what, scope, float layers' precision); the full-resolution convolutions in bf16 are 3x faster than in
    # float32 and held two thirds of a 128^3 network's int8 time (docs/benchmarks.md)
    candidates = [(*every, "f32")]
    if bf16:
        candidates.append((f"the {len(kept)} full-resolution convolutions bf16", edges, BF16))
    candidates.append((f"the {len(kept)} full-resolution convolutions float32", edges, "f32"))
    needed = 1.0 - TILE_DROP
    tried, made = [], {}
    for what, scope, hint in candidates:
        if id(scope) not in made:
            made[id(scope)] = nncf.quantize(read(), dataset, preset=preset, subset_size=len(tiles),
                                            ignored_scope=scope)
        quantized = made[id(scope)]
        agreement = tile_agreement(quantized, hint)
        tried.append(f"{what}: tiles {agreement:.3%} equal")
        if agreement >= needed:
            break
    method = (f"NNCF {nncf.__version__} post-training quantization of the convolutions, MIXED preset, "
              f"{len(tiles)} calibration tiles; {'; '.join(tried)} (needs {needed:.2%}); kept: {what}")
    if agreement < needed and accuracy_control:  # short: keep the most sensitive layers in float32
        items = list(zip(tiles, wanted))

        def validate(compiled: Any, data: Any) -> tuple[float, list[float]]:
            each = [float(np.mean(compiled(tile)[0].argmax(1) == labels)) for tile, labels in data]
            return float(np.mean(each)), each

        from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

        item_dataset = nncf.Dataset(items, lambda item: item[0])
        quantized = nncf.quantize_with_accuracy_control(
            read(), item_dataset, item_dataset, validation_fn=validate, max_drop=TILE_DROP, preset=preset,
            subset_size=len(items), ignored_scope=scope,
            advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(
                max_num_iterations=MOST_REVERT_ROUNDS, num_ranking_workers=1))
        method += f"; then accuracy control: layers kept in float32 until within {TILE_DROP:.2%}"
        hint = "f32"
    _save_ir(quantized, out_xml)
    return method, hint


def unquantized_types(model: Any) -> list[str]:
    """The operation types of ``model`` NNCF must leave float32: all but the convolutions (and the graph's
    inputs, outputs and constants, which NNCF does not quantize)."""
    return sorted({op.get_type_name() for op in model.get_ordered_ops()}
                  - set(QUANTIZED_TYPES) - {"Parameter", "Result", "Constant"})


def full_resolution_layers(model: Any, shape: list[int]) -> list[str]:
    """The convolutions whose output has the input's full spatial size (where the labels' edges are drawn)."""
    return [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() in QUANTIZED_TYPES
            and op.get_output_partial_shape(0).is_static
            and list(op.get_output_partial_shape(0).get_shape())[2:] == list(shape[2:])]


def _save_ir(model: Any, out_xml: Path) -> None:
    """The IR's .xml and .bin, each replaced atomically (the .bin first: an .xml never names a missing one)."""
    import tempfile

    import openvino

    from medseg.io.atomic import atomic_write_bytes

    out_xml.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_xml.parent) as temp:
        written = Path(temp) / out_xml.name
        openvino.save_model(model, str(written), compress_to_fp16=False)
        atomic_write_bytes(out_xml.with_suffix(".bin"), written.with_suffix(".bin").read_bytes())
        atomic_write_bytes(out_xml, written.read_bytes())


def build_and_gate(package: Any, configuration: str, precision: str, reference: Any, reference_name: str,
                   threads: int = 1, progress: ProgressCallback | None = None,
                   accuracy_control: bool = True) -> TierRecord:
    """Build ``precision``'s tier of ``configuration`` (int8: quantized; bf16: compiled so), run it and the exact
    path on ``reference`` (a Volume), and store the record, offered only if it passes the gate."""
    from medseg.model.backends import OpenVinoRunner, openvino_available
    from medseg.model.cpu_runtime import exact_onnx, model_digest
    from medseg.model.infer import _make_runner, prepare

    precision = precision_tier.check_precision(precision)
    if precision == EXACT:
        raise ValueError("float32 is the exact path: there is nothing to verify")
    plan = package.configurations[configuration]
    record = TierRecord(model=model_digest(package, configuration), configuration=configuration,
                        precision=precision, machine=precision_tier.tier_machine(), offered=False,
                        reference=reference_name, measured_on=date.today().isoformat())
    path = precision_tier.record_path(package, configuration, precision)
    if not openvino_available():
        record.shortfalls = ["OpenVINO is not installed (pip install 'medseg[openvino]')"]
        precision_tier.write_record(record, path)
        return record
    if precision == BF16:
        native, why = precision_tier.bf16_support()
        if not native:
            record.shortfalls = [why]
            precision_tier.write_record(record, path)
            return record
    report(progress, 0.0, f"{package.name} ({configuration}): the exact path on {reference_name}", "exact")
    image = torch.as_tensor(prepare(reference, package, configuration).image.data).float()
    exact_labels, exact_seconds = _labels(_make_runner("cpu", package, configuration, plan), image, plan)
    shape = [1, int(plan.num_input_channels), *(int(p) for p in plan.patch_size)]
    onnx = exact_onnx(package, configuration)
    if precision == INT8:
        report(progress, 0.4, f"{package.name} ({configuration}): quantizing to int8", "quantize")
        xml = precision_tier.model_path(package, configuration, INT8)
        tiles = calibration_tiles(image, plan)
        record.method, record.compute = quantize_int8(onnx, shape, tiles, xml, threads, accuracy_control,
                                                      bf16=precision_tier.bf16_support()[0])
        record.files = {p.name: precision_tier.file_digest(p) for p in (xml, xml.with_suffix(".bin"))}
        runner = OpenVinoRunner(xml, record.compute, threads=threads, name="openvino-int8", shape=shape)
    else:
        record.method = "OpenVINO CPU, INFERENCE_PRECISION_HINT bf16 on the exact-norm export"
        record.compute = BF16
        runner = OpenVinoRunner(onnx, BF16, threads=threads, name="openvino-bf16", shape=shape)
    report(progress, 0.8, f"{package.name} ({configuration}): {precision} on {reference_name}", "tier")
    tier_labels, tier_seconds = _labels(runner, image, plan)
    del runner
    # the exact path's other engine: a tier is worth offering only against the fastest exact one
    _, openvino_seconds = _labels(OpenVinoRunner(onnx, "f32", threads=threads, shape=shape), image, plan)
    record.agreement, record.dice, record.voxels, record.shortfalls = precision_tier.judge(
        exact_labels, tier_labels, package.labels)
    record.offered = not record.shortfalls
    record.seconds = {EXACT: exact_seconds, "openvino-f32": openvino_seconds, precision: tier_seconds}
    precision_tier.write_record(record, path)
    report(progress, 1.0, f"{package.name} ({configuration}): {record.describe()}", "done")
    return record


def reference_volume(shape_zyx: tuple[int, int, int] = (48, 160, 160), spacing_mm: float = 2.0) -> Any:
    """The shipped reference when the user names no series: medseg's synthetic CT phantom (no patient data)."""
    from medseg.io.phantom import phantom_volume

    spacing = (spacing_mm, spacing_mm, max(spacing_mm, 3.0))
    return phantom_volume(seed=51, shape=shape_zyx, spacing=spacing)


__all__ = ["CALIBRATION_TILES", "QUANTIZED_TYPES", "TILE_DROP", "build_and_gate", "calibration_tiles", "quantize_int8",
           "reference_volume", "unquantized_types"]

