"""A bounded cache of decoded frames: least recently used first out, bounded in frames and in bytes.

Hand-written on ``collections.OrderedDict`` because the standard library's ``functools.lru_cache`` bounds only the
number of entries, and a 4K frame weighs sixteen times a 960x540 one.
"""

from __future__ import annotations

from collections import OrderedDict

from PIL import Image


def image_bytes(image: Image.Image) -> int:
    """Bytes of an image's pixels in memory (RGB: width * height * 3)."""
    return image.width * image.height * len(image.getbands())


class FrameCache:
    """Decoded frames by index, at most ``max_frames`` of them and ``max_bytes`` of pixels together.

    A frame larger than ``max_bytes`` on its own is not kept. Not thread-safe: ``Clip`` holds its lock around it.
    """

    def __init__(self, max_frames: int, max_bytes: int) -> None:
        if max_frames < 1 or max_bytes < 1:
            raise ValueError(f"a frame cache needs room (max_frames={max_frames}, max_bytes={max_bytes})")
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._frames: OrderedDict[int, Image.Image] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._frames)

    def __contains__(self, index: int) -> bool:
        return index in self._frames

    def get(self, index: int) -> Image.Image | None:
        """The frame at ``index`` (now the most recently used), or None."""
        image = self._frames.get(index)
        if image is not None:
            self._frames.move_to_end(index)
        return image

    def put(self, index: int, image: Image.Image) -> None:
        """Keep ``image`` as the frame at ``index``, dropping the least recently used frames beyond the bounds."""
        size = image_bytes(image)
        old = self._frames.pop(index, None)
        if old is not None:
            self.bytes -= image_bytes(old)
        if size > self.max_bytes:
            return
        self._frames[index] = image
        self.bytes += size
        self._evict()

    def _evict(self) -> None:
        while len(self._frames) > self.max_frames or self.bytes > self.max_bytes:
            _, image = self._frames.popitem(last=False)
            self.bytes -= image_bytes(image)

    def room_for(self, frame_bytes: int) -> int:
        """How many frames of ``frame_bytes`` each fit at once (at least 1)."""
        return max(1, min(self.max_frames, self.max_bytes // max(1, frame_bytes)))

    def clear(self) -> None:
        self._frames.clear()
        self.bytes = 0
