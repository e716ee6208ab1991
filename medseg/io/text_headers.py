"""NRRD and MetaImage headers: their fields, spacing, geometry and detached data files, checked before
ITK reads them (the rules are in :mod:`medseg.io.image_headers`; NIfTI's binary header is read there).

A detached data file (NRRD ``data file``, MetaImage ``ElementDataFile``, in their single, LIST and
pattern forms) must be a regular file inside the header's own folder: ``../../etc/passwd`` and
``/dev/zero`` were read as voxels and segmented (issue 43).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from medseg.errors import ImageFormatError
from medseg.io.header_facts import HEADER_LIMIT, HeaderSpacing, ImageHeader, check_regular


def read_text_header(path: Path, metaimage: bool) -> tuple[dict[str, str], list[str], int]:
    """(fields with lower-case keys, lines after a LIST data file, byte offset of attached data)."""
    with open(path, "rb") as handle:
        head = handle.read(HEADER_LIMIT + 1)
    whole = len(head) <= HEADER_LIMIT
    fields: dict[str, str] = {}
    position = 0
    listing: list[str] | None = None
    while True:
        newline = head.find(b"\n", position)
        if newline < 0:
            if whole and position >= len(head):
                return fields, listing or [], position  # a detached header ends with the file
            if whole:
                line = head[position:].decode("latin-1").rstrip("\r")
                _take(fields, line, metaimage, listing)
                return fields, listing or [], len(head)
            raise ImageFormatError(f"the header runs past {HEADER_LIMIT >> 20} MiB: not read", path=path,
                                   hint="the file is corrupt or not an image")
        line = head[position:newline].decode("latin-1").rstrip("\r")
        position = newline + 1
        if listing is not None:
            if line.strip():
                listing.append(line.strip())
            continue
        if not metaimage and line == "" and position > 5:
            return fields, [], position
        key = _take(fields, line, metaimage, None)
        data_key = "elementdatafile" if metaimage else ("data file", "datafile")
        if key is not None and key in data_key:
            if fields[key].split()[:1] and fields[key].split()[0].upper() == "LIST":
                listing = []
                continue
            if metaimage:
                return fields, [], position


def _take(fields: dict[str, str], line: str, metaimage: bool, listing: list[str] | None) -> str | None:
    if line.startswith("#") or not line.strip():
        return None
    separators = ("=",) if metaimage else (":=", ":")
    for separator in separators:
        if separator in line:
            key, value = line.split(separator, 1)
            key = key.strip().lower()
            if separator == ":=":  # NRRD key/value pairs: free text, not fields
                return None
            fields.setdefault(key, value.strip())
            return key
    return None


def _numbers(text: str, count: int, name: str, path: Path) -> tuple[float, ...]:
    parts = text.replace(",", " ").split()
    try:
        values = tuple(float(part) for part in parts)
    except ValueError as error:
        raise ImageFormatError(f"the header's {name} is not a list of numbers ({text[:80]!r})", path=path) from error
    if len(values) != count:
        raise ImageFormatError(f"the header's {name} has {len(values)} values for {count} axes", path=path)
    return values


def _data_files(header_path: Path, value: str, listing: list[str], sizes: list[int]) -> list[Path]:
    """The detached data files a header names, each a regular file inside the header's folder."""
    folder = header_path.parent
    words = value.split()
    if words and words[0].upper() == "LIST":
        names = listing
    elif "%" in value and len(words) >= 4:  # a pattern: "slice%03d.raw MIN MAX STEP"
        try:
            first, last, step = int(words[1]), int(words[2]), int(words[3])
        except ValueError as error:
            raise ImageFormatError(f"the data file pattern {value[:80]!r} is not understood", path=header_path) from error
        if step == 0 or (last - first) // step + 1 > max(sizes + [1]) * 4 or (last - first) * step < 0:
            raise ImageFormatError(f"the data file pattern {value[:80]!r} names an impossible number of files",
                                   path=header_path)
        try:
            names = [words[0] % number for number in range(first, last + (1 if step > 0 else -1), step)]
        except (TypeError, ValueError) as error:
            raise ImageFormatError(f"the data file pattern {value[:80]!r} is not understood", path=header_path) from error
    else:
        names = [value]
    if not names:
        raise ImageFormatError("the header lists no data file", path=header_path)
    files = []
    root = folder.resolve()
    for name in names:
        target = Path(name) if Path(name).is_absolute() else folder / name
        try:
            inside = target.resolve().is_relative_to(root)
        except (OSError, ValueError, RuntimeError):  # a NUL, a link loop
            inside = False
        if not inside:
            raise ImageFormatError(f"the header names its data file {name[:200]!r}, outside its own folder: not read",
                                   path=header_path, hint="keep the data file beside the header (or below it)")
        check_regular(target, header_path)
        files.append(target)
    return files


