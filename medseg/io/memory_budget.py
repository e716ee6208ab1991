"""Will an array fit? Asked before a large allocation, so that a header declaring 65535 x 65535
pixels is refused with the numbers instead of a NumPy MemoryError traceback (or the machine
swapping for minutes first).

The memory counted is what the OS reports as available, and less where the process runs
under an address-space limit (``ulimit -v``, as the robustness tests do).
"""

from __future__ import annotations

import os
import resource

from medseg.errors import ResourceLimitError

# Room left for everything else the process holds while the array exists.
HEADROOM_BYTES = 256 << 20


def available_bytes() -> int:
    import psutil

    free = psutil.virtual_memory().available
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        free = min(free, soft - psutil.Process().memory_info().vms)
    return max(0, free)


def check_allocation(nbytes: int, what: str, path: str | os.PathLike | None = None) -> None:
    """Raise ResourceLimitError when ``nbytes`` (plus headroom) is more than the memory available."""
    free = available_bytes()
    if nbytes + HEADROOM_BYTES > free:  # the figure said is the one compared: with the headroom
        raise ResourceLimitError(f"{what} needs {format_size(nbytes + HEADROOM_BYTES)} of memory ({format_size(nbytes)} "
                                 f"and {format_size(HEADROOM_BYTES)} for the rest of the work) and {format_size(free)} "
                                 "is available",
                                 path=path, hint="close other programs, or use a machine with more memory; "
                                                 "if the image is not that large, its header is wrong")


def format_size(nbytes: float) -> str:
    """1.5 GiB, 48 MiB: never "0.0 GiB" for a figure that is not zero."""
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"
