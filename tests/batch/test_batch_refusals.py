"""``medseg batch`` refuses what ``medseg segment`` refuses — an MR series without ``--allow-modality``, a label
map as a CT — each as a clear failed row, and the batch goes on (they were ``ok`` rows with 0 ml before)."""

from __future__ import annotations

from pathlib import Path

import pydicom
from batch_helpers import copy_series, events_of, run_cli

from medseg.batch.table import read_table


def _archive(ct_dir: Path, root: Path) -> Path:
    """A real CT slice, the same slice relabelled MR, and a real lesion mask (lung1_label.nrrd)."""
    archive = root / "archive"
    copy_series(ct_dir / "pydicom_data", archive / "ct", "693_UNCR.dcm")
    mr = pydicom.dcmread(ct_dir / "pydicom_data" / "693_UNCR.dcm")
    mr.Modality = "MR"
    mr.SeriesInstanceUID = pydicom.uid.generate_uid()
    (archive / "mr").mkdir()
    mr.save_as(archive / "mr" / "693_MR.dcm")
    copy_series(ct_dir / "pyradiomics_lung1", archive / "mask", "lung1_label.nrrd")
    return archive


def _rows_by_folder(out: Path) -> dict[str, dict]:
    rows = read_table(out / "results.csv")
    return {Path(row["source"]).parent.name if row["source"].endswith(".nrrd") else Path(row["source"]).name: row
            for row in rows}


def test_batch_refuses_an_mr_series_and_a_label_map_as_segment_does(ct_dir: Path, tmp_path: Path) -> None:
    archive = _archive(ct_dir, tmp_path)
    out = tmp_path / "out"
    run = run_cli("batch", str(archive), "-o", str(out), "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = _rows_by_folder(out)
    assert sorted(rows) == ["ct", "mask", "mr"]
    assert rows["ct"]["status"] == "ok" and float(rows["ct"]["body_ml"]) > 0
    assert rows["mr"]["status"] == "failed" and not rows["mr"]["output"]
    assert "this series is MR" in rows["mr"]["error"] and "--allow-modality" in rows["mr"]["error"]
    assert rows["mask"]["status"] == "failed" and not rows["mask"]["output"]
    assert "this is not a CT image" in rows["mask"]["error"] and "lung1_label.nrrd" in rows["mask"]["error"]
    assert {p.name for p in out.iterdir()} >= {f"{rows['ct']['case_id']}.nii.gz", "results.csv"}
    assert not any(rows[k]["case_id"] in p.name for k in ("mr", "mask") for p in out.iterdir())
    done = events_of(run.stdout)[-1]
    assert done["event"] == "done" and done["ok"] == 1 and done["failed"] == 2

    # --allow-modality: the MR series is segmented (and says so); a label map is never an image
    run = run_cli("batch", str(archive), "-o", str(out), "--allow-modality", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = _rows_by_folder(out)
    assert rows["mr"]["status"] == "ok" and rows["mr"]["output"]
    assert rows["mask"]["status"] == "failed" and "this is not a CT image" in rows["mask"]["error"]
    messages = [e["text"] for e in events_of(run.stdout) if e["event"] == "message"]
    assert any(rows["mr"]["case_id"] in text and "MR series" in text and "user's request" in text for text in messages)
