"""The first window does not wait for PyTorch: importing it costs 3-6 s, and it once came in through
the Train tab (its device list, and the training package's eager __init__): `medseg gui` took 8-9 s
to its first window in the installed bundle against 2.5 s before. Since then the Segment panel imports
it in a job once the window has painted (its device list and plan need it): the window never imports
it itself. Real processes, offscreen."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys, threading
first = []


class Spy:  # which thread imports torch, and whether the window had been shown by then
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not first:
            first.append((threading.current_thread() is threading.main_thread(), shown))
        return None


shown = False
sys.meta_path.insert(0, Spy())
from PySide6.QtCore import QEventLoop
from PySide6.QtWidgets import QApplication
app = QApplication([])
from medseg.gui.shell.main_window import MainWindow
window = MainWindow()
window.show()
shown = True
app.processEvents()
if not window.segment_panel.runtime_ready:  # the Segment panel's job imports it meanwhile
    loop = QEventLoop()
    window.segment_panel.runtime_prepared.connect(loop.quit)
    loop.exec()
window.tabs.setCurrentIndex(1)
window.train_tab.pages.setCurrentIndex(1)
app.processEvents()
panel = window.train_tab.training_panel.form
if not panel.devices_ready:  # showing the page started a job that lists them
    loop = QEventLoop()
    panel.devices_listed.connect(loop.quit)
    loop.exec()
print("devices:", [panel.device.itemData(i) for i in range(panel.device.count())])
print("torch first imported by the GUI thread, after the window showed:", first)
window.close()  # as the app does at its end: waits for the jobs still running
"""


def test_the_first_window_imports_no_torch_and_the_train_tab_lists_devices_when_shown(tmp_path):
    import os

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    devices = run.stdout.split("devices:", 1)[1].splitlines()[0]
    assert "'cpu'" in devices and "'auto'" in devices  # the full list, filled when the tab was shown
    # torch: by the Segment panel's job, once the window showed
    assert "after the window showed: [(False, True)]" in run.stdout, run.stdout
