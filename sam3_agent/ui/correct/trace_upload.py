"""The trace in a .zip uploaded to the Correct or Inspect tab: a bundle or a trace .zip, read within bounds."""

from __future__ import annotations

from pathlib import Path

from ...correct.export import BUNDLE_FILE, load_bundle
from ...trace.io import load_trace_zip
from ...trace.safe_read import is_zip_with, reading, regular_file
from ...types import Trace


def trace_from_upload(source: bytes | str | Path) -> Trace:
    """The trace in an uploaded .zip (its bytes or path): a bundle (``export.bundle_bytes``, edits included) or a
    trace .zip, read within ``trace.safe_read``'s bounds.

    Raises:
        TraceFormatError: empty, not a zip, unsafe, neither a bundle nor a trace, or malformed (the message says
            which, never naming a Python exception).
    """
    with reading("the uploaded file"):
        if not isinstance(source, (bytes, bytearray)):
            source = regular_file(source, "the uploaded file")
        # a file that is no .zip at all: load_trace_zip says so
        return load_bundle(source).trace if is_zip_with(source, BUNDLE_FILE) else load_trace_zip(source)
