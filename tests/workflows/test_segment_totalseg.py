"""A TotalSegmentator model through the one segment use case (what the CLI, batch and the GUI call).

The model is TotalSegmentator's layout with small random weights (tests/model/ts_fixture.py) on a real
abdomen CT; the pipeline itself is checked against TotalSegmentator 2.18.0 in
tests/model/test_totalseg_parity.py, so here the oracle for the labels is mostly that pipeline called
directly: the use case must add its checks, choice, progress and cancellation without changing a voxel.
Once, for the path every interface takes by default (no configuration forced), the oracle is
TotalSegmentator 2.18.0 itself (tests/model/ts_peer.py, its --fast on the same NIfTI).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from infer_fixtures import ct_crop
from ts_fixture import make_totalseg_weights
from ts_peer import assert_agrees, read_multilabel, run_totalsegmentator

from medseg.catalogue import load_catalogue
from medseg.core.volume import Volume
from medseg.errors import Cancelled, DeviceError, ModelError
from medseg.model.kinds.totalseg_kind import TOTALSEG_MODEL
from medseg.model.totalseg import import_totalsegmentator_task, segment_totalseg
from medseg.progress import CancelToken
from medseg.workflows.models import open_model
from medseg.workflows.segment import Segmenter, SegmentSettings

# 20 slices of TotalSegmentator's example abdomen (3 mm), cropped in-plane: 64 x 48 x 40 voxels at 1.5 mm
ABDOMEN_SMALL = ("totalsegmentator/example_ct_sm.nii.gz", (slice(5, 25), slice(30, 54), slice(30, 62)))


@pytest.fixture(scope="module")
def ts_root(tmp_path_factory) -> Path:
    """TotalSegmentator's weights folder (root / "weights") and medseg's conversion of it (root / "model")."""
    root = tmp_path_factory.mktemp("ts")
    weights = make_totalseg_weights(root / "weights", [291, 292, 293, 294, 295, 297, 298])  # small: 48^3, 4 stages
    import_totalsegmentator_task(weights, root / "model")
    return root


@pytest.fixture(scope="module")
def model_dir(ts_root) -> Path:
    return ts_root / "model"


@pytest.fixture(scope="module")
def abdomen(ct_dir) -> Volume:
    return Volume.from_sitk(ct_crop(ct_dir, ABDOMEN_SMALL))


def test_the_card_states_configurations_structures_and_groups(model_dir):
    opened = open_model(model_dir)
    card = opened.card
    entry = load_catalogue().entries["totalsegmentator/total"]
    assert card.kind == TOTALSEG_MODEL and card.modality == "CT" and card.name == "totalsegmentator/total"
    assert {v: label.name for v, label in card.labels.items()} == {s.value: s.name for s in entry.structures}
    assert {v: label.group for v, label in card.labels.items()} == {s.value: s.group for s in entry.structures}
    assert card.labels[5].group == "organs"
    assert set(card.configurations) == {"1.5mm", "3mm", "6mm"} and "5 networks" in card.configurations["1.5mm"]
    assert card.licence == entry.licence.summary
    assert entry.support == "exact"  # the catalogue's claim, which the peer comparisons here and in tests/model back
    with pytest.raises(ModelError, match="TotalSegmentator model.*not one package") as error:
        opened.package  # export, train --from and plan need one package: a clear refusal, not an AttributeError
    assert error.value.path == model_dir


def test_five_parts_with_progress_per_part_and_the_pipelines_labels(model_dir, abdomen):
    segmenter = Segmenter(model_dir, SegmentSettings(device="cpu", configuration="1.5mm"))
    seen = []
    result = segmenter.segment(abdomen, progress=seen.append)
    direct, run = segment_totalseg(abdomen, segmenter.model.pipeline.model, "1.5mm", device="cpu")
    assert np.array_equal(result.label_map.array, direct.label_map.array) and result.label_map.same_grid(abdomen)
    assert result.configuration == "1.5mm" and result.reason == "asked for" and result.parts == run.parts
    assert "configuration 1.5mm: asked for" in result.notes
    texts = [p.text for p in seen]
    firsts = [next(i for i, t in enumerate(texts) if t.startswith(f"part {n} of 5 ({subject})"))
              for n, subject in enumerate(("organs", "vertebrae", "cardiac", "muscles", "ribs"), 1)]
    assert firsts == sorted(firsts)  # the parts in TotalSegmentator's order, each announced
    assert all(b.fraction >= a.fraction for a, b in zip(seen, seen[1:])) and seen[-1].fraction == pytest.approx(1.0)
    present = sorted(int(v) for v in np.unique(result.label_map.array) if v)
    assert sorted(result.labels) == present and all(result.labels[v].name == result.model.labels[v].name
                                                    for v in present)


def test_the_choice_by_spacing_with_every_estimate(model_dir, abdomen):
    segmenter = Segmenter(model_dir, SegmentSettings(device="cpu"))
    choice = segmenter.configuration_choice(abdomen)
    assert abdomen.spacing_mm == pytest.approx((3.0, 3.0, 3.0))
    assert choice.name == "3mm" and "3 mm apart" in choice.reason  # 3 mm voxels gain nothing from 1.5 mm parts
    assert set(choice.estimates_s) == {"1.5mm", "3mm", "6mm"}
    assert choice.estimates_s["1.5mm"] > choice.estimates_s["3mm"] >= choice.estimates_s["6mm"] > 0
    assert Segmenter(model_dir, SegmentSettings(device="cpu", configuration="6mm")).configuration_choice(
        abdomen).reason == "asked for"


@pytest.fixture(scope="module")
def fast_peer(ts_root, ct_dir, tmp_path_factory):
    """The small abdomen as a NIfTI, read back, and TotalSegmentator's --fast labels of it (one peer run: about
    20 s, most of it TotalSegmentator starting)."""
    root = tmp_path_factory.mktemp("fast_peer")
    image = root / "abdomen.nii.gz"
    sitk.WriteImage(ct_crop(ct_dir, ABDOMEN_SMALL), str(image))
    theirs, names = read_multilabel(run_totalsegmentator(image, root / "ts.nii.gz", ts_root / "weights",
                                                         ts_root / "home", fast=True))
    return Volume.from_sitk(sitk.ReadImage(str(image))), theirs, names


def test_the_automatic_choice_gives_totalsegmentators_result(model_dir, fast_peer):
    """What Segment runs when the user forces nothing, on a 3 mm series: the 3 mm network, i.e. TotalSegmentator's
    --fast, with its labels."""
    volume, theirs, names = fast_peer
    result = Segmenter(model_dir, SegmentSettings(device="cpu")).segment(volume)  # the peer runs on the CPU
    assert result.configuration == "3mm" and "3 mm apart" in result.reason
    assert_agrees(result.label_map.array, theirs, min_classes=20)
    assert {v: result.model.labels[v].name for v in names} == names  # TotalSegmentator's numbers and names


@pytest.mark.parametrize("engine", ["openvino-cpu", "measure"])
def test_device_auto_runs_each_network_on_its_cpu_engine(model_dir, fast_peer, engine, monkeypatch, tmp_path):
    """--device auto on the CPU: TotalSegmentator's networks run on the engine chosen for each (pinned by
    $MEDSEG_CPU_ENGINE, or measured here for the 3 mm network), the notes say which and why, and the labels
    still agree with TotalSegmentator's (>= 99.9 % of voxels: an ONNX engine's float32 sums are not PyTorch's)."""
    from medseg.model import cpu_runtime
    from medseg.model.engine_measurement import measure_model

    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "cache"))  # its own engine records and ONNX exports
    monkeypatch.setenv("MEDSEG_CPU_ENGINE", engine)
    volume, theirs, names = fast_peer
    segmenter = Segmenter(model_dir, SegmentSettings(device="auto"))
    part = segmenter.model.pipeline.model.configurations["3mm"].parts[0]
    if engine == "measure":
        package = part.load()
        chosen = measure_model(package, part.configuration)  # at the thread count a run here gets
        assert chosen.measured and cpu_runtime.stored_choice(package, part.configuration, chosen.threads) is not None
        expected = chosen.describe()
    else:
        expected = "CPU engine: OpenVINO (set by MEDSEG_CPU_ENGINE)"
    result = segmenter.segment(volume)
    assert result.configuration == "3mm" and expected in result.notes, result.notes
    assert_agrees(result.label_map.array, theirs, min_classes=20)
    assert {v: result.model.labels[v].name for v in names} == names


