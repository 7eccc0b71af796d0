"""Loading whatever SAM3 Agent saved: a trace folder, its ``trace.json``, a trace ``.zip`` or a bundle ``.zip``.

These are the public ``sam3_agent.load_trace`` and ``sam3_agent.load_trace_zip``, and the loaders of the app's
Inspect and Correct uploads and of the CLI's ``export``, so every one of them reads every file the product writes
(``run --out``, the app's ``trace.zip`` download, the Correct tab's trace and bundle exports, ``export --bundle``).
Which kind a file is, is decided once (``trace.file_kind``); a trace is read by ``trace.io``'s rules, a bundle by
``export.bundle_from_files``' (its COCO files must match the trace's edits), all within ``trace.safe_read``'s bounds.
They live here, not in ``trace``, because reading a bundle replays its edits (``edits``).
"""

from __future__ import annotations

from pathlib import Path

from ..trace import io as trace_io
from ..trace.file_kind import BUNDLE_ZIP, ZIP, path_kind, zip_kind
from ..trace.load_limits import COMMAND_LINE_LIMITS, LoadLimits
from ..trace.safe_read import MAX_ZIP_BYTES, ZipFiles, reading, regular_file
from ..types import Trace
from .export import bundle_from_files


def load_trace(path: str | Path, limits: LoadLimits = COMMAND_LINE_LIMITS) -> Trace:
    """Load the trace in ``path``: a trace folder (what ``run --out`` or ``save_trace`` wrote), its ``trace.json``, a
    trace ``.zip`` or a bundle ``.zip`` (the trace with its hand edits), within ``limits`` (``trace.load_limits``: the
    photo's pixel cap and what the load may hold; by default what the command line makes).

    Raises:
        TraceFormatError: the path is missing, is neither a trace folder nor a ``.zip``, is a ``.zip`` cut short or one
            that holds neither a trace nor a bundle, or the trace is malformed, too large or unsafe; the message says
            which and what to do.
    """
    with reading(f"the trace {str(path)!r}"):
        kind, path = path_kind(path)
        if kind == ZIP:
            return load_trace_zip(regular_file(path, "the trace"), limits=limits)
        return trace_io.load_trace(path, limits)


def load_trace_zip(data: bytes | str | Path, max_bytes: int = MAX_ZIP_BYTES,
                   limits: LoadLimits = COMMAND_LINE_LIMITS) -> Trace:
    """Load the trace in a trace ``.zip`` or a bundle ``.zip`` (its bytes or its path; e.g. the app's ``trace.zip``
    download), within ``max_bytes`` (the ``.zip`` as stored) and ``limits``.

    Raises:
        TraceFormatError: empty, oversized, not a ``.zip``, cut short, unsafe, holding neither a trace nor a bundle, or
            malformed; the message says which and what to do.
    """
    with reading("the .zip"), ZipFiles(data, "the .zip", max_bytes) as files:
        if zip_kind(files) == BUNDLE_ZIP:
            return bundle_from_files(files, limits).trace
        return trace_io.trace_from_zip_files(files, limits)
