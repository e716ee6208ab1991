"""Start-up: how long a user waits for `medseg --version`, `--help`, the first window and the demo.

Each case is a fresh process (page cache warm, nothing else shared), run several times
and interleaved with its peers so that load on a shared machine hits all of them alike:
  * `python -c pass`: the interpreter's own floor;
  * nnU-Net v2's `nnUNetv2_predict -h` (the peer command-line tool users wait on);
  * `import torch, SimpleITK, pydicom, scipy.ndimage`: what `medseg --help` used to import;
  * medseg: `--version`, `--help`, first window (the first event-loop turn after the main
    window is shown) and the demo study on screen (study_loaded).
Prints median, min-max and peak RSS (when the OS reports it), and the goals.
Run: .venv/bin/python benchmarks/bench_startup.py [--runs 7]
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

PY = sys.executable

# The child marks the moments the user sees: the window after its first event-loop turn,
# and the demo study once loaded. It runs the real `medseg demo` entry point.
_GUI_CHILD = r"""
import sys, time
from PySide6.QtCore import QTimer
from medseg.gui.shell import main_window
def mark(what):
    print(f"MARK {what} {time.time():.6f}", flush=True)
original_show = main_window.MainWindow.showEvent
def show_event(self, event):
    original_show(self, event)
    if not getattr(self, "_bench_marked", False):
        self._bench_marked = True
        QTimer.singleShot(0, lambda: mark("window"))
        if DEMO:
            self.loader.study_loaded.connect(lambda _v: (mark("study"), QTimer.singleShot(0, self.close)))
        else:
            QTimer.singleShot(0, self.close)
main_window.MainWindow.showEvent = show_event
from medseg.cli import main
sys.exit(main([COMMAND]))
"""


def _gui_child(demo: bool) -> str:
    return _GUI_CHILD.replace("DEMO", repr(demo)).replace("COMMAND", repr("demo" if demo else "gui"))


def _run(argv: list[str], env: dict[str, str], marks: tuple[str, ...] = ()) -> dict[str, float]:
    """Wall seconds to exit (or to each MARK line) and peak RSS in MB of one fresh process."""
    start = time.time()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    seen: dict[str, float] = {}
    for line in process.stdout:  # type: ignore[union-attr]
        if line.startswith("MARK "):
            _, what, at = line.split()
            seen[what] = float(at) - start
    rss = None
    if hasattr(os, "wait4"):
        _pid, status, usage = os.wait4(process.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        rss = usage.ru_maxrss / (1024.0 if sys.platform != "darwin" else 1024.0 * 1024.0)
    else:
        code = process.wait()
    seen["exit"] = time.time() - start
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {code}")
    missing = [m for m in marks if m not in seen]
    if missing:
        raise SystemExit(f"{' '.join(argv)} never reached {missing}")
    if rss is not None:
        seen["rss_mb"] = rss
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    config = tempfile.mkdtemp(prefix="medseg-bench-startup-")
    env["XDG_CONFIG_HOME"] = env["XDG_DATA_HOME"] = env["XDG_CACHE_HOME"] = config  # settings, log, demo cache
    bindir = os.path.dirname(PY)
    nnunet = shutil.which("nnUNetv2_predict", path=bindir) or shutil.which("nnUNetv2_predict")
    cases: dict[str, tuple[list[str], tuple[str, ...], str]] = {
        "python -c pass": ([PY, "-c", "pass"], (), "exit"),
        "import torch+SimpleITK+pydicom+scipy": (
            [PY, "-c", "import torch, SimpleITK, pydicom, pydicom.pixels, scipy.ndimage"], (), "exit"),
        "medseg --version": ([PY, "-m", "medseg", "--version"], (), "exit"),
        "medseg --help": ([PY, "-m", "medseg", "--help"], (), "exit"),
        "medseg gui: first window": ([PY, "-c", _gui_child(demo=False)], ("window",), "window"),
        "medseg demo: first window": ([PY, "-c", _gui_child(demo=True)], ("window", "study"),
                                      "window"),
        "medseg demo: study shown": ([], (), "study"),  # read from the run above
    }
    if nnunet:
        cases["nnUNetv2_predict -h (peer)"] = ([nnunet, "-h"], (), "exit")
    # The demo generates its phantom once per user (cached): do that outside the timing.
    _run(cases["medseg demo: first window"][0], env, ("window", "study"))
    results: dict[str, list[float]] = {name: [] for name in cases}
    rss: dict[str, list[float]] = {name: [] for name in cases}
    demo_runs: list[dict[str, float]] = []
    for _ in range(args.runs):  # interleaved: every round runs every case once
        for name, (argv, marks, key) in cases.items():
            if not argv:
                continue
            seen = _run(argv, env, marks)
            results[name].append(seen[key])
            if "rss_mb" in seen:
                rss[name].append(seen["rss_mb"])
            if name == "medseg demo: first window":
                demo_runs.append(seen)
    results["medseg demo: study shown"] = [run["study"] for run in demo_runs]
    rss["medseg demo: study shown"] = [run["rss_mb"] for run in demo_runs if "rss_mb" in run]
    shutil.rmtree(config, ignore_errors=True)

    print(f"start-up, fresh process each run, {args.runs} interleaved runs, CPUs {os.cpu_count()}; "
          f"seconds median [min - max], peak RSS MB median")
    for name, values in results.items():
        memory = f"{statistics.median(rss[name]):7.0f} MB" if rss[name] else "      n/a"
        print(f"  {name:40s} {statistics.median(values):6.3f} s  [{min(values):.3f} - {max(values):.3f}]  {memory}")
    version, helptext = statistics.median(results["medseg --version"]), statistics.median(results["medseg --help"])
    window = statistics.median(results["medseg demo: first window"])
    print(f"goal `medseg --version` <= 0.3 s: {version:.3f} s; `--help` <= 0.3 s: {helptext:.3f} s; "
          f"first window <= 1.5 s: {window:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
