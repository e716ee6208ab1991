"""Fast checks of the installer recipes (CI runs these; the real build and its smoke test are
``make installer`` / ``make installer-test``, about 10 minutes, see installers/README.md).

The PyInstaller spec is executed with stand-ins for PyInstaller's build classes (Analysis,
EXE, ...) and the real PyInstaller hook helpers, so everything it computes is checked:
every file it bundles exists, every CLI command is a hidden import, every module it names
can be found, and no module it excludes is imported by medseg. The Windows (.iss, .ps1),
macOS and Linux scripts are parsed for the repository paths they reference.
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from medseg.cli import COMMAND_MODULES

ROOT = Path(__file__).resolve().parents[2]
INSTALLERS = ROOT / "installers"
SPEC = INSTALLERS / "medseg.spec"


class Recorder:
    """Stands in for one PyInstaller build class: keeps its arguments."""

    def __init__(self, kind: str, calls: list):
        self.kind, self.calls = kind, calls

    def __call__(self, *args, **kwargs):
        call = SimpleNamespace(kind=self.kind, args=args, kwargs=kwargs, binaries=[], datas=[], pure=[], scripts=[])
        self.calls.append(call)
        return call


def execute_spec(workpath: Path, monkeypatch, variant: str | None = None) -> tuple[dict, list]:
    if variant is None:
        monkeypatch.delenv("MEDSEG_VARIANT", raising=False)
    else:
        monkeypatch.setenv("MEDSEG_VARIANT", variant)
    calls: list = []
    namespace = {name: Recorder(name, calls) for name in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")}
    namespace.update(SPECPATH=str(INSTALLERS), workpath=str(workpath), __file__=str(SPEC), __name__="__main__")
    exec(compile(SPEC.read_text(), str(SPEC), "exec"), namespace)
    return namespace, calls


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    try:
        namespace, calls = execute_spec(tmp_path_factory.mktemp("pyinstaller-work"), monkeypatch)
    finally:
        monkeypatch.undo()
    analysis = next(c for c in calls if c.kind == "Analysis")
    return SimpleNamespace(ns=namespace, calls=calls, analysis=analysis)


def test_every_bundled_file_exists_and_the_starter_model_is_in_medseg_resources(spec):
    datas = spec.analysis.kwargs["datas"]
    assert datas, "the spec bundles no data files"
    for source, dest in datas:
        assert Path(source).exists(), f"the spec bundles {source}, which does not exist"
    dests = {(Path(source).name, dest.replace("\\", "/")) for source, dest in datas}
    starter = ROOT / "resources" / "models" / "starter"
    for name in ("model.json", "weights.safetensors", "model_2d.onnx"):
        assert (starter / name).is_file()
        assert (name, "medseg/resources/models/starter") in dests
    assert ("label_colors.json", "medseg/resources") in dests
    assert ("medseg.svg", "medseg/resources/icons") in dests
    assert ("build_info.json", "medseg/resources") in dests
    # Every file of resources/ the app reads is bundled (screenshots are for the README only).
    for path in (ROOT / "resources").rglob("*"):
        if path.is_file() and path.suffix not in (".py", ".pyc") and "screenshots" not in path.parts and "__pycache__" not in path.parts:
            dest = "medseg/resources/" + path.parent.relative_to(ROOT / "resources").as_posix()
            assert (path.name, dest.rstrip("/").removesuffix("/.")) in dests, f"{path} is not bundled"


def test_build_info_records_the_variant(spec, tmp_path, monkeypatch):
    info = json.loads((Path(spec.ns["WORK"]) / "build_info.json").read_text())
    assert info["variant"] == "cpu" or (info["variant"] == "mps" and info["platform"] == "darwin")
    execute_spec(tmp_path, monkeypatch, variant="directml")
    assert json.loads((tmp_path / "build_info.json").read_text())["variant"] == "directml"
    with pytest.raises(SystemExit, match="MEDSEG_VARIANT"):
        execute_spec(tmp_path, monkeypatch, variant="rocm")


def test_every_cli_command_and_medseg_module_is_a_hidden_import(spec):
    hidden = set(spec.analysis.kwargs["hiddenimports"])
    assert COMMAND_MODULES, "command discovery found no commands"
    for name in COMMAND_MODULES:
        assert f"medseg.cli.{name}" in hidden, f"CLI command {name} would be missing from the frozen app"
    for path in (ROOT / "medseg").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        assert module in hidden, f"{module} is not bundled"
    assert "medseg.resources" in hidden


def test_every_named_module_exists(spec):
    for name in spec.analysis.kwargs["hiddenimports"]:
        assert importlib.util.find_spec(name) is not None, f"hidden import {name} cannot be found"
    # The DICOM decoder plugins are collected (JPEG Baseline via Pillow, JPEG 2000, JPEG-LS); the
    # GPL-3.0 libjpeg is not (the other JPEG processes go to GDCM inside SimpleITK).
    hidden = set(spec.analysis.kwargs["hiddenimports"])
    for package in ("pydicom.pixels.decoders.pylibjpeg", "pydicom.pixels.decoders.pillow", "openjpeg", "jpeg_ls"):
        assert package in hidden
    assert not {name for name in hidden if name.split(".")[0] == "libjpeg"}
    script = Path(spec.analysis.args[0][0])
    assert script == INSTALLERS / "launcher.py" and script.is_file()


def _imported_modules() -> set[str]:
    names = set()
    for path in (ROOT / "medseg").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_excluded_module_is_imported_by_medseg(spec):
    imported = _imported_modules()
    for excluded in spec.ns["EXCLUDES"]:
        users = sorted(n for n in imported if n == excluded or n.startswith(excluded + "."))
        assert not users, f"medseg imports {users}, which installers/medseg.spec excludes: update EXCLUDES"


def test_highdicom_standard_tables_are_bundled(spec):
    """Writing a DICOM SEG reads highdicom/_standard/*.json (the smoke test found them missing)."""
    datas = {Path(dest) / Path(source).name for source, dest in spec.analysis.kwargs["datas"]}
    for name in ("sop_class_iod_map.json", "iod_module_map.json", "module_attribute_map.json"):
        assert Path("highdicom/_standard") / name in datas


def test_no_excluded_module_is_loaded_by_the_gui_or_its_libraries(spec):
    """What the main window, the training curves and the 3D view import, their libraries' own
    imports by name (pyqtgraph's ``importlib.import_module(f"{QT_LIB}.QtOpenGL")``) included:
    the bundle would fail to open a window without it."""
    code = ("import sys, json, medseg.gui.shell.main_window, medseg.gui.train.plots, pyqtgraph\n"
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    excluded = {m for m in loaded for e in spec.ns["EXCLUDES"] if m == e or m.startswith(e + ".")}
    # pyqtgraph imports QtTest inside try/except and carries on without it (checked in the bundle).
    assert excluded - {"PySide6.QtTest"} == set(), f"loaded by the GUI but excluded from the bundle: {sorted(excluded)}"


def test_nothing_the_3d_view_loads_is_excluded(spec):
    """pyqtgraph.opengl needs Qt modules medseg never names (QtOpenGL, QtOpenGLWidgets): ask Python
    which modules the 3D view's GL side really loads. pyqtgraph's Qt shim also tries QtTest, and
    works without it (it keeps a FailedImport): that one may stay excluded."""
    probe = ("import sys, json; import medseg.gui.viewer.view3d_gl; "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('PySide6', 'OpenGL', 'pyqtgraph')))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1])) - {"PySide6.QtTest"}
    assert {"PySide6.QtOpenGL", "PySide6.QtOpenGLWidgets", "OpenGL.GL", "pyqtgraph.opengl"} <= loaded
    for excluded in spec.ns["EXCLUDES"]:
        users = sorted(m for m in loaded if m == excluded or m.startswith(excluded + "."))
        assert not users, f"the 3D view loads {users}, which installers/medseg.spec excludes"


@pytest.mark.parametrize("dest, kept", [
    ("PySide6/Qt/plugins/platforms/libqxcb.so", True),
    ("PySide6/Qt/plugins/platforms/libqoffscreen.so", True),
    ("PySide6/Qt/plugins/platforms/libqwayland.so", True),
    ("PySide6/Qt/plugins/platforms/libqvnc.so", False),
    ("PySide6/Qt/plugins/platforms/libqeglfs.so", False),
    ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", False),
    ("PySide6/Qt/plugins/imageformats/libqsvg.so", True),
    ("PySide6/Qt/plugins/imageformats/libqjpeg.so", False),
    ("PySide6/Qt/plugins/tls/libqopensslbackend.so", False),
    ("PySide6/plugins/platforms/qwindows.dll", True),
    ("PySide6/Qt/plugins/xcbglintegrations/libqxcb-glx-integration.so", True),
    ("PySide6/Qt/lib/libQt6Gui.so.6", True),
    ("PySide6/Qt/lib/libQt6Network.so.6", False),
    ("torch/include/ATen/ATen.h", False),
    ("torch/lib/libtorch_cpu.so", True),
    ("torch/bin/torch_shm_manager", True),
    ("torch/bin/test_jit", False),
    ("torch/test/Dict_test", False),  # C++ test programs (83 MB)
    ("torch/lib/libtorchbind_test.so", False),
    ("PySide6/Qt/translations/qtbase_de.qm", False),
])  # fmt: skip


def test_plugin_and_data_filter(spec, dest, kept):
    assert spec.ns["keep"](dest) is kept


def test_system_libraries_kept_only_when_needed_and_not_provided_by_depends(spec):
    """Follows DT_NEEDED from the bundled (non-system) binaries: libssl (for Python's _ssl) and the
    libcrypto it links stay; glib (the .deb's Depends install it) and a library nothing kept links
    to (pixman, once needed by the dropped GTK theme plugin) go."""
    import _ssl

    prune, needed = spec.ns["prune_system_libraries"], spec.ns["needed"]
    system = Path("/usr/lib/x86_64-linux-gnu")
    libssl = next(n for n in needed(_ssl.__file__) if n.startswith("libssl"))
    libcrypto = next(n for n in needed(str(system / libssl)) if n.startswith("libcrypto"))
    binaries = [("python3.11/lib-dynload/_ssl.so", _ssl.__file__, "EXTENSION")]
    binaries += [(name, str(system / name), "BINARY") for name in (libssl, libcrypto, "libglib-2.0.so.0", "libpixman-1.so.0")]
    kept = {entry[0] for entry in prune(binaries)}
    assert kept == {"python3.11/lib-dynload/_ssl.so", libssl, libcrypto}


def test_executables_and_collect(spec):
    exes = [c for c in spec.calls if c.kind == "EXE"]
    names = {c.kwargs["name"] for c in exes}
    assert "medseg" in names
    assert all(c.kwargs["exclude_binaries"] for c in exes), "one-folder bundle: binaries go to COLLECT"
    (collect,) = [c for c in spec.calls if c.kind == "COLLECT"]
    assert collect.kwargs["name"] == "medseg"


# --- Windows ------------------------------------------------------------------------------
ISS = INSTALLERS / "windows" / "medseg.iss"
PS1 = INSTALLERS / "windows" / "build.ps1"
OUTPUT_DIRS = ("build", "dist")


def _iss_settings() -> dict[str, str]:
    settings = {}
    for line in ISS.read_text().splitlines():
        match = re.match(r"^([A-Za-z]+)=(.*)$", line.strip())
        if match:
            settings[match.group(1)] = match.group(2)
    return settings


def _iss_defines() -> dict[str, str]:
    return dict(re.findall(r'#define\s+(\w+)\s+"([^"]*)"', ISS.read_text()))


def test_iss_references_existing_files_and_the_spec_executables(spec):
    settings = _iss_settings()
    for key in ("SetupIconFile", "InfoBeforeFile", "LicenseFile"):
        if key in settings:
            assert (ISS.parent / settings[key].replace("\\", "/")).is_file(), f"{ISS.name}: {key}={settings[key]} does not exist"
    assert settings["PrivilegesRequired"] == "lowest", "the installer must not need administrator rights"
    defines = _iss_defines()
    windows_exes = {"medseg", "medseg-gui"}  # the spec's EXE names on win32 (checked below)
    assert defines["GuiExe"].removesuffix(".exe") in windows_exes and defines["CliExe"].removesuffix(".exe") in windows_exes
    spec_text = SPEC.read_text()
    for exe in windows_exes:
        assert f'name="{exe}"' in spec_text
    # The default bundle location is a build output of build.ps1, never a source path.
    source_default = re.search(r'#define SourceDir "([^"]+)"', ISS.read_text()).group(1)
    assert source_default.startswith("..\\..\\build\\windows-")
    for source in re.findall(r'^Source:\s*"([^"]+)"', ISS.read_text(), flags=re.M):
        if "{#" not in source:
            assert (ISS.parent / source.replace("\\", "/")).exists(), f"{ISS.name}: Source {source} does not exist"
    text = ISS.read_text()
    for needed in ("[Icons]", "{autoprograms}", "OpenWithProgids", "Directory\\shell\\medseg", "[Run]"):
        assert needed in text, f"{ISS.name} lacks {needed}"


def _referenced_paths(text: str, pattern: str) -> list[str]:
    return [p for p in re.findall(pattern, text) if not p.replace("\\", "/").startswith(OUTPUT_DIRS)]


def test_windows_build_script_references_existing_paths():
    text = PS1.read_text()
    paths = _referenced_paths(text, r"Join-Path \$Root '([^']+)'")
    assert {"installers\\medseg.spec", "installers\\windows\\medseg.iss", "resources\\icons\\medseg.ico"} <= set(paths)
    for path in paths:
        assert (ROOT / path.replace("\\", "/")).exists(), f"build.ps1 references {path}, which does not exist"
    assert "onnxruntime-directml" in text and 'MEDSEG_VARIANT = $Variant' in text


def test_macos_and_linux_scripts_reference_existing_paths():
    mac = (INSTALLERS / "macos" / "build.sh").read_text()
    mac_paths = _referenced_paths(mac, r'"\$ROOT/([^"$]+)"')
    assert {"installers/medseg.spec", "installers/macos/entitlements.plist", "resources/icons/medseg.icns"} <= set(mac_paths)
    linux = (INSTALLERS / "linux" / "build.sh").read_text()
    linux_paths = _referenced_paths(linux, r"((?:installers|resources)/[\w./-]+\w)")
    linux_paths += [f"installers/linux/{name}" for name in re.findall(r'"\$HERE/([\w.-]+)"', linux)]
    assert "installers/medseg.spec" in linux_paths and "installers/linux/depends.txt" in linux_paths
    for path in mac_paths + linux_paths:
        assert (ROOT / path).exists(), f"an installer script references {path}, which does not exist"
    ET.parse(INSTALLERS / "macos" / "entitlements.plist")


# --- Linux package metadata ---------------------------------------------------------------
def _depends() -> set[str]:
    names = set()
    for line in (INSTALLERS / "linux" / "depends.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.update(alt.split("(")[0].strip() for alt in line.split("|"))
    return names


def test_deb_depends_cover_the_qt_libraries_ci_installs():
    """The .deb must need at least what .ci/system-deps installs for Qt (same list, one truth
    per purpose): every library package there is a dependency of the package."""
    # .ci/system-deps lists "shared-library package" pairs (and installs the missing packages).
    text = (ROOT / ".ci" / "system-deps").read_text()
    ci_packages = set(re.findall(r'"\S+\.so[.\d]* (lib[\w.+-]+)"', text))
    assert ci_packages, "found no library packages in .ci/system-deps"
    missing = sorted(ci_packages - _depends())
    assert not missing, f"installers/linux/depends.txt lacks {missing}, which .ci/system-deps installs for Qt"


def test_desktop_entry_and_mime_types():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(INSTALLERS / "linux" / "medseg.desktop")
    desktop = entry["Desktop Entry"]
    assert desktop["Exec"].split()[0] == "medseg" and desktop["Icon"] == "medseg"
    mime = set(filter(None, desktop["MimeType"].split(";")))
    assert {"application/dicom", "inode/directory"} <= mime
    declared = {t.get("type") for t in ET.parse(INSTALLERS / "linux" / "medseg-mime.xml").getroot()}
    assert "application/dicom" in declared
    assert "/opt/medseg/medseg" in (INSTALLERS / "linux" / "medseg.sh").read_text()
    control = (INSTALLERS / "linux" / "control.in").read_text()
    for field in ("Package: medseg", "Depends: @DEPENDS@", "Architecture: @ARCH@", "Version: @VERSION@"):
        assert field in control
