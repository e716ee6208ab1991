"""TotalSegmentator 2.18.0's task ``total``: its 117 structures, its datasets and how they fit together.

Facts about a public model (the class names and numbers are TotalSegmentator's ``class_map["total"]``;
the dataset ids, folder names and trainers are where its weights live). The five 1.5 mm parts
(datasets 291-295) each predict a block of the 117 structures with local numbers 1..N, in the
order of the global numbering; 297 (3 mm, ``--fast``) and 298 (6 mm, ``--fastest``, and the crop
model of ``--roi_subset``) predict the 117 numbers directly.
"""

from __future__ import annotations

from dataclasses import dataclass

TASK = "total"
MODEL_ID = "totalsegmentator/total"
VERSION = "2.18.0"  # the TotalSegmentator release whose pipeline medseg reproduces
WEIGHTS_RELEASE = "v2.0.0-weights"

# class_map["total"]: value = position + 1
TOTAL_CLASSES: tuple[str, ...] = (
    "spleen", "kidney_right", "kidney_left", "gallbladder", "liver", "stomach", "pancreas",
    "adrenal_gland_right", "adrenal_gland_left", "lung_upper_lobe_left", "lung_lower_lobe_left",
    "lung_upper_lobe_right", "lung_middle_lobe_right", "lung_lower_lobe_right", "esophagus", "trachea",
    "thyroid_gland", "small_bowel", "duodenum", "colon", "urinary_bladder", "prostate", "kidney_cyst_left",
    "kidney_cyst_right", "sacrum", "vertebrae_S1", "vertebrae_L5", "vertebrae_L4", "vertebrae_L3",
    "vertebrae_L2", "vertebrae_L1", "vertebrae_T12", "vertebrae_T11", "vertebrae_T10", "vertebrae_T9",
    "vertebrae_T8", "vertebrae_T7", "vertebrae_T6", "vertebrae_T5", "vertebrae_T4", "vertebrae_T3",
    "vertebrae_T2", "vertebrae_T1", "vertebrae_C7", "vertebrae_C6", "vertebrae_C5", "vertebrae_C4",
    "vertebrae_C3", "vertebrae_C2", "vertebrae_C1", "heart", "aorta", "pulmonary_vein",
    "brachiocephalic_trunk", "subclavian_artery_right", "subclavian_artery_left",
    "common_carotid_artery_right", "common_carotid_artery_left", "brachiocephalic_vein_left",
    "brachiocephalic_vein_right", "atrial_appendage_left", "superior_vena_cava", "inferior_vena_cava",
    "portal_vein_and_splenic_vein", "iliac_artery_left", "iliac_artery_right", "iliac_vena_left",
    "iliac_vena_right", "humerus_left", "humerus_right", "scapula_left", "scapula_right", "clavicula_left",
    "clavicula_right", "femur_left", "femur_right", "hip_left", "hip_right", "spinal_cord",
    "gluteus_maximus_left", "gluteus_maximus_right", "gluteus_medius_left", "gluteus_medius_right",
    "gluteus_minimus_left", "gluteus_minimus_right", "autochthon_left", "autochthon_right", "iliopsoas_left",
    "iliopsoas_right", "brain", "skull", "rib_left_1", "rib_left_2", "rib_left_3", "rib_left_4", "rib_left_5",
    "rib_left_6", "rib_left_7", "rib_left_8", "rib_left_9", "rib_left_10", "rib_left_11", "rib_left_12",
    "rib_right_1", "rib_right_2", "rib_right_3", "rib_right_4", "rib_right_5", "rib_right_6", "rib_right_7",
    "rib_right_8", "rib_right_9", "rib_right_10", "rib_right_11", "rib_right_12", "sternum",
    "costal_cartilages",
)


def total_labels() -> dict[int, str]:
    """Value -> name of the 117 structures (background excluded)."""
    return {index + 1: name for index, name in enumerate(TOTAL_CLASSES)}


@dataclass(frozen=True)
class Dataset:
    """One of TotalSegmentator's nnU-Net datasets (a released weights folder)."""

    dataset_id: int
    folder: str  # DatasetNNN_..., the release zip's name and the folder inside the weights directory
    trainer: str
    spacing_mm: float  # TotalSegmentator resamples to this before the network
    first_label: int  # the part's local label 1 is this global value (1 for the full 117-class models)
    label_count: int


_PART_TRAINER = "nnUNetTrainerNoMirroring"
_FULL_TRAINER = "nnUNetTrainer_4000epochs_NoMirroring"

DATASETS: dict[int, Dataset] = {
    291: Dataset(291, "Dataset291_TotalSegmentator_part1_organs_1559subj", _PART_TRAINER, 1.5, 1, 24),
    292: Dataset(292, "Dataset292_TotalSegmentator_part2_vertebrae_1532subj", _PART_TRAINER, 1.5, 25, 26),
    293: Dataset(293, "Dataset293_TotalSegmentator_part3_cardiac_1559subj", _PART_TRAINER, 1.5, 51, 18),
    294: Dataset(294, "Dataset294_TotalSegmentator_part4_muscles_1559subj", _PART_TRAINER, 1.5, 69, 23),
    295: Dataset(295, "Dataset295_TotalSegmentator_part5_ribs_1559subj", _PART_TRAINER, 1.5, 92, 26),
    297: Dataset(297, "Dataset297_TotalSegmentator_total_3mm_1559subj", _FULL_TRAINER, 3.0, 1, 117),
    298: Dataset(298, "Dataset298_TotalSegmentator_total_6mm_1559subj", _FULL_TRAINER, 6.0, 1, 117),
}

# medseg's configurations of the one catalogue model, finest first; each runs its datasets in this
# order over one resampled image, a later part overwriting an earlier one where it predicts foreground.
CONFIGURATIONS: dict[str, tuple[int, ...]] = {"1.5mm": (291, 292, 293, 294, 295), "3mm": (297,), "6mm": (298,)}
CONFIGURATION_FLAGS = {"1.5mm": None, "3mm": "--fast", "6mm": "--fastest"}
CROP_DATASET = 298  # roi_subset's crop model (TotalSegmentator's default; 297 only with --robust_crop)
CROP_ADDON_MM = 20.0  # the margin TotalSegmentator forces around a roi_subset crop
STEP_SIZE = 0.8  # TotalSegmentator's tile step for the total task (all its models, the crop model too)
# The 1.5 mm parts split a resampled image with more voxels than this and over 200 slices into thirds.
SPLIT_VOXELS = 512 * 512 * 900
SPLIT_MIN_SLICES = 200
SPLIT_MARGIN = 20


def part_labels(dataset: Dataset) -> dict[int, str]:
    """Local value -> name of what a dataset predicts."""
    return {local: TOTAL_CLASSES[dataset.first_label + local - 2] for local in range(1, dataset.label_count + 1)}
