"""Smoke test of the BUILT Linux installers (``make installer-test``): the bundle, then the .deb
installed into a bare Debian root.

The bundle runs with an empty environment (no .venv on PATH, no PYTHONPATH, offscreen Qt):
it must print its version, run every CLI command's --help (command discovery in the frozen
app), print ``medseg devices``, open the demo study (``medseg demo --screenshot``), and do a
clinician's work on a real 20-slice JPEG 2000 series from ../shared/data: open it, segment it
with the starter model, write a DICOM SEG, read the SEG back as a NIfTI label map
(``medseg edit --labels seg.dcm``), and that label map must equal the source tree's
segmentation (written straight to NIfTI) voxel for voxel. A real CT slice is also segmented
with PyTorch and with ONNX Runtime, equal to the source tree's. No telemetry or usage
database may appear: the fresh HOME may hold only medseg's own files afterwards, and the
bundle folder must be unchanged.

The build's size and the bundle's cold start (first window, the app's files evicted from the
page cache) are printed against the previous build's (build/installer/previous-*.json, or
the committed figures in installers/linux/reference-build.json when there is none); a
regression of more than 10 % in either fails.

Then a bare bookworm (``debootstrap --variant=minbase``, cached in build/) gets the .deb with
``apt-get install ./medseg.deb`` (only the package's Depends; no recommends), and the same
checks run there through /usr/bin/medseg. The host's Python (this script) only compares
files afterwards; nothing of it is visible inside the root. Last, in a REAL X window there
(Xvfb on the host, its socket bound into the root, Qt's xcb platform): the installed app
segments the series and shows it with ``medseg gui --labels``; the 3D view must draw the
surfaces with the OpenGL the Depends brought (Mesa's software renderer).

    .venv/bin/python installers/linux/smoke_test.py [--bundle dist/medseg] [--deb dist/medseg_*.deb] [--no-chroot]

The chroot part needs root (mounts /proc and /dev in the root) and a Debian mirror.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import SimpleITK as sitk

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
# A real chest CT slice (JPEG 2000 lossless, so the bundled decoder plugins must work) to segment,
# and a 20-slice JPEG 2000 abdomen series to convert: decoding checked on a whole series, while
# segmenting stays fast on a busy 2-core machine (the 20 slices take 1-5 minutes there).
CT = DATA / "ct" / "cornerstone_testimages" / "CT1_J2KR"
SERIES = DATA / "ct" / "totalsegmentator" / "example_ct_dicom"
# One CT slice in the encodings each bundled decoder reads (cornerstone_testimages): GDCM (JPEG
# Lossless, 12-bit Extended), Pillow (Baseline), CharLS (JPEG-LS), OpenJPEG (JPEG 2000), RLE.
# The bundle must decode them to what pydicom or GDCM decode (tests/io/test_decoded_pixels.py's oracle).
VARIANTS = DATA / "ct" / "cornerstone_testimages"
VARIANT_NAMES = [f"CTImage.dcm_{name}.dcm" for name in (
    "JPEGProcess14SV1TransferSyntax_1.2.840.10008.1.2.4.70", "JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51",
    "JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50", "JPEGLSLosslessTransferSyntax_1.2.840.10008.1.2.4.80",
    "JPEG2000TransferSyntax_1.2.840.10008.1.2.4.91", "RLELosslessTransferSyntax_1.2.840.10008.1.2.5")]
WORK = ROOT / "build" / "installer-test"
BASE_ROOT_TAR = ROOT / "build" / "debroot" / "bookworm-minbase.tar"
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEVICES = ("cpu", "onnx-cpu")
SOURCE_PY = ROOT / ".venv" / "bin" / "python"
REFERENCE = Path(__file__).with_name("reference-build.json")
REGRESSION = 0.10  # size or cold start more than 10 % above the previous build's fails
# Files a run may leave in its fresh HOME: medseg's settings, log and caches, nothing else.
OWN_FILES = ("medseg",)
# Caches of system libraries, not of the app (fontconfig rebuilds a stale font cache per user).
SYSTEM_CACHES = (".cache/fontconfig/",)
TELEMETRY = ("telemetry", "usage", "analytics", "onnxruntime", ".db", ".sqlite")


class SmokeFailure(Exception):
    pass


def log(message: str) -> None:
    print(f"[smoke {time.strftime('%H:%M:%S')}] {message}", flush=True)


def clean_env(home: Path) -> dict[str, str]:
    """What a user's shell would give the app: no venv, no PYTHONPATH, offscreen Qt."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
            "QT_QPA_PLATFORM": "offscreen", "TMPDIR": "/tmp"}


