"""A frame of a clip as the page shows it: its objects drawn (filled, outlined and numbered by id, in the colours of
every export: ``video.export.draw_objects``), scaled for the page, with its number and time in words.

No Gradio here.
"""

from __future__ import annotations

from collections.abc import Iterable

from PIL import Image

from ...video.clip_info import ClipInfo
from ...video.export import draw_objects
from ...video.tracks import Tracks

DISPLAY_SIDE = 960  # px, longer side of a frame on the page (the scrubber's picture)
NO_CLIP_GREY = (96, 96, 96)  # a frame whose picture is not kept (a saved trace without its clip): masks on grey


def frame_caption(info: ClipInfo, frame: int) -> str:
    """``"Frame 12 of 0-49 · 0.48 s"``: the frame's number (as the slider, the API and the exports count: from 0) and
    its time; without a frame rate (frames given as images) the time is left out."""
    last = info.frame_count - 1
    where = f"Frame {frame} of 0-{last}" if last else "Frame 0 (the only one)"
    if info.fps and frame < len(info.timestamps):
        return f"{where} · {info.timestamps[frame]:.2f} s"
    return where


def frame_with_objects(image: Image.Image, tracks: Tracks | None, frame: int, hidden: Iterable[int] = (),
                       max_side: int = DISPLAY_SIDE) -> Image.Image:
    """``image`` (frame ``frame``, at the clip's size) with the objects of ``tracks`` present there drawn, except the
    ``hidden`` ids, scaled to at most ``max_side`` px on its longer side (RGB; a new image)."""
    masks = {} if tracks is None else tracks.masks_on(frame)
    off = set(hidden)
    drawn = draw_objects(image, {oid: m for oid, m in masks.items() if oid not in off})
    if max(drawn.size) > max_side:
        drawn.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    return drawn


def blank_frame(tracks: Tracks) -> Image.Image:
    """A grey picture at the clip's size, for a frame whose picture a saved trace does not keep."""
    return Image.new("RGB", (tracks.width, tracks.height), NO_CLIP_GREY)
