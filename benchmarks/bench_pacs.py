"""Retrieving a 300-slice CT series from a real Orthanc over loopback: medseg vs dcmtk.

The series is one real CT slice (shared/data Philips 1 mm head phantom, 512 x 512, Explicit
VR Little Endian, about 0.5 MB) written 300 times with its own UIDs and 1 mm steps in Image
Position (Patient), loaded into Debian's Orthanc (with the DICOMweb plugin). Each peer
retrieves the whole series into an empty folder, in the same run, several times in turn:

* medseg WADO-RS, C-GET and C-MOVE: ``medseg.io.pacs.retrieve_series`` (the path the GUI
  and ``medseg pacs get`` use: instance listing query, every file written with the atomic
  write, completion marker);
* dcmtk 3.6.7 ``getscu`` (C-GET) and ``movescu`` (C-MOVE to its own storage SCP), the
  classic command-line peers, writing plain files; once as installed and once with
  ``TCP_NODELAY=1`` in the environment (dcmtk's switch to turn off Nagle's algorithm; as
  installed it waited ~50 ms per instance here, a Nagle/delayed-ACK stall). The ratios are
  taken against the faster (TCP_NODELAY=1) run, dcmtk at its best.

Printed per peer: median / min / max seconds over the runs, instances/s and MB/s at the
median, and each medseg path's ratio to the dcmtk tool of the same kind (WADO-RS is
compared with getscu). Orthanc 1.10 cannot bind one address, so the benchmark re-runs
itself inside a private network namespace with only ``lo`` (needs root).

Run: .venv/bin/python benchmarks/bench_pacs.py [--runs 3] [--slices 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
SLICE = SHARED / "ct" / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series" / "S2020_I10"
sys.path.insert(0, str(REPO / "tests" / "pacs"))

HTTP_PORT, DICOM_PORT, MEDSEG_PORT, DCMTK_PORT = 8042, 4242, 11112, 11113
PEERS = ("medseg WADO-RS", "medseg C-GET", "medseg C-MOVE", "getscu", "movescu", "getscu NODELAY", "movescu NODELAY")
COMPARE = {"medseg WADO-RS": "getscu NODELAY", "medseg C-GET": "getscu NODELAY", "medseg C-MOVE": "movescu NODELAY"}


def write_series(folder: Path, slices: int) -> tuple[str, str]:
    import pydicom
    from pydicom.uid import generate_uid

    template = pydicom.dcmread(SLICE)
    study, series = generate_uid(), generate_uid()
    z0 = float(template.ImagePositionPatient[2])
    folder.mkdir(parents=True)
    for index in range(slices):
        template.StudyInstanceUID, template.SeriesInstanceUID = study, series
        template.SOPInstanceUID = template.file_meta.MediaStorageSOPInstanceUID = generate_uid()
        template.InstanceNumber = index + 1
        position = list(template.ImagePositionPatient)
        template.ImagePositionPatient = [position[0], position[1], z0 + index * 1.0]
        template.SliceLocation = z0 + index * 1.0
        template.SeriesDescription = "bench_pacs 300 slices (one real slice repeated)"
        template.save_as(folder / f"{index:04d}.dcm", enforce_file_format=True)
    return study, series


def folder_bytes(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".json")]
    return len(files), sum(p.stat().st_size for p in files)


def run_peer(peer: str, study: str, series: str, out: Path, web, dimse) -> None:
    from medseg.io.pacs import SeriesCache, retrieve_series

    if peer.startswith("medseg"):
        method = {"medseg WADO-RS": "wado", "medseg C-GET": "get", "medseg C-MOVE": "move"}[peer]
        result = retrieve_series(web if method == "wado" else dimse, study, series, SeriesCache(out), method=method)
        assert result.complete
        return
    keys = ["-k", "QueryRetrieveLevel=SERIES", "-k", f"StudyInstanceUID={study}", "-k", f"SeriesInstanceUID={series}"]
    out.mkdir(parents=True)
    env = dict(os.environ, TCP_NODELAY="1") if peer.endswith("NODELAY") else None
    if peer.startswith("getscu"):
        command = ["getscu", "-S", "-aet", "DCMTK", "-aec", "ORTHANC", "-od", str(out), *keys, "127.0.0.1", str(DICOM_PORT)]
    else:
        command = ["movescu", "-S", "-aet", "DCMTK", "-aec", "ORTHANC", "-aem", "DCMTK", "--port", str(DCMTK_PORT),
                   "-od", str(out), *keys, "127.0.0.1", str(DICOM_PORT)]
    subprocess.run(command, check=True, capture_output=True, env=env)


def benchmark(runs: int, slices: int) -> None:
    from orthanc_server import Orthanc, require_private_netns

    from medseg.io.pacs import PacsServer

    problem = require_private_netns()
    if problem:
        sys.exit(problem)
    work = Path(tempfile.mkdtemp(prefix="bench_pacs."))
    try:
        study, series = write_series(work / "series", slices)
        orthanc = Orthanc(work / "orthanc", HTTP_PORT, DICOM_PORT,
                          modalities={"MEDSEG": ("127.0.0.1", MEDSEG_PORT), "DCMTK": ("127.0.0.1", DCMTK_PORT)})
        orthanc.start()
        try:
            start = time.perf_counter()
            orthanc.upload(sorted((work / "series").iterdir()))
            print(f"loaded {slices} instances into Orthanc in {time.perf_counter() - start:.1f} s")
            web = PacsServer(name="bench-web", protocol="dicomweb", url=orthanc.dicomweb_url, timeout_s=120)
            dimse = PacsServer(name="bench-dimse", protocol="dimse", host="127.0.0.1", port=DICOM_PORT,
                               called_aet="ORTHANC", our_aet="MEDSEG", storage_port=MEDSEG_PORT, timeout_s=120)
            times: dict[str, list[float]] = {peer: [] for peer in PEERS}
            sizes: dict[str, tuple[int, int]] = {}
            for run in range(runs):
                for peer in PEERS:  # interleaved, so a busy moment on the machine hits every peer alike
                    out = work / "out" / f"{run}-{peer.replace(' ', '_')}"
                    start = time.perf_counter()
                    run_peer(peer, study, series, out, web, dimse)
                    times[peer].append(time.perf_counter() - start)
                    sizes[peer] = folder_bytes(out)
                    shutil.rmtree(out)
        finally:
            orthanc.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{slices}-slice series over loopback, {runs} runs each (median [min - max])")
    print(f"{'peer':<16} {'seconds':>22} {'inst/s':>8} {'MB/s':>7} {'files':>6}  ratio to dcmtk")
    median = {peer: statistics.median(t) for peer, t in times.items()}
    for peer in PEERS:
        count, nbytes = sizes[peer]
        ratio = f"{median[peer] / median[COMPARE[peer]]:.2f}x the time of {COMPARE[peer]}" if peer in COMPARE else ""
        spread = f"{median[peer]:.2f} [{min(times[peer]):.2f} - {max(times[peer]):.2f}]"
        print(f"{peer:<16} {spread:>22} {count / median[peer]:>8.0f} {nbytes / 1e6 / median[peer]:>7.1f} {count:>6}  {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        benchmark(args.runs, args.slices)
        return
    subprocess.run(["bash", str(REPO / ".ci" / "pacs-deps")], check=True)
    namespace = f"medseg-bench-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"], check=True)
        code = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, __file__, "--inside",
                               "--runs", str(args.runs), "--slices", str(args.slices)]).returncode
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    sys.exit(code)


if __name__ == "__main__":
    main()