def run(command: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SmokeFailure(f"{' '.join(command)} exited {done.returncode} after {seconds:.1f} s\n"
                           f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}")
    done.seconds = seconds  # type: ignore[attr-defined]
    return done


def done_event(stdout: str) -> dict:
    """The result of a ``--json`` command: the last line of its event stream (``done``)."""
    event = json.loads(stdout.strip().splitlines()[-1])
    if event.get("event") != "done":
        raise SmokeFailure(f"the command's event stream did not end in 'done': {event}")
    return event


def command_names() -> list[str]:
    """The commands as typed (``import-model``), from the source tree's parser."""
    sys.path.insert(0, str(ROOT))
    from medseg.cli import build_parser

    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(subparsers.choices)


def source_labels(workdir: Path) -> dict[str, Path]:
    """The source tree's label maps (python -m medseg from the checkout's .venv)."""
    out = {}
    for device in DEVICES:
        path = workdir / f"source-{device}.nii.gz"
        done = run([str(SOURCE_PY), "-m", "medseg", "segment", str(CT), "-o", str(path), "--device", device,
                    "--threads", "2", "--json"])
        log(f"source tree: segment on {device}: {done.seconds:.1f} s")
        out[device] = path
    path = workdir / "source-series.nii.gz"
    done = run([str(SOURCE_PY), "-m", "medseg", "convert", str(SERIES), str(path), "--quiet"])
    log(f"source tree: convert the 20-slice JPEG 2000 series: {done.seconds:.1f} s")
    out["series"] = path
    path = workdir / "source-series-labels.nii.gz"
    done = run([str(SOURCE_PY), "-m", "medseg", "segment", str(SERIES), "-o", str(path), "--device", "cpu",
                "--threads", "2", "--json"], timeout=1200)
    log(f"source tree: segment the series to NIfTI: {done.seconds:.1f} s")
    out["series_labels"] = path
    return out


def same_image(expected: Path, actual: Path) -> np.ndarray:
    a, b = sitk.ReadImage(str(expected)), sitk.ReadImage(str(actual))
    for what in ("GetSize", "GetSpacing", "GetOrigin", "GetDirection"):
        if not np.allclose(getattr(a, what)(), getattr(b, what)(), atol=1e-5):
            raise SmokeFailure(f"{actual}: {what} {getattr(b, what)()} differs from the source run's {getattr(a, what)()}")
    left, right = sitk.GetArrayFromImage(a), sitk.GetArrayFromImage(b)  # copies: views die with the images
    differ = int(np.count_nonzero(left != right))
    if differ:
        raise SmokeFailure(f"{actual}: {differ} voxels differ from the source tree's ({expected})")
    return left


def same_labels(expected: Path, actual: Path) -> int:
    left = same_image(expected, actual)
    labels = sorted(int(v) for v in np.unique(left))
    if labels == [0]:
        raise SmokeFailure(f"{actual}: the segmentation is empty")
    return int(left.size)


def check_screenshot(path: Path) -> str:
    if not path.is_file():
        raise SmokeFailure(f"no screenshot at {path}")
    image = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))
    height, width = image.shape[:2]
    colours = len(np.unique(image.reshape(-1, image.shape[-1]) if image.ndim == 3 else image.reshape(-1, 1), axis=0))
    if width < 600 or height < 400 or colours < 50:
        raise SmokeFailure(f"{path}: {width}x{height} with {colours} colours does not look like the app with a study")
    return f"{width}x{height}, {colours} colours"


