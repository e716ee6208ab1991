"""The files under a folder, following links to folders that stay inside it.

Study archives are often built from links (one folder per patient, each a link into the
scanner's export area). ``os.walk`` does not descend into a link to a folder, so a batch
over such an archive found "0 cases". Here a link to a folder is followed when its target
lies inside the folder being walked (as a DICOMDIR may only name files inside its own
folder: a link to ``/`` or to another patient's export must not widen what was asked for);
a link that leaves it is refused and reported. Each real folder is walked once, so a link
back to a parent (a loop) ends the descent instead of recursing forever. Links to files are
read as files, as before. Hidden entries (names starting with a dot) are left out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

LINK_LEAVES = "a link to a folder outside the folder being read: not followed"


@dataclass
class FolderFiles:
    files: list[str] = field(default_factory=list)  # sorted within each folder, folders in sorted order
    refused_links: list[str] = field(default_factory=list)  # links to folders outside the root


def _inside(target: Path, root: Path) -> bool:
    return target == root or target.is_relative_to(root)


def walk_files(folder: str | os.PathLike) -> FolderFiles:
    """Every non-hidden file under ``folder``, descending into links to folders inside it."""
    root = Path(folder).resolve()
    found = FolderFiles()
    seen: set[Path] = set()
    pending = [Path(folder)]
    while pending:
        current = pending.pop()
        try:
            real = current.resolve()
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except (OSError, RuntimeError):  # unreadable, vanished, or a link loop
            continue
        if real in seen:
            continue
        seen.add(real)
        subfolders = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if not is_dir:  # a file, a link to one, or a broken link (the reader says what is wrong with it)
                found.files.append(entry.path)
                continue
            if entry.is_symlink():
                try:
                    target = path.resolve()
                except (OSError, RuntimeError):
                    found.refused_links.append(entry.path)
                    continue
                if not _inside(target, root):
                    found.refused_links.append(entry.path)
                    continue
            subfolders.append(path)
        pending.extend(reversed(subfolders))  # depth first, in name order
    return found
