"""Which group each TotalSegmentator CT task belongs to: the one place the Segment panel's task picker (and
anything else that lists tasks by subject) reads it from. TotalSegmentator's own tables do not group its
tasks; these are medseg's words, by each task's subject (its class map's structures), and a test checks
that every CT task of the catalogue has exactly one group."""

from __future__ import annotations

from typing import Iterable

# group -> its tasks, in the order a picker shows them (TotalSegmentator's task names)
TASK_GROUPS: dict[str, tuple[str, ...]] = {
    "organs": ("total", "total_v3", "liver_segments", "breasts", "trunk_cavities"),
    "vessels": ("lung_vessels", "lung_vessels_LEGACY", "liver_vessels", "renal_arteries", "pulmonary_artery_landmarks"),
    "heart": ("heartchambers_highres", "coronary_arteries", "coronary_arteries_LEGACY", "aortic_sinuses",
              "aorta_annulus"),
    "head and neck": ("brain_structures", "ventricle_parts", "head_glands_cavities", "headneck_bones_vessels",
                      "head_muscles", "headneck_muscles", "oculomotor_muscles", "craniofacial_structures", "teeth",
                      "face"),
    "muscles": ("abdominal_muscles", "thigh_shoulder_muscles"),
    "bones": ("vertebrae_body", "vertebrae_pp", "vertebrae_pp_refined", "appendicular_bones"),
    "lesions": ("cerebral_bleed", "lung_nodules", "liver_lesions", "kidney_cysts", "pleural_pericard_effusion",
                "aortic_dissection"),
    "other": ("body", "tissue_types", "tissue_4_types", "hip_implant"),
}
OTHER = "other"


def task_group(task: str) -> str:
    """The group of a TotalSegmentator task ("other" for one this table does not list yet)."""
    return next((group for group, tasks in TASK_GROUPS.items() if task in tasks), OTHER)


def grouped(tasks: Iterable[str]) -> dict[str, list[str]]:
    """``tasks`` by group, groups and tasks in the table's order (unlisted tasks last, under "other")."""
    order = {task: index for index, task in enumerate(t for tasks_ in TASK_GROUPS.values() for t in tasks_)}
    out: dict[str, list[str]] = {group: [] for group in TASK_GROUPS}
    for task in sorted(tasks, key=lambda t: (order.get(t, len(order)), t)):
        out[task_group(task)].append(task)
    return {group: found for group, found in out.items() if found}


__all__ = ["OTHER", "TASK_GROUPS", "grouped", "task_group"]
