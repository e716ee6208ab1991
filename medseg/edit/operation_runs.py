"""The ``run`` of each built-in operation of the catalogue (:mod:`medseg.edit.operations`).

Each loads the tool it runs when it runs: the catalogue, and with it ``medseg --help``, is read
without the image-processing stack.
"""

from __future__ import annotations

from medseg.edit.operation import Change, Context
from medseg.edit.tool_parameters import ConfidenceParameters, GrowParameters, LevelTraceParameters
from medseg.errors import MedsegError


def rules(context: Context):
    from medseg.edit.tools.rules import PaintRules

    return context.rules or PaintRules()


def label_map(document):
    if document.label_map is None:
        raise MedsegError("there is no segmentation yet; draw or segment first")
    return document.label_map


def threshold(doc, v, c):
    from medseg.edit import tools

    return tools.threshold(label_map(doc), doc.volume, v["hu_low"], v["hu_high"], int(v["label"]), rules(c))


def check_threshold(v) -> None:
    if v["hu_low"] > v["hu_high"]:
        raise MedsegError("the threshold range is empty (LOW > HIGH)")


def tool(name: str, *keys: str, with_rules: bool = False, image: bool = False):
    """run for a tool taking (label_map, *values[keys], [rules], [image])."""

    def run(doc, v, c):
        from medseg.edit import tools

        args = [v[k] for k in keys]
        if with_rules:
            args.append(rules(c))
        if image:
            args.append(doc.volume)
        return getattr(tools, name)(label_map(doc), *args)

    return run


def interpolate(doc, v, c):
    from medseg.edit import tools

    return tools.interpolate_slices(label_map(doc), v["label"], c.axis_zyx)


def logical(name: str):
    def run(doc, v, c):
        from medseg.edit import tools

        extra = (rules(c),) if name == "union" else ()
        return getattr(tools, name)(label_map(doc), v["a"], v["b"], *extra)

    return run


def check_two_labels(v) -> None:
    if v["a"] == v["b"]:
        raise MedsegError("A and B are the same label")


def lock(doc, v, c):
    """Not a voxel change: the label table's lock (undoable through the document)."""
    if int(v["label"]) in doc.labels:
        doc.set_label_locked(int(v["label"]), True)
    return None


def stroke(erase: bool):
    """The brush or the eraser along a path: discs on the view's slice, or spheres."""

    def run(doc, v, c):
        from medseg.edit import tools

        plane = None if v.get("sphere") else v["view"]
        return tools.stroke(label_map(doc), v["points"], float(v["radius_mm"]), 0 if erase else int(v["label"]),
                            rules(c), doc.volume, plane, erase=erase, only_value=c.only_label if erase else None)

    return run


def fill(doc, v, c):
    from medseg.edit import tools

    labels = label_map(doc)
    seed = tuple(int(i) for i in v["point"])
    in_plane = not v.get("fill_3d")
    what = "Fill" if in_plane else "Fill in 3D"
    hu = None
    if v.get("fill_by_hu"):
        hu = rules(c).hu_range or c.hu_range
        if hu is None:
            raise MedsegError("a fill by HU range needs the range (--hu-mask LOW HIGH)")
        clicked = float(doc.volume.array[seed])
        if not hu[0] <= clicked <= hu[1]:  # the region would be empty: say why, don't fail silently
            raise MedsegError(f"the clicked voxel is {clicked:.0f} HU, outside the range {hu[0]:.0f} to "
                              f"{hu[1]:.0f} HU, so nothing was filled")
    clicked_background = int(labels.array[seed]) == 0
    plane = int(v["view"]) if in_plane else None
    delta = tools.flood_fill(labels, seed, int(v["label"]), rules(c), doc.volume, hu_range=hu, plane_axis=plane)
    cautions: tuple[str, ...] = ()
    if delta is not None and delta.count and clicked_background and hu is None and \
            _touches_edge(delta.box, labels.shape_zyx, plane):
        cautions = (f"{what} reached the edge of the image: it filled the background around the patient "
                    f"({delta.count * doc.voxel_ml():.1f} ml). Ctrl+Z undoes it; to fill inside a structure, "
                    "click inside its outline or use 'Fill by HU range'.",)
    return Change(delta, cautions=cautions)


def _touches_edge(box, shape_zyx, plane_axis: int | None) -> bool:
    """Does the (z, y, x) box reach the image's border along an axis of the fill (not across slices)?"""
    (lo, hi) = box
    axes = [a for a in range(3) if a != plane_axis]
    return any(lo[a] == 0 or hi[a] == shape_zyx[a] for a in axes)


def keep_island(doc, v, c):
    from medseg.edit import tools

    return tools.keep_clicked(label_map(doc), v["point"])


def grow_from_seeds(doc, v, c):
    from medseg.edit import tools

    parameters = GrowParameters(roi_margin_mm=v.get("roi_margin_mm", GrowParameters.roi_margin_mm),
                                seed_locality=v.get("seed_locality", GrowParameters.seed_locality))
    return tools.grow_from_seeds(label_map(doc), doc.volume, v["seeds"], parameters, rules(c))


def confidence(doc, v, c):
    from medseg.edit import tools

    return tools.confidence_connected(label_map(doc), doc.volume, v["point"], int(v["label"]),
                                      ConfidenceParameters(k=v["confidence_k"]), rules(c))


def level_trace(doc, v, c):
    from medseg.edit import tools

    return tools.level_trace(label_map(doc), doc.volume, v["point"], v["view"], int(v["label"]),
                             LevelTraceParameters(tolerance_hu=v["trace_tolerance_hu"]), rules(c))


def level_trace_preview(doc, v):
    """The 2D region a level-trace click at ``v["point"]`` would fill (shown under the mouse)."""
    from medseg.edit.tools.click_region import level_trace_region

    return level_trace_region(doc.volume, v["point"], v["view"], LevelTraceParameters(v["trace_tolerance_hu"]))


def scissors(doc, v, c):
    from medseg.edit import tools

    outline = v["polygon"]
    only = outline.get("only_value", c.only_label)
    return tools.scissors(label_map(doc), outline["points"], outline["axis"], outline["parameters"],
                          outline["centre"], outline["value"], rules(c), doc.volume, only_value=only)


def lasso(doc, v, c):
    from medseg.edit import tools

    outline = v["polygon"]
    return tools.lasso(label_map(doc), outline["points"], outline["axis"], outline["centre"], int(v["label"]),
                       rules(c), doc.volume)


def merge_segmentation(doc, v, c):
    from medseg.edit.merge import merge_change

    return merge_change(doc, v["segmentation"], v["mode"])
