"""Inference on the CPU: nnU-Net v2 vs MONAI vs medseg (PyTorch) vs medseg (ONNX Runtime).

One real CT (shared/data pyradiomics_lung1: 512 x 512 x 48, 0.57 x 0.57 x 5 mm) and
nnU-Net v2 result folders made with nnunetv2's own code (tests/model/nnunet_fixture.py):
nnU-Net's real-size 3d_fullres network (6 stages, 32 -> 320, 128^3) at 1.5 mm ("fullres")
and at 3 mm ("fast", as TotalSegmentator's fast models), 14 labels, random weights, one
file that every peer loads. Each peer runs in its own process, from reading the CT file
to writing the label map:

* nnU-Net v2: nnUNetPredictor.predict_from_files_sequential (TTA off, fold 0, CPU; the
  in-process path, i.e. without its worker processes, which only add memory);
* MONAI: the same network and preprocessing, monai.inferers.sliding_window_inference
  (overlap 0.5, Gaussian), logits resized back with torch, argmax;
* medseg: ``medseg.io.load`` -> ``medseg.model.infer.segment`` -> ``write_image`` with
  device "cpu" (PyTorch, what "auto" picks without a GPU) and "onnx-cpu" (ONNX Runtime;
  ONNX export included in the time).

Printed per peer: wall time of the job (model loading to file written; interpreter start
and imports excluded), peak RSS of its process (ru_maxrss, imports included), and the
voxel agreement of its labels with nnU-Net's and MONAI's. Then the ratios against nnU-Net.
On a 2-core CPU one 128^3 tile of this network takes about a minute: "fast" is one tile
per peer (minutes in all), "fullres" on this CT is 18 tiles per peer (most of an hour).

Run: .venv/bin/python benchmarks/bench_infer.py [--network fast fullres] [--threads 2]
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
CT = SHARED / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd"
# The networks, all built by nnunetv2's own planner helpers and predictor from a plans.json
# (tests/model/nnunet_fixture.py), random weights saved once per run: every peer loads the same file.
NETWORKS = {
    # nnU-Net's default 3d_fullres as TotalSegmentator's 1.5 mm model: 6 stages, 32 -> 320 features, 128^3.
    "fullres": {"spacing_zyx": (1.5, 1.5, 1.5), "patch_size": (128, 128, 128), "n_stages": 6, "base_features": 32,
                "seed": 3},
    # the same network at 3 mm, as TotalSegmentator's "fast" models.
    "fast": {"spacing_zyx": (3.0, 3.0, 3.0), "patch_size": (128, 128, 128), "n_stages": 6, "base_features": 32,
             "seed": 3},
    # the small network this benchmark used before (fixed overheads dominate; kept for comparison).
    "tiny": {"spacing_zyx": (5.0, 3.0, 3.0), "patch_size": (32, 64, 64), "n_stages": 4, "base_features": 16, "seed": 3},
}
MODEL = NETWORKS["tiny"]
PEERS = ("nnunet", "monai", "medseg-torch", "medseg-onnx")


# --- the peers (each runs in a child process) ------------------------------------------------------


def run_nnunet(model: Path, image: Path, out: Path) -> None:
    import torch
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)
    predictor.initialize_from_trained_model_folder(str(model), use_folds=(0,))
    out.mkdir(parents=True, exist_ok=True)
    predictor.predict_from_files_sequential([[str(image)]], [str(out / "case")], save_probabilities=False,
                                            overwrite=True, folder_with_segs_from_prev_stage=None)


def run_monai(model: Path, image: Path, out: Path) -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from monai.inferers import sliding_window_inference

    from medseg.io import load, write_image
    from medseg.model.nnunet_import import import_nnunet
    from medseg.model.package import build_networks
    from medseg.model.preprocess import preprocess

    package = import_nnunet(model)
    plan = package.configurations["3d_fullres"]
    network = build_networks(package, "3d_fullres", "cpu")[0]
    volume = load(image)
    data = torch.from_numpy(preprocess(volume, plan).data)[None]  # same preprocessing as nnU-Net
    with torch.inference_mode():
        logits = sliding_window_inference(data, plan.patch_size, 1, network, overlap=0.5, mode="gaussian",
                                          sigma_scale=0.125, padding_mode="constant", cval=0.0)
        logits = F.interpolate(logits, size=volume.shape_zyx, mode="trilinear", align_corners=False)
        labels = logits[0].argmax(0).to(torch.uint8).numpy()
    out.mkdir(parents=True, exist_ok=True)
    write_image(volume.with_array(np.ascontiguousarray(labels)), out / "case.nii.gz")


def run_medseg(model: Path, image: Path, out: Path, device: str) -> None:
    from medseg.io import load, write_image
    from medseg.model.infer import segment
    from medseg.model.nnunet_import import import_nnunet

    package = import_nnunet(model)
    result = segment(load(image), package, device=device)
    out.mkdir(parents=True, exist_ok=True)
    write_image(result.label_map, out / "case.nii.gz")
    if result.fallbacks:
        print("fallbacks:", result.fallbacks, file=sys.stderr)


def child(peer: str, model: Path, image: Path, out: Path, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    started = time.perf_counter()
    if peer == "nnunet":
        run_nnunet(model, image, out)
    elif peer == "monai":
        run_monai(model, image, out)
    else:
        run_medseg(model, image, out, "cpu" if peer == "medseg-torch" else "onnx-cpu")
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"peer": peer, "seconds": seconds, "peak_rss_mb": peak_mb}))


# --- the parent: build the model, run the peers, compare -----------------------------------------------


def build_model(root: Path, labels: int, network: str = "tiny") -> Path:
    sys.path.insert(0, str(REPO / "tests" / "model"))
    from nnunet_fixture import make_nnunet_result_folder

    names = ["background"] + [f"organ_{i}" for i in range(1, labels)]
    return make_nnunet_result_folder(root, labels=names, **NETWORKS[network])


def cropped_ct(work: Path, slices: int | None) -> Path:
    """The CT, or its middle ``slices`` slices (for profiling: same in-plane size, less z)."""
    if not slices:
        return CT
    import SimpleITK as sitk

    image = sitk.ReadImage(str(CT))
    start = max(0, image.GetSize()[2] // 2 - slices // 2)
    path = work / f"ct_{slices}_slices.nrrd"
    sitk.WriteImage(image[:, :, start:start + slices], str(path))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--labels", type=int, default=14)
    parser.add_argument("--network", nargs="+", choices=tuple(NETWORKS), default=["fast", "fullres"],
                        help="networks to run (default: fast fullres; fullres takes many minutes per peer on 2 cores)")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--crop-slices", type=int, help="use only the middle N slices of the CT (profiling)")
    parser.add_argument("--child", nargs=4, metavar=("PEER", "MODEL", "IMAGE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        peer, model, image, out = args.child
        child(peer, Path(model), Path(image), Path(out), args.threads)
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench_infer_"))
    ct = cropped_ct(work, args.crop_slices)
    for network in args.network:
        code = bench_network(work / network, network, ct, args)
        if code:
            return code
    return 0


def bench_network(work: Path, network: str, ct: Path, args: argparse.Namespace) -> int:
    import SimpleITK as sitk

    model = build_model(work / "results", args.labels, network)
    size = sitk.ReadImage(str(ct)).GetSize()
    spec = NETWORKS[network]
    print(f"\n== network {network!r}: {spec['n_stages']} stages, {spec['base_features']} -> "
          f"{min(spec['base_features'] * 2 ** (spec['n_stages'] - 1), 320)} features, patch {spec['patch_size']} at "
          f"{spec['spacing_zyx']} mm, {args.labels} labels, random weights (seed {spec['seed']}); CT "
          f"{ct.name}: {size[0]}x{size[1]}x{size[2]} voxels; {args.threads} threads; CPU only", flush=True)
    results = {}
    for peer in args.peers:
        out = work / peer
        started = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--child", peer,
                               str(model), str(ct), str(out)], capture_output=True, text=True, cwd=REPO)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            print(f"{peer} failed:\n{done.stderr[-3000:]}")
            return 1
        record = json.loads(done.stdout.strip().splitlines()[-1])
        record["process_seconds"] = wall
        print(f"  {peer}: job {record['seconds']:.1f} s, process {wall:.1f} s, peak RSS {record['peak_rss_mb']:.0f} MB",
              flush=True)
        record["labels"] = sitk.GetArrayFromImage(sitk.ReadImage(str(next(out.glob("case.nii.gz")))))
        results[peer] = record
    reference = results.get("nnunet") or next(iter(results.values()))
    print(f"{'peer':<14}{'job s':>9}{'process s':>11}{'peak RSS MB':>13}{'agree w/ nnU-Net':>18}"
          f"{'agree w/ MONAI':>16}{'time ratio':>12}{'RSS ratio':>11}")
    for peer, record in results.items():
        agreement = float((record["labels"] == reference["labels"]).mean())
        monai = float((record["labels"] == results["monai"]["labels"]).mean()) if "monai" in results else float("nan")
        print(f"{peer:<14}{record['seconds']:9.1f}{record['process_seconds']:11.1f}{record['peak_rss_mb']:13.0f}"
              f"{agreement:17.4%}{monai:16.4%}{record['seconds'] / reference['seconds']:12.2f}"
              f"{record['peak_rss_mb'] / reference['peak_rss_mb']:11.2f}")
    print("ratios are peer / nnU-Net (job time, peak RSS); goals for medseg: time <= 0.60, RSS <= 0.50, "
          ">= 99.99 % equal labels on the engine `auto` picks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
