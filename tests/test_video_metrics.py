"""DAVIS's J and F: boundary maps, tolerances and F-measures computed by hand, the empty cases, frame-sized masks,
and a real photo's mask against a brute-force distance definition of the boundary match."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFilter

from sam3_agent.datasets.scoring.video_metrics import (
    EMPTY_FRAME,
    FrameScore,
    boundary_map,
    boundary_tolerance,
    frame_score,
    mean_j_f,
)
from sam3_agent.package_files import ASSETS_DIR


def grid(rows: list[str]) -> np.ndarray:
    """bool (H, W) from rows of '#' (True) and '.' (False)."""
    return np.array([[c == "#" for c in row] for row in rows], dtype=bool)


def box(height: int, width: int, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    mask = np.zeros((height, width), dtype=bool)
    mask[rows[0]:rows[1], cols[0]:cols[1]] = True
    return mask


def counts(score: FrameScore) -> tuple[int, ...]:
    return (score.intersection, score.union, score.predicted_boundary, score.true_boundary,
            score.predicted_matched, score.true_matched)


# ---------------------------------------------------------------- boundary map


def test_boundary_of_a_square_lies_half_a_pixel_towards_the_origin():
    square = grid([".....",
                   ".###.",
                   ".###.",
                   ".###.",
                   "....."])
    # a pixel differing from its right, lower or lower-right neighbour: the ring of rows 0-3, cols 0-3
    assert np.array_equal(boundary_map(square), grid(["####.",
                                                      "#..#.",
                                                      "#..#.",
                                                      "####.",
                                                      "....."]))


def test_the_image_border_is_no_boundary():
    touching_right = grid([".....",
                           "..###",
                           "..###",
                           "..###",
                           "....."])
    # column 4 compares only with the pixel below it, so the square's right side on the border is not drawn
    assert np.array_equal(boundary_map(touching_right), grid([".####",
                                                              ".#...",
                                                              ".#...",
                                                              ".####",
                                                              "....."]))
    assert not boundary_map(np.ones((4, 6), dtype=bool)).any()  # a frame-filling mask has no boundary


def seg2bmap_by_rule(mask: np.ndarray) -> np.ndarray:
    """DAVIS's rule written pixel by pixel: differs from E, S or SE; the last row compares with E only, the last
    column with S only, the last pixel never."""
    h, w = mask.shape
    out = np.zeros((h, w), dtype=bool)
    for y in range(h):
        for x in range(w):
            if y == h - 1 and x == w - 1:
                continue
            if y == h - 1:
                out[y, x] = mask[y, x] != mask[y, x + 1]
            elif x == w - 1:
                out[y, x] = mask[y, x] != mask[y + 1, x]
            else:
                out[y, x] = (mask[y, x] != mask[y, x + 1]) | (mask[y, x] != mask[y + 1, x]) \
                    | (mask[y, x] != mask[y + 1, x + 1])
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.data())
def test_boundary_map_follows_davis_rule_on_any_mask(height, width, data):
    bits = data.draw(st.lists(st.booleans(), min_size=height * width, max_size=height * width))
    mask = np.array(bits, dtype=bool).reshape(height, width)
    assert np.array_equal(boundary_map(mask), seg2bmap_by_rule(mask))


# ---------------------------------------------------------------- tolerance


def test_tolerance_is_the_ceiling_of_0_008_of_the_diagonal():
    assert boundary_tolerance(5, 5) == 1  # 0.008 x 7.07 = 0.057
    assert boundary_tolerance(8, 8) == 1
    assert boundary_tolerance(120, 160) == 2  # 0.008 x 200 = 1.6
    assert boundary_tolerance(480, 854) == 8  # DAVIS 480p: 0.008 x 979.6 = 7.84
    assert boundary_tolerance(720, 1280) == 12  # 0.008 x 1468.6 = 11.75
    assert boundary_tolerance(1080, 1920) == 18  # 0.008 x 2202.9 = 17.6
    assert boundary_tolerance(480, 854, fraction=3) == 3  # 1 or more: pixels, as DAVIS takes it


# ---------------------------------------------------------------- F by hand


def test_square_shifted_by_one_pixel_by_hand():
    truth = box(5, 5, (1, 4), (1, 4))
    prediction = box(5, 5, (1, 4), (2, 5))  # touches the right border
    score = frame_score(prediction, truth)
    # overlap 3 x 2 = 6 of 12; the boundaries (10 and 12 pixels, drawn above) are within 1 px of each other
    assert counts(score) == (6, 12, 10, 12, 10, 12)
    assert (score.j, score.f, score.j_and_f) == (0.5, 1.0, 0.75)


def test_squares_three_pixels_apart_by_hand():
    truth = box(8, 8, (1, 4), (1, 4))
    prediction = box(8, 8, (1, 4), (4, 7))
    score = frame_score(prediction, truth)
    # rings of rows 0-3, cols 0-3 and cols 3-6 (12 px each), tolerance 1 px (4-neighbours): the shared column 3
    # (4 px) and its neighbours in the top and bottom rows, (0,4) and (3,4) resp. (0,2) and (3,2), match
    assert counts(score) == (0, 18, 12, 12, 6, 6)
    assert (score.precision, score.recall, score.j, score.f, score.j_and_f) == (0.5, 0.5, 0.0, 0.5, 0.25)


def test_small_square_inside_a_large_one_by_hand():
    truth = box(8, 8, (1, 5), (1, 5))  # 4 x 4: boundary the ring of rows 0-4, cols 0-4 (16 px)
    prediction = box(8, 8, (2, 4), (2, 4))  # 2 x 2: boundary the ring of rows 1-3, cols 1-3 (8 px)
    score = frame_score(prediction, truth)
    # every predicted boundary pixel has a 4-neighbour on the true ring; of the true ring, the 4 corners have none
    assert counts(score) == (4, 16, 8, 16, 8, 12)
    assert (score.precision, score.recall) == (1.0, 0.75)
    assert score.f == 6 / 7  # 2 x 1 x 0.75 / 1.75
    assert score.j == 0.25


def test_nothing_to_find_and_nothing_found_scores_one():
    empty = np.zeros((6, 7), dtype=bool)
    assert frame_score(empty, empty) == EMPTY_FRAME
    assert frame_score(None, None) == EMPTY_FRAME
    assert (EMPTY_FRAME.j, EMPTY_FRAME.f) == (1.0, 1.0)


def test_an_empty_prediction_on_an_object_scores_zero():
    truth = box(8, 8, (1, 4), (1, 4))
    for prediction in (np.zeros((8, 8), dtype=bool), None):
        score = frame_score(prediction, truth)
        assert counts(score) == (0, 9, 0, 12, 0, 0)
        assert (score.j, score.f) == (0.0, 0.0)


def test_a_mask_where_there_is_nothing_scores_zero():
    prediction = box(8, 8, (1, 4), (1, 4))
    score = frame_score(prediction, None)
    assert counts(score) == (0, 9, 12, 0, 0, 0)
    assert (score.j, score.f) == (0.0, 0.0)


def test_a_frame_filling_truth_has_no_boundary_so_an_empty_prediction_gets_f_one_as_in_davis():
    full = np.ones((6, 6), dtype=bool)
    score = frame_score(np.zeros((6, 6), dtype=bool), full)
    assert (score.j, score.f) == (0.0, 1.0)
    assert (frame_score(full, full).j, frame_score(full, full).f) == (1.0, 1.0)


def test_masks_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match="one shape"):
        frame_score(np.zeros((4, 4), dtype=bool), np.zeros((4, 5), dtype=bool))


# ---------------------------------------------------------------- frame-sized masks


def test_a_480p_rectangle_within_eight_pixels_is_matched_and_nine_is_not():
    truth = box(480, 854, (100, 300), (200, 600))  # 200 x 400; boundary ring rows 99-299, cols 199-599: 1,200 px
    at_eight = frame_score(box(480, 854, (100, 300), (208, 608)), truth)
    assert counts(at_eight) == (200 * 392, 200 * 408, 1200, 1200, 1200, 1200)
    assert at_eight.f == 1.0
    at_nine = frame_score(box(480, 854, (100, 300), (209, 609)), truth)
    # shifted 9 px > the 8 px tolerance: the far side (199 px) and one end pixel of the top and bottom rows miss,
    # and of the near side only the 8 px at each end lie within 8 px (straight down or up) of a top or bottom row:
    # matched = 2 x 400 + 16 = 816 of 1,200, on both sides
    assert counts(at_nine) == (200 * 391, 200 * 409, 1200, 1200, 816, 816)
    assert (at_nine.f, at_nine.j) == (0.68, 391 / 409)


def brute_force_matched(edge: np.ndarray, other: np.ndarray, radius: int) -> int:
    """Pixels of ``edge`` with a pixel of ``other`` within Euclidean distance ``radius``, by measuring them all."""
    points, targets = np.argwhere(edge).astype(np.int64), np.argwhere(other).astype(np.int64)
    matched = 0
    for start in range(0, len(points), 512):
        chunk = points[start:start + 512]
        d2 = ((chunk[:, None, :] - targets[None, :, :]) ** 2).sum(axis=2)
        matched += int((d2.min(axis=1) <= radius * radius).sum())
    return matched


def test_a_real_photo_mask_matches_the_brute_force_definition():
    with Image.open(ASSETS_DIR / "coffee.jpg") as image:
        gray = np.asarray(image.convert("L").filter(ImageFilter.MedianFilter(9)))  # fewer specks to measure
    truth = gray < 90  # the dark coffee, saucer shadows and background: an irregular real mask
    prediction = np.roll(gray < 110, (3, -4), axis=(0, 1))  # another level, moved: a plausible wrong answer
    assert truth.shape == (400, 600)
    radius = boundary_tolerance(400, 600)
    assert radius == 6
    score = frame_score(prediction, truth)
    edge_p, edge_t = boundary_map(prediction), boundary_map(truth)
    assert score.predicted_matched == brute_force_matched(edge_p, edge_t, radius)
    assert score.true_matched == brute_force_matched(edge_t, edge_p, radius)
    assert 0 < score.predicted_matched < score.predicted_boundary  # neither trivial nor perfect
    assert 0 < score.true_matched < score.true_boundary
    assert (score.intersection, score.union) == (int((prediction & truth).sum()), int((prediction | truth).sum()))


# ---------------------------------------------------------------- over frames


def test_j_and_f_of_an_object_are_the_means_over_its_frames():
    frames = [EMPTY_FRAME,  # J 1, F 1
              FrameScore(6, 12, 10, 12, 10, 12),  # J 0.5, F 1
              FrameScore(0, 18, 12, 12, 6, 6)]  # J 0, F 0.5
    assert mean_j_f(frames) == (1.5 / 3, 2.5 / 3)
    with pytest.raises(ValueError, match="at least one frame"):
        mean_j_f([])