def test_a_structure_subset_keeps_only_those(model_dir, abdomen):
    # structures the random crop model finds in this crop (liver, spleen, aorta: it finds none, the result
    # would be empty and the comparison would mean nothing)
    wanted = ("esophagus", "duodenum", "rib_right_1", "femur_right")
    segmenter = Segmenter(model_dir, SegmentSettings(device="cpu", configuration="6mm", structures=wanted))
    result = segmenter.segment(abdomen)
    direct, run = segment_totalseg(abdomen, segmenter.model.pipeline.model, "6mm", list(wanted), device="cpu")
    assert np.array_equal(result.label_map.array, direct.label_map.array) and run.crop_xyz is not None
    values = {v for v, label in result.model.labels.items() if label.name in wanted}
    found = set(np.unique(result.label_map.array).tolist()) - {0}
    assert len(values) == 4 and found and found <= values


def test_cancel_stops_between_tiles_of_a_part(model_dir, abdomen):
    token = CancelToken()
    seen = []

    def progress(p):
        seen.append(p.text)
        if p.text.startswith("part 2 of 5"):
            token.cancel()

    segmenter = Segmenter(model_dir, SegmentSettings(device="cpu", configuration="1.5mm"))
    with pytest.raises(Cancelled):
        segmenter.segment(abdomen, progress=progress, cancel=token)
    assert not any(text.startswith("part 3 of 5") for text in seen)


