"""Before the QApplication exists: will the Qt platform plugin we are about to use load?

Qt's own failure is an abort (rc 134) with a message that often names the wrong cause
(stack-notes §2.2: "xcb-cursor0 is needed" when the real problem is no display). This
module answers the question first, in plain words, so the app can exit with a
:class:`~medseg.errors.DisplayError` that names the missing libraries, the one
``apt-get install`` line that brings them, and the offscreen fallback.

How: the platform is chosen as Qt would choose it (``QT_QPA_PLATFORM``, else wayland on a
Wayland session, else xcb), the plugin and its Qt support library are run through
``ldd`` to list every shared library the loader cannot find, and for xcb the X server
is contacted through libxcb (and that connection kept open, see
:func:`x_server_reachable`). On Wayland with an unusable wayland plugin, xcb through
XWayland is used when ``$DISPLAY`` is set. Only Linux needs this; elsewhere Qt ships what
it needs.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, MutableMapping

from medseg.errors import DisplayError

# Shared library -> Debian/Ubuntu package, for the libraries Qt's platform plugins load.
# Found by running the app under Xvfb in a bare `debootstrap --variant=minbase bookworm`
# root and adding one package per missing library (see .ci/system-deps, same list).
DEBIAN_PACKAGES: dict[str, str] = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libdbus-1.so.3": "libdbus-1-3",
    "libpng16.so.16": "libpng16-16",
}

# The platform plugin file and the Qt library that carries most of its dependencies.
PLUGIN_FILES = {"xcb": ("libqxcb.so", "libQt6XcbQpa.so.6"), "wayland": ("libqwayland.so", "libQt6WaylandClient.so.6"),
                "offscreen": ("libqoffscreen.so", None)}
OFFSCREEN_HINT = "for a machine without a screen, run with QT_QPA_PLATFORM=offscreen (e.g. `medseg demo`)"


@dataclass
class PlatformReport:
    """What was checked for one platform plugin, and what is wrong with it (nothing = usable)."""

    platform: str
    plugin: Path | None = None
    missing_libraries: list[str] = field(default_factory=list)
    problem: str | None = None

    @property
    def usable(self) -> bool:
        return self.problem is None and not self.missing_libraries


def qt_paths() -> tuple[Path, Path, Path]:
    """(platform plugin folder, Qt library folder, QtWidgets binding) of the installed PySide6."""
    import PySide6  # the package only: no Qt library is loaded by this import

    package = Path(PySide6.__file__).parent
    root = package / "Qt"
    plugin_dir = os.environ.get("QT_QPA_PLATFORM_PLUGIN_PATH")  # Qt honours it; so do we
    widgets = next(iter(sorted(package.glob("QtWidgets.*"))), package / "QtWidgets.abi3.so")
    return (Path(plugin_dir) if plugin_dir else root / "plugins" / "platforms"), root / "lib", widgets


def missing_libraries(binary: Path) -> list[str]:
    """Shared libraries the dynamic loader cannot find for ``binary`` (via ldd; ctypes if no ldd)."""
    # Asked twice per start (run_gui, then QApplication): ldd runs once per file (start-up, #16).
    stat = Path(binary).stat()
    return list(_missing_libraries(str(binary), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=32)
def _missing_libraries(binary: str, _mtime_ns: int, _size: int) -> tuple[str, ...]:
    ldd = shutil.which("ldd")
    if ldd is None:
        try:
            ctypes.CDLL(str(binary))
        except OSError as error:  # "libfoo.so.1: cannot open shared object file"
            return (str(error).split(":")[0].strip(),)
        return ()
    result = subprocess.run([ldd, str(binary)], capture_output=True, text=True, timeout=30)
    missing: list[str] = []
    for line in result.stdout.splitlines():
        name, _, where = line.strip().partition("=>")
        if "not found" in where and name.strip() not in missing:
            missing.append(name.strip())
    return tuple(missing)


def apt_packages(libraries: list[str]) -> list[str]:
    return sorted({DEBIAN_PACKAGES[name] for name in libraries if name in DEBIAN_PACKAGES})


def install_line(libraries: list[str]) -> str | None:
    packages = apt_packages(libraries)
    return f"sudo apt-get install {' '.join(packages)}" if packages else None


def check_plugin(platform: str) -> PlatformReport:
    report = PlatformReport(platform)
    plugin_dir, lib_dir, widgets = qt_paths()
    plugin_name, support_lib = PLUGIN_FILES.get(platform, (f"libq{platform}.so", None))
    report.plugin = plugin_dir / plugin_name
    if not report.plugin.is_file():
        report.problem = f"Qt's {platform!r} platform plugin is not installed ({report.plugin})"
        return report
    # Qt's widgets (libGL, fontconfig, glib, ...) first: without them even `import QtCore` fails.
    for binary in (widgets, report.plugin, lib_dir / support_lib if support_lib else None):
        if binary is not None and binary.is_file():
            for name in missing_libraries(binary):
                if name not in report.missing_libraries:
                    report.missing_libraries.append(name)
    return report


# A bare X server (Xvfb, xvfb-run, a kiosk without a window manager) resets when its last
# client disconnects and refuses connections for a moment while it does: a probe that
# connected and disconnected made Qt's own connection, right after, fail about one time in
# 25 (75 of 2000 back-to-back probes were refused; CI failed on it). So the probe's
# connection stays open for the life of the process (one idle client, closed at exit), and
# a refused connection is retried for a second before the display is called unreachable.
_held_connections: dict[str, int] = {}
_CONNECT_ATTEMPTS = 10
_CONNECT_RETRY_S = 0.1


def x_server_reachable(display: str) -> str | None:
    """None when the X server at ``display`` accepts a connection, else why not."""
    try:
        libxcb = ctypes.CDLL("libxcb.so.1")
    except OSError:
        return None  # reported as a missing library by check_plugin
    libxcb.xcb_connect.restype = ctypes.c_void_p
    libxcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    libxcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    libxcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    held = _held_connections.get(display)
    if held is not None and not libxcb.xcb_connection_has_error(held):
        return None
    for attempt in range(_CONNECT_ATTEMPTS):
        connection = libxcb.xcb_connect(display.encode(), None)
        if not libxcb.xcb_connection_has_error(connection):
            _held_connections[display] = connection
            return None
        libxcb.xcb_disconnect(connection)
        if attempt + 1 < _CONNECT_ATTEMPTS:
            time.sleep(_CONNECT_RETRY_S)
    return f"cannot connect to the X display {display!r} (is the X server running, and may this user use it?)"


def candidate_platforms(env: Mapping[str, str]) -> list[str]:
    """Platforms in the order Qt would try them for this session."""
    requested = env.get("QT_QPA_PLATFORM", "").strip()
    if requested:
        return [p.split(":")[0] for p in requested.split(";") if p]
    candidates = []
    wayland_session = env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE") == "wayland"
    if wayland_session and env.get("WAYLAND_DISPLAY"):
        candidates.append("wayland")
    if env.get("DISPLAY"):
        candidates.append("xcb")  # on Wayland: XWayland
    return candidates


def ensure_platform(env: MutableMapping[str, str] | None = None) -> str:
    """Pick a platform that will load, export it as QT_QPA_PLATFORM and return it.

    Raises DisplayError (never lets Qt abort) when none of the candidates can load.
    """
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux"):
        return env.get("QT_QPA_PLATFORM", "")
    candidates = candidate_platforms(env)
    if not candidates:
        raise DisplayError("no display found (neither $DISPLAY nor $WAYLAND_DISPLAY is set)", hint=OFFSCREEN_HINT)
    reports = []
    usable = []
    for platform in candidates:
        report = check_plugin(platform)
        if report.usable and platform == "xcb":
            report.problem = x_server_reachable(env.get("DISPLAY", ""))
        if report.usable and platform == "wayland":
            report.problem = wayland_socket_problem(env)
        if report.usable:
            usable.append(platform)
        else:
            reports.append(report)
    if not usable:
        raise DisplayError(describe(reports), hint=OFFSCREEN_HINT)
    if not (env.get("QT_QPA_PLATFORM") and usable[0] == candidates[0]):
        # Qt tries a ';'-separated list in order: on Wayland, XWayland stays the fallback.
        env["QT_QPA_PLATFORM"] = ";".join(usable)
    return usable[0]


def wayland_socket_problem(env: Mapping[str, str]) -> str | None:
    name = env.get("WAYLAND_DISPLAY", "wayland-0")
    socket_path = Path(name) if name.startswith("/") else Path(env.get("XDG_RUNTIME_DIR", "/run/user/0")) / name
    if not socket_path.exists():
        return f"no Wayland compositor socket at {socket_path}"
    return None


def describe(reports: list[PlatformReport]) -> str:
    """One paragraph a person can act on: what is missing for which platform, and the fix."""
    parts = []
    for report in reports:
        if report.missing_libraries:
            text = (f"the Qt {report.platform!r} platform cannot load: missing system libraries "
                    f"{', '.join(report.missing_libraries)}")
            line = install_line(report.missing_libraries)
            unknown = [n for n in report.missing_libraries if n not in DEBIAN_PACKAGES]
            if line:
                text += f"; install them with `{line}`"
            if unknown:
                text += f"; find the package of {', '.join(unknown)} with `apt-file search`"
            parts.append(text)
        else:
            parts.append(f"the Qt {report.platform!r} platform cannot start: {report.problem}")
    return "; ".join(parts)


__all__ = ["ensure_platform", "check_plugin", "candidate_platforms", "missing_libraries", "apt_packages",
           "install_line", "x_server_reachable", "PlatformReport", "DEBIAN_PACKAGES"]
