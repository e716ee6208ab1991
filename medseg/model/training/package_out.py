"""The model package a training run writes: its weights (the best validated epoch's, else the last), its
provenance (what it was trained on and how), its labels with their codes, its post-processing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator

from medseg.errors import ModelError
from medseg.model.package_model import package_labels
from medseg.model.postprocess import parse_steps
from medseg.model.training.checkpoints import load_checkpoint
from medseg.model.training.config import CHECKPOINT_BEST, TrainEvent
from medseg.model.training.schedule import label_codes


def write_package(run: Any) -> Generator[TrainEvent, None, Path | None]:
    """Rank 0 writes the model package (best weights when validated); returns its path. ``run``: the
    medseg.model.training.run.TrainingRun (not imported: it imports this module)."""
    if not run.ctx.is_main:
        return None
    from medseg.model.package import ModelPackage, save_package

    best_path = run.work_dir / CHECKPOINT_BEST
    final_state = {k: v.detach().cpu() for k, v in run.network.state_dict().items()}
    chosen = "final"
    if run.best_epoch is not None and best_path.is_file():
        final_state, _, _ = load_checkpoint(best_path)
        chosen = f"best (epoch {run.best_epoch + 1}, mean Dice {run.best_dice:.4f})"
    dataset = run.dataset
    provenance = {
        "trained_with": "medseg train",
        "weights": chosen,
        "dataset": {"name": dataset.name, "source": dataset.source, "description": dataset.description,
                    "training_cases": [s.name for s in dataset.training_specs],
                    "validation_cases": [s.name for s in dataset.validation_specs]},
        "fingerprint": run.fingerprint.to_dict() if run.fingerprint else None,
        "config": run.config.to_dict(),
        "world_size": run.ctx.world_size,
        "base_model": getattr(run.base_package, "name", None),
        "inflated_from": getattr(run.inflate_from, "name", None),
        "history": run.history,
        "messages": run.messages,
        **run.extra_provenance,
    }
    # the dataset's own steps, else those of the model it started from (labels allowing)
    postprocessing: list[Any] = dataset.postprocessing or next(
        (p.postprocessing for p in (run.base_package, run.inflate_from) if p is not None), [])
    try:
        parse_steps(postprocessing, run.labels)
    except ModelError as error:  # the start model's steps name a label this model lacks
        yield run.message(f"the start model's post-processing is not kept: {error.message}")
        postprocessing = []
    plan = run.plan
    assert plan is not None, "the plan is chosen before anything is trained"
    package = ModelPackage(
        name=dataset.name, configurations={plan.name: plan},
        labels=package_labels(run.labels, dict(dataset.colors),
                              label_codes(dataset, run.labels, (run.base_package, run.inflate_from))),
        weights={plan.name: [final_state]}, provenance=provenance, postprocessing=list(postprocessing),
    )
    package_path = save_package(package, run.out_dir)
    yield run.message(f"model package written to {run.out_dir} ({chosen} weights)")
    return package_path
