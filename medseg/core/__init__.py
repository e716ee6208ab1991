"""The vocabulary every layer speaks: the image type, the label description, the colour table.

``Volume`` (voxels with their geometry), the one label description (:mod:`medseg.core.labels`:
name, colour, codes, provenance, lock, visibility), the label-array helpers, the range of label
values (:mod:`medseg.core.label_values`: 1…65535, uint8 while they fit) and the one colour
table sit below ``io``, ``edit`` and ``model`` because all three use them and none may import
another's internals. Nothing here reads or writes files (the colour table reads its packaged JSON) and
nothing here imports Qt, pydicom's readers or SimpleITK at import time.
"""
