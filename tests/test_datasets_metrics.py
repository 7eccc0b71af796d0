"""Metrics: hand-computed values on small masks, and agreement with pycocotools' IoU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycocotools import mask as coco_mask

from sam3_agent.datasets.scoring.metrics import SampleScore, breakdowns, intersection_union, iou, summarize


def grid(rows: list[str]) -> np.ndarray:
    """bool (H, W) from rows of '#' (True) and '.' (False)."""
    return np.array([[c == "#" for c in row] for row in rows], dtype=bool)


def score(sample_id: str, intersection: int, union: int, target: int, predicted: int, **kw) -> SampleScore:
    return SampleScore(sample_id, "q", intersection, union, target, predicted, kw.pop("status", "done"), **kw)


def test_intersection_and_union_count_pixels_by_hand():
    prediction = grid(["##..",
                       "##..",
                       "....",
                       "...."])
    target = grid([".##.",
                   ".##.",
                   ".##.",
                   "...."])
    # both: (0,1), (1,1) -> 2; either: 4 predicted + 6 target - 2 = 8
    assert intersection_union(prediction, target) == (2, 8)


def test_ignored_pixels_leave_both_intersection_and_union():
    prediction = grid(["##..",
                       "##..",
                       "....",
                       "...."])
    target = grid([".##.",
                   ".##.",
                   ".##.",
                   "...."])
    ignore = grid([".#..",
                   "....",
                   "..#.",
                   "...."])
    # (0,1) is in both and ignored -> intersection 1; union loses (0,1) and (2,2) -> 6
    assert intersection_union(prediction, target, ignore) == (1, 6)


def test_iou_is_one_when_nothing_to_find_and_nothing_found():
    assert iou(0, 0) == 1.0
    assert iou(0, 5) == 0.0
    assert iou(3, 4) == 0.75


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="one shape"):
        intersection_union(np.zeros((2, 2), bool), np.zeros((2, 3), bool))


def test_summary_by_hand():
    scores = [
        score("a", 3, 4, 4, 3),      # IoU 0.75
        score("b", 1, 4, 2, 3),      # IoU 0.25
        score("c", 9, 10, 10, 9),    # IoU 0.9
        score("d", 0, 0, 0, 0),      # no target, nothing predicted: IoU 1, right
        score("e", 0, 7, 0, 7),      # no target, 7 px predicted: IoU 0, wrong
        score("f", 0, 5, 5, 0),      # target, answered with nothing: IoU 0
    ]
    metrics = summarize(scores)
    assert metrics.samples == 6
    assert metrics.giou == pytest.approx((0.75 + 0.25 + 0.9 + 1 + 0 + 0) / 6)
    assert metrics.ciou == pytest.approx((3 + 1 + 9 + 0 + 0 + 0) / (4 + 4 + 10 + 0 + 7 + 5))
    # over the 4 samples with a target (a, b, c, f): IoUs 0.75, 0.25, 0.9, 0
    assert metrics.precision == pytest.approx({0.5: 2 / 4, 0.6: 2 / 4, 0.7: 2 / 4, 0.8: 1 / 4, 0.9: 1 / 4})
    assert (metrics.target_samples, metrics.empty_on_target) == (4, 1)
    assert (metrics.no_target_samples, metrics.no_target_accuracy) == (2, 0.5)


def test_precision_threshold_counts_iou_equal_to_it():
    metrics = summarize([score("a", 1, 2, 2, 1)])  # IoU exactly 0.5
    assert metrics.precision[0.5] == 1.0
    assert metrics.precision[0.6] == 0.0


def test_undefined_quantities_are_none():
    metrics = summarize([score("d", 0, 0, 0, 0)])
    assert metrics.ciou is None
    assert all(p is None for p in metrics.precision.values())
    empty = summarize([])
    assert (empty.samples, empty.giou, empty.no_target_accuracy) == (0, None, None)


def test_breakdowns_group_by_status_rounds_mistakes_and_attributes():
    scores = [
        score("a", 3, 4, 4, 3, rounds=3, mistakes={"no_tool_call": 1}, attributes={"query_type": "short"}),
        score("b", 1, 4, 2, 3, rounds=5, mistakes={"no_tool_call": 2, "bad_arguments": 1},
              attributes={"query_type": "long"}),
        score("c", 0, 5, 5, 0, status="failed", rounds=3, attributes={"query_type": "long"}),
    ]
    groups = breakdowns(scores)
    assert {k: m.samples for k, m in groups["status"].items()} == {"done": 2, "failed": 1}
    assert list(groups["rounds"]) == ["3", "5"]
    assert groups["rounds"]["3"].giou == pytest.approx((0.75 + 0) / 2)
    assert {k: m.samples for k, m in groups["mistake"].items()} == {"no_tool_call": 2, "bad_arguments": 1, "none": 1}
    assert groups["query_type"]["long"].ciou == pytest.approx(1 / (4 + 5))
    assert {k: m.samples for k, m in groups["target"].items()} == {"target": 3}


masks_2d = st.integers(1, 12).flatmap(lambda h: st.integers(1, 12).flatmap(
    lambda w: st.tuples(*[st.lists(st.lists(st.booleans(), min_size=w, max_size=w), min_size=h, max_size=h)] * 2)))


@settings(max_examples=200, deadline=None)
@given(masks_2d)
def test_iou_agrees_with_pycocotools(pair):
    prediction, target = (np.array(m, dtype=bool) for m in pair)
    intersection, union = intersection_union(prediction, target)

    def rle(mask: np.ndarray) -> dict:
        return coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))

    expected = coco_mask.iou([rle(prediction)], [rle(target)], [0])
    if union == 0:
        assert iou(intersection, union) == 1.0  # pycocotools gives 0 here; LISA's rule counts it as right
    else:
        assert iou(intersection, union) == pytest.approx(float(np.asarray(expected)[0, 0]), abs=1e-12)
