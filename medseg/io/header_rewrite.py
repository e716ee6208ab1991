"""A copy of a NRRD or MetaImage header with a usable spacing, for a file whose own is not (0, NaN,
negative, infinite) when the user gives the true spacing (``--spacing``).

ITK refuses to read a spacing of 0 or NaN ("Refusing to change spacing ... to [0, 0, 0]") and mirrors
an axis whose spacing is negative. The copy states 1 mm per axis (the caller then sets the user's
spacing) and unit direction vectors, and points at the original voxels (an absolute data file and the
lines to skip), so nothing but a few hundred bytes of header is written. A direction the header cannot
give (a zero or NaN vector) is made perpendicular to the other two, and a finding says so.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from medseg.core.volume import GeometryFinding
from medseg.errors import ImageFormatError
from medseg.io.file_types import BY_KEY
from medseg.io.header_facts import HEADER_LIMIT, ImageHeader

_NRRD_DROPPED = ("data file", "datafile", "line skip", "lineskip", "byte skip", "byteskip", "space directions",
                 "spacings")
_MET_DROPPED = ("elementspacing", "elementsize", "elementdatafile", "headersize")


def write_unit_spacing_header(path: Path, header: ImageHeader, folder: Path) -> Path:
    """Write the header copy into ``folder``; returns its path."""
    head = path.read_bytes()[:HEADER_LIMIT] if path.stat().st_size <= HEADER_LIMIT else _head(path)
    if header.format == "nrrd":
        return _nrrd(path, header, head, folder)
    return _metaimage(path, header, head, folder)


def _head(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(HEADER_LIMIT)


def _lines(head: bytes, end: int) -> list[str]:
    return head[:end].decode("latin-1").splitlines()


def _nrrd(path: Path, header: ImageHeader, head: bytes, folder: Path) -> Path:
    attached = not header.data_files
    end = header.data_offset if attached else len(head)
    lines = _lines(head, end)
    kept: list[str] = []
    directions: str | None = None
    spacings: str | None = None
    in_list = False
    for line in lines:
        if in_list:
            continue
        key = line.split(":", 1)[0].strip().lower() if ":" in line and not line.startswith("#") else ""
        if key in _NRRD_DROPPED and ":=" not in line:
            value = line.split(":", 1)[1].strip()
            if key == "space directions":
                directions = value
            elif key == "spacings":
                spacings = value
            elif key in ("data file", "datafile") and value.split()[:1] == ["LIST"]:
                in_list = True
            continue
        if line.strip():
            kept.append(line)
    if directions is not None:
        kept.append("space directions: " + " ".join(
            "none" if part == "none" else "(" + ",".join(f"{v:.17g}" for v in part) + ")"
            for part in unit_directions(directions)))
    if spacings is not None:
        kept.append("spacings: " + " ".join("1" if p.lower() != "nan" or i < 3 else "nan"
                                            for i, p in enumerate(spacings.split())))
    if attached:
        lines_before_data = head[:header.data_offset].count(b"\n")
        kept.append(f"data file: {path.resolve()}")
        kept.append(f"line skip: {lines_before_data}")
    else:
        if len(header.data_files) == 1:
            kept.append(f"data file: {header.data_files[0].resolve()}")
        else:
            kept.append("data file: LIST")
            kept.extend(str(f.resolve()) for f in header.data_files)
        for line in lines:
            key = line.split(":", 1)[0].strip().lower()
            if key in ("line skip", "lineskip", "byte skip", "byteskip"):
                kept.insert(-1 - (len(header.data_files) if len(header.data_files) > 1 else 0), line)
    copy = folder / "image.nhdr"
    copy.write_text("\n".join(kept) + "\n", encoding="latin-1")
    return copy


def unit_directions(text: str) -> list[tuple[float, ...] | str]:
    """The NRRD space directions as unit vectors; a zero or NaN vector made perpendicular to the others."""
    parts = re.findall(r"\([^)]*\)|none", text)
    vectors: list[np.ndarray | None | str] = []
    for part in parts:
        if part == "none":
            vectors.append("none")
            continue
        values = np.asarray([float(v) for v in part.strip("()").split(",")], dtype=np.float64)
        length = float(np.linalg.norm(values)) if np.all(np.isfinite(values)) else math.nan
        vectors.append(values / length if math.isfinite(length) and length > 0 else None)
    spatial = [i for i, v in enumerate(vectors) if not isinstance(v, str)]
    for position, index in enumerate(spatial):
        if vectors[index] is None:
            others = [vectors[i] for i in spatial if i != index and vectors[i] is not None]
            if len(others) == 2:
                cross = np.cross(others[0], others[1])
                vectors[index] = -cross if position == 1 else cross  # y = z x x keeps the axes right-handed
            else:
                vectors[index] = np.eye(3)[:, position]
    return ["none" if isinstance(v, str) else tuple(float(x) for x in v) for v in vectors]  # type: ignore[union-attr]


def _metaimage(path: Path, header: ImageHeader, head: bytes, folder: Path) -> Path:
    attached = not header.data_files
    end = header.data_offset if attached else len(head)
    kept = []
    header_size = None
    for line in _lines(head, end):
        key = line.split("=", 1)[0].strip().lower()
        if key == "headersize":
            header_size = line.split("=", 1)[1].strip()
        if key in _MET_DROPPED or not line.strip():
            continue
        kept.append(line)
    if any(line.split("=", 1)[0].strip().lower() == "elementdatafile" for line in kept):
        raise ImageFormatError("the MetaImage header is malformed", path=path)
    n = int(next(line.split("=", 1)[1] for line in kept if line.split("=", 1)[0].strip().lower() == "ndims"))
    kept.append("ElementSpacing = " + " ".join(["1"] * n))
    if attached:
        kept.append(f"HeaderSize = {header.data_offset}")
        kept.append(f"ElementDataFile = {path.resolve()}")
    else:
        if header_size is not None:
            kept.append(f"HeaderSize = {header_size}")
        if len(header.data_files) == 1:
            kept.append(f"ElementDataFile = {header.data_files[0].resolve()}")
        else:
            kept.append("ElementDataFile = LIST")
            kept.extend(str(f.resolve()) for f in header.data_files)
    copy = folder / ("image" + BY_KEY["mha"].suffixes[-1])  # a detached MetaImage header
    copy.write_text("\n".join(kept) + "\n", encoding="latin-1")
    return copy


def header_axis_findings(header: ImageHeader) -> list[GeometryFinding]:
    """What reading through the copy decided that the header did not say: the axes' directions."""
    findings = []
    negative = [axis for axis, value in zip("xyz", header.spacing.values or ()) if value < 0]
    if negative:
        findings.append(GeometryFinding(
            "negative_spacing", f"The header gives a negative spacing along {', '.join(negative)}; the axis directions "
                                "are taken from the header's orientation, not mirrored by the sign. Check left and right.",
            {"axes": negative}))
    degenerate = [axis for axis, value in zip("xyz", header.spacing.values or ())
                  if not (math.isfinite(value) and value != 0)]
    if degenerate and header.format == "nrrd" and header.spacing.field == "space directions":
        findings.append(GeometryFinding(
            "orientation_assumed", f"The header gives no direction for the {', '.join(degenerate)} axis (a zero or "
                                   "undefined space direction); it is taken perpendicular to the other axes. Check the "
                                   "image's orientation.", {"axes": degenerate}))
    return findings
