"""Opening a clip within caps, and reading its frames as they are needed.

``open_clip`` takes a video file (mp4, mov, webm, mkv, avi: ``video_file``, decoded through PyAV), a folder of frames
or a ``.zip`` of frames (``frame_folder``) and returns a ``Clip``: its identity and timing (``ClipInfo``) and its
frames by number, RGB at their original resolution, upright.

- Caps (``ClipCaps``, per call) are checked on what the file declares before any frame is decoded, then on what is
  really read; every refusal is an ``InputError`` in words a person can act on, and nothing is written anywhere.
- A single frame is a clip of one frame, not a refusal: someone who gives one frame expects the agent's answer on it,
  which is what a run over it gives (the keyframe, nothing to track), with the same exports as for any clip.
- Memory: frames are decoded when asked for, never all at once. A bounded cache (``FrameCache``: at most
  ``cache_frames`` frames and ``cache_bytes`` of pixels) keeps the latest. ``frames`` forward is one sequential
  decode; backward, it decodes chunks that fit the cache forward (from the keyframe before each chunk) and serves each
  chunk in reverse, so a backward walk holds no more than the cache either.
- A ``Clip`` may be read from several threads (a lock serialises the decoder); a frame returned is shared with the
  cache: copy it before drawing on it.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import re
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import av
from PIL import Image

from ..errors import InputError
from ..images import file_name_of
from .clip_caps import DEFAULT_CLIP_CAPS, ClipCaps, check_file_bytes, check_frames, check_pixels, check_seconds
from .clip_info import ClipInfo, file_sha256
from .frame_cache import FrameCache
from .frame_folder import FolderFrames, FramesReader, ZipFrames
from .video_file import VideoDecoder, index_packets, open_container

__all__ = ["DEFAULT_CLIP_CAPS", "Clip", "ClipCaps", "ClipInfo", "open_clip"]

logger = logging.getLogger(__name__)

CACHE_FRAMES = 16  # decoded frames a clip keeps by default: a backward chunk, and what a scrubber revisits
CACHE_BYTES = 128 * 1024**2  # ... and their pixels at most: 21 frames of 1080p RGB, 5 of 4K
ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or the end record of an empty .zip (APPNOTE 4.3)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class Clip:
    """An open clip: ``info`` and its frames by number (0-based). Made by ``open_clip``; a context manager, and
    ``close`` frees the decoder.

    Attributes:
        info: the clip's identity and timing.
        decoded: how many frames were decoded so far (cache misses), for tests and benchmarks.
    """

    def __init__(self, info: ClipInfo, source: VideoDecoder | FramesReader, cache: FrameCache) -> None:
        self.info = info
        self.decoded = 0
        self._source: VideoDecoder | FramesReader | None = source
        self._cache = cache
        self._lock = threading.Lock()

    def frame(self, index: int) -> Image.Image:
        """Frame ``index``: PIL RGB, (width, height) = (``info.width``, ``info.height``), rotation applied.

        Raises:
            InputError: an index outside the clip, or a frame the file is too damaged to give.
        """
        return self._get(self._checked(index))

    def frames(self, indices: range) -> Iterator[tuple[int, Image.Image]]:
        """(index, frame) for each index of ``indices`` in its order (step +1 or -1), decoded as the iterator is
        pulled; backward in chunks that fit the cache (see the module docstring).

        Raises:
            InputError: a step other than +1 or -1, or an index outside the clip (checked before any frame is read).
        """
        if not isinstance(indices, range) or indices.step not in (1, -1):
            raise InputError(f"frames are read by a range of step 1 or -1, got {indices!r}")
        if len(indices):
            self._checked(indices[0])
            self._checked(indices[-1])
        return self._forward(indices) if indices.step == 1 else self._backward(indices)

    def index_at(self, seconds: float) -> int:
        """The frame shown at ``seconds`` since the first frame (``ClipInfo.index_at``)."""
        return self.info.index_at(seconds)

    def close(self) -> None:
        """Free the decoder and the cached frames; reading afterwards raises RuntimeError. Idempotent."""
        with self._lock:
            if self._source is not None:
                self._source.close()
                self._source = None
            self._cache.clear()

    def __enter__(self) -> Clip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _forward(self, indices: range) -> Iterator[tuple[int, Image.Image]]:
        for index in indices:
            yield index, self._get(index)

    def _backward(self, indices: range) -> Iterator[tuple[int, Image.Image]]:
        chunk = self._cache.room_for(self.info.width * self.info.height * 3)
        high, low = indices[0], indices[-1]
        while high >= low:
            start = max(low, high - chunk + 1)
            for index in range(start, high + 1):  # forward, into the cache
                self._get(index)
            for index in range(high, start - 1, -1):
                yield index, self._get(index)
            high = start - 1

    def _get(self, index: int) -> Image.Image:
        with self._lock:
            if self._source is None:
                raise RuntimeError("the clip was closed; open it again with open_clip(...)")
            image = self._cache.get(index)
            if image is None:
                try:
                    image = self._source.read(index)
                except MemoryError:
                    raise InputError(f"there is not enough memory left to decode frame {index} of "
                                     f"{self._shown()}; try again later or give a smaller clip") from None
                self.decoded += 1
                self._cache.put(index, image)
            return image

    def _checked(self, index: int) -> int:
        try:
            number = operator.index(index)
        except TypeError:
            raise InputError(f"a frame number must be a whole number, got {index!r}") from None
        if isinstance(index, bool) or not 0 <= number < self.info.frame_count:
            raise InputError(f"frame {index!r} is outside {self._shown()}, whose frames are numbered 0 to "
                             f"{self.info.frame_count - 1}; pick one in that range")
        return number

    def _shown(self) -> str:
        return repr(self.info.file_name) if self.info.file_name else "the clip"


def open_clip(source: str | Path, caps: ClipCaps = DEFAULT_CLIP_CAPS, *, name: str | None = None,
              frame_rate: float | None = None, cache_frames: int = CACHE_FRAMES,
              cache_bytes: int = CACHE_BYTES) -> Clip:
    """Open a clip: a video file, a folder of frames or a ``.zip`` of frames (told apart by what the path is and how
    the file begins, not by its extension).

    Args:
        source: the path.
        caps: what the clip may hold (``ClipCaps``), checked before anything big is decoded.
        name: how messages and ``ClipInfo.file_name`` name it (default: the path's file name); a server passes an
            upload's own name so that no temporary path is ever shown.
        frame_rate: frames per second of a folder or ``.zip`` of frames (e.g. 24 for DAVIS); None: no rate. Not
            accepted for a video file, which has its own timestamps.
        cache_frames, cache_bytes: bounds of the cache of decoded frames (see the module docstring).

    Returns:
        An open ``Clip``; close it (or use it in a ``with`` block).

    Raises:
        InputError: a URL, no such file, not a video or folder or ``.zip`` of frames, over a cap, no frames, a file
            cut short or damaged, frames of mixed sizes, a bad ``frame_rate``; the message says what to do.
    """
    if not isinstance(caps, ClipCaps):
        raise InputError(f"caps must be a ClipCaps, got {type(caps).__name__}")
    if frame_rate is not None and (isinstance(frame_rate, bool) or not isinstance(frame_rate, (int, float))
                                   or not (0 < frame_rate < math.inf)):
        raise InputError(f"frame_rate must be a positive number of frames per second, got {frame_rate!r}")
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"a clip is given by its path (a video file, a folder or a .zip of frames), got "
                         f"{type(source).__name__}")
    cache = FrameCache(cache_frames, cache_bytes)
    text = os.fspath(source)
    shown = repr(name if name is not None else (file_name_of(text) or text))
    if _URL.match(text):
        raise InputError(f"{shown} is a URL; clips are read from files only: download it first and give its path")
    path = Path(text).absolute()
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"clip not found: {shown}; check the path") from None
    except OSError as error:
        raise InputError(f"cannot read the clip {shown}: {error.strerror or 'not accessible'}") from None
    file_name = name if name is not None else file_name_of(path)
    try:
        if stat.S_ISDIR(mode):
            return _frames_clip(FolderFrames(path, shown, caps), caps, frame_rate, file_name, cache)
        if not stat.S_ISREG(mode):
            raise InputError(f"{shown} is not a regular file (a pipe, socket or device); save the clip to a file")
        with open(path, "rb") as handle:
            head = handle.read(4)
        if head in ZIP_STARTS:
            return _frames_clip(ZipFrames(path, shown, caps), caps, frame_rate, file_name, cache)
        if frame_rate is not None:
            raise InputError(f"{shown} is a video, which has its own timestamps: frame_rate is only for frames given "
                             "as images")
        return _video_clip(path, shown, caps, file_name, cache)
    except PermissionError:
        raise InputError(f"cannot read {shown}: permission denied") from None
    except OSError as error:  # a disk or network-share fault while reading
        raise InputError(f"cannot read {shown}: {error.strerror or 'the read failed'}; try again or copy the clip "
                         "to a local disk") from None
    except MemoryError:
        raise InputError(f"there is not enough memory left to open {shown}; try again later or give a smaller "
                         "clip") from None


def _frames_clip(files: FolderFrames | ZipFrames, caps: ClipCaps, frame_rate: float | None, file_name: str | None,
                 cache: FrameCache) -> Clip:
    try:
        reader = FramesReader(files, caps, frame_rate)
    except BaseException:
        files.close()
        raise
    width, height = reader.size
    info = ClipInfo(file_name=file_name, file_bytes=files.total_bytes, sha256=reader.sha256, kind="frames",
                    frame_count=reader.frame_count, width=width, height=height, fps=reader.fps,
                    timestamps=reader.timestamps, rotation=0)
    return Clip(info, reader, cache)


def _video_clip(path: Path, shown: str, caps: ClipCaps, file_name: str | None, cache: FrameCache) -> Clip:
    file_bytes = path.stat().st_size
    if file_bytes == 0:
        raise InputError(f"{shown} is empty (0 bytes); copy or export the clip again")
    check_file_bytes(file_bytes, caps, shown)
    container = open_container(path, shown)
    try:
        if not container.streams.video:
            raise InputError(f"{shown} has no video stream (only sound or other data); give a clip with pictures")
        stream = container.streams.video[0]
        if stream.codec_context is None:
            raise InputError(f"{shown} holds video in a format this app cannot decode; re-encode it (e.g. as H.264 "
                             "MP4)")
        _check_declared(container, stream, caps, shown)
        index = index_packets(container, caps, shown)
        decoder = VideoDecoder(container, index, shown)
        first = decoder.first_frame()
        check_pixels(*decoder.size, caps, shown)
        rate = stream.average_rate or stream.guessed_rate
        count = index.frame_count
        fps = float(rate) if rate else None
        times = index.times or tuple(i / (fps or 1.0) for i in range(count))
        if fps is None and count > 1 and times[-1] > 0:
            fps = (count - 1) / times[-1]
        check_seconds(times[-1] + (1.0 / fps if fps else 0.0), caps, shown)
        width, height = first.size  # upright
        info = ClipInfo(file_name=file_name, file_bytes=file_bytes, sha256=file_sha256(path).hexdigest(),
                        kind="video", frame_count=count, width=width, height=height, fps=fps, timestamps=times,
                        rotation=decoder.rotation)
    except BaseException:
        container.close()
        raise
    clip = Clip(info, decoder, cache)
    cache.put(0, first)
    return clip


def _check_declared(container: av.container.InputContainer, stream: av.video.stream.VideoStream, caps: ClipCaps,
                    shown: str) -> None:
    """The caps on what the container declares (frame count, length, frame size), before any packet is read."""
    if stream.frames:
        check_frames(stream.frames, caps, shown, declared=True)
    if stream.duration and stream.time_base:
        check_seconds(float(stream.duration * stream.time_base), caps, shown, declared=True)
    elif container.duration:
        check_seconds(container.duration / av.time_base, caps, shown, declared=True)
    width, height = stream.codec_context.width, stream.codec_context.height
    if width and height:
        check_pixels(width, height, caps, shown, declared=True)
