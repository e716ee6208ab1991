"""Concepts with one home: each is defined in one module and everything else imports it.

A copy drifts: the GUI's image suffixes, the datasets' and the CLI's were three lists; the
planner's anisotropy rule and the preprocessor's were two; the largest label value was 255 in
the document and 65535 in the label map. These checks read the source (ast) for the copies.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "medseg"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).as_posix(), ast.parse(path.read_text(), filename=str(path))


def _homes(predicate) -> list[str]:
    return sorted({name for name, tree in _modules() for node in ast.walk(tree) if predicate(node)})


def _assigned_names(node) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return [node.target.id]
    return []


def test_image_suffixes_are_listed_once():
    """".mhd" is in no other list: any string holding it is a copy of the table of formats (issue 36)."""
    holders = _homes(lambda n: isinstance(n, ast.Constant) and isinstance(n.value, str) and ".mhd" in n.value)
    assert holders == ["medseg/io/formats.py"]


def test_image_file_dialogs_and_datasets_know_every_suffix(tmp_path):
    from medseg.gui.study.opening import IMAGE_FILTER
    from medseg.gui.common.save_dialog import strip_format_suffix
    from medseg.gui.study.segmentation_files import OPEN_FILTER
    from medseg.io.image_files import IMAGE_SUFFIXES
    from medseg.io.label_files import sidecar_path
    from medseg.model.datasets import _strip_suffix

    for suffix in IMAGE_SUFFIXES:
        assert f"*{suffix} " in IMAGE_FILTER.replace(")", " ") and f"*{suffix} " in OPEN_FILTER.replace(")", " ")
        assert _strip_suffix(f"case_01{suffix.upper()}") == ("case_01", suffix)
        assert sidecar_path(tmp_path / f"seg{suffix}") == tmp_path / "seg.labels.json"
        assert strip_format_suffix(f"liver{suffix}") == "liver"


def test_one_anisotropy_rule():
    """nnU-Net's ANISO_THRESHOLD and its max/min spacing test live in medseg/model/plan.py only."""
    defined = _homes(lambda n: "ANISOTROPY_THRESHOLD" in _assigned_names(n))
    assert defined == ["medseg/model/plan.py"]
    rules = _homes(lambda n: isinstance(n, ast.FunctionDef) and "anisotropic" in n.name and "suits" not in n.name)
    assert rules == ["medseg/model/plan.py"]


def test_one_largest_label_value():
    """Label values run 1…65535 everywhere (the document once stopped at 255, the label map at 65535).

    That the range is really accepted everywhere: tests/edit/test_cli_edit.py (CLI, recipe, files) and
    tests/gui/test_overlay_and_presets.py (a uint16 label map opened and drawn in the window).
    """
    from medseg.core.label_values import MAX_LABEL_VALUE

    assert MAX_LABEL_VALUE == 65535  # uint16: the widest label maps users bring (see core/label_values.py)
    defined = _homes(lambda n: "MAX_LABEL_VALUE" in _assigned_names(n))
    assert defined == ["medseg/core/label_values.py"]
    spelled = _homes(lambda n: isinstance(n, ast.Constant) and n.value == MAX_LABEL_VALUE)
    # the number itself only where it is defined (TCP ports run 1…65535 too)
    assert [m for m in spelled if "/pacs" not in m] == ["medseg/core/label_values.py"]


def test_no_code_asks_which_tool_is_active():
    """The mouse tools are catalogue entries whose gesture names their handler (medseg/edit/gestures.py): no
    module compares a value with a tool's name (there were 15 branches on the active tool)."""
    from medseg.edit.operations import tools

    names = set(tools())

    def names_a_tool(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_a_tool(element) for element in node.elts)
        return False

    branches = _homes(lambda n: isinstance(n, ast.Compare) and any(map(names_a_tool, [n.left, *n.comparators])))
    # medseg.model cannot see the edit catalogue (the layers forbid it): "lasso" there is one of
    # nnInteractive's prompt kinds (medseg/model/interactive/prompt_spec.py), not a mouse tool.
    assert [b for b in branches if not b.startswith("medseg/model/")] == []
