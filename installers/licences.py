"""Licence policy for what medseg ships (its bundle and the environment it is built from).

medseg is Apache-2.0. A component may ship when every licence it must be taken under is
permissive. Copyleft (GPL, AGPL, LGPL, MPL, ...) and unknown or undeclared licences are refused
unless ALLOWED names the component, the licence it was reviewed under, and why shipping it is
acceptable; a component whose declared licence changes falls out of the allow-list and is
refused again until someone looks.

Used by tests/installers/test_licences.py (CI, on the environment: no build) and by
installers/sbom.py (the build: on exactly what went into the bundle; it fails the build).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PERMISSIVE = {
    "MIT", "MIT-0", "MIT-CMU", "BSD", "BSD-2-Clause", "BSD-3-Clause", "0BSD", "Apache-2.0", "PSF-2.0", "Python-2.0",
    "ISC", "Zlib", "Unlicense", "CC0-1.0", "BSL-1.0", "HPND", "IJG", "Libpng", "libpng-2.0", "libtiff", "curl", "X11",
    "FTL", "bzip2-1.0.6", "OpenSSL", "SSLeay", "public-domain", "LicenseRef-Public-Domain", "blessing", "NCSA", "Unicode-3.0",
    "Unicode-DFS-2016", "MIT-Khronos-old", "Apache-2.0 WITH LLVM-exception",
}


@dataclass(frozen=True)
class Exception_:
    licence: str  # the declared licence this review covers (exactly as declared)
    concluded: str  # the licence medseg takes it under
    reason: str


# Reviewed exceptions: component name (lower case) -> why it may ship.
_GCC_RUNTIME = Exception_(
    "GPL-3.0-or-later WITH GCC-exception-3.1", "GPL-3.0-or-later WITH GCC-exception-3.1",
    "GCC runtime library (inside a wheel): the GCC Runtime Library Exception 3.1 lets programs compiled "
    "with GCC ship it under their own terms; it is an unmodified shared library.")
ALLOWED: dict[str, Exception_] = {
    "pyside6-essentials": Exception_(
        "LGPL-3.0-only OR GPL-2.0-only OR GPL-3.0-only", "LGPL-3.0-only",
        "Qt for Python, taken under LGPL-3.0: the bundle is one folder in which the Qt and PySide6 shared "
        "libraries stay separate files a user can replace with their own build (LGPL-3.0 section 4(d)); they "
        "are unmodified, and their source is Qt's and PySide's public releases of the same version."),
    "shiboken6": Exception_(
        "LGPL-3.0-only OR GPL-2.0-only OR GPL-3.0-only", "LGPL-3.0-only",
        "PySide6's binding runtime: the same terms and the same replaceable layout as PySide6."),
    "certifi": Exception_(
        "MPL-2.0", "MPL-2.0",
        "Mozilla's CA bundle, unmodified; MPL-2.0 is file-level copyleft: it binds only changes to its own "
        "files, which medseg does not make. Source: the certifi release of the same version."),
    "pyinstaller": Exception_(
        "GPL-2.0", "GPL-2.0-or-later WITH Bootloader-exception",
        "PyInstaller's bootloader, run-time hooks and loader modules inside every bundle it makes: its "
        "COPYING.txt grants the Bootloader Exception, unlimited permission to embed them in other programs "
        "and distribute the combination without restriction from them (unmodified here)."),
    "tqdm": Exception_(
        "MPL-2.0 AND MIT", "MPL-2.0 AND MIT",
        "Progress bars that torch and onnx import when present (the build environment has them); unmodified "
        "Python files under file-level copyleft, source in the tqdm release of the same version."),
    "fqdn": Exception_(
        "MPL-2.0", "MPL-2.0",
        "A host-name check jsonschema imports when present (build environment); unmodified, file-level "
        "copyleft, source in the fqdn release of the same version."),
    "libgfortran": _GCC_RUNTIME,
    "libgomp": _GCC_RUNTIME,
    "libgcc_s": _GCC_RUNTIME,
    "libstdc++": _GCC_RUNTIME,
    "libquadmath": Exception_(
        "LGPL-2.1-or-later", "LGPL-2.1-or-later",
        "GCC's quad-precision maths library, needed by libgfortran (inside scipy's and numpy's wheels): an "
        "unmodified shared library, a separate replaceable file in the one-folder bundle."),
}



def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_ALLOWED_BY_KEY = {_key(name): exception for name, exception in ALLOWED.items()}
_WORD = re.compile(r"\(|\)|\s+(?:AND|OR)\s+|[^()\s]+(?:\s+WITH\s+[^()\s]+)?")


def _terms(expression: str) -> list[str]:
    return [t.strip() for t in _WORD.findall(expression) if t.strip() not in ("(", ")", "")]


def is_permissive(expression: str) -> bool:
    """True when the component can be taken under permissive terms only: every AND term is
    permissive, or, for an OR, at least one alternative is (medseg then chooses it)."""
    expression = expression.strip()
    if not expression:
        return False
    if " OR " in expression and "(" not in expression:
        return any(is_permissive(alternative) for alternative in expression.split(" OR "))
    terms = _terms(expression)
    licences = [t for t in terms if not re.fullmatch(r"(AND|OR)", t.strip())]
    return bool(licences) and all(t in PERMISSIVE or t.split(" WITH ")[0] in PERMISSIVE for t in licences)


def verdict(name: str, licence: str) -> str | None:
    """None when the component may ship; otherwise why not, naming the component."""
    if is_permissive(licence):
        return None
    exception = _ALLOWED_BY_KEY.get(_key(name))
    if exception is not None and exception.licence == licence:
        return None
    what = f"declares {licence!r}" if licence else "declares no licence"
    if exception is not None:
        return f"{name} {what}, but its review in installers/licences.py covers {exception.licence!r}: review it again"
    kind = "copyleft" if re.search(r"GPL|MPL|EPL|CDDL|CC-BY-SA|OSL|EUPL", licence) else "unknown"
    return f"{name} {what} ({kind}): not allowed in the bundle unless installers/licences.py ALLOWED says why"


def violations(components: list[tuple[str, str]]) -> list[str]:
    """Every (name, licence) that may not ship, with the reason."""
    return [problem for name, licence in components if (problem := verdict(name, licence))]
