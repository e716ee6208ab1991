"""The installed app: bundle size, cold start to the first window, and segmenting the demo
study, bundled (PyInstaller, dist/medseg from `make installer`) vs the source tree, in one run.

  * size: the bundle folder (bytes, files), its .tar.gz and .deb from dist/ (built by
    installers/linux/build.sh; compressed here with gzip -6 if no tarball is there);
  * first window: ``medseg gui --quit-after 0`` offscreen, process start to exit (the window is
    shown, the event loop starts, it closes); "cold" drops the app's files (bundle folder, or
    the venv's site-packages and the checkout) from the page cache first with
    posix_fadvise(DONTNEED), only those files, so other programs' caches are untouched;
    "warm" is the median of the following runs;
  * demo study: ``medseg demo --screenshot`` (start to the study shown and captured), and
    ``medseg segment <demo study> --device auto`` with the starter model (process wall time and
    the inference time it reports).

Targets (issue 14): first window <= 3 s cold, folder <= 1.5 GB, compressed <= 500 MB.
Run: .venv/bin/python benchmarks/bench_bundle.py [--bundle dist/medseg] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def folder_size(folder: Path) -> tuple[int, int]:
    total = files = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
            files += 1
    return total, files


def evict(folders: list[Path]) -> int:
    """Drop these folders' files from the page cache (the next start reads them from disk)."""
    evicted = 0
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    evicted += 1
                finally:
                    os.close(fd)
    return evicted


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench_bundle: {' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=REPO / "dist" / "medseg")
    parser.add_argument("--repeats", type=int, default=3, help="warm starts to take the median of (default 3)")
    args = parser.parse_args()
    executable = args.bundle / "medseg"
    if not executable.is_file():
        # `make bench` runs every benchmark: without a bundle there is nothing to measure.
        print(f"bench_bundle: no bundle at {args.bundle}; run `make installer` first (nothing measured)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-bundle-"))
    home = work / "home"
    home.mkdir()
    base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
                "QT_QPA_PLATFORM": "offscreen", "MEDSEG_CACHE_DIR": str(work / "cache")}
    venv_python = REPO / ".venv" / "bin" / "python"
    runs = {
        "bundled": ([str(executable)], [args.bundle]),
        "source": ([str(venv_python), "-m", "medseg"],
                   [REPO / ".venv" / "lib", REPO / "medseg", REPO / "resources"]),
    }
    results: dict[str, dict[str, float]] = {name: {} for name in runs}

    # --- size ----------------------------------------------------------------------------------
    folder_bytes, files = folder_size(args.bundle)
    tarballs = sorted((REPO / "dist").glob("medseg-*-linux-*.tar.gz"), key=lambda p: p.stat().st_mtime)
    if tarballs:
        tar_bytes, tar_name = tarballs[-1].stat().st_size, tarballs[-1].name
    else:
        tar_path = work / "medseg.tar.gz"
        with tarfile.open(tar_path, "w:gz", compresslevel=6) as tar:
            tar.add(args.bundle, arcname="medseg")
        tar_bytes, tar_name = tar_path.stat().st_size, "(compressed here)"
    debs = sorted((REPO / "dist").glob("medseg_*.deb"), key=lambda p: p.stat().st_mtime)
    venv_bytes, _ = folder_size(REPO / ".venv" / "lib")

    # --- the demo study (generated once by the source tree, then segmented by both) ----------
    from medseg.io.phantom import demo_study_path

    os.environ["MEDSEG_CACHE_DIR"] = base_env["MEDSEG_CACHE_DIR"]
    demo = demo_study_path()

    for name, (medseg, folders) in runs.items():
        env = dict(base_env)
        evicted = evict(folders)
        cold, _ = timed([*medseg, "gui", "--quit-after", "0"], env)
        warm = [timed([*medseg, "gui", "--quit-after", "0"], env)[0] for _ in range(args.repeats)]
        results[name]["first_window_cold_s"] = cold
        results[name]["first_window_warm_s"] = statistics.median(warm)
        results[name]["files_evicted"] = evicted
        demo_s, _ = timed([*medseg, "demo", "--screenshot", str(work / f"{name}-demo.png")], env)
        results[name]["demo_shown_s"] = demo_s
        seg_s, out = timed([*medseg, "segment", str(demo), "-o", str(work / f"{name}-demo.nii.gz"), "--json"], env)
        report = json.loads(out)
        results[name]["segment_demo_s"] = seg_s
        results[name]["segment_inference_s"] = float(report["seconds"])
        results[name]["device"] = report["device"]

    mb = 1e6
    print(f"bundle {args.bundle}: {folder_bytes / mb:.0f} MB in {files} files; "
          f"tar.gz {tar_bytes / mb:.0f} MB {tar_name}"
          + (f"; .deb {debs[-1].stat().st_size / mb:.0f} MB" if debs else "")
          + f"  (the source tree's .venv/lib, dev tools included: {venv_bytes / mb:.0f} MB)")
    print(f"targets: folder <= 1500 MB {'met' if folder_bytes <= 1.5e9 else 'MISSED'}, "
          f"compressed <= 500 MB {'met' if tar_bytes <= 5e8 else 'MISSED'}")
    print(f"{'':34}{'bundled':>12}{'source':>12}")
    rows = [("first window, cold (s)", "first_window_cold_s"), (f"first window, warm median of {args.repeats} (s)", "first_window_warm_s"),
            ("demo study shown + captured (s)", "demo_shown_s"), ("segment demo study, process (s)", "segment_demo_s"),
            ("  of which inference (s)", "segment_inference_s")]
    for label, key in rows:
        print(f"{label:34}{results['bundled'][key]:>12.2f}{results['source'][key]:>12.2f}")
    print(f"{'device used':34}{results['bundled']['device']:>12}{results['source']['device']:>12}")
    print(f"target: first window <= 3 s cold: {'met' if results['bundled']['first_window_cold_s'] <= 3 else 'MISSED'} (bundled)")
    out = REPO / "build" / "bench_bundle.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"folder_bytes": folder_bytes, "files": files, "tar_gz_bytes": tar_bytes,
                               "deb_bytes": debs[-1].stat().st_size if debs else None, **results}, indent=1))
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
