"""The task picker's groups: every TotalSegmentator CT task medseg's catalogue lists is in exactly one group
of medseg.catalogue.task_groups, and the table names no task TotalSegmentator 2.18.0 does not have (its own
task table is the oracle: tests/catalogue/totalsegmentator_catalogue.py reads it)."""

from __future__ import annotations

from collections import Counter

from totalsegmentator_catalogue import ct_tasks, load_modules

from medseg.catalogue import load_catalogue
from medseg.catalogue.task_groups import TASK_GROUPS, grouped, task_group


def test_every_ct_task_has_one_group_and_the_groups_are_the_pickers():
    binary, tasks = load_modules()
    theirs = set(ct_tasks(binary, tasks))
    listed = Counter(task for group in TASK_GROUPS.values() for task in group)
    assert [task for task, n in listed.items() if n > 1] == []  # one group each
    catalogue = {entry.task for entry in load_catalogue() if entry.task is not None}
    assert catalogue - set(listed) == set()  # every task the catalogue lists has its group
    assert set(listed) - theirs - {"total_v3"} == set()  # total_v3: the catalogue's name for total's v3 weights
    assert list(TASK_GROUPS) == ["organs", "vessels", "heart", "head and neck", "muscles", "bones", "lesions", "other"]
    assert task_group("liver_vessels") == "vessels" and task_group("kidney_cysts") == "lesions"
    assert task_group("a_future_task") == "other"
    assert grouped(["kidney_cysts", "liver_vessels", "total"]) == {
        "organs": ["total"], "vessels": ["liver_vessels"], "lesions": ["kidney_cysts"]}
