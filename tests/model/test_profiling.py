"""``medseg segment --profile``: the phase table and the torch.profiler trace, on a real CT crop."""

from __future__ import annotations

import json

import numpy as np
import SimpleITK as sitk
import torch
from infer_fixtures import ABDOMEN_WIDER, ct_crop, small_model_folder

from medseg.cli import main
from medseg.core.volume import Volume
from medseg.model.nnunet_import import import_nnunet
from medseg.model.preprocess import preprocess
from medseg.model.profiling import SEGMENT_PHASES, PhaseProfile, Profiling, phase
from medseg.model.sliding_window import pad_to_patch
from medseg.model.tiling import tile_slicers


def test_segment_profile_writes_the_phase_table_and_a_trace(ct_dir, tmp_path, capsys):
    model = small_model_folder(tmp_path / "nnunet")
    image = ct_crop(ct_dir, ABDOMEN_WIDER)
    source = tmp_path / "ct.nii.gz"
    sitk.WriteImage(image, str(source))
    folder = tmp_path / "profile"
    code = main(["segment", str(source), "--model", str(model), "-o", str(tmp_path / "labels.nii.gz"),
                 "--device", "cpu", "--profile", str(folder), "--json"])
    assert code == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (profile,) = [r for r in records if r["event"] == "profile"]
    rows = {row["phase"]: row for row in profile["phases"]}
    assert [name for name in rows if name in SEGMENT_PHASES] == list(SEGMENT_PHASES)  # every phase, in order
    # one network call per tile pass: as many as the tiles nnU-Net's tiling gives (1 tile a pass on the CPU)
    plan = import_nnunet(model).configurations["3d_fullres"]
    padded, _ = pad_to_patch(torch.from_numpy(preprocess(Volume.from_sitk(image), plan).data), plan.patch_size)
    assert rows["network"]["calls"] == len(tile_slicers(padded.shape[1:], plan.patch_size, 0.5)) > 1
    assert rows["network"]["seconds"] > 0 and all(row["seconds"] >= 0 for row in rows.values())
    assert sum(row["seconds"] for row in rows.values()) <= profile["total_seconds"] + 1e-3
    assert json.loads((folder / "phases.json").read_text())["phases"] == profile["phases"]
    (trace,) = profile["trace"]
    names = {event.get("name") for event in json.loads(open(trace).read())["traceEvents"]}
    assert set(SEGMENT_PHASES) <= names  # each phase is a named range in the trace
    assert {"aten::convolution", "aten::mkldnn_convolution"} & names  # and the operators inside them


def test_nested_phases_count_exclusive_time():
    """A phase's own time excludes the phases inside it; the table's rows add up to the whole."""
    with Profiling(None) as profiling:
        with phase("stitching"):
            for _ in range(3):
                with phase("network"):
                    np.linalg.svd(np.random.default_rng(0).normal(size=(200, 200)))
            np.linalg.svd(np.random.default_rng(1).normal(size=(300, 300)))
    profile: PhaseProfile = profiling.profile
    assert profile.calls == {"network": 3, "stitching": 1}
    rows = profile.rows(SEGMENT_PHASES)
    assert abs(sum(seconds for _, seconds, _ in rows) - profile.total) < 1e-3
    with phase("network"):  # outside a profile: nothing is recorded
        pass
    assert profile.calls["network"] == 3
