"""Doubles for video tests: a clip of real photo frames, and a tracker that moves each prompt mask by a known step.

``ShiftTracker`` follows a known moving shape: an object prompted with mask M on frame k is M moved by
(dx, dy) * (f - k) pixels on frame f (pixels pushed out of the frame are lost), score 0.9; so every tracked frame's
mask is known exactly, and a correction's effect on each frame can be asserted pixel for pixel.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from sam3_agent.video.clip_info import ClipInfo

TRACKED_SCORE = 0.9


def shifted(mask: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """``mask`` moved right by ``dx`` and down by ``dy`` pixels (negative: left / up), zero fill."""
    out = np.zeros_like(mask)
    height, width = mask.shape
    ys, xs = np.nonzero(mask)
    ys, xs = ys + dy, xs + dx
    keep = (ys >= 0) & (ys < height) & (xs >= 0) & (xs < width)
    out[ys[keep], xs[keep]] = True
    return out


@dataclass(frozen=True)
class Tracked:
    frame_index: int
    masks: dict[int, np.ndarray]
    scores: dict[int, float]


@dataclass
class ShiftTracker:
    """A ``VideoTracker`` double: see the module docstring. ``calls`` records (prompt frame, ids, reverse, frames
    tracked) per call; ``stop_after`` sets the stop event after that many frames of one call (a user's Stop)."""

    dx: int = 2
    dy: int = 0
    name: str = "shift-tracker"
    calls: list[tuple[int, tuple[int, ...], bool, int]] = field(default_factory=list)
    stop_after: int | None = None

    def track(self, frames: Iterable[tuple[int, Image.Image]], prompts: Mapping[int, np.ndarray], *,
              num_frames: int, reverse: bool = False, stop: threading.Event | None = None) -> Iterator[Tracked]:
        items = iter(frames)
        start, _ = next(items)
        done = 0
        try:
            for index, _image in items:
                if stop is not None and stop.is_set():
                    return
                expected = start - 1 - done if reverse else start + 1 + done
                if index != expected:
                    raise AssertionError(f"frame {index} where {expected} was expected")
                steps = index - start
                yield Tracked(index, {o: shifted(m, self.dx * steps, self.dy * steps) for o, m in prompts.items()},
                              {o: TRACKED_SCORE for o in prompts})
                done += 1
                if self.stop_after is not None and done >= self.stop_after and stop is not None:
                    stop.set()
        finally:
            self.calls.append((start, tuple(sorted(prompts)), reverse, done))


class PhotoClip:
    """A ``video.clip.Clip`` double: ``count`` frames, each a real photo (scaled to ``size``) with the frame number
    drawn in its corner, 25 frames a second. ``read`` counts the frames handed out."""

    def __init__(self, photo: Image.Image, count: int, size: tuple[int, int] = (64, 48)) -> None:
        self._base = photo.resize(size)
        self.read = 0
        self.info = ClipInfo(file_name="coffee.mp4", file_bytes=1234, sha256="0" * 64, kind="video",
                             frame_count=count, width=size[0], height=size[1], fps=25.0,
                             timestamps=tuple(i / 25 for i in range(count)), rotation=0)

    def frame(self, index: int) -> Image.Image:
        if not 0 <= index < self.info.frame_count:
            raise IndexError(index)
        self.read += 1
        array = np.array(self._base)
        array[0, : index % array.shape[1]] = 255  # frames differ, as a clip's do
        image = Image.fromarray(array)
        image.info["frame_index"] = index  # lets detector doubles answer per frame
        return image

    def frames(self, indices: range) -> Iterator[tuple[int, Image.Image]]:
        for index in indices:
            yield index, self.frame(index)
