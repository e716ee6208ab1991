"""Batches prepared ahead of the training step, so the device does not wait for the sampler.

On an H200 medseg's own sampler (patch extraction, rotation/scaling, intensity
augmentation, all on the CPU inside the loop) held AMP training to 5.5 it/s against
14.6 it/s on ready tensors: the GPU waited 62 % of the time (issue #27). Here worker
threads draw the batches of the coming steps while the device runs the current one; the
batch is put in pinned (page-locked) memory for a CUDA device, so the copy up is
asynchronous. Threads, not processes: the prepared cases are shared without copies, and
the sampler's work is torch operations that release the GIL.

Every sample is seeded by (seed, epoch, iteration, index) (:mod:`.sampling`), so which
thread draws it does not matter, and the sampler computes with one intra-op thread wherever
it runs (a parallel reduction's rounding can depend on the count). So the batches are the
ones the in-loop sampler draws, bit for bit (tests/model/test_prefetch.py), and the
2-process = 1-process equality of distributed training holds.

The workers are computing threads beside the training step's intra-op threads: the
prefetcher holds a lease of one thread per worker on medseg's thread budget (medseg.threads)
for as long as it is open, so the step and medseg's other jobs leave them their cores instead
of oversubscribing the CPU. Held for the whole run, not per batch: the step's thread count
then stays the same from step to step, and with it the rounding of its parallel reductions
(a CPU run repeats bit for bit).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

import torch

from medseg import threads
from medseg.model.backends import cuda_available
from medseg.model.profiling import phase

Batch = tuple[torch.Tensor, torch.Tensor]


def default_workers(device: torch.device) -> int:
    """Worker threads: 2 feed a GPU; on the CPU none, the batches are drawn in the loop.

    On the CPU the step computes with every thread of the budget and a worker would take one
    of them for the whole run (the lease above) to save the sampler's time, which is small
    beside a CPU step: 6 ms a batch against 0.37 s a step at 2 threads for the liver fine-tune
    (starter plan, batch 6). On 2 cores the worker left the step one thread and the run took
    1.7x as long; on 16 cores it would still cost a sixteenth of the step's threads to hide a
    sampler share of about that size (an estimate, not measured there). In the loop, the step's thread count is the whole budget at every step, so
    a CPU run still repeats bit for bit.
    """
    return 2 if device.type in ("cuda", "mps") else 0


class BatchPrefetcher:
    """The batches for ``keys`` (``(epoch, iteration)`` in the order they will be asked for), made ahead.

    ``make(epoch, iteration)`` builds one batch on the host; ``get(epoch, iteration)``
    returns it on ``device``. With ``workers=0`` each batch is made when asked for (the
    in-loop sampler). ``close()`` stops the workers (also on a cancelled run).
    """

    def __init__(self, make: Callable[[int, int], Batch], keys: Iterable[tuple[int, int]], device: torch.device,
                 workers: int, depth: int | None = None) -> None:
        self.make = make
        self.device = device
        self.workers = max(0, int(workers))
        self.depth = depth if depth is not None else 2 * self.workers
        self.pin = device.type == "cuda" and cuda_available()
        self._keys: Iterator[tuple[int, int]] = iter(keys)
        self._pending: deque[tuple[tuple[int, int], Future]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        self._lease: threads.Lease | None = None
        if self.workers:
            self._lease = threads.lease("training batches", most=self.workers)
            # one computing thread each, as the lease counts them (the sampler itself also draws with one)
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="medseg-batches",
                                            initializer=torch.set_num_threads, initargs=(1,))
            self._fill()

    def _host_batch(self, epoch: int, iteration: int) -> Batch:
        images, labels = self.make(epoch, iteration)
        if self.pin:
            images, labels = images.pin_memory(), labels.pin_memory()
        return images, labels

    def _fill(self) -> None:
        assert self._pool is not None
        while len(self._pending) < self.depth:
            key = next(self._keys, None)
            if key is None:
                return
            self._pending.append((key, self._pool.submit(self._host_batch, *key)))

    def get(self, epoch: int, iteration: int) -> Batch:
        """The batch of this step on the device (the time waited for it is the "batches" phase)."""
        with phase("batches"):
            if self._pool is None:
                images, labels = self._host_batch(epoch, iteration)
            else:
                if not self._pending or self._pending[0][0] != (epoch, iteration):
                    raise RuntimeError(f"batch {(epoch, iteration)} asked for out of order")
                _, future = self._pending.popleft()
                images, labels = future.result()
                self._fill()
            return images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)

    def close(self) -> None:
        if self._pool is not None:
            for _, future in self._pending:
                future.cancel()
            self._pending.clear()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def __enter__(self) -> "BatchPrefetcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
