"""TotalSegmentator's CT tasks run by medseg: their weights converted, their pipeline reproduced.

``tasks`` holds how TotalSegmentator 2.18.0 runs each task (data: resources/models/totalseg_tasks.json,
generated from its own tables); ``import_totalsegmentator_task`` converts a task's weights (with those
of the runs that crop or refine it) into a medseg model folder; ``load_totalseg_model`` reads it back;
``choose_configuration`` picks a configuration (for ``total``: 1.5 mm parts, 3 mm or 6 mm) for a series
and a device, with the reason; ``segment_totalseg`` runs the pipeline (``pipeline``'s docstring lists
the steps). Checked against TotalSegmentator 2.18.0 itself in tests/model/test_totalseg_parity.py.
"""

from medseg.model.totalseg.choice import ConfigurationChoice, choose_configuration
from medseg.model.totalseg.classes import (
    CONFIGURATIONS,
    CROP_DATASET,
    DATASETS,
    MODEL_ID,
    TOTAL_CLASSES,
    Dataset,
    total_labels,
)
from medseg.model.totalseg.convert import (
    TotalSegConfiguration,
    TotalSegModel,
    import_totalsegmentator_task,
    is_totalseg_model,
    load_totalseg_model,
)
from medseg.model.totalseg.pipeline import TotalSegRun, segment_totalseg, structure_values
from medseg.model.totalseg.tasks import TaskSpec, load_task_table, required_runs, task_spec

__all__ = [
    "CONFIGURATIONS", "CROP_DATASET", "DATASETS", "MODEL_ID", "TOTAL_CLASSES", "ConfigurationChoice", "Dataset",
    "TaskSpec", "TotalSegConfiguration", "TotalSegModel", "TotalSegRun", "choose_configuration",
    "import_totalsegmentator_task", "is_totalseg_model", "load_task_table", "load_totalseg_model",
    "required_runs", "segment_totalseg", "structure_values", "task_spec", "total_labels",
]
