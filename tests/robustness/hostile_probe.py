"""A probe of medseg's command line with hostile and careless inputs (issue 43), by hand, not in CI.

    .venv/bin/python tests/robustness/hostile_probe.py [--work DIR] [--only SUBSTRING] [--list] [-v]

Every input is made here from the real CT in ../shared/data (a header field set to a lie, a bit
flipped, a file cut short, a detached data file pointing out of the study, a FIFO in a series
folder, an argument out of range, ...) and handed to ``medseg`` (info, convert, segment, stats,
edit, plan, train) in a forked child under a 4 GiB address-space limit and a time limit. Each run
is classified:

- clear error: exit 1 with ``medseg: error:`` (or argparse's usage error, exit 2) and no traceback;
  where the input is a file, the message must name it (else: unclear error);
- accepted, same: exit 0 and the result equals the clean input's (array, spacing, origin, direction);
- accepted with a note: exit 0, the result differs from the clean one, and a finding or note
  that the clean run did not have says why;
- silently wrong: exit 0, a different result (or a result where there must be none) and no word;
- traceback, hang (past the time limit), reads outside (a detached data file outside the
  header's folder, /dev/zero, ... was read), raw escapes (a control character from a file
  reached the terminal unescaped).

The last five must be 0. The table is printed at the end (and written to WORK/table.txt, with
every run's verdict in WORK/runs.jsonl). It takes about 10 minutes on two cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data")) / "ct"
MEMORY_LIMIT = 4 << 30
CANARY_HU = 4242  # the value every voxel of the canary file outside the study holds

VERDICTS = ["clear error", "accepted, same", "accepted with a note", "unclear error", "traceback", "hang",
            "silently wrong", "reads outside", "raw escapes"]
MUST_BE_ZERO = ["traceback", "hang", "silently wrong", "reads outside", "raw escapes"]


@dataclass
class Run:
    rc: int | None  # None: killed at the time limit
    out: str
    err: str
    seconds: float
    folder: Path


@dataclass
class Case:
    name: str
    group: str
    argv: list[str]
    judge: Callable[[Run], tuple[str, str]]
    folder: Path
    names: list[str] = field(default_factory=list)  # what a clear error must mention (a file name)
    timeout: float = 90.0
    containment: bool = False  # success means a file outside the study was read


# --- running ---------------------------------------------------------------------------------------------------
def run_forked(argv: list[str], folder: Path, timeout: float) -> Run:
    """``medseg ARGV`` in a forked child (medseg's imports are shared), stdout/stderr to files."""
    out_path, err_path = folder / "stdout.txt", folder / "stderr.txt"
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        code = 99
        try:
            os.setsid()
            os.chdir(folder)
            for fd, path in ((1, out_path), (2, err_path)):
                handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(handle, fd)
                os.close(handle)
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
            from medseg.cli import main

            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
        except BaseException:  # noqa: BLE001 - the child reports everything as a traceback
            traceback.print_exc()
            code = 99
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code if isinstance(code, int) else 99)
    rc: int | None = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() - started > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            break
        time.sleep(0.05)
    read = lambda p: p.read_text(errors="replace") if p.exists() else ""  # noqa: E731
    return Run(rc, read(out_path), read(err_path), time.monotonic() - started, folder)


def classify(case: Case, run: Run) -> tuple[str, str]:
    if run.rc is None:
        return "hang", f"killed after {case.timeout:.0f} s"
    text = run.out + run.err
    if "Traceback (most recent call last)" in text or run.rc not in (0, 1, 2):
        return "traceback", _last_line(run.err)
    if _raw_escape(text):
        return "raw escapes", repr(_raw_escape(text))
    if case.containment and run.rc == 0:
        return "reads outside", "a data file outside the header's folder was read"
    if run.rc in (1, 2):
        message = _error_line(run.err)
        if not message:
            return "unclear error", "exit non-zero without a message"
        if case.names and not any(name in run.err for name in case.names):
            return "unclear error", f"does not name {case.names[0]}: {message}"
        return "clear error", message
    return case.judge(run)


def _raw_escape(text: str) -> str:
    match = re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]", text)
    return match.group(0) if match else ""


def _error_line(err: str) -> str:
    for line in err.splitlines():
        if line.startswith("medseg: error:") or line.startswith("usage:") or ": error: " in line:
            return line[:300]
    return ""


def _last_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _findings(run: Run) -> set[str]:
    text = run.out + run.err
    found = set(re.findall(r"finding \[([a-z_]+)\]", text))
    found |= {f"note: {n[:40]}" for n in re.findall(r"^note: (.*)$", text, re.M)}
    for line in run.out.splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            found |= {f["kind"] for f in event.get("findings", [])} | {f"note: {n[:40]}" for n in event.get("notes", [])}
    return found


# --- judges ----------------------------------------------------------------------------------------------------
def read_volume(path: Path):
    import SimpleITK as sitk

    image = sitk.ReadImage(str(path))
    return (sitk.GetArrayFromImage(image), np.asarray(image.GetSpacing()), np.asarray(image.GetOrigin()),
            np.asarray(image.GetDirection()))


def same_volume(a: Path, b: Path) -> bool:
    va, vb = read_volume(a), read_volume(b)
    return (va[0].shape == vb[0].shape and np.array_equal(va[0], vb[0]) and np.allclose(va[1], vb[1], atol=1e-4)
            and np.allclose(va[2], vb[2], atol=1e-3) and np.allclose(va[3], vb[3], atol=1e-4))


def judge_output(reference: tuple[Path, set[str]] | None, output: str = "out.nii.gz",
                 must_refuse: bool = False) -> Callable[[Run], tuple[str, str]]:
    """Exit 0: the written file against the clean run's (same, or different with a new finding/note)."""
    def judge(run: Run) -> tuple[str, str]:
        path = run.folder / output
        new = _findings(run) - (reference[1] if reference else set())
        if must_refuse:
            return ("accepted with a note", ", ".join(sorted(new))) if new else ("silently wrong", "accepted without a word")
        if not path.exists():
            return "silently wrong", "exit 0 and no output"
        if reference is not None and same_volume(path, reference[0]):
            return "accepted, same", ", ".join(sorted(new))
        if new:
            return "accepted with a note", ", ".join(sorted(new))
        return "silently wrong", "a different result and no finding"
    return judge


def judge_names(*names: str) -> Callable[[Run], tuple[str, str]]:
    """Exit 0 is fine when the output names the bad files (``info`` on a folder with one bad file)."""
    def judge(run: Run) -> tuple[str, str]:
        text = run.out + run.err
        missing = [n for n in names if n not in text]
        if missing:
            return "silently wrong", f"exit 0 without naming {missing[0]}"
        return "accepted with a note", "names " + ", ".join(names)
    return judge


def judge_refuse(run: Run) -> tuple[str, str]:
    new = _findings(run)
    return ("accepted with a note", ", ".join(sorted(new))) if new else ("silently wrong", "accepted without a word")


def judge_ok(run: Run) -> tuple[str, str]:
    return "accepted, same", ""