def check_3d_view(stdout: str, env: dict[str, str] | None) -> str:
    """The 3D view's line of ``medseg demo --screenshot``: with an X display (DISPLAY set, xcb) OpenGL
    must work (PyOpenGL bundled, Mesa from the .deb's Depends); offscreen without one the pane must
    say why, and nothing may crash (issue #28)."""
    lines = [line for line in stdout.splitlines() if line.startswith("3D view:")]
    if not lines:
        raise SmokeFailure(f"no '3D view:' line from the demo run:\n{stdout[-2000:]}")
    line = lines[-1]
    if env is not None and env.get("DISPLAY") and env.get("QT_QPA_PLATFORM") == "xcb" and "unavailable" in line:
        raise SmokeFailure(f"an X display was there but the 3D view had no OpenGL: {line}")
    if "unavailable" in line and "PyOpenGL" in line:
        raise SmokeFailure(f"the bundle's PyOpenGL does not work: {line}")
    return line


def smoke(medseg: list[str], env: dict[str, str] | None, host_out: Path, inside_out: Path, ct: Path, series: Path,
          expected: dict[str, Path], where: str) -> dict[str, float]:
    """Run the checks through ``medseg`` (a command prefix). Files are written to ``inside_out``
    as the app sees it and read back from ``host_out`` (different in the chroot)."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    version = run([*medseg, "--version"], env).stdout.strip()
    times["version_s"] = time.perf_counter() - start
    log(f"{where}: {version} ({times['version_s']:.1f} s to print the version)")
    for name in command_names():
        help_text = run([*medseg, name, "--help"], env).stdout
        if f"medseg {name}" not in help_text:
            raise SmokeFailure(f"{where}: `medseg {name} --help` printed no usage for {name}")
    log(f"{where}: every command's --help works ({', '.join(command_names())})")
    report = json.loads(run([*medseg, "devices", "--json"], env).stdout)
    if not report["frozen"] or report["variant"] != "cpu" or "cpu" not in report["available"]:
        raise SmokeFailure(f"{where}: unexpected device report {report}")
    log(f"{where}: devices: auto -> {report['recommended']}, available {report['available']}, frozen build")
    printed = run([*medseg, "devices"], env).stdout.strip()
    if "Device used by 'auto'" not in printed:
        raise SmokeFailure(f"{where}: `medseg devices` printed no device report:\n{printed}")
    log(f"{where}: medseg devices:\n    " + "\n    ".join(printed.splitlines()))
    start = time.perf_counter()
    shot = run([*medseg, "demo", "--screenshot", str(inside_out / "demo.png")], env)
    times["demo_s"] = time.perf_counter() - start
    log(f"{where}: demo study opened and captured in {times['demo_s']:.1f} s "
        f"({check_screenshot(host_out / 'demo.png')}); {shot.stdout.strip().splitlines()[-1]}")
    log(f"{where}: {check_3d_view(shot.stdout, env)}")
    run([*medseg, "info", str(series), "--json"], env)
    start = time.perf_counter()
    run([*medseg, "convert", str(series), str(inside_out / "series.nii.gz"), "--quiet"], env)
    times["convert_series_s"] = time.perf_counter() - start
    hu = same_image(expected["series"], host_out / "series.nii.gz")
    log(f"{where}: the 20-slice JPEG 2000 series decodes to the source tree's {hu.size} voxels exactly "
        f"(HU {int(hu.min())}..{int(hu.max())}, {times['convert_series_s']:.1f} s)")
    decoders(medseg, env, host_out, inside_out, series.parent / "variants" if where != "bundle" else VARIANTS, where)
    times.update(clinician(medseg, env, host_out, inside_out, series, expected, where))
    for device in DEVICES:
        name = f"{device}.nii.gz"
        start = time.perf_counter()
        done = run([*medseg, "segment", str(ct), "-o", str(inside_out / name), "--device", device,
                    "--threads", "2", "--json"], env)
        times[f"segment_{device}_s"] = time.perf_counter() - start
        result = done_event(done.stdout)
        voxels = same_labels(expected[device], host_out / name)
        log(f"{where}: segment on {result['device']} in {times[f'segment_{device}_s']:.1f} s "
            f"(inference {result['seconds']} s): {voxels} voxels equal the source tree's; volumes {result['volumes_ml']}")
    return times


def decoders(medseg: list[str], env: dict[str, str] | None, host_out: Path, inside_out: Path, variants: Path,
             where: str) -> None:
    """Each bundled decoder reads its encoding to what pydicom or GDCM (the source tree's) decode."""
    sys.path.insert(0, str(ROOT / "tests" / "io"))
    from test_decoded_pixels import oracle_hu

    for name in VARIANT_NAMES:
        out = f"{name}.nii.gz"
        run([*medseg, "convert", str(variants / name), str(inside_out / out), "--quiet"], env)
        expected, decoder = oracle_hu(variants / name)
        got = sitk.GetArrayFromImage(sitk.ReadImage(str(host_out / out)))
        if got.shape != expected.shape or not np.allclose(got, expected, rtol=0, atol=1e-3):
            raise SmokeFailure(f"{where}: {name} does not decode to what {decoder} decodes")
    log(f"{where}: GDCM, Pillow, CharLS, OpenJPEG and RLE decode {len(VARIANT_NAMES)} encodings as pydicom/GDCM do")


def clinician(medseg: list[str], env: dict[str, str] | None, host_out: Path, inside_out: Path, series: Path,
              expected: dict[str, Path], where: str) -> dict[str, float]:
    """Open the real series, segment it into a DICOM SEG, read the SEG back. The app reads it
    (``medseg stats``) to the same per-label voxels, HU and bounding boxes as the source tree's
    segmentation written straight to NIfTI; and this script reads the SEG onto the series
    voxel for voxel (medseg's reader, from the checkout), equal to that NIfTI."""
    times = {}
    start = time.perf_counter()
    done = run([*medseg, "segment", str(series), "-o", str(inside_out / "series-seg.dcm"), "--device", "cpu",
                "--threads", "2", "--json"], env, timeout=1200)
    times["segment_series_seg_s"] = time.perf_counter() - start
    result = done_event(done.stdout)
    seg = host_out / "series-seg.dcm"
    import pydicom

    dataset = pydicom.dcmread(seg)
    if dataset.Modality != "SEG" or dataset.SOPClassUID != "1.2.840.10008.5.1.4.1.1.66.4":
        raise SmokeFailure(f"{where}: {seg} is not a DICOM Segmentation ({dataset.Modality}, {dataset.SOPClassUID})")
    segments = [item.SegmentLabel for item in dataset.SegmentSequence]
    # The source tree's NIfTI (and its label-name sidecar) beside the SEG, where the app can read it.
    for suffix in (".nii.gz", ".labels.json"):
        source = expected["series_labels"].with_name(expected["series_labels"].name.replace(".nii.gz", suffix))
        if source.is_file():
            shutil.copy(source, host_out / f"source-labels{suffix}")

    def stats(path: Path) -> dict[str, dict]:
        """Per label NAME: a SEG numbers its segments 1, 2, ... (an empty label leaves no gap), so
        the values may differ from the label map's while the names and voxels may not."""
        rows = json.loads(run([*medseg, "stats", str(path), "--image", str(series), "--json"], env).stdout)["labels"]
        return {row["name"]: {k: v for k, v in row.items() if k not in ("name", "value")} for row in rows}

    start = time.perf_counter()
    from_seg, from_nifti = stats(inside_out / "series-seg.dcm"), stats(inside_out / "source-labels.nii.gz")
    times["read_seg_back_s"] = time.perf_counter() - start
    if from_seg != from_nifti or not from_seg:
        raise SmokeFailure(f"{where}: the SEG read back differs from the source tree's NIfTI:\n{from_seg}\n{from_nifti}")
    voxels = seg_equals_labels(seg, expected["series_labels"], host_out / "series-seg-read-back.nii.gz")
    counts = ", ".join(f"{name} {row['voxels']} voxels" for name, row in from_seg.items())
    log(f"{where}: segmented the 20-slice series into a DICOM SEG ({len(segments)} segments: {', '.join(segments)}; "
        f"{times['segment_series_seg_s']:.1f} s, volumes {result['volumes_ml']}); the app reads it back to the "
        f"source tree's per-label voxels, HU and boxes ({counts}), "
        f"and its {voxels} voxels equal the source tree's NIfTI exactly")
    return times


def seg_equals_labels(seg: Path, labels: Path, read_back: Path) -> int:
    """The SEG and the source tree's label map placed on the series by medseg's reader (the
    checkout's), segments matched by name: equal voxel for voxel."""
    sys.path.insert(0, str(ROOT))
    from medseg.io import load
    from medseg.io.label_files import open_segmentation

    image = load(SERIES)
    from_seg, from_map = open_segmentation(seg, image), open_segmentation(labels, image)
    by_name = {s.name: s.value for s in from_map.segments}
    seg_array = from_seg.label_map.array
    remapped = np.zeros_like(from_map.label_map.array)
    for segment in from_seg.segments:
        if segment.name not in by_name:
            raise SmokeFailure(f"{seg}: segment {segment.name!r} is not a label of {labels}")
        remapped[seg_array == segment.value] = by_name[segment.name]
    differ = int(np.count_nonzero(remapped != from_map.label_map.array))
    if differ:
        raise SmokeFailure(f"{seg}: {differ} voxels differ from {labels} (segments matched by name)")
    return int(remapped.size)


def no_telemetry(home: Path, bundle_listing: dict[str, int], bundle: Path, where: str) -> None:
    """Nothing but medseg's own files in the fresh HOME, and the bundle folder as installed."""
    stray = []
    for path in sorted(home.rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(home)
        own = any(part.lower() == name or part.lower().startswith(name + ".") for part in relative.parts for name in OWN_FILES)
        system_cache = str(relative).startswith(SYSTEM_CACHES)
        if not (own or system_cache) or any(word in str(relative).lower() for word in TELEMETRY):
            stray.append(str(relative))
    if stray:
        raise SmokeFailure(f"{where}: files other than medseg's own appeared in the fresh HOME: {stray}")
    changed = listing(bundle)
    if changed != bundle_listing:
        added = sorted(set(changed) - set(bundle_listing))
        altered = sorted(k for k in set(changed) & set(bundle_listing) if changed[k] != bundle_listing[k])
        raise SmokeFailure(f"{where}: the run wrote into the installed bundle: added {added[:20]}, changed {altered[:20]}")
    log(f"{where}: no telemetry or usage file: HOME holds only medseg's own files "
        f"({sum(1 for p in home.rglob('*') if p.is_file())}), the bundle folder is unchanged")


def listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


# --- size and start-up against the previous build --------------------------------------------
def cold_start(executable: Path, home: Path, runs: int = 3) -> float:
    """Median seconds to the first window and back (``gui --quit-after 0``), the bundle's files
    evicted from the page cache before each run (benchmarks/bench_bundle.py's method)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_bundle import evict

    seconds = []
    for _ in range(runs):
        evict([executable.parent])
        start = time.perf_counter()
        run([str(executable), "gui", "--quit-after", "0"], clean_env(home))
        seconds.append(time.perf_counter() - start)
    return sorted(seconds)[len(seconds) // 2]


def against_previous(figures: dict[str, float]) -> None:
    """Print size and cold start against the previous build's; more than 10 % worse fails."""
    previous_file = WORK / "previous-smoke-figures.json"
    current_file = WORK / "smoke-figures.json"
    if current_file.is_file():
        previous, source = json.loads(current_file.read_text()), "the previous build (build/installer-test)"
        previous_file.write_text(current_file.read_text())
    else:
        previous, source = json.loads(REFERENCE.read_text()), f"the committed reference ({REFERENCE.name})"
    current_file.write_text(json.dumps(figures, indent=1))
    worse = []
    for key, value in figures.items():
        before = previous.get(key)
        if not before:
            log(f"  {key}: {value:,.2f} (no previous figure)")
            continue
        change = value / before - 1
        log(f"  {key}: {value:,.2f} vs {before:,.2f} in {source}: {change:+.1%}")
        if change > REGRESSION:
            worse.append(f"{key} {change:+.1%}")
    load = os.getloadavg()
    log(f"  (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores while measuring)")
    if worse:
        raise SmokeFailure(f"more than {REGRESSION:.0%} worse than {source}: {', '.join(worse)}")


def build_figures(bundle: Path, executable: Path, home: Path) -> dict[str, float]:
    report = json.loads((ROOT / "build" / "installer" / "build-report.json").read_text())
    figures = {"deb_bytes": float(report["deb_bytes"]), "tar_gz_bytes": float(report["tar_gz_bytes"]),
               "folder_bytes": float(report["folder_bytes"])}
    home.mkdir(parents=True, exist_ok=True)
    figures["cold_start_s"] = cold_start(executable, home)
    return figures


# --- the bare Debian root ------------------------------------------------------------------
def base_root_tar() -> Path:
    if BASE_ROOT_TAR.is_file():
        return BASE_ROOT_TAR
    BASE_ROOT_TAR.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=BASE_ROOT_TAR.parent))
    try:
        start = time.perf_counter()
        run(["debootstrap", "--variant=minbase", "bookworm", str(staging), MIRROR], timeout=1200)
        log(f"debootstrap --variant=minbase bookworm: {time.perf_counter() - start:.0f} s")
        run(["tar", "-C", str(staging), "-cf", str(BASE_ROOT_TAR) + ".part", "."])
        os.replace(str(BASE_ROOT_TAR) + ".part", BASE_ROOT_TAR)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return BASE_ROOT_TAR


