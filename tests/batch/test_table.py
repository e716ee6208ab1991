"""The batch table's journal parts: a kill mid-line loses only that line; the latest row of a case wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from medseg.batch.table import RankPart, Row, part_path, read_rows, read_table, write_table
from medseg.errors import MedsegError


def test_a_torn_line_is_skipped_and_the_next_row_starts_clean(tmp_path: Path) -> None:
    part = RankPart(tmp_path, 0)
    part.append(Row("a", "failed", error="out of memory", finished_at="2026-01-01T00:00:00"))
    part.close()
    with open(part_path(tmp_path, 0), "ab") as handle:
        handle.write(b'{"case_id": "b", "status": "o')  # SIGKILL in the middle of a row
    again = RankPart(tmp_path, 0)
    again.append(Row("a", "ok", output="a.nii.gz", finished_at="2026-01-01T00:05:00"))
    again.close()
    other = RankPart(tmp_path, 1)
    other.append(Row("c", "ok", finished_at="2026-01-01T00:01:00"))
    other.close()
    rows = read_rows(tmp_path)
    assert sorted(rows) == ["a", "c"] and rows["a"].status == "ok"  # the rerun's row replaces the failure


def test_one_writer_per_part(tmp_path: Path) -> None:
    first = RankPart(tmp_path, 0)
    try:
        with pytest.raises(MedsegError, match="another batch is running"):
            RankPart(tmp_path, 0)
        RankPart(tmp_path, 1).close()  # another rank's part is its own
    finally:
        first.close()


def test_table_columns_and_order(tmp_path: Path) -> None:
    rows = [Row("b", "ok", volumes_ml={"liver": 1512.25, "spleen": 0.0}, mean_hu={"liver": 93.5}),
            Row("a", "failed", error="cannot read, truncated")]
    [csv_path, *_] = write_table(tmp_path, rows, ["liver", "spleen"])
    table = read_table(csv_path)
    assert [r["case_id"] for r in table] == ["a", "b"]
    assert table[0]["error"] == "cannot read, truncated" and table[0]["liver_ml"] == ""
    assert (table[1]["liver_ml"], table[1]["liver_mean_hu"], table[1]["spleen_ml"], table[1]["spleen_mean_hu"]) == \
        ("1512.25", "93.5", "0.0", "")
