"""The one error family users see.

Every failure a user can cause (a bad file, a wrong model, out of memory, a cancel)
is a :class:`MedsegError` whose message says what went wrong, which file it concerns
and what the user can do. The GUI shows it in a dialog, the CLI prints it and exits
non-zero.
"""

from __future__ import annotations

import os
from pathlib import Path


class MedsegError(Exception):
    """Base class: a message a clinician can act on, optionally naming a file and a hint."""

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None, hint: str | None = None):
        self.message = message
        self.path = Path(path) if path is not None else None
        self.hint = hint
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path is not None else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class DicomError(MedsegError):
    """A DICOM file or series cannot be read or is not usable."""


class UnsupportedTransferSyntax(DicomError):
    """Pixel data is encoded in a way no installed decoder handles."""


class NotAVolumeError(DicomError):
    """The files do not form a 3D volume (duplicate positions, mixed orientations, ...)."""


class ImageFormatError(MedsegError):
    """A NIfTI/NRRD/MHA file cannot be read or written."""


class SaveError(MedsegError):
    """A file could not be written; the previous file (if any) is unchanged."""


class GeometryError(MedsegError):
    """Two images or an image and a mask do not share a usable geometry."""


class ImageChangedError(GeometryError):
    """A job's result belongs to an image that is no longer the open one (it was not applied)."""


class ModelError(MedsegError):
    """A model package or nnU-Net folder is missing, malformed or unsupported."""


class ModalityMismatch(ModelError):
    """The series' modality (e.g. MR) is not the one the model was trained on (e.g. CT)."""


class NotAnImageError(MedsegError):
    """The input is not an image a model can segment (e.g. a label map given as the CT)."""


class UnsafeModelError(ModelError):
    """A model file would execute code when loaded; it is refused."""


class DisplayError(MedsegError):
    """The window cannot be shown: no display, or Qt's platform plugin cannot load."""


class DeviceError(MedsegError):
    """A compute device (CUDA, DirectML) is unavailable or ran out of memory."""


class ResourceLimitError(MedsegError):
    """An input would need more memory, disk or work than is reasonable or available (a bomb, a forged header)."""


class DatasetError(MedsegError):
    """A training dataset is malformed (missing labels, mismatched grids, ...)."""


class Cancelled(MedsegError):
    """The user cancelled a long-running job; nothing was changed."""

    def __init__(self, message: str = "cancelled by the user"):
        super().__init__(message)


class DownloadError(MedsegError):
    """A model could not be downloaded: no network, an HTTP error, a damaged or wrong file."""


class OfflineError(DownloadError):
    """The server cannot be reached (no network, no route, name not resolved, proxy down)."""


class ChecksumMismatch(DownloadError):
    """A downloaded or packed file is not the one the catalogue or the pack names (its SHA-256 differs)."""

    def __init__(self, path: str | Path, expected: str, got: str, what: str = "file"):
        self.expected, self.got = expected, got
        super().__init__(f"{what} is damaged or not the published one: SHA-256 expected {expected}, got {got}",
                         path=path, hint="nothing was installed; download it again")


class LicenceNotAccepted(ModelError):
    """A model whose licence needs the user's acceptance was not accepted; nothing was installed."""