def remove_root(path: Path) -> None:
    """Delete a Debian root safely: unmount whatever an interrupted run left mounted in it
    first (a bind-mounted /dev must never be deleted through), then stay on its file system."""
    prefix = str(path.resolve()) + "/"
    mounted = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
               if line.split()[1].startswith(prefix)]
    for mountpoint in sorted(mounted, key=len, reverse=True):
        subprocess.run(["umount", "-l", mountpoint], check=False)
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


class Chroot:
    def __init__(self, path: Path):
        self.path = path
        self.mounts: list[Path] = []

    def __enter__(self) -> "Chroot":
        remove_root(self.path)
        self.path.mkdir(parents=True)
        run(["tar", "-C", str(self.path), "-xf", str(base_root_tar())])
        shutil.copy("/etc/resolv.conf", self.path / "etc" / "resolv.conf")
        for source, target, kind in (("proc", "proc", "proc"), ("/dev", "dev", "bind")):
            mountpoint = self.path / target
            run(["mount", "--bind", source, str(mountpoint)] if kind == "bind" else ["mount", "-t", "proc", "proc", str(mountpoint)])
            self.mounts.append(mountpoint)
        return self

    def __exit__(self, *exc) -> None:
        for mountpoint in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(mountpoint)], check=False)
        self.mounts.clear()
        if not exc[0]:  # a failed root stays for a look (unmounted); the next run removes it
            remove_root(self.path)

    def command(self, *args: str) -> list[str]:
        return ["chroot", str(self.path), *args]


