"""The third-party software medseg runs on: names, versions, declared licences and licence texts.

In a checkout the list is the closure of medseg's own requirements (not the dev or installer
extras), read from the installed packages' metadata. A bundle carries the list its build made
of exactly what went inside (``THIRD_PARTY_LICENSES.txt`` next to the bundled README; see
installers/sbom.py), because a frozen app keeps only a few packages' metadata.
Help ▸ About shows this text; the build also turns it into the CycloneDX SBOM.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

NOTICE_FILE = "THIRD_PARTY_LICENSES.txt"
# Trove classifiers as SPDX identifiers where the classifier names one licence.
CLASSIFIERS = {
    "MIT License": "MIT", "MIT No Attribution License (MIT-0)": "MIT-0", "BSD License": "BSD",
    "Apache Software License": "Apache-2.0", "Python Software Foundation License": "PSF-2.0",
    "ISC License (ISCL)": "ISC", "The Unlicense (Unlicense)": "Unlicense", "zlib/libpng License": "Zlib",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0", "Historical Permission Notice and Disclaimer (HPND)": "HPND",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0", "GNU General Public License v2 (GPLv2)": "GPL-2.0",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0", "GNU Lesser General Public License v2 (LGPLv2)": "LGPL-2.0",
    "GNU Affero General Public License v3": "AGPL-3.0", "Other/Proprietary License": "LicenseRef-Proprietary",
}
# Short free-text License fields some packages declare, as SPDX identifiers.
NAMES = {"apache 2.0": "Apache-2.0", "apache": "Apache-2.0", "apache-2.0": "Apache-2.0", "bsd": "BSD",
         "3-clause bsd license": "BSD-3-Clause", "mit license": "MIT", "gpl v3.0": "GPL-3.0"}
# Shared libraries wheels carry from other projects (auditwheel's ``<package>.libs/``, torch/lib),
# by file-name stem: their own licences, which the wheel's licence file reproduces.
VENDORED = {
    "libgfortran": "GPL-3.0-or-later WITH GCC-exception-3.1", "libgomp": "GPL-3.0-or-later WITH GCC-exception-3.1",
    "libgcc_s": "GPL-3.0-or-later WITH GCC-exception-3.1", "libstdc++": "GPL-3.0-or-later WITH GCC-exception-3.1",
    "libquadmath": "LGPL-2.1-or-later", "libscipy_openblas": "BSD-3-Clause", "libscipy_openblas64_": "BSD-3-Clause",
    "libopenblas": "BSD-3-Clause", "libjpeg": "IJG AND BSD-3-Clause AND Zlib", "libopenjp2": "BSD-2-Clause",
    "libpng16": "libpng-2.0", "libtiff": "libtiff", "libwebp": "BSD-3-Clause", "libwebpdemux": "BSD-3-Clause",
    "libwebpmux": "BSD-3-Clause", "libsharpyuv": "BSD-3-Clause", "liblzma": "0BSD", "libz": "Zlib",
    "libfreetype": "FTL OR GPL-2.0-or-later", "libharfbuzz": "MIT", "libbrotlicommon": "MIT", "libbrotlidec": "MIT",
    "liblcms2": "MIT", "libxcb": "MIT", "libXau": "MIT", "libavif": "BSD-2-Clause", "libzstd": "BSD-3-Clause OR GPL-2.0-only",
    "libicudata": "Unicode-3.0", "libicui18n": "Unicode-3.0", "libicuuc": "Unicode-3.0",
}
_SHARED_LIBRARY = re.compile(r"(^|/)(lib[^/]+?)(-[0-9a-f]{8})*\.so(\.[0-9.]+)?$")
_TEXT_FILE = re.compile(r"(^|/)(licen[cs]e|copying|notice|copyright|authors)[^/]*$", re.IGNORECASE)


@dataclass
class Component:
    name: str
    version: str  # "" for a vendored library whose file name carries no version
    licence: str  # an SPDX expression where the package declares one, else the classifier or name it declares
    kind: str = "python"  # "python" (a distribution) or "library" (a shared library inside one, or from the system)
    texts: dict[str, str] = field(default_factory=dict)  # licence file name -> its text
    part_of: str = ""  # for a library: the distribution or system package it came with

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}" if self.version else self.name


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_licence(dist: metadata.Distribution) -> str:
    """License-Expression, else the licence classifiers, else a short License field; "" when none."""
    meta = dist.metadata
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        return expression
    classifiers = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    named = [CLASSIFIERS.get(c, c) for c in classifiers if c not in ("OSI Approved",)]
    if named:
        return " OR ".join(dict.fromkeys(named))
    text = (meta.get("License") or "").strip()
    if text and "\n" not in text and len(text) <= 60 and text.upper() not in ("LICENSE", "LICENSE.TXT", "UNKNOWN"):
        return NAMES.get(text.lower(), text)
    return ""


def licence_texts(dist: metadata.Distribution) -> dict[str, str]:
    """The licence, notice and copyright files the distribution installs (its License-File entries
    and any such file in its .dist-info or its top-level package folders)."""
    texts: dict[str, str] = {}
    declared = set(dist.metadata.get_all("License-File") or [])
    for file in dist.files or []:
        path = str(file)
        if path.endswith((".py", ".pyc", ".so", ".pyi")) or "/tests/" in path or "/test/" in path:
            continue
        if path.rsplit("/", 1)[-1] in declared or _TEXT_FILE.search(path):
            try:
                texts[path] = Path(dist.locate_file(file)).read_text(encoding="utf-8", errors="replace")
            except (OSError, ValueError):
                continue
    return texts


def vendored_libraries(dist: metadata.Distribution) -> list[Component]:
    """The other projects' shared libraries inside a wheel (see VENDORED), one per library."""
    found: dict[str, Component] = {}
    for file in dist.files or []:
        match = _SHARED_LIBRARY.search(str(file))
        if match and match.group(2) in VENDORED:
            stem = match.group(2)
            version = (match.group(4) or "").lstrip(".")
            found.setdefault(stem, Component(stem, version, VENDORED[stem], kind="library",
                                             part_of=f"{dist.metadata['Name']} {dist.version}"))
    return list(found.values())


