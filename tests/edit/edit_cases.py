"""Label values of TotalSegmentator v2 (total) used by the editing tests."""

SPLEEN = 1
LIVER = 5
STOMACH = 6
CARTILAGES = 117
