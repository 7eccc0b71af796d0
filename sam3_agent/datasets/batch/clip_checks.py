"""A batch's clips checked before any model loads: each video item's clip opened within its caps, its keyframe found.

The ``video`` command refuses a clip over its caps (frames, seconds, pixels per frame, file bytes), a damaged one or
a keyframe outside it before loading a model; a batch does the same for every video item at once, so a person fixes
every bad line in one pass (up to ``jsonl.MAX_LISTED`` of them named, each by its item id and path). Opening a clip
reads what ``video.clip.open_clip`` reads: the container's index (no frame decoded but the first) and the file's
sha256 for its identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import InputError
from ...video.clip import open_clip
from ...video.clip_caps import DEFAULT_CLIP_CAPS, ClipCaps
from ...video.clip_info import ClipInfo
from .items import Item, VideoItem
from .jsonl import MAX_LISTED


@dataclass(frozen=True)
class CheckedClip:
    """What checking one video item found: the clip's identity and the keyframe it resolves to."""

    info: ClipInfo
    keyframe: int


def keyframe_of(item: VideoItem, info: ClipInfo) -> int:
    """The frame index ``item`` names on a clip of ``info``: its ``keyframe``, the frame shown at its
    ``keyframe_time``, or 0.

    Raises:
        InputError: a frame or time outside the clip (the message gives its range).
    """
    if item.keyframe_time is not None:
        return info.index_at(item.keyframe_time)
    keyframe = item.keyframe or 0
    if not 0 <= keyframe < info.frame_count:
        raise InputError(f"keyframe {keyframe} is not in the clip: its frames are numbered 0 to {info.frame_count - 1}")
    return keyframe


def check_clip(item: VideoItem, caps: ClipCaps = DEFAULT_CLIP_CAPS) -> CheckedClip:
    """Open ``item``'s clip within ``caps`` (and close it) and resolve its keyframe.

    Raises:
        InputError: the clip is missing, damaged or over a cap, or the keyframe is outside it; the message is
            ``open_clip``'s or ``keyframe_of``'s.
    """
    with open_clip(item.video, caps) as clip:
        return CheckedClip(clip.info, keyframe_of(item, clip.info))


def check_clips(items: Sequence[Item], caps: ClipCaps = DEFAULT_CLIP_CAPS) -> dict[str, CheckedClip]:
    """``check_clip`` for every video item of ``items`` (a clip several items share is opened once); returns what
    each found, by item id.

    Raises:
        InputError: one message naming every video item refused (its id, path and reason), nothing run.
    """
    checked: dict[str, CheckedClip] = {}
    problems: list[str] = []
    opened: dict[str, ClipInfo | InputError] = {}  # path -> what opening it gave: items often share a clip
    for item in items:
        if not isinstance(item, VideoItem):
            continue
        path = str(item.video)
        if path not in opened:
            try:
                with open_clip(item.video, caps) as clip:
                    opened[path] = clip.info
            except InputError as error:
                opened[path] = error
        try:
            info = opened[path]
            if isinstance(info, InputError):
                raise info
            checked[item.id] = CheckedClip(info, keyframe_of(item, info))
        except InputError as error:
            problems.append(f"item {item.id!r} ({item.video_ref}): {error}")
    if len(problems) == 1:
        raise InputError(f"{problems[0]}; nothing was run")
    if problems:
        listed = "\n".join(f"  {problem}" for problem in problems[:MAX_LISTED])
        more = f"\n  and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise InputError(f"{len(problems)} clips were refused; nothing was run: fix them and run again\n{listed}{more}")
    return checked

