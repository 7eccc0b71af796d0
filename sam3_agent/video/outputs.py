"""The files of one run over a clip, as the ``video`` command and a batch's video items write them into a folder.

Layout::

    video_trace.json, keyframes/<frame>/   the video trace (``saved``)
    masks/00000.png ...                    one palette PNG per frame (``export.write_palette_pngs``)
    tracks_ytvis.json                      the YouTube-VIS-style JSON (``export.write_ytvis``)
    overlay.mp4                            the overlay video (``export.write_overlay_video``; needs the clip)

One function for both writers, so a batch item's folder holds exactly what ``video --out`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .export import PNG_DIR, write_overlay_video, write_palette_pngs, write_ytvis
from .records import VideoTrace
from .saved import VIDEO_TRACE_FILE, save_video_trace

TRACE_NAME = VIDEO_TRACE_FILE
YTVIS_FILE = "tracks_ytvis.json"
OVERLAY_FILE = "overlay.mp4"

__all__ = ["OVERLAY_FILE", "PNG_DIR", "TRACE_NAME", "YTVIS_FILE", "write_video_outputs"]


def write_video_outputs(trace: VideoTrace, clip: Any, out: Path, overlay_video: bool = True) -> list[Path]:
    """Write the trace, the palette PNGs, the YouTube-VIS JSON and (with ``overlay_video`` and the clip) the overlay
    video into ``out`` (created if needed); returns what was written, in that order (the PNG folder as one entry).

    Args:
        trace: the video trace (any status: a stopped run's frames tracked so far are written).
        clip: the open ``video.clip.Clip`` the trace was made on, or ``None`` (then no overlay video).
        overlay_video: write ``overlay.mp4`` (slow: every frame is decoded, drawn and encoded).

    Raises:
        TraceSaveError / OSError: a file could not be written (each file is written whole or not at all).
        InputError: the clip's frames could not be read for the overlay video.
    """
    out = Path(out)
    written = [save_video_trace(trace, out)]
    write_palette_pngs(trace.tracks, out / PNG_DIR)
    written.append(out / PNG_DIR)
    written.append(write_ytvis(trace, out / YTVIS_FILE))
    if overlay_video and clip is not None:
        written.append(write_overlay_video(trace, clip, out / OVERLAY_FILE))
    return written
