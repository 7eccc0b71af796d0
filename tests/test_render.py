"""Overlays, single-mask views and zoom views: exact pixel checks on a real photo."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sam3_agent.imaging.draw import DrawStyle, mask_colors
from sam3_agent.imaging.labels import label_boxes, label_point
from sam3_agent.imaging.overlay import render_numbered_overlay
from sam3_agent.imaging.views import (
    ZOOM_MIN_LONG_SIDE,
    ZOOM_SEPARATOR_COLOR,
    ZOOM_SEPARATOR_WIDTH,
    render_single_mask,
    render_zoom_view,
    zoom_crop_box,
)
from sam3_agent.package_files import ASSETS_DIR

ASSETS = ASSETS_DIR  # the photos the package ships


@pytest.fixture(scope="module")
def astronaut() -> Image.Image:
    return Image.open(ASSETS / "astronaut.jpg").convert("RGB")  # 512 x 512


@pytest.fixture(scope="module")
def rocket() -> Image.Image:
    return Image.open(ASSETS / "rocket.jpg").convert("RGB")  # 640 x 427


def rect(h: int, w: int, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
    m = np.zeros((h, w), dtype=bool)
    m[y0:y1, x0:x1] = True
    return m


def ring(h: int, w: int, cy: int, cx: int, r_in: float, r_out: float) -> np.ndarray:
    yy, xx = np.mgrid[:h, :w]
    d = np.hypot(yy - cy, xx - cx)
    return (d >= r_in) & (d < r_out)


def blended(pixel: np.ndarray, color: np.ndarray) -> np.ndarray:
    """The documented fill rule: (p * 141 + c * 115 + 128) >> 8, 115 = round(0.45 * 256)."""
    return ((pixel.astype(int) * 141 + color.astype(int) * 115 + 128) >> 8).astype(np.uint8)


# ---------------------------------------------------------------- colours


def test_mask_colors_are_distinct_deterministic_and_stable_in_prefix():
    colors = mask_colors(30)
    assert colors.dtype == np.uint8 and colors.shape == (30, 3)
    assert len({tuple(c) for c in colors}) == 30
    assert np.array_equal(mask_colors(30), colors)
    assert np.array_equal(mask_colors(5), colors[:5])
    assert colors[0].tolist() == [242, 107, 48]
    assert mask_colors(0).shape == (0, 3)


# ---------------------------------------------------------------- numbered overlay


def test_overlay_has_input_size_and_leaves_pixels_outside_masks_unchanged(rocket):
    h, w = 427, 640
    masks = np.stack([rect(h, w, 50, 150, 60, 200), rect(h, w, 200, 300, 300, 500)])
    out = render_numbered_overlay(rocket, masks)
    assert out.mode == "RGB" and out.size == rocket.size
    src, res = np.asarray(rocket), np.asarray(out)
    outside = ~masks.any(axis=0)
    # Labels are the only thing that may spill outside masks; these masks are large enough to hold them.
    assert np.array_equal(res[outside], src[outside])


def test_overlay_fills_mask_interior_with_its_blended_colour(rocket):
    h, w = 427, 640
    masks = np.stack([rect(h, w, 50, 150, 60, 200), rect(h, w, 200, 300, 300, 500)])
    colors = mask_colors(2)
    src, res = np.asarray(rocket), np.asarray(render_numbered_overlay(rocket, masks))
    # Points inside each mask, away from its contour (2 px here) and its centred label.
    for k, (y, x) in enumerate([(60, 70), (290, 490)]):
        assert res[y, x].tolist() == blended(src[y, x], colors[k]).tolist()
    # The whole interior band between contour and label follows the rule.
    band = res[55:70, 65:195]
    assert np.array_equal(band, blended(src[55:70, 65:195], colors[0]))


def test_overlay_paints_contour_in_solid_mask_colour(rocket):
    h, w = 427, 640
    mask = rect(h, w, 50, 150, 60, 200)
    res = np.asarray(render_numbered_overlay(rocket, mask[None]))
    width = DrawStyle.for_size(w, h).contour_width
    assert width == 2
    color = mask_colors(1)[0].tolist()
    assert res[100, 60].tolist() == color and res[100, 61].tolist() == color  # left edge, 2 px wide
    assert res[149, 120].tolist() == color  # bottom edge


def test_overlay_with_zero_masks_is_a_copy(astronaut):
    out = render_numbered_overlay(astronaut, np.zeros((0, 512, 512), dtype=bool))
    assert out is not astronaut
    assert out.size == astronaut.size and out.tobytes() == astronaut.tobytes()


def test_overlay_draws_given_numbers_in_their_label_boxes(astronaut):
    masks = np.stack([rect(512, 512, 100, 200, 100, 200), rect(512, 512, 300, 400, 300, 450)])
    out = np.asarray(render_numbered_overlay(astronaut, masks, numbers=[7, 12]))
    boxes = label_boxes(masks, [7, 12])
    colors = mask_colors(2)
    for k, (x0, y0, x1, y1) in enumerate(boxes):
        patch = out[y0:y1, x0:x1].reshape(-1, 3)
        ink = [0, 0, 0] if colors[k] @ np.array([0.299, 0.587, 0.114]) >= 140 else [255, 255, 255]
        assert out[y0, x0].tolist() == ink  # box edge in the text colour
        assert (patch == colors[k]).all(axis=1).mean() > 0.4  # solid box in the mask colour
        assert (patch == ink).all(axis=1).sum() > 0  # digits / edge
    # Two digits make a wider box than one.
    wide = label_boxes(masks[:1], [12])[0]
    narrow = label_boxes(masks[:1], [7])[0]
    assert wide[2] - wide[0] > narrow[2] - narrow[0]


def test_label_of_ring_shaped_mask_lies_on_the_ring(astronaut):
    mask = ring(512, 512, 256, 256, 100, 140)
    x, y = label_point(mask)
    assert mask[y, x]
    assert np.hypot(x - 256, y - 256) == pytest.approx(120, abs=1.5)  # the middle of the band
    # The drawn label: pixels that differ from the same mask drawn without a number.
    labelled = np.asarray(render_numbered_overlay(astronaut, mask[None]))
    unlabelled = np.asarray(render_single_mask(astronaut, mask))
    ys, xs = np.nonzero((labelled != unlabelled).any(axis=2))
    cx, cy = (xs.min() + xs.max() + 1) // 2, (ys.min() + ys.max() + 1) // 2
    assert mask[cy, cx]
    assert not mask[256, 256]  # the centroid is in the hole: a naive label would miss the mask
    x0, y0, x1, y1 = label_boxes(mask[None])[0]
    assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (x0, y0, x1, y1)


def test_label_of_concave_mask_lies_inside_it():
    mask = rect(300, 300, 20, 280, 20, 60) | rect(300, 300, 240, 280, 20, 280)  # an L
    x, y = label_point(mask)
    assert mask[y, x]
    x0, y0, x1, y1 = label_boxes(mask[None])[0]
    assert mask[(y0 + y1) // 2, (x0 + x1) // 2]


def test_labels_of_identical_masks_are_nudged_apart():
    mask = rect(300, 300, 50, 250, 50, 250)
    boxes = label_boxes(np.stack([mask, mask, mask]))
    for i in range(3):
        for j in range(i + 1, 3):
            a, b = boxes[i], boxes[j]
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
        x0, y0, x1, y1 = boxes[i]
        assert mask[y0:y1, x0:x1].all()  # nudged to other interior points, still on the mask


def test_label_size_scales_with_the_image():
    small = label_boxes(rect(300, 300, 0, 300, 0, 300)[None])[0]
    big = label_boxes(rect(4000, 4000, 0, 4000, 0, 4000)[None])[0]
    small_h, big_h = small[3] - small[1], big[3] - big[1]
    assert small_h >= 15  # readable digits on a 300 px image
    assert big_h >= 0.02 * 4000  # still 2 % of the side on a 4000 px image
    assert DrawStyle.for_size(300, 300).contour_width == 1
    assert DrawStyle.for_size(4000, 3000).contour_width == 10


def test_overlay_of_4000px_image_keeps_outside_pixels_and_labels_each_mask():
    h = w = 4000
    base = np.zeros((h, w, 3), dtype=np.uint8)
    base[..., 1] = 90
    image = Image.fromarray(base)
    masks = np.stack([rect(h, w, 100, 900, 100, 1900), rect(h, w, 2000, 3900, 2500, 3900)])
    res = np.asarray(render_numbered_overlay(image, masks))
    assert np.array_equal(res[~masks.any(axis=0)], base[~masks.any(axis=0)])
    for k, (x0, y0, x1, y1) in enumerate(label_boxes(masks)):
        assert masks[k, y0:y1, x0:x1].all()
        assert (res[y0:y1, x0:x1] == mask_colors(2)[k]).all(axis=2).any()


def test_one_pixel_mask_and_masks_on_the_border_are_drawn(astronaut):
    dot = np.zeros((512, 512), dtype=bool)
    dot[0, 511] = True  # a single pixel in the top-right corner
    edge = rect(512, 512, 400, 512, 0, 120)  # touches the left and bottom borders
    masks = np.stack([dot, edge])
    res = np.asarray(render_numbered_overlay(astronaut, masks))
    colors = mask_colors(2)
    boxes = label_boxes(masks)
    for x0, y0, x1, y1 in boxes:
        assert 0 <= x0 < x1 <= 512 and 0 <= y0 < y1 <= 512  # clamped inside the image
    assert (boxes[0][2], boxes[0][1]) == (512, 0)  # the dot's label sits in its corner
    # The contour runs along the image border where the mask touches it.
    assert res[450, 0].tolist() == colors[1].tolist()
    assert res[511, 60].tolist() == colors[1].tolist()
    single = np.asarray(render_single_mask(astronaut, dot))
    assert single[0, 511].tolist() == colors[0].tolist()  # a 1-px mask is all contour


def test_overlay_rejects_masks_of_another_size(astronaut):
    with pytest.raises(ValueError, match=r"match the 512x512 image"):
        render_numbered_overlay(astronaut, np.zeros((1, 100, 100), dtype=bool))
    with pytest.raises(ValueError, match="numbers has 1 entries for 2 masks"):
        render_numbered_overlay(astronaut, np.zeros((2, 512, 512), dtype=bool), numbers=[1])


def test_label_point_of_empty_mask_is_an_error():
    with pytest.raises(ValueError, match="empty mask"):
        label_point(np.zeros((10, 10), dtype=bool))


# ---------------------------------------------------------------- single mask


def test_single_mask_view_draws_fill_and_contour_but_no_number(astronaut):
    mask = rect(512, 512, 100, 300, 150, 350)
    src, res = np.asarray(astronaut), np.asarray(render_single_mask(astronaut, mask))
    color = mask_colors(1)[0]
    assert np.array_equal(res[~mask], src[~mask])
    interior = rect(512, 512, 102, 298, 152, 348)  # inside the 1-px contour: no label anywhere
    assert np.array_equal(res[interior], blended(src[interior], color))
    assert res[100, 200].tolist() == color.tolist()


def test_single_mask_view_of_empty_mask_is_a_copy(astronaut):
    out = render_single_mask(astronaut, np.zeros((512, 512), dtype=bool))
    assert out.tobytes() == astronaut.tobytes()


# ---------------------------------------------------------------- zoom view


def test_zoom_crop_box_enlarges_the_mask_box_by_the_margin():
    mask = rect(512, 512, 100, 150, 100, 200)  # box 100 x 50
    assert zoom_crop_box(mask, margin=0.25, min_side=64) == (75, 87, 225, 162)
    assert zoom_crop_box(mask, margin=0.0, min_side=64) == (100, 93, 200, 157)  # height raised to 64


def test_zoom_crop_box_is_clamped_to_the_image():
    corner = rect(512, 512, 0, 10, 502, 512)
    assert zoom_crop_box(corner) == (448, 0, 512, 64)
    whole = rect(100, 80, 0, 100, 0, 80)
    assert zoom_crop_box(whole) == (0, 0, 80, 100)


def test_zoom_view_of_large_mask_is_crop_separator_and_drawn_crop(astronaut):
    mask = ring(512, 512, 256, 256, 60, 200)
    x0, y0, x1, y1 = zoom_crop_box(mask)
    cw, ch = x1 - x0, y1 - y0
    assert max(cw, ch) >= ZOOM_MIN_LONG_SIDE  # no upscaling
    view = np.asarray(render_zoom_view(astronaut, mask))
    assert view.shape == (ch, 2 * cw + ZOOM_SEPARATOR_WIDTH, 3)
    src = np.asarray(astronaut)
    assert np.array_equal(view[:, :cw], src[y0:y1, x0:x1])
    assert (view[:, cw : cw + ZOOM_SEPARATOR_WIDTH] == ZOOM_SEPARATOR_COLOR).all()
    crop_image = Image.fromarray(np.ascontiguousarray(src[y0:y1, x0:x1]))
    expected_right = np.asarray(render_single_mask(crop_image, mask[y0:y1, x0:x1]))
    assert np.array_equal(view[:, cw + ZOOM_SEPARATOR_WIDTH :], expected_right)


def test_zoom_view_upscales_small_crops(astronaut):
    mask = rect(512, 512, 200, 230, 300, 340)  # box 40 x 30 -> crop 64 x 64 (min_side)
    assert zoom_crop_box(mask) == (288, 183, 352, 247)
    view = render_zoom_view(astronaut, mask)
    assert view.size == (2 * ZOOM_MIN_LONG_SIDE + ZOOM_SEPARATOR_WIDTH, ZOOM_MIN_LONG_SIDE)
    right = np.asarray(view)[:, ZOOM_MIN_LONG_SIDE + ZOOM_SEPARATOR_WIDTH :]
    # 6x upscale: the mask covers crop columns 12..51 -> 72..311 px, and is outlined there.
    assert right[192, 72].tolist() == mask_colors(1)[0].tolist()


def test_zoom_view_of_one_pixel_mask_on_the_border(astronaut):
    mask = np.zeros((512, 512), dtype=bool)
    mask[511, 0] = True
    view = render_zoom_view(astronaut, mask)
    assert view.size == (2 * ZOOM_MIN_LONG_SIDE + ZOOM_SEPARATOR_WIDTH, ZOOM_MIN_LONG_SIDE)


def test_zoom_view_of_empty_mask_is_an_error(astronaut):
    with pytest.raises(ValueError, match="empty mask"):
        render_zoom_view(astronaut, np.zeros((512, 512), dtype=bool))


def test_label_candidates_are_the_head_of_a_stable_descending_sort():
    from sam3_agent.imaging.labels import _deepest_first

    rng = np.random.default_rng(0)
    for _ in range(300):
        values = rng.integers(0, 5, rng.integers(0, 400)).astype(np.float32)  # many ties
        limit = int(rng.integers(1, 300))
        assert np.array_equal(_deepest_first(values, limit), np.argsort(-values, kind="stable")[:limit])
