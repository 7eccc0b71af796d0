"""Shared test fixtures: real photos, a segmenter double with known masks, scripted responses."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sam3_agent.errors import BackendError
from sam3_agent.mask_set import Masks
from sam3_agent.package_files import ASSETS_DIR

ASSETS = ASSETS_DIR  # the photos the package ships

# Tests never write into the user's cache or the repository: the tiny models are built in a temporary folder (kept
# between runs, so they are built once) unless SAM3_AGENT_CACHE names another place; apps started by the tests
# inherit it.
os.environ.setdefault("SAM3_AGENT_CACHE", str(Path(tempfile.gettempdir()) / "sam3_agent_test_cache"))


def photo(name: str = "astronaut.jpg") -> Image.Image:
    """A real photo from sam3_agent/assets/, RGB."""
    return Image.open(ASSETS / name).convert("RGB")


def resampled_alike(drawn: Image.Image, stored: Image.Image) -> tuple[bool, float, int]:
    """Whether ``drawn`` differs from ``stored`` only as two bicubic resamplings of one crop do (renderer 5's Pillow
    vs OpenCV's before): the same size, within one level on average, 24 at most (at a sharp edge the two kernels
    weigh neighbours differently). Also the mean and largest difference, for the failure message."""
    if drawn.size != stored.size:
        return False, float("inf"), 255
    difference = np.abs(np.asarray(drawn, dtype=np.int16) - np.asarray(stored, dtype=np.int16))
    mean, largest = float(difference.mean()), int(difference.max())
    return mean < 1.0 and largest <= 24, mean, largest


def rect_mask(height: int, width: int, x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
    """bool (H, W) with the pixels in [y0, y1) x [x0, x1) set."""
    mask = np.zeros((height, width), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


class KnownSegmenter:
    """A Segmenter whose detections per phrase are given: lets loop tests assert exact masks.

    ``detections[phrase]`` is a list of (xyxy box in pixels, score); each becomes a rectangle mask.
    Records every phrase it was asked for in ``calls``. A phrase in ``failing`` raises BackendError.
    """

    name = "known-segmenter"

    def __init__(self, detections: dict[str, list[tuple[tuple[int, int, int, int], float]]], failing=()) -> None:
        self.detections = detections
        self.failing = set(failing)
        self.calls: list[str] = []

    def segment(self, image: Image.Image, phrase: str, score_threshold: float = 0.5) -> Masks:
        self.calls.append(phrase)
        if phrase in self.failing:
            raise BackendError("SAM 3 model 'known' ran out of memory: use a smaller image")
        width, height = image.size
        items = [(box, s) for box, s in self.detections.get(phrase, []) if s >= score_threshold]
        if not items:
            return Masks.empty(height, width, phrase)
        masks = np.stack([rect_mask(height, width, *box) for box, _ in items])
        scores = np.array([s for _, s in items], dtype=np.float32)
        boxes = np.array([box for box, _ in items], dtype=np.float32)
        return Masks(masks, scores, boxes, phrase)


def tool(name: str, thinking: str = "reasoning", **parameters: object) -> str:
    """A well-formed response calling ``name`` with ``parameters``."""
    return f"<think>{thinking}</think>\n<tool>{json.dumps({'name': name, 'parameters': parameters})}</tool>"


def verdict(word: str) -> str:
    return f"<think>checking the mask</think>\n<verdict>{word}</verdict>"


@pytest.fixture
def astronaut() -> Image.Image:
    return photo("astronaut.jpg")


@pytest.fixture
def segmenter() -> KnownSegmenter:
    # astronaut.jpg is 512x512. "person": three disjoint boxes (scores unsorted on purpose) plus one
    # below the 0.5 threshold; "child": two boxes; "helmet": nothing.
    return KnownSegmenter(
        {
            "person": [((10, 10, 110, 210), 0.7), ((200, 50, 300, 250), 0.9), ((350, 300, 450, 500), 0.6),
                       ((0, 400, 50, 450), 0.3)],
            "child": [((20, 20, 120, 220), 0.8), ((300, 300, 400, 400), 0.55)],
            "helmet": [],
        }
    )


def people_run():
    """A finished run on astronaut.jpg: segment 'person' (3 rectangle masks, scores .7 .9 .6) -> examine
    rejects mask 3 -> select masks 1 and 2 (the .9 and .7 rectangles). Returns its ``Trace``."""
    from sam3_agent.agent.config import AgentConfig
    from sam3_agent.agent.loop import Agent
    from sam3_agent.vlm.scripted import ScriptedVLM

    segmenter = KnownSegmenter({"person": [((10, 10, 110, 210), 0.7), ((200, 50, 300, 250), 0.9),
                                           ((350, 300, 450, 500), 0.6)]})
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="person"), tool("examine_each_mask"),
                       tool("select_masks_and_return", final_answer_masks=[1, 2])])
    verifier = ScriptedVLM([verdict("Accept"), verdict("Accept"), verdict("Reject")])
    return Agent(vlm, segmenter, AgentConfig(), verifier=verifier).run(photo("astronaut.jpg"), "the people")


BROWSER_TESTS = Path(__file__).resolve().parent / "browser"


def pytest_collection_modifyitems(config, items):
    """Every test under tests/browser drives the app in headless Chromium: mark it ``browser``, so that
    ``-m "not browser and not slow"`` gives a fast run."""
    for item in items:
        if BROWSER_TESTS in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.browser)
