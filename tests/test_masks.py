"""Mask post-processing and COCO RLE: exact expected values on hand-made and photo-derived masks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as coco_mask

from sam3_agent import rle
from sam3_agent.imaging.postprocess import (
    IOM_THRESHOLD,
    SCORE_THRESHOLD,
    boxes_from_masks,
    overlapping_box_pairs,
    postprocess_masks,
)
from sam3_agent.mask_set import Masks, to_coco_results
from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.rle import decode_rle, encode_rle

ASSETS = ASSETS_DIR  # the photos the package ships


@pytest.fixture(scope="module")
def coffee_masks() -> np.ndarray:
    """Four real-looking masks (400 x 600) from thresholded channels of coffee.jpg, plus an empty one."""
    rgb = np.asarray(Image.open(ASSETS / "coffee.jpg").convert("RGB"))
    return np.stack(
        [
            rgb[..., 0] > 128,
            rgb[..., 1] > 100,
            (rgb[..., 2] < 60) & (rgb[..., 0] > 90),
            rgb.sum(axis=2) > 600,
            np.zeros(rgb.shape[:2], dtype=bool),
        ]
    )


def make_masks(masks: list[np.ndarray], scores: list[float], phrase: str = "thing") -> Masks:
    arr = np.stack(masks)
    return Masks(arr, np.asarray(scores, dtype=np.float32), boxes_from_masks(arr), phrase)


def rect(h: int, w: int, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
    m = np.zeros((h, w), dtype=bool)
    m[y0:y1, x0:x1] = True
    return m


# ---------------------------------------------------------------- RLE


def test_rle_round_trip_is_exact_on_photo_masks(coffee_masks):
    rles = encode_rle(coffee_masks)
    decoded = decode_rle(rles)
    assert decoded.dtype == bool
    assert decoded.shape == coffee_masks.shape
    assert np.array_equal(decoded, coffee_masks)


def test_encoded_rle_has_str_counts_and_height_width_size(coffee_masks):
    rles = encode_rle(coffee_masks)
    assert len(rles) == 5
    for one in rles:
        assert set(one) == {"size", "counts"}
        assert one["size"] == [400, 600]
        assert isinstance(one["counts"], str)
    json.dumps(rles)  # JSON-serialisable as is
    # The empty mask is one run of 240000 zeros.
    assert coco_mask.area({"size": [400, 600], "counts": rles[4]["counts"].encode()}) == 0


def test_encode_rle_matches_pycocotools_counts(coffee_masks):
    ours = encode_rle(coffee_masks[:1])[0]
    theirs = coco_mask.encode(np.asfortranarray(coffee_masks[0].astype(np.uint8)))
    assert ours["counts"] == theirs["counts"].decode("ascii")


def test_encode_rle_of_zero_masks_is_empty_list():
    assert encode_rle(np.zeros((0, 5, 7), dtype=bool)) == []


def test_decode_rle_accepts_bytes_and_uncompressed_counts():
    mask = rect(4, 5, 1, 3, 2, 4)
    rle = encode_rle(mask[None])[0]
    as_bytes = {"size": rle["size"], "counts": rle["counts"].encode()}
    # Column-major runs: 9 zeros, 2 ones, 2 zeros, 2 ones, 5 zeros.
    uncompressed = {"size": [4, 5], "counts": [9, 2, 2, 2, 5]}
    assert np.array_equal(decode_rle([as_bytes])[0], mask)
    assert np.array_equal(decode_rle([uncompressed])[0], mask)


@pytest.mark.parametrize(
    "rle, message",
    [
        ({"size": [5, 6]}, "'size' and 'counts'"),
        ({"size": [5], "counts": "n0"}, "'size' must be"),
        ({"size": [5, -6], "counts": "n0"}, "'size' must be"),
        ({"size": [5, 6], "counts": "0"}, "cover 0 pixels, expected 5x6 = 30"),  # too short: pycocotools returns garbage
        ({"size": [5, 6], "counts": "zzzzzz"}, "outside the COCO RLE alphabet"),
        ({"size": [5, 6], "counts": "!!"}, "outside the COCO RLE alphabet"),
        ({"size": [5, 6], "counts": "P"}, "ends in the middle"),
        ({"size": [5, 6], "counts": "o0"}, "cover 31 pixels"),
        ({"size": [5, 6], "counts": [10, 25]}, "cover 35 pixels"),
        ({"size": [5, 6], "counts": [10, -2, 22]}, "non-negative"),
        ({"size": [5, 6], "counts": 30}, "must be str, bytes"),
        ("n0", "expected a dict"),
    ],
)
def test_decode_rle_rejects_malformed_input(rle, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        decode_rle([rle])


def test_decode_rle_rejects_mixed_sizes():
    a, b = encode_rle(np.zeros((1, 5, 6), bool))[0], encode_rle(np.zeros((1, 6, 5), bool))[0]
    with pytest.raises(ValueError, match=r"size \[6, 5\] differs from the expected \[5, 6\]"):
        decode_rle([a, b])


def test_decode_rle_of_empty_list_needs_height_and_width():
    with pytest.raises(ValueError, match="without height and width"):
        decode_rle([])
    assert decode_rle([], height=3, width=4).shape == (0, 3, 4)


def test_coco_results_fields_and_bbox_equal_pycocotools(coffee_masks):
    scores = np.asarray([0.9, 0.8, 0.7, 0.6, 0.5], dtype=np.float32)
    masks = Masks(coffee_masks, scores, boxes_from_masks(coffee_masks), "cup")
    results = to_coco_results(masks, image_id=7, category_id=3)
    assert len(results) == 5
    for k, res in enumerate(results):
        assert set(res) == {"image_id", "category_id", "segmentation", "bbox", "score", "area"}
        assert res["image_id"] == 7 and res["category_id"] == 3
        assert isinstance(res["segmentation"]["counts"], str)
        rle = {"size": res["segmentation"]["size"], "counts": res["segmentation"]["counts"].encode()}
        assert res["bbox"] == [float(v) for v in coco_mask.toBbox(rle)]
        assert all(isinstance(v, float) for v in res["bbox"])
        assert res["area"] == int(coffee_masks[k].sum())
        assert isinstance(res["area"], int)
        assert res["score"] == pytest.approx(float(scores[k]))
    # bbox is xywh of the xyxy box (x2/y2 exclusive).
    x1, y1, x2, y2 = boxes_from_masks(coffee_masks)[2]
    assert results[2]["bbox"] == [x1, y1, x2 - x1, y2 - y1]
    assert results[4]["bbox"] == [0.0, 0.0, 0.0, 0.0]
    json.dumps(results)


def test_coco_results_of_no_masks_is_empty():
    assert to_coco_results(Masks.empty(10, 12)) == []


# ---------------------------------------------------------------- boxes


def test_boxes_from_masks_are_xyxy_with_exclusive_end_and_zero_for_empty():
    masks = np.zeros((3, 10, 20), dtype=bool)
    masks[0, 2:5, 3:9] = True
    masks[1, 7, 19] = True
    boxes = boxes_from_masks(masks)
    assert boxes.dtype == np.float32
    assert boxes.tolist() == [[3, 2, 9, 5], [19, 7, 20, 8], [0, 0, 0, 0]]


def test_rle_intersections_count_shared_pixels(coffee_masks):
    counts = rle.encode(coffee_masks, 400, 600)
    areas = rle.areas(counts, 400, 600)
    for i, a in enumerate(coffee_masks):
        expected = [int((a & b).sum()) for b in coffee_masks]
        assert rle.intersections(counts[i], counts, 400, 600, int(areas[i])).tolist() == expected


def test_rle_areas_and_tight_boxes_equal_the_pixel_counts_and_boxes_from_masks(coffee_masks):
    counts = rle.encode(coffee_masks, 400, 600)
    assert rle.areas(counts, 400, 600).tolist() == coffee_masks.reshape(5, -1).sum(axis=1).tolist()
    assert np.array_equal(rle.tight_boxes(counts, 400, 600), boxes_from_masks(coffee_masks))


def test_overlapping_box_pairs_keeps_only_boxes_sharing_a_pixel():
    boxes = np.array([[0, 0, 10, 10], [10, 0, 20, 10], [9, 9, 12, 12], [0, 0, 0, 0]], dtype=np.float32)
    assert overlapping_box_pairs(boxes, 0, np.array([1, 2, 3])).tolist() == [2]  # touching edges share no pixel


# ---------------------------------------------------------------- postprocess


def test_default_thresholds_are_those_of_the_reference_agent():
    assert SCORE_THRESHOLD == 0.5
    assert IOM_THRESHOLD == 0.3


def test_masks_below_score_threshold_are_dropped_and_equal_score_kept():
    h, w = 20, 40
    masks = make_masks(
        [rect(h, w, 0, 5, 0, 5), rect(h, w, 0, 5, 10, 15), rect(h, w, 0, 5, 20, 25)], [0.49, 0.5, 0.51]
    )
    out = postprocess_masks(masks)
    assert out.scores.tolist() == pytest.approx([0.51, 0.5])
    assert np.array_equal(out.masks, masks.masks[[2, 1]])


def test_empty_masks_are_dropped_whatever_their_score():
    h, w = 20, 40
    masks = make_masks([np.zeros((h, w), bool), rect(h, w, 0, 5, 0, 5)], [0.99, 0.6])
    out = postprocess_masks(masks)
    assert len(out) == 1
    assert out.scores.tolist() == pytest.approx([0.6])


def test_masks_are_sorted_by_score_with_ties_in_input_order():
    h, w = 20, 40
    parts = [rect(h, w, 0, 5, 5 * i, 5 * i + 4) for i in range(4)]
    masks = make_masks(parts, [0.6, 0.9, 0.6, 0.7])
    out = postprocess_masks(masks)
    expected_order = [1, 3, 0, 2]
    assert np.array_equal(out.masks, masks.masks[expected_order])
    assert np.array_equal(out.boxes, masks.boxes[expected_order])
    assert out.scores.tolist() == pytest.approx([0.9, 0.7, 0.6, 0.6])
    assert out.phrase == "thing"
    assert out.boxes.dtype == np.float32 and out.scores.dtype == np.float32


def test_overlap_of_exactly_iom_threshold_is_kept():
    h, w = 20, 40
    a = rect(h, w, 0, 10, 0, 10)  # area 100
    b = rect(h, w, 0, 10, 7, 17)  # area 100, 30 shared pixels: IoM = 0.30
    out = postprocess_masks(make_masks([a, b], [0.9, 0.8]))
    assert len(out) == 2


def test_overlap_just_above_iom_threshold_drops_the_lower_score():
    h, w = 20, 40
    a = rect(h, w, 0, 10, 0, 10)  # area 100
    b = rect(h, w, 0, 10, 7, 17)
    b[9, 16] = False
    b[0, 6] = True  # still area 100, now 31 shared pixels: IoM = 0.31
    masks = make_masks([a, b], [0.8, 0.9])
    out = postprocess_masks(masks)
    assert len(out) == 1
    assert np.array_equal(out.masks[0], b)  # the higher score wins


def test_small_mask_inside_big_one_is_dropped_although_iou_is_tiny():
    h, w = 120, 120
    big = rect(h, w, 0, 100, 0, 100)  # 10000 px
    small = rect(h, w, 10, 15, 10, 15)  # 25 px, IoU = 0.0025, IoM = 1
    out = postprocess_masks(make_masks([big, small], [0.9, 0.8]))
    assert len(out) == 1 and np.array_equal(out.masks[0], big)
    # With the small one scoring higher, the big one goes (IoM uses the smaller area).
    out = postprocess_masks(make_masks([big, small], [0.8, 0.9]))
    assert len(out) == 1 and np.array_equal(out.masks[0], small)


def test_overlap_is_checked_only_against_kept_masks():
    h, w = 20, 60
    a = rect(h, w, 0, 10, 0, 10)
    b = rect(h, w, 0, 10, 5, 15)  # overlaps a by 50%: dropped
    c = rect(h, w, 0, 10, 12, 22)  # overlaps b by 30% only, a not at all: kept
    out = postprocess_masks(make_masks([a, b, c], [0.9, 0.8, 0.7]))
    assert np.array_equal(out.masks, np.stack([a, c]))


def test_custom_thresholds_are_honoured():
    h, w = 20, 40
    a = rect(h, w, 0, 10, 0, 10)
    b = rect(h, w, 0, 10, 7, 17)  # IoM 0.3
    out = postprocess_masks(make_masks([a, b], [0.9, 0.2]), score_threshold=0.1, iom_threshold=0.29)
    assert len(out) == 1


def test_postprocess_of_no_masks_returns_no_masks():
    out = postprocess_masks(Masks.empty(8, 9, "cat"))
    assert len(out) == 0 and out.masks.shape == (0, 8, 9) and out.phrase == "cat"


def test_masks_with_mismatched_scores_are_refused():
    with pytest.raises(ValueError, match="same N masks"):
        Masks(np.zeros((2, 4, 4), bool), np.zeros(3, np.float32), np.zeros((2, 4), np.float32))


def test_overlap_filter_compares_only_masks_whose_boxes_overlap(monkeypatch):
    h, w = 60, 90
    # 0 and 1 overlap (1 is dropped), 2 lies apart: 1 pair compared, and never against 2.
    masks = make_masks([rect(h, w, 0, 20, 0, 20), rect(h, w, 5, 25, 5, 25), rect(h, w, 40, 60, 60, 90)],
                       [0.9, 0.8, 0.7])
    compared: list[int] = []
    real = rle.intersections
    monkeypatch.setattr(rle, "intersections", lambda one, others, *a: compared.append(len(others)) or real(one, others, *a))
    out = postprocess_masks(masks)
    assert compared == [1]
    assert np.array_equal(out.masks, masks.masks[[0, 2]])


def test_postprocess_encodes_nothing_and_shares_the_rle(monkeypatch, coffee_masks):
    masks = Masks(coffee_masks, np.asarray([0.7, 0.95, 0.6, 0.8, 0.9], np.float32), boxes_from_masks(coffee_masks))
    monkeypatch.setattr(rle, "encode", lambda *a: pytest.fail("a mask set was encoded again"))
    out = postprocess_masks(masks)
    assert all(any(c is k for k in masks.counts) for c in out.counts)


def test_postprocess_on_photo_masks_matches_a_direct_greedy_reference(coffee_masks):
    scores = np.asarray([0.7, 0.95, 0.6, 0.8, 0.9], dtype=np.float32)
    out = postprocess_masks(Masks(coffee_masks, scores, boxes_from_masks(coffee_masks)))
    # Reference: the rule written out with per-pair numpy sums.
    kept: list[int] = []
    for i in sorted(range(5), key=lambda k: -scores[k]):
        area = coffee_masks[i].sum()
        if area == 0 or scores[i] < 0.5:
            continue
        if all((coffee_masks[i] & coffee_masks[j]).sum() / min(area, coffee_masks[j].sum()) <= 0.3 for j in kept):
            kept.append(i)
    assert np.array_equal(out.masks, coffee_masks[kept])
