"""A clip's identity and timing (``ClipInfo``): what the video trace stores, so a run can be shown and exported again
when the clip itself is gone, and which frame is shown at a time (``ClipInfo.index_at``).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import InputError, TraceFormatError

HASH_CHUNK_BYTES = 1 << 20  # a file is hashed in pieces of this size: never read whole
# Timestamps compared with a time asked for are rounded to this (seconds): pts * time_base is a binary fraction, and a
# time typed or slid by a person ("0.12") would otherwise fall just before the frame it names.
TIME_TOLERANCE = 1e-6
ROTATIONS = (0, 90, 180, 270)
KINDS = ("video", "frames")


def file_sha256(path: str | Path, digest: Any = None) -> Any:
    """The sha256 of a file read in ``HASH_CHUNK_BYTES`` pieces (``digest``: a hashlib object to continue)."""
    digest = digest if digest is not None else hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest


@dataclass(frozen=True)
class ClipInfo:
    """What a clip is: its file, size on disk, hash, frames and their times.

    Attributes:
        file_name: the file's (or frames folder's) name without its folders; None when unknown.
        file_bytes: size in bytes of the video or ``.zip`` file; of a folder's frame files together.
        sha256: hex sha256 of the video file; for a folder or ``.zip`` of frames, of the frames' bytes one after the
            other in their (natural) order, so a folder and a ``.zip`` of it have the same hash
            (``cat $(ls -v frames/*) | sha256sum`` gives it).
        kind: ``"video"`` (a video file) or ``"frames"`` (a folder or ``.zip`` of images).
        frame_count: number of frames, at least 1.
        width, height: frame size in pixels as shown, after rotation.
        fps: nominal (average) frame rate in frames per second; None for frames given without a rate.
        timestamps: presentation time of each frame in seconds since the first (frame 0 at 0.0), increasing; a
            variable frame rate is kept as it is. Frames without a rate count frames instead (frame i at i), so times
            stay ordered and ``index_at`` stays defined; a front end shows frame numbers when ``fps`` is None.
        rotation: degrees the stored frames were turned clockwise to show them upright (0, 90, 180 or 270), from the
            video's display matrix (a phone held upright records 90).
    """

    file_name: str | None
    file_bytes: int | None
    sha256: str | None
    kind: Literal["video", "frames"]
    frame_count: int
    width: int
    height: int
    fps: float | None
    timestamps: tuple[float, ...]
    rotation: int

    @property
    def frame_seconds(self) -> float:
        """How long the last frame is shown: one nominal frame interval (1 when there is no rate)."""
        return 1.0 / self.fps if self.fps else 1.0

    @property
    def duration(self) -> float:
        """Seconds from the first frame's start to the last frame's end (the last frame lasts ``frame_seconds``)."""
        return self.timestamps[-1] + self.frame_seconds

    def index_at(self, seconds: float) -> int:
        """The frame shown at ``seconds`` since the first frame: the last frame whose timestamp is at most that
        (within ``TIME_TOLERANCE``).

        Raises:
            InputError: a time that is not a finite number, before 0 or at or after the clip's end (``duration``).
        """
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise InputError(f"a time in the clip must be a number of seconds, got {seconds!r}")
        if seconds < -TIME_TOLERANCE or seconds >= self.duration - TIME_TOLERANCE:
            raise InputError(f"{seconds:g} s is outside the clip, which runs from 0 to {self.duration:g} s "
                             f"({self.frame_count} frames); pick a time in that range")
        return max(0, bisect.bisect_right(self.timestamps, seconds + TIME_TOLERANCE) - 1)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (timestamps as a list)."""
        return {"file_name": self.file_name, "file_bytes": self.file_bytes, "sha256": self.sha256, "kind": self.kind,
                "frame_count": self.frame_count, "width": self.width, "height": self.height, "fps": self.fps,
                "timestamps": list(self.timestamps), "rotation": self.rotation}

    @classmethod
    def from_json(cls, data: Any) -> ClipInfo:
        """The inverse of ``to_json``, checked.

        Raises:
            TraceFormatError: not a dict, a field missing or of the wrong type, or fields that disagree (timestamps
                not one per frame, not increasing from 0).
        """
        if not isinstance(data, dict):
            raise TraceFormatError("the clip's record is not a JSON object")
        missing = [name for name in _FIELDS if name not in data]
        if missing:
            raise TraceFormatError(f"the clip's record lacks {', '.join(missing)}")
        stamps = data["timestamps"]
        if not isinstance(stamps, list) or not all(_is_number(t) for t in stamps):
            raise TraceFormatError("the clip's timestamps are not a list of numbers")
        info = cls(**{name: data[name] for name in _FIELDS if name != "timestamps"},
                   timestamps=tuple(float(t) for t in stamps))
        problem = info.problem()
        if problem:
            raise TraceFormatError(f"the clip's record is malformed: {problem}")
        return info

    def problem(self) -> str | None:
        """What is inconsistent in this record, in words (None when it is sound)."""
        checks = (
            (self.file_name is None or isinstance(self.file_name, str), "file_name is not text"),
            (self.file_bytes is None or _is_count(self.file_bytes, 0), "file_bytes is not a byte count"),
            (self.sha256 is None or (isinstance(self.sha256, str) and len(self.sha256) == 64), "sha256 is not a hash"),
            (self.kind in KINDS, f"kind is not one of {', '.join(KINDS)}"),
            (_is_count(self.frame_count, 1), "frame_count is not a positive whole number"),
            (_is_count(self.width, 1) and _is_count(self.height, 1), "width or height is not a positive size"),
            (self.fps is None or (_is_number(self.fps) and self.fps > 0), "fps is not a positive rate"),
            (self.rotation in ROTATIONS, "rotation is not 0, 90, 180 or 270"),
            (len(self.timestamps) == self.frame_count, "there is not one timestamp per frame"),
            (bool(self.timestamps) and self.timestamps[0] == 0.0 and _increasing(self.timestamps),
             "the timestamps do not increase from 0"),
        )
        return next((message for ok, message in checks if not ok), None)


_FIELDS = ("file_name", "file_bytes", "sha256", "kind", "frame_count", "width", "height", "fps", "timestamps",
           "rotation")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _is_count(value: Any, least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= least


def _increasing(values: Iterable[float]) -> bool:
    values = list(values)
    return all(a < b for a, b in zip(values, values[1:]))
