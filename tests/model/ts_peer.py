"""Run TotalSegmentator 2.18.0 itself (the test peer) on a NIfTI, in a process of its own.

``run_totalsegmentator(...)`` starts ``python ts_peer.py ARGS.json``. A process of its own because
nnU-Net reads ``nnUNet_results`` once, when it is first imported, and TotalSegmentator points it at
its weights folder; and because that is how a user runs it (the benchmark measures this process).

The torchvision workaround (.ci/totalsegmentator-peer.txt): before TotalSegmentator runs, every
trainer class its tasks name is put in TotalSegmentator's own table of known trainers
(``totalsegmentator.nnunet.custom_trainers``), so nnU-Net's trainer lookup, which imports every
trainer module and through Primus reaches timm and torchvision, is never needed. The classes are
nnU-Net's own (TotalSegmentator's custom ones are already in that table); nothing else changes.

``run_totalsegmentator_tasks`` runs several tasks (each on its own image) in one process: the tests
of every task would otherwise spend most of their time starting Python, torch and nnU-Net.

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
    # licence_number: TotalSegmentator's offline check of a licensed task (heartchambers_highres, ...) tests only
    # its length; the weights are the tests' own, and with send_usage_stats off it never leaves the machine
    (home / "config.json").write_text(json.dumps({"totalseg_id": "totalseg_medsegts", "send_usage_stats": False,
                                                  "prediction_counter": 0, "statistics_disclaimer_shown": True,
                                                  "license_number": "medseg_test_000000"}))
    env = dict(os.environ, TOTALSEG_HOME_DIR=str(home), TOTALSEG_WEIGHTS_PATH=str(weights_root),
               nnUNet_raw=str(weights_root), nnUNet_preprocessed=str(weights_root), nnUNet_results=str(weights_root))
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), MEDSEG_PEER_THREADS=str(threads))
    return env


def run_totalsegmentator_tasks(jobs: Sequence[tuple[Path, Path, str]], weights_root: Path, home: Path, *,
                               threads: int | None = None, timeout: float = 1800) -> dict[Path, str | None]:
    """TotalSegmentator's --ml output of each (image, output, task), as ``totalsegmentator(image, output, ml=True,
    task=task, device="cpu")`` writes it, all run in one process, one after the other: output -> None, or
    TotalSegmentator's error for that task (the others still run)."""
    request = Path(jobs[0][1]).with_suffix(".tasks.json")
    request.write_text(json.dumps({"tasks": [{"image": str(i), "output": str(o), "task": t} for i, o, t in jobs]}))
    completed = subprocess.run([sys.executable, __file__, str(request)], env=peer_environment(weights_root, home, threads),
                               capture_output=True, text=True, timeout=timeout)
    if completed.returncode != 0:
        raise RuntimeError(f"TotalSegmentator's process failed ({completed.returncode}):\n"
                           f"{completed.stdout[-3000:]}\n{completed.stderr[-5000:]}")
    errors = json.loads(request.with_suffix(".errors.json").read_text())
    return {Path(o): errors.get(str(o)) or (None if Path(o).is_file() else "no output written") for _, o, _ in jobs}


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


# nnU-Net's modules of the trainers TotalSegmentator's tasks name (its own custom trainers are in its table)
_NNUNET_TRAINER_MODULES = {
    "nnUNetTrainer": "nnunetv2.training.nnUNetTrainer.nnUNetTrainer",
    "nnUNetTrainerNoMirroring": "nnunetv2.training.nnUNetTrainer.variants.data_augmentation.nnUNetTrainerNoMirroring",
    "nnUNetTrainer_onlyMirror01": "nnunetv2.training.nnUNetTrainer.variants.data_augmentation.nnUNetTrainerNoMirroring",
    "nnUNetTrainer_DASegOrd0": "nnunetv2.training.nnUNetTrainer.variants.data_augmentation.nnUNetTrainerDAOrd0",
    "nnUNetTrainer_DASegOrd0_NoMirroring":
        "nnunetv2.training.nnUNetTrainer.variants.data_augmentation.nnUNetTrainerDAOrd0",
    "nnUNetTrainer_2000epochs_NoMirroring":
        "nnunetv2.training.nnUNetTrainer.variants.training_length.nnUNetTrainer_Xepochs_NoMirroring",
    "nnUNetTrainer_4000epochs_NoMirroring":
        "nnunetv2.training.nnUNetTrainer.variants.training_length.nnUNetTrainer_Xepochs_NoMirroring",
}


