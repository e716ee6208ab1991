"""``medseg batch`` on real archives: every case once, the table right, resumable, sharded, refusals up front."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from batch_helpers import REPO_ROOT, copy_series, events_of, run_cli, truncated_copy

from medseg.batch.table import read_table
from medseg.model.backends import resolve_device

# Columns that say where and when a case ran, not what came out.
RUN_COLUMNS = {"seconds", "finished_at", "rank", "device"}


def _stats_cli(capsys, output: Path, image: Path, series_uid: str) -> dict[str, float]:
    """Volumes by label name as `medseg stats --json` reads them back from the written output."""
    from medseg.cli import main

    capsys.readouterr()
    assert main(["stats", str(output), "--image", str(image), "--series", series_uid, "--json"]) == 0
    return {item["name"]: item["volume_ml"] for item in json.loads(capsys.readouterr().out)["labels"]}


@pytest.mark.slow
def test_folder_of_real_series_mixed_vendors(ct_dir: Path, tmp_path: Path, capsys) -> None:
    """Philips (two volumes, a localizer, two secondary captures), a Hitachi slice with a -22 degree gantry tilt, a
    Toshiba slice, a GE series and a corrupt file in one archive: a SEG per loadable series, the rest recorded
    with the reason, and the table's volumes equal to `medseg stats` on each written SEG."""
    archive = tmp_path / "archive"
    copy_series(ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series", archive / "philips")
    copy_series(ct_dir / "pydicom_wheel_testfiles", archive / "hitachi_tilt", "J2K_pixelrep_mismatch.dcm")
    copy_series(ct_dir / "cornerstone_testimages", archive / "toshiba", "CT2_J2KR")
    copy_series(ct_dir / "dcmqi_ct3slice_masks" / "image", archive / "ge")
    truncated_copy(ct_dir / "cornerstone_testimages" / "CTImage.dcm", archive / "incoming" / "CTImage.dcm")
    (archive / "notes.txt").write_text("not an image\n")
    out = tmp_path / "out"

    run = run_cli("batch", str(archive), "-o", str(out), "--format", "dcm", "--stats", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    events = events_of(run.stdout)
    assert events[0]["event"] == "started" and events[-1]["event"] == "done"
    rows = {row["case_id"]: row for row in read_table(out / "results.csv")}
    by_source = {}
    for row in rows.values():
        by_source.setdefault(Path(row["source"]).name, []).append(row)

    philips = sorted(by_source["philips"], key=lambda r: r["case_id"])
    assert sorted(r["status"] for r in philips) == ["ok", "ok", "skipped", "skipped", "skipped"]
    assert {r["error"].split(",")[0] for r in philips if r["status"] == "skipped"} == {
        "a localizer (scout)", "a secondary capture or colour image"}
    for folder in ("hitachi_tilt", "toshiba", "ge"):
        assert [r["status"] for r in by_source[folder]] == ["ok"], folder
    [corrupt] = by_source["CTImage.dcm"]  # the scan already sees it is cut short (issue 43): a failed case of its own
    assert corrupt["status"] == "failed" and "cut short" in corrupt["error"] and "CTImage.dcm" in corrupt["source"]
    assert "notes" not in " ".join(rows)  # a text file is not a case

    ok = [row for row in rows.values() if row["status"] == "ok"]
    assert len(ok) == 5 and all(row["output"] for row in ok)  # the starter finds something in each
    case_events = sorted(e["case_id"] for e in events if e["event"] == "case")
    assert case_events == sorted(r["case_id"] for r in ok)  # the rest never ran (the corrupt file: known unreadable)
    # one output per loadable series, nothing for the others, no temporary file left behind
    expected = {f"{r['case_id']}.dcm" for r in ok} | {f"{r['case_id']}.stats.csv" for r in ok} | {"results.csv"}
    if (out / "results.parquet").exists():
        expected.add("results.parquet")
    assert {p.name for p in out.iterdir() if not p.name.startswith(".medseg-batch")} == expected
    for row in ok:
        source = Path(row["source"])
        volumes = _stats_cli(capsys, out / row["output"], source, row["series_uid"])
        for name in ("body", "lungs", "bones"):
            assert float(row[f"{name}_ml"]) == pytest.approx(volumes.get(name, 0.0), abs=1e-3), (row["case_id"], name)
    # the device the one resolver chooses for "auto" on this machine (a CPU here, CUDA on a GPU machine)
    assert {r["configuration"] for r in ok} == {"2d"} and {r["device"] for r in ok} == {resolve_device("auto")}


def _part_rows(out: Path) -> list[dict]:
    rows = []
    for part in sorted((out / ".medseg-batch").glob("part-rank*.jsonl")):
        for line in part.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


@pytest.mark.slow
def test_sigkill_after_the_second_case_then_rerun(small_archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "medseg", "batch", str(small_archive), "-o", str(out), "--format", "dcm",
               "--json", "--threads", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    finished = []
    try:
        for line in process.stdout:  # type: ignore[union-attr]
            event = json.loads(line)
            if event["event"] == "case":
                finished.append(event["case_id"])
                if len(finished) == 2:
                    process.send_signal(signal.SIGKILL)
                    break
    finally:
        process.wait(timeout=120)
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    assert process.returncode == -signal.SIGKILL and len(finished) == 2
    first_outputs = {case: (out / f"{case}.dcm").stat().st_mtime_ns for case in finished}

    rerun = run_cli("batch", str(small_archive), "-o", str(out), "--format", "dcm", "--json", "--threads", "1")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    events = events_of(rerun.stdout)
    started = next(e for e in events if e["event"] == "started")  # after the note on the killed run's lock
    assert any(e["event"] == "message" and f"process {process.pid} on " in e["text"] for e in events)
    assert started["cases"] == 4 and started["done_before"] >= 2 and started["to_do"] == 4 - started["done_before"]
    rerun_cases = [e["case_id"] for e in events if e["event"] == "case"]
    assert not set(rerun_cases) & set(finished)  # what was done is not done again
    # every case exactly once: one row each over all parts, and its SEG untouched since
    rows = _part_rows(out)
    assert sorted(r["case_id"] for r in rows) == sorted({r["case_id"] for r in rows}) and len(rows) == 4
    assert all(r["status"] == "ok" for r in rows)
    assert {case: (out / f"{case}.dcm").stat().st_mtime_ns for case in finished} == first_outputs
    # no partial file: no temporary left, every SEG whole (highdicom reads it)
    import highdicom as hd

    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".medseg-batch"] == []
    for row in rows:
        assert hd.seg.segread(out / row["output"]).NumberOfFrames > 0
    table = read_table(out / "results.csv")
    assert [r["status"] for r in table] == ["ok"] * 4 and len({r["case_id"] for r in table}) == 4


@pytest.mark.slow
def test_two_gloo_processes_equal_one(small_archive: Path, tmp_path: Path) -> None:
    one = run_cli("batch", str(small_archive), "-o", str(tmp_path / "one"), "--threads", "1")
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_cli("batch", str(small_archive), "-o", str(tmp_path / "two"), "--threads", "1", torchrun=2)
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    parts = sorted(p.name for p in (tmp_path / "two" / ".medseg-batch").glob("part-rank*.jsonl"))
    assert parts == ["part-rank0.jsonl", "part-rank1.jsonl"]
    ranks = {r["case_id"]: r["rank"] for r in _part_rows(tmp_path / "two")}
    assert sorted(ranks.values()) == [0, 0, 1, 1]  # cases r, r + 2, ...: two each

    table_one = read_table(tmp_path / "one" / "results.csv")
    table_two = read_table(tmp_path / "two" / "results.csv")
    assert [{k: v for k, v in r.items() if k not in RUN_COLUMNS} for r in table_one] == \
        [{k: v for k, v in r.items() if k not in RUN_COLUMNS} for r in table_two]
    assert len(table_one) == 4 and all(r["status"] == "ok" for r in table_one)
    for row in table_one:
        first = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "one" / row["output"])))
        second = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "two" / row["output"])))
        assert np.array_equal(first, second), row["case_id"]
        assert (tmp_path / "one" / row["output"].replace(".nii.gz", ".labels.json")).read_text() == \
            (tmp_path / "two" / row["output"].replace(".nii.gz", ".labels.json")).read_text()


