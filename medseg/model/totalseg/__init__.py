"""TotalSegmentator's ``total`` task run by medseg: its weights converted, its pipeline reproduced.

``import_totalsegmentator_task`` converts TotalSegmentator's weights folder into a medseg model
folder; ``load_totalseg_model`` reads it back; ``choose_configuration`` picks 1.5 mm parts,
3 mm or 6 mm for a series and a device, with the reason; ``segment_totalseg`` runs the pipeline
(``pipeline``'s docstring lists the steps). Checked against TotalSegmentator 2.18.0 itself in
tests/model/test_totalseg_parity.py.
"""

from medseg.model.totalseg.choice import ConfigurationChoice, choose_configuration
from medseg.model.totalseg.classes import (
    CONFIGURATIONS, CROP_DATASET, DATASETS, MODEL_ID, TOTAL_CLASSES, Dataset, total_labels,
)
from medseg.model.totalseg.convert import (
    TotalSegConfiguration, TotalSegModel, import_totalsegmentator_task, is_totalseg_model, load_totalseg_model,
)
from medseg.model.totalseg.pipeline import TotalSegRun, segment_totalseg, structure_values

__all__ = [
    "CONFIGURATIONS", "CROP_DATASET", "DATASETS", "MODEL_ID", "TOTAL_CLASSES", "ConfigurationChoice", "Dataset",
    "TotalSegConfiguration", "TotalSegModel", "TotalSegRun", "choose_configuration", "import_totalsegmentator_task",
    "is_totalseg_model", "load_totalseg_model", "segment_totalseg", "structure_values", "total_labels",
]
