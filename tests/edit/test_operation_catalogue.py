"""Every operation of the catalogue is offered by ``medseg edit`` and the recipe under its one name,
with its parameters in order and its ranges enforced (the Edit panel's side: tests/gui/test_catalogue_panel.py)."""

from __future__ import annotations

import argparse

import pytest

from medseg.cli import build_parser
from medseg.edit.document import SegmentationDocument
from medseg.edit.operations import CATALOGUE, options
from medseg.edit.recipe import Operation, run_operations, validate
from medseg.errors import MedsegError


def _edit_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices["edit"]


def test_every_operation_is_a_command_line_flag_with_its_parameters_in_order():
    edit = _edit_parser()
    flags = {a.option_strings[0]: a for a in edit._actions if a.option_strings}
    for name, op in CATALOGUE.items():
        action = flags[f"--{name}"]
        assert action.dest == name
        assert action.nargs == len(op.positional)
        assert tuple(action.metavar) == tuple(p.metavar for p in op.positional)
        assert op.help.split(";")[0][:40] in action.help.replace("\n", " ")
        for parameter in op.parameters:
            if parameter.option is not None:
                assert flags[parameter.option].dest == parameter.name
    # the command line has no operation the catalogue does not know (the four lists used to drift)
    operation_flags = {a.dest for a in edit._actions if a.option_strings and type(a).__name__ == "_Append"}
    assert operation_flags == set(CATALOGUE)
    # the built-in operations' options, and those of the model-backed operations the parser registers:
    # --allow-modality (segment), and --prompt's
    assert set(options()) == {"--radius", "--sphere", "--fill-3d", "--fill-by-hu", "--roi-margin", "--seed-locality",
                              "--allow-modality", "--prompt-label", "--interactive-model", "--interactive-runtime",
                              "--interactive-mode"}
    for option, parameter in options().items():  # a flag takes no value on the command line
        assert (flags[option].nargs == 0) == (parameter.kind == "flag")


@pytest.mark.parametrize("name", [n for n, op in CATALOGUE.items() if any(p.is_setting for p in op.positional)])
def test_the_recipe_refuses_a_setting_outside_the_catalogue_range(name, abdomen):
    image, label_map = abdomen
    op = CATALOGUE[name]
    raw = []
    bad = [p for p in op.positional if p.is_setting and p.maximum is not None][-1]
    for parameter in op.positional:
        if parameter is bad:
            raw.append(str(parameter.maximum + 1))
        elif parameter.kind in ("label", "new-label"):
            raw.append("liver")
        elif parameter.kind == "point":
            raw.append(",".join(str(v) for v in image.index_to_physical((100, 100, 20))))
        elif parameter.kind == "view":
            raw.append("axial")
        else:
            raw.append(str(parameter.default))
    with pytest.raises(MedsegError, match=f"{bad.metavar} must be from {bad.minimum:g} to {bad.maximum:g}"):
        validate([Operation(name, tuple(raw))], label_map, image)
    raw[op.positional.index(bad)] = str(bad.maximum)  # the range's end is allowed
    validate([Operation(name, tuple(raw))], label_map, image)


def test_recipe_names_and_values_are_the_catalogues(abdomen):
    """A recipe runs each operation through the catalogue's apply: the same change as calling it directly."""
    image, label_map = abdomen
    from medseg.edit.label_map import LabelMap

    document = SegmentationDocument()
    document.set_volume(image)
    document.set_label_map(LabelMap.from_volume(label_map.to_volume(), label_map.labels))
    liver = next(v for v, e in label_map.labels.items() if e.name == "liver")
    ops = validate([Operation("grow", ("liver", "3")), Operation("remove-smaller", (str(liver), "5"))],
                   document.label_map, image)
    assert ops[0].values == {"label": liver, "margin_mm": 3.0} and ops[1].values == {"label": liver, "island_ml": 5.0}
    run_operations(document, ops)
    direct = SegmentationDocument()
    direct.set_volume(image)
    direct.set_label_map(LabelMap.from_volume(label_map.to_volume(), label_map.labels))
    from medseg.edit import tools

    direct.apply(tools.grow(direct.label_map, liver, 3.0, tools.PaintRules(), image), "grow")
    direct.apply(tools.remove_smaller(direct.label_map, liver, 5.0), "remove")
    assert (document.label_map.array == direct.label_map.array).all()
    assert document.label_map.voxel_count(liver) > label_map.voxel_count(liver)