# --- building inputs -------------------------------------------------------------------------------------------
class Builder:
    def __init__(self, work: Path):
        self.work = work
        self.cases: list[Case] = []
        self.references: dict[str, tuple[Path, set[str]]] = {}
        self.count = 0

    def folder(self, name: str) -> Path:
        self.count += 1
        folder = self.work / "cases" / f"{self.count:03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)[:60]}"
        folder.mkdir(parents=True)
        return folder

    def add(self, name: str, group: str, argv: list[str], folder: Path, judge=None, names=(), timeout=90.0,
            containment=False) -> None:
        self.cases.append(Case(name, group, [str(a) for a in argv], judge or judge_refuse, folder, list(names),
                               timeout, containment))

    def reference(self, key: str, argv: list[str], output: str = "out.nii.gz") -> tuple[Path, set[str]]:
        """The clean run (done now) whose output the hostile runs are compared with."""
        if key not in self.references:
            folder = self.work / "reference" / key
            folder.mkdir(parents=True)
            run = run_forked([str(a) for a in argv], folder, 600)
            if run.rc != 0:
                raise SystemExit(f"the clean run {key} failed: {run.err[-2000:]}")
            self.references[key] = (folder / output, _findings(run))
        return self.references[key]


def nifti_bytes(source: Path) -> bytes:
    """An uncompressed NIfTI-1 (sform code 2, qform code 0 as TotalSegmentator's) of ``source``."""
    return gzip.decompress(source.read_bytes()) if source.name.endswith(".gz") else source.read_bytes()


def patch(data: bytes, edits: list[tuple[int, str, tuple]]) -> bytes:
    out = bytearray(data)
    for offset, fmt, values in edits:
        out[offset:offset + struct.calcsize(fmt)] = struct.pack(fmt, *values)
    return bytes(out)


def sitk_write(image, path: Path, compress: bool = False) -> bytes:
    import SimpleITK as sitk

    sitk.WriteImage(image, str(path), compress)
    return path.read_bytes()


def text_header_split(data: bytes, end: bytes) -> tuple[str, bytes]:
    index = data.index(end) + len(end)
    return data[:index].decode("latin-1"), data[index:]


def set_field(header: str, key: str, value: str | None, separator: str) -> str:
    """Set (or with None remove) a text header field; a new one goes before the last line."""
    pattern = re.compile(rf"^{re.escape(key)}\s*{re.escape(separator.strip())}.*\n", re.M | re.I)
    line = "" if value is None else f"{key}{separator}{value}\n"
    if pattern.search(header):
        return pattern.sub(lambda _m: line, header, count=1)
    lines = header.splitlines(keepends=True)
    if separator.strip() == "=":  # MetaImage: ElementDataFile must stay last
        return "".join(lines[:-1]) + line + lines[-1]
    return "".join(lines[:-1]) + line + lines[-1]  # NRRD: the blank line ends the header


def dicom_series(target: Path, source: Path, change: Callable | None = None, only: int | None = None,
                 crop: int | None = None) -> Path:
    """Copy a DICOM series, calling ``change(dataset, index)`` on each file (or only on file ``only``)."""
    import pydicom

    target.mkdir(parents=True, exist_ok=True)
    for index, path in enumerate(sorted(source.iterdir())):
        dataset = pydicom.dcmread(path)
        if crop is not None:
            rows, columns = dataset.Rows, dataset.Columns
            top, left = (rows - crop) // 2, (columns - crop) // 2
            centre = np.ascontiguousarray(dataset.pixel_array[top:top + crop, left:left + crop])
            dataset.PixelData, dataset.Rows, dataset.Columns = centre.tobytes(), crop, crop
        changed = change is not None and (only is None or only == index)
        if changed:
            change(dataset, index)
        dataset.save_as(target / path.name)
        if changed and getattr(change, "raw", None):
            patch_raw_elements(target / path.name, change.raw)
    return target


def setter(**values):
    """A change setting header elements; a ``raw_ds(text)`` value is written as given (pydicom would refuse
    to make a DS of text that is not a number): a placeholder now, its bytes replaced after the save."""
    def change(dataset, _index):
        for keyword, value in values.items():
            if value is None:
                if keyword in dataset:
                    delattr(dataset, keyword)
            elif isinstance(value, RawValue):
                setattr(dataset, keyword, "0")
            else:
                setattr(dataset, keyword, value)
    change.raw = {k: v for k, v in values.items() if isinstance(v, RawValue)}
    return change


def patch_raw_elements(path: Path, raw: dict) -> None:
    """Replace the values of implicit/explicit VR little-endian elements in a saved file."""
    from pydicom.datadict import tag_for_keyword

    data = bytearray(path.read_bytes())
    for keyword, value in raw.items():
        tag = tag_for_keyword(keyword)
        key = struct.pack("<HH", tag >> 16, tag & 0xFFFF)
        at = data.find(key, 132 + 12)
        while at >= 0 and data[at - 1:at] == b"":
            at = data.find(key, at + 1)
        if at < 0:
            raise RuntimeError(f"{keyword} not found in {path}")
        if data[at + 4:at + 6].isalpha():  # explicit VR: 2-byte length
            length = struct.unpack("<H", data[at + 6:at + 8])[0]
            data[at:at + 8 + length] = key + data[at + 4:at + 6] + struct.pack("<H", len(value.data)) + value.data
        else:
            length = struct.unpack("<I", data[at + 4:at + 8])[0]
            data[at:at + 8 + length] = key + struct.pack("<I", len(value.data)) + value.data
    path.write_bytes(bytes(data))


@dataclass
class RawValue:
    data: bytes


def raw_ds(text: str) -> RawValue:
    """A DS value of any text, even one that is not a number."""
    data = text.encode("latin-1")
    return RawValue(data + (b" " if len(data) % 2 else b""))


# --- the cases -------------------------------------------------------------------------------------------------
def build(builder: Builder) -> None:
    nifti_cases(builder)
    nrrd_cases(builder)
    metaimage_cases(builder)
    dicom_cases(builder)
    file_cases(builder)
    seg_cases(builder)
    argument_cases(builder)
    model_cases(builder)


