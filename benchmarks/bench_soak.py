"""Soak: the desktop app (offscreen) over a long session — does memory, file handles or the
event loop drift? Not a CI test: run by hand, and say what was run and on what machine.

Phases, in one MainWindow with the autosave journal on (as a user has it):
  1. open/close studies: real CT from ../shared/data in turn (a 3-slice DICOM series, a NIfTI,
     a 48-slice NRRD), each opened through the window and then closed (document emptied);
  2. segment: the starter model on a crop of the NIfTI CT, N times (each result one undoable step);
  3. brush strokes with undo: N strokes of 5 positions each through the tool controller (what
     a mouse drag does), every third one undone, on the chest CT.
For each phase: RSS after every step (printed as a curve of 10 points), open file handles at
start and end, the longest event-loop stall (a 10 ms timer's largest gap while the phase
ran) and the growth of RSS over the second half of the phase (a leak grows steadily there;
allocator warm-up happens in the first half).

First, in the fresh window, the memory goal: open a 512 x 512 x 1000 DICOM series (1000 real
slices re-positioned, 500 MB of int16 voxels); peak RSS (VmHWM, reset before the open, over the
load and two seconds after it) against 1.5 x the voxels + 400 MB.

Run:  QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_soak.py \\
        [--studies 200] [--segments 50] [--strokes 10000] [--big-slices 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data")) / "ct"

import numpy as np  # noqa: E402
from PySide6.QtCore import QEventLoop, QStandardPaths, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_targets() -> dict[str, str]:
    """What each open file handle is (a file, a pipe, a socket): to name the ones a phase left open."""
    targets = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return targets


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


class StallMeter:
    """The longest gap between ticks of a 10 ms timer: how long the event loop was blocked.

    Also the most CPU time the GUI thread itself spent between two ticks: on a machine loaded by
    other programs a wall-clock gap is mostly the time the thread waited for a core, which the
    CPU time leaves out (it also leaves out a wait for the GIL held by a worker, so it is a lower bound)."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self.last, self.last_cpu = time.perf_counter(), time.thread_time()
        self.longest = self.longest_cpu = 0.0

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        self.longest = max(self.longest, now - self.last)
        self.longest_cpu = max(self.longest_cpu, cpu - self.last_cpu)
        self.last, self.last_cpu = now, cpu

    def start(self) -> None:
        self.last, self.longest = time.perf_counter(), 0.0
        self.last_cpu, self.longest_cpu = time.thread_time(), 0.0
        self.timer.start()

    def stop(self) -> float:
        self.timer.stop()
        return self.longest


def wait_for(signal, timeout_s: float = 600.0):
    """Run the event loop until ``signal`` fires; returns its arguments."""
    loop, got = QEventLoop(), []

    def fired(*args) -> None:
        got.append(args)
        loop.quit()

    signal.connect(fired)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(fired)  # else every later emission (and its Volume) is kept by this closure
    if not got:
        raise TimeoutError(f"no {signal} within {timeout_s} s")
    return got[0]


def pump(ms: int = 20) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


# The goals of a long day (issue 53): a leak grows steadily over the second half of a phase (the
# first half is the allocator's and the caches' warm-up), a lost handle stays open, a stall is felt.
GROWTH_GOAL = 0.05
STALL_GOAL_MS = 200.0
STALL: "StallMeter"  # the one meter (its CPU-time figure is printed with each phase)


def load_average() -> str:
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


