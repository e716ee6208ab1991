"""The first window does not wait for PyTorch: importing it costs 3-6 s, and it once came in through
the Train tab (its device list, and the training package's eager __init__): `medseg gui` took 8-9 s
to its first window in the installed bundle against 2.5 s before. Real processes, offscreen."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from PySide6.QtWidgets import QApplication
app = QApplication([])
from medseg.gui.shell.main_window import MainWindow
window = MainWindow()
window.show()
app.processEvents()
print("torch before the Train tab:", "torch" in sys.modules)
window.tabs.setCurrentIndex(1)
window.train_tab.pages.setCurrentIndex(1)
app.processEvents()
panel = window.train_tab.training_panel.form
print("devices:", [panel.device.itemData(i) for i in range(panel.device.count())])
"""


def test_the_first_window_imports_no_torch_and_the_train_tab_lists_devices_when_shown(tmp_path):
    import os

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "torch before the Train tab: False" in run.stdout, run.stdout
    devices = run.stdout.split("devices:", 1)[1]
    assert "'cpu'" in devices and "'auto'" in devices  # the full list, filled when the tab was shown
