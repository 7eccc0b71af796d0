"""Caps on a clip (frames, seconds, pixels per frame, file bytes), set per call, and the messages that refuse one.

Every cap is checked twice: on what the container (or the list of frame files) *declares*, before any frame is
decoded, and again on what is really read (packets counted, the first frame's decoded size), because a declaration
can be missing or lie. Kept free of heavy imports (no PyAV, no numpy) so a front end can show the defaults in its
help before any model library loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

# Defaults, each with its reason:
# 3,000 frames: the clip length issue 31 sets the memory goal for (2 minutes at 25 fps); tracking cost is linear in
# frames and a run longer than that is a batch job, not an interactive one.
DEFAULT_MAX_FRAMES = 3000
# 600 s: 3,000 frames at 5 fps, about the rate of the sampled clips of the video segmentation datasets (YouTube-VOS,
# which Ref-YouTube-VOS and ReVOS draw on, keeps every 5th frame of 30 fps: 6 fps); a longer clip is a film to trim.
DEFAULT_MAX_SECONDS = 600.0
# 3840 x 2160 (4K UHD): what phones record at most; a decoded 4K RGB frame is 25 MB on the host, 8K four times that.
DEFAULT_MAX_PIXELS = 3840 * 2160
# 2 GiB: about 6 minutes of 4K phone video (H.264/HEVC at ~45 Mbit/s); the sha256 of the clip's identity reads it all.
DEFAULT_MAX_FILE_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class ClipCaps:
    """What a clip may hold, checked before anything big is decoded (see the module docstring).

    Attributes:
        max_frames: most frames (video frames, or frame files of a folder or ``.zip``).
        max_seconds: longest duration in seconds (a folder of frames without a rate has none to check).
        max_pixels: most pixels per frame (width * height; rotation does not change it).
        max_file_bytes: largest file in bytes (a video, a ``.zip``, or a folder's frame files together; a ``.zip``'s
            frames once inflated are held to it too).

    Raises:
        InputError: a cap that is not a positive number.
    """

    max_frames: int = DEFAULT_MAX_FRAMES
    max_seconds: float = DEFAULT_MAX_SECONDS
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES

    def __post_init__(self) -> None:
        for field in ("max_frames", "max_pixels", "max_file_bytes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"the clip cap {field} must be a positive whole number, got {value!r}")
        seconds = self.max_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            raise InputError(f"the clip cap max_seconds must be a positive number of seconds, got {seconds!r}")


DEFAULT_CLIP_CAPS = ClipCaps()


def megabytes(count: int) -> str:
    """A byte count for a person: ``"1.5 GB"``, ``"120 MB"``, ``"850 KB"`` (powers of 1024)."""
    for unit, size in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if count >= size:
            value = count / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
    return f"{count} bytes"


def duration_words(seconds: float) -> str:
    """Seconds for a person: ``"42.0 s"``, ``"12 min 30 s"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def _said(declared: bool) -> str:
    return "declares" if declared else "has"


def check_frames(count: int, caps: ClipCaps, shown: str, declared: bool = False, at_least: bool = False) -> None:
    """Refuse more than ``caps.max_frames`` frames; ``declared`` when the count is the container's own claim,
    ``at_least`` when counting stopped at the first frame over the cap."""
    if count <= caps.max_frames:
        return
    if at_least:
        said = f"has more than {caps.max_frames:,} frames, the most a clip may have here"
    else:
        said = f"{_said(declared)} {count:,} frames, more than the {caps.max_frames:,} a clip may have here"
    raise InputError(f"{shown} {said}; trim it to the part you need or keep fewer frames per second")


def check_seconds(seconds: float, caps: ClipCaps, shown: str, declared: bool = False) -> None:
    """Refuse a clip longer than ``caps.max_seconds``."""
    if seconds > caps.max_seconds:
        verb = "declares a length of" if declared else "lasts"
        raise InputError(f"{shown} {verb} {duration_words(seconds)}, longer than the "
                         f"{duration_words(caps.max_seconds)} a clip may last here; trim it to the part you need")


def check_pixels(width: int, height: int, caps: ClipCaps, shown: str, declared: bool = False,
                 frame: str | None = None) -> None:
    """Refuse frames of more than ``caps.max_pixels`` pixels; ``frame``: the name of the one frame file measured."""
    if width * height <= caps.max_pixels:
        return
    if frame is not None:
        subject = f"frame {frame!r} of {shown} is"
    else:
        subject = f"{shown} {'declares' if declared else 'has'} frames of"
    raise InputError(f"{subject} {width}x{height} = {width * height:,} pixels, above the {caps.max_pixels:,} per "
                     "frame accepted here; downscale it")


def check_file_bytes(count: int, caps: ClipCaps, shown: str) -> None:
    """Refuse a file of more than ``caps.max_file_bytes`` bytes."""
    if count > caps.max_file_bytes:
        raise InputError(f"{shown} is {megabytes(count)}, larger than the {megabytes(caps.max_file_bytes)} accepted "
                         "here; trim it or save it with stronger compression")


def check_frame_bytes(count: int, caps: ClipCaps, shown: str, unpacked: bool = False) -> None:
    """Refuse frame files that take more than ``caps.max_file_bytes`` together (``unpacked``: as a .zip declares
    them once inflated)."""
    if count > caps.max_file_bytes:
        take = "would take" if unpacked else "take"
        once = " once unpacked" if unpacked else " together"
        raise InputError(f"the frames in {shown} {take} {megabytes(count)}{once}, more than the "
                         f"{megabytes(caps.max_file_bytes)} accepted here; give fewer or smaller frames")
