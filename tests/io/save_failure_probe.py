"""Run by test_save_failures in a restricted child process: try to save, report what happened as JSON.

usage: python save_failure_probe.py CT_FOLDER TARGET_FILE
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from medseg.errors import SaveError
from medseg.io import load
from medseg.io.segmentations import save_segmentation


def main() -> None:
    image_folder, target = Path(sys.argv[1]), Path(sys.argv[2])
    image = load(image_folder)
    labels = np.zeros(image.shape_zyx, dtype=np.uint8)
    labels[image.array > -500] = 1
    labels[:, 100:300, 100:300] = 2
    label_map = image.with_array(labels, labels={1: "body", 2: "box"})
    before = hashlib.sha256(label_map.array.tobytes()).hexdigest()
    old = target.read_bytes() if target.exists() else None
    report = {"error": None}
    try:
        save_segmentation(label_map, image, target)
    except SaveError as error:
        report["error"] = str(error)
    report["edits_kept"] = hashlib.sha256(label_map.array.tobytes()).hexdigest() == before
    report["old_file_intact"] = old is None or (target.exists() and target.read_bytes() == old)
    report["leftovers"] = sorted(p.name for p in target.parent.iterdir() if p.name.startswith("."))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
