"""The prepared GPU check (issue #16): run once on a machine with an NVIDIA GPU (H200 class).

    .venv/bin/python benchmarks/gpu_check.py [--slices 300] [--skip-train]

Not run by CI and never run here (no GPU): it exits 2 with a message when CUDA is absent.
In one run, each peer in its own process, on the same GPU:
  * a 512x512xN CT (real pixels: shared/data pyradiomics_lung1 tiled along z, given a
    0.78 x 0.78 x 1.5 mm grid, written as NIfTI once);
  * nnU-Net's default 3d_fullres-like network (6 stages, 32 -> 320, patch 128^3 at 1.5 mm,
    14 labels, random weights from nnunetv2's own code: benchmarks/bench_infer.py NETWORKS);
  * nnU-Net v2's predictor (everything on the device, TTA off) against medseg's ``segment``
    on "cuda" (fp16 autocast as nnU-Net), then medseg again with the CUDA caching warm
    (second run in the same process: what a user's second series costs);
  * time, peak GPU memory (torch.cuda.max_memory_allocated) and peak RSS, voxel agreement;
  * then benchmarks/bench_train.py, which adds CUDA fp32 vs AMP training throughput.
Goal (issue #16): <= 10 s for the 512x512x300 CT at 1.5 mm on one H200.
Budget: about 3-6 minutes on an H200 (cuDNN autotuning and nnU-Net's start-up included).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def make_ct(path: Path, slices: int) -> Path:
    import numpy as np

    from bench_infer import CT
    from medseg.io import read_image, write_image
    from medseg.core.volume import Volume

    lung = read_image(CT)
    reps = -(-slices // lung.array.shape[0])
    array = np.ascontiguousarray(np.tile(lung.array, (reps, 1, 1))[:slices])
    write_image(Volume(array, (0.78, 0.78, 1.5), lung.origin_mm, lung.direction), path)
    return path


def child(peer: str, model: Path, image: Path, out: Path) -> None:
    import torch

    torch.backends.cudnn.benchmark = True
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for attempt in range(2 if peer == "medseg" else 1):
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        started = time.perf_counter()
        if peer == "nnunet":
            from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

            predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                        perform_everything_on_device=True, device=torch.device("cuda"),
                                        allow_tqdm=False)
            predictor.initialize_from_trained_model_folder(str(model), use_folds=(0,))
            predictor.predict_from_files_sequential([[str(image)]], [str(out / "case")], save_probabilities=False,
                                                    overwrite=True, folder_with_segs_from_prev_stage=None)
        else:
            from medseg.io import load, write_image
            from medseg.model.infer import segment
            from medseg.model.nnunet_import import import_nnunet

            result = segment(load(image), import_nnunet(model), device="cuda")
            write_image(result.label_map, out / "case.nii.gz")
            if result.fallbacks:
                print("fallbacks:", result.fallbacks, file=sys.stderr)
        torch.cuda.synchronize()
        runs.append({"seconds": time.perf_counter() - started,
                     "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20})
    print(json.dumps({"peer": peer, "runs": runs, "gpu": torch.cuda.get_device_name(0),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        peer, model, image, out = args.child
        child(peer, Path(model), Path(image), Path(out))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here; run this on a machine with one (see the docstring)")
        return 2
    import SimpleITK as sitk

    from bench_infer import build_model

    work = Path(tempfile.mkdtemp(prefix="medseg-gpu-check-"))
    ct = make_ct(work / "ct.nii.gz", args.slices)
    model = build_model(work / "results", 14, "fullres")
    print(f"GPU {torch.cuda.get_device_name(0)}; CT 512x512x{args.slices} at 0.78x0.78x1.5 mm; network fullres "
          "(6 stages, 32->320, 128^3 at 1.5 mm, 14 labels)", flush=True)
    labels = {}
    for peer in ("nnunet", "medseg"):
        out = work / peer
        done = subprocess.run([sys.executable, __file__, "--child", peer, str(model), str(ct), str(out)],
                              capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0:
            print(f"{peer} failed:\n{done.stderr[-3000:]}")
            return 1
        record = json.loads(done.stdout.strip().splitlines()[-1])
        for number, run in enumerate(record["runs"], 1):
            print(f"  {peer} run {number}: {run['seconds']:.2f} s, peak GPU memory {run['peak_gpu_mb']:.0f} MB")
        print(f"  {peer}: peak RSS {record['peak_rss_mb']:.0f} MB", flush=True)
        labels[peer] = sitk.GetArrayFromImage(sitk.ReadImage(str(next(out.glob("case.nii.gz")))))
    print(f"  voxel agreement medseg vs nnU-Net: {float((labels['medseg'] == labels['nnunet']).mean()):.5%} "
          "(goal >= 99.99 %); time goal <= 10 s")
    if not args.skip_train:
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_train.py")], cwd=REPO, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
