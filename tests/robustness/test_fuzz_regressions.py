"""Every input the fuzzer (tests/robustness/fuzz.py) found crashing a reader stays fixed.

The inputs are in tests/robustness/crashes/, named ``<target>-<what it found>`` (a few
hundred bytes each, one 26 KB); each is run through its fuzz target, which must return or raise
MedsegError, as the fuzzer requires. They replay in one process without the fuzzer's coverage
instrumentation (a process per input, instrumented, took 10 s each).

- zip-nonutf8-name: a zip whose member name is flagged UTF-8 but is not: zipfile raised
  UnicodeDecodeError out of ``expand_sources``.
- zip-empty-name: a member with an empty name: ZipInfo.is_dir raised IndexError.
- dicomdir-null-byte: a DICOMDIR whose ReferencedFileID holds a NUL: ``Path.resolve``
  raised ValueError out of the containment check.
- dicomdir-empty-sequence: a DICOMDIR whose DirectoryRecordSequence is empty (no value):
  pydicom gives None, and iterating it raised TypeError (found by CI's fuzzing run).
- dicomdir-records-not-a-sequence: a DICOMDIR whose DirectoryRecordSequence's VR is damaged
  into a number: iterating the int raised TypeError (found by CI's fuzzing run; its traceback
  went to the harness's stdout, which the CI test's log tail had cut off).
- nifti-one-dimension: a NIfTI header declaring one dimension: SimpleITK's RuntimeError
  ("Unsupported number of dimensions") escaped read_image (found by CI's fuzzing run).
- nifti-scalar-type-two-components: a NIfTI header declaring complex voxels of 2 components:
  SimpleITK's RuntimeError escaped the voxel-size estimate of read_image (found by hand, seed 101).
- dicom-j2k-python-gdcm-abort (26 KB, a JPEG 2000 Lossless CT slice mutated): python-gdcm, one of
  pydicom's decoder plugins when installed (dicom2nifti, a test peer, pulls it in), threw a C++
  exception on it and the process aborted (found by CI's fuzzing run); medseg no longer lets pydicom
  use that plugin (medseg.io.dicom_decode).
Crashes whose input is a real file mutated are rebuilt in a test below instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CRASHES = sorted((Path(__file__).parent / "crashes").iterdir())

# Every saved input through its fuzz target in ONE process (importing the harness takes seconds), one line
# per input as it finishes: an input that aborts the process leaves its own line and the later ones out.
_REPLAY = r"""
import sys
sys.path.insert(0, sys.argv[1])
import fuzz
for path in sys.argv[2:]:
    name = path.rsplit("/", 1)[-1]
    try:
        fuzz.one_input(name.split("-")[0])(open(path, "rb").read())
    except Exception as error:  # one_input lets only what is not a MedsegError through
        print(f"{name}: {type(error).__name__}: {error}"[:500], flush=True)
    else:
        print(f"{name}: clean", flush=True)
"""


@pytest.fixture(scope="module")
def replayed() -> dict[str, str]:
    """Each saved input's outcome: "clean", or what escaped, or how it ended the process (the replay
    then goes on in a new process from the next input)."""
    outcomes: dict[str, str] = {}
    left = [str(c) for c in CRASHES]
    while left:
        run = subprocess.run([sys.executable, "-c", _REPLAY, str(Path(__file__).parent), *left],
                             capture_output=True, text=True, timeout=600, env={**os.environ, "MEDSEG_FUZZ_REPLAY": "1"})
        outcomes.update(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
        left = [path for path in left if Path(path).name not in outcomes]
        if left:  # the first input without a line ended the process
            outcomes[Path(left.pop(0)).name] = f"the process ended (exit {run.returncode}): {run.stderr[-2000:]}"
    return outcomes


@pytest.mark.parametrize("crash", CRASHES, ids=[c.name for c in CRASHES])
def test_a_crash_the_fuzzer_found_is_a_clean_outcome_now(crash: Path, replayed) -> None:
    assert replayed[crash.name] == "clean", replayed[crash.name]


def test_a_seg_whose_code_item_lacks_its_value_is_an_error_naming_it(ct_dir: Path, tmp_path: Path) -> None:
    """Found by fuzzing (target seg): a segment's type code without CodeValue raised AttributeError."""
    import pydicom

    from medseg.errors import MedsegError
    from medseg.io import load
    from medseg.io.dicom_seg_read import read_dicom_seg

    seg = pydicom.dcmread(ct_dir / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm")
    del seg.SegmentSequence[0].SegmentedPropertyTypeCodeSequence[0].CodeValue
    seg.save_as(tmp_path / "seg.dcm")
    with pytest.raises(MedsegError, match="malformed") as caught:
        read_dicom_seg(tmp_path / "seg.dcm", load(ct_dir / "dcmqi_ct3slice_masks" / "image"))
    assert "seg.dcm" in str(caught.value)



_PLUGINS = r"""
import json, sys
from pydicom.pixels import get_decoder
from pydicom.uid import JPEG2000Lossless, RLELossless
seen = {"before": list(get_decoder(JPEG2000Lossless).available_plugins)}
from medseg.io import load
from medseg.io.dicom_seg_read import read_dicom_seg
if sys.argv[1] == "seg":  # a SEG read before any series: highdicom decodes its frames through pydicom
    from medseg.io import read_image
    image = read_image(sys.argv[2] + "/image.nii.gz")
    read_dicom_seg(sys.argv[3], image)
else:
    load(sys.argv[4])
seen["after"] = sorted({p for s in (JPEG2000Lossless, RLELossless) for p in get_decoder(s).available_plugins})
print(json.dumps(seen))
"""


@pytest.mark.parametrize("first_read", ["seg", "series"])
def test_pydicom_never_decodes_with_python_gdcm_once_medseg_reads_dicom(first_read: str, ct_dir: Path,
                                                                         tmp_path: Path) -> None:
    """python-gdcm is installed here (dicom2nifti, a test peer, requires it) and pydicom offers it for
    JPEG 2000; once medseg has read DICOM, a series or a SEG first, pydicom no longer does."""
    import json

    import SimpleITK as sitk

    images = ct_dir / "dcmqi_ct3slice_masks" / "image"
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(images)))
    sitk.WriteImage(reader.Execute(), str(tmp_path / "image.nii.gz"))
    run = subprocess.run([sys.executable, "-c", _PLUGINS, first_read, str(tmp_path),
                          str(ct_dir / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm"), str(images)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert "gdcm" in seen["before"], seen
    assert seen["after"] == ["pillow", "pydicom", "pylibjpeg"], seen
