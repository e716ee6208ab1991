"""Label names a NIfTI file states in a header extension: the Caret XML label table that TotalSegmentator
writes into every multi-label output (``--ml``; ``nifti_ext_header.add_label_map_to_nifti`` in its code:
ecode 0, ``<CaretExtension>…<LabelTable><Label Key="1" …><![CDATA[spleen]]></Label>``) and Connectome
Workbench writes with ecode 30 (NIFTI_ECODE_CARET). Opened without a medseg sidecar, such a label map now
shows the names its maker gave, not "label 1".

The XML comes from an untrusted file: a document with a DOCTYPE (entity definitions: the "billion
laughs") is not parsed, nor one over :data:`MAX_BYTES`; names are cut to :data:`MAX_NAME` characters and
stripped of control characters. A table that cannot be read names nothing (the values name the labels, as
for a file without one): names are a convenience; the voxels are what the file is.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

from medseg.core.label_values import MAX_LABEL_VALUE

MAX_BYTES = 4 * 2**20  # TotalSegmentator's 117 names take 13 kB
MAX_NAME = 128
CARET_CODES = (0, 30)  # what TotalSegmentator writes (0: "unknown"), NIFTI_ECODE_CARET
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def label_table(code: int, data: bytes) -> dict[int, str]:
    """Value -> name from one header extension (``code``, its bytes); {} when it holds no label table."""
    if code not in CARET_CODES or len(data) > MAX_BYTES or b"<CaretExtension" not in data[:4096]:
        return {}
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        return {}
    try:
        root = ElementTree.fromstring(data.rstrip(b"\x00 \n\r\t"))
    except ElementTree.ParseError:
        return {}
    names: dict[int, str] = {}
    for element in root.iter("Label"):
        key = (element.get("Key") or "").strip()
        if not key.isdigit() or not 0 < int(key) <= MAX_LABEL_VALUE:
            continue
        name = _CONTROL.sub(" ", element.text or "").strip()[:MAX_NAME]
        if name:
            names.setdefault(int(key), name)
    return names
