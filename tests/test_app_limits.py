"""Limits that agree: a run at the app's photo limit writes a trace .zip that the app's own loaders read back."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool, verdict
from PIL import Image

from sam3_agent.presets import Backends
from sam3_agent.trace.safe_read import MAX_ZIP_BYTES
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.run.slot import RunSlot
from sam3_agent.ui.settings import APP_MAX_IMAGE_PIXELS, AppSettings
from sam3_agent.vlm.scripted import ScriptedVLM

pytestmark = pytest.mark.slow  # renders and compresses a dozen 8 MP images


def test_a_run_at_the_apps_photo_limit_writes_a_trace_the_app_reads_back(tmp_path):
    width = int((APP_MAX_IMAGE_PIXELS * 1.5) ** 0.5)  # 3:2, like a camera photo
    height = APP_MAX_IMAGE_PIXELS // width
    big = np.asarray(photo("coffee.jpg").resize((width, height), Image.Resampling.BICUBIC)).astype(np.int16)
    grain = np.random.default_rng(0).normal(0, 6, big.shape).astype(np.int16)  # sensor noise: PNGs as big as a photo's
    path = tmp_path / "photo.png"
    Image.fromarray(np.clip(big + grain, 0, 255).astype(np.uint8)).save(path, compress_level=1)

    def box(x0, y0, x1, y1):
        return int(x0 * width), int(y0 * height), int(x1 * width), int(y1 * height)

    detections = {"cup": [(box(.1, .1, .4, .5), .9), (box(.5, .2, .8, .6), .8)],
                  "mug": [(box(.15, .15, .45, .55), .9), (box(.55, .25, .85, .65), .8), (box(.25, .55, .55, .95), .7),
                          (box(.6, .6, .9, .9), .6)]}
    script = {"main": [tool("segment_phrase", text_prompt="cup"), tool("segment_phrase", text_prompt="mug"),
                       tool("examine_each_mask"), tool("select_masks_and_return", final_answer_masks=[1, 2])],
              "verify": [verdict("Accept")] * 4}
    idle = ScriptedVLM([])
    handlers = Handlers(AgentFactory(AppSettings(max_rounds=10), Backends(idle, idle, KnownSegmenter(detections), {}),
                                     script), warn=lambda message: None, root=tmp_path / "app")
    slot = RunSlot()
    last = list(handlers.run(str(path), "the cups", 10, 0.5, slot))[-1]
    assert "Done: 2 masks selected after 4 rounds." in last.status
    trace_zip = handlers.trace_download(slot)[1]  # zipped after the answer is shown
    assert 0 < os.path.getsize(trace_zip) < MAX_ZIP_BYTES
    state, message, *_ = handlers.inspect.load_trace(trace_zip)
    assert state is not None and "Done: 2 masks selected after 4 rounds." in message
    assert handlers.inspect.loaded(state).trace.image.size == (width, height)