def task_trainers() -> set[str]:
    """Every trainer TotalSegmentator's task table names (all tasks, all sub-modes)."""
    from totalsegmentator.map_tasks_config import TASK_CONFIGS

    names = set()
    for config in TASK_CONFIGS.values():
        for entry in config.get("sub_modes", {"": config}).values():
            names.add(entry["trainer"])
    return names


def register_trainers() -> None:
    import importlib

    import totalsegmentator.nnunet as ts_nnunet

    for name in sorted(task_trainers() - set(ts_nnunet.custom_trainers)):
        if name in _NNUNET_TRAINER_MODULES:  # nnUNetTrainerV2 (task 'test') is nnU-Net v1's and exists nowhere
            module = importlib.import_module(_NNUNET_TRAINER_MODULES[name])
            ts_nnunet.custom_trainers[name] = getattr(module, name)




# nnU-Net's modules that its prediction's worker processes import (its preprocessing and export workers)
_WORKER_MODULES = ["nnunetv2.inference.data_iterators", "nnunetv2.inference.export_prediction",
                   "nnunetv2.inference.predict_from_raw_data", "totalsegmentator.nnunet_runtime_patches"]


def start_workers_from_a_forkserver() -> None:
    """nnU-Net starts two 'spawn' processes for every network it runs (a preprocessing worker and an export
    pool), and each spawned process imports torch and nnU-Net again: ~5 s of CPU each, most of an oracle
    run on the tests' small images. Here its 'spawn' context is a 'forkserver' one whose server imported
    nnU-Net once: the same worker functions run in fresh processes (no parent state, as with spawn, the
    same environment and thread counts) on the same inputs, so TotalSegmentator's outputs do not change;
    only the process start does. The tests' task runs only (the benchmark runs TotalSegmentator as is)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload(_WORKER_MODULES)
    get_context = multiprocessing.get_context

    def context(method=None):
        return forkserver if method == "spawn" else get_context(method)

    multiprocessing.get_context = context


def stop_the_forkserver() -> None:
    """Ends the forkserver and waits for it, so that its workers' CPU time counts in this process's (``time``)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        server._stop()


def _main(request_file: str) -> None:
    arguments = json.loads(Path(request_file).read_text())
    register_trainers()
    import nibabel as nib

    if "tasks" in arguments:
        start_workers_from_a_forkserver()
        import time

        from totalsegmentator.python_api import totalsegmentator

        errors, seconds = {}, {}
        for job in arguments["tasks"]:
            started = time.perf_counter()
            try:
                totalsegmentator(job["image"], job["output"], ml=True, task=job["task"], device="cpu", quiet=True,
                                 nr_thr_saving=1)
            except BaseException as error:  # noqa: BLE001 - its licence check ends with sys.exit; report, go on
                import traceback

                errors[job["output"]] = "".join(traceback.format_exception(error))[-3000:]
            seconds[job["task"]] = round(time.perf_counter() - started, 1)
        stop_the_forkserver()
        Path(request_file).with_suffix(".errors.json").write_text(json.dumps(errors))
        # each task's time in TotalSegmentator (read by whoever sizes the tests; nothing asserts it)
        Path(request_file).with_suffix(".seconds.json").write_text(json.dumps(seconds))
        return

    if arguments["crop_mask"] is None:
        from totalsegmentator.python_api import totalsegmentator

        # the tests save with one process; the benchmark runs TotalSegmentator's defaults (as its CLI does)
        saving = {} if arguments.get("defaults") else {"nr_thr_saving": 1}
        totalsegmentator(arguments["image"], arguments["output"], ml=True, fast=arguments["fast"],
                         fastest=arguments["fastest"], roi_subset=arguments["roi_subset"], device="cpu",
                         quiet=True, force_split=arguments["force_split"], task=arguments.get("task", "total"),
                         **saving)
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
