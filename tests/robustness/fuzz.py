"""Coverage-guided fuzzing (atheris + libFuzzer) of every reader of a file a user may hand medseg.

Each target takes the fuzzer's bytes as one file and runs the reader on it. The contract:
it returns or raises MedsegError; any other exception is a crash (libFuzzer saves the input
and stops), as is a hang (-timeout) or memory past -rss_limit_mb. Seeds come from
../shared/data (and small files made from it); the corpus grows in a temporary folder.

    python tests/robustness/fuzz.py TARGET [libFuzzer options]   # by hand, e.g. -max_total_time=3600
    python tests/robustness/fuzz.py --list
    python tests/robustness/fuzz.py --make-seeds   # rewrite the committed seeds/ (rarely)

tests/robustness/test_fuzz.py runs every target for a bounded time in CI. A crash found by
hand becomes a regression test (tests/robustness/test_fuzz_regressions.py) with its input.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import resource
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data")) / "ct"
MEMORY_LIMIT = 3 << 30  # the readers' own budget checks see this (medseg.io.memory_budget)

# MEDSEG_FUZZ_REPLAY=1: run saved inputs only (test_fuzz_regressions.py), without the coverage
# instrumentation that makes these imports take seconds.
_instrumented = (contextlib.nullcontext() if os.environ.get("MEDSEG_FUZZ_REPLAY")
                 else atheris.instrument_imports(include=["medseg", "pydicom", "highdicom"]))
with _instrumented:
    import medseg.io.dicom_scan  # noqa: F401 - instrumented for coverage
    from medseg.errors import MedsegError
    from medseg.io import load, read_image
    from medseg.io.dicom_seg_read import read_dicom_seg
    from medseg.io.dicom_sources import expand_sources, files_from_dicomdir
    from medseg.io.label_files import read_sidecar
    from medseg.model.package import load_package, starter_model_path

# CI names a fixed folder (MEDSEG_FUZZ_WORK): paths the readers compare reach libFuzzer's table of
# compared values, so a random folder name made every run mutate differently.
WORK = Path(os.environ.get("MEDSEG_FUZZ_WORK") or tempfile.mkdtemp(prefix="medseg-fuzz-"))


def _write(name: str, data: bytes) -> Path:
    path = WORK / "input" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _dicom(data: bytes) -> None:
    load(_write("series/slice.dcm", data).parent)


def _nifti(data: bytes) -> None:
    read_image(_write("image.nii.gz" if data[:2] == b"\x1f\x8b" else "image.nii", data))


def _nrrd(data: bytes) -> None:
    read_image(_write("image.nrrd", data))


def _mha(data: bytes) -> None:
    """A MetaImage header and voxels; a detached one (ElementDataFile naming a file) may name data.raw
    beside it, or anything else (the containment check: only regular files inside its folder)."""
    folder = WORK / "input" / "mha"
    raw = folder / "data.raw"
    if not raw.exists():
        folder.mkdir(parents=True, exist_ok=True)
        raw.write_bytes(bytes(range(256)) * 64)
    path = folder / "image.mha"
    path.write_bytes(data)
    read_image(path)


def _series(data: bytes) -> None:
    """One file among two real slices of its series: the scan's grouping, splitting and series findings."""
    folder = WORK / "input" / "series"
    if not folder.exists():
        folder.mkdir(parents=True)
        for real in sorted((DATA / "dcmqi_ct3slice_masks" / "image").iterdir())[:2]:
            shutil.copy(real, folder / real.name)
    (folder / "fuzzed.dcm").write_bytes(data)
    load(folder)


_CT = None


def _seg(data: bytes) -> None:
    global _CT
    if _CT is None:
        _CT = load(DATA / "dcmqi_ct3slice_masks" / "image")
    read_dicom_seg(_write("seg.dcm", data), _CT)


def _sidecar(data: bytes) -> None:
    map_path = WORK / "input" / "labels.nii.gz"
    if not map_path.exists():
        map_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / "totalsegmentator" / "example_seg.nii.gz", map_path)
    _write("labels.labels.json", data)
    read_sidecar(map_path)


def _model_json(data: bytes) -> None:
    folder = WORK / "input" / "model"
    if not folder.exists():
        shutil.copytree(starter_model_path(), folder)
    (folder / "model.json").write_bytes(data)
    load_package(folder)


def _zip(data: bytes) -> None:
    archive = _write("study.zip", data)
    expand_sources(archive)
    load(archive)


def _dicomdir(data: bytes) -> None:
    path = _write("media/DICOMDIR", data)
    files_from_dicomdir(path)
    load(path)


TARGETS = {"dicom": _dicom, "nifti": _nifti, "nrrd": _nrrd, "mha": _mha, "series": _series, "seg": _seg,
           "sidecar": _sidecar, "model_json": _model_json, "zip": _zip, "dicomdir": _dicomdir}


SEEDS = Path(__file__).with_name("seeds")  # made by --make-seeds, committed: the same bytes on every machine


