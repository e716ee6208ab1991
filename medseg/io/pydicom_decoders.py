"""Which of pydicom's decoder plugins medseg lets decode pixel data (CT slices, DICOM SEG frames).

python-gdcm, when it is installed beside medseg (dicom2nifti, a test peer, pulls it in; so may a
user's own environment), is one of pydicom's plugins, tried before OpenJPEG for JPEG 2000. On
corrupt JPEG 2000 it throws a C++ exception no Python code can catch and the process aborts (found
by fuzzing: one malformed file closed the whole app). medseg decodes with the permissively licensed
plugins only (medseg.io.dicom_decode lists them), so the same files decode the same way with or
without python-gdcm; GDCM inside SimpleITK stays the path for the JPEG processes they lack.
"""

from __future__ import annotations

import contextlib

from pydicom.pixels import get_decoder
from pydicom.uid import AllTransferSyntaxes

_UNSAFE = ("gdcm",)


def use_permissive_decoders() -> None:
    """Remove the plugins that can abort the process from pydicom's decoders (idempotent)."""
    for syntax in AllTransferSyntaxes:  # those pydicom has no decoder for raise NotImplementedError
        with contextlib.suppress(NotImplementedError, ValueError):
            decoder = get_decoder(syntax)
            for label in _UNSAFE:
                if label in decoder.available_plugins:
                    decoder.remove_plugin(label)
