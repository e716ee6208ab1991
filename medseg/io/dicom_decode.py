"""Pixel decoding of one DICOM file into Hounsfield units.

Three paths, fastest first:
1. native little-endian pixel data at an offset found during the scan: read the bytes
   and view them with numpy (no second header parse);
2. pydicom with its permissively licensed decoder plugins: OpenJPEG (pylibjpeg-openjpeg, MIT/BSD-2)
   for JPEG 2000, CharLS (pyjpegls, MIT/BSD-3) for JPEG-LS, Pillow (libjpeg-turbo) for 8-bit JPEG
   Baseline, pydicom's own RLE and deflate;
3. GDCM (inside SimpleITK, BSD) for the other JPEG processes: Extended 12-bit, Spectral
   Selection, Full Progression and Lossless (its IJG libjpeg builds for 8, 12 and 16 bits). Each
   frame goes to GDCM alone, in a minimal file without rescale tags, so every path yields stored
   values that medseg rescales the same way.
Anything else is an :class:`UnsupportedTransferSyntax` naming the syntax and the
package that adds it. No GPL decoder (pylibjpeg-libjpeg) is used: the bundle must stay
licence-clean (installers/README.md).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import warnings

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate, generate_frames
from pydicom.uid import CTImageStorage, generate_uid

from medseg.errors import DicomError, UnsupportedTransferSyntax
from medseg.io.dicom_headers import SliceHeader
from medseg.io.dicom_sources import open_ref, ref_size
from medseg.io.pydicom_decoders import use_permissive_decoders

# pydicom logs every decode failure with a traceback; medseg raises a DicomError naming the file
# instead. Without a handler Python would print those records to stderr (logging.lastResort);
# an application that configures logging still receives them.
logging.getLogger("pydicom").addHandler(logging.NullHandler())
# pydicom warns about non-conformant values (e.g. hashed UIDs) that are harmless here.
warnings.filterwarnings("ignore", message="Invalid value for VR", module="pydicom")

TRANSFER_SYNTAX_NAMES = {
    "1.2.840.10008.1.2": "Implicit VR Little Endian",
    "1.2.840.10008.1.2.1": "Explicit VR Little Endian",
    "1.2.840.10008.1.2.1.99": "Deflated Explicit VR Little Endian",
    "1.2.840.10008.1.2.2": "Explicit VR Big Endian",
    "1.2.840.10008.1.2.4.50": "JPEG Baseline (Process 1)",
    "1.2.840.10008.1.2.4.51": "JPEG Extended (Process 2 & 4)",
    "1.2.840.10008.1.2.4.53": "JPEG Spectral Selection (Process 6 & 8)",
    "1.2.840.10008.1.2.4.55": "JPEG Full Progression (Process 10 & 12)",
    "1.2.840.10008.1.2.4.57": "JPEG Lossless (Process 14)",
    "1.2.840.10008.1.2.4.70": "JPEG Lossless SV1",
    "1.2.840.10008.1.2.4.80": "JPEG-LS Lossless",
    "1.2.840.10008.1.2.4.81": "JPEG-LS Near-Lossless",
    "1.2.840.10008.1.2.4.90": "JPEG 2000 Lossless",
    "1.2.840.10008.1.2.4.91": "JPEG 2000",
    "1.2.840.10008.1.2.4.201": "HTJ2K Lossless",
    "1.2.840.10008.1.2.4.202": "HTJ2K Lossless RPCL",
    "1.2.840.10008.1.2.4.203": "HTJ2K",
    "1.2.840.10008.1.2.5": "RLE Lossless",
}
# JPEG processes decoded by GDCM (path 3): pydicom's permissive plugins read only 8-bit
# Baseline (Pillow), and python-gdcm would add a second GDCM with its own old OpenSSL.
GDCM_SYNTAXES = frozenset({
    "1.2.840.10008.1.2.4.51", "1.2.840.10008.1.2.4.53", "1.2.840.10008.1.2.4.55",
    "1.2.840.10008.1.2.4.57", "1.2.840.10008.1.2.4.70",
})
use_permissive_decoders()

# What to install when a syntax cannot be decoded.
DECODER_HINTS = {
    "1.2.840.10008.1.2.4.5": "pip install SimpleITK (its GDCM decodes every JPEG process) or Pillow",
    "1.2.840.10008.1.2.4.7": "pip install SimpleITK (its GDCM decodes JPEG Lossless)",
    "1.2.840.10008.1.2.4.8": "pip install pyjpegls",
    "1.2.840.10008.1.2.4.9": "pip install pylibjpeg pylibjpeg-openjpeg",
    "1.2.840.10008.1.2.4.20": "pip install pylibjpeg pylibjpeg-openjpeg",
}


def syntax_name(uid: str) -> str:
    name = TRANSFER_SYNTAX_NAMES.get(uid)
    return f"{name} ({uid})" if name else uid or "unknown transfer syntax"


def _hint_for(uid: str) -> str:
    for prefix, hint in DECODER_HINTS.items():
        if uid.startswith(prefix):
            return hint
    return "convert the series to an uncompressed transfer syntax (e.g. with dcmdjpeg or gdcmconv --raw)"


def hu_dtype(slices: list[SliceHeader]) -> np.dtype:
    """int16 when every Rescale Slope/Intercept is integral (CT HU fit int16), float32 otherwise."""
    for s in slices:
        if s.slope != int(s.slope) or s.intercept != int(s.intercept):
            return np.dtype(np.float32)
    return np.dtype(np.int16)


def to_hu(stored: np.ndarray, header: SliceHeader, dtype: np.dtype) -> np.ndarray:
    """Apply Rescale Slope/Intercept, giving ``dtype`` (int16 or float32)."""
    if dtype == np.int16:
        if header.slope == 1 and header.intercept == 0 and stored.dtype == np.int16:
            return stored
        hu = stored.astype(np.int32)
        if header.slope != 1:
            hu *= int(header.slope)
        hu += int(header.intercept)
        # Physical HU always fit int16; only padding values of 16-bit stored data could fall outside.
        np.clip(hu, -32768, 32767, out=hu)
        return hu.astype(np.int16)
    hu = stored.astype(np.float32)
    if header.slope != 1:
        hu *= np.float32(header.slope)
    hu += np.float32(header.intercept)
    return hu


def _native_read(header: SliceHeader) -> np.ndarray:
    """Pixel data read straight from the file at the offset the scan found."""
    count = header.rows * header.columns
    nbytes = count * 2
    with open_ref(header.ref) as fp:
        fp.seek(header.pixel_offset)
        data = fp.read(nbytes)
    if len(data) < nbytes:
        raise DicomError(f"the pixel data is truncated ({len(data)} of {nbytes} bytes)", path=header.ref,
                         hint="the file was probably cut short while copying; copy it again")
    dtype = "<i2" if header.pixel_representation else "<u2"
    return np.frombuffer(data, dtype=dtype).reshape(header.rows, header.columns)


def read_native_into(header: SliceHeader, out: np.ndarray) -> bool:
    """Read native 16-bit pixel data straight into ``out`` (an int16 HU slice) and rescale in place.

    The fastest path (one read, no temporary arrays): used when the scan found the pixel
    data offset, the slope is 1 and the stored values fit int16. Returns False when the
    slice needs the general path instead.
    """
    if (header.pixel_offset is None or header.bits_allocated != 16 or header.samples_per_pixel != 1
            or out.dtype != np.int16 or header.slope != 1 or header.intercept != int(header.intercept)
            or (not header.pixel_representation and not 0 < header.bits_stored <= 15)):
        return False
    nbytes = header.rows * header.columns * 2
    with open_ref(header.ref) as fp:
        fp.seek(header.pixel_offset)
        count = fp.readinto(memoryview(out).cast("B"))
    if count < nbytes:
        raise DicomError(f"the pixel data is truncated ({count} of {nbytes} bytes)", path=header.ref,
                         hint="the file was probably cut short while copying; copy it again")
    if sys.byteorder != "little":
        out.byteswap(inplace=True)
    low, high = int(out.min()), int(out.max())
    intercept = int(header.intercept)
    if not header.pixel_representation and low < 0:
        out[...] = to_hu(out.view(np.uint16).copy(), header, out.dtype)  # bits above Bits Stored are set
    elif low + intercept < -32768 or high + intercept > 32767:
        out[...] = to_hu(out.copy(), header, out.dtype)  # would overflow int16: clip
    elif intercept:
        np.add(out, np.int16(intercept), out=out)
    return True


def _pydicom_read(ref: str, n_frames: int) -> np.ndarray:
    with open_ref(ref) as fp:
        ds = pydicom.dcmread(fp, force=True)  # the scan already established this is DICOM
    if "PixelData" not in ds:
        raise DicomError("the file has no pixel data", path=ref)
    array = ds.pixel_array
    if n_frames > 1 or ds.get("NumberOfFrames") not in (None, "", 1, "1"):
        array = array.reshape(-1, *array.shape[-2:])
    return array


def _gdcm_read(ref: str) -> np.ndarray:
    """Stored values of every frame, decoded by GDCM (SimpleITK) one frame at a time."""
    import SimpleITK as sitk  # here: the fallback of few files; its import is 60 ms of a first series load

    with open_ref(ref) as fp:
        ds = pydicom.dcmread(fp, force=True)
    if "PixelData" not in ds:
        raise DicomError("the file has no pixel data", path=ref)
    if int(ds.get("SamplesPerPixel", 1)) != 1:
        raise DicomError("colour pixel data is not a CT image", path=ref)
    n_frames = int(ds.get("NumberOfFrames") or 1)
    frames = []
    with tempfile.TemporaryDirectory(prefix="medseg-gdcm-") as folder:
        path = os.path.join(folder, "frame.dcm")
        for frame in generate_frames(ds.PixelData, number_of_frames=n_frames):
            _single_frame(ds, frame).save_as(path, enforce_file_format=True)
            frames.append(sitk.GetArrayFromImage(sitk.ReadImage(path, imageIO="GDCMImageIO")).reshape(ds.Rows, ds.Columns))
    return np.stack(frames)


def _single_frame(ds: Dataset, frame: bytes) -> Dataset:
    """A minimal CT file holding one encoded frame and only the tags that describe it: no rescale
    (GDCM would apply it) and no functional groups (GDCM would reorder the frames)."""
    out = Dataset()
    out.file_meta = FileMetaDataset()
    out.file_meta.TransferSyntaxUID = ds.file_meta.TransferSyntaxUID
    out.SOPClassUID = CTImageStorage
    out.SOPInstanceUID = generate_uid()
    for keyword in ("SamplesPerPixel", "PhotometricInterpretation", "Rows", "Columns", "BitsAllocated", "BitsStored",
                    "HighBit", "PixelRepresentation"):
        setattr(out, keyword, ds[keyword].value)
    out.PixelData = encapsulate([frame])
    out["PixelData"].VR = "OB"
    out["PixelData"].is_undefined_length = True
    return out


def decode_hu(headers: list[SliceHeader], dtype: np.dtype) -> list[np.ndarray]:
    """HU images for the given frames of ONE file (a single header for single-frame files)."""
    first = headers[0]
    ref = first.ref
    if first.pixel_offset is not None and first.bits_allocated == 16 and first.samples_per_pixel == 1:
        return [to_hu(_native_read(first), first, dtype)]
    shape = (first.rows, first.columns)
    _check_plausible_size(first, len(headers))
    try:
        if first.transfer_syntax in GDCM_SYNTAXES:
            stored = _gdcm_decode(ref, first)
        else:
            stored = _pydicom_read(ref, len(headers))
    except DicomError:
        raise
    except NotImplementedError as error:
        # No pydicom decoder for this syntax: GDCM (inside SimpleITK) may have one.
        stored = _gdcm_decode(ref, first, error)
    except MemoryError as error:
        raise DicomError("the pixel data is too large or its length field is corrupt", path=ref) from error
    except Exception as error:  # codecs and pydicom raise many types on corrupt data
        raise DicomError(f"the pixel data cannot be decoded ({type(error).__name__}: {error})"[:400], path=ref,
                         hint="the file may be truncated or corrupt") from error
    return _split_frames(stored, headers, shape, dtype)


def _check_plausible_size(header: SliceHeader, n_frames: int) -> None:
    """The general decoders read a file whole: refuse one far larger than its images need
    (a 16 GiB file behind a 512 x 512 header), as no compression makes a file bigger."""
    expected = (header.rows * header.columns * max(1, n_frames) * max(1, header.samples_per_pixel)
                * max(1, (header.bits_allocated + 7) // 8))
    size = ref_size(header.ref)
    if size > 4 * expected + (64 << 20):
        raise DicomError(f"the file holds {size / 2**20:.0f} MiB, far more than its {max(1, n_frames)} image(s) of "
                         f"{header.columns} x {header.rows} need ({expected / 2**20:.1f} MiB): not decoded",
                         path=header.ref, hint="the file is corrupt or not what its header says")


def _gdcm_decode(ref: str, header: SliceHeader, cause: Exception | None = None) -> np.ndarray:
    try:
        return _gdcm_read(ref)
    except DicomError:
        raise
    except Exception as error:  # SimpleITK raises RuntimeError; anything else is also a decode failure
        gdcm = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
        tried = f"neither pydicom's plugins ({cause}) nor GDCM" if cause else "GDCM"
        raise UnsupportedTransferSyntax(
            f"the pixel data is encoded as {syntax_name(header.transfer_syntax)}, which {tried} could decode "
            f"(GDCM: {gdcm})"[:500], path=ref, hint=_hint_for(header.transfer_syntax)) from error


def _split_frames(array: np.ndarray, headers: list[SliceHeader], shape: tuple[int, int], dtype: np.dtype) -> list[np.ndarray]:
    ref = headers[0].ref
    if array.ndim == 2:
        array = array[np.newaxis]
    if array.ndim != 3 or array.shape[1:] != shape:
        raise DicomError(f"decoded pixel data has shape {array.shape}, expected {len(headers)} x {shape}", path=ref,
                         hint="colour or corrupt pixel data")
    frames: list[np.ndarray] = []
    for header in headers:
        index = header.frame or 0
        if index >= array.shape[0]:
            raise DicomError(f"frame {index + 1} is missing from the pixel data ({array.shape[0]} decoded)", path=ref)
        frames.append(to_hu(array[index], header, dtype))
    return frames
