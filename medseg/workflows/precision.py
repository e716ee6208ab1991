"""Verify a model's faster tier on this computer (issue #51 item 3): ``medseg models verify --tier int8 MODEL``.

For each configuration of the model whose runs choose a CPU engine (its pipeline's ``engine_packages``),
the tier is built and run beside the exact float32 path on a reference series (one the user names, or
medseg's synthetic CT phantom), and the record says whether it is offered (medseg.model.precision_gate).
A run asks for it with ``medseg segment --precision int8`` (SegmentSettings.precision); a Python caller::

    from medseg.workflows.precision import verify_tier
    for record in verify_tier("starter", "int8", reference="ct/lung1.nrrd"):
        print(record.describe())
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medseg.errors import ModelError
from medseg.progress import ProgressCallback, report
from medseg.workflows.models import OpenedModel, open_model


def verify_tier(model: OpenedModel | str | os.PathLike | None, precision: str,
                reference: str | os.PathLike | Any | None = None, threads: int | None = None,
                progress: ProgressCallback | None = None, accuracy_control: bool = True) -> list[Any]:
    """Build and gate ``precision`` for every CPU-engine configuration of ``model``; the records (TierRecord),
    stored whether offered or not. ``reference``: a series path, an open Volume, or None for the phantom."""
    from medseg import threads as medseg_threads
    from medseg.core.volume import Volume
    from medseg.model.precision_gate import build_and_gate, reference_volume
    from medseg.model.precision_tier import EXACT, check_precision
    from medseg.workflows.studies import OpenStudyRequest, open_study

    precision = check_precision(precision)
    if precision == EXACT:
        raise ModelError("float32 is the exact path: there is no tier to verify", hint="use --tier int8 or bf16")
    opened = model if isinstance(model, OpenedModel) else open_model(model)
    packages = opened.pipeline.engine_packages()
    if not opened.pipeline.capabilities.precision_tiers or not packages:
        raise ModelError(f"{opened.card.name} has no faster tier: its networks run on its "
                         "own engine", path=opened.card.source)
    if reference is None:
        volume, name = reference_volume(), "medseg's synthetic CT phantom"
    elif isinstance(reference, Volume):
        volume, name = reference, "the given image"
    else:
        volume, name = open_study(OpenStudyRequest(reference)).volume, Path(reference).name
    records = []
    with medseg_threads.job("precision tier", most=threads) as lease:
        count = lease.apply()
        for index, (package, configuration) in enumerate(packages):
            def scaled(p: Any, i: int = index) -> None:
                report(progress, (i + p.fraction) / len(packages), p.text, p.stage)

            records.append(build_and_gate(package, configuration, precision, volume, name, count,
                                          scaled if progress is not None else None, accuracy_control))
    return records


def offered_tiers(pipeline: Any) -> dict[str, str]:
    """The faster tiers a run of ``pipeline`` (an opened model's) may ask for on this computer, each with why
    (its records' figures): a tier is offered only where it passed its gate for every configuration the
    model runs on a CPU engine (the one the series' spacing chooses then has it). Empty for a model whose
    networks run on their own engine, and for a record that is missing, refused or damaged."""
    from medseg.model.precision_tier import TIERS, TierDamaged, offered_record

    packages = pipeline.engine_packages() if pipeline.capabilities.precision_tiers else []
    offers = {}
    for precision in TIERS if packages else ():
        try:
            lines = [f"{configuration}: {offered_record(package, configuration, precision).describe()}"
                     for package, configuration in packages]
        except (ModelError, TierDamaged):
            continue
        offers[precision] = "; ".join(lines)
    return offers


__all__ = ["offered_tiers", "verify_tier"]
