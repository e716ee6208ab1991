"""A plain, slow Dijkstra of grow from seeds, written apart from medseg's kernel, for the tests.

Same algorithm as stated in medseg/edit/tools/grow_seeds.py: 6-connected steps cost
|intensity difference| (in the integer cost units) plus a per-axis step cost; every voxel
takes the class of its nearest seed, a tie going to the smaller class; seeds never change.
"""

from __future__ import annotations

import heapq

import numpy as np


def reference_grow(intensity: np.ndarray, seeds: np.ndarray, steps=(0, 0, 0)) -> tuple[np.ndarray, np.ndarray]:
    """(distance, class) per voxel; ``seeds`` holds class indices (0: none). Unreached: (-1, 0)."""
    nz, ny, nx = intensity.shape
    value = intensity.astype(np.int64).tolist()
    best: dict[tuple[int, int, int], tuple[int, int]] = {}
    heap: list[tuple[int, int, tuple[int, int, int]]] = []
    for z, y, x in zip(*np.nonzero(seeds)):
        key = (int(z), int(y), int(x))
        best[key] = (0, int(seeds[key]))
        heap.append((0, int(seeds[key]), key))
    heapq.heapify(heap)
    fixed = {key for key in best}
    moves = [((-1, 0, 0), steps[0]), ((1, 0, 0), steps[0]), ((0, -1, 0), steps[1]), ((0, 1, 0), steps[1]),
             ((0, 0, -1), steps[2]), ((0, 0, 1), steps[2])]
    while heap:
        d, c, (z, y, x) = heapq.heappop(heap)
        if best[(z, y, x)] != (d, c):
            continue  # a stale entry
        here = value[z][y][x]
        for (dz, dy, dx), step in moves:
            n = (z + dz, y + dy, x + dx)
            if not (0 <= n[0] < nz and 0 <= n[1] < ny and 0 <= n[2] < nx) or n in fixed:
                continue
            candidate = (d + abs(value[n[0]][n[1]][n[2]] - here) + step, c)
            if n not in best or candidate < best[n]:  # (distance, class): a tie goes to the smaller class
                best[n] = candidate
                heapq.heappush(heap, (*candidate, n))
    distance = np.full(intensity.shape, -1, dtype=np.int64)
    classes = np.zeros(intensity.shape, dtype=np.uint8)
    for key, (d, c) in best.items():
        distance[key] = d
        classes[key] = c
    return distance, classes
