"""De-identified research exports: the PS3.15 Basic Profile on real headers, SEGs that still reference their source."""

from __future__ import annotations

from pathlib import Path

import highdicom as hd
import pydicom
import pytest
from batch_helpers import copy_series, events_of, run_cli

from medseg.batch.table import read_table
from medseg.io.deidentify import DeidentificationKeyError, Deidentifier, profile_tags, read_mapping

# The identifying attributes these real sources hold, by the standard's table (names, IDs, dates,
# institution and station, UIDs); each must be absent or replaced in every output.
NEVER_KEPT_KEYWORDS = ("PatientName", "PatientID", "AccessionNumber", "InstitutionName", "StationName",
                       "DeviceSerialNumber", "StudyDate", "SeriesDate", "StudyID", "StudyInstanceUID",
                       "SeriesInstanceUID", "SOPInstanceUID", "FrameOfReferenceUID", "ProtocolName")


def _elements(dataset: pydicom.Dataset) -> dict[int, str]:
    """Every non-empty text value by tag, nested sequences included (pixel data left out)."""
    found: dict[int, str] = {}
    for element in dataset.iterall():
        if element.VR in ("SQ", "OB", "OW", "OF", "UN") or element.value in (None, ""):
            continue
        found.setdefault(int(element.tag), str(element.value))
    return found


def _source_identifiers(files: list[Path]) -> tuple[dict[int, set[str]], str]:
    """Values of the Basic Profile's attributes by tag, and the text of every other (kept) attribute."""
    profile = profile_tags()
    values: dict[int, set[str]] = {}
    kept = []
    for path in files:
        for tag, value in _elements(pydicom.dcmread(path, stop_before_pixels=True)).items():
            if tag in profile:
                values.setdefault(tag, set()).add(value)
            else:
                kept.append(value)
    return values, " ".join(kept)


def _searchable(value: str, kept: str) -> bool:
    """Worth a substring search: long or wordy enough not to occur by chance (digits could sit inside a new
    UID), and not also the value of an attribute the profile keeps (the phantom's name is "HEAD", and so is
    its Body Part Examined)."""
    return (len(value) >= 8 or (len(value) >= 4 and any(c.isalpha() for c in value))) and value not in kept


@pytest.mark.slow
def test_deidentified_seg_export(ct_dir: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    copy_series(ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series", archive / "philips", "S2020_*")
    copy_series(ct_dir / "dcmqi_ct3slice_masks" / "image", archive / "ge")
    sources = sorted(p for p in archive.rglob("*") if p.is_file())
    identifying, kept = _source_identifiers(sources)
    keywords = {pydicom.datadict.keyword_for_tag(tag) for tag in identifying}
    assert set(NEVER_KEPT_KEYWORDS) <= keywords  # the sources really carry what the profile must remove
    out, key, mapping = tmp_path / "export", tmp_path / "study.key", tmp_path / "study.reid"

    run = run_cli("batch", str(archive), "-o", str(out), "--format", "dcm", "--deidentify", "--key-file", str(key),
                  "--reid-mapping", str(mapping), "--json", "--threads", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = read_table(out / "results.csv")
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["case_id"].startswith("case-") and r["source"] == "" for r in rows)

    for row in rows:
        seg_path = out / row["output"]
        ct_files = sorted((out / f"{row['case_id']}_ct").glob("*.dcm"))
        ct = [pydicom.dcmread(p) for p in ct_files]
        seg = pydicom.dcmread(seg_path)
        # every Basic Profile attribute the source had is gone or replaced, at any depth, in the SEG and the CT
        for dataset in [seg, *ct]:
            assert dataset.PatientIdentityRemoved == "YES"
            present = _elements(dataset)
            for tag, originals in identifying.items():
                assert present.get(tag) not in originals, (pydicom.datadict.keyword_for_tag(tag), dataset.Modality)
            text = " ".join(present.values())
            for originals in identifying.values():
                for value in originals:
                    if _searchable(value, kept):
                        assert value not in text, value
        # highdicom still reads the SEG, and it references the de-identified series, image by image
        read = hd.seg.segread(seg_path)
        ct_uids = {(d.StudyInstanceUID, d.SeriesInstanceUID, d.SOPInstanceUID) for d in ct}
        referenced = set(read.get_source_image_uids())
        assert referenced and referenced <= ct_uids
        assert {d.SeriesInstanceUID for d in ct} == {row["series_uid"]} == \
            {s.SeriesInstanceUID for s in read.ReferencedSeriesSequence}
        assert seg.PatientID == ct[0].PatientID and seg.FrameOfReferenceUID == ct[0].FrameOfReferenceUID
        assert seg.file_meta.MediaStorageSOPInstanceUID == seg.SOPInstanceUID
    # the table, the console and the event stream hold no identifying value either
    logs = (out / "results.csv").read_text() + run.stdout + run.stderr
    for tag, originals in identifying.items():
        for value in originals:
            if _searchable(value, kept):
                assert value not in logs, pydicom.datadict.keyword_for_tag(tag)

    # the mapping re-identifies only with the key
    deid = Deidentifier(bytes.fromhex(key.read_text().strip()))
    records = {r["case_id"]: r for r in read_mapping(mapping, deid)}
    assert set(records) == {r["case_id"] for r in rows}
    originals_by_series = {str(pydicom.dcmread(p, stop_before_pixels=True).SeriesInstanceUID): p for p in sources}
    for row in rows:
        record = records[row["case_id"]]
        assert record["series_uid"] in originals_by_series
        assert record["deidentified"]["series_uid"] == row["series_uid"]
    with pytest.raises(DeidentificationKeyError):
        read_mapping(mapping, Deidentifier(b"another key of 32 bytes........."))
    assert b"PLASTIC" not in mapping.read_bytes() and b"JANCT" not in mapping.read_bytes()

    # the same key resumes: the pseudonymous cases are found done
    again = run_cli("batch", str(archive), "-o", str(out), "--format", "dcm", "--deidentify", "--key-file", str(key),
                    "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    started = events_of(again.stdout)[0]
    assert started["done_before"] == 2 and started["to_do"] == 0


def test_uids_are_keyed_and_consistent(ct_dir: Path) -> None:
    path = ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series" / "S2020_I10"
    first, second, other = (pydicom.dcmread(path) for _ in range(3))
    Deidentifier(b"k" * 32).dataset(first)
    Deidentifier(b"k" * 32).dataset(second)
    Deidentifier(b"x" * 32).dataset(other)
    for keyword in ("StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID", "FrameOfReferenceUID"):
        assert first[keyword].value == second[keyword].value != other[keyword].value
        assert first[keyword].value.startswith("2.25.") and len(first[keyword].value) <= 64
    assert first.SOPClassUID == pydicom.dcmread(path).SOPClassUID  # class UIDs are not identifying
    assert first.PatientID == first.PatientName != "PLASTIC"
    assert not [e for e in first if e.tag.is_private]


def test_key_inside_the_export_is_refused(tmp_path: Path, small_archive: Path) -> None:
    out = tmp_path / "export"
    run = run_cli("batch", str(small_archive), "-o", str(out), "--deidentify", "--key-file", str(out / "k.key"))
    assert run.returncode == 1 and "must not be inside the output folder" in run.stderr
    run = run_cli("batch", str(small_archive), "-o", str(out), "--deidentify")
    assert run.returncode == 1 and "--deidentify needs --key-file" in run.stderr
