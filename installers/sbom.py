"""The bundle's bill of materials: a CycloneDX SBOM and the readable licence list, made from exactly
what PyInstaller put inside, and the build's licence gate.

    .venv/bin/python installers/sbom.py --bundle dist/medseg --workpath build/pyinstaller/medseg \
        --sbom dist/medseg-<version>-linux-x86_64.cdx.json

Every file in the bundle and every module in its archive is traced to where it came from:
 * a Python distribution (its RECORD lists the file), with the libraries wheels vendor from
   other projects (medseg.third_party.VENDORED) as components of their own;
 * CPython (the interpreter, the standard library, its extension modules);
 * a system package (a shared library PyInstaller copied from the build machine): its Debian
   package, version and reviewed licence (SYSTEM_LICENCES; /usr/share/doc/<package>/copyright
   goes into the licence list);
 * medseg itself.
A file traced to nothing, a system package without a reviewed licence, or a licence the policy
(installers/licences.py) refuses fails the build with the names. The licence list goes into the
bundle (THIRD_PARTY_LICENSES.txt, shown by Help ▸ About) and next to the SBOM.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
from collections import defaultdict
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "installers"))
sys.path.insert(0, str(ROOT))

from licences import violations  # noqa: E402

from medseg.third_party import (  # noqa: E402
    NOTICE_FILE,
    Component,
    declared_licence,
    licence_texts,
    notice_text,
    standard_texts,
    vendored_libraries,
)

# Debian packages whose libraries a bundle may carry, with the licence of the library itself as
# read in /usr/share/doc/<package>/copyright (those files also name the licences of build scripts
# and test programs that are not in the library, so they cannot be parsed blindly).
SYSTEM_LICENCES = {
    "libssl3": "Apache-2.0", "libffi8": "MIT", "zlib1g": "Zlib", "libbz2-1.0": "bzip2-1.0.6", "liblzma5": "0BSD",
    "libexpat1": "MIT", "libsqlite3-0": "blessing", "libuuid1": "BSD-3-Clause", "libmpdec3": "BSD-2-Clause",
    "libgcc-s1": "GPL-3.0-or-later WITH GCC-exception-3.1", "libstdc++6": "GPL-3.0-or-later WITH GCC-exception-3.1",
    "libncursesw6": "X11", "libtinfo6": "X11", "libtirpc3": "BSD-3-Clause", "libnsl2": "BSD-3-Clause",
    "libzstd1": "BSD-3-Clause OR GPL-2.0-only", "libxcb1": "MIT", "libxau6": "MIT", "libxdmcp6": "MIT",
    "libjpeg62-turbo": "IJG AND BSD-3-Clause AND Zlib", "libpng16-16": "libpng-2.0", "libbrotli1": "MIT",
    "libharfbuzz0b": "MIT", "liblz4-1": "BSD-2-Clause", "libpcre2-8-0": "BSD-3-Clause", "libcap2": "BSD-3-Clause OR GPL-2.0-only",
}
# Debian package name -> the component name the licence policy knows (GCC's runtime libraries).
SYSTEM_COMPONENT = {"libgcc-s1": "libgcc_s", "libstdc++6": "libstdc++"}
CPYTHON_LICENCE = "PSF-2.0"


def _record_index() -> tuple[dict[str, metadata.Distribution], dict[str, metadata.Distribution]]:
    """Every file an installed distribution lists -> that distribution: by absolute path, and by
    the path relative to its site-packages (how the bundle lays files out)."""
    absolute: dict[str, metadata.Distribution] = {}
    relative: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        base = os.path.realpath(dist.locate_file(""))
        for file in dist.files or []:
            path = os.path.normpath(os.path.join(base, str(file)))
            absolute[path] = dist
            if path.startswith(base + os.sep):
                relative[path[len(base) + 1:]] = dist
    return absolute, relative


def _toc(path: Path) -> list[tuple]:
    """A PyInstaller .toc file: a Python literal whose TOC lists hold (name, source, typecode)."""
    data = ast.literal_eval(path.read_text())
    entries: list[tuple] = []

    def walk(node: object) -> None:
        if isinstance(node, (list, tuple)):
            if len(node) == 3 and all(isinstance(x, (str, type(None))) for x in node) and node[2] in (
                    "PYMODULE", "PYSOURCE", "BINARY", "EXTENSION", "DATA", "DEPENDENCY", "SYMLINK", "ZIPFILE", "OPTION"):
                entries.append(tuple(node))
                return
            for item in node:
                walk(item)
    walk(data)
    return entries


def _debian_package(library: Path) -> tuple[str, str] | None:
    """(package, version) that installed a system library, from dpkg."""
    for candidate in (library, library.resolve()):
        done = subprocess.run(["dpkg", "-S", str(candidate)], capture_output=True, text=True)
        if done.returncode == 0:
            package = done.stdout.split(":", 1)[0].strip()
            version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True,
                                     text=True).stdout.strip()
            return package, version
    return None


class Inventory:
    """What is inside the bundle, component by component."""

    def __init__(self) -> None:
        self.python: dict[str, metadata.Distribution] = {}
        self.system: dict[str, tuple[str, str, list[str]]] = {}  # package -> (version, licence, files)
        self.cpython_files: list[str] = []
        self.medseg_files: list[str] = []
        self.untraced: list[str] = []


def inventory(bundle: Path, workpath: Path) -> Inventory:
    internal = bundle / "_internal"
    index, relative = _record_index()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    prefix = Path(sys.base_prefix).resolve()
    stage = (workpath.parent / "stage").resolve()
    found = Inventory()
    sources = {}  # bundle-relative name -> source path, from the build's table of contents
    for toc in sorted(workpath.glob("*.toc")):
        for name, source, _ in _toc(toc):
            if source:
                sources.setdefault(name, source)

    def trace(name: str, source: str | None) -> None:
        resolved = os.path.realpath(source) if source else None
        dist = index.get(resolved) if resolved else None
        dist = dist or relative.get(name)
        if dist is not None:
            found.python.setdefault(dist.metadata["Name"], dist)
        elif name.startswith(("medseg/", "medseg.")) or (resolved and resolved.startswith(str(stage))) \
                or name in ("README.md", NOTICE_FILE):
            found.medseg_files.append(name)
        elif resolved and (resolved.startswith(str(stdlib)) or resolved.startswith(str(prefix))) \
                or name.startswith(("python3.", "base_library.zip", "libpython3")):
            found.cpython_files.append(name)
        elif resolved and resolved.startswith(("/lib/", "/usr/lib/", "/lib64/")):
            package = _debian_package(Path(source))
            if package is None:
                found.untraced.append(f"{name} (from {source}: no Debian package owns it)")
                return
            version, licence, files = found.system.get(package[0], (package[1], SYSTEM_LICENCES.get(package[0], ""), []))
            files.append(name)
            found.system[package[0]] = (version, licence, files)
        else:
            found.untraced.append(f"{name} (from {source or 'an unknown source'})")

    for path in sorted(p for p in internal.rglob("*") if p.is_file() or p.is_symlink()):
        if path.is_symlink():
            continue  # PyInstaller's links to a library counted once, at its target
        name = str(path.relative_to(internal))
        trace(name, sources.get(name))
    for name, source, kind in _toc(workpath / "PYZ-00.toc"):
        if source and source != "-":  # namespace packages have no source file
            trace(name.replace(".", "/") + ".py", source)
    return found


def components(found: Inventory) -> list[Component]:
    result = [Component("CPython", sys.version.split()[0], CPYTHON_LICENCE, kind="library",
                        texts={"LICENSE.txt": _cpython_licence()})]
    for name in sorted(found.python, key=str.lower):
        dist = found.python[name]
        if name.lower() == "medseg":
            continue
        licence = declared_licence(dist)
        result.append(Component(name, dist.version, licence, texts=licence_texts(dist) or standard_texts(licence)))
        result += vendored_libraries(dist)
    for package, (version, licence, files) in sorted(found.system.items()):
        copyright_file = Path("/usr/share/doc") / package / "copyright"
        texts = {str(copyright_file): copyright_file.read_text(errors="replace")} if copyright_file.is_file() else {}
        result.append(Component(SYSTEM_COMPONENT.get(package, package), version, licence, kind="library", texts=texts,
                                part_of=f"Debian package {package}: {', '.join(sorted(files))}"))
    return result


def _cpython_licence() -> str:
    for candidate in (Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt", Path(sys.base_prefix) / "LICENSE.txt"):
        if candidate.is_file():
            return candidate.read_text(errors="replace")
    return "Python Software Foundation License Version 2 (https://docs.python.org/3/license.html)"


def cyclonedx_json(parts: list[Component], version: str) -> str:
    """A CycloneDX 1.6 document: medseg as the application, every component as a library it contains."""
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component as CdxComponent
    from cyclonedx.model.component import ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    factory = LicenseFactory()
    bom = Bom()
    root = CdxComponent(name="medseg", version=version, type=ComponentType.APPLICATION, bom_ref="medseg",
                        licenses=[factory.make_from_string("Apache-2.0")])
    bom.metadata.component = root
    used = []
    for part in parts:
        if part.kind == "python":
            purl = PackageURL(type="pypi", name=re.sub(r"[-_.]+", "-", part.name).lower(), version=part.version)
        elif part.part_of.startswith("Debian package"):
            purl = PackageURL(type="deb", namespace="debian", name=part.part_of.split()[2].rstrip(":"), version=part.version)
        elif part.name == "CPython":
            purl = PackageURL(type="generic", name="cpython", version=part.version)
        else:
            purl = None
        ref = f"{part.kind}:{part.label}" + (f" in {part.part_of.split(':')[0]}" if part.part_of else "")
        component = CdxComponent(
            name=part.name, version=part.version or None, type=ComponentType.LIBRARY, bom_ref=ref, purl=purl,
            licenses=[factory.make_from_string(part.licence)] if part.licence else [],
            properties=[Property(name="medseg:part-of", value=part.part_of)] if part.part_of else [])
        bom.components.add(component)
        used.append(component)
    bom.register_dependency(root, used)
    return JsonV1Dot6(bom).output_as_string(indent=1)


def validate(document: str) -> list[str]:
    """Errors of CycloneDX's own JSON schema validator (cyclonedx-python-lib), empty when valid."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(document)
    return [] if error is None else [str(error)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--workpath", type=Path, required=True, help="PyInstaller's work folder of the build")
    parser.add_argument("--sbom", type=Path, required=True, help="where the CycloneDX JSON goes")
    args = parser.parse_args()
    import medseg

    found = inventory(args.bundle, args.workpath)
    parts = components(found)
    problems = [f"not traced to any package: {name}" for name in found.untraced]
    problems += [f"{c.part_of}: no reviewed licence in installers/sbom.py SYSTEM_LICENCES" for c in parts
                 if c.part_of.startswith("Debian package") and not c.licence]
    problems += violations([(c.name, c.licence) for c in parts])
    text = notice_text(parts)
    (args.bundle / "_internal" / NOTICE_FILE).write_text(text, encoding="utf-8")
    args.sbom.parent.mkdir(parents=True, exist_ok=True)
    args.sbom.with_suffix("").with_suffix(".licences.txt").write_text(text, encoding="utf-8")
    document = cyclonedx_json(parts, medseg.__version__)
    problems += [f"SBOM invalid: {e}" for e in validate(document)]
    args.sbom.write_text(document, encoding="utf-8")
    by_kind = defaultdict(int)
    for c in parts:
        by_kind["system library" if c.part_of.startswith("Debian") else c.kind] += 1
    print(f"sbom: {len(parts)} components ({', '.join(f'{n} {k}' for k, n in sorted(by_kind.items()))}); "
          f"{len(found.cpython_files)} CPython files, {len(found.medseg_files)} medseg files -> {args.sbom}")
    if problems:
        print("sbom: the bundle may not ship as it is:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(json.dumps({"components": len(parts), "licence_list": str(args.sbom.with_suffix("").with_suffix(".licences.txt"))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
