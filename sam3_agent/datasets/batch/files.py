"""Writing dataset-level files so that none is ever half-written: a temporary name, then a rename.

A reader (or a rerun after a crash) sees either the previous complete file or the new complete one. The
temporary file lives in the same folder (a rename across file systems is not atomic) and is removed when
writing fails.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    The data is flushed to disk (``fsync``) before the rename, so a power loss cannot leave an empty file
    under the final name. Folders are created. Returns the path.

    Raises:
        OSError: the folder is not writable, the disk is full... (the temporary file is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
