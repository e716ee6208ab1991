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
    assert holders == ["medseg/io/file_types.py"]  # the table's lower half: what a file is, by its name


def test_image_file_dialogs_and_datasets_know_every_suffix(tmp_path):
    from medseg.gui.common.save_dialog import strip_format_suffix
    from medseg.gui.study.opening import IMAGE_FILTER
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
    """The mouse tools are catalogue entries whose gesture names their effect (medseg/edit/effects/): no
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


# A comparison with a format's suffix or key outside its table is a second dispatch (issue 50): each allowed
# one says why it is not choosing a reader, a writer or a check.
_FORMAT_COMPARISONS_ALLOWED = {
    # a skipped file named .dcm is reported as a broken DICOM file, whatever its format would be
    ("medseg/workflows/batch_cases.py", ".dcm"),
    # the package's own file layout (model_<configuration>.onnx members), not an export format
    ("medseg/model/package.py", ".onnx"),
}


def _format_names() -> set[str]:
    from medseg.io.formats import DICOM_SEG, FORMATS, LABEL_MAP, MESH_FORMATS
    from medseg.model.export_formats import EXPORT_TABLE

    return ({s for f in FORMATS for s in f.suffixes if s} | {n for f in MESH_FORMATS for n in (f.key, f.suffix)}
            | {f.suffix for f in EXPORT_TABLE if f.suffix} | {f.key for f in EXPORT_TABLE} | {DICOM_SEG, LABEL_MAP})


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def test_formats_are_dispatched_by_their_tables():
    """No module outside the tables of formats (medseg/io/formats.py on medseg/io/file_types.py,
    medseg/model/export_formats.py) compares a
    name, suffix or key with a format's (``fmt == "onnx"``, ``suffix in (".stl", ".obj")``,
    ``name.endswith(".nii.gz")``): the tables map each format to its functions, and callers ask them."""
    names = _format_names()
    tables = {"medseg/io/formats.py", "medseg/io/file_types.py", "medseg/model/export_formats.py"}
    found = set()
    for module, tree in _modules():
        for node in ast.walk(tree):
            compared: list[str] = []
            if isinstance(node, ast.Compare):
                compared = [s for part in (node.left, *node.comparators) for s in _strings(part)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "endswith":
                compared = [s for argument in node.args for s in _strings(argument)]
            found |= {(module, s.lower()) for s in compared if s.lower() in names and module not in tables}
    assert found == _FORMAT_COMPARISONS_ALLOWED


def test_format_rows_hold_their_functions():
    """Each row names callables, not strings; a row that writes images or segmentations can also check them."""
    from medseg.io.formats import FORMATS, MESH_FORMATS
    from medseg.model.export_formats import EXPORT_TABLE

    for row in FORMATS:
        functions = [row.check, row.read_header, row.read_image, row.write_image, row.open_segmentation,
                     row.write_segmentation, row.unchanged_model_result, row.recognise]
        assert all(f is None or callable(f) for f in functions), row.key
        assert callable(row.check), row.key
        assert (row.write_image is None) == (row.read_image is None), row.key  # images: read and write both
    assert all(callable(row.encode) for row in MESH_FORMATS)
    assert all(callable(row.export) and (row.write is None) == (row.parity_runner is None) for row in EXPORT_TABLE)


def test_qsettings_is_known_to_one_module_and_the_thread_budget_is_set_from_the_settings_model():
    """Settings have one owner (issue 50): the model, medseg.settings; QSettings only keeps it (and the window's
    placement and presets), in medseg/gui/common/app_settings.py. The budget is written by the function that
    follows the model's threads, nowhere else (the Segment panel once set it itself)."""
    def names(node) -> set[str]:
        if isinstance(node, ast.Name):
            return {node.id}
        if isinstance(node, ast.Attribute):
            return {node.attr}
        if isinstance(node, ast.alias):
            return {node.name.rsplit(".", 1)[-1]}
        return set()

    assert _homes(lambda n: "QSettings" in names(n)) == ["medseg/gui/common/app_settings.py"]
    # ... nor its store, through the module's own accessor (app_settings.settings().value(...))
    assert _homes(lambda n: isinstance(n, ast.Attribute) and n.attr == "settings"
                  and isinstance(n.value, ast.Name) and n.value.id == "app_settings") == []
    assert _homes(lambda n: isinstance(n, ast.Call) and names(n.func) & {"configure", "set_count"}) == [
        "medseg/settings.py", "medseg/threads.py"]