_NRRD_TYPES = {"signed char": 1, "int8": 1, "int8_t": 1, "uchar": 1, "unsigned char": 1, "uint8": 1, "uint8_t": 1,
               "short": 2, "short int": 2, "signed short": 2, "signed short int": 2, "int16": 2, "int16_t": 2,
               "ushort": 2, "unsigned short": 2, "unsigned short int": 2, "uint16": 2, "uint16_t": 2,
               "int": 4, "signed int": 4, "int32": 4, "int32_t": 4, "uint": 4, "unsigned int": 4, "uint32": 4,
               "uint32_t": 4, "longlong": 8, "long long": 8, "long long int": 8, "signed long long": 8,
               "signed long long int": 8, "int64": 8, "int64_t": 8, "ulonglong": 8, "unsigned long long": 8,
               "unsigned long long int": 8, "uint64": 8, "uint64_t": 8, "float": 4, "double": 8}
_NRRD_ENCODINGS = {"raw": "raw", "gzip": "gzip", "gz": "gzip"}


def nrrd_header(path: Path) -> ImageHeader:
    with open(path, "rb") as handle:
        magic = handle.read(8)
    if not magic.startswith(b"NRRD000"):
        raise ImageFormatError("not a NRRD file (it does not start with NRRD000x)", path=path)
    fields, listing, offset = read_text_header(path, metaimage=False)
    try:
        dimension = int(fields["dimension"])
        sizes = [int(v) for v in fields["sizes"].split()]
    except (KeyError, ValueError) as error:
        raise ImageFormatError(f"the NRRD header lacks a usable dimension or sizes ({error})", path=path) from error
    kind = fields.get("type", "").lower()
    if kind not in _NRRD_TYPES:
        raise ImageFormatError(f"the voxel type {fields.get('type', '(none)')[:40]!r} is not one medseg reads (a CT has "
                               "one number per voxel)", path=path)
    encoding = fields.get("encoding", "").lower()
    if encoding not in _NRRD_ENCODINGS:
        raise ImageFormatError(f"the NRRD encoding {encoding[:40]!r} is not supported", path=path,
                               hint="write it as raw or gzip, e.g. with SimpleITK or 3D Slicer")
    if len(sizes) != dimension or not 2 <= dimension <= 4 or any(s < 1 for s in sizes):
        raise ImageFormatError(f"the NRRD header declares {dimension} dimensions of sizes {sizes[:8]}: not an image",
                               path=path)
    spatial = _nrrd_spatial_axes(fields, dimension, path)
    if dimension - len(spatial) > 0 and any(sizes[i] != 1 for i in range(dimension) if i not in spatial):
        raise ImageFormatError(f"the image has {dimension - len(spatial)} non-spatial axes of sizes "
                               f"{[sizes[i] for i in range(dimension) if i not in spatial]} (colour, vectors or time): "
                               "a CT has one number per voxel", path=path)
    for key in ("byte skip", "byteskip", "line skip", "lineskip"):
        if key in fields:
            try:
                skip = int(fields[key])
            except ValueError as error:
                raise ImageFormatError(f"the header's {key} {fields[key][:40]!r} is not a number", path=path) from error
            if skip < -1 or skip > 1 << 40:
                raise ImageFormatError(f"the header's {key} is {skip}: impossible", path=path)
    _check_nrrd_geometry(fields, path)
    data_value = fields.get("data file", fields.get("datafile"))
    files = _data_files(path, data_value, listing, sizes) if data_value is not None else []
    voxels = 1
    for size in sizes:
        voxels *= size
    return ImageHeader("nrrd", _nrrd_spacing(fields, spatial, path), kind in ("float", "double"), files,
                       offset if not files else 0, _NRRD_ENCODINGS[encoding], voxels * _NRRD_TYPES[kind], sizes=sizes,
                       orientation_given="space directions" in fields)


