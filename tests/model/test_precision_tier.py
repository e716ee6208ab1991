"""The faster tier's gate, both ways, and its bad inputs (issue #51 item 3).

The gate accepts int8 on the shipped starter (trained here to confident outputs) and refuses it on a network
of the same layout with random weights, both measured on the top 16 slices of TotalSegmentator's example
CT (lung bases, bones, body) against the exact float32 path. The oracle of the refusal is the definition of
the gate itself (precision_tier.judge against hand-made label maps, tested on its own), not the code's
output; a run then uses an offered tier (the SEG's algorithm version and the sidecar say int8), refuses one
that failed its gate, and runs the exact path, naming the file, when the quantized model or record is damaged.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
import torch

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model import precision_tier
from medseg.model.package import load_package, starter_model_path
from medseg.model.unet import build_network
from medseg.workflows.models import package_model
from medseg.workflows.precision import verify_tier
from medseg.workflows.segment import Segmenter, SegmentSettings

EXAMPLE_CT = "totalsegmentator/example_ct.nii.gz"


@pytest.fixture(scope="module")
def lung_bases(ct_dir) -> Volume:
    """16 slices of a real CT (3 mm): lung bases, vertebrae and ribs, the body; a few seconds per pass."""
    image = sitk.ReadImage(str(ct_dir / EXAMPLE_CT))
    return Volume.from_sitk(image[:, :, 96:112])


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("precision-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDSEG_CACHE_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module")
def starter_record(cache, lung_bases):
    (record,) = verify_tier("starter", "int8", lung_bases, threads=1, accuracy_control=False)
    return record


def test_judge_counts_agreement_and_dice_of_large_structures_only():
    exact = np.zeros((10, 100, 100), np.uint8)
    exact[:, :50] = 1  # 50 000 voxels
    exact[0, 0, :20] = 2  # 20 voxels: below STRUCTURE_VOXELS, not judged by Dice
    tier = exact.copy()
    tier[:, 50, :40] = 1  # 400 voxels more of structure 1: 50 380 in all
    tier[0, 0, :20] = 0
    agreement, dice, voxels, shortfalls = precision_tier.judge(exact, tier, {v: Label(v, n) for v, n in {0: "bg", 1: "big", 2: "tiny"}.items()})
    assert agreement == pytest.approx(1 - 420 / 100_000)
    assert voxels == {"big": 49_980}  # 20 of its voxels became structure 2 in the exact map
    assert dice["big"] == pytest.approx(2 * 49_980 / (49_980 + 50_380), abs=1e-6)
    assert "tiny" not in dice
    assert len(shortfalls) == 1 and "99.580% equal" in shortfalls[0] and "0.320% short" in shortfalls[0]


def test_gate_accepts_int8_on_the_starter(starter_record):
    record = starter_record
    assert record.offered, record.shortfalls
    assert record.agreement >= 0.999
    assert set(record.dice) == {"body", "lungs", "bones"}  # each of at least 1000 voxels in this crop
    assert min(record.dice.values()) >= 0.99
    stored = precision_tier.read_record(precision_tier.record_path(load_package(starter_model_path()), "2d", "int8"))
    assert stored.offered and stored.machine == precision_tier.tier_machine() and stored.precision == "int8"


def test_gate_refuses_int8_on_random_weights(cache, lung_bases):
    package = load_package(starter_model_path())
    plan = replace(package.configurations["2d"], features_per_stage=[8, 16, 16, 16, 16, 16])
    torch.manual_seed(20261207)
    network = build_network(plan, package.num_classes)
    random = replace(package, name="random-starter-layout", configurations={"2d": plan},
                     weights={"2d": [network.state_dict()]}, onnx={})
    (record,) = verify_tier(package_model(random), "int8", lung_bases, threads=1, accuracy_control=False)
    assert not record.offered
    assert record.shortfalls and all("short)" in line for line in record.shortfalls)
    text = record.describe()
    assert text.startswith("int8 NOT offered: ") and "needs" in text
    with pytest.raises(ModelError, match="failed its gate") as refused:  # before any image is read
        Segmenter(package_model(random), SegmentSettings(device="cpu", precision="int8"))
    assert record.shortfalls[0] in str(refused.value)


def test_an_offered_tier_runs_and_says_so(starter_record, lung_bases, tmp_path, ct_dir):
    from medseg.workflows.save import plan_save, save_segmentation

    result = Segmenter("starter", SegmentSettings(precision="int8")).segment(lung_bases)
    assert result.details["precision"] == "int8" and result.device == "openvino-cpu"
    stated = load_package(starter_model_path()).version  # what model.json says ("best (epoch 40, ...)")
    version = next(iter(result.labels.values())).provenance.algorithm_version
    assert stated and version == f"{stated} (int8)"
    target = plan_save(str(tmp_path / "labels.nii.gz"), [str(ct_dir / EXAMPLE_CT)], option="-o")
    save_segmentation(target, result.label_map, lung_bases, result.labels)
    sidecar = json.loads((tmp_path / "labels.labels.json").read_text())
    assert {row["algorithm_version"] for row in sidecar["labels"]} == {version}
    exact = Segmenter("starter", SegmentSettings(device="cpu")).segment(lung_bases)
    assert exact.details["precision"] == "f32"
    assert {label.provenance.algorithm_version for label in exact.labels.values()} == {stated}


def test_a_damaged_quantized_model_is_refused_naming_it_and_the_exact_path_runs(starter_record, lung_bases):
    xml = precision_tier.model_path(load_package(starter_model_path()), "2d", "int8")
    binary = xml.with_suffix(".bin")
    saved = binary.read_bytes()
    try:
        binary.write_bytes(saved[: len(saved) // 2])
        result = Segmenter("starter", SegmentSettings(device="cpu", precision="int8")).segment(lung_bases)
        assert result.details["precision"] == "f32" and result.device == "cpu"
        assert any(str(binary) in note and "exact float32 path ran" in note for note in result.fallbacks)
    finally:
        binary.write_bytes(saved)


def test_a_damaged_record_is_refused_naming_it(starter_record, lung_bases):
    path = precision_tier.record_path(load_package(starter_model_path()), "2d", "int8")
    saved = path.read_text()
    try:
        path.write_text(saved[: len(saved) // 3])
        with pytest.raises(precision_tier.TierDamaged) as refused:
            precision_tier.read_record(path)
        assert refused.value.path == path
        result = Segmenter("starter", SegmentSettings(device="cpu", precision="int8")).segment(lung_bases)
        assert result.details["precision"] == "f32"
        assert any(str(path) in note for note in result.fallbacks)
    finally:
        path.write_text(saved)


def test_bf16_is_offered_only_where_the_cpu_has_it(cache, lung_bases):
    native, why = precision_tier.bf16_support()
    (record,) = verify_tier("starter", "bf16", lung_bases, threads=1)
    if native:  # a CPU with AMX or AVX-512 BF16: the gate ran on the series (offered or not, by its figures)
        assert record.agreement > 0 and record.seconds["bf16"] > 0
        assert record.offered == (not record.shortfalls)
    else:  # emulated bf16 is slower than float32: not offered, said why, nothing run
        assert not record.offered and record.shortfalls == [why] and record.agreement == 0
        assert "neither AMX nor AVX-512 BF16" in why


def test_bf16_is_decided_by_the_cpus_capability_list_not_by_this_machine():
    # OpenVINO's OPTIMIZATION_CAPABILITIES as its CPU plugin reports them on a Sapphire Rapids (AMX), a Zen 4
    # (AVX-512 BF16) and an AVX2-only CPU
    for listed in (["BF16", "FP32", "INT8", "BIN", "EXPORT_IMPORT"], ["WINOGRAD", "BF16", "FP32", "INT8"]):
        native, why = precision_tier.bf16_decision(listed)
        assert native and "natively" in why and "BF16" in why
    native, why = precision_tier.bf16_decision(["WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"])
    assert not native and "neither AMX nor AVX-512 BF16" in why and "WINOGRAD, FP32, INT8" in why
    native, why = precision_tier.bf16_decision([])
    assert not native and "reports nothing" in why


def test_the_algorithm_version_says_the_tier_within_dicoms_64_characters():
    assert precision_tier.algorithm_version("best (epoch 40)", "f32") == "best (epoch 40)"
    assert precision_tier.algorithm_version("best (epoch 40)", "int8") == "best (epoch 40) (int8)"
    assert precision_tier.algorithm_version("", "bf16") == "bf16"
    long = "fine-tuned on 412 studies, fold 0 of 5, epoch 1000, mean Dice 0.9132 on validation"
    version = precision_tier.algorithm_version(long, "int8")
    assert len(version) == 64 and version.endswith("… (int8)") and version.startswith(long[:50])


class _SmallUNet(torch.nn.Module):
    """Two resolutions of a 3D U-Net (conv, instance norm, leaky ReLU; strided conv down, transposed conv up,
    skip concatenated), with the instance norms that the exact-norm export writes as reductions."""

    def __init__(self):
        super().__init__()
        nn = torch.nn

        def block(cin: int, cout: int, stride: int = 1) -> torch.nn.Module:
            return nn.Sequential(nn.Conv3d(cin, cout, 3, stride, 1), nn.InstanceNorm3d(cout, affine=True),
                                 nn.LeakyReLU(0.01))

        self.top, self.down, self.bottom = block(1, 8), block(8, 16, 2), block(16, 16)
        self.up = nn.ConvTranspose3d(16, 8, 2, 2)
        self.merge, self.head = block(16, 8), nn.Conv3d(8, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.top(x)
        return self.head(self.merge(torch.cat([self.up(self.bottom(self.down(skip))), skip], 1)))


def test_int8_quantizes_the_convolutions_only_and_they_run_in_int8(ct_dir, tmp_path):
    """The 3D exact-norm export: NNCF's CPU defaults would put quantizers on the norms' element-wise inputs
    (slower, and further from float32); the tier quantizes convolutions alone, and OpenVINO's compiled graph
    (its own report of each layer's runtime precision, the oracle) runs each quantized convolution in int8."""
    import openvino

    from medseg.model.onnx_graph import export_onnx
    from medseg.model.precision_gate import QUANTIZED_TYPES, quantize_int8

    class Plan:
        num_input_channels, patch_size = 1, (16, 32, 32)

    torch.manual_seed(8)
    network = _SmallUNet().eval()
    onnx = export_onnx(network, Plan, tmp_path / "net.onnx", exact_norm=True)
    image = sitk.GetArrayFromImage(sitk.ReadImage(str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")))
    image = (image.astype(np.float32) + 300.0) / 500.0  # about a CT z-score
    tiles = [np.ascontiguousarray(image[z:z + 16, y:y + 32, x:x + 32][None, None])
             for z, y, x in ((10, 200, 150), (20, 260, 250), (30, 300, 300), (16, 240, 330))]
    xml = tmp_path / "int8.xml"
    method, compute = quantize_int8(onnx, [1, 1, 16, 32, 32], tiles, xml, threads=1, accuracy_control=False,
                                    bf16=precision_tier.bf16_support()[0])
    assert "post-training quantization of the convolutions" in method and "kept: " in method
    assert compute == ("bf16" if "full-resolution convolutions bf16" in method.split("kept: ")[1] else "f32")

    model = openvino.Core().read_model(str(xml))
    quantizers = [op for op in model.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]
    assert quantizers  # something was quantized at all
    fed = {target.get_node().get_type_name() for op in quantizers for target in op.output(0).get_target_inputs()}
    assert fed <= set(QUANTIZED_TYPES), fed  # no quantizer before a reduction, multiplication or square root
    quantized_convolutions = sum(1 for op in model.get_ordered_ops() if op.get_type_name() == "Convolution"
                                 and op.input_value(0).get_node().get_type_name() == "FakeQuantize")
    assert quantized_convolutions >= 2  # at least the bottom, which no candidate keeps in float32

    compiled = openvino.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": compute,
                                                           "INFERENCE_NUM_THREADS": 1})
    runtime = [(op.get_rt_info()["layerType"].astype(str), op.get_rt_info()["runtimePrecision"].astype(str))
               for op in compiled.get_runtime_model().get_ordered_ops()]
    int8_convolutions = sum(1 for kind, precision in runtime if kind == "Convolution" and precision in ("u8", "i8"))
    assert int8_convolutions == quantized_convolutions, runtime


def test_batch_runs_the_verified_tier_and_its_table_says_so(starter_record, ct_dir, tmp_path):
    from medseg.batch.table import read_table
    from medseg.cli import main

    archive = tmp_path / "archive"
    archive.mkdir()
    sitk.WriteImage(sitk.ReadImage(str(ct_dir / EXAMPLE_CT))[:, :, 96:112], str(archive / "bases.nii.gz"))
    out = tmp_path / "out"
    assert main(["batch", str(archive), "-o", str(out), "--device", "cpu", "--precision", "int8"]) == 0
    (row,) = read_table(out / "results.csv")
    assert row["status"] == "ok" and row["device"] == "openvino-cpu (int8)"
    stated = load_package(starter_model_path()).version
    sidecar = json.loads(next(out.glob("*.labels.json")).read_text())
    assert {label["algorithm_version"] for label in sidecar["labels"]} == {f"{stated} (int8)"}
    # the exact path's labels are not the tier's: the same batch without --precision segments the case again
    assert main(["batch", str(archive), "-o", str(out), "--device", "cpu"]) == 0
    (row,) = read_table(out / "results.csv")
    assert row["status"] == "ok" and row["device"] == "cpu"
    sidecar = json.loads(next(out.glob("*.labels.json")).read_text())
    assert {label["algorithm_version"] for label in sidecar["labels"]} == {stated}
