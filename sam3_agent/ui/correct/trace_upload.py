"""The trace in a .zip uploaded to the Correct or Inspect tab: a bundle or a trace .zip, read within bounds.

Uploads are read within the app's ``LoadLimits`` (``app_load_limits``): the stored photo at most the app's own run
limit (the app cannot make a larger one) and what the load will hold at most one session's budget, both checked
before the photo is decoded.
"""

from __future__ import annotations

from pathlib import Path

from ...correct.saved import load_trace_zip
from ...trace.load_limits import LoadLimits
from ...trace.safe_read import MAX_ZIP_BYTES, reading, regular_file
from ...types import Trace
from ..settings import APP_MAX_IMAGE_PIXELS
from .store import DEFAULT_MAX_SESSION_BYTES

LARGE_TRACE_ADVICE = ("open it on the command line instead (python -m sam3_agent export TRACE --coco masks.json "
                      "writes its masks)")


def app_load_limits(max_image_pixels: int = APP_MAX_IMAGE_PIXELS,
                    max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES) -> LoadLimits:
    """What an upload to the app may cost: a photo of at most ``max_image_pixels`` (the app's run limit) and at
    most ``max_session_bytes`` held (one session's budget)."""
    return LoadLimits(max_photo_pixels=max_image_pixels, max_held_bytes=max_session_bytes, advice=LARGE_TRACE_ADVICE)


def trace_from_upload(source: bytes | str | Path, limits: LoadLimits | None = None) -> Trace:
    """The trace in an uploaded .zip (its bytes or path): a bundle (``export.bundle_bytes``, edits included) or a
    trace .zip, read within ``trace.safe_read``'s bounds and ``limits`` (default ``app_load_limits()``).

    Raises:
        TraceFormatError: empty, not a zip, unsafe, too large to load, neither a bundle nor a trace, or malformed
            (the message says which, never naming a Python exception).
    """
    limits = limits or app_load_limits()
    with reading("the uploaded file"):
        if not isinstance(source, (bytes, bytearray)):
            source = regular_file(source, "the uploaded file")
        return load_trace_zip(source, MAX_ZIP_BYTES, limits)  # a bundle or a trace .zip (trace.file_kind decides)