def report(name: str, rss: list[float], fds: tuple[int, int], stall: float, seconds: float, load0: str,
           opened: dict[str, str], threads: tuple[int, int]) -> dict:
    points = [rss[round(i * (len(rss) - 1) / 9)] for i in range(10)] if len(rss) >= 10 else rss
    half = rss[len(rss) // 2:]
    growth = half[-1] - half[0] if len(half) > 1 else 0.0
    fraction = growth / half[0] if half and half[0] else 0.0
    verdicts = {"RSS growth": fraction <= GROWTH_GOAL, "file handles": fds[1] <= fds[0],
                "stall": stall * 1000 <= STALL_GOAL_MS}
    print(f"\n{name}: {len(rss)} steps in {seconds:.0f} s; load average (1/5/15 min) {load0} at start, "
          f"{load_average()} at end")
    print(f"  RSS MB (10 points): {' '.join(f'{v:.0f}' for v in points)}")
    print(f"  RSS over the second half: {half[0]:.0f} -> {half[-1]:.0f} MB ({growth:+.0f} MB, "
          f"{fraction * 100:+.1f} %; goal <= {GROWTH_GOAL * 100:.0f} %); median {statistics.median(rss):.0f} MB")
    if len(half) > 2:  # one sample taken after the allocator gave memory back moves the end points; a leak moves the trend
        slope = float(np.polyfit(np.arange(len(half)), half, 1)[0])
        trend = slope * (len(half) - 1)
        print(f"  least-squares trend over the second half: {trend:+.0f} MB ({trend / statistics.mean(half) * 100:+.1f} %); "
              f"its range {min(half):.0f}-{max(half):.0f} MB")
    print(f"  open file handles: {fds[0]} -> {fds[1]} (goal: back to where they started); threads: "
          f"{threads[0]} -> {threads[1]}")
    left = {fd: target for fd, target in fd_targets().items() if opened.get(fd) != target}
    if left:
        print("  handles opened in the phase and still open: " + ", ".join(f"{fd} {t}" for fd, t in sorted(left.items())))
    print(f"  longest event-loop stall: {stall * 1000:.0f} ms (goal <= {STALL_GOAL_MS:.0f} ms); most GUI-thread CPU "
          f"time between two ticks: {STALL.longest_cpu * 1000:.0f} ms")
    print("  " + "; ".join(f"{what}: {'met' if ok else 'NOT met'}" for what, ok in verdicts.items()))
    return {"growth_mb": growth, "growth": fraction, "fds": fds, "stall_ms": stall * 1000, "met": verdicts}


def after_closing(window) -> int:
    """Close the study (its edits marked saved: the journal is removed) and count the open file handles."""
    window.document.mark_saved()
    window.document.close_image()
    pump(100)
    return open_fds()


def make_big_series(folder: Path, slices: int) -> Path:
    """``slices`` real 512 x 512 CT slices (the dcmqi series' first, re-positioned 1 mm apart)."""
    import pydicom
    from pydicom.uid import generate_uid

    source = pydicom.dcmread(sorted((SHARED / "dcmqi_ct3slice_masks" / "image").iterdir())[0])
    series_uid = generate_uid()
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(slices):
        source.SeriesInstanceUID = series_uid
        source.SOPInstanceUID = source.file_meta.MediaStorageSOPInstanceUID = generate_uid()
        source.InstanceNumber = index + 1
        source.ImagePositionPatient = [-235.2, -226.8, -500.0 + index]
        source.SliceLocation = -500.0 + index
        source.save_as(folder / f"{index:04d}.dcm")
    return folder


def big_open(window, work: Path, slices: int, stall: "StallMeter") -> None:
    """The memory goal, first, in the fresh window (the goal's 400 MB is the app's own share)."""
    folder = make_big_series(work / "big", slices)
    voxels_mb = 512 * 512 * slices * 2 / 2**20
    pump(100)
    before = status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := current RSS
    started = time.perf_counter()
    stall.start()
    window.opener.open_path(str(folder), auto_load=True)
    wait_for(window.loader.study_loaded, timeout_s=1800)
    pump(2000)  # and what follows an open (repaints, background copies) while the user looks
    longest = stall.stop()
    peak = status_mb("VmHWM")
    goal = 1.5 * voxels_mb + 400
    print(f"open a 512 x 512 x {slices} series ({voxels_mb:.0f} MB of voxels) in "
          f"{time.perf_counter() - started:.0f} s: RSS before {before:.0f} MB, peak {peak:.0f} MB "
          f"(+{peak - before:.0f} MB, {(peak - before) / voxels_mb:.2f} x the voxels); goal peak <= "
          f"{goal:.0f} MB: {'met' if peak <= goal else 'NOT met'}; longest stall {longest * 1000:.0f} ms\n")
    window.document.mark_saved()
    window.document.close_image()
    pump(100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--segments", type=int, default=50)
    parser.add_argument("--strokes", type=int, default=10_000)
    parser.add_argument("--big-slices", type=int, default=1000, help="0 skips the memory goal")
    args = parser.parse_args()

    _app = QApplication.instance() or QApplication(sys.argv)  # kept: Qt needs the application alive
    QStandardPaths.setTestModeEnabled(True)
    work = Path(tempfile.mkdtemp(prefix="medseg-soak-"))
    os.environ["MEDSEG_DATA_DIR"] = str(work / "data")  # the journal's sessions
    from medseg.gui.common import app_settings
    from medseg.gui.shell.main_window import MainWindow

    app_settings.settings().clear()
    window = MainWindow()
    window.resize(1400, 820)
    window.show()
    window.document.enable_autosave(work / "data" / "sessions")
    pump(200)
    global STALL
    stall = STALL = StallMeter()
    print(f"medseg soak on {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; start RSS {status_mb('VmRSS'):.0f} MB")

    studies = [SHARED / "dcmqi_ct3slice_masks" / "image", SHARED / "totalsegmentator" / "example_ct_sm.nii.gz",
               SHARED / "pyradiomics_lung1" / "lung1_image.nrrd"]
    results = {}
    if args.big_slices:
        big_open(window, work, args.big_slices, stall)

    # 1. open/close (each phase may be skipped with 0)
    if args.studies:
        rss, fds0, started, load0 = [], open_fds(), time.perf_counter(), load_average()
        opened, threads0 = fd_targets(), thread_count()
        stall.start()
        for index in range(args.studies):
            path = studies[index % len(studies)]
            window.opener.open_path(str(path), auto_load=True)
            wait_for(window.loader.study_loaded)
            window.document.mark_saved()
            window.document.close_image()
            pump(10)
            rss.append(status_mb("VmRSS"))
        results["open/close"] = report(f"open/close {args.studies} studies", rss, (fds0, open_fds()), stall.stop(),
                                       time.perf_counter() - started, load0, opened, (threads0, thread_count()))

    # 2. segment (a 128 x 96 x 8 crop of the abdomen CT: the same work per run as any CT, fewer tiles)
    if args.segments:
        import SimpleITK as sitk

        crop = sitk.RegionOfInterest(sitk.ReadImage(str(studies[1])), (112, 96, 8), (5, 3, 10))
        sitk.WriteImage(crop, str(work / "abdomen_crop.nii.gz"))
        fds0, opened, threads0 = open_fds(), fd_targets(), thread_count()  # before the study is opened
        window.opener.open_path(str(work / "abdomen_crop.nii.gz"))
        wait_for(window.loader.study_loaded)
        rss, started, load0 = [], time.perf_counter(), load_average()
        stall.start()
        for _ in range(args.segments):
            window.loader.segment()
            wait_for(window.loader.segmented)
            pump(10)
            rss.append(status_mb("VmRSS"))
        longest, seconds = stall.stop(), time.perf_counter() - started
        fds1 = after_closing(window)  # the study's journal is open while the study is: counted once it is closed
        results["segment"] = report(f"segment {args.segments} times (starter, 112 x 96 x 8 of example_ct_sm)", rss,
                                    (fds0, fds1), longest, seconds, load0, opened, (threads0, thread_count()))

    # 3. strokes with undo
    if args.strokes:
        fds0, opened, threads0 = open_fds(), fd_targets(), thread_count()
        window.opener.open_path(str(studies[2]))
        wait_for(window.loader.study_loaded)
        doc, tools = window.document, window.view.tools
        tools.tool.set("brush")
        rng = np.random.default_rng(7)
        shape = np.array(doc.volume.size_xyz)
        rss, started, load0 = [], time.perf_counter(), load_average()
        stall.start()
        for index in range(args.strokes):
            centre = rng.uniform(0.2, 0.8, 3) * shape
            tools.press(tuple(centre), 2)
            for step in range(1, 5):
                tools.drag(tuple(centre + (step * 2.0, step, 0)))
            tools.release()
            if index % 3 == 2:
                doc.undo()
            pump(0)  # the events a real stroke would let through (repaints, the journal's signals)
            if index % 50 == 0:
                rss.append(status_mb("VmRSS"))
        longest, seconds = stall.stop(), time.perf_counter() - started
        history = f"  undo history: {doc.history.depth} steps, {doc.history.nbytes / 2**20:.1f} MB"
        fds1 = after_closing(window)
        results["strokes"] = report(f"{args.strokes} brush strokes (5 positions each, every third undone)", rss,
                                    (fds0, fds1), longest, seconds, load0, opened, (threads0, thread_count()))
        print(history)

    window.close()
    missed = [f"{phase}: {what}" for phase, result in results.items() for what, ok in result["met"].items() if not ok]
    print("\nall goals met" if not missed else "\ngoals NOT met: " + "; ".join(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
