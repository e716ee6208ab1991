"""Shared test fixtures. Tests run offscreen and use the real CT in ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Must be set before any QApplication exists (pytest-qt has no ini option for it).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
ARTIFACTS = REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real CT data. Missing data is a failure, never a skip: the tests exist to run on it."""
    if not (SHARED_DATA / "README.md").is_file():
        pytest.fail(f"real test data not found at {SHARED_DATA} (set MEDSEG_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def ct_dir(shared_data: Path) -> Path:
    return shared_data / "ct"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(autouse=True)
def _private_app_folders(tmp_path_factory, monkeypatch):
    """Every test gets its own medseg data and config folders (sessions, logs, training, PACS
    settings: medseg.app_dirs), so no test sees another's autosave or the user's own. The cache
    (demo study) is shared: it is made again only when missing."""
    root = tmp_path_factory.mktemp("app")
    for variable, name in (("MEDSEG_DATA_DIR", "data"), ("MEDSEG_CONFIG_DIR", "config")):
        monkeypatch.setenv(variable, str(root / name))
    # Segmentations on the CPU run PyTorch, not the engine a timing on this machine chose
    # (medseg.model.cpu_runtime): results stay the same from run to run. tests/model/test_cpu_runtime.py
    # tests the measured choice.
    monkeypatch.setenv("MEDSEG_CPU_ENGINE", "cpu")
    yield
    # The app's settings model lives as long as the process (as it does in the app): what one test chose (the
    # Interactive AI model, a --threads of its command line) is not the next one's.
    from medseg.settings import SETTINGS

    SETTINGS.reset()


@pytest.fixture
def fake_machine(monkeypatch):
    """``fake_machine(cuda=N, mps=bool, providers=[...], openvino=bool)``: torch, ONNX Runtime and the optional
    OpenVINO report that machine.

    For tests of the device choice on every kind of machine, whatever runs them.
    """
    from types import SimpleNamespace

    import onnxruntime
    import torch

    from medseg.model import backends

    def make(cuda: int = 0, mps: bool = False, providers: tuple[str, ...] = ("CPUExecutionProvider",),
             openvino: bool = False) -> None:
        gpus = [SimpleNamespace(name=f"Fake GPU {i}", total_memory=(24 + 8 * i) * 2**30, major=8, minor=9)
                for i in range(cuda)]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: gpus[index])
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: list(providers))
        monkeypatch.setattr(backends, "openvino_available", lambda: openvino)

    return make


@pytest.fixture
def budget_restored():
    """The thread budget, torch's and SimpleITK's thread counts, the thread variables and the settings model
    as they were before the test (a test that sets threads through the settings model or the command line)."""
    import SimpleITK as sitk
    import torch

    from medseg import threads
    from medseg.settings import SETTINGS

    before, torch_before, itk_before = (threads.budget_count(), torch.get_num_threads(),
                                        sitk.ProcessObject.GetGlobalDefaultNumberOfThreads())
    environment = {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                           "OPENBLAS_NUM_THREADS", "ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS")}
    yield
    SETTINGS.reset()
    threads.BUDGET.set_count(before)
    torch.set_num_threads(torch_before)
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(itk_before)
    for name, value in environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