def test_unreadable_manifest_line_is_refused_before_any_case(small_archive: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "cases.csv"
    manifest.write_text(f"path,series_uid,case_id\n{small_archive / 'ge_head'},,head\n"
                        f"{small_archive / 'toshiba'},\"unclosed,quote\n")
    run = run_cli("batch", str(manifest), "-o", str(tmp_path / "out"), "--json")
    assert run.returncode == 1
    events = events_of(run.stdout)
    assert [e["event"] for e in events] == ["failed"]
    assert "line 3" in events[0]["error"] and events[0]["path"] == str(manifest)
    assert not (tmp_path / "out" / "head.nii.gz").exists()


def test_missing_paths_are_refused_before_any_case(small_archive: Path, tmp_path: Path) -> None:
    missing = tmp_path / "not_here"
    run = run_cli("batch", str(small_archive), str(missing), "-o", str(tmp_path / "out"))
    assert run.returncode == 1 and f"{missing}: no such file or folder" in run.stderr
    assert not list((tmp_path / "out").glob("*.nii.gz"))
    manifest = tmp_path / "cases.json"
    manifest.write_text(json.dumps({"cases": [{"path": str(small_archive / "ge_head")}, {"path": "gone/series"}]}))
    run = run_cli("batch", str(manifest), "-o", str(tmp_path / "out2"))
    assert run.returncode == 1 and "line 2: no such file or folder: gone/series" in run.stderr
    assert not list((tmp_path / "out2").glob("*.nii.gz"))


def test_output_folder_that_cannot_be_written(small_archive: Path, tmp_path: Path) -> None:
    folder = tmp_path / "read_only"
    folder.mkdir()
    # root ignores chmod: a tmpfs remounted read-only in a private namespace is the honest test
    prefix = ["unshare", "-rm", "sh", "-euc", f"mount -t tmpfs tmpfs {folder} && mkdir {folder}/out && "
              f"mount -o remount,ro {folder} && exec \"$@\"", "sh"]
    run = subprocess.run([*prefix, sys.executable, "-m", "medseg", "batch", str(small_archive), "-o",
                          str(folder / "out"), "--json"], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert run.returncode == 1, run.stderr[-2000:]
    [failed] = events_of(run.stdout)
    assert failed["event"] == "failed" and "cannot write here (Read-only file system)" == failed["error"]
    assert failed["path"] == str(folder / "out") and "not writable" in failed["hint"]


def test_output_inside_an_input_is_refused(small_archive: Path) -> None:
    run = run_cli("batch", str(small_archive), "-o", str(small_archive / "segmentations"))
    assert run.returncode == 1 and "inside an input folder" in run.stderr
    assert not (small_archive / "segmentations").exists()


def test_saved_pacs_query_cases(tmp_path: Path) -> None:
    """A saved query's CT series become cases (retrieved when their turn comes); one without a server is refused."""
    from medseg.workflows.batch_cases import ManifestError, discover

    query = {"server": None, "offset": 0, "more": False, "studies": [
        {"study_uid": "1.2.3", "patient_name": "DOE^JANE", "series": [
            {"series_uid": "1.2.3.4", "modality": "CT"}, {"series_uid": "1.2.3.5", "modality": "SR"},
            {"series_uid": "1.2.3.6", "modality": "CT"}]}]}
    path = tmp_path / "q.json"
    path.write_text(json.dumps(query))
    with pytest.raises(ManifestError, match="does not say which server"):
        discover([path])
    cases = discover([path], pacs_server="archive").cases
    assert [(c.kind, c.pacs) for c in cases] == [("pacs", ("archive", "1.2.3", "1.2.3.4")),
                                                 ("pacs", ("archive", "1.2.3", "1.2.3.6"))]
    assert all("DOE" not in c.case_id and "DOE" not in c.source for c in cases)


@pytest.mark.slow
def test_sigterm_stops_after_the_current_write(small_archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "medseg", "batch", str(small_archive), "-o", str(out), "--json", "--threads", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    events = []
    for line in process.stdout:  # type: ignore[union-attr]
        events.append(json.loads(line))
        if events[-1]["event"] == "case" and events[-1]["index"] == 1:
            process.send_signal(signal.SIGTERM)  # once, while the next case is read or on the network
    stderr = process.stderr.read()  # type: ignore[union-attr]
    assert process.wait(timeout=300) == 128 + signal.SIGTERM, stderr[-2000:]
    done = [e["case_id"] for e in events if e["event"] == "case"]
    assert events[-1]["event"] == "failed" and events[-1]["cancelled"] and 1 <= len(done) < 4
    # what finished is whole and recorded; what was stopped left nothing
    assert sorted(p.name for p in out.glob("*.nii.gz")) == sorted(f"{case}.nii.gz" for case in done)
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".medseg-batch"] == []
    table = {r["case_id"]: r["status"] for r in read_table(out / "results.csv")}
    assert sorted(c for c, s in table.items() if s == "ok") == sorted(done)
    assert sorted(s for s in table.values() if s != "ok") == ["pending"] * (4 - len(done))


def test_manifest_rows_become_cases(ct_dir: Path, tmp_path: Path) -> None:
    """A CSV manifest: paths relative to it, a chosen series of a mixed folder by UID, the largest volume without
    one, an image file, and the ids the user gave."""
    import pydicom

    from medseg.workflows.batch_cases import discover

    mixed = copy_series(ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series", tmp_path / "data" / "philips")
    thin_uid = str(pydicom.dcmread(mixed / "S2020_I10", stop_before_pixels=True).SeriesInstanceUID)
    manifest = tmp_path / "data" / "cases.csv"
    manifest.write_text(f"path,series_uid,case_id\nphilips,{thin_uid},thin\nphilips,,largest\n"
                        f"{ct_dir / 'totalsegmentator' / 'example_ct_sm.nii.gz'},,small_nifti\n")
    cases = {c.case_id: c for c in discover([manifest]).cases}
    assert sorted(cases) == ["largest", "small_nifti", "thin"]
    assert cases["thin"].series_uid == thin_uid and len(cases["thin"].files) == 16
    assert len(cases["largest"].files) == 28  # the 5 mm series, as `medseg segment` would choose
    assert cases["small_nifti"].kind == "image"


def test_a_case_is_prepared_on_the_run_device_with_the_batch_step(ct_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """The prefetch thread preprocesses on the batch's device (it always used the CPU) and checks
    the run with the batch's step (it used 0.5 whatever --step said)."""
    from medseg.batch.run import BatchSettings
    from medseg.model import infer
    from medseg.workflows.batch_case import BatchCase
    from medseg.workflows.segment import Segmenter

    seen: list[tuple[float, str]] = []
    real = infer.prepare

    def spy(volume, package, configuration=None, step_size=0.5, device="cpu", fallbacks=None, **options):
        seen.append((step_size, device))
        return real(volume, package, configuration, step_size, device, fallbacks, **options)

    monkeypatch.setattr(infer, "prepare", spy)
    settings = BatchSettings(tmp_path / "out", device="cpu", step=0.7)
    (tmp_path / "out").mkdir()
    case = BatchCase(Segmenter("starter", settings.segment_settings()))
    image = ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"
    prepared = case.read(image, tmp_path / "out" / "abdomen.nii.gz")
    assert seen == [(0.7, "cpu")]
    assert prepared.prepared.image.data.shape[0] == 1  # one channel, ready for the network
