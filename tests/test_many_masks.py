"""Selecting many masks: no cap below what SAM 3 returns (200 per phrase), ranges such as "1-150", and a run over
150 masks whose answer and COCO export hold all 150."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, rect_mask, tool

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.tools import CallError, check_mask_numbers
from sam3_agent.correct.edits import EditState, items_from_masks
from sam3_agent.correct.export import coco_document
from sam3_agent.vlm.scripted import ScriptedVLM

H = W = 512


def grid_boxes(count: int, columns: int = 15) -> list[tuple[tuple[int, int, int, int], float]]:
    """``count`` disjoint rectangles (cells of 510 / ``columns`` x 50 px less a 2 px gap each side) in rows of
    ``columns`` over astronaut.jpg, scores falling from 0.99 by 0.002."""
    cell = 510 // columns
    return [(((k % columns) * cell + 2, (k // columns) * 50 + 2, (k % columns + 1) * cell - 2, (k // columns) * 50 + 42),
             0.99 - k * 0.002) for k in range(count)]


@pytest.mark.parametrize(
    ("value", "count", "expected"),
    [
        ([3, 1], 3, [3, 1]),
        (["1-5"], 5, [1, 2, 3, 4, 5]),
        ([2, "5-7", 9], 9, [2, 5, 6, 7, 9]),
        ([" 4 - 6 "], 6, [4, 5, 6]),
        (["3-3"], 3, [3]),
        (["1-200"], 200, list(range(1, 201))),
        (list(range(1, 151)), 150, list(range(1, 151))),
    ],
)
def test_mask_numbers_and_ranges_expand_in_order(value, count, expected):
    assert check_mask_numbers(value, count) == expected


@pytest.mark.parametrize(
    ("value", "count", "key", "fields"),
    [
        (["5-3"], 9, "mask_number_not_integer", {"value": '"5-3"', "parameter": "final_answer_masks"}),
        (["1-1000000"], 150, "mask_number_out_of_range", {"value": 1000000, "count": 150}),
        (["0-3"], 150, "mask_number_out_of_range", {"value": 0, "count": 150}),
        (["1-3", "3-4"], 9, "mask_number_repeated", {"value": 3}),
        (["1-3", 2], 9, "mask_number_repeated", {"value": 2}),
        (["1..3"], 9, "mask_number_not_integer", {"value": '"1..3"', "parameter": "final_answer_masks"}),
        (["all"], 9, "mask_number_not_integer", {"value": '"all"', "parameter": "final_answer_masks"}),
    ],
)
def test_bad_ranges_name_the_entry_at_fault(value, count, key, fields):
    with pytest.raises(CallError) as caught:
        check_mask_numbers(value, count)
    assert (caught.value.key, caught.value.fields) == (key, fields)


def _run(selection: object, count: int = 150, columns: int = 15):
    segmenter = KnownSegmenter({"bird": grid_boxes(count, columns)})
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="bird"),
                       tool("select_masks_and_return", final_answer_masks=selection)])
    return Agent(vlm, segmenter, AgentConfig(), verifier=ScriptedVLM([])).run(photo("astronaut.jpg"), "all birds")


@pytest.mark.parametrize("selection", [list(range(1, 151)), ["1-150"], ["1-75", "76-150"]])
def test_a_run_over_150_masks_selects_all_150_and_exports_150_annotations(selection):
    trace = _run(selection)
    assert trace.status == "done" and trace.rounds[1].error is None
    assert len(trace.final_masks) == 150
    # the answer keeps SAM 3's order (sorted by score): mask k is the k-th rectangle of the grid
    expected = np.stack([rect_mask(H, W, *box) for box, _ in grid_boxes(150)])
    assert np.array_equal(trace.final_masks.masks, expected)
    items = items_from_masks(trace.final_masks, EditState.from_trace(trace).label)
    document = coco_document(items, W, H)
    assert [a["id"] for a in document["annotations"]] == list(range(1, 151))
    assert document["annotations"][149]["bbox"] == [478.0, 452.0, 30.0, 40.0]


def test_200_masks_all_selectable_by_one_range():
    trace = _run(["1-200"], count=200, columns=20)
    assert trace.status == "done" and trace.rounds[0].result.summary == "200 mask(s) for 'bird'"
    assert len(trace.final_masks) == 200