def nifti_cases(b: Builder) -> None:
    source = DATA / "totalsegmentator" / "example_ct_sm.nii.gz"
    base = b.work / "inputs" / "base.nii"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.write_bytes(nifti_bytes(source))
    raw = base.read_bytes()
    reference = b.reference("nifti", ["convert", base, b.work / "reference" / "nifti" / "out.nii.gz", "--quiet"])
    srow_x = struct.unpack("<4f", raw[280:296])

    def convert(name: str, data: bytes, suffix: str = ".nii", extra=(), judge=None, group="NIfTI header") -> None:
        folder = b.folder(name)
        path = folder / f"image{suffix}"
        path.write_bytes(data)
        b.add(name, group, ["convert", path, "out.nii.gz", "--quiet", *extra], folder,
              judge or judge_output(reference), names=[path.name])

    # the voxel spacing: pixdim[1] (x) with no transform, with a qform, with the sform
    for value in (0.0, float("nan"), float("inf"), -float("inf"), -3.0, 1e30, 1e-30, 1e-3, 200.0):
        for mode, codes in (("pixdim only", (0, 0)), ("qform", (1, 0)), ("sform", (0, 2))):
            scaled = srow_x[0] * value / 3.0 if np.isfinite(value) else value
            edits = [(80, "<f", (value,)), (252, "<hh", codes)]
            if mode == "sform":
                edits.append((280, "<4f", (scaled, srow_x[1], srow_x[2], srow_x[3])))
            data = patch(raw, edits)
            convert(f"nifti x spacing {value} ({mode})", data)
            if value in (0.0,) or value != value:
                convert(f"nifti x spacing {value} ({mode}) --spacing 3 3 3", data, extra=["--spacing", "3", "3", "3"],
                        judge=judge_output(reference))
    # where the voxels start
    for value in (float("nan"), float("inf"), -1.0, 0.0, 100.0, 1e20, 351.0, 353.0):
        convert(f"nifti vox_offset {value}", patch(raw, [(108, "<f", (value,))]))
    # the voxel type and size
    for name, edits in (("datatype 0", [(70, "<h", (0,))]), ("datatype RGB", [(70, "<hh", (128, 24))]),
                        ("datatype complex", [(70, "<hh", (32, 64))]), ("datatype binary", [(70, "<hh", (1, 1))]),
                        ("bitpix lie 32", [(72, "<h", (32,))]), ("datatype float on int16", [(70, "<hh", (16, 32))]),
                        ("datatype int8 on int16", [(70, "<hh", (256, 8))]),
                        ("dim0 0", [(40, "<h", (0,))]), ("dim0 8", [(40, "<h", (8,))]), ("dim0 -1", [(40, "<h", (-1,))]),
                        ("dim1 0", [(42, "<h", (0,))]), ("dim1 -5", [(42, "<h", (-5,))]),
                        ("dim1 32767", [(42, "<h", (32767,))]), ("dim4 2", [(40, "<hhhhh", (4, 122, 101, 30, 2))]),
                        ("dims 32767 cubed", [(40, "<hhhh", (3, 32767, 32767, 32767))])):
        convert(f"nifti {name}", patch(raw, edits))
    # the stored-value scaling
    for slope, inter in ((float("inf"), 0.0), (1e30, 0.0), (-float("inf"), 0.0), (1.0, float("nan")),
                         (1.0, float("inf")), (1e-30, 0.0)):
        convert(f"nifti scl_slope {slope} scl_inter {inter}", patch(raw, [(112, "<ff", (slope, inter))]))
    # orientation fields
    convert("nifti quaternion nan (qform)", patch(raw, [(252, "<hh", (1, 0)), (256, "<fff", (float("nan"),) * 3)]))
    convert("nifti srow nan (sform)", patch(raw, [(296, "<4f", (float("nan"),) * 4)]))
    convert("nifti sform all zero", patch(raw, [(280, "<12f", (0.0,) * 12)]))
    convert("nifti sform sheared", patch(raw, [(280, "<4f", (3.0, 3.0, 0.0, srow_x[3]))]))
    # headers that are not NIfTI-1
    convert("nifti sizeof_hdr 0", patch(raw, [(0, "<i", (0,))]))
    convert("nifti magic garbage", patch(raw, [(344, "<4s", (b"xyz\x00",))]))
    convert("nifti empty file", b"")
    convert("nifti 348 random bytes", np.random.default_rng(1).bytes(348))
    convert("nifti header only", raw[:352])
    extended = patch(raw, [(348, "<4B", (1, 0, 0, 0)), (108, "<f", (368.0,))])  # voxels after a 16-byte extension
    convert("nifti extension size 2 GB", extended[:352] + struct.pack("<ii", 0x7FFFFFF0, 0) + bytes(8) + raw[352:])
    convert("nifti extension of 16 bytes (valid)", extended[:352] + struct.pack("<ii", 16, 0) + bytes(8) + raw[352:])
    import nibabel as nib

    image = nib.load(str(base))
    folder = b.folder("nifti-2 (valid)")
    nib.save(nib.Nifti2Image(np.asanyarray(image.dataobj), image.affine), str(folder / "image.nii.gz"))
    b.add("nifti-2 (valid)", "NIfTI header", ["convert", folder / "image.nii.gz", "out.nii.gz", "--quiet"], folder,
          judge_output(reference), names=["image.nii.gz"])
    folder = b.folder("nifti-2 big-endian")
    big = nib.Nifti2Image(np.asanyarray(image.dataobj).astype(">i2"), image.affine)
    nib.save(big, str(folder / "image.nii"))
    b.add("nifti-2 big-endian", "NIfTI header", ["convert", folder / "image.nii", "out.nii.gz", "--quiet"], folder,
          judge_output(reference), names=["image.nii"])
    # compressed: bit flips (the gzip CRC), cuts, garbage after the end
    packed = gzip.compress(raw, 6, mtime=0)
    for position in (0.1, 0.3, 0.5, 0.7, 0.9, 0.95):
        flipped = bytearray(packed)
        flipped[int(len(packed) * position)] ^= 0x10
        convert(f"nifti.gz bit flip at {position:.0%}", bytes(flipped), ".nii.gz", group="NIfTI checksum")
    flipped = bytearray(packed)
    flipped[-6] ^= 0x01  # the stored CRC itself
    convert("nifti.gz CRC field flipped", bytes(flipped), ".nii.gz", group="NIfTI checksum")
    for keep in (0.2, 0.6, 0.999):
        convert(f"nifti.gz cut at {keep:.1%}", packed[:int(len(packed) * keep)], ".nii.gz", group="NIfTI checksum")
    convert("nifti.gz garbage appended", packed + b"garbage!" * 10, ".nii.gz", group="NIfTI checksum")
    convert("nifti.gz two members", gzip.compress(raw[:1000], mtime=0) + gzip.compress(raw[1000:], mtime=0), ".nii.gz",
            group="NIfTI checksum")
    # non-finite voxels
    voxels = np.asanyarray(image.dataobj).astype(np.float32)
    for name, change in (("one voxel NaN", lambda a: a.__setitem__((60, 50, 15), np.nan)),
                         ("one slice NaN", lambda a: a.__setitem__((slice(None), slice(None), 15), np.nan)),
                         ("one slice +inf", lambda a: a.__setitem__((slice(None), slice(None), 15), np.inf)),
                         ("every voxel NaN", lambda a: a.__setitem__(Ellipsis, np.nan))):
        array = voxels.copy()
        change(array)
        folder = b.folder(f"nifti float {name}")
        nib.save(nib.Nifti1Image(array, image.affine), str(folder / "image.nii.gz"))
        b.add(f"nifti float {name}", "NaN voxels", ["convert", folder / "image.nii.gz", "out.nii.gz", "--quiet"],
              folder, judge_output(reference), names=["image.nii.gz"])


