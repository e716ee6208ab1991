"""Licences of what medseg ships, checked on the environment (fast, no build): the runtime closure
of medseg's requirements and the libraries their wheels vendor pass the policy in
installers/licences.py; the policy refuses GPL/AGPL/LGPL and unknown licences outside its
reviewed allow-list; the SBOM the build writes is valid by CycloneDX's own schema validator;
and the build's tracing of bundle files to packages works on a small stand-in bundle."""

from __future__ import annotations

import json
import shutil
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "installers"))

import licences  # noqa: E402
import sbom  # noqa: E402

from medseg.third_party import declared_licence, notice_text, python_components  # noqa: E402


@pytest.fixture(scope="module")
def runtime() -> list:
    return python_components()


def test_every_runtime_component_passes_the_licence_policy(runtime):
    names = {c.name.lower() for c in runtime}
    assert {"pydicom", "torch", "pyside6_essentials", "simpleitk", "pillow", "pyjpegls", "pylibjpeg-openjpeg"} <= names
    assert "pylibjpeg-libjpeg" not in names  # GPL-3.0: replaced by GDCM (SimpleITK), Pillow and pyjpegls
    assert licences.violations([(c.name, c.licence) for c in runtime]) == []


def test_every_runtime_component_declares_a_licence(runtime):
    assert [c.name for c in runtime if not c.licence] == []


def test_allow_list_covers_what_is_installed_as_reviewed(runtime):
    """Each exception names the licence the package declares today; a changed licence is refused."""
    declared = {c.name.lower().replace("_", "-"): c.licence for c in runtime}
    for name in ("pyside6-essentials", "shiboken6", "certifi"):
        assert licences.ALLOWED[name].licence == declared[name]
    assert all(len(e.reason) > 80 for e in licences.ALLOWED.values())


@pytest.mark.parametrize("name, licence", [
    ("pylibjpeg-libjpeg", "GPL-3.0 OR LicenseRef-Proprietary"),  # what pylibjpeg-libjpeg 2.5.0 declares
    ("somepackage", "AGPL-3.0-only"),
    ("somepackage", "GPL-2.0-or-later"),
    ("somepackage", "LGPL-3.0-only"),  # LGPL too: only reviewed exceptions
    ("somepackage", "MIT AND GPL-3.0-only"),
    ("somepackage", ""),
    ("somepackage", "Some Custom Licence"),
    ("PySide6_Essentials", "GPL-3.0-only"),  # an allow-listed package whose licence changed
])
def test_policy_refuses_copyleft_and_unknown(name, licence):
    problem = licences.verdict(name, licence)
    assert problem is not None and name in problem


@pytest.mark.parametrize("licence", ["MIT", "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0", "Apache-2.0 OR BSD-3-Clause",
                                     "FTL OR GPL-2.0-or-later", "Apache-2.0 AND Apache-2.0 WITH LLVM-exception AND BSL-1.0"])
def test_policy_accepts_permissive(licence):
    assert licences.verdict("somepackage", licence) is None


def test_gpl_metadata_as_published_is_refused(tmp_path):
    """The metadata pylibjpeg-libjpeg 2.5.0 publishes, read the way the build reads installed packages."""
    info = tmp_path / "pylibjpeg_libjpeg-2.5.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pylibjpeg-libjpeg\nVersion: 2.5.0\nLicense: GPL V3.0\n"
        "Classifier: License :: OSI Approved :: GNU General Public License v3 (GPLv3)\n"
        "Classifier: License :: Other/Proprietary License\n")
    dist = metadata.PathDistribution(info)
    licence = declared_licence(dist)
    assert licence == "GPL-3.0 OR LicenseRef-Proprietary"
    assert "copyleft" in licences.verdict(dist.metadata["Name"], licence)


def test_sbom_of_the_environment_is_schema_valid(runtime):
    document = sbom.cyclonedx_json(runtime, "0.1.0")
    assert sbom.validate(document) == []
    data = json.loads(document)
    assert data["bomFormat"] == "CycloneDX" and data["specVersion"] == "1.6"
    assert data["metadata"]["component"]["name"] == "medseg"
    by_name = {c["name"]: c for c in data["components"]}
    assert by_name["pydicom"]["purl"] == f"pkg:pypi/pydicom@{metadata.version('pydicom')}"
    assert by_name["pydicom"]["licenses"] == [{"license": {"id": "MIT"}}]
    assert by_name["libgfortran"]["licenses"] == [{"expression": "GPL-3.0-or-later WITH GCC-exception-3.1"}]
    # The validator is not a rubber stamp: a component without its required name is refused.
    del data["components"][0]["name"]
    assert sbom.validate(json.dumps(data)) != []


def test_licence_list_names_every_component_and_carries_the_texts(runtime):
    text = notice_text(runtime)
    for component in runtime:
        assert f"  {component.label}: {component.licence}" in text
    pyside = next(c for c in runtime if c.name == "PySide6_Essentials")  # its wheel has no licence file
    assert "GNU LESSER GENERAL PUBLIC LICENSE" in pyside.texts["LGPL-3 (standard text)"]
    assert "GNU GENERAL PUBLIC LICENSE" in pyside.texts["GPL-3 (standard text)"]
    assert "Permission is hereby granted, free of charge" in text  # the MIT texts themselves
    assert "Apache License" in text


def test_bundle_files_are_traced_to_their_packages(tmp_path):
    """A stand-in bundle: a wheel's module and vendored library, a CPython extension, a system
    library (dpkg) and a file from nowhere, with the build's table of contents."""
    import _ssl

    import numpy
    import pydicom

    bundle, work = tmp_path / "medseg", tmp_path / "work" / "medseg"
    internal = bundle / "_internal"
    work.mkdir(parents=True)
    (tmp_path / "work" / "stage").mkdir()
    numpy_libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    gfortran = next(numpy_libs.glob("libgfortran*"))
    ssl_module = Path(_ssl.__file__)  # CPython's extension module (lib-dynload)
    system_lib = Path("/usr/lib/x86_64-linux-gnu/libssl.so.3")
    entries = [(f"numpy.libs/{gfortran.name}", str(gfortran), "BINARY"),
               (f"python3.11/lib-dynload/{ssl_module.name}", str(ssl_module), "EXTENSION"),
               ("libssl.so.3", str(system_lib), "BINARY"),
               ("mystery.bin", str(tmp_path / "mystery.bin"), "DATA")]
    (tmp_path / "mystery.bin").write_bytes(b"?")
    for name, source, _ in entries:
        (internal / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, internal / name)
    (work / "COLLECT-00.toc").write_text(repr(("args", entries)))
    (work / "PYZ-00.toc").write_text(repr(("args", [("pydicom", pydicom.__file__, "PYMODULE")])))
    found = sbom.inventory(bundle, work)
    assert set(found.python) == {"numpy", "pydicom"}
    assert found.cpython_files == [f"python3.11/lib-dynload/{ssl_module.name}"]
    assert list(found.system) == ["libssl3"] and found.system["libssl3"][1] == "Apache-2.0"
    assert found.untraced == [f"mystery.bin (from {tmp_path / 'mystery.bin'})"]
    parts = {c.name: c for c in sbom.components(found)}
    assert parts["libgfortran"].part_of.startswith("numpy ")
    assert parts["libssl3"].part_of == "Debian package libssl3: libssl.so.3" and parts["libssl3"].texts
