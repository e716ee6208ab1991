"""Load one scanned DICOM series into a Volume of Hounsfield units.

Decoding runs in a thread pool, middle slice first and then outwards, and each slice
is handed to ``on_slice`` as soon as it is ready, so a viewer can show the middle of
the study while the rest is still loading.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Callable

import numpy as np

from medseg import threads
from medseg.core.volume import GeometryFinding, Volume, VolumeMeta
from medseg.errors import Cancelled, DicomError, MedsegError, NotAVolumeError
from medseg.io.dicom_decode import decode_hu, hu_dtype, read_native_into, syntax_name
from medseg.io.dicom_headers import SliceHeader
from medseg.io.dicom_scan import SeriesInfo
from medseg.io.memory_budget import check_allocation
from medseg.io.regularize import regularize_stack
from medseg.io.voxel_checks import check_spacing, refuse_unusable_spacing, replace_non_finite
from medseg.progress import CancelToken, ProgressCallback, report

SliceCallback = Callable[[int, np.ndarray], None]


# Why a stack was put on a regular grid, in the words of the "regularized" finding.
REGULARIZED_BECAUSE = {"gantry_tilt": "tilted", "missing_slices": "missing some slices",
                       "variable_spacing": "unevenly spaced"}

def middle_out(n: int) -> list[int]:
    """Indices 0..n-1 ordered by distance from the middle slice (middle first)."""
    middle = (n - 1) // 2 if n else 0
    return sorted(range(n), key=lambda i: (abs(i - middle), i))


def _check_loadable(series: SeriesInfo) -> None:
    if series.loadable:
        return
    where = series.files[0] if series.files else None
    reasons = "; ".join(f.message for f in series.findings if f.kind in
                        ("duplicate_positions", "localizer_excluded", "secondary_capture")) or series.kind
    error_type = NotAVolumeError if series.kind == "not_a_volume" else DicomError
    raise error_type(f"series {series.series_description or series.key!r} ({series.n_files} files) is not a "
                     f"loadable CT volume: {reasons}", path=where,
                     hint="choose another series (see `medseg info`)")


def load_series(
    series: SeriesInfo,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    regularize: bool = True,
    on_slice: SliceCallback | None = None,
    out: np.ndarray | None = None,
    spacing_mm: Sequence[float] | None = None,
) -> Volume:
    """Decode ``series`` into a Volume (HU, int16 or float32) with its metadata.

    ``on_slice(z, hu_slice)`` is called from worker threads with indices of the acquired
    stack (sorted along the slice normal). When the stack is irregular and ``regularize``
    is true, the returned Volume is resampled onto a regular grid (see meta.findings).
    ``out``: the array to decode into, from :func:`preview_stack` (a viewer shows it while it fills).
    ``spacing_mm`` (x, y, z): the true spacing, where the headers' is unusable (0, negative) or outside any
    CT's; without it such a series is refused before a pixel is decoded (:mod:`medseg.io.voxel_checks`).
    """
    _check_loadable(series)
    if spacing_mm is None:
        refuse_unusable_spacing(series.findings, series.files[0] if series.files else None)
    geometry = series.geometry
    slices = series.slices
    if geometry is None or not slices:
        raise DicomError("the series has no images", path=series.files[0] if series.files else None)
    dtype = hu_dtype(slices)
    n = len(slices)
    rows, cols = slices[0].rows, slices[0].columns
    # The stack (unless the caller gave it), and the float32 regular grid beside it when the stack is irregular.
    needed = n * rows * cols * ((dtype.itemsize if out is None else 0)
                                + (4 if geometry.needs_regularization and regularize else 0))
    check_allocation(needed, f"{n} images of {cols} x {rows} pixels", series.files[0] if series.files else None)
    if out is not None and (out.shape != (n, rows, cols) or out.dtype != dtype):
        raise ValueError(f"out is {out.dtype}{out.shape}; this series decodes to {dtype}{(n, rows, cols)}")
    stack = np.empty((n, rows, cols), dtype=dtype) if out is None else out
    if out is not None:  # shown while it fills: air until a slice arrives (a chunk at a time: the GIL)
        for z0 in range(0, n, 16):
            out[z0:z0 + 16] = -1024

    # One task per file (a multi-frame file decodes all its frames at once), middle first.
    z_of: dict[int, int] = {id(s): z for z, s in enumerate(slices)}
    by_file: dict[str, list[SliceHeader]] = defaultdict(list)
    for s in slices:
        by_file[s.ref].append(s)
    task_order = list(dict.fromkeys(slices[z].ref for z in middle_out(n)))

    done_count = 0
    lock = threading.Lock()
    # The middle slice is decoded first, but another worker may finish first: gate the others'
    # delivery on it so a viewer always receives the middle slice first.
    middle_ref = slices[(n - 1) // 2].ref
    middle_delivered = threading.Event()

    def work(ref: str) -> None:
        headers = by_file[ref]
        try:
            if cancel is not None and cancel.cancelled:
                raise Cancelled()
            try:
                direct = len(headers) == 1 and read_native_into(headers[0], stack[z_of[id(headers[0])]])
                images = None if direct else decode_hu(headers, dtype)
            except MedsegError:
                raise
            except Exception as error:  # a last line of defence: every failure names the file
                raise DicomError(f"cannot decode the image ({type(error).__name__}: {error})"[:400], path=ref) from error
            if ref != middle_ref:
                middle_delivered.wait()
            zs = [z_of[id(h)] for h in headers]
            for z, image in sorted(zip(zs, images or [None]), key=lambda item: abs(item[0] - (n - 1) // 2)):
                if image is not None:
                    stack[z] = image
                if on_slice is not None:
                    on_slice(z, stack[z])
        finally:
            if ref == middle_ref:
                middle_delivered.set()
        nonlocal done_count
        with lock:
            done_count += len(headers)
            count = done_count
        if count % 8 == 0 or count == n:
            report(progress, count / n, f"decoded {count} of {n} images", "decode")

    report(progress, 0.0, f"decoding {n} images", "decode")
    # Decoding is CPU work (JPEG 2000, rescale): twice the job's share of the thread budget (a load beside
    # a segmentation splits the cores with it), as file reads interleave.
    workers = min(len(task_order), max(2, 2 * threads.current()), 16)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="medseg-decode") as pool:
        futures = [pool.submit(work, ref) for ref in task_order]
        finished, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failure = next((f.exception() for f in finished if f.exception() is not None), None)
        if failure is not None:
            for future in pending:
                future.cancel()
            if cancel is not None and cancel.cancelled:
                raise Cancelled()
            raise failure
    if cancel is not None:
        cancel.raise_if_cancelled()

    findings = list(series.findings)
    spacing, origin, array = geometry.spacing_mm, geometry.origin_mm, stack
    extra: dict = {"series_key": series.key, "raw_stack": True}
    if geometry.needs_regularization and n > 1:
        if regularize:
            report(progress, 1.0, "resampling the irregular stack onto a regular grid", "regularize")
            array, spacing, origin, details = regularize_stack(stack, geometry)
            causes = [f for f in series.findings if f.kind in REGULARIZED_BECAUSE]
            reasons = [f.kind for f in causes]
            why = " and ".join(REGULARIZED_BECAUSE[f.kind] + (f" {f.details['angle_deg']:.1f}°" if f.kind == "gantry_tilt"
                                                              else "") for f in causes) or "irregular"
            # Clinical words here (the banner, Details, a SEG's Image Comments); the machine words —
            # the reasons' kinds, the grid — stay in the details (the log, --json).
            findings.append(GeometryFinding(
                "regularized",
                f"Because the acquired slices are {why}, the images are shown on a regular grid of "
                f"{details['size_xyz'][2]} slices {float(details['slice_step_mm']):.2f} mm apart.",
                {**details, "reasons": reasons}))
            extra["raw_stack"] = False
        else:
            # The grid's even z step is a stand-in: keep each slice's true position so that a
            # segmentation saved from it (DICOM SEG) is placed where the slices really are.
            extra["slice_positions_mm"] = [[float(v) for v in s.position] for s in slices
                                           if s.position is not None] or None
            findings.append(GeometryFinding(
                "raw_stack", "The slices are shown as acquired: distances and volumes across slices are "
                "approximate, because the display assumes evenly spaced, untilted slices."))
    meta = _meta(series, findings, extra)
    volume = Volume(array, spacing, origin, geometry.direction.copy(), meta)
    replace_non_finite(volume)
    report(progress, 1.0, "loaded", "decode")
    return check_spacing(volume, spacing_mm)


def preview_stack(series: SeriesInfo) -> np.ndarray | None:
    """The array ``load_series(series, out=...)`` decodes into; a viewer shows it while it fills.

    The preview and the volume are then one array: a separate preview doubled the memory of an
    open (a 512 x 512 x 1000 series peaked at 2.1x its voxels). The array is returned unwritten
    (zero pages: no time, no memory yet); ``load_series`` first makes it air, -1024 HU, in its
    worker (filling 500 MB took 1.8 s on the caller's thread, a frozen window). None where the
    series decodes to float32 (a non-integral rescale): the viewer then previews in int16.
    """
    slices = series.slices
    if series.geometry is None or not slices or hu_dtype(slices) != np.int16:
        return None
    n, rows, cols = len(slices), slices[0].rows, slices[0].columns
    check_allocation(n * rows * cols * 2, f"{n} images of {cols} x {rows} pixels",
                     series.files[0] if series.files else None)
    return np.zeros((n, rows, cols), dtype=np.int16)


def _meta(series: SeriesInfo, findings: list[GeometryFinding], extra: dict) -> VolumeMeta:
    slices = series.slices
    middle = slices[(len(slices) - 1) // 2]
    window = middle.window
    return VolumeMeta(
        modality=series.modality,
        study_uid=series.study_uid,
        series_uid=series.series_uid,
        frame_of_reference_uid=series.frame_of_reference_uid,
        sop_class_uid=series.sop_class_uid,
        sop_instance_uids=[s.sop_instance_uid for s in slices],
        source_files=[s.ref for s in slices],
        patient_name=series.patient_name,
        patient_id=series.patient_id,
        study_description=series.study_description,
        series_description=series.series_description,
        series_number=series.series_number,
        study_date=series.study_date,
        manufacturer=series.manufacturer,
        window_center=window[0] if window else None,
        window_width=window[1] if window else None,
        transfer_syntaxes=list(series.transfer_syntaxes),
        findings=findings,
        extra={**extra, "frames": [s.frame for s in slices] if slices[0].frame is not None else None,
               "transfer_syntax_names": [syntax_name(t) for t in series.transfer_syntaxes]},
    )
