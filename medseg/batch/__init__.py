"""Segment a whole archive: ``medseg batch``.

:mod:`.cases` finds the cases (folders, manifests, saved PACS queries), :mod:`.table` keeps the
results (a part per process, merged into one table), :mod:`.run` segments a process's share of
the cases with a prefetch of one, resumably, and stops cleanly on Ctrl+C or SIGTERM. Under
``torchrun`` every process takes every W-th case (the training engine's distributed setup,
:mod:`medseg.model.training.distributed`). :mod:`.run_lock` keeps one run per output folder. No Qt here.
"""