# Packages that install no licence file get the standard text of what they declare (Debian's
# /usr/share/common-licenses), LGPL with the GPL it builds on.
COMMON_LICENCES = Path("/usr/share/common-licenses")
STANDARD_TEXTS = {"LGPL-3.0": ("LGPL-3", "GPL-3"), "GPL-3.0": ("GPL-3",), "GPL-2.0": ("GPL-2",), "Apache-2.0": ("Apache-2.0",),
                  "MPL-2.0": ("MPL-2.0",)}


def standard_texts(licence: str) -> dict[str, str]:
    texts = {}
    for spdx, files in STANDARD_TEXTS.items():
        if spdx in licence:
            for name in files:
                path = COMMON_LICENCES / name
                if path.is_file():
                    texts.setdefault(f"{name} (standard text)", path.read_text(encoding="utf-8", errors="replace"))
    return texts


def runtime_distributions(root: str = "medseg") -> list[metadata.Distribution]:
    """``root`` and every distribution its requirements pull in (extras not requested are left out)."""
    from packaging.requirements import Requirement

    found: dict[str, metadata.Distribution] = {}
    pending = [(root, frozenset())]
    while pending:
        name, extras = pending.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional or platform-only requirement
        key = _key(dist.metadata["Name"])
        if key in found and not extras:
            continue
        found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            environments = [{"extra": extra} for extra in extras | {""}]
            if requirement.marker and not any(requirement.marker.evaluate(env) for env in environments):
                continue
            if _key(requirement.name) not in found or requirement.extras:
                pending.append((requirement.name, frozenset(requirement.extras)))
    return sorted(found.values(), key=lambda d: _key(d.metadata["Name"]))


def python_components(root: str = "medseg", libraries: bool = True) -> list[Component]:
    """Every distribution ``root`` needs at run time, each followed by the libraries it vendors."""
    components = []
    for dist in runtime_distributions(root):
        if _key(dist.metadata["Name"]) == _key(root):
            continue
        licence = declared_licence(dist)
        components.append(Component(dist.metadata["Name"], dist.version, licence,
                                    texts=licence_texts(dist) or standard_texts(licence)))
        if libraries:
            components += vendored_libraries(dist)
    return components


def notice_text(components: list[Component]) -> str:
    """The readable licence list: one line per component, then every licence text once."""
    lines = ["Third-party software in medseg", "=" * 30, "",
             "medseg is licensed under Apache-2.0. It includes the software below, each under its own licence.",
             "Name, version, licence (as the package declares it; see the texts that follow):", ""]
    for c in components:
        where = f"  (in {c.part_of})" if c.part_of else ""
        lines.append(f"  {c.label}: {c.licence or 'not declared'}{where}")
    seen: dict[str, str] = {}
    for c in components:
        for name, text in c.texts.items():
            if not text.strip():
                continue
            lines += ["", "-" * 78, f"{c.label}: {name}", "-" * 78]
            lines.append(text.rstrip() if text not in seen else f"(same text as {seen[text]})")
            seen.setdefault(text, f"{c.label}: {name}")
    return "\n".join(lines) + "\n"


def bundled_notice() -> Path | None:
    """The list a bundle's build wrote, when running from a bundle."""
    base = getattr(sys, "_MEIPASS", None)
    if base and (Path(base) / NOTICE_FILE).is_file():
        return Path(base) / NOTICE_FILE
    return None


def third_party_text() -> str:
    notice = bundled_notice()
    if notice is not None:
        return notice.read_text(encoding="utf-8")
    return notice_text(python_components())
