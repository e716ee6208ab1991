"""A child process that replaces a folder through medseg.io.atomic.atomic_folder and is killed (SIGKILL)
at a chosen moment: ``python atomic_folder_probe.py FOLDER MOMENT``.

MOMENT is where the kill lands: ``writing`` (half of the new files written), ``before-swap`` (the new
folder complete and checked, not yet swapped in), ``aside`` (the fallback swap, where the kernel cannot
exchange two folders: the old folder renamed aside, the new one not yet renamed in), ``after-swap``
(the new folder in place, the old one not yet deleted), ``package`` (save_package over a model package,
killed while its new weights are half written).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import medseg.io.atomic as atomic


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def new_files(temp: Path, count: int, kill_after: int | None = None) -> None:
    for index in range(count):
        if index == kill_after:
            die()
        (temp / f"{index:02d}.txt").write_text(f"new {index}\n")


def main(folder: Path, moment: str) -> None:
    if moment == "package":
        from pathlib import Path as P

        from medseg.model.package import load_package, save_package

        package = load_package(folder)
        package.provenance["rewritten"] = True
        original = P.write_bytes

        def half_then_die(self: P, data: bytes) -> int:
            if self.name == "weights.safetensors":
                with open(self, "wb") as handle:
                    handle.write(data[: len(data) // 2])
                    handle.flush()
                    os.fsync(handle.fileno())
                die()
            return original(self, data)

        P.write_bytes = half_then_die  # type: ignore[method-assign]
        save_package(package, folder)
        return
    if moment == "aside":  # a system that cannot exchange two folders: a C library without renameat2
        import ctypes

        real_cdll = ctypes.CDLL

        class WithoutExchange:
            def __init__(self, *args, **kwargs) -> None:
                self.library = real_cdll(*args, **kwargs)

            def __getattr__(self, name: str):
                if name == "renameat2":
                    raise AttributeError(name)
                return getattr(self.library, name)

        ctypes.CDLL = WithoutExchange  # type: ignore[misc, assignment]
        real_replace = os.replace

        def replace_then_die(source, target):  # os.replace's signature
            real_replace(source, target)
            if Path(target).name.endswith(".old"):
                die()

        os.replace = replace_then_die  # type: ignore[assignment]
    if moment == "after-swap":
        import shutil

        shutil.rmtree = lambda *args, **kwargs: die()  # type: ignore[assignment]
    # before-swap: the writer's own check runs last before the swap, on the complete, fsynced new folder
    verify = (lambda temp: die()) if moment == "before-swap" else None
    with atomic.atomic_folder(folder, verify=verify) as temp:
        new_files(temp, 6, kill_after=3 if moment == "writing" else None)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