def test_refusals_before_any_image_is_read(model_dir):
    with pytest.raises(ModelError, match="unknown structure.*livr"):
        Segmenter(model_dir, SegmentSettings(device="cpu", structures=("liver", "livr")))
    with pytest.raises(ModelError, match="without mirroring"):
        Segmenter(model_dir, SegmentSettings(device="cpu", mirror=True))
    with pytest.raises(ModelError, match="no configuration '2mm'"):
        Segmenter(model_dir, SegmentSettings(device="cpu", configuration="2mm"))
    with pytest.raises(DeviceError, match="run in PyTorch, not on onnx-cpu"):
        Segmenter(model_dir, SegmentSettings(device="onnx-cpu"))
    with pytest.raises(ModelError, match="TotalSegmentator models only"):
        Segmenter("starter", SegmentSettings(device="cpu", structures=("liver",)))


def test_several_models_in_one_run_make_one_segmentation(model_dir, ct_dir, tmp_path, capsys):
    """`medseg segment CT --model <TotalSegmentator> --model starter --fastest`: one label map, each model's
    values kept where free and moved where taken (said in the notes), later structures over earlier ones; and
    one DICOM SEG whose segments name the model that made each (its own algorithm identification)."""
    import highdicom as hd
    import pydicom

    from medseg.cli import main
    from medseg.io.label_files import read_label_map
    from medseg.workflows.studies import OpenStudyRequest, open_study

    series = ct_dir / "totalsegmentator" / "example_ct_dicom"
    volume = open_study(OpenStudyRequest(series)).volume
    starter = Segmenter("starter").segment(volume)
    total = Segmenter(model_dir, SegmentSettings(configuration="6mm")).segment(volume)
    assert {1, 2, 3} & set(total.labels) and set(starter.labels) <= {1, 2, 3}  # the values collide

    out = tmp_path / "both.nii.gz"
    # TotalSegmentator first (its values stay 1..117), then the starter, whose 1..3 are taken
    assert main(["segment", str(series), "--model", str(model_dir), "--model", "starter", "--fastest",
                 "-o", str(out), "--json"]) == 0
    done = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"done"' in line][-1]
    moved = {int(v): t for v, t in done["moves"][starter.model.name].items()}
    assert moved == {1: 118, 2: 119, 3: 120}  # the next free values after total's 117
    assert "totalsegmentator/total" not in done["moves"]
    expected = total.label_map.array.astype(np.int32).copy()
    ours = starter.label_map.array.astype(np.int32)
    mapped = np.vectorize(lambda v: moved.get(v, v))(ours)
    np.copyto(expected, mapped, where=ours != 0)  # the later model's structures over the earlier's
    present = set(np.unique(expected)) - {0}
    assert present & set(moved.values()) and present - set(moved.values())  # both models show: the check means something
    written = read_label_map(out, volume)
    assert np.array_equal(written.label_map.array, expected)
    assert {s.value: s.name for s in written.segments if s.value in moved.values()} == {
        t: starter.model.labels[v].name for v, t in moved.items() if t in present}  # the sidecar's names
    models = {int(v): label["model"] for v, label in done["labels"].items()}
    assert {models[v] for v in present} == {starter.model.name, "totalsegmentator/total"}
    assert all(models[t] == starter.model.name for t in moved.values() if t in present)

    seg_path = tmp_path / "both.dcm"
    assert main(["segment", str(series), "--model", str(model_dir), "--model", "starter", "--fastest",
                 "-o", str(seg_path)]) == 0
    seg = hd.seg.segread(seg_path)
    algorithms = {str(item.SegmentationAlgorithmIdentificationSequence[0].AlgorithmName)
                  for item in pydicom.dcmread(seg_path).SegmentSequence}
    assert algorithms == {starter.model.name, "totalsegmentator/total"}
    assert seg.number_of_segments == len(present)
