"""Statistics by TotalSegmentator's definitions equal its own statistics.json on the same 117-structure map.

Oracle: TotalSegmentator 2.18.0's get_basic_statistics (the installed peer; what ``--statistics``
runs after a segmentation), fed the same label map and the same CT file, writing its statistics.json.
Data: its own result on its example CT (41 structures) split to all 117 (tests/many_labels_data.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from many_labels_data import all_117

from medseg.catalogue import load_catalogue
from medseg.edit.stats import label_statistics
from medseg.edit.totalseg_stats import TotalSegOptions, totalseg_statistics
from medseg.io import load


@pytest.fixture(scope="module")
def case(ct_dir: Path):
    folder = ct_dir / "totalsegmentator"
    image = load(folder / "example_ct_sm.nii.gz")
    seg = nib.load(folder / "example_seg.nii.gz")
    ijk = np.asarray(seg.dataobj).astype(np.uint8)
    # medseg's arrays are (z, y, x) of the file's own voxel order: the same voxels, axes reversed
    assert np.array_equal(np.asarray(image.array).transpose(2, 1, 0), np.asarray(nib.load(folder / "example_ct_sm.nii.gz").dataobj))
    labels = all_117(ijk.transpose(2, 1, 0))
    table = load_catalogue().get("totalsegmentator/total").labels()
    return folder, image, image.with_array(labels), labels.transpose(2, 1, 0), table


@pytest.mark.parametrize("options", [TotalSegOptions(), TotalSegOptions(exclude_border=False, extra=True),
                                     TotalSegOptions(metric="median", extra=True)],
                         ids=["default", "sii-sx", "median-sx"])
def test_equal_to_totalsegmentators_statistics_json(case, tmp_path: Path, options: TotalSegOptions) -> None:
    from totalsegmentator.statistics import get_basic_statistics

    folder, image, label_map, seg_ijk, table = case
    get_basic_statistics(seg_ijk, folder / "example_ct_sm.nii.gz", tmp_path / "statistics.json", quiet=True,
                         task="total", exclude_masks_at_border=options.exclude_border, metric=options.metric,
                         extra_metrics=options.extra)
    theirs = json.loads((tmp_path / "statistics.json").read_text())
    ours = totalseg_statistics(image, label_map, table, options)
    assert list(ours) == list(theirs)  # every structure, in TotalSegmentator's order
    zeroed = 0
    for name, entry in theirs.items():
        mine = ours[name]
        assert set(mine) == set(entry), name
        assert mine["volume"] == pytest.approx(entry["volume"], rel=1e-9), name
        assert mine["intensity"] == entry["intensity"], name
        if options.extra:
            assert (mine["n_voxels"], mine["intensity_min"], mine["intensity_max"], mine["centroid_vox"],
                    mine["bbox_vox"]) == (entry["n_voxels"], entry["intensity_min"], entry["intensity_max"],
                                          entry["centroid_vox"], entry["bbox_vox"]), name
            assert mine["intensity_std"] == pytest.approx(entry["intensity_std"], abs=1e-5), name
        zeroed += entry["volume"] == 0.0
    # on this 30-slice crop the border rule matters: most structures reach the first or last 3 slices
    assert (zeroed > 60) if options.exclude_border else (zeroed == 0)


def test_the_standard_figures_differ_where_totalsegmentator_says_so(case) -> None:
    """The default definitions are medseg's: nothing zeroed at the border, ml, HU as stored."""
    _folder, image, label_map, _seg, table = case
    standard = {s.name: s for s in label_statistics(image, label_map, table)}
    theirs = totalseg_statistics(image, label_map, table, TotalSegOptions(exclude_border=False))
    assert len(standard) == 117
    for name, entry in theirs.items():
        assert standard[name].volume_ml * 1000 == pytest.approx(entry["volume"], rel=1e-9)
        assert standard[name].hu_mean == pytest.approx(entry["intensity"], abs=1e-4)  # this CT is whole HU
        p5, p25, p75, p95 = standard[name].hu_percentiles
        values = image.array[label_map.array == standard[name].value]
        assert (p5, p95) == tuple(np.percentile(values, [5, 95]))


def test_medseg_stats_writes_either_definitions_and_says_which(case, tmp_path: Path, capsys) -> None:
    from totalsegmentator.statistics import get_basic_statistics

    from medseg.cli import main
    from medseg.io.label_files import write_label_map

    folder, image, label_map, seg_ijk, table = case
    labels = load_catalogue().get("totalsegmentator/total").labels()
    write_label_map(label_map, tmp_path / "total.nii.gz", list(labels.values()), image)
    ct = str(folder / "example_ct_sm.nii.gz")
    assert main(["stats", str(tmp_path / "total.nii.gz"), "--image", ct, "--definitions", "totalsegmentator",
                 "--save-json", str(tmp_path / "ts.json"), "--csv", str(tmp_path / "ts.csv")]) == 0
    get_basic_statistics(seg_ijk, folder / "example_ct_sm.nii.gz", tmp_path / "statistics.json", quiet=True)
    document = json.loads((tmp_path / "ts.json").read_text())
    assert document["definitions"] == "totalsegmentator" and "int16" in document["about"]
    theirs = json.loads((tmp_path / "statistics.json").read_text())
    assert list(document["structures"]) == list(theirs)
    for name, entry in theirs.items():
        assert document["structures"][name] == pytest.approx(entry, rel=1e-9), name
    import csv

    rows = list(csv.DictReader((tmp_path / "ts.csv").open()))
    assert len(rows) == 117 and {row["definitions"] for row in rows} == {"TotalSegmentator 2.18.0 --statistics"}
    assert {row["name"]: float(row["volume"]) for row in rows} == pytest.approx(
        {name: entry["volume"] for name, entry in theirs.items()})
    # the default: medseg's own definitions, named in the files
    assert main(["stats", str(tmp_path / "total.nii.gz"), "--image", ct, "--save-json", str(tmp_path / "std.json"),
                 "--csv", str(tmp_path / "std.csv")]) == 0
    standard = json.loads((tmp_path / "std.json").read_text())
    assert standard["definitions"] == "standard" and len(standard["labels"]) == 117
    liver = next(row for row in standard["labels"] if row["name"] == "liver")
    assert liver["volume_ml"] * 1000 == pytest.approx(np.count_nonzero(label_map.array == 5) * 27.0)
    assert set(liver["hu_percentiles"]) == {"5", "25", "75", "95"}
    rows = list(csv.DictReader((tmp_path / "std.csv").open()))
    assert len(rows) == 117 and {row["definitions"] for row in rows} == {"standard"}
    capsys.readouterr()
