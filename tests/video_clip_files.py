"""Small video files written with PyAV for the clip tests: known frames, chosen timestamps, a display matrix, a sound
track. Beside them the tests read the bundled real clip (``sam3_agent/assets/bigbuckbunny.mp4``).

Each frame ``i`` of ``bar_frames`` carries its number twice, so a test knows which frame it got even through a lossy
codec: a white vertical bar at column ``BAR_STEP * i`` on black, and green level ``GREEN_STEP * i``.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from sam3_agent.package_files import ASSETS_DIR

REAL_CLIP = ASSETS_DIR / "bigbuckbunny.mp4"
BAR_STEP, BAR_WIDTH, GREEN_STEP = 4, 4, 8
# Codec and pixel format per container, as a phone, a browser recording and an old camera write them.
CODECS = {".mp4": ("libx264", "yuv420p"), ".mov": ("libx264", "yuv420p"), ".mkv": ("libx264", "yuv420p"),
          ".webm": ("libvpx-vp9", "yuv420p"), ".avi": ("mpeg4", "yuv420p")}


def bar_frames(count: int, width: int = 128, height: int = 48) -> list[np.ndarray]:
    """``count`` RGB uint8 (height, width, 3) frames; frame i has its bar at column BAR_STEP * (i % bar_cycle)."""
    frames = []
    for i in range(count):
        frame = np.zeros((height, width, 3), np.uint8)
        left = (BAR_STEP * i) % (width - BAR_WIDTH)
        frame[:, left:left + BAR_WIDTH] = 255
        frame[..., 1] = np.maximum(frame[..., 1], min(255, GREEN_STEP * i))
        frames.append(frame)
    return frames


def bar_cycle(width: int) -> int:
    """After how many frames the bar of ``bar_frames`` at this width comes back to column 0."""
    return (width - BAR_WIDTH) // BAR_STEP


def bar_of(image) -> int:
    """Which frame of ``bar_frames`` an RGB image (PIL or array) shows, from its bar's column."""
    column = np.asarray(image)[..., 0].astype(np.float32).mean(axis=0)
    center = float(np.flatnonzero(column >= column.max() / 2).mean())  # the bar's middle, through codec blur
    return int(round((center - (BAR_WIDTH - 1) / 2) / BAR_STEP))


def write_video(path: Path, frames: list[np.ndarray], *, rate: int = 25, codec: str | None = None,
                pix_fmt: str | None = None, pts_ms: list[int] | None = None, rotation: float | None = None,
                audio: bool = False, options: dict[str, str] | None = None,
                container_options: dict[str, str] | None = None) -> Path:
    """Encode ``frames`` (RGB uint8 arrays of one size) into ``path``, its container chosen by its suffix.

    ``pts_ms``: each frame's presentation time in milliseconds (a variable frame rate); ``rotation``: the display
    matrix's counter-clockwise angle (PyAV's ``set_display_rotation``; -90 is a phone held upright); ``audio``: add
    a silent AAC (Opus in WebM) track as long as the video.
    """
    default_codec, default_format = CODECS.get(path.suffix, ("libx264", "yuv420p"))
    with av.open(str(path), "w", options=container_options or {}) as out:
        stream = out.add_stream(codec or default_codec, rate=rate, options=options or {})
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = pix_fmt or default_format
        if pts_ms is not None:
            stream.time_base = Fraction(1, 1000)
        if rotation is not None:
            stream.set_display_rotation(rotation)
        sound = None
        if audio:
            sound = out.add_stream("libopus" if path.suffix == ".webm" else "aac", rate=48000)
        for i, array in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(array, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[i], Fraction(1, 1000)
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
        if sound is not None:
            samples = 960 if path.suffix == ".webm" else 1024
            seconds = (pts_ms[-1] / 1000 if pts_ms else len(frames) / rate) + 0.1
            for _ in range(int(seconds * 48000 / samples) + 1):
                chunk = av.AudioFrame.from_ndarray(np.zeros((1, samples), np.float32), format="flt", layout="mono")
                chunk.sample_rate = 48000
                out.mux(sound.encode(chunk))
            out.mux(sound.encode())
    return path


def decoded_in_order(path: Path) -> list[np.ndarray]:
    """Every frame of ``path`` by a plain sequential PyAV decode (no seeking), as RGB arrays: the reference."""
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