def _nrrd_spatial_axes(fields: dict[str, str], dimension: int, path: Path) -> list[int]:
    directions = fields.get("space directions")
    if directions is None:
        return list(range(dimension))
    parts = re.findall(r"\([^)]*\)|none", directions)
    if len(parts) != dimension:
        raise ImageFormatError(f"the header's space directions name {len(parts)} axes of {dimension}", path=path)
    return [i for i, part in enumerate(parts) if part != "none"]


def _check_nrrd_geometry(fields: dict[str, str], path: Path) -> None:
    """The origin must be a point and the space directions (those with a length) perpendicular."""
    if "space origin" in fields:
        text = fields["space origin"].strip().strip("()")
        origin = _numbers(text, len(text.split(",")), "space origin", path)
        if not all(map(math.isfinite, origin)):
            raise ImageFormatError(f"the header's space origin ({fields['space origin'][:80]}) is not a point: the image "
                                   "cannot be placed in patient space", path=path, hint="the header is corrupt")
    if "space directions" in fields:
        vectors = []
        for part in re.findall(r"\([^)]*\)", fields["space directions"]):
            values = _numbers(part.strip("()"), len(part.strip("()").split(",")), "space directions", path)
            length = math.sqrt(sum(v * v for v in values))
            if math.isfinite(length) and length > 0:
                vectors.append([v / length for v in values])
        _check_perpendicular(vectors, "space directions", path)


def _check_perpendicular(vectors: list[list[float]], name: str, path: Path) -> None:
    for i, first in enumerate(vectors):
        for second in vectors[i + 1:]:
            if len(first) == len(second) and abs(sum(a * b for a, b in zip(first, second))) > 1e-3:
                raise ImageFormatError(f"the header's {name} are not perpendicular: the image axes cannot be placed "
                                       "in patient space", path=path, hint="the header is corrupt")


def _nrrd_spacing(fields: dict[str, str], spatial: list[int], path: Path) -> HeaderSpacing:
    directions = fields.get("space directions")
    if directions is not None:
        vectors = [p for p in re.findall(r"\([^)]*\)|none", directions) if p != "none"]
        lengths = []
        for vector in vectors:
            components = _numbers(vector.strip("()"), len(vector.strip("()").split(",")), "space directions", path)
            lengths.append(math.sqrt(sum(c * c for c in components)) if all(map(math.isfinite, components))
                           else math.nan)
        if len(lengths) < 2:
            raise ImageFormatError("the header's space directions give fewer than two spatial axes", path=path)
        return HeaderSpacing(tuple(lengths + [1.0] * (3 - len(lengths))), "space directions")
    if "spacings" in fields:
        values = _numbers(fields["spacings"], len(fields["spacings"].split()), "spacings", path)
        values = tuple(values[i] for i in spatial if i < len(values))
        return HeaderSpacing(values + (1.0,) * (3 - len(values)), "spacings")
    return HeaderSpacing(None, "space directions")


_MET_TYPES = {"MET_CHAR": 1, "MET_UCHAR": 1, "MET_SHORT": 2, "MET_USHORT": 2, "MET_INT": 4, "MET_UINT": 4,
              "MET_LONG": 4, "MET_ULONG": 4, "MET_LONG_LONG": 8, "MET_ULONG_LONG": 8, "MET_FLOAT": 4,
              "MET_DOUBLE": 8}


