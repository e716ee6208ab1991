"""Helpers for the robustness probes: run ``medseg`` in a child process under a memory limit,
optionally inside a private user + mount namespace (``unshare -rm``) where a tiny tmpfs stands
for a full disk. A regression then fails its test instead of taking the CI machine down."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

# Address space, which bounds resident memory from above. medseg's CLI with torch imported
# maps about 1 GB (libraries, thread stacks); the probes' inputs need far less than this.
DEFAULT_MEMORY_LIMIT = 3 << 30


def limited(memory_bytes: int | None, file_bytes: int | None = None):
    """A preexec_fn setting RLIMIT_AS (and RLIMIT_FSIZE) in the child only."""
    def apply() -> None:
        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        if file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    return apply


def in_namespace(script: str) -> list[str]:
    """A command prefix: run ``script`` (mounts) as root of a private namespace, then the command."""
    return ["unshare", "-rm", "sh", "-euc", script + ' && exec "$@"', "sh"]


def run_medseg(*args: str | Path, prefix: list[str] | None = None, memory_bytes: int | None = DEFAULT_MEMORY_LIMIT,
               timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None,
               stdin: str | None = None) -> subprocess.CompletedProcess:
    command = [*(prefix or []), sys.executable, "-m", "medseg", *(str(a) for a in args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                          preexec_fn=limited(memory_bytes), input=stdin)


def rewrite_series(source: Path, target: Path, crop: int | None = None, **changes) -> Path:
    """Copy a DICOM series, setting header elements (``Modality="MR"``, ``PixelSpacing=[0, 0]``)
    and optionally keeping only the central ``crop`` x ``crop`` pixels (fewer tiles to segment)."""
    import numpy as np
    import pydicom

    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        dataset = pydicom.dcmread(path)
        for keyword, value in changes.items():
            setattr(dataset, keyword, value)
        if crop is not None:
            rows, columns = dataset.Rows, dataset.Columns
            top, left = (rows - crop) // 2, (columns - crop) // 2
            centre = np.ascontiguousarray(dataset.pixel_array[top:top + crop, left:left + crop])
            dataset.PixelData, dataset.Rows, dataset.Columns = centre.tobytes(), crop, crop
        dataset.save_as(target / path.name)
    return target


def json_event(run: subprocess.CompletedProcess, name: str = "done") -> dict:
    """The first event called ``name`` of a ``--json`` event stream."""
    import json

    assert run.returncode == 0, run.stderr[-3000:]
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return next(e for e in events if e.get("event") == name)


def zeros_deflated(size: int, block: int = 1 << 24, true_crc: bool = True) -> tuple[bytes, int]:
    """(raw deflate stream, CRC-32) of ``size`` zero bytes, built without compressing them all:
    after a full flush the compressor forgets its history, so every whole block compresses to
    the same bytes, which are repeated. ``true_crc=False`` skips the CRC (0): for members that
    must never be read to the end anyway."""
    import zlib

    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    whole, rest = divmod(size, block)
    chunk = bytes(block)
    one_block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH) if whole else b""
    tail = compressor.compress(bytes(rest)) + compressor.flush()
    crc = 0
    for _ in range(whole if true_crc else 0):  # block by block: Python's zlib has no crc32_combine
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(bytes(rest), crc) if true_crc else 0
    return one_block * whole + tail, crc


def write_zip(path: Path, members: list[tuple[str, int | bytes]], declared: dict[str, int] | None = None,
              true_crc: bool = True) -> Path:
    """A zip (deflate, zip64 headers) of members given as bytes or as a size of zeros, written
    as a stream; ``declared`` forges the uncompressed size the headers state for some members."""
    import struct
    import zlib

    declared = declared or {}
    central = b""
    with open(path, "wb") as out:
        for name, content in members:
            if isinstance(content, bytes):
                compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
                data, crc, size = compressor.compress(content) + compressor.flush(), zlib.crc32(content), len(content)
            else:
                (data, crc), size = zeros_deflated(content, true_crc=true_crc), content
            stated = declared.get(name, size)
            offset = out.tell()
            encoded = name.encode()
            extra = struct.pack("<HHQQ", 1, 16, stated, len(data))
            out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 8, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                                  len(encoded), len(extra)) + encoded + extra + data)
            central_extra = struct.pack("<HHQQQ", 1, 24, stated, len(data), offset)
            central += (struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 8, 0, 0, crc, 0xFFFFFFFF,
                                    0xFFFFFFFF, len(encoded), len(central_extra), 0, 0, 0, 0, 0xFFFFFFFF)
                        + encoded + central_extra)
        start = out.tell()
        out.write(central)
        end64 = out.tell()
        out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(members), len(members),
                              len(central), start))
        out.write(struct.pack("<IIQI", 0x07064B50, 0, end64, 1))
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
    return path


def write_dicomdir(slices: list[Path], folder: Path, names: list[list[str]]) -> Path:
    """A DICOMDIR (written by pydicom's FileSet) whose image records point at ``names`` under ``folder``
    (a list of path components each; they may be anything, e.g. ``["..", "outside"]``)."""
    import warnings

    from pydicom import dcmread
    from pydicom.fileset import FileSet

    fileset = FileSet()
    for path in slices:
        fileset.add(dcmread(path))
    fileset.write(folder)
    dicomdir = dcmread(folder / "DICOMDIR")
    images = [r for r in dicomdir.DirectoryRecordSequence if r.DirectoryRecordType == "IMAGE"]
    with warnings.catch_warnings():  # '02.dcm' or a path is not a valid CS value: that is the point
        warnings.filterwarnings("ignore", ".*Invalid value for VR CS")
        for record, parts in zip(images, names, strict=True):
            current = folder.joinpath(*record.ReferencedFileID)
            target = folder.joinpath(*parts)
            if current.exists() and folder.resolve() in target.resolve().parents:
                target.parent.mkdir(parents=True, exist_ok=True)
                current.rename(target)
            record.ReferencedFileID = parts
        dicomdir.save_as(folder / "DICOMDIR")
    return folder / "DICOMDIR"
