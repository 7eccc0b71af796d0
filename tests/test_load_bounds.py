"""What one upload may cost: mask sets of any allowed size load, and a load is refused before it decodes what the
session could not hold (issue 22, "Memory")."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool

from sam3_agent import rle
from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.trace.io import trace_to_zip_bytes
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.inspect.handlers import InspectHandlers
from sam3_agent.vlm.scripted import ScriptedVLM

# ------------------------------------------------------------------ many masks in one set


def test_areas_of_more_than_255_masks_are_each_masks_pixel_count():
    masks = np.zeros((300, 20, 30), dtype=bool)
    for i in range(300):
        masks[i, : 1 + i % 20, : 1 + i % 30] = True
    counts = rle.encode(masks, 20, 30)
    assert rle.areas(counts, 20, 30).tolist() == [(1 + i % 20) * (1 + i % 30) for i in range(300)]


@pytest.fixture(scope="module")
def three_hundred_masks_zip(tmp_path_factory) -> str:
    """A run whose phrase found 300 masks (a 20 x 15 grid of 15 px squares on coffee.jpg), 100 of them selected."""
    boxes = [((20 * c, 20 * r, 20 * c + 15, 20 * r + 15), 0.9) for r in range(15) for c in range(20)]
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="dot"),
                       tool("select_masks_and_return", final_answer_masks=list(range(1, 101)))])
    trace = Agent(vlm, KnownSegmenter({"dot": boxes}), AgentConfig()).run(photo("coffee.jpg"), "dots")
    assert trace.status == "done", trace.error
    path = tmp_path_factory.mktemp("many") / "trace.zip"
    path.write_bytes(trace_to_zip_bytes(trace))
    return str(path)


def test_a_trace_with_300_masks_in_one_set_loads_and_renders_in_inspect(three_hundred_masks_zip):
    warnings: list[str] = []
    inspect = InspectHandlers(warnings.append)
    state, message, _, _, final_image, final_masks = inspect.load_trace(three_hundred_masks_zip)
    assert warnings == [] and "Done: 100 masks selected after 2 rounds" in message
    assert final_image is not None and final_masks.count("<tr data-mask=") == 100
    round_html, _, timeline = inspect.show_round(state, 1)
    assert "found masks: 300" in round_html and timeline.count('<tr class="timeline-') == 2


def test_a_trace_with_300_masks_in_one_set_opens_in_correct(three_hundred_masks_zip, tmp_path):
    warnings: list[str] = []
    outputs = CorrectHandlers(lambda: None, warnings.append, tmp_path / "app").upload(three_hundred_masks_zip)
    assert warnings == [] and "status-error" not in outputs.status
