"""medseg segment against nnU-Net v2's own predictor on real CT, same model folder.

nnU-Net runs in-process (nnUNetPredictor.predict_single_npy_array: TTA off, fold 0,
CPU, results off-device), fed exactly what its SimpleITK reader would give it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from infer_fixtures import ABDOMEN_WIDER, CHEST, ct_crop, nnunet_array, small_model_folder
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

from medseg.cli import main
from medseg.core.volume import Volume
from medseg.model.infer import segment
from medseg.model.nnunet_import import import_nnunet

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return small_model_folder(tmp_path_factory.mktemp("nnunet"))


def nnunet_segment(model_folder, image: sitk.Image) -> np.ndarray:
    predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)
    predictor.initialize_from_trained_model_folder(str(model_folder), use_folds=(0,))
    array, properties = nnunet_array(image)
    return predictor.predict_single_npy_array(array, properties, None, None, False)


@pytest.mark.parametrize("which", [ABDOMEN_WIDER, CHEST], ids=["abdomen-3mm-isotropic", "chest-5mm-anisotropic"])
def test_labels_agree_with_nnunet_predictor(model_folder, ct_dir, which):
    image = ct_crop(ct_dir, which)
    expected = nnunet_segment(model_folder, image)
    result = segment(Volume.from_sitk(image), import_nnunet(model_folder), device="cpu")
    labels = result.label_map.array
    assert labels.shape == expected.shape
    # the random-weight network must actually predict several labels, or agreement means nothing
    assert np.bincount(expected.ravel(), minlength=3).min() > 0.05 * expected.size
    agreement = float((labels == expected).mean())
    assert agreement >= 0.9999, f"voxel agreement {agreement:.6f}"


def test_cli_segment_writes_label_map_on_input_geometry(model_folder, ct_dir, tmp_path, capsys):
    image = ct_crop(ct_dir, ABDOMEN_WIDER)
    source, output = tmp_path / "ct.nii.gz", tmp_path / "labels.nrrd"
    sitk.WriteImage(image, str(source))
    expected = nnunet_segment(model_folder, sitk.ReadImage(str(source)))
    capsys.readouterr()  # drop nnU-Net's own prints
    code = main(["segment", str(source), "--model", str(model_folder), "-o", str(output), "--device", "cpu", "--json"])
    assert code == 0
    document = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert document["event"] == "done"
    written = sitk.ReadImage(str(output))
    assert written.GetSize() == image.GetSize()
    assert np.allclose(written.GetOrigin(), image.GetOrigin()) and np.allclose(written.GetSpacing(), image.GetSpacing())
    assert np.allclose(written.GetDirection(), image.GetDirection())
    labels = sitk.GetArrayFromImage(written)
    assert (labels == expected).mean() >= 0.9999
    voxel_ml = float(np.prod(image.GetSpacing())) / 1000
    assert document["device"] == "cpu" and document["configuration"] == "3d_fullres"
    assert document["volumes_ml"]["liver"] == pytest.approx(np.sum(labels == 1) * voxel_ml, abs=1e-3)
    assert document["volumes_ml"]["spleen"] == pytest.approx(np.sum(labels == 2) * voxel_ml, abs=1e-3)


def test_cli_reports_a_missing_model(tmp_path, ct_dir, capsys):
    code = main(["segment", str(ct_dir / ABDOMEN_WIDER[0]), "--model", str(tmp_path / "nope"), "-o", str(tmp_path / "x.nii.gz")])
    assert code == 1
    err = capsys.readouterr().err
    # The message names the path, says what it is not, and how to go on.
    assert str(tmp_path / "nope") in err
    assert "no such model" in err and "nnU-Net v2 result folder" in err and "'starter'" in err
    assert not (tmp_path / "x.nii.gz").exists()
