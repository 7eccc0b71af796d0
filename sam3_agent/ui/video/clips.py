"""A clip uploaded to the app: the app's caps (checked on what the file declares before any frame is decoded) and the
two readers a tab opens on it.

The caps are ``video.clip_caps``' defaults, except that a file may be no larger than what the page lets a visitor
upload (``ui.layout.MAX_UPLOAD``) and a frame no larger than a photo a run takes (``--max-image-pixels``: the keyframe
goes to the VLM as a photo). A tab keeps one reader for its scrubber with a cache of ``SCRUB_CACHE_FRAMES`` frames
(what the scrubber shows, and the one before it), and opens a second reader, with the core's own cache, for the
time a run, a re-propagation or the overlay video reads the clip through (``open_working``): a backward walk reads
chunks that fit its cache, and a small cache would decode every group of pictures many times over.

No Gradio here.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...images import file_name_of
from ...video.clip import Clip, open_clip
from ...video.clip_caps import DEFAULT_CLIP_CAPS, ClipCaps, duration_words, megabytes

logger = logging.getLogger(__name__)

UPLOAD_BYTES = 200 * 1024**2  # ui.layout.MAX_UPLOAD ("200mb"): the page refuses larger uploads itself
SCRUB_CACHE_FRAMES = 2  # the frame the scrubber shows and the one before (a slider dragged back and forth)
SCRUB_CACHE_BYTES = 32 * 1024**2  # ... at most: two 1080p RGB frames fit; a 4K frame is decoded again when shown again
CLIP_TYPES = [".mp4", ".mov", ".webm", ".mkv", ".avi", ".m4v", ".zip"]  # what the upload's file picker offers
KEPT_NAME = "clip"  # the session's own link to the upload (never a name from the visitor)


def app_clip_caps(max_image_pixels: int) -> ClipCaps:
    """The caps of a clip uploaded to the app: frames and length as the core's defaults, frames no larger than a
    photo a run takes, files no larger than an upload."""
    return ClipCaps(max_frames=DEFAULT_CLIP_CAPS.max_frames, max_seconds=DEFAULT_CLIP_CAPS.max_seconds,
                    max_pixels=max_image_pixels, max_file_bytes=UPLOAD_BYTES)


def caps_words(caps: ClipCaps) -> str:
    """The caps for a person, e.g. ``"up to 200 MB, 3,000 frames, 10 min and 8 megapixels a frame"``."""
    return (f"up to {megabytes(caps.max_file_bytes)}, {caps.max_frames:,} frames, "
            f"{duration_words(caps.max_seconds)} and {caps.max_pixels / 1e6:g} megapixels a frame")


def keep_upload(upload: str | Path, folder: Path) -> Path:
    """The session's own copy of an uploaded clip in ``folder`` (created): a hard link when the upload lies on the
    same disk (no bytes copied), else a copy. Gradio sweeps its uploads after an hour; this one stays until the
    session ends.

    Raises:
        InputError: the upload cannot be read or kept (the disk is full...).
    """
    folder.mkdir(parents=True, exist_ok=True)
    suffix = Path(upload).suffix.lower() if Path(upload).suffix.lower() in CLIP_TYPES else ""
    kept = folder / f"{KEPT_NAME}{suffix}"
    kept.unlink(missing_ok=True)
    try:
        try:
            os.link(upload, kept)
        except OSError:  # another disk, or links not allowed
            shutil.copyfile(upload, kept)
    except FileNotFoundError:
        raise InputError("the upload is no longer on the server: upload the clip again") from None
    except OSError as error:
        raise InputError(f"the clip could not be kept on the server ({error.strerror or 'write failed'}); try "
                         "again later") from None
    return kept


def open_scrubber(path: Path, caps: ClipCaps, name: str | None) -> Clip:
    """The tab's reader for its scrubber (``SCRUB_CACHE_*``); ``name``: the upload's own file name, for messages and
    the clip's identity (never the server's path).

    Raises:
        InputError: a clip over the caps (said before any frame is decoded), not a clip, damaged; in words a visitor
            can act on.
    """
    return open_clip(path, caps, name=name, cache_frames=SCRUB_CACHE_FRAMES, cache_bytes=SCRUB_CACHE_BYTES)


def open_working(path: Path, caps: ClipCaps, name: str | None) -> Clip:
    """A reader with the core's own cache for one run, re-propagation or overlay video; close it when done.

    Raises:
        InputError: the clip can no longer be read (the session's copy is gone).
    """
    return open_clip(path, caps, name=name)


def upload_name(path: str) -> str | None:
    """The uploaded file's own name (Gradio keeps it as the last part of the path)."""
    return file_name_of(path)


def checked_frame(value: Any, frame_count: int) -> int:
    """A frame number from the page or the API as an int in the clip.

    Raises:
        InputError: not a whole number, or outside the clip.
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"the keyframe must be a frame number, got {value!r}") from None
    if not number.is_integer() or not 0 <= number < frame_count:
        raise InputError(f"frame {value!r} is not in the clip: its frames are numbered 0 to {frame_count - 1}")
    return int(number)
