"""Writing dataset-level files so that none is ever half-written: a temporary name, then a rename.

A reader (or a rerun after a crash) sees either the previous complete file or the new complete one. The
temporary file lives in the same folder (a rename across file systems is not atomic) and is removed when
writing fails. A process killed mid-write cannot remove it: ``remove_leftovers`` does, on the next run, and removes
only names of exactly this shape (``.NAME.<8 characters of tempfile's>.tmp``), never another file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
# tempfile.mkstemp's names: prefix + 8 characters from its alphabet (letters, digits, "_") + suffix
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX) + "$")


def temporary_target(name: str) -> str | None:
    """The file name a temporary name of ``write_bytes_atomic`` was written for, or ``None`` when ``name`` is no
    such temporary name (``.item.json.k2_8x0qa.tmp`` -> ``item.json``)."""
    match = _TEMPORARY.match(name)
    return match.group("name") if match else None


def remove_leftovers(folder: Path, names: Iterable[str] | None = None) -> int:
    """Remove the temporary files that killed writes left in ``folder`` (not below it): those meant for one of
    ``names``, or, with ``names=None`` (a folder only the product writes), for any name. Returns how many were
    removed; a file that cannot be removed is left (and logged), as is everything else.
    """
    wanted = None if names is None else set(names)
    removed = 0
    try:
        with os.scandir(folder) as listing:
            entries = list(listing)
    except OSError:
        return 0  # no folder yet: nothing was left
    for entry in entries:
        target = temporary_target(entry.name)
        if target is None or (wanted is not None and target not in wanted) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            os.unlink(entry.path)
            removed += 1
        except OSError as error:
            logger.warning("cannot remove the leftover temporary file %s: %s", entry.path, error)
    return removed


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    The data is flushed to disk (``fsync``) before the rename, so a power loss cannot leave an empty file
    under the final name. Folders are created. Returns the path.

    Raises:
        OSError: the folder is not writable, the disk is full... (the temporary file is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, document: Any, indent: int | None = 1) -> Path:
    """Write ``document`` as UTF-8 JSON with :func:`write_bytes_atomic`. Returns the path.

    Raises:
        OSError: as :func:`write_bytes_atomic`.
        TypeError / ValueError: ``document`` is not JSON-serialisable (nothing is written).
    """
    text = json.dumps(document, ensure_ascii=False, indent=indent)
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` as UTF-8 with :func:`write_bytes_atomic`. Returns the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))
