"""For the Interactive AI tests in the real window (test_interactive_gui.py,
test_interactive_scribble_lasso_gui.py): the lung1 tumour crop and a small nnInteractive checkpoint in its
exact layout (pytest fixtures, imported by name into each module), and nnInteractive's own session as the
oracle."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from interactive_fixture import make_nninteractive_folder

PATCH, FEATURES = 80, 4  # as tests/workflows/test_interactive_edit.py: an object neither empty nor everything
CROP_XYZ = ((170, 266), (312, 408), (16, 48))  # lung1 around its tumour (x, y, z as SimpleITK indexes): random
# weights grow an object to the patch's border on the whole series, and each prompt would zoom out 4x


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    return make_nninteractive_folder(tmp_path_factory.mktemp("hub"), patch_size=(PATCH,) * 3, base_features=FEATURES,
                                     max_features=8 * FEATURES, name="nnInteractive_v1.0")


@pytest.fixture(scope="module")
def chest_crop(tmp_path_factory, shared_data) -> tuple[Path, np.ndarray]:
    """The real lung1 series cut around its tumour (geometry kept), and the tumour's mask on it."""
    import SimpleITK as sitk

    lung = shared_data / "ct" / "pyradiomics_lung1"
    (x0, x1), (y0, y1), (z0, z1) = CROP_XYZ
    path = tmp_path_factory.mktemp("chest") / "lung1_tumour_crop.nrrd"
    sitk.WriteImage(sitk.ReadImage(str(lung / "lung1_image.nrrd"))[x0:x1, y0:y1, z0:z1], str(path))
    label = sitk.ReadImage(str(lung / "lung1_label.nrrd"))[x0:x1, y0:y1, z0:z1]
    return path, sitk.GetArrayFromImage(label) == 1


class Oracle:
    """nnInteractive's session on the window's image, given the prompts the tool's session holds: points and
    boxes as they are, scribbles and lassos as the whole-image mask it takes."""

    def __init__(self, folder: Path, image: np.ndarray) -> None:
        import torch
        from nnInteractive.inference.inference_session import nnInteractiveInferenceSession

        self.session = nnInteractiveInferenceSession(device=torch.device("cpu"), torch_n_threads=torch.get_num_threads())
        self.session.initialize_from_trained_model_folder(str(folder))
        self.session.set_image(image[None].astype(np.float32))
        self.target = np.zeros(image.shape, np.uint8)
        self.session.set_target_buffer(self.target)
        self.given = 0

    def follow(self, prompts) -> np.ndarray:
        for prompt in prompts[self.given:]:
            np.random.seed(0)  # nnInteractive leaves its refinement fallback unseeded; medseg seeds it with 0
            if prompt.kind == "point":
                self.session.add_point_interaction(prompt.point, prompt.positive)
            elif prompt.kind == "box":
                self.session.add_bbox_interaction([list(b) for b in prompt.box], prompt.positive)
            else:
                full = np.zeros(self.target.shape, np.uint8)
                full[tuple(slice(o, o + n) for o, n in zip(prompt.origin, prompt.mask.shape))] = prompt.mask != 0
                add = (self.session.add_scribble_interaction if prompt.kind == "scribble"
                       else self.session.add_lasso_interaction)
                add(full, prompt.positive)
        self.given = len(prompts)
        return self.target.astype(bool)
