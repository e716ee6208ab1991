"""Rule-based body / lungs / bones labels: the training targets of the starter model.

Body, lungs and bones can be labelled on any CT from Hounsfield units alone, so medseg
can train a useful model offline from unlabelled scans. The rules, in order:

**Body** (the patient without the table)
  1. ``HU > -500`` (every tissue, not air or lung).
  2. A 2D opening with a disk of 6 mm radius, done on a coarser in-plane grid (about
     3 mm) for speed. It cuts the thin shells and pads of the patient table (a few mm)
     away from the patient, while the torso, arms and legs (centimetres) survive.
  3. 3D connected components of the opened mask; every component with at least 10 %
     of the largest one's volume is the patient (arms lying beside the torso are their
     own components; table pieces that survive the opening are small).
  4. Back on the full grid: the voxels of step 1 within one coarse voxel (about 3 mm)
     of the kept components, restricted to the connected pieces that touch them. This
     undoes the blockiness of the coarse grid; a wider margin would let back in a table
     that lies against the back (``example_ct_sm``: its shells touch the skin and read
     -300 to -450 HU at 3 mm voxels, so they pass step 1).
  5. 2D hole filling in every axial slice, so lungs, airways and bowel gas enclosed
     by the body count as body.

**Lungs** (air inside the body that is lung, not bowel gas or the trachea)
  1. ``HU < -400`` inside the filled body; 3D connected components.
  2. A component is lung when it holds at least 10 ml and at most 30 % of its voxels
     read below -950 HU. Aerated lung is tissue plus air (about -850 HU; measured 0-3 %
     of voxels below -950 on the shared CTs, up to about a quarter in severe emphysema),
     while gas in the stomach, bowel and trachea is pure air (about -1000) with a
     partial-volumed rim: 39-71 % below -950 measured. (A median rule, "half below -950",
     took the 13-17 ml gas pockets of ``example_ct_dicom``'s stomach and transverse colon,
     45-47 % below -950 at 3 mm slices, for lung; TotalSegmentator finds no lung there.)
     Small pockets (< 10 ml) are dropped: at the lung bases that loses little, and it
     keeps small partial-volumed gas bubbles out.
  3. A component is not lung when the slices it spans are, at the median, more than 17 %
     bone (bones below, in the body's cross-section): the air of the nose and paranasal
     sinuses, partial-volumed with mucosa (median -764 HU, 26 ml in ``GE_HiSpeedDual_head``,
     which a head CT holds, passes steps 1-2), lies in skull-base slices that are 21 % bone;
     the slices of lung are 2-7 % bone (median over the lungs of lung1, example_ct, CT1_J2KR,
     dcmqi; 14 % at most in any single slice of lung1, where scapulae and humeri are).
  4. 2D hole filling per slice, so vessels and airways inside the lung are lung (as in
     TotalSegmentator's lung lobes).

**Bones** (dense tissue)
  1. ``HU > 200`` inside the body: cortical bone (700-1200), trabecular bone near the
     cortex and partial-volumed thin bone. Contrast-filled vessels are the known
     confusion (``example_ct_dicom``'s aorta is median 151 HU). 200 HU was chosen by
     measurement against TotalSegmentator: on ``example_ct_dicom`` (IV contrast) 11 % of
     the aorta/IVC/portal-vein voxels become bone at 200 HU against 9-10 % at 250 HU
     (calcified plaque and the wall where a vessel touches bone: those voxels are
     median 266 HU, within 2 mm of other bone; no threshold separates them), while on the 3 mm
     ``example_ct_sm`` bone Dice drops from 0.71 to 0.63 at 250 HU because its thin,
     partial-volumed cortex reads 150-300 HU. Noise specks above 200 HU inside a
     contrast vessel are removed by step 4.
  2. Growing by one voxel in-plane into ``HU > 150``: the partial-volumed rim of the
     cortex and trabecular bone touching it.
  3. A 2D closing (3 mm) bridges gaps in cortical rings, then 2D hole filling per slice
     keeps filled voxels above 100 HU: the marrow cavity inside a cortical ring is
     bone, the spinal canal (CSF, cord, about 30 HU) inside a closed vertebral arch and
     the muscle between ribs are not.
  4. 3D components smaller than 0.1 ml are dropped (noise, tiny calcifications).
  Known confusions: calcified plaques, excreted contrast in the kidneys and bladder, and
  metal are labelled bone; strongly osteoporotic trabecular bone may be missed.

Bones and lungs take precedence over body in the label map.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from medseg.core.volume import Volume
from medseg.errors import MedsegError
from medseg.model.postprocess import fill_holes_per_slice
from medseg.progress import CancelToken, ProgressCallback, report

STARTER_LABELS: dict[int, str] = {0: "background", 1: "body", 2: "lungs", 3: "bones"}
# Skin and bone as in 3D Slicer's GenericAnatomyColors; lungs blue rather than Slicer's
# beige, which is hard to tell from the body colour in an overlay.
STARTER_COLORS: dict[int, tuple[int, int, int]] = {1: (177, 122, 101), 2: (70, 150, 230), 3: (241, 214, 145)}

BODY_MIN_HU = -500.0
TABLE_OPENING_RADIUS_MM = 6.0
COARSE_SPACING_MM = 3.0
BODY_COMPONENT_MIN_FRACTION = 0.10
LUNG_MAX_HU = -400.0
LUNG_MIN_VOLUME_ML = 10.0
GAS_HU = -950.0  # pure gas reads below this
LUNG_MAX_GAS_FRACTION = 0.3  # a lung component has at most this share of pure-gas voxels
LUNG_MAX_BONE_FRACTION = 0.17  # ... and lies in slices whose cross-section is at most this much bone
BONE_MIN_HU = 200.0
BONE_RIM_MIN_HU = 150.0
MARROW_MIN_HU = 100.0
BONE_CLOSING_RADIUS_MM = 3.0
BONE_MIN_VOLUME_ML = 0.1



def _disk(radius_voxels: int) -> np.ndarray:
    r = np.arange(-radius_voxels, radius_voxels + 1)
    return (r[:, None] ** 2 + r[None, :] ** 2 <= radius_voxels**2)[None]


def _dilate_in_plane(mask: np.ndarray, radius: int) -> np.ndarray:
    """Dilation by a (2r+1)-square in every slice: two running maxima, cost independent of r."""
    grown = ndimage.maximum_filter1d(mask.view(np.uint8), 2 * radius + 1, axis=1)
    return ndimage.maximum_filter1d(grown, 2 * radius + 1, axis=2).view(bool)


def _closing_in_plane(mask: np.ndarray, radius: int) -> np.ndarray:
    """Closing by a (2r+1)-square in every slice (dilation, then erosion as the dual)."""
    grown = _dilate_in_plane(mask, radius)
    shrunk = ndimage.minimum_filter1d(grown.view(np.uint8), 2 * radius + 1, axis=1, mode="nearest")
    return ndimage.minimum_filter1d(shrunk, 2 * radius + 1, axis=2, mode="nearest").view(bool)


def _block_any_half(mask: np.ndarray, fy: int, fx: int) -> np.ndarray:
    """Downsample in-plane by (fy, fx): a coarse voxel is set when half its fine voxels are."""
    if fy == fx == 1:
        return mask
    nz, ny, nx = mask.shape
    padded = np.zeros((nz, -(-ny // fy) * fy, -(-nx // fx) * fx), dtype=np.float32)
    padded[:, :ny, :nx] = mask
    return padded.reshape(nz, padded.shape[1] // fy, fy, padded.shape[2] // fx, fx).mean(axis=(2, 4)) >= 0.5


def _upsample(mask: np.ndarray, fy: int, fx: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.repeat(np.repeat(mask, fy, axis=1), fx, axis=2)[:, : shape[1], : shape[2]]


def body_mask(hu: np.ndarray, spacing_xyz: tuple[float, float, float]) -> np.ndarray:
    """The patient without the table, with internal air filled (rules: module docstring)."""
    tissue = hu > BODY_MIN_HU
    fx = max(1, int(COARSE_SPACING_MM / spacing_xyz[0]))
    fy = max(1, int(COARSE_SPACING_MM / spacing_xyz[1]))
    coarse = _block_any_half(tissue, fy, fx)
    radius = max(1, int(round(TABLE_OPENING_RADIUS_MM / (spacing_xyz[0] * fx))))
    opened = ndimage.binary_opening(coarse, structure=_disk(radius))
    components, count = ndimage.label(opened)
    if count == 0:
        return np.zeros_like(tissue)
    sizes = np.bincount(components.ravel())
    sizes[0] = 0
    keep = sizes >= BODY_COMPONENT_MIN_FRACTION * sizes.max()
    core_coarse = keep[components]
    # one coarse voxel of margin undoes the blockiness of the coarse grid; more would let
    # a table that lies against the back (and so survives within the margin) back in
    near_coarse = ndimage.binary_dilation(core_coarse, structure=_disk(1))
    core = _upsample(core_coarse, fy, fx, tissue.shape) & tissue
    candidate = _upsample(near_coarse, fy, fx, tissue.shape) & tissue
    pieces, _ = ndimage.label(candidate)
    touching = np.unique(pieces[core])
    body = np.isin(pieces, touching[touching > 0])
    return fill_holes_per_slice(body)


def lung_mask(hu: np.ndarray, body: np.ndarray, voxel_volume_ml: float, bones: np.ndarray | None = None) -> np.ndarray:
    """Aerated lung inside the body; bowel gas, the trachea and (given ``bones``) the air of the
    nose and sinuses are left out (rules: module docstring)."""
    air = (hu < LUNG_MAX_HU) & body
    components, count = ndimage.label(air)
    if count == 0:
        return air
    sizes = np.bincount(components.ravel())
    pure_gas = np.bincount(components[hu < GAS_HU], minlength=sizes.size)
    is_lung = (sizes * voxel_volume_ml >= LUNG_MIN_VOLUME_ML) & (pure_gas <= LUNG_MAX_GAS_FRACTION * sizes)
    is_lung[0] = False
    if bones is not None:
        bone_share = bones.sum(axis=(1, 2)) / np.maximum(body.sum(axis=(1, 2)), 1)
        for index, box in enumerate(ndimage.find_objects(components), start=1):
            if box is not None and is_lung[index]:
                is_lung[index] = float(np.median(bone_share[box[0]])) <= LUNG_MAX_BONE_FRACTION
    lungs = is_lung[components]
    return fill_holes_per_slice(lungs) & body


def bone_mask(hu: np.ndarray, body: np.ndarray, spacing_xyz: tuple[float, float, float], *,
              min_hu: float = BONE_MIN_HU, rim_min_hu: float = BONE_RIM_MIN_HU,
              marrow_min_hu: float = MARROW_MIN_HU, closing_radius_mm: float = BONE_CLOSING_RADIUS_MM) -> np.ndarray:
    """Dense bone with its marrow inside the body (rules: module docstring).

    The keywords are the rule's settings; other values are for measuring the rule against
    an independent reference (the starter's model card), the labels use the defaults.
    """
    voxel_volume_ml = float(np.prod(spacing_xyz)) / 1000.0
    dense = (hu > min_hu) & body
    rim = _dilate_in_plane(dense, 1) & (hu > rim_min_hu) & body
    bones = dense | rim
    # a cortical ring is often not closed at thick slices or low dose: close small gaps first
    radius = max(1, int(round(closing_radius_mm / min(spacing_xyz[0], spacing_xyz[1]))))
    closed = _closing_in_plane(bones, radius)
    holes = fill_holes_per_slice(closed) & ~bones
    bones |= holes & (hu > marrow_min_hu)
    components, count = ndimage.label(bones, structure=np.ones((3, 3, 3), dtype=bool))
    if count == 0:
        return bones
    sizes = np.bincount(components.ravel())
    keep = sizes * voxel_volume_ml >= BONE_MIN_VOLUME_ML
    keep[0] = False
    return keep[components]


def rule_label_map(
    volume: Volume,
    *,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> Volume:
    """Label a CT (in HU) as 0 background, 1 body, 2 lungs, 3 bones (:data:`STARTER_LABELS`).

    Returns a uint8 label map on the same grid as ``volume``.
    """
    hu = np.asarray(volume.array)
    if hu.size == 0 or not np.issubdtype(hu.dtype, np.number):
        raise MedsegError("the rule-based labeller needs a CT image, got an empty or non-numeric volume")
    if float(hu.min()) > BODY_MIN_HU:
        raise MedsegError(
            f"this does not look like a CT in Hounsfield units (no air below {BODY_MIN_HU:g} HU; lowest value {float(hu.min()):g})",
            hint="rule labels need a CT that shows air around or inside the patient",
        )
    report(progress, 0.0, "finding the body", "body")
    body = body_mask(hu, volume.spacing_mm)
    if cancel is not None:
        cancel.raise_if_cancelled()
    report(progress, 0.4, "finding the bones", "bones")
    bones = bone_mask(hu, body, volume.spacing_mm)
    if cancel is not None:
        cancel.raise_if_cancelled()
    report(progress, 0.7, "finding the lungs", "lungs")
    lungs = lung_mask(hu, body, volume.voxel_volume_ml, bones)
    labels = np.zeros(hu.shape, dtype=np.uint8)
    labels[body] = 1
    labels[lungs] = 2
    labels[bones] = 3
    report(progress, 1.0, "rule labels done", "done")
    return volume.with_array(labels, modality="SEG", labels=dict(STARTER_LABELS), window_center=None, window_width=None)
