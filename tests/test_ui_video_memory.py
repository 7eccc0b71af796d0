"""A 1080p minute uploaded to the Video tab: what each upload holds in the server's memory, measured.

The clip (1,500 frames of 1920x1080 at 25 fps, H.264) is written here with PyAV: a real camera file would do the same,
but none that long can ship. Each upload keeps only what its scrubber shows (two decoded frames, Pillow's RGB at 4
bytes a pixel) and its decoder; its 1,500 frames (about 9.3 GB decoded) are never held. Stated bound: after the first
upload (which also loads the decoder's code), each further one grows the process by less than 64 MB.
"""

from __future__ import annotations

import gc
import types
from pathlib import Path

import av
import numpy as np
import pytest
from test_ui_video_handlers import make_handlers

from sam3_agent.ui.memory_size import held_bytes

pytestmark = pytest.mark.slow

WIDTH, HEIGHT, FRAMES = 1920, 1080, 1500  # a minute at 25 fps
FRAME_BYTES = WIDTH * HEIGHT * 4  # a decoded frame as Pillow holds RGB
UPLOAD_BOUND = 64 * 1024**2  # the stated bound per upload (see the module docstring)


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.fixture(scope="module")
def minute(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("clip") / "minute1080.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "35"}
        base = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
        base[..., 0] = np.linspace(0, 255, WIDTH)[None, :]
        for index in range(FRAMES):
            frame = base.copy()
            frame[500:580, index % 1800:index % 1800 + 80] = 255  # a block moving across: every frame differs
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode(None))
    return path


def test_each_upload_of_a_1080p_minute_holds_two_frames_and_grows_the_server_by_a_bounded_amount(tmp_path, minute):
    handlers, _ = make_handlers(tmp_path)
    video = handlers.video
    try:
        sizes, keys = [], []
        for tab in range(3):
            page = video.open(str(minute), None, types.SimpleNamespace(session_hash=f"tab-{tab}"))
            assert isinstance(page.key, str)
            for frame in (0, 300, 749, 1200, 1499, 10):  # scrubbed across the minute
                video.scrub(page.key, frame)
            gc.collect()
            sizes.append(_rss())
            keys.append(page.key)
            assert held_bytes(video.sessions.get(page.key)) == 2 * FRAME_BYTES
        growth = [later - earlier for earlier, later in zip(sizes, sizes[1:])]
        print(f"RSS after each upload: {[round(s / 1e6) for s in sizes]} MB; growth per upload after the first: "
              f"{[round(g / 1e6, 1) for g in growth]} MB")
        assert all(g < UPLOAD_BOUND for g in growth), growth
        for key in keys:  # the tabs go
            video.sessions.drop(key)
        assert video.sessions.info() == (0, 0)
    finally:
        handlers.close()
