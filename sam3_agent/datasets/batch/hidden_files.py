"""Files a dataset folder holds that are no one's data: what macOS, Windows and editors leave behind.

A folder copied from a Mac holds ``._NAME`` AppleDouble files (resource forks, with the photo's own suffix) and
``.DS_Store``; Windows Explorer leaves ``Thumbs.db`` and ``desktop.ini``; a .zip made on a Mac unpacks a
``__MACOSX/`` folder. None is an image or an annotation: a batch folder and an evaluation folder skip them (any name
starting with ``.`` counts, as file managers hide those) and log how many they skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

SYSTEM_NAMES = frozenset({"thumbs.db", "ehthumbs.db", "desktop.ini", "__macosx", "$recycle.bin",
                          "system volume information"})  # compared in lower case (Windows ignores case)
MAX_NAMED = 3  # skipped names shown in the log line


def is_hidden_file(name: str) -> bool:
    """True for a hidden or system file's name (see the module docstring): ``._a.jpg``, ``.DS_Store``,
    ``Thumbs.db``, ``desktop.ini``, ``__MACOSX``."""
    return name.startswith(".") or name.lower() in SYSTEM_NAMES


def without_hidden_files(paths: Iterable[Path], folder: Path) -> list[Path]:
    """``paths`` (entries of ``folder``) without the hidden and system files, in the same order; logs how many were
    skipped and names a few."""
    kept, skipped = [], []
    for path in paths:
        (skipped if is_hidden_file(path.name) else kept).append(path)
    if skipped:
        names = ", ".join(sorted(p.name for p in skipped)[:MAX_NAMED]) + (", ..." if len(skipped) > MAX_NAMED else "")
        logger.warning("skipped %d hidden or system file(s) in %s (%s): not part of the dataset", len(skipped),
                       folder, names)
    return kept
