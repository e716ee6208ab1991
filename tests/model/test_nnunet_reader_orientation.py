"""An nnU-Net model trained through a reorienting reader runs on RAS arrays in medseg, as in nnU-Net.

nnU-Net's NibabelIOWithReorient turns every image to RAS before the network sees it. The oracle
is nnU-Net's own file path: its reader, ``predict_single_npy_array`` and its writer (which turns
the labels back), on a real chest CT stored LPS (not RAS), compared with ``medseg segment`` on the
same NIfTI file. Without the reader's orientation (as ``import-model`` did before) the two disagree.
"""

from __future__ import annotations

import dataclasses
import json

import nibabel as nib
import numpy as np
import SimpleITK as sitk
import torch
from infer_fixtures import CHEST, SMALL_MODEL, ct_crop
from nnunet_fixture import make_nnunet_result_folder
from nnunetv2.imageio.nibabel_reader_writer import NibabelIOWithReorient
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

from medseg.core.volume import Volume
from medseg.model.infer import segment
from medseg.model.nnunet_import import import_nnunet

torch.set_num_threads(2)


def reorienting_model(root):
    folder = make_nnunet_result_folder(root, **SMALL_MODEL)
    for name, key in (("plans.json", "image_reader_writer"), ("dataset.json", "overwrite_image_reader_writer")):
        content = json.loads((folder / name).read_text())
        content[key] = "NibabelIOWithReorient"  # as nnU-Net's planner writes it from dataset.json
        (folder / name).write_text(json.dumps(content, indent=1))
    return folder


def test_reorienting_reader_gives_ras_arrays_as_nnunet_predicts(tmp_path, ct_dir):
    folder = reorienting_model(tmp_path / "model")
    source = tmp_path / "chest.nii.gz"
    sitk.WriteImage(ct_crop(ct_dir, CHEST), str(source))
    assert nib.aff2axcodes(nib.load(str(source)).affine) != ("R", "A", "S")  # the trap: stored LPS

    reader = NibabelIOWithReorient()
    array, properties = reader.read_images([str(source)])
    predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)
    predictor.initialize_from_trained_model_folder(str(folder), use_folds=(0,))
    labels_ras = predictor.predict_single_npy_array(array.astype(np.float32), properties, None, None, False)
    reader.write_seg(labels_ras, str(tmp_path / "nnunet.nii.gz"), properties)  # back to the file's own grid
    expected = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "nnunet.nii.gz")))
    assert np.bincount(expected.ravel(), minlength=3).min() > 0.05 * expected.size  # several labels to agree on

    package = import_nnunet(folder)
    plan = package.configurations["3d_fullres"]
    assert plan.orientation == "RAS"
    assert package.provenance["image_reader_writer"] == "NibabelIOWithReorient"
    volume = Volume.from_sitk(sitk.ReadImage(str(source)))
    labels = segment(volume, package, device="cpu").label_map.array
    assert labels.shape == expected.shape
    agreement = float((labels == expected).mean())
    assert agreement >= 0.9999, f"voxel agreement {agreement:.6f}"

    # what import-model gave before: the same network on the array as stored
    package.configurations["3d_fullres"] = dataclasses.replace(plan, orientation=None)
    stored = segment(volume, package, device="cpu").label_map.array
    assert float((stored == expected).mean()) < 0.9, "the test would pass without the reader's orientation"


def test_plain_readers_keep_arrays_as_stored(tmp_path):
    folder = make_nnunet_result_folder(tmp_path, base_features=8, n_stages=4)
    assert import_nnunet(folder).configurations["3d_fullres"].orientation is None  # SimpleITKIO, as planned
    plans = json.loads((folder / "plans.json").read_text())
    del plans["image_reader_writer"]
    (folder / "plans.json").write_text(json.dumps(plans))
    dataset = json.loads((folder / "dataset.json").read_text())
    dataset["overwrite_image_reader_writer"] = "SimpleITKIOWithReorient"  # plans without the key: dataset.json says
    (folder / "dataset.json").write_text(json.dumps(dataset))
    assert import_nnunet(folder).configurations["3d_fullres"].orientation == "RAS"