def start_xvfb() -> tuple[subprocess.Popen, str]:
    """A private Xvfb on the host and its display name (":N", a number it picked itself)."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        raise SmokeFailure("Xvfb is missing on this machine (apt-get install xvfb): the real-window check needs it")
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen([xvfb, "-displayfd", str(write_fd), "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
                              pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(write_fd)
    written = b""
    deadline = time.monotonic() + 30
    while not written.endswith(b"\n") and time.monotonic() < deadline:
        chunk = os.read(read_fd, 16)
        if not chunk:
            break
        written += chunk
    os.close(read_fd)
    if not written.strip().isdigit():
        server.kill()
        raise SmokeFailure(f"Xvfb did not start: {server.stderr.read().decode(errors='replace')[-500:]}")
    return server, f":{written.decode().strip()}"


def real_window_3d(root: "Chroot", tmp: Path, env: dict[str, str]) -> dict[str, float]:
    """The 3D view drawn in a real X window inside the bare Debian root (issue #28): Xvfb runs on the
    host and its socket folder is bound into the root; the installed app segments the JPEG 2000
    series, opens it with the result (``medseg gui --labels``) and draws the surfaces with the
    OpenGL that the .deb's Depends brought (Mesa's llvmpipe, no GPU)."""
    times: dict[str, float] = {}
    server, display = start_xvfb()
    sockets = root.path / "tmp" / ".X11-unix"
    sockets.mkdir(exist_ok=True)
    run(["mount", "--bind", "/tmp/.X11-unix", str(sockets)])
    try:
        x_env = {**env, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
        medseg = root.command("env", "-i", *(f"{k}={v}" for k, v in x_env.items()), "/usr/bin/medseg")
        run([*medseg, "segment", "/tmp/smoke/series", "-o", "/tmp/smoke/series_seg.nii.gz", "--device", "cpu",
             "--threads", "2", "--json"])
        start = time.perf_counter()
        shot = run([*medseg, "gui", "/tmp/smoke/series", "--labels", "/tmp/smoke/series_seg.nii.gz",
                    "--screenshot", "/tmp/smoke/window-3d.png"])
        times["x_window_3d_s"] = time.perf_counter() - start
        line = check_3d_view(shot.stdout, x_env)
        surfaces = re.search(r"; (\d+) surfaces?", line)
        if not line.startswith("3D view: OpenGL") or surfaces is None or int(surfaces.group(1)) == 0:
            raise SmokeFailure(f"bare Debian, real X window: the 3D view drew no surfaces: {line}")
        described = check_screenshot(tmp / "window-3d.png")
        shutil.copy(tmp / "window-3d.png", WORK / "debian-window-3d.png")  # the root is removed; keep what it showed
        log(f"bare Debian, real X window (Xvfb {display}, xcb): the segmented series in 2x2 with the 3D view "
            f"in {times['x_window_3d_s']:.1f} s ({described}); {line}; screenshot {WORK / 'debian-window-3d.png'}")
    finally:
        subprocess.run(["umount", "-l", str(sockets)], check=False)
        server.terminate()
        server.wait(timeout=30)
    return times


def chroot_smoke(deb: Path, expected: dict[str, Path]) -> dict[str, float]:
    if os.geteuid() != 0:
        raise SmokeFailure("the bare-Debian part needs root (debootstrap, chroot, mount); run it as root "
                           "or pass --no-chroot")
    times: dict[str, float] = {}
    with Chroot(WORK / "debian-root") as root:
        tmp = root.path / "tmp" / "smoke"
        tmp.mkdir(parents=True)
        shutil.copy(deb, tmp / "medseg.deb")
        os.chmod(tmp / "medseg.deb", 0o644)
        shutil.copy(CT, tmp / "ct.dcm")
        shutil.copytree(SERIES, tmp / "series")
        (tmp / "variants").mkdir()
        for name in VARIANT_NAMES:
            shutil.copy(VARIANTS / name, tmp / "variants" / name)
        apt_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
        start = time.perf_counter()
        run(root.command("apt-get", "update", "-qq"), apt_env)
        done = run(root.command("apt-get", "install", "-y", "-qq", "--no-install-recommends", "/tmp/smoke/medseg.deb"),
                   apt_env, timeout=1200)
        times["apt_install_s"] = time.perf_counter() - start
        log(f"bare Debian: apt-get install ./medseg.deb (Depends only) took {times['apt_install_s']:.0f} s")
        for forbidden in ("python3", "python3-venv"):
            probe = subprocess.run(root.command("dpkg", "-s", forbidden), capture_output=True, text=True)
            if probe.returncode == 0:
                raise SmokeFailure(f"bare Debian: {forbidden} is installed in the root; the test would not prove the bundle is self-contained")
        missing = run(root.command("sh", "-c", "for f in $(find /opt/medseg/_internal/PySide6 -name '*.so*'); do "
                                   "ldd $f | grep 'not found' | sed \"s|^|$f: |\"; done"), apt_env).stdout.strip()
        if missing:
            raise SmokeFailure(f"bare Debian: bundled Qt libraries miss system libraries:\n{missing}")
        log("bare Debian: every bundled Qt library and plugin (xcb and wayland too) finds its system libraries")
        env = clean_env(Path("/tmp/smoke/home"))
        (tmp / "home").mkdir()
        installed = listing(root.path / "opt" / "medseg")
        times.update(smoke(root.command("env", "-i", *(f"{k}={v}" for k, v in env.items()), "/usr/bin/medseg"),
                           None, tmp, Path("/tmp/smoke"), Path("/tmp/smoke/ct.dcm"), Path("/tmp/smoke/series"),
                           expected, "bare Debian"))
        no_telemetry(tmp / "home", installed, root.path / "opt" / "medseg", "bare Debian")
        times.update(real_window_3d(root, tmp, env))
        del done
        shutil.copy(tmp / "demo.png", WORK / "debian-demo.png")  # the root is removed; keep what it showed
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "dist" / "medseg")
    parser.add_argument("--deb", type=Path, help="default: the newest dist/medseg_*.deb")
    parser.add_argument("--no-chroot", action="store_true", help="test only the bundle (no root needed)")
    args = parser.parse_args()
    executable = args.bundle / "medseg"
    if not executable.is_file():
        print(f"smoke_test: no bundle at {args.bundle}; run `make installer` first", file=sys.stderr)
        return 1
    if not CT.is_file() or not SERIES.is_dir():
        print(f"smoke_test: the test CT is missing: {CT} / {SERIES}", file=sys.stderr)
        return 1
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        source_dir = WORK / "source"
        source_dir.mkdir(exist_ok=True)
        expected = source_labels(source_dir)
        bundle_dir = WORK / "bundle"
        shutil.rmtree(bundle_dir, ignore_errors=True)
        (bundle_dir / "home").mkdir(parents=True)
        env = clean_env(bundle_dir / "home")
        bundle_start = time.perf_counter()
        installed = listing(args.bundle)
        times = smoke([str(executable.resolve())], env, bundle_dir, bundle_dir, CT, SERIES, expected, "bundle")
        no_telemetry(bundle_dir / "home", installed, args.bundle, "bundle")
        times["bundle_total_s"] = time.perf_counter() - bundle_start
        figures = build_figures(args.bundle, executable, bundle_dir / "home-start")
        if not args.no_chroot:
            deb = args.deb or max((ROOT / "dist").glob("medseg_*.deb"), key=lambda p: p.stat().st_mtime, default=None)
            if deb is None:
                raise SmokeFailure("no dist/medseg_*.deb; run `make installer` first")
            chroot_start = time.perf_counter()
            times.update({f"debian_{k}": v for k, v in chroot_smoke(deb, expected).items()})
            times["debian_total_s"] = time.perf_counter() - chroot_start
        # Last, so that a slower start on a busy machine does not hide the other checks' results.
        log("size and cold start (first window) against the previous build:")
        against_previous(figures)
    except SmokeFailure as failure:
        print(f"smoke_test: FAILED: {failure}", file=sys.stderr)
        return 1
    times["total_s"] = time.perf_counter() - started
    (WORK / "smoke-report.json").write_text(json.dumps({k: round(v, 1) for k, v in times.items()}, indent=1))
    log("PASSED: " + ", ".join(f"{k} {v:.1f}" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
