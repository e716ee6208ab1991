"""Shared pieces of the inference tests: a small nnU-Net model folder and real CT crops.

Crops keep the tests quick on two CPU cores; they are cut with SimpleITK so each crop
keeps its real geometry (origin moves with the crop, spacing and direction are kept).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import SimpleITK as sitk
from nnunet_fixture import make_nnunet_result_folder

from medseg.core.volume import Volume

# A thin model: the fixture's thick-slice plan (3.0, 1.5, 1.5) mm, patch 32 x 64 x 64,
# with 8 base features; seed 3 gives random weights whose labels split real CT into three
# sizeable classes (so agreement tests have many label boundaries to get right).
SMALL_MODEL = {"base_features": 8, "n_stages": 4, "seed": 3}

# Real CTs from shared/data: an isotropic 3 mm abdomen and an anisotropic 5 mm chest
# (0.57 mm pixels, which exercises nnU-Net's separate-z resampling both ways). Crops are
# sized to a few 32 x 64 x 64 tiles at the model's spacing: CPU tests pay per tile.
ABDOMEN = ("totalsegmentator/example_ct_sm.nii.gz", (slice(0, 30), slice(30, 62), slice(30, 78)))  # 2 tiles
ABDOMEN_WIDER = ("totalsegmentator/example_ct_sm.nii.gz", (slice(0, 30), slice(25, 73), slice(20, 84)))  # 6 tiles
CHEST = ("pyradiomics_lung1/lung1_image.nrrd", (slice(16, 32), slice(150, 262), slice(100, 340)))  # 3 tiles


def small_model_folder(root: Path) -> Path:
    return make_nnunet_result_folder(Path(root), **SMALL_MODEL)


def ct_crop(ct_dir: Path, which: tuple[str, tuple[slice, slice, slice]]) -> sitk.Image:
    """A (z, y, x)-indexed crop of a real CT as a SimpleITK image with its true geometry."""
    name, (z, y, x) = which
    image = sitk.ReadImage(str(ct_dir / name))
    return image[x, y, z]  # SimpleITK indexes (x, y, z)


def crop_volume(ct_dir: Path, which) -> Volume:
    return Volume.from_sitk(ct_crop(ct_dir, which))


def nnunet_array(image: sitk.Image) -> tuple[np.ndarray, dict]:
    """The input nnUNetPredictor.predict_single_npy_array takes (as its SimpleITK reader makes it)."""
    array = sitk.GetArrayFromImage(image).astype(np.float32)[None]
    return array, {"spacing": list(image.GetSpacing())[::-1]}


def nnunet_preprocessed(model_folder: Path, image: sitk.Image, configuration: str = "3d_fullres"):
    """nnU-Net's own DefaultPreprocessor on a crop: (data, properties, plans manager, dataset.json)."""
    import json

    from nnunetv2.preprocessing.preprocessors.default_preprocessor import DefaultPreprocessor
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    plans = PlansManager(json.loads((Path(model_folder) / "plans.json").read_text()))
    dataset_json = json.loads((Path(model_folder) / "dataset.json").read_text())
    array, properties = nnunet_array(image)
    data, _, properties = DefaultPreprocessor(verbose=False).run_case_npy(
        array, None, properties, plans, plans.get_configuration(configuration), dataset_json)
    return data, properties, plans, dataset_json


def scipy_preprocessed(volume: Volume, plan) -> np.ndarray:
    """The preprocessing as it was before issue #27 (the reference of the torch path): a float32 copy of the
    crop, numpy normalisation, scipy zoom (``preprocess.resample_image``)."""
    from medseg.model import preprocess as pp

    transpose = pp.plan_transpose(plan)
    image = np.transpose(volume.array, transpose)[None]
    bbox = pp.nonzero_bbox(image)
    data = np.array(image[(slice(None), *bbox)], dtype=np.float32)
    pp.normalize(data, plan.normalization)
    spacing = tuple(float(volume.spacing_zyx[a]) for a in transpose)
    target = pp.network_spacing(plan, spacing)
    return pp.resample_image(data, pp.compute_new_shape(data.shape[1:], spacing, target), spacing, target)