def nrrd_cases(b: Builder) -> None:
    import SimpleITK as sitk

    image = sitk.ReadImage(str(DATA / "totalsegmentator" / "example_ct_sm.nii.gz"))
    inputs = b.work / "inputs"
    raw = sitk_write(image, inputs / "base.nrrd")
    packed = sitk_write(image, inputs / "packed.nrrd", True)
    reference = b.reference("nrrd", ["convert", inputs / "base.nrrd", b.work / "reference" / "nrrd" / "out.nii.gz",
                                     "--quiet"])
    header, body = text_header_split(raw, b"\n\n")
    header = header[:-1]  # the blank line is added back below

    def convert(name: str, text: str, data: bytes = body, judge=None, group="NRRD header", containment=False,
                extra_files: dict[str, bytes] | None = None, suffix=".nrrd") -> Path:
        folder = b.folder(name)
        study = folder / "study"
        study.mkdir()
        path = study / f"image{suffix}"
        path.write_bytes(text.encode("latin-1") + b"\n" + data)
        for rel, content in (extra_files or {}).items():
            target = study / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        b.add(name, group, ["convert", path, "out.nii.gz", "--quiet"], folder,
              judge or judge_output(reference), names=[path.name], containment=containment)
        return folder

    def field(text: str, key: str, value: str | None) -> str:
        return set_field(text, key, value, ": ")

    no_space = field(field(header, "space", None), "space origin", None)
    for name, text in (
            ("nrrd no space directions", field(header, "space directions", None)),
            ("nrrd spacings nan", field(no_space, "space directions", None) + "spacings: nan nan nan\n"),
            ("nrrd spacings 0", field(no_space, "space directions", None) + "spacings: 0 0 0\n"),
            ("nrrd spacings -3", field(no_space, "space directions", None) + "spacings: -3 -3 -3\n"),
            ("nrrd spacings 3 (valid)", field(no_space, "space directions", None) + "spacings: 3 3 3\n"),
            ("nrrd space direction zero vector", field(header, "space directions", "(0,0,0) (0,-3,0) (0,0,3)")),
            ("nrrd space direction nan", field(header, "space directions", "(nan,0,0) (0,-3,0) (0,0,3)")),
            ("nrrd space direction none", field(header, "space directions", "none (0,-3,0) (0,0,3)")),
            ("nrrd space directions parallel", field(header, "space directions", "(-3,0,0) (-3,0,0) (0,0,3)")),
            ("nrrd space origin nan", field(header, "space origin", "(nan,nan,nan)")),
            ("nrrd dimension 2", field(header, "dimension", "2")),
            ("nrrd dimension 4", field(header, "dimension", "4")),
            ("nrrd sizes 0", field(header, "sizes", "0 101 30")),
            ("nrrd sizes huge", field(header, "sizes", "100000 100000 100000")),
            ("nrrd sizes negative", field(header, "sizes", "-122 101 30")),
            ("nrrd type block", field(header, "type", "block")),
            ("nrrd type string", field(header, "type", "string")),
            ("nrrd type float on short", field(header, "type", "float")),
            ("nrrd encoding gzip on raw", field(header, "encoding", "gzip")),
            ("nrrd encoding bzip2 on raw", field(header, "encoding", "bzip2")),
            ("nrrd encoding hex on raw", field(header, "encoding", "hex")),
            ("nrrd encoding unknown", field(header, "encoding", "rot13")),
            ("nrrd byte skip 1e12", header + "byte skip: 1000000000000\n"),
            ("nrrd line skip 1e9", header + "line skip: 1000000000\n"),
            ("nrrd kinds RGB", field(header, "kinds", "RGB-color domain domain")),
    ):
        convert(name, text)
    convert("nrrd truncated", header, body[: len(body) // 2])
    # gzip encoding: bit flips and cuts
    pheader, pbody = text_header_split(packed, b"\n\n")
    pheader = pheader[:-1]
    for position in (0.2, 0.5, 0.8):
        flipped = bytearray(pbody)
        flipped[int(len(pbody) * position)] ^= 0x08
        convert(f"nrrd gzip bit flip at {position:.0%}", pheader, bytes(flipped), group="NRRD checksum")
    convert("nrrd gzip cut", pheader, pbody[: len(pbody) // 2], group="NRRD checksum")
    # detached data files: containment
    detached = field(header, "encoding", "raw")
    canary = np.full(len(body) // 2, CANARY_HU, dtype="<i2").tobytes()
    (b.work / "outside.raw").write_bytes(canary)
    for name, target, extra, contained in (
            ("nrrd data file ../../outside.raw", "../../../outside.raw", None, True),
            ("nrrd data file absolute outside", str(b.work / "outside.raw"), None, True),
            ("nrrd data file /etc/passwd", "/etc/passwd", None, True),
            ("nrrd data file /dev/zero", "/dev/zero", None, True),
            ("nrrd data file /proc/self/environ", "/proc/self/environ", None, True),
            ("nrrd data file in its folder (valid)", "data.raw", {"data.raw": body}, False),
            ("nrrd data file below its folder (valid)", "sub/data.raw", {"sub/data.raw": body}, False),
            ("nrrd data file missing", "missing.raw", None, False),
            ("nrrd data file LIST outside", "LIST\n../../../outside.raw", None, True),
            ("nrrd data file pattern outside", "../../../outside%d.raw 1 1 1", None, True),
    ):
        folder = convert(name, field(detached, "data file", target), b"", containment=contained, extra_files=extra,
                         suffix=".nhdr")
    (b.work / "outside1.raw").write_bytes(canary)
    # a FIFO and a folder as the data file
    for name, make in (("nrrd data file a FIFO", lambda p: os.mkfifo(p)), ("nrrd data file a folder", lambda p: p.mkdir()),
                       ("nrrd data file a link out", lambda p: p.symlink_to(b.work / "outside.raw"))):
        folder = convert(name, field(detached, "data file", "data.raw"), b"", containment=True, suffix=".nhdr")
        make(folder / "study" / "data.raw")


def metaimage_cases(b: Builder) -> None:
    import SimpleITK as sitk

    image = sitk.ReadImage(str(DATA / "totalsegmentator" / "example_ct_sm.nii.gz"))
    inputs = b.work / "inputs"
    image = sitk.Image(image)
    for key in image.GetMetaDataKeys():
        image.EraseMetaData(key)
    raw = sitk_write(image, inputs / "base.mha")
    reference = b.reference("mha", ["convert", inputs / "base.mha", b.work / "reference" / "mha" / "out.nii.gz",
                                    "--quiet"])
    header, body = text_header_split(raw, b"ElementDataFile = LOCAL\n")

    def field(text: str, key: str, value: str | None) -> str:
        return set_field(text, key, value, " = ")

    def convert(name: str, text: str, data: bytes = body, judge=None, group="MHA header", containment=False,
                suffix=".mha", extra_files=None) -> Path:
        folder = b.folder(name)
        study = folder / "study"
        study.mkdir()
        path = study / f"image{suffix}"
        path.write_bytes(text.encode("latin-1") + data)
        for rel, content in (extra_files or {}).items():
            target = study / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        b.add(name, group, ["convert", path, "out.nii.gz", "--quiet"], folder, judge or judge_output(reference),
              names=[path.name], containment=containment)
        return folder

    for name, text in (
            ("mha no ElementSpacing", field(header, "ElementSpacing", None)),
            ("mha ElementSpacing 0", field(header, "ElementSpacing", "0 0 0")),
            ("mha ElementSpacing nan", field(header, "ElementSpacing", "nan nan nan")),
            ("mha ElementSpacing -3", field(header, "ElementSpacing", "-3 -3 -3")),
            ("mha ElementSpacing inf", field(header, "ElementSpacing", "inf 3 3")),
            ("mha ElementSpacing 1e30", field(header, "ElementSpacing", "1e30 3 3")),
            ("mha ElementSpacing two values", field(header, "ElementSpacing", "3 3")),
            ("mha ElementSpacing text", field(header, "ElementSpacing", "three three three")),
            ("mha ElementSize only (valid)", field(field(header, "ElementSpacing", None), "ElementSize", "3 3 3")),
            ("mha CompressedData True on raw", field(header, "CompressedData", "True")),
            ("mha CompressedDataSize lie", field(field(header, "CompressedData", "True"), "CompressedDataSize", "10")),
            ("mha ElementType MET_STRING", field(header, "ElementType", "MET_STRING")),
            ("mha ElementType MET_OTHER", field(header, "ElementType", "MET_OTHER")),
            ("mha ElementType unknown", field(header, "ElementType", "MET_QUATERNION")),
            ("mha ElementType float on short", field(header, "ElementType", "MET_FLOAT")),
            ("mha ElementType char on short", field(header, "ElementType", "MET_CHAR")),
            ("mha HeaderSize 1e11", field(header, "HeaderSize", "100000000000")),
            ("mha HeaderSize -5", field(header, "HeaderSize", "-5")),
            ("mha HeaderSize 1000", field(header, "HeaderSize", "1000")),
            ("mha NDims 2", field(header, "NDims", "2")),
            ("mha NDims 4", field(header, "NDims", "4")),
            ("mha NDims 0", field(header, "NDims", "0")),
            ("mha NDims 9", field(header, "NDims", "9")),
            ("mha DimSize 0", field(header, "DimSize", "0 101 30")),
            ("mha DimSize huge", field(header, "DimSize", "100000 100000 100000")),
            ("mha DimSize negative", field(header, "DimSize", "-122 101 30")),
            ("mha channels 3", field(header, "ElementNumberOfChannels", "3")),
            ("mha channels 0", field(header, "ElementNumberOfChannels", "0")),
            ("mha TransformMatrix nan", field(header, "TransformMatrix", "nan 0 0 0 nan 0 0 0 nan")),
            ("mha TransformMatrix zero", field(header, "TransformMatrix", "0 0 0 0 0 0 0 0 0")),
            ("mha TransformMatrix sheared", field(header, "TransformMatrix", "1 1 0 0 1 0 0 0 1")),
            ("mha Offset nan", field(header, "Offset", "nan nan nan")),
            # (BinaryDataByteOrderMSB True over little-endian voxels describes other data, undetectably: not probed)
    ):
        convert(name, text)
    convert("mha truncated", header, body[: len(body) // 3])
    packed = sitk_write(image, inputs / "packed.mha", True)
    pheader, pbody = text_header_split(packed, b"ElementDataFile = LOCAL\n")
    for position in (0.3, 0.7):
        flipped = bytearray(pbody)
        flipped[int(len(pbody) * position)] ^= 0x04
        convert(f"mha compressed bit flip at {position:.0%}", pheader, bytes(flipped), group="MHA checksum")
    detached = header.replace("ElementDataFile = LOCAL\n", "")
    canary = np.full(len(body) // 2, CANARY_HU, dtype="<i2").tobytes()
    (b.work / "outside.raw").write_bytes(canary)
    for name, target, extra, contained in (
            ("mha ElementDataFile ../../outside.raw", "../../../outside.raw", None, True),
            ("mha ElementDataFile absolute outside", str(b.work / "outside.raw"), None, True),
            ("mha ElementDataFile /etc/passwd", "/etc/passwd", None, True),
            ("mha ElementDataFile /dev/zero", "/dev/zero", None, True),
            ("mha ElementDataFile in its folder (valid)", "data.raw", {"data.raw": body}, False),
            ("mha ElementDataFile missing", "missing.raw", None, False),
            ("mha ElementDataFile LIST outside", "LIST\n../../../outside.raw", None, True),
            ("mha ElementDataFile pattern outside", "../../../outside%d.raw 1 1 1", None, True),
    ):
        convert(name, detached + f"ElementDataFile = {target}\n", b"", containment=contained, suffix=".mhd",
                extra_files=extra)
    for name, make in (("mha ElementDataFile a FIFO", lambda p: os.mkfifo(p)),
                       ("mha ElementDataFile a link out", lambda p: p.symlink_to(b.work / "outside.raw"))):
        folder = convert(name, detached + "ElementDataFile = data.raw\n", b"", containment=True, suffix=".mhd")
        make(folder / "study" / "data.raw")


def dicom_cases(b: Builder) -> None:
    series = DATA / "dcmqi_ct3slice_masks" / "image"
    reference = b.reference("dicom", ["convert", series, b.work / "reference" / "dicom" / "out.nii.gz", "--quiet"])

    def convert(name: str, change=None, only=None, group="DICOM header", judge=None, setup=None, info=False) -> None:
        folder = b.folder(name)
        study = dicom_series(folder / "study", series, change, only)
        if setup is not None:
            setup(study)
        names = [p.name for p in sorted(study.iterdir())] if only is None else [sorted(study.iterdir())[only].name]
        b.add(name, group, ["convert", study, "out.nii.gz", "--quiet"], folder, judge or judge_output(reference),
              names=names + ["study"])
        if info:  # info must name a file it left out; otherwise any clean listing will do
            judge_info = judge_names(*names) if only is not None or setup is not None else judge_ok
            b.add(name + " (info)", group, ["info", study], folder, judge_info, names=names + ["study"])

    ds = raw_ds
    # An intercept of 0 or 1e-30 is a legal value (it describes other data, undetectably): not probed.
    lies = {"RescaleIntercept": ("abc", "nan", "inf", "-inf", "1e30", "-1e30", "", "1e7"),
            "RescaleSlope": ("abc", "nan", "inf", "-inf", "1e30", "-1e30", "0", "1e-30", "")}
    for keyword, texts in lies.items():
        for text in texts:
            convert(f"dicom {keyword} {text!r} (all files)", setter(**{keyword: ds(text)}), group="DICOM rescale")
        convert(f"dicom {keyword} 'abc' (one file)", setter(**{keyword: ds("abc")}), only=1, group="DICOM rescale",
                info=True)
    convert("dicom RescaleSlope missing", setter(RescaleSlope=None), group="DICOM rescale")
    for name, value in (("missing", None), ("0\\0", ds("0\\0")), ("nan", ds("nan\\nan")), ("-1", ds("-1\\-1")),
                        ("1e30", ds("1e30\\1e30")), ("abc", ds("abc\\abc")), ("one value", ds("0.5"))):
        convert(f"dicom PixelSpacing {name}", setter(PixelSpacing=value), group="DICOM spacing")
    convert("dicom PixelSpacing 0 --spacing", setter(PixelSpacing=ds("0\\0")), group="DICOM spacing")
    b.cases[-1].argv += ["--spacing", "0.7", "0.7", "2.5"]
    b.cases[-1].judge = judge_output(reference)
    for name, value in (("missing", None), ("nan", ds("nan\\0\\0\\0\\1\\0")), ("zero", ds("0\\0\\0\\0\\0\\0")),
                        ("parallel rows", ds("1\\0\\0\\1\\0\\0")), ("not unit", ds("2\\0\\0\\0\\2\\0")),
                        ("5 values", ds("1\\0\\0\\0\\1"))):
        convert(f"dicom ImageOrientationPatient {name}", setter(ImageOrientationPatient=value),
                group="DICOM orientation")
    for name, change, only in (("missing (one file)", setter(ImagePositionPatient=None), 1),
                               ("missing (all files)", setter(ImagePositionPatient=None), None),
                               ("nan", setter(ImagePositionPatient=ds("nan\\nan\\nan")), 1),
                               ("1e30", setter(ImagePositionPatient=ds("0\\0\\1e30")), 1),
                               ("duplicate", setter(ImagePositionPatient=ds("-250\\-250\\-100")), None)):
        convert(f"dicom ImagePositionPatient {name}", change, only, group="DICOM orientation")
    for name, values in (("Rows 0", dict(Rows=0)), ("Rows larger", dict(Rows=1024)), ("Rows smaller", dict(Rows=256)),
                         ("Columns 65535", dict(Columns=65535)), ("BitsAllocated 8", dict(BitsAllocated=8)),
                         ("BitsAllocated 32", dict(BitsAllocated=32)), ("BitsAllocated 0", dict(BitsAllocated=0)),
                         ("BitsAllocated 12", dict(BitsAllocated=12)), ("BitsStored 17", dict(BitsStored=17)),
                         ("BitsStored 0", dict(BitsStored=0)), ("HighBit 20", dict(HighBit=20)),
                         ("PixelRepresentation 2", dict(PixelRepresentation=2)),
                         ("SamplesPerPixel 3", dict(SamplesPerPixel=3)),
                         ("PALETTE COLOR without a LUT", dict(PhotometricInterpretation="PALETTE COLOR")),
                         ("Photometric RGB", dict(PhotometricInterpretation="RGB")),
                         ("Photometric YBR_FULL", dict(PhotometricInterpretation="YBR_FULL")),
                         ("MONOCHROME1 (valid)", dict(PhotometricInterpretation="MONOCHROME1")),
                         ("NumberOfFrames abc", dict(NumberOfFrames=raw_ds("abc"))),
                         ("NumberOfFrames 0", dict(NumberOfFrames=0)), ("NumberOfFrames 1000", dict(NumberOfFrames=1000))):
        convert(f"dicom {name}", setter(**values), group="DICOM pixel module")

    def syntax(uid: str):
        def setup(study: Path) -> None:
            import pydicom
            from pydicom.filebase import DicomBytesIO
            from pydicom.filewriter import write_file_meta_info

            for path in study.iterdir():
                data = path.read_bytes()
                end = 144 + struct.unpack("<I", data[140:144])[0]  # after the meta group (its length at 140)
                meta = pydicom.dcmread(path, stop_before_pixels=True).file_meta
                meta.TransferSyntaxUID = uid
                buffer = DicomBytesIO()
                buffer.is_little_endian, buffer.is_implicit_VR = True, False
                write_file_meta_info(buffer, meta, enforce_standard=True)
                path.write_bytes(data[:128] + b"DICM" + buffer.getvalue() + data[end:])
        return setup

    for name, uid in (("Deflated", "1.2.840.10008.1.2.1.99"), ("JPEG 2000", "1.2.840.10008.1.2.4.90"),
                      ("Big Endian", "1.2.840.10008.1.2.2"), ("RLE", "1.2.840.10008.1.2.5"), ("unknown 1.2.3", "1.2.3"),
                      ("Explicit VR on implicit data", "1.2.840.10008.1.2.1")):
        convert(f"dicom transfer syntax says {name}", setup=syntax(uid), group="DICOM header lies")

    def pixel_length(length: int):
        def setup(study: Path) -> None:
            for path in study.iterdir():
                data = bytearray(path.read_bytes())
                at = data.rfind(b"\xe0\x7f\x10\x00")
                data[at + 4:at + 8] = struct.pack("<I", length)
                path.write_bytes(bytes(data))
        return setup

    for name, length in (("2 GB", 0x7FFFFFF0), ("odd", 524287), ("0", 0), ("undefined", 0xFFFFFFFF)):
        convert(f"dicom PixelData length {name}", setup=pixel_length(length), group="DICOM header lies")
    convert("dicom one slice MR", setter(Modality="MR"), only=1, group="DICOM series mix")
    convert("dicom all MR", setter(Modality="MR"), group="DICOM series mix")

    def other_study(study: Path) -> None:
        import pydicom

        first = pydicom.dcmread(next(study.iterdir()))
        head = sorted((DATA / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing").iterdir())[:3]
        for path in head:
            forged = pydicom.dcmread(path)
            forged.SeriesInstanceUID = first.SeriesInstanceUID
            forged.save_as(study / f"forged_{path.name}")

    convert("dicom 3 slices of another study forged in", setup=other_study, group="DICOM series mix")

    def other_study_same_grid(study: Path) -> None:
        import pydicom

        paths = sorted(study.iterdir())
        forged = pydicom.dcmread(paths[1])
        forged.StudyInstanceUID = "1.2.3.4.5.6.7.8.9"
        forged.PatientID = "SOMEONE-ELSE"
        forged.SOPInstanceUID = "1.2.3.4.5.6.7.8.10"
        forged.ImagePositionPatient = [float(v) for v in forged.ImagePositionPatient[:2]] + [
            float(forged.ImagePositionPatient[2]) + 1.25]
        forged.save_as(study / "forged.dcm")

    convert("dicom a slice of another patient between", setup=other_study_same_grid, group="DICOM series mix")

    def small_slice(study: Path) -> None:
        import pydicom

        path = sorted(study.iterdir())[1]
        dataset = pydicom.dcmread(path)
        dataset.PixelData = np.ascontiguousarray(dataset.pixel_array[::2, ::2]).tobytes()
        dataset.Rows, dataset.Columns = 256, 256
        dataset.PixelSpacing = [2 * float(v) for v in dataset.PixelSpacing]
        dataset.save_as(path)

    convert("dicom a 256x256 slice among 512x512", setup=small_slice, group="DICOM series mix", info=True)
    escape = "\x1b[2J\x1b[31mFAKE\x1b]0;owned\x07 \u202egnp.exe"
    convert("dicom SeriesDescription ANSI escapes", setter(SeriesDescription=escape), group="terminal", info=True)
    convert("dicom PatientName control characters", setter(PatientName="A\x1b[1mB\x00C"), group="terminal", info=True)
    convert("dicom Manufacturer C1 control", setter(Manufacturer="X\x9b31mY"), group="terminal", info=True)


def file_cases(b: Builder) -> None:
    series = DATA / "dcmqi_ct3slice_masks" / "image"
    reference = b.reference("dicom", [])

    def folder_case(name: str, setup, bad: str, timeout: float = 60.0) -> None:
        for command in ("info", "convert"):
            folder = b.folder(f"{name} ({command})")
            study = folder / "study"
            shutil.copytree(series, study)
            setup(study)
            argv = ["info", study] if command == "info" else ["convert", study, "out.nii.gz", "--quiet"]
            judge = judge_names(bad) if command == "info" else judge_output(reference)
            if command == "convert" and bad:
                judge = _and_names(judge_output(reference), bad)
            b.add(f"{name} ({command})", "files in a study", argv, folder, judge, names=[bad or "study"],
                  timeout=timeout)

    folder_case("zero-length file", lambda s: (s / "04.dcm").write_bytes(b""), "04.dcm")
    folder_case("a slice cut in half", lambda s: (s / "02.dcm").write_bytes((series / "02.dcm").read_bytes()[:260000]),
                "02.dcm")
    folder_case("a slice cut in its header", lambda s: (s / "02.dcm").write_bytes((series / "02.dcm").read_bytes()[:700]),
                "02.dcm")
    folder_case("a garbage file", lambda s: (s / "junk.dcm").write_bytes(np.random.default_rng(2).bytes(5000)),
                "junk.dcm")
    folder_case("a FIFO", lambda s: os.mkfifo(s / "pipe.dcm"), "pipe.dcm")
    folder_case("a socket-like device link", lambda s: (s / "zero.dcm").symlink_to("/dev/zero"), "zero.dcm")

    def sparse(study: Path) -> None:
        with open(study / "huge.dcm", "wb") as handle:
            handle.write(b"\x00" * 128 + b"DICM")
            handle.truncate(16 << 30)

    folder_case("a 16 GiB sparse file with a preamble", sparse, "huge.dcm", timeout=120)
    folder_case("a folder named like a slice", lambda s: (s / "folder.dcm").mkdir(), "")
    folder_case("a link loop", lambda s: ((s / "loop").symlink_to(s / "loop")), "")

    def unreadable(study: Path) -> None:
        (study / "02.dcm").chmod(0)

    if os.geteuid() != 0:
        folder_case("an unreadable slice", unreadable, "02.dcm")
    # paths
    for name, argv in (("info on a 5000-character path", ["info", "x" * 5000]),
                       ("info on a path with a NUL", ["info", "a\x00b"]),
                       ("convert to a 300-character name", ["convert", series, "n" * 293 + ".nii.gz"]),
                       ("convert to a 5000-character path", ["convert", series, "d/" * 2500 + "o.nii.gz"]),
                       ("convert to '' ", ["convert", series, ""]),
                       ("convert to a folder", ["convert", series, "."]),
                       ("convert to a missing folder", ["convert", series, "missing/out.nii.gz"])):
        folder = b.folder(name)
        b.add(name, "paths", argv, folder, judge_refuse)
    folder = b.folder("convert to a 255-character name")
    name255 = "n" * 248 + ".nii.gz"
    b.add("convert to a 255-character name (valid)", "paths", ["convert", series, name255, "--quiet"], folder,
          judge_output(reference, output=name255))


def _and_names(first, *names):
    def judge(run: Run) -> tuple[str, str]:
        verdict, detail = first(run)
        if verdict == "accepted, same" and not all(n in run.out + run.err for n in names):
            return "silently wrong", f"a file was left out without naming {names[0]}"
        return verdict, detail
    return judge


def seg_cases(b: Builder) -> None:
    series = DATA / "dcmqi_ct3slice_masks" / "image"
    seg = DATA / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm"
    folder = b.work / "reference" / "seg"
    folder.mkdir(parents=True, exist_ok=True)
    clean = run_forked(["stats", str(seg), "--image", str(series), "--json"], folder, 300)
    clean_numbers = json.loads(clean.out) if clean.rc == 0 else None

    def judge(run: Run) -> tuple[str, str]:
        try:
            numbers = json.loads(run.out)
        except ValueError:
            return "silently wrong", "exit 0 without a table"
        notes = [n for n in numbers.get("notes", []) if n not in (clean_numbers or {}).get("notes", [])]
        volumes = [(r.get("value"), r.get("volume_ml")) for r in numbers.get("labels", [])]
        clean_volumes = [(r.get("value"), r.get("volume_ml")) for r in (clean_numbers or {}).get("labels", [])]
        if volumes == clean_volumes:
            return "accepted, same", "; ".join(notes)
        return ("accepted with a note", "; ".join(notes)[:200]) if notes else ("silently wrong", "other volumes, no note")

    def stats(name: str, change) -> None:
        import pydicom

        folder = b.folder(name)
        dataset = pydicom.dcmread(seg)
        change(dataset)
        dataset.save_as(folder / "seg.dcm")
        b.add(name, "DICOM SEG", ["stats", folder / "seg.dcm", "--image", series, "--json"], folder, judge,
              names=["seg.dcm"])

    def frames(n):
        return lambda d: setattr(d, "NumberOfFrames", n)

    stats("seg NumberOfFrames 300", frames(300))
    stats("seg NumberOfFrames 1", frames(1))
    stats("seg NumberOfFrames 0", frames(0))
    stats("seg pixel data cut", lambda d: setattr(d, "PixelData", d.PixelData[: len(d.PixelData) // 4]))
    stats("seg pixel data empty", lambda d: setattr(d, "PixelData", b""))

    def other_series(d) -> None:
        d.ReferencedSeriesSequence[0].SeriesInstanceUID = "1.2.3.4.5.6.7.8.9.10"
    stats("seg references another series", other_series)
    stats("seg another frame of reference", lambda d: setattr(d, "FrameOfReferenceUID", "1.2.3.4.5.6.7"))
    stats("seg Rows 1000", lambda d: setattr(d, "Rows", 1000))
    stats("seg SegmentationType garbage", lambda d: setattr(d, "SegmentationType", "WHATEVER"))

    def segment_number(value):
        def change(d) -> None:
            d.SegmentSequence[0].SegmentNumber = value
        return change
    stats("seg segment number 0", segment_number(0))
    stats("seg segment number 65535", segment_number(65535))

    def no_segments(d) -> None:
        d.SegmentSequence = []
    stats("seg no segments", no_segments)


def argument_cases(b: Builder) -> None:
    series = DATA / "dcmqi_ct3slice_masks" / "image"
    for name, argv in (
            ("plan --spacing 0 0 0", ["plan", "--spacing", "0", "0", "0", "--shape", "30", "100", "100"]),
            ("plan --spacing nan", ["plan", "--spacing", "nan", "1", "1", "--shape", "30", "100", "100"]),
            ("plan --spacing -1", ["plan", "--spacing", "-1", "1", "1", "--shape", "30", "100", "100"]),
            ("plan --spacing inf", ["plan", "--spacing", "inf", "1", "1", "--shape", "30", "100", "100"]),
            ("plan --shape 0", ["plan", "--spacing", "1", "1", "1", "--shape", "0", "100", "100"]),
            ("plan --shape huge", ["plan", "--spacing", "1", "1", "1", "--shape", "1000000000", "100000", "100000"]),
            ("plan --gpu-memory-gb nan", ["plan", "--spacing", "1", "1", "1", "--shape", "30", "100", "100",
                                          "--gpu-memory-gb", "nan"]),
            ("segment --tile-batch -5", ["segment", series, "-o", "seg.nii.gz", "--tile-batch", "-5"]),
            ("segment --tile-batch 0", ["segment", series, "-o", "seg.nii.gz", "--tile-batch", "0"]),
            ("segment --step 1e-6", ["segment", series, "-o", "seg.nii.gz", "--step", "1e-6"]),
            ("segment --step 0", ["segment", series, "-o", "seg.nii.gz", "--step", "0"]),
            ("segment --step 2", ["segment", series, "-o", "seg.nii.gz", "--step", "2"]),
            ("segment --step nan", ["segment", series, "-o", "seg.nii.gz", "--step", "nan"]),
            ("segment -o ''", ["segment", series, "-o", ""]),
            ("segment -o a 300-character name", ["segment", series, "-o", "s" * 293 + ".nii.gz"]),
            ("segment --threads -1", ["segment", series, "-o", "seg.nii.gz", "--threads", "-1"]),
            ("segment --spacing 0 0 0", ["segment", series, "-o", "seg.nii.gz", "--spacing", "0", "0", "0"]),
            ("segment --spacing nan", ["segment", series, "-o", "seg.nii.gz", "--spacing", "nan", "1", "1"]),
            ("train --lr nan", ["train", "data", "--out", "model", "--lr", "nan"]),
            ("train --lr inf", ["train", "data", "--out", "model", "--lr", "inf"]),
            ("train --lr -1", ["train", "data", "--out", "model", "--lr", "-1"]),
            ("train --lr 0", ["train", "data", "--out", "model", "--lr", "0"]),
            ("train --batch-size 0", ["train", "data", "--out", "model", "--batch-size", "0"]),
            ("train --batch-size -2", ["train", "data", "--out", "model", "--batch-size", "-2"]),
            ("train --epochs 0", ["train", "data", "--out", "model", "--epochs", "0"]),
            ("train --iterations -1", ["train", "data", "--out", "model", "--iterations", "-1"]),
            ("train --memory-gb nan", ["train", "data", "--out", "model", "--memory-gb", "nan"]),
            ("train --target-spacing 0 0 0", ["train", "data", "--out", "model", "--target-spacing", "0", "0", "0"]),
            ("train --validate-every 0", ["train", "data", "--out", "model", "--validate-every", "0"]),
    ):
        folder = b.folder(name)
        if argv[0] == "train":
            _training_pairs(folder / "data")
        b.add(name, "arguments", argv, folder, judge_refuse, timeout=180)


def _training_pairs(folder: Path) -> None:
    """A tiny image/label folder (two cases cut from the TotalSegmentator CT) to train on."""
    import SimpleITK as sitk

    folder.mkdir(parents=True)
    (folder / "images").mkdir()
    (folder / "labels").mkdir()
    image = sitk.ReadImage(str(DATA / "totalsegmentator" / "example_ct_sm.nii.gz"))
    labels = sitk.ReadImage(str(DATA / "totalsegmentator" / "example_seg.nii.gz"))
    for index, start in enumerate((0, 10)):
        box = ([30, 30, start], [48, 48, 16])
        sitk.WriteImage(sitk.RegionOfInterest(image, box[1], box[0]), str(folder / "images" / f"case{index}.nii.gz"))
        sitk.WriteImage(sitk.RegionOfInterest(labels, box[1], box[0]) == 5, str(folder / "labels" / f"case{index}.nii.gz"))


def model_cases(b: Builder) -> None:
    """Hostile model packages and label maps a segment would replace (each a real segmentation: slow)."""
    from medseg.model.package import starter_model_path

    series = DATA / "dcmqi_ct3slice_masks" / "image"
    small = dicom_series(b.work / "inputs" / "small", series, crop=192)
    ref_folder = b.work / "reference" / "segment"
    ref_folder.mkdir(parents=True, exist_ok=True)
    clean = run_forked(["segment", str(small), "-o", str(ref_folder / "seg.nii.gz"), "--json"], ref_folder, 600)
    if clean.rc != 0:
        raise SystemExit(f"the clean segmentation failed: {clean.err[-2000:]}")

    def judge(run: Run) -> tuple[str, str]:
        output = run.folder / "seg.nii.gz"
        if not output.exists():
            return "silently wrong", "exit 0 and no output"
        if same_volume(output, ref_folder / "seg.nii.gz"):
            return "accepted, same", ""
        new = _findings(run) - _findings(clean)
        return ("accepted with a note", ", ".join(sorted(new))) if new else ("silently wrong", "another label map")

    def package(name: str, change) -> None:
        folder = b.folder(name)
        model = folder / "model"
        shutil.copytree(starter_model_path(), model)
        change(model)
        b.add(name, "models", ["segment", small, "--model", model, "-o", "seg.nii.gz", "--json"], folder, judge,
              names=["model"], timeout=300)

    def weights(value: float):
        def change(model: Path) -> None:
            from safetensors.numpy import load_file, save_file

            for path in model.glob("*.safetensors"):
                tensors = load_file(str(path))
                save_file({k: np.full_like(v, value) if v.dtype.kind == "f" else v for k, v in tensors.items()},
                          str(path))
        return change

    def normalisation(key: str, value):
        def change(model: Path) -> None:
            manifest = json.loads((model / "model.json").read_text())
            for configuration in manifest["configurations"].values():
                normalization = configuration.get("normalization")
                if isinstance(normalization, dict):
                    for field_name in list(normalization):
                        if key in field_name:
                            normalization[field_name] = value
            (model / "model.json").write_text(json.dumps(manifest).replace("NaN", "NaN"))
        return change

    package("model weights all NaN", weights(float("nan")))
    package("model weights all +inf", weights(float("inf")))
    package("model weights all 0", weights(0.0))
    package("model normalisation mean NaN", normalisation("mean", float("nan")))
    package("model normalisation std 0", normalisation("std", 0.0))
    package("model normalisation std NaN", normalisation("std", float("nan")))
    # segment -o over a label map: medseg's own unchanged (replaced), edited by hand (refused)
    for name, edit in (("segment -o over medseg's own label map (valid)", None),
                       ("segment -o over a hand-edited label map", "edit")):
        folder = b.folder(name)
        shutil.copy(ref_folder / "seg.nii.gz", folder / "seg.nii.gz")
        shutil.copy(ref_folder / "seg.labels.json", folder / "seg.labels.json")
        if edit:
            import SimpleITK as sitk

            image = sitk.ReadImage(str(folder / "seg.nii.gz"))
            array = sitk.GetArrayFromImage(image)
            array[1, 10:20, 10:20] = 3
            edited = sitk.GetImageFromArray(array)
            edited.CopyInformation(image)
            sitk.WriteImage(edited, str(folder / "seg.nii.gz"), True)
            (folder / "edited.npy").write_bytes(array.tobytes())

        def judge_replace(run: Run, edited=bool(edit)) -> tuple[str, str]:
            if edited:
                return "silently wrong", "the hand-edited label map was replaced without --force"
            return judge(run)
        b.add(name, "output safety", ["segment", small, "-o", "seg.nii.gz", "--json"], folder, judge_replace,
              names=["seg.nii.gz"], timeout=300)


# --- main ------------------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, help="folder for the inputs and logs (default: a new temporary one)")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every run's verdict")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="medseg-hostile-"))
    if work.exists() and any(work.iterdir()):
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MEDSEG_DATA_DIR", str(work / "app-data"))
    os.environ.setdefault("MEDSEG_CONFIG_DIR", str(work / "app-config"))
    import SimpleITK  # noqa: F401

    import medseg.cli  # imported once, shared by the forked children
    import medseg.io.dicom_scan  # noqa: F401

    builder = Builder(work)
    build(builder)
    cases = [c for c in builder.cases if not args.only or args.only in c.name]
    if args.list:
        for case in cases:
            print(f"{case.group:20} {case.name}")
        print(len(cases), "cases")
        return 0
    counts: dict[str, dict[str, int]] = {}
    failures = []
    with open(work / "runs.jsonl", "w") as log:
        for number, case in enumerate(cases, 1):
            run = run_forked(case.argv, case.folder, case.timeout)
            verdict, detail = classify(case, run)
            counts.setdefault(case.group, {v: 0 for v in VERDICTS})[verdict] += 1
            log.write(json.dumps({"name": case.name, "group": case.group, "argv": case.argv, "rc": run.rc,
                                  "verdict": verdict, "detail": detail, "seconds": round(run.seconds, 2)}) + "\n")
            if verdict in MUST_BE_ZERO or verdict == "unclear error":
                failures.append((case, verdict, detail))
            if args.verbose or verdict in MUST_BE_ZERO:
                print(f"[{number}/{len(cases)}] {verdict:22} {case.name}: {detail[:160]!r}", flush=True)
    table = format_table(counts)
    (work / "table.txt").write_text(table)
    print(table)
    for case, verdict, detail in failures:
        print(f"{verdict}: {case.name} [{case.folder}]: {detail[:200]!r}")
    print(f"inputs and logs: {work}")
    return 1 if any(sum(c[v] for c in counts.values()) for v in MUST_BE_ZERO) else 0


def format_table(counts: dict[str, dict[str, int]]) -> str:
    columns = ["runs", *VERDICTS]
    width = max(len(g) for g in counts) if counts else 10
    lines = [f"{'group':<{width}} | " + " | ".join(columns)]
    totals = {c: 0 for c in columns}
    for group, row in counts.items():
        runs = sum(row.values())
        totals["runs"] += runs
        cells = [str(runs)] + [str(row[v]) for v in VERDICTS]
        for v in VERDICTS:
            totals[v] += row[v]
        lines.append(f"{group:<{width}} | " + " | ".join(f"{c:>{len(h)}}" for c, h in zip(cells, columns)))
    lines.append(f"{'all':<{width}} | " + " | ".join(f"{totals[c]:>{len(c)}}" for c in columns))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
