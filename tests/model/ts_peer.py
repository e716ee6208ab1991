"""Run TotalSegmentator 2.18.0 itself (the test peer) on a NIfTI, in a process of its own.

``run_totalsegmentator(...)`` starts ``python ts_peer.py ARGS.json``. A process of its own because
nnU-Net reads ``nnUNet_results`` once, when it is first imported, and TotalSegmentator points it at
its weights folder; and because that is how a user runs it (the benchmark measures this process).

The torchvision workaround (.ci/totalsegmentator-peer.txt): before TotalSegmentator runs, the two
trainer classes of the 'total' task are put in TotalSegmentator's own table of known trainers
(``totalsegmentator.nnunet.custom_trainers``), so nnU-Net's trainer lookup, which imports every
trainer module and through Primus reaches timm and torchvision, is never needed. The classes are
nnU-Net's own; nothing else changes.

Telemetry: the peer's home folder gets a config.json with ``send_usage_stats: false``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np


def peer_environment(weights_root: Path, home: Path, threads: int | None = None) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(json.dumps({"totalseg_id": "totalseg_medsegts", "send_usage_stats": False,
                                                  "prediction_counter": 0, "statistics_disclaimer_shown": True}))
    env = dict(os.environ, TOTALSEG_HOME_DIR=str(home), TOTALSEG_WEIGHTS_PATH=str(weights_root),
               nnUNet_raw=str(weights_root), nnUNet_preprocessed=str(weights_root), nnUNet_results=str(weights_root))
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), MEDSEG_PEER_THREADS=str(threads))
    return env


def run_totalsegmentator(image: Path, output: Path, weights_root: Path, home: Path, *, fast: bool = False,
                         fastest: bool = False, roi_subset: Sequence[str] | None = None, crop_mask: Path | None = None,
                         force_split: bool = False, threads: int | None = None, timeout: float = 1800,
                         task: str = "total") -> Path:
    """TotalSegmentator's multi-label output (its --ml) for ``image``, written to ``output``.

    ``crop_mask`` (a NIfTI on the image's grid) replaces the crop model's rough segmentation: the
    run is TotalSegmentator's nnUNet_predict_image with that crop and its 20 mm addon, as its
    totalsegmentator() calls it after the crop model.
    """
    arguments = {"image": str(image), "output": str(output), "fast": fast, "fastest": fastest,
                 "roi_subset": list(roi_subset) if roi_subset else None,
                 "crop_mask": str(crop_mask) if crop_mask else None, "force_split": force_split, "task": task}
    request = output.with_suffix(".request.json")
    request.write_text(json.dumps(arguments))
    completed = subprocess.run([sys.executable, __file__, str(request)], env=peer_environment(weights_root, home, threads),
                               capture_output=True, text=True, timeout=timeout)
    if completed.returncode != 0 or not output.is_file():
        raise RuntimeError(f"TotalSegmentator failed ({completed.returncode}):\n{completed.stdout[-3000:]}\n"
                           f"{completed.stderr[-3000:]}")
    return output


def read_multilabel(path: Path) -> tuple[np.ndarray, dict[int, str]]:
    """TotalSegmentator's --ml output as medseg's (z, y, x) array, and its value -> name table (its header)."""
    from totalsegmentator.nifti_ext_header import load_multilabel_nifti

    loaded, names = load_multilabel_nifti(path)
    return np.asarray(loaded.dataobj).T, {int(k): v for k, v in names.items()}


def assert_agrees(ours: np.ndarray, theirs: np.ndarray, min_classes: int) -> None:
    """Issue 37's acceptance: labels equal on >= 99.9 % of voxels, Dice >= 0.99 for every structure with
    >= 1000 voxels in either output, and enough structures present that agreeing means something."""
    assert ours.shape == theirs.shape
    present = np.unique(theirs)
    # random weights must still give many structures, or agreement would mean little
    assert len(present) >= min_classes, f"only {len(present)} labels in TotalSegmentator's output"
    agreement = float((ours == theirs).mean())
    assert agreement >= 0.999, f"voxel agreement {agreement:.5f}"
    for value in np.union1d(present, np.unique(ours)):
        if value == 0:
            continue
        a, b = ours == value, theirs == value
        if max(a.sum(), b.sum()) >= 1000:
            dice = 2 * np.logical_and(a, b).sum() / (a.sum() + b.sum())
            assert dice >= 0.99, f"label {value}: Dice {dice:.4f}"


def register_total_trainers() -> None:
    import totalsegmentator.nnunet as ts_nnunet
    from nnunetv2.training.nnUNetTrainer.variants.data_augmentation.nnUNetTrainerNoMirroring import (
        nnUNetTrainerNoMirroring,
    )
    from nnunetv2.training.nnUNetTrainer.variants.training_length.nnUNetTrainer_Xepochs_NoMirroring import (
        nnUNetTrainer_4000epochs_NoMirroring,
    )

    ts_nnunet.custom_trainers.setdefault("nnUNetTrainerNoMirroring", nnUNetTrainerNoMirroring)
    ts_nnunet.custom_trainers.setdefault("nnUNetTrainer_4000epochs_NoMirroring", nnUNetTrainer_4000epochs_NoMirroring)
    # other tasks' trainers (the same workaround: nnU-Net's own classes, no lookup)
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer
    from nnunetv2.training.nnUNetTrainer.variants.data_augmentation.nnUNetTrainerDAOrd0 import (
        nnUNetTrainer_DASegOrd0, nnUNetTrainer_DASegOrd0_NoMirroring,
    )

    for trainer in (nnUNetTrainer, nnUNetTrainer_DASegOrd0, nnUNetTrainer_DASegOrd0_NoMirroring):
        ts_nnunet.custom_trainers.setdefault(trainer.__name__, trainer)


def _main(request_file: str) -> None:
    arguments = json.loads(Path(request_file).read_text())
    register_total_trainers()
    import nibabel as nib

    if arguments["crop_mask"] is None:
        from totalsegmentator.python_api import totalsegmentator

        # the tests save with one process; the benchmark runs TotalSegmentator's defaults (as its CLI does)
        saving = {} if arguments.get("defaults") else {"nr_thr_saving": 1}
        totalsegmentator(arguments["image"], arguments["output"], ml=True, fast=arguments["fast"],
                         fastest=arguments["fastest"], roi_subset=arguments["roi_subset"], device="cpu",
                         quiet=True, force_split=arguments["force_split"], **saving)
        return
    from totalsegmentator.nnunet import nnUNet_predict_image
    from totalsegmentator.python_api import get_task_config

    task = arguments.get("task", "total")
    config = get_task_config(task, fast=arguments["fast"], fastest=arguments["fastest"], quiet=True,
                             plans="nnUNetPlans", robust_crop=False)
    # what totalsegmentator() passes after its crop run: the crop_addon it forces without a crop_model
    addon = [20, 20, 20] if config.get("crop_model") is None else config["crop_addon"]
    nnUNet_predict_image(arguments["image"], arguments["output"], config["task_id"], model=config["model"],
                         folds=config["folds"], trainer=config["trainer"], tta=False, multilabel_image=True,
                         resample=config["resample"], crop=nib.load(arguments["crop_mask"]), crop_path=None,
                         task_name=task, nora_tag="None", preview=False, nr_threads_resampling=1,
                         nr_threads_saving=1, crop_addon=addon, roi_subset=arguments["roi_subset"],
                         output_type="nifti", quiet=True, verbose=False, device="cpu",
                         force_split=arguments["force_split"], plans=config["plans"])


if __name__ == "__main__":
    if os.environ.get("MEDSEG_PEER_THREADS"):
        import torch

        torch.set_num_threads(int(os.environ["MEDSEG_PEER_THREADS"]))
    _main(sys.argv[1])
