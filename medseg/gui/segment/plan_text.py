"""What the Segment panel's plan says, as rich text: the configuration that will run and why, the grid, the
tiles and memory, the steps after the network, and where it runs (device, engine, threads); for a
TotalSegmentator model, every configuration's estimate on this computer."""

from __future__ import annotations

import html
from typing import Any

from medseg.core.volume import Volume


def _mm(values) -> str:
    """Spacings as the panel writes them: 5 × 0.57 × 0.57."""
    return " × ".join(f"{v:.3g}" for v in values)


def plan_summary(package: Any, volume: Volume, step_size: float = 0.5, configuration: str | None = None,
                 device: str = "auto") -> str:
    """The plan this series would run with, as rich text: the configuration, why, and its strides;
    where it runs: the device, and on a CPU the engine and its threads (and why that engine).

    ``configuration`` is the user's override; None lets the series' spacing choose.
    """
    from medseg.model.run_estimate import estimate_run

    spacing_zyx, shape_zyx = volume.spacing_zyx, volume.shape_zyx
    choice = package.choose(spacing_zyx, shape_zyx)
    if configuration is not None and configuration in package.configurations:
        plan = package.configurations[configuration]
        why = (f"chosen by you (the spacing would choose {choice.chosen.name})" if plan is not choice.chosen
               else "chosen by you (also the spacing's choice)")
    else:
        plan = choice.chosen
        why = choice.reason
    targets = "".join(f"<br>&nbsp;&nbsp;{name}: target {_mm(package.configurations[name].target_spacing_image_zyx)} mm"
                      for name, _, _ in choice.candidates) if len(package.configurations) > 1 else ""
    estimate = estimate_run(plan, len(package.labels), volume, step_size)  # what the sliding window will run
    resampled, target, tiles = estimate.resampled_shape, estimate.network_spacing, estimate.tiles
    patch = list(plan.patch_size)
    stitching_mb = estimate.stitching_bytes / 1e6
    tile_mb = estimate.tile_bytes / 1e6
    strides = "".join(f"<tr><td>{i}</td><td>{'×'.join(str(v) for v in stride)}</td><td>{f}</td></tr>"
                      for i, (stride, f) in enumerate(zip(plan.strides, plan.features_per_stage)))
    axes = "z, y, x" if plan.dim == 3 else "y, x"
    return (
        f"<b>{plan.name}</b> ({plan.dim}D U-Net)<br>{why}{targets}<br>"
        f"spacing (z, y, x): series {_mm(spacing_zyx)} mm<br>"
        f"→ network grid {_mm(target)} mm, {' × '.join(str(n) for n in resampled)} voxels<br>"
        f"patch ({axes}) {' × '.join(str(p) for p in patch)}, {len(plan.strides)} stages, "
        f"{tiles} tiles at step {step_size:g}<br>"
        f"memory ≈ {stitching_mb + tile_mb:.0f} MB<br>({stitching_mb:.0f} MB stitching, {tile_mb:.0f} MB per tile)"
        f"<table><tr><th>stage</th><th>stride</th><th>features</th></tr>{strides}</table>"
        + "".join(f"then: {html.escape(step.describe(package.names))}<br>" for step in package.postprocess_steps())
        + _where_it_runs(package, plan.name, device)
    )


def pipeline_summary(opened: Any, volume: Volume, device: str = "auto", configuration: str | None = None,
                     structures: tuple[str, ...] | None = None) -> str:
    """A TotalSegmentator model's plan for this series, as rich text: the configuration that will run and
    why, and every configuration's estimate on this computer (the chosen one in bold)."""
    from medseg.workflows.totalseg_run import automatic_choice

    automatic = automatic_choice(opened, volume, device)
    model = opened.pipeline
    chosen = configuration if configuration in model.configurations else automatic.name
    if chosen == automatic.name and configuration is None:
        why = html.escape(automatic.reason)
    elif chosen == automatic.name:
        why = "chosen by you (also the automatic choice)"
    else:
        why = f"chosen by you (automatic would choose {html.escape(automatic.name)}: {html.escape(automatic.reason)})"
    rows = []
    for name, config in model.configurations.items():
        networks = len(config.parts)
        cells = (f"{html.escape(name)}", f"{config.spacing_mm:g} mm", f"{networks}",
                 _estimate_text(automatic.estimates_s.get(name)))
        row = "".join(f"<td>{'<b>' + c + '</b>' if name == chosen else c}</td>" for c in cells)
        rows.append(f"<tr>{row}</tr>")
    subset = (f"{len(structures)} of {len(model.labels)} structures: cropped around them, "
              f"only their networks run (estimates are for all)" if structures
              else f"all {len(model.labels)} structures")
    return (f"<b>{html.escape(chosen)}</b> — {why}<br>"
            f"spacing (z, y, x): series {_mm(volume.spacing_zyx)} mm<br>{subset}<br>"
            "<table><tr><th>configuration</th><th>network grid</th><th>networks</th><th>estimate here</th></tr>"
            + "".join(rows) + "</table>"
            f"TotalSegmentator's steps: resampled to the grid, tiles at step {model.configurations[chosen].step:g}, "
            "parts merged, labels back on the series' grid")


def _estimate_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return "< 1 s"
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def _where_it_runs(package: Any, configuration: str, device: str) -> str:
    """"runs on: CPU, 2 threads — PyTorch (why)" for the plan (the engine as --device auto chooses it)."""
    from medseg import threads
    from medseg.errors import MedsegError
    from medseg.model.backends import backend, describe, resolve_device

    try:
        resolved = resolve_device(device)
    except MedsegError as error:
        return f"<br>runs on: {html.escape(str(error))}"
    if backend(resolved).gpu:
        return f"<br>runs on: {html.escape(describe(resolved))}"
    count = threads.budget_count()
    where = f"<br>runs on: the CPU, {count.threads} thread{'s' if count.threads != 1 else ''} ({html.escape(count.source)})"
    if device != "auto":
        return where + f"<br>engine: {html.escape(backend(resolved).engine)} (chosen by you)"
    from medseg.model.cpu_runtime import planned_choice

    choice = planned_choice(package, configuration, count.threads)
    return where + f"<br>engine: {html.escape(choice.engine)} ({html.escape(choice.reason)})"
