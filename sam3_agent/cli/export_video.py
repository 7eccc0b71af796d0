"""``export`` on a video trace: ``python -m sam3_agent export VIDEO_TRACE [--png-dir DIR] [--ytvis FILE]
[--overlay-video FILE --video CLIP]``.

A video trace stores every object's masks as corrected: a correction (``video.corrections``) replaces the masks it
re-propagated in ``trace.tracks`` and its ``edits`` entry is the history (and the undo), so the exports read the
tracks as they are, with nothing to replay. ``--png-dir`` writes one palette PNG per frame (pixel value = object id),
``--ytvis`` the YouTube-VIS-style JSON; ``--overlay-video`` needs the clip's frames, which a trace does not keep:
``--video CLIP`` gives them, and a clip other than the trace's (another sha256, frame count or frame size) is refused
before anything is written. The photo exports (``--coco``, ``--coco-polygons``, ``--yolo``, ``--bundle``) are refused
on a video trace, and the video ones on a photo's trace, each with the flags that do apply.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from ..errors import EXIT_INPUT, EXIT_OK, InputError, Sam3AgentError

PHOTO_FLAGS = (("--coco", "coco"), ("--coco-polygons", "coco_polygons"), ("--yolo", "yolo"), ("--bundle", "bundle"))
VIDEO_FLAGS = (("--ytvis", "ytvis"), ("--overlay-video", "overlay_video"), ("--video", "video"))
VIDEO_OUTPUTS = "--png-dir DIR (palette PNGs), --ytvis FILE, --overlay-video FILE --video CLIP"


def given(args: argparse.Namespace, flags: tuple[tuple[str, str], ...]) -> list[str]:
    """The flags of ``flags`` (``(flag, dest)`` pairs) that ``args`` gives."""
    return [flag for flag, dest in flags if getattr(args, dest, None)]


def _writing(flag: str, path: str, write: Callable[[], Any]) -> Any:
    try:
        return write()
    except OSError as error:
        raise InputError(f"cannot write {flag} {path}: {error.strerror or error}; choose another path") from None


def check_same_clip(trace_clip: Any, clip_info: Any, shown: str) -> None:
    """Refuse a clip that is not the one the trace was made on: another sha256 (when both have one), frame count or
    frame size.

    Raises:
        InputError: saying what differs and which clip the trace was made on.
    """
    differences = []
    if trace_clip.sha256 and clip_info.sha256 and trace_clip.sha256 != clip_info.sha256:
        differences.append(f"its contents differ (sha256 {clip_info.sha256[:12]}... where the trace's clip has "
                           f"{trace_clip.sha256[:12]}...)")
    if trace_clip.frame_count != clip_info.frame_count:
        differences.append(f"it has {clip_info.frame_count} frames where the trace's has {trace_clip.frame_count}")
    if (trace_clip.width, trace_clip.height) != (clip_info.width, clip_info.height):
        differences.append(f"its frames are {clip_info.width}x{clip_info.height} where the trace's are "
                           f"{trace_clip.width}x{trace_clip.height}")
    if differences:
        raise InputError(f"--video {shown} is not the clip this trace was made on ({trace_clip.file_name or 'a clip'}"
                         f", {trace_clip.frame_count} frames): {'; '.join(differences)}; give that clip")


def export_video_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``export`` on a video trace (see the module docstring); returns the exit status (0, or 2 with one line)."""
    refused = given(args, PHOTO_FLAGS)
    if refused:
        stderr.write(f"error: {', '.join(refused)} {'is' if len(refused) == 1 else 'are'} for a photo's trace, and "
                     f"{args.trace} is a video trace: use {VIDEO_OUTPUTS}\n")
        return EXIT_INPUT
    if not (args.png_dir or args.ytvis or args.overlay_video):
        stderr.write(f"error: nothing to write: give {VIDEO_OUTPUTS}\n")
        return EXIT_INPUT
    if args.overlay_video and not args.video:
        stderr.write("error: --overlay-video needs --video CLIP, the clip the trace was made on (a video trace keeps "
                     "the masks, not the frames)\n")
        return EXIT_INPUT
    if args.video and not args.overlay_video:
        stderr.write("error: --video is only read for --overlay-video FILE; leave it out or add --overlay-video\n")
        return EXIT_INPUT
    try:
        return _export(args, stdout)
    except Sam3AgentError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT


def _export(args: argparse.Namespace, stdout: TextIO) -> int:
    from ..video.clip import open_clip
    from ..video.export import write_overlay_video, write_palette_pngs, write_ytvis
    from ..video.saved import load_video_trace

    trace = load_video_trace(args.trace)
    clip = None
    if args.overlay_video:
        clip = open_clip(args.video)
        try:
            check_same_clip(trace.clip, clip.info, args.video)
        except InputError:
            clip.close()
            raise
    written = []
    try:
        if args.png_dir:
            pngs = _writing("--png-dir", args.png_dir, lambda: write_palette_pngs(trace.tracks, args.png_dir))
            written.append(f"{len(pngs)} palette PNG(s) in {args.png_dir}")
        if args.ytvis:
            written.append(str(_writing("--ytvis", args.ytvis, lambda: write_ytvis(trace, args.ytvis))))
        if clip is not None:
            written.append(str(_writing("--overlay-video", args.overlay_video,
                                        lambda: write_overlay_video(trace, clip, args.overlay_video))))
    finally:
        if clip is not None:
            clip.close()
    tracks = trace.tracks
    stdout.write(f"{len(tracks.objects)} object(s) over {tracks.frame_count} frame(s), {len(trace.edits)} "
                 f"correction(s) already in the masks; wrote {', '.join(written)}\n")
    return EXIT_OK