def metaimage_header(path: Path) -> ImageHeader:
    fields, listing, offset = read_text_header(path, metaimage=True)
    if "elementdatafile" not in fields:
        raise ImageFormatError("the MetaImage header has no ElementDataFile line", path=path,
                               hint="the file may be truncated or not a MetaImage")
    try:
        n_dims = int(fields["ndims"])
        sizes = [int(v) for v in fields["dimsize"].split()]
    except (KeyError, ValueError) as error:
        raise ImageFormatError(f"the MetaImage header lacks a usable NDims or DimSize ({error})", path=path) from error
    if not 2 <= n_dims <= 4 or len(sizes) != n_dims or any(s < 1 for s in sizes) \
            or any(s != 1 for s in sizes[3:]):
        raise ImageFormatError(f"the header declares {n_dims} dimensions of sizes {sizes[:8]}: not a 3D image",
                               path=path)
    element = fields.get("elementtype", "").upper()
    if element not in _MET_TYPES:
        raise ImageFormatError(f"the voxel type {fields.get('elementtype', '(none)')[:40]!r} is not one medseg reads "
                               "(a CT has one number per voxel)", path=path)
    try:
        channels = int(fields.get("elementnumberofchannels", "1"))
    except ValueError as error:
        raise ImageFormatError("the header's ElementNumberOfChannels is not a number", path=path) from error
    if channels != 1:
        raise ImageFormatError(f"the image has {channels} values per voxel; a CT has one", path=path)
    compressed = fields.get("compresseddata", "false").lower() == "true"
    header_size = 0
    if "headersize" in fields:
        try:
            header_size = int(fields["headersize"])
        except ValueError as error:
            raise ImageFormatError(f"the header's HeaderSize {fields['headersize'][:40]!r} is not a number",
                                   path=path) from error
        if header_size < -1:
            raise ImageFormatError(f"the header's HeaderSize is {header_size}: impossible", path=path)
    orientation_key = next((k for k in ("transformmatrix", "orientation", "rotation") if k in fields), None)
    if orientation_key is not None:
        matrix = _numbers(fields[orientation_key], n_dims * n_dims, "TransformMatrix", path)
        columns = [[matrix[row * n_dims + column] for row in range(n_dims)] for column in range(n_dims)]
        if not all(map(math.isfinite, matrix)) or any(abs(math.sqrt(sum(v * v for v in c)) - 1) > 1e-3 for c in columns):
            raise ImageFormatError(f"the header's TransformMatrix ({fields[orientation_key][:80]}) is not a rotation: "
                                   "the image cannot be placed in patient space", path=path, hint="the header is corrupt")
        _check_perpendicular(columns, "TransformMatrix columns", path)
    origin_key = next((k for k in ("offset", "origin", "position") if k in fields), None)
    if origin_key is not None and not all(map(math.isfinite, _numbers(fields[origin_key], n_dims, "Offset", path))):
        raise ImageFormatError(f"the header's Offset ({fields[origin_key][:80]}) is not a point: the image cannot be "
                               "placed in patient space", path=path, hint="the header is corrupt")
    value = fields["elementdatafile"]
    files = [] if value.upper() == "LOCAL" else _data_files(path, value, listing, sizes)
    voxels = 1
    for size in sizes[:3]:
        voxels *= size
    declared = voxels * _MET_TYPES[element]
    size = sum(f.stat().st_size for f in files) if files else path.stat().st_size - offset
    if header_size > 0 and header_size + (0 if compressed else declared) > size:
        raise ImageFormatError(f"the header says the voxels start {header_size} bytes into {size} bytes of data",
                               path=path, hint="the header is corrupt")
    return ImageHeader("metaimage", _met_spacing(fields, n_dims, path), element in ("MET_FLOAT", "MET_DOUBLE"), files,
                       offset if not files else max(0, header_size), "zlib" if compressed else "raw", declared,
                       sizes=sizes, orientation_given=orientation_key is not None)


def _met_spacing(fields: dict[str, str], n_dims: int, path: Path) -> HeaderSpacing:
    for key, name in (("elementspacing", "ElementSpacing"), ("elementsize", "ElementSize")):
        if key in fields:
            values = _numbers(fields[key], n_dims, name, path)[:3]
            return HeaderSpacing(values + (1.0,) * (3 - len(values)), name)
    return HeaderSpacing(None, "ElementSpacing")