def seeds(target: str) -> list[bytes]:
    """Real files of the kind (small ones; the fuzzer mutates from here).

    Files of shared/data are read as they are; the few made from them (a cropped NIfTI, a zip, a
    DICOMDIR) are committed under seeds/, because making them again is not byte-stable (a
    DICOMDIR gets fresh UIDs, a zip the file's time): CI's run must start from the inputs a run
    by hand started from, or the two explore differently.
    """
    if target == "dicom":
        files = [DATA / "pydicom_wheel_testfiles" / "CT_small.dcm", DATA / "pydicom_data" / "693_J2KR.dcm",
                 DATA / "cornerstone_testimages" / "CTImage.dcm_RLELossless_1.2.840.10008.1.2.5.dcm",
                 sorted((DATA / "dcmqi_ct3slice_masks" / "image").iterdir())[0]]
        return [p.read_bytes() for p in files if p.is_file()]
    if target == "nrrd":
        return [(DATA / "dcmqi_ct3slice_masks" / "masks" / "liver_seg.nrrd").read_bytes()]
    if target == "series":
        return [sorted((DATA / "dcmqi_ct3slice_masks" / "image").iterdir())[2].read_bytes()]
    if target == "seg":
        return [(DATA / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm").read_bytes()]
    if target == "sidecar":
        return [json.dumps({"format": "medseg-labels/1", "labels": [
            {"value": 5, "name": "liver", "color": [221, 130, 101], "algorithm_type": "MANUAL",
             "category": {"value": "123037004", "scheme": "SCT", "meaning": "Anatomical Structure"}}]}).encode(),
            json.dumps({"5": {"name": "liver", "color": [1, 2, 3], "locked": True}}).encode()]
    if target == "model_json":
        return [(starter_model_path() / "model.json").read_bytes()]
    if target in ("nifti", "mha", "zip", "dicomdir"):
        return [p.read_bytes() for p in sorted((SEEDS / target).iterdir())]
    raise KeyError(target)


def make_seeds() -> None:
    """Write seeds/{nifti,mha,zip,dicomdir} from shared/data (run once; the files are committed)."""
    import SimpleITK as sitk
    from pydicom import dcmread
    from pydicom.fileset import FileSet

    small = sitk.RegionOfInterest(sitk.ReadImage(str(DATA / "totalsegmentator" / "example_ct_sm.nii.gz")),
                                  (32, 32, 4), (40, 30, 10))
    (SEEDS / "nifti").mkdir(parents=True, exist_ok=True)
    for suffix in (".nii", ".nii.gz"):
        sitk.WriteImage(small, str(SEEDS / "nifti" / f"seed{suffix}"))
    (SEEDS / "mha").mkdir(parents=True, exist_ok=True)
    plain = sitk.Image(small)
    for key in plain.GetMetaDataKeys():
        plain.EraseMetaData(key)
    sitk.WriteImage(plain, str(SEEDS / "mha" / "seed.mha"))  # attached voxels
    header = (SEEDS / "mha" / "seed.mha").read_bytes().split(b"ElementDataFile = LOCAL\n")[0]
    (SEEDS / "mha" / "detached.mha").write_bytes(header + b"ElementDataFile = data.raw\n")  # names the raw beside it
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        member = zipfile.ZipInfo("study/CT_small.dcm", date_time=(2026, 1, 1, 0, 0, 0))
        archive.writestr(member, (DATA / "pydicom_wheel_testfiles" / "CT_small.dcm").read_bytes(), zipfile.ZIP_DEFLATED)
    (SEEDS / "zip").mkdir(parents=True, exist_ok=True)
    (SEEDS / "zip" / "study.zip").write_bytes(buffer.getvalue())
    fileset = FileSet()
    fileset.add(dcmread(DATA / "pydicom_wheel_testfiles" / "CT_small.dcm"))
    fileset.write(WORK / "seed_media")
    (SEEDS / "dicomdir").mkdir(parents=True, exist_ok=True)
    shutil.copy(WORK / "seed_media" / "DICOMDIR", SEEDS / "dicomdir" / "DICOMDIR")


def one_input(target: str):
    run = TARGETS[target]
    count = [0]

    def test_one_input(data: bytes) -> None:
        try:
            run(data)
        except MedsegError:
            pass  # the contract: a clear error naming the file
        finally:
            # The cyclic collector runs at fixed inputs, not whenever allocations trigger it: the
            # finalisers it runs (closing files, zip handles) reach code whose coverage would
            # otherwise land on whichever input was running, differently in every run.
            count[0] += 1
            if count[0] % 100 == 0:
                gc.collect()
    return test_one_input


def main(argv: list[str]) -> None:
    if "--make-seeds" in argv:
        make_seeds()
        return
    if len(argv) < 2 or argv[1] not in TARGETS:
        print("targets:", ", ".join(TARGETS))
        sys.exit(0 if "--list" in argv else 2)
    target = argv[1]
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > MEMORY_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))
    corpus = WORK / "corpus"
    corpus.mkdir(parents=True)
    for index, seed in enumerate(seeds(target)):
        (corpus / f"seed{index}").write_bytes(seed)
    options = [a for a in argv[2:]]
    if not any(a.startswith("-rss_limit_mb") for a in options):
        # libFuzzer reads its peak RSS from getrusage, which Linux carries across exec: started
        # from a test process of 3.8 GB it saw 3855 MB before its first input. The address-space
        # limit above bounds the harness instead (a MemoryError is a crash).
        options.append("-rss_limit_mb=0")
    if not any(a.startswith("-timeout") for a in options):
        options.append("-timeout=60")
    atheris.Setup([argv[0], *options, str(corpus)], one_input(target))
    gc.collect()
    gc.freeze()  # the imported libraries: a collection then scans only what the inputs made
    gc.disable()  # collections at fixed inputs only (one_input): the same run on every machine
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
