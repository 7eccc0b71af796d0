"""Masks held once as RLE and views held as recipes: the public attributes still work, nothing big is kept."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest
from conftest import photo, rect_mask

from sam3_agent import rle
from sam3_agent.imaging.overlay import render_numbered_overlay, render_overlay_scaled
from sam3_agent.imaging.views import MaskView, render_mask_views, view_part
from sam3_agent.mask_set import Masks
from sam3_agent.messages import RENDERED_VIEWS, ImagePart, RenderedViews


@pytest.fixture
def masks() -> Masks:
    stack = np.stack([rect_mask(120, 160, 10, 20, 60, 90), rect_mask(120, 160, 50, 5, 150, 40),
                      rect_mask(120, 160, 0, 100, 160, 120)])
    return Masks(stack, np.array([0.9, 0.8, 0.7], np.float32), np.array([[10, 20, 60, 90], [50, 5, 150, 40],
                                                                           [0, 100, 160, 120]], np.float32), "box")


def test_masks_keep_their_array_api(masks):
    assert len(masks) == 3 and masks.masks.shape == (3, 120, 160) and masks.masks.dtype == bool
    assert masks.masks[1].sum() == 100 * 35 and np.array_equal(masks.mask(2), masks.masks[2])
    assert masks.scores.dtype == np.float32 and masks.boxes.shape == (3, 4) and masks.phrase == "box"
    assert masks.areas.tolist() == [50 * 70, 100 * 35, 160 * 20]
    assert masks.tight_boxes.tolist() == [[10, 20, 60, 90], [50, 5, 150, 40], [0, 100, 160, 120]]
    empty = Masks.empty(120, 160, "none")
    assert len(empty) == 0 and empty.masks.shape == (0, 120, 160) and empty.phrase == "none"


def test_masks_hold_rle_only_and_subsets_share_it(masks, monkeypatch):
    assert all(isinstance(c, bytes) for c in masks.counts) and not any(
        isinstance(getattr(masks, name, None), np.ndarray) and getattr(masks, name).size > 100
        for name in ("_counts", "scores", "boxes"))
    monkeypatch.setattr(rle, "encode", lambda *a: pytest.fail("a subset encoded its masks again"))
    picked = masks.subset([2, 0])
    assert picked.counts[0] is masks.counts[2] and picked.counts[1] is masks.counts[0]
    assert np.array_equal(picked.masks, masks.masks[[2, 0]]) and picked.scores.tolist() == pytest.approx([0.7, 0.9])
    renamed = masks.renamed("other")
    assert renamed.phrase == "other" and renamed.counts == masks.counts and renamed != masks


def test_masks_from_an_iterable_need_their_size_and_equal_the_array_form(masks):
    built = Masks(iter(list(masks.masks)), masks.scores, masks.boxes, "box", size=(120, 160))
    assert built == masks
    with pytest.raises(ValueError, match="give size"):
        Masks(iter(list(masks.masks)), masks.scores, masks.boxes)
    with pytest.raises(ValueError, match="shape \\(N, H, W\\)"):
        Masks(np.zeros((3, 4), bool), np.zeros(3), np.zeros((3, 4)))


def test_masks_copy_and_pickle_to_equal_masks(masks):
    assert copy.deepcopy(masks) == masks and pickle.loads(pickle.dumps(masks)) == masks


def test_a_derived_part_keeps_no_pixels_and_renders_the_same_again(masks):
    image = photo("astronaut.jpg").resize((160, 120))
    part = view_part("round1_overlay", MaskView("overlay", image, masks))
    first = np.asarray(part.image).copy()
    assert np.array_equal(first, np.asarray(render_numbered_overlay(image, masks)))
    RENDERED_VIEWS.clear()
    gc.collect()
    assert part._rendered is not None and part._rendered() is None  # nothing holds the pixels any more
    assert np.array_equal(np.asarray(part.image), first)  # rendered again, identically
    copied = pickle.loads(pickle.dumps(part))
    assert copied == part and copied.view == part.view and np.array_equal(np.asarray(copied.image), first)


def test_parts_compare_by_recipe_or_pixels(masks):
    image = photo("astronaut.jpg").resize((160, 120))
    by_view = ImagePart(None, "round1_mask2_view", MaskView("mask", image, masks, 1))
    by_pixels = ImagePart(render_mask_views(image, masks, 1)[0], "round1_mask2_view")
    assert by_view == by_pixels and by_view == ImagePart(None, "round1_mask2_view", MaskView("mask", image, masks, 1))
    assert by_view != ImagePart(None, "round1_mask2_view", MaskView("mask", image, masks, 0))
    with pytest.raises(ValueError, match="needs pixels or a view"):
        ImagePart(None, "nothing")


@pytest.mark.parametrize(("kind", "index", "message"), [
    ("overlay", 0, "takes no mask index"), ("zoom", None, "needs a mask index"), ("mask", 3, "out of range"),
    ("heatmap", None, "unknown view kind"),
])
def test_a_view_recipe_refuses_what_cannot_be_drawn(masks, kind, index, message):
    with pytest.raises(ValueError, match=message):
        MaskView(kind, photo("astronaut.jpg").resize((160, 120)), masks, index)


def test_rendered_views_keep_the_newest_within_their_budget():
    from PIL import Image

    cache = RenderedViews(max_bytes=3 * 10 * 10 * 3)
    images = [Image.new("RGB", (10, 10)) for _ in range(5)]
    for image in images:
        cache.hold(image)
    assert list(cache._held.values()) == images[2:]


def test_a_scaled_overlay_equals_the_overlay_of_the_shrunk_photo_and_masks():
    big = photo("astronaut.jpg").resize((1536, 1023))  # 512 px wide: shrunk by 3, blocks of 3 x 3 pixels
    yy, xx = np.mgrid[0:1023, 0:1536]
    disk = (xx - 400) ** 2 + (yy - 500) ** 2 <= 250**2
    line = np.zeros((1023, 1536), bool)
    line[100:900, 1000] = True  # one pixel wide: a third of each block, so kept by "any pixel"
    box = rect_mask(1023, 1536, 1100, 61, 1499, 419)  # its edge blocks are 1/3 to 2/3 covered
    stack = np.stack([disk, line, box])
    masks = Masks(stack, np.ones(3, np.float32), np.zeros((3, 4), np.float32))
    # The rule, written out: a shrunk pixel is set when its 3 x 3 block is at least half covered (as 0..255
    # rounded, like OpenCV's area resize); a mask with no such block keeps every block it touches.
    cover = np.rint(stack.reshape(3, 341, 3, 512, 3).mean(axis=(2, 4)) * 255)
    small = np.stack([c >= 128 if (c >= 128).any() else c > 0 for c in cover])
    assert small[1].sum() == 800 // 3 + 1 and not small[2][20, 366] and small[2][20, 367]  # line kept, corner cut
    expected = render_numbered_overlay(big.reduce(3), small)
    assert np.array_equal(np.asarray(render_overlay_scaled(big, masks, 512)), np.asarray(expected))
    assert render_overlay_scaled(big, masks, 2000).size == (1536, 1023)  # fits: drawn at full size
