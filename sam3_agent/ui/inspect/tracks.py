"""A saved video trace in the Inspect tab: its tracks scrubber (every frame's objects, numbered in their colours) and
its objects table, without a model and without the clip.

A video trace keeps its keyframes' photos and every mask, not the clip (``video.saved``): a keyframe is drawn on its
own picture, every other frame on grey (``ui.video.frames.blank_frame``), the masks being all the trace can show
there.

No Gradio here.
"""

from __future__ import annotations

from PIL import Image

from ...video.records import VideoTrace
from ..video.frames import blank_frame, frame_caption, frame_with_objects
from ..video.screen import video_status_line


def track_frame(trace: VideoTrace, frame: int) -> tuple[Image.Image, str]:
    """(picture, caption) of ``frame``: its objects on the keyframe's photo when it is a keyframe, else on grey."""
    photos = {run.frame_index: run.trace.image for run in trace.keyframes}
    background = photos.get(frame) or blank_frame(trace.tracks)
    caption = frame_caption(trace.clip, frame)
    caption += " (a keyframe: its own picture)" if frame in photos else " (masks only: the clip is not in the trace)"
    return frame_with_objects(background, trace.tracks, frame), caption


def video_trace_words(trace: VideoTrace) -> str:
    """The Inspect tab's status for a video trace: the query, the clip, the outcome, what the tab shows of it."""
    clip = trace.clip
    keyframes = ", ".join(str(run.frame_index) for run in trace.keyframes) or "none"
    edits = len(trace.edits)
    fixed = f" {edits} hand correction{'s' if edits != 1 else ''} saved with it." if edits else ""
    return (f"Video trace of {trace.query!r} on {clip.file_name or 'a clip'} ({clip.frame_count} frames of "
            f"{clip.width}x{clip.height}). {video_status_line(trace).text}{fixed} The rounds below are the agent's on "
            f"keyframe {keyframes}; the tracks scrubber shows every frame's objects.")
