"""Scoring per-frame predictions on the ReVOS fixture (``tests/revos_layout.py``): per-expression J, F and J&F
computed by hand, the two protocols' averages, the JSON record, and expressions that cannot be scored.

Frames are 160 x 120 (tolerance ceil(0.008 x 200) = 2 px). Objects: 1 = 50 x 50 on frames 0-2; 2 = 30 x 40 on
frames 1-2 (absent on 0), far from 1; 3 = 40 x 60 on both coffee frames. A rectangle of h x w pixels away from the
border has a boundary ring of 2h + 2w pixels.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import numpy as np
import pytest
from revos_layout import HEIGHT, WIDTH, object_mask, write_revos

from sam3_agent.datasets.formats.revos import read_revos
from sam3_agent.datasets.scoring.video_evaluate import evaluate_videos, protocol_named, score_expression
from sam3_agent.errors import InputError

# astronaut-pan_1 on frames 1 and 2: predicting object 1 alone against objects 1 + 2
MISSED_ONE_J = 2500 / (2500 + 1200)  # 25/37
MISSED_ONE_F = 2 * 200 * 200 / (200 * 340 + 200 * 200)  # P = 1 (200 of 200), R = 200 / (200 + 140): 20/27


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory):
    return {s.id: s for s in read_revos(write_revos(tmp_path_factory.mktemp("revos")))}


def halves(mask: np.ndarray) -> dict[int, np.ndarray]:
    """The mask as two tracked objects (left and right columns), as a tracker gives them."""
    left, right = mask.copy(), mask.copy()
    cols = np.nonzero(mask.any(axis=0))[0]
    left[:, cols[len(cols) // 2]:] = False
    right[:, :cols[len(cols) // 2]] = False
    return {1: left, 2: right}


def predictions() -> dict[str, dict[int, object]]:
    return {
        "astronaut-pan_0": {0: object_mask(1, 0), 1: object_mask(1, 1)},  # frame 2 left out: nothing predicted
        "astronaut-pan_1": {k: object_mask(1, k) for k in range(3)},  # object 2 missed on frames 1 and 2
        "astronaut-pan_2": {0: object_mask(1, 0), 1: None},  # a mask where there is nothing, on frame 0
        "demo/coffee-pan_0": {k: object_mask(3, k) for k in range(2)},
        "demo/coffee-pan_1": {k: halves(object_mask(3, k)) for k in range(2)},  # two objects, their union scored
    }


def test_each_expression_by_hand(samples):
    evaluation = evaluate_videos(list(samples.values()), predictions())
    scores = {s.id: s for s in evaluation.scores}
    assert [(s.j, s.f) for s in scores["astronaut-pan_0"].frames] == [(1.0, 1.0), (1.0, 1.0), (0.0, 0.0)]
    assert (scores["astronaut-pan_0"].j, scores["astronaut-pan_0"].f) == (2 / 3, 2 / 3)
    missed = scores["astronaut-pan_1"].frames
    assert [(s.j, s.f) for s in missed] == [(1.0, 1.0), (MISSED_ONE_J, MISSED_ONE_F), (MISSED_ONE_J, MISSED_ONE_F)]
    assert (missed[1].true_boundary, missed[1].predicted_boundary, missed[1].true_matched) == (340, 200, 200)
    assert (MISSED_ONE_J, MISSED_ONE_F) == (25 / 37, 20 / 27)
    assert scores["astronaut-pan_1"].j == pytest.approx((1 + 2 * 25 / 37) / 3, abs=1e-15)
    assert scores["astronaut-pan_1"].f == pytest.approx((1 + 2 * 20 / 27) / 3, abs=1e-15)
    assert [(s.j, s.f) for s in scores["astronaut-pan_2"].frames] == [(0.0, 0.0), (1.0, 1.0), (1.0, 1.0)]
    assert (scores["demo/coffee-pan_0"].j, scores["demo/coffee-pan_0"].f) == (1.0, 1.0)
    assert (scores["demo/coffee-pan_1"].j, scores["demo/coffee-pan_1"].f) == (1.0, 1.0)
    assert evaluation.unscored == []


def test_revos_visa_averages_referring_and_reasoning_apart_and_overall_is_their_mean(samples):
    evaluation = evaluate_videos(list(samples.values()), predictions(), "revos-visa")
    referring, reasoning = evaluation.subsets["referring"], evaluation.subsets["reasoning"]
    # referring: astronaut-pan_0 (J = F = 2/3) and demo/coffee-pan_0 (1, 1)
    assert referring.expressions == 2
    assert (referring.j, referring.f) == (pytest.approx(5 / 6, abs=1e-15), pytest.approx(5 / 6, abs=1e-15))
    # reasoning: astronaut-pan_1 (J 29/37, F 67/81) and demo/coffee-pan_1 (1, 1)
    assert reasoning.expressions == 2
    assert (reasoning.j, reasoning.f) == (pytest.approx(33 / 37, abs=1e-15), pytest.approx(74 / 81, abs=1e-15))
    assert reasoning.j_and_f == pytest.approx((33 / 37 + 74 / 81) / 2, abs=1e-15)
    # the type-2 expression (astronaut-pan_2) is scored but in neither average
    assert len(evaluation.scores) == 5
    assert evaluation.overall.expressions == 4
    assert evaluation.overall.j_and_f == pytest.approx((referring.j_and_f + reasoning.j_and_f) / 2, abs=1e-15)


def test_revos_visa_overall_is_the_mean_of_the_two_kinds_not_of_the_expressions(samples):
    two_to_one = {k: v for k, v in predictions().items() if k != "demo/coffee-pan_1"}
    evaluation = evaluate_videos(list(samples.values()), two_to_one, "revos-visa")
    # referring (2 expressions) J 5/6, reasoning (1) J 29/37: overall (5/6 + 29/37) / 2, while the mean over the
    # three expressions would be (2/3 + 1 + 29/37) / 3
    assert evaluation.overall.j == pytest.approx((5 / 6 + 29 / 37) / 2, abs=1e-15)
    assert evaluation.overall.f == pytest.approx((5 / 6 + 67 / 81) / 2, abs=1e-15)
    assert evaluation.overall.j != pytest.approx((2 / 3 + 1 + 29 / 37) / 3, abs=1e-6)


def test_all_expressions_averages_every_expression(samples):
    evaluation = evaluate_videos(list(samples.values()), predictions(), "all-expressions")
    assert evaluation.subsets == {}
    js = [2 / 3, 29 / 37, 2 / 3, 1.0, 1.0]
    fs = [2 / 3, 67 / 81, 2 / 3, 1.0, 1.0]
    assert evaluation.overall.expressions == 5
    assert evaluation.overall.j == pytest.approx(sum(js) / 5, abs=1e-15)
    assert evaluation.overall.f == pytest.approx(sum(fs) / 5, abs=1e-15)


def test_the_record_is_json_and_names_its_protocol(samples):
    record = evaluate_videos(list(samples.values()), predictions()).to_json()
    again = json.loads(json.dumps(record))
    assert again["protocol"]["name"] == "revos-visa"
    assert "tools/eval_revos.py" in again["protocol"]["source"]
    assert set(again["subsets"]) == {"referring", "reasoning"}
    assert again["overall"]["expressions"] == 4
    first = again["expressions"][0]
    assert (first["id"], first["frames"], first["J"], first["F"], first["J&F"]) == (
        "astronaut-pan_0", 3, 2 / 3, 2 / 3, 2 / 3)
    assert first["per_frame"] == {"J": [1.0, 1.0, 0.0], "F": [1.0, 1.0, 0.0]}
    assert again["unscored"] == []


def test_expressions_without_a_prediction_are_listed_not_scored(samples):
    partial = {k: v for k, v in predictions().items() if k != "demo/coffee-pan_1"}
    evaluation = evaluate_videos(list(samples.values()), partial)
    assert [(u.id, u.reason) for u in evaluation.unscored] == [("demo/coffee-pan_1", "no prediction (not run yet)")]
    assert evaluation.subsets["reasoning"].expressions == 1


def test_overall_is_undefined_without_both_kinds(samples):
    only_referring = {k: v for k, v in predictions().items() if k.endswith("_0")}
    evaluation = evaluate_videos(list(samples.values()), only_referring)
    assert evaluation.subsets["reasoning"].j is None
    assert (evaluation.overall.j, evaluation.overall.f, evaluation.overall.j_and_f) == (None, None, None)


def test_a_mask_of_another_size_or_a_frame_outside_the_video_is_not_scored(samples):
    wrong = {**predictions(), "astronaut-pan_0": {0: np.zeros((WIDTH, HEIGHT), dtype=bool)},
             "demo/coffee-pan_0": {2: object_mask(3, 1)}}
    reasons = {u.id: u.reason for u in evaluate_videos(list(samples.values()), wrong).unscored}
    assert reasons == {
        "astronaut-pan_0": "the prediction for astronaut-pan_0, frame 0: the mask is 120x160 pixels (width x height) "
                           "but the video's frames are 160x120",
        "demo/coffee-pan_0": "the prediction for demo/coffee-pan_0 names frame(s) 2 but the video has 2 frames, "
                             "indices 0 to 1",
    }


def test_masks_stacked_per_object_are_united(samples):
    flag = samples["astronaut-pan_1"]
    stacked = {k: np.stack([object_mask(1, k), object_mask(2, k) if k else np.zeros((HEIGHT, WIDTH), bool)])
               for k in range(3)}
    assert score_expression(flag, stacked).j == 1.0


class CountingPrediction(Mapping):
    """A lazy prediction that makes each frame's mask when asked and counts the asks."""

    def __init__(self, frames: int) -> None:
        self.frames, self.reads = frames, 0

    def __getitem__(self, frame: int) -> np.ndarray:
        if not 0 <= frame < self.frames:
            raise KeyError(frame)
        self.reads += 1
        return object_mask(1, frame)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.frames))

    def __len__(self) -> int:
        return self.frames


def test_a_lazy_prediction_is_read_once_per_frame(samples):
    lazy = CountingPrediction(3)
    assert score_expression(samples["astronaut-pan_0"], lazy).j == 1.0
    assert lazy.reads == 3


def test_an_unknown_protocol_is_refused():
    with pytest.raises(InputError, match="no video protocol 'davis'; use one of: revos-visa, all-expressions"):
        protocol_named("davis")
    assert protocol_named(None).name == "revos-visa"
