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
  device "cpu" (PyTorch), "onnx-cpu" (ONNX Runtime) and "openvino-cpu" (OpenVINO, the optional
  extra): the engines "auto" measures per model on a CPU (medseg.model.cpu_runtime). The ONNX
  engines run the exact-norm export kept in the cache folder; it is made before the timed runs
  (once per model, as a user's first run makes it) and its cost is printed.

Printed per peer: wall time of the job (model loading to file written; interpreter start
and imports excluded), peak RSS of its process (imports included), and the
voxel agreement of its labels with nnU-Net's and MONAI's. Then the ratios against nnU-Net.
On a 2-core CPU one 128^3 tile of this network takes about a minute: "fast" is one tile
per peer (minutes in all), "fullres" on this CT is 18 tiles per peer (most of an hour).

Peak RSS is also printed per phase (read, preprocess, network, stitching, resampling back,
write), each phase's own peak (benchmarks/rss_phases.py), and --repeats N runs every peer
N times, interleaved, and prints the median and spread.

The starter model's 3D configurations (``--network starter-thin starter-thick``) run on the kind of
series each is chosen for: lung1 interpolated to 0.8 mm slices (512 x 512 x 300) and lung1 itself
(5 mm); the goal is a 512 x 512 x 300 series in <= 60 s on the 2-core CPU.

Run: .venv/bin/python benchmarks/bench_infer.py [--network fast fullres starter-thin starter-thick]
     [--threads 2] [--repeats 3]
"""

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rss_phases import PhasePeaks

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
    # the shipped starter model's 3D configurations, each on the kind of series it is chosen for:
    # medseg runs the starter package as a user does (the spacing chooses), nnU-Net and MONAI the
    # same network and weights written as an nnU-Net result folder (tests/model/nnunet_fixture.py).
    "starter-thin": {"starter": "3d_thin", "ct": "thin"},
    "starter-thick": {"starter": "3d_thick", "ct": "thick"},
}
THIN_SLICES = 300  # lung1 (5 mm) interpolated to 0.8 mm slices: a 512 x 512 x 300 thin-slice series
MODEL = NETWORKS["tiny"]
PEERS = ("nnunet", "monai", "medseg-torch", "medseg-onnx", "medseg-openvino")
MEDSEG_DEVICES = {"medseg-torch": "cpu", "medseg-onnx": "onnx-cpu", "medseg-openvino": "openvino-cpu"}


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
    from medseg.model.postprocess import apply_steps
    from medseg.workflows.models import open_model

    package = open_model(model).package  # an nnU-Net result folder (imported on the fly) or a medseg package
    # the network alone, as nnU-Net runs it; the package's own post-processing is timed on its own
    result = segment(load(image), package, device=device, postprocess=False)
    started = time.perf_counter()
    apply_steps(result.label_map.array.copy(), package.postprocess_steps(), result.label_map.voxel_volume_ml)
    print(json.dumps({"configuration": result.configuration, "postprocess_seconds": time.perf_counter() - started,
                      "postprocess_steps": len(package.postprocessing)}), file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    write_image(result.label_map, out / "case.nii.gz")
    if result.fallbacks:
        print("fallbacks:", result.fallbacks, file=sys.stderr)


def instrument_medseg(phases: PhasePeaks) -> None:
    import medseg.io
    import medseg.model.infer as infer
    import medseg.model.nnunet_import as nnunet_import
    import medseg.model.package
    import medseg.model.preprocess as preprocess
    from medseg.model import backends

    phases.wrap(medseg.io, "load", "read CT")
    phases.wrap(nnunet_import, "import_nnunet", "load model package")
    phases.wrap(medseg.model.package, "load_package", "load model package")
    phases.wrap(infer, "_preprocess_on", "preprocess (on the run's device)")
    phases.wrap(preprocess, "reoriented", "  orientation")
    phases.wrap(preprocess, "nonzero_bbox", "  crop bounding box")
    phases.wrap(preprocess, "spline_resample", "  normalise + resample to network spacing")
    phases.wrap(infer, "_make_runner", "build network")
    phases.wrap(infer, "sliding_window_logits", "sliding window (stitch fp16)")
    phases.wrap(backends.TorchRunner, "__call__", "  network forward")
    phases.wrap(backends.OnnxRunner, "__call__", "  network forward")
    phases.wrap(backends.OpenVinoRunner, "__call__", "  network forward")
    phases.wrap(infer, "logits_to_label_map", "logits back to grid + argmax")
    phases.wrap(medseg.io, "write_image", "write labels")


def instrument_nnunet(phases: PhasePeaks) -> None:
    import nnunetv2.inference.export_prediction as export
    import nnunetv2.inference.predict_from_raw_data as predict
    from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO
    from nnunetv2.preprocessing.preprocessors.default_preprocessor import DefaultPreprocessor

    phases.wrap(predict.nnUNetPredictor, "initialize_from_trained_model_folder", "load model package + network")
    phases.wrap(DefaultPreprocessor, "run_case", "preprocess (crop, resample)")
    phases.wrap(SimpleITKIO, "read_images", "  read CT")
    phases.wrap(DefaultPreprocessor, "_normalize", "  normalise")
    phases.wrap(predict.nnUNetPredictor, "predict_logits_from_preprocessed_data", "sliding window (stitch fp16)")
    phases.wrap(predict, "export_prediction_from_logits", "export")
    phases.wrap(export, "convert_predicted_logits_to_segmentation_with_correct_shape",
                "  logits back to grid + argmax")
    phases.wrap(SimpleITKIO, "write_seg", "  write labels")


def child(peer: str, model: Path, image: Path, out: Path, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    phases = PhasePeaks()
    if peer == "nnunet":
        instrument_nnunet(phases)
    elif peer.startswith("medseg"):
        instrument_medseg(phases)
    phases.push("job (not in a phase above)")
    started = time.perf_counter()
    if peer == "nnunet":
        run_nnunet(model, image, out)
    elif peer == "monai":
        run_monai(model, image, out)
    else:
        run_medseg(model, image, out, MEDSEG_DEVICES[peer])
    seconds = time.perf_counter() - started
    phases.pop()
    rows = phases.finish()
    # the largest phase peak is the process's peak (every moment is in a phase); ru_maxrss would
    # only say the same if clear_refs had not been reset (it reads the same counter)
    peak_mb = max(row["peak_mb"] for row in rows)
    if not phases.resettable:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"peer": peer, "seconds": seconds, "peak_rss_mb": peak_mb, "phases": rows}))


def export_child(model: Path) -> None:
    from medseg.model.cpu_runtime import exact_onnx
    from medseg.workflows.models import open_model

    package = open_model(model).package
    started = time.perf_counter()
    for configuration in package.configurations:
        exact_onnx(package, configuration)
    print(f"{time.perf_counter() - started:.1f} s (0 if it was cached)")


# --- the parent: build the model, run the peers, compare -----------------------------------------------


def build_model(root: Path, labels: int, network: str = "tiny", starter: str = "starter") -> Path:
    sys.path.insert(0, str(REPO / "tests" / "model"))
    from nnunet_fixture import make_nnunet_result_folder, nnunet_folder_from_package

    if "starter" in NETWORKS[network]:
        from medseg.workflows.models import open_model

        return nnunet_folder_from_package(open_model(starter).package, NETWORKS[network]["starter"], root)

    names = ["background"] + [f"organ_{i}" for i in range(1, labels)]
    return make_nnunet_result_folder(root, labels=names, **NETWORKS[network])


def thin_ct(work: Path) -> Path:
    """lung1 interpolated (linear) to 0.8 mm slices: 512 x 512 x 300, identity direction."""
    import SimpleITK as sitk

    path = work / f"lung1_{THIN_SLICES}_slices.nrrd"
    if not path.exists():
        image = sitk.ReadImage(str(CT))
        size = list(image.GetSize())
        spacing = list(image.GetSpacing())
        spacing[2] = spacing[2] * (size[2] - 1) / (THIN_SLICES - 1)
        size[2] = THIN_SLICES
        thin = sitk.Resample(image, size, sitk.Transform(), sitk.sitkLinear, image.GetOrigin(), spacing,
                             image.GetDirection(), -1024.0, image.GetPixelID())
        sitk.WriteImage(thin, str(path))
    return path


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
    parser.add_argument("--network", nargs="+", choices=tuple(NETWORKS),
                        default=["starter-thin", "starter-thick", "fast", "fullres"],
                        help="networks to run (default: starter-thin starter-thick fast fullres; fullres takes many "
                             "minutes per peer on 2 cores)")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--starter", default="starter",
                        help="model package for the starter-* networks (default: the built-in starter)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per peer (the table shows their spread)")
    parser.add_argument("--crop-slices", type=int, help="use only the middle N slices of the CT (profiling)")
    parser.add_argument("--child", nargs=4, metavar=("PEER", "MODEL", "IMAGE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--export-child", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export_child:
        export_child(Path(args.export_child))
        return 0
    if args.child:
        peer, model, image, out = args.child
        child(peer, Path(model), Path(image), Path(out), args.threads)
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench_infer_"))
    ct = cropped_ct(work, args.crop_slices)
    for network in args.network:
        if NETWORKS[network].get("ct") == "thin":
            code = bench_network(work / network, network, thin_ct(work), args)
        else:
            code = bench_network(work / network, network, ct, args)
        if code:
            return code
    return 0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _spread(values: list[float], digits: int = 0) -> str:
    """median [min-max] of several runs (just the value for one run)."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{_median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def phase_table(runs: list[dict]) -> str:
    """Per phase: peak RSS over the runs (median [min-max]), from the children's PhasePeaks rows."""
    names = [row["phase"] for row in runs[0]["phases"]]
    lines = [f"    {'phase':<42}{'RSS in MB':>10}  {'peak MB (median [min-max] of runs)':<36}"]
    for name in names:
        rows = [next(r for r in run["phases"] if r["phase"] == name) for run in runs
                if any(r["phase"] == name for r in run["phases"])]
        lines.append(f"    {name:<42}{_median([r['start_mb'] for r in rows]):10.0f}  "
                     f"{_spread([r['peak_mb'] for r in rows]):<36}")
    return "\n".join(lines)


def bench_network(work: Path, network: str, ct: Path, args: argparse.Namespace) -> int:
    import SimpleITK as sitk

    spec = NETWORKS[network]
    if "starter" in spec:
        from medseg.workflows.models import open_model

        starter = open_model(args.starter).package
        if spec["starter"] not in starter.configurations:
            print(f"\n== network {network!r}: the model {args.starter!r} has no {spec['starter']} configuration "
                  f"(it has {', '.join(starter.configurations)}): skipped", flush=True)
            return 0
    model = build_model(work / "results", args.labels, network, args.starter)
    size = sitk.ReadImage(str(ct)).GetSize()
    if "starter" in spec:
        plan = starter.configurations[spec["starter"]]
        what = (f"the starter model's {spec['starter']} configuration ({plan.num_stages} stages, features "
                f"{plan.features_per_stage}, patch {tuple(plan.patch_size)} at {tuple(plan.target_spacing_image_zyx)} mm, "
                f"trained weights; medseg runs the package, which chooses by spacing)")
        medseg_model = starter.source_path or args.starter
        models = {peer: (medseg_model if peer.startswith("medseg") else model) for peer in args.peers}
    else:
        what = (f"{spec['n_stages']} stages, {spec['base_features']} -> "
                f"{min(spec['base_features'] * 2 ** (spec['n_stages'] - 1), 320)} features, patch {spec['patch_size']} "
                f"at {spec['spacing_zyx']} mm, {args.labels} labels, random weights (seed {spec['seed']})")
        models = {peer: model for peer in args.peers}
    print(f"\n== network {network!r}: {what}; CT {ct.name}: {size[0]}x{size[1]}x{size[2]} voxels; "
          f"{args.threads} threads; CPU only; {args.repeats} run(s) per peer, interleaved", flush=True)
    exported = {models[peer] for peer in args.peers if peer in ("medseg-onnx", "medseg-openvino")}
    for model_path in exported:  # the exact-norm export the ONNX engines run: once per model, before the runs
        done = subprocess.run([sys.executable, __file__, "--export-child", str(model_path)], capture_output=True,
                              text=True, cwd=REPO)
        if done.returncode != 0:
            print(f"the exact-norm ONNX export failed:\n{done.stderr[-3000:]}")
            return 1
        print(f"  exact-norm ONNX export for the ONNX engines (once per model, cached): "
              f"{done.stdout.strip().splitlines()[-1]}", flush=True)
    results: dict[str, dict] = {peer: {"runs": []} for peer in args.peers}
    for repeat in range(args.repeats):
        for peer in args.peers:  # interleaved, so that a busy spell of the machine hits every peer alike
            out = work / f"{peer}_{repeat}"
            started = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--child", peer,
                                   str(models[peer]), str(ct), str(out)], capture_output=True, text=True, cwd=REPO)
            wall = time.perf_counter() - started
            if done.returncode != 0:
                print(f"{peer} failed:\n{done.stderr[-3000:]}")
                return 1
            record = json.loads(done.stdout.strip().splitlines()[-1])
            record["process_seconds"] = wall
            reports = [json.loads(line) for line in done.stderr.splitlines() if line.startswith('{"configuration"')]
            chosen = f" (configuration {reports[0]['configuration']})" if reports else ""
            if reports and reports[0]["postprocess_steps"]:
                chosen += (f"; then the package's {reports[0]['postprocess_steps']} post-processing steps, "
                           f"{reports[0]['postprocess_seconds']:.1f} s (included in its job time; nnU-Net runs "
                           f"none, and the labels compared are the network's)")
            print(f"  {peer} run {repeat + 1}: job {record['seconds']:.1f} s, process {wall:.1f} s, "
                  f"peak RSS {record['peak_rss_mb']:.0f} MB{chosen}", flush=True)
            labels = sitk.GetArrayFromImage(sitk.ReadImage(str(next(out.glob("case.nii.gz")))))
            if "labels" in results[peer] and not (labels == results[peer]["labels"]).all():
                print(f"  warning: {peer}'s labels differ between runs", flush=True)
            results[peer]["labels"] = labels
            results[peer]["runs"].append(record)
    for peer, result in results.items():
        print(f"  peak RSS by phase, {peer} (each phase's own peak: /proc/self/clear_refs reset at its start):")
        print(phase_table(result["runs"]))
    reference = results.get("nnunet") or next(iter(results.values()))
    ref_seconds = [run["seconds"] for run in reference["runs"]]
    ref_rss = [run["peak_rss_mb"] for run in reference["runs"]]
    print(f"{'peer':<14}{'job s':>20}{'peak RSS MB':>22}{'agree w/ nnU-Net':>18}{'agree w/ MONAI':>16}"
          f"{'time ratio':>22}{'RSS ratio':>22}")
    for peer, result in results.items():
        seconds = [run["seconds"] for run in result["runs"]]
        rss = [run["peak_rss_mb"] for run in result["runs"]]
        agreement = float((result["labels"] == reference["labels"]).mean())
        monai = float((result["labels"] == results["monai"]["labels"]).mean()) if "monai" in results else float("nan")
        # ratio of medians, and in brackets the widest it can be from any pair of runs
        time_ratio = (f"{_median(seconds) / _median(ref_seconds):.2f} "
                      f"[{min(seconds) / max(ref_seconds):.2f}-{max(seconds) / min(ref_seconds):.2f}]")
        rss_ratio = (f"{_median(rss) / _median(ref_rss):.2f} "
                     f"[{min(rss) / max(ref_rss):.2f}-{max(rss) / min(ref_rss):.2f}]")
        print(f"{peer:<14}{_spread(seconds, 1):>20}{_spread(rss):>22}{agreement:17.4%}{monai:16.4%}"
              f"{time_ratio:>22}{rss_ratio:>22}")
    print("ratios are peer / nnU-Net (job time, peak RSS): median of runs [worst-best pairing]; goals for medseg: "
          "time <= 0.60, RSS <= 0.50, >= 99.99 % equal labels on the engine `auto` picks (measured per model on a CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
