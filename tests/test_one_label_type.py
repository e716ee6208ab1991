"""One label type travels: a label table is ``Mapping[int, Label]`` (medseg.core.labels), not a value -> name dict.

A ``dict[int, str]`` beside the Label drops the label's colour, codes, group and provenance on the way, and
each holder rebuilt it (``{v: label.name for v, label in ...}``) before the next call (issue 50, item 5: 51
such annotations, 17 rebuilds; a model card's groups beside each Label's group). Such a dict stays only where
a name map is what a file or a peer gives (read there and turned into Labels once) or where names, not
labels, are the subject (a training run's heads by name). These checks read the source (ast).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "medseg"

# module: (how many value -> name annotations it keeps, why each is a boundary and not a label table)
NAME_MAPS_ALLOWED = {
    "medseg/core/labels.py": (1, "label_table(): the one conversion of a name map into Labels"),
    "medseg/io/deidentify.py": (2, "a DICOM tag -> its profile action letter: no label at all"),
    "medseg/io/header_facts.py": (1, "what a NIfTI header's label extension states, as the file says it"),
    "medseg/io/image_headers.py": (2, "reads that extension from the header bytes"),
    "medseg/io/nifti_label_table.py": (2, "parses that extension (TotalSegmentator's NIfTI label table)"),
    "medseg/io/phantom.py": (1, "the phantom's names as its specification; its label map's meta holds Labels"),
    "medseg/model/datasets.py": (11, "a training dataset's label list (dataset.json / its folders): names are "
                                     "the heads' identity, matched across cases by name"),
    "medseg/model/training_set.py": (1, "the training set's label list, by name, for the dataset file"),
    "medseg/model/training/heads.py": (4, "which network heads a fine-tune adds or drops: by name"),
    "medseg/model/training/run.py": (1, "the base model's heads, by name"),
    "medseg/model/training/schedule.py": (1, "a run's trained labels, value -> name as training keys them, coded from Labels"),
    "medseg/model/training/validation.py": (2, "the training's validation Dice per head name"),
    "medseg/model/dicom_seg_case.py": (1, "a DICOM SEG's segment numbers -> labels as the training case file says"),
    "medseg/model/nnunet_import.py": (3, "nnU-Net's dataset.json 'labels' (a peer's class map), read once"),
    "medseg/model/package.py": (1, "model.json's 'labels' as written, read once into Labels"),
    "medseg/model/package_model.py": (2, "ModelPackage.names: the one name view for name-keyed model.json steps "
                                         "and training heads"),
    "medseg/model/postprocess.py": (3, "model.json's post-processing steps name labels by name"),
    "medseg/model/rule_labels.py": (1, "the starter model's names as its specification"),
    "medseg/model/totalseg/classes.py": (2, "TotalSegmentator's class maps (a peer's, read as data)"),
    "medseg/model/totalseg/convert.py": (2, "TotalSegmentator's class maps, checked against the weights"),
    "medseg/model/totalseg/postprocess.py": (3, "TotalSegmentator's own post-processing, by its class names"),
    "medseg/model/totalseg/tasks.py": (3, "TotalSegmentator's task table: its class maps as it writes them"),
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).as_posix(), ast.parse(path.read_text(), filename=str(path))


def _is_name_map(node: ast.AST) -> bool:
    """``dict[int, str]``, ``Mapping[int, str]`` (and the typing spellings)."""
    if not isinstance(node, ast.Subscript) or not isinstance(node.slice, ast.Tuple) or len(node.slice.elts) != 2:
        return False
    holder = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
    key, value = node.slice.elts
    return (holder in ("dict", "Dict", "Mapping", "MutableMapping") and isinstance(key, ast.Name) and key.id == "int"
            and isinstance(value, ast.Name) and value.id == "str")


def _annotations(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
        return [a.annotation for a in arguments if a is not None and a.annotation is not None] + (
            [node.returns] if node.returns is not None else [])
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def _name_maps() -> Counter:
    found: Counter = Counter()
    for module, tree in _modules():
        for node in ast.walk(tree):
            for annotation in _annotations(node):
                found[module] += sum(1 for part in ast.walk(annotation) if _is_name_map(part))
    return +found


def test_the_checker_sees_a_name_map():
    """The check itself: each spelling of a value -> name annotation is counted, a label table is not."""
    source = ("def f(a: dict[int, str], b: 'x', c: Mapping[int, str] | None = None) -> typing.Dict[int, str]: ...\n"
              "d: dict[int, Label] = {}\ne: dict[str, int] = {}\n")
    tree = ast.parse(source)
    assert sum(1 for node in ast.walk(tree) for a in _annotations(node) for p in ast.walk(a) if _is_name_map(p)) == 3


def test_labels_travel_as_labels():
    """No module annotates a value -> name dict except the boundaries above, each as often as it says: a new one
    is a label table that lost its Labels (pass the Mapping[int, Label]); one fewer, update the list."""
    found = _name_maps()
    allowed = {module: count for module, (count, _why) in NAME_MAPS_ALLOWED.items()}
    assert dict(found) == allowed


def test_a_model_card_has_no_second_group_table():
    """A label's group lives on its Label (the label list and the structure picker read it there)."""
    import dataclasses

    from medseg.model.kinds import ModelCard

    assert "groups" not in {f.name for f in dataclasses.fields(ModelCard)}
