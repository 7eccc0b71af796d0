"""What kind of saved file a person gave: a trace folder, its ``trace.json``, a trace ``.zip`` or a bundle ``.zip``.

Decided here once for every loader (``sam3_agent.load_trace``, the app's Inspect and Correct uploads, the CLI's
``export``), so each says the same thing about the same file:

- a folder is a trace folder when it holds ``trace.json``;
- a file that begins as a ``.zip`` (``safe_read.starts_like_zip``), or is named ``*.zip``, is read as a ``.zip``;
  a ``*.json`` file as a trace's ``trace.json``; anything else is refused as neither a folder nor a ``.zip``;
- a ``.zip`` holding ``bundle.json`` is a bundle (``correct.export``: ``bundle.json``, the COCO files and the trace
  under ``trace/``), one holding ``trace.json`` a trace ``.zip``; a whole ``.zip`` with neither is not ours.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TraceFormatError
from .encode import TRACE_FILE
from .safe_read import TraceFiles, starts_like_zip

BUNDLE_FILE = "bundle.json"  # a bundle's manifest; its presence is what makes a .zip a bundle

JSON, ZIP = "trace.json", "zip"  # what path_kind finds
TRACE_ZIP, BUNDLE_ZIP = "trace .zip", "bundle .zip"  # what zip_kind finds

NOT_OURS = f"the .zip is whole but holds no {TRACE_FILE} or {BUNDLE_FILE}: it is not a SAM3 Agent trace or bundle"


def path_kind(path: str | Path) -> tuple[str, Path]:
    """What ``path`` is: ``(JSON, the trace.json to read)`` for a trace folder or a ``*.json`` file, or
    ``(ZIP, path)`` for a file that begins as a ``.zip`` or is named ``*.zip`` (whole or not: ``safe_read.ZipFiles``
    says which).

    Raises:
        TraceFormatError: the path does not exist, is a folder without ``trace.json``, or is a file that is neither
            a ``.zip`` nor a ``.json`` (the message says what to give instead).
        OSError: the file cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / TRACE_FILE).exists():
            raise TraceFormatError(
                f"the folder {str(path)!r} holds no {TRACE_FILE}: it is not a SAM3 Agent trace folder; give the "
                f"folder a run wrote (its --out), its {TRACE_FILE}, or a trace or bundle .zip"
            )
        return JSON, path / TRACE_FILE
    if not path.exists():
        raise TraceFormatError(f"{str(path)!r} does not exist; check the path")
    if path.suffix.lower() == ".zip" or (path.is_file() and starts_like_zip(path)):
        return ZIP, path
    if path.suffix.lower() == ".json":
        return JSON, path
    raise TraceFormatError(
        f"{str(path)!r} is neither a folder nor a .zip: give a trace folder (or its {TRACE_FILE}), or a trace or "
        "bundle .zip saved by SAM3 Agent"
    )


def zip_kind(files: TraceFiles) -> str:
    """``BUNDLE_ZIP`` when the opened ``.zip`` holds ``bundle.json``, ``TRACE_ZIP`` when it holds ``trace.json``.

    Raises:
        TraceFormatError: it holds neither (``NOT_OURS``).
    """
    names = files.names()
    if BUNDLE_FILE in names:
        return BUNDLE_ZIP
    if TRACE_FILE in names:
        return TRACE_ZIP
    raise TraceFormatError(NOT_OURS)
