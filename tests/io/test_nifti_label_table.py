"""Label names in a NIfTI header extension: TotalSegmentator writes its label table (Caret XML) into every
multi-label output. Opened without a medseg sidecar, the labels take those names. Oracle: TotalSegmentator's
own reader of that extension (``nifti_ext_header.load_multilabel_nifti``) and its own writer."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
from totalsegmentator.nifti_ext_header import add_label_map_to_nifti, load_multilabel_nifti

from medseg.io import load
from medseg.io.label_files import sidecar_path
from medseg.io.nifti_label_table import MAX_NAME, label_table
from medseg.io.segmentations import open_segmentation


@pytest.fixture(scope="module")
def ct(ct_dir):
    return load(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")


def test_totalsegmentators_output_opens_with_its_names(ct, ct_dir):
    path = ct_dir / "totalsegmentator" / "example_seg.nii.gz"
    _, theirs = load_multilabel_nifti(path)
    opened = open_segmentation(path, ct)
    present = np.unique(nib.load(path).get_fdata()).astype(int)[1:]
    assert [label.value for label in opened.segments] == list(present)
    assert {label.value: label.name for label in opened.segments} == {int(v): theirs[int(v)] for v in present}
    assert opened.named and opened.named_by_header
    assert "label table in the file's header" in opened.naming[0]


def _written(tmp_path, ct_dir, names, extension=None):
    """A label map on example_ct_sm's grid with values 1-3, its header extension made by TotalSegmentator's
    writer (``names``) or given as raw bytes (``extension``: code, bytes)."""
    reference = nib.load(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    data = np.zeros(reference.shape, np.uint8)
    data[10:20, 10:20, 5:10], data[30:40, 30:40, 5:10], data[50:60, 50:60, 5:10] = 1, 2, 3
    image = nib.Nifti1Image(data, reference.affine)
    if names is not None:
        image = add_label_map_to_nifti(image, names)
    if extension is not None:
        image.header.extensions.append(nib.nifti1.Nifti1Extension(*extension))
    path = tmp_path / "labels.nii.gz"
    nib.save(image, path)
    return path


def test_names_written_by_totalsegmentators_writer_are_read(tmp_path, ct, ct_dir):
    path = _written(tmp_path, ct_dir, {1: "tumour", 2: "lymph node", 7: "not present"})
    opened = open_segmentation(path, ct)
    assert {l.value: l.name for l in opened.segments} == {1: "tumour", 2: "lymph node", 3: "label 3"}
    assert "1 value(s) it does not name are named by value" in opened.naming[0]


def test_a_medseg_sidecar_wins_over_the_header(tmp_path, ct, ct_dir):
    path = _written(tmp_path, ct_dir, {1: "from header", 2: "b", 3: "c"})
    sidecar_path(path).write_text(json.dumps({"labels": [{"value": 1, "name": "from sidecar"}]}))
    opened = open_segmentation(path, ct)
    assert opened.segments[0].name == "from sidecar" and not opened.named_by_header


def test_hostile_tables_name_nothing_and_names_are_cleaned(tmp_path, ct, ct_dir):
    laughs = (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;">]>'
              b'<CaretExtension><LabelTable><Label Key="1">&b;</Label></LabelTable></CaretExtension>')
    path = _written(tmp_path, ct_dir, None, (0, laughs))
    opened = open_segmentation(path, ct)
    assert [l.name for l in opened.segments] == ["label 1", "label 2", "label 3"] and not opened.named
    assert "named by value" in opened.naming[0]
    table = (b'<CaretExtension><LabelTable><Label Key="1">a\tb\nc</Label><Label Key="-2">neg</Label>'
             b'<Label Key="3">' + b"x" * 1000 + b'</Label><Label Key="65536">big</Label></LabelTable>'
             b'</CaretExtension>')
    assert label_table(0, table) == {1: "a b c", 3: "x" * MAX_NAME}
    assert label_table(0, b"<CaretExtension><LabelTable><Label Key=") == {}  # broken XML
    assert label_table(4, table) == {}  # AFNI's code: not a Caret table
