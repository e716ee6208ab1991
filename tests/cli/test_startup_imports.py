"""`medseg --help` / `--version` stay fast: building the parser imports no heavy library.

Every command module is imported to build the parser (``register(subparsers)``), so a
single module-level ``import torch`` in any of them would cost every invocation seconds.
These tests check what was imported (sys.modules in a fresh interpreter), not how long it
took: a behavioural check that holds on any machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Libraries that take from ~0.2 s to several seconds to import, and what needs them.
HEAVY = ("torch", "SimpleITK", "pydicom", "PySide6", "shiboken6", "pyqtgraph", "scipy", "onnxruntime", "onnx",
         "highdicom", "pynetdicom", "nibabel", "safetensors", "pylibjpeg", "openjpeg", "libjpeg", "jpeg_ls")

_PROBE = """
import json, sys
{body}
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
print(json.dumps({{"loaded": loaded, "commands": {commands}}}))
"""


def _probe(body: str, commands: str = "None") -> dict:
    code = _PROBE.format(body=body, heavy=HEAVY, commands=commands)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_building_the_parser_imports_no_heavy_library():
    report = _probe(
        "import medseg.cli\nparser = medseg.cli.build_parser()\nparser.format_help()",
        commands="sorted(parser._subparsers._group_actions[0].choices)",
    )
    assert report["loaded"] == [], f"`medseg --help` imported {report['loaded']}: import them inside run()"
    # Every command module was really imported and registered (the check is not vacuous).
    import medseg.cli

    assert len(report["commands"]) >= len(medseg.cli.COMMAND_MODULES) >= 5


def test_importing_medseg_io_is_lazy_but_complete():
    """``import medseg.io`` costs nothing heavy; its names still resolve (and load what they need)."""
    report = _probe("import medseg.io")
    assert report["loaded"] == []
    after = _probe("from medseg.io import load, scan, read_image\nfrom medseg.core.volume import Volume\nassert callable(load) and callable(scan)")
    assert {"pydicom", "SimpleITK"} <= set(after["loaded"])


def test_load_is_the_function_even_after_its_module_was_imported():
    """``medseg.io.load`` names both a submodule and a function; the function must win."""
    report = _probe("import importlib, medseg.io\nmodule = importlib.import_module('medseg.io.load')\n"
                    "from medseg.io import load\nassert load is module.load, load")
    assert report["loaded"] == []


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["segment", "--help"], ["train", "--help"]])
def test_version_and_help_run_without_heavy_imports(argv):
    code = ("import runpy, sys\nsys.argv = ['medseg', *%r]\ntry:\n    runpy.run_module('medseg', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code in (0, None), e.code\n" % (argv,))
    report = _probe(code)
    assert report["loaded"] == [], f"`medseg {' '.join(argv)}` imported {report['loaded']}"


def test_version_prints_the_package_version():
    import medseg

    result = subprocess.run([sys.executable, "-m", "medseg", "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.strip() == f"medseg {medseg.__version__}"
