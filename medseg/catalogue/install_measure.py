"""The CPU engine measurement of a model just installed or imported (issue #51: no first-run penalty).

An install (``medseg models install``/``import``, a pack, the Models dialog's install job) ends here: the
model is opened from its new folder and each configuration whose runs choose a CPU engine is measured on
one tile of a synthetic CT (medseg.model.engine_measurement), one progress line each, so that its first Segment runs the
chosen engine at once. A measurement that fails costs nothing but the choice: the model is installed, the
line says why, and its runs use the default engine until ``medseg models verify --measure`` or the app's
idle measurement succeeds.
"""

from __future__ import annotations

from typing import Any, Iterable

from medseg.progress import CancelToken, ProgressCallback, report


def measure_installed(records: Iterable[Any], progress: ProgressCallback | None = None,
                      cancel: CancelToken | None = None, *, at: float = 0.99) -> list[str]:
    """Measure the engines of each installed record that runs (its ``run_path``); the lines said, in order."""
    from medseg.errors import Cancelled
    from medseg.model import backends, cpu_runtime

    if cpu_runtime.pinned_choice(1) is not None or len(backends.cpu_devices()) == 1:
        return []  # one engine for every model ($MEDSEG_CPU_ENGINE, or the only one installed): nothing to choose
    lines = []
    for record in records:
        path = record.run_path() if hasattr(record, "run_path") else None
        if path is None:
            continue
        try:
            lines += measure_path(path, record.id, progress, cancel, at=at)
        except Cancelled:
            raise
        except Exception as error:  # noqa: BLE001 - the install stands; the default engine runs until measured
            text = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            line = (f"{record.id}: the CPU engines could not be measured ({text}); it runs on the default engine "
                    f"until `medseg models verify --measure {record.id}` succeeds")
            report(progress, at, line, "engine chosen")
            lines.append(line)
    return lines


def measure_path(path: Any, model_id: str, progress: ProgressCallback | None = None,
                 cancel: CancelToken | None = None, *, at: float = 0.99) -> list[str]:
    """Open the model at ``path`` and measure it; one line per configuration measured ("" none: PyTorch only)."""
    from medseg.model.engine_measurement import measure_opened
    from medseg.model.kinds import open_path

    model = open_path(path, model_id)
    if not model.pipeline.engine_packages():
        return []

    def scaled(p: Any) -> None:  # the measurement's own fraction stays at the install's last step
        report(progress, at, p.text, p.stage)

    done = measure_opened(model, progress=scaled if progress is not None else None, cancel=cancel)
    lines = [f"{model_id} ({configuration}): CPU engine {choice.engine} ({choice.reason})"
             for configuration, choice in done]
    for line in lines:
        report(progress, at, line, "engine chosen")
    return lines


__all__ = ["measure_installed", "measure_path"]
