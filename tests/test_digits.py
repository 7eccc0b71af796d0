"""The label digits and the renderer's pixels are the same on every installation: our own glyphs (not OpenCV's fonts,
whose metrics changed between 4.x, 5.0 and 5.1), and golden hashes of the views a trace redraws on load."""

from __future__ import annotations

import hashlib

import cv2
import numpy as np
import pytest
from PIL import Image

from sam3_agent.imaging.digits import draw_digits, ink_coverage, text_size
from sam3_agent.imaging.overlay import render_numbered_overlay
from sam3_agent.imaging.postprocess import boxes_from_masks
from sam3_agent.imaging.views import RENDERER_VERSION, MaskView, render_mask_views
from sam3_agent.mask_set import Masks
from sam3_agent.package_files import ASSETS_DIR


def test_text_size_is_the_centre_lines_plus_the_pen():
    # two digits: 2 x 11 + 4 px of centre lines wide and 21 px tall at scale 1, plus the 2 px pen
    assert text_size("12", 1.0, 2) == (28, 23)
    # one digit at scale 0.6 with a 1 px pen: 6.6 + 1 and 12.6 + 1, rounded up
    assert text_size("7", 0.6, 1) == (8, 14)


def test_a_stroke_is_full_ink_on_its_centre_line_and_none_far_from_it():
    coverage = ink_coverage("7", 1.0, 2)  # the 7's top bar runs along y = 1 px (half the pen) from x = 1 to 12
    assert coverage.shape == (23, 13) and coverage.dtype == np.uint8
    assert coverage[0, 6] == 64 and coverage[1, 6] == 64  # pixel centres 0.5 px from the line: inside the pen
    assert coverage[3, 2] == 0  # 2.5 px below the bar, far from the slanted stroke
    assert coverage.max() == 64 and coverage.min() == 0


def test_ink_blends_in_integers_and_clips_at_the_edges():
    out = np.full((10, 10, 3), 200, dtype=np.uint8)
    draw_digits(out, "1", (-3, -5), 1.0, 2, (0, 0, 0))  # partly outside: clipped, no error
    coverage = ink_coverage("1", 1.0, 2)
    a = coverage[5:15, 3:13].astype(int)
    expected = (200 * (64 - a) + 32) // 64
    assert np.array_equal(out[..., 0], expected.astype(np.uint8))


@pytest.mark.parametrize("text", ["", "1a", "-3", " 7"])
def test_anything_but_digits_is_refused(text):
    with pytest.raises(ValueError, match="only the digits 0-9"):
        text_size(text, 1.0, 1)


def test_labels_are_drawn_without_opencvs_text_functions(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise RuntimeError("OpenCV text used")

    monkeypatch.setattr(cv2, "putText", refuse)
    monkeypatch.setattr(cv2, "getTextSize", refuse)
    masks = np.zeros((2, 60, 80), dtype=bool)
    masks[0, 10:40, 5:35] = True
    masks[1, 20:50, 45:75] = True
    render_numbered_overlay(Image.new("RGB", (80, 60), (90, 120, 150)), masks, [7, 123])


def _digest(image: Image.Image) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(image)).tobytes()).hexdigest()[:16]


def test_the_renderer_draws_exactly_the_pixels_of_its_version():
    # A trace stores recipes and draws its views again when opened: these digests are renderer version 6's pixels
    # for a fixed photo and masks. If one changes (our drawing code, or a library it calls such as OpenCV's erode
    # or resize), traces saved before would be redrawn differently: bump RENDERER_VERSION and update the digests.
    photo = Image.open(ASSETS_DIR / "coffee.jpg").convert("RGB").resize((200, 133), Image.Resampling.BILINEAR)
    masks = np.zeros((12, 133, 200), dtype=bool)
    for k in range(12):
        masks[k, 10 + 9 * (k % 4):40 + 9 * (k % 4), 5 + 15 * k:25 + 15 * k] = True
    masks[3, 60:120, 40:160] = True  # a large one, with holes cut by the next
    masks[3, 80:90, 70:90] = False
    assert RENDERER_VERSION == 6
    mask_set = Masks(masks, np.linspace(0.9, 0.6, 12, dtype=np.float32), boxes_from_masks(masks), "cup")
    overlay = render_numbered_overlay(photo, mask_set)
    mask_view, zoom_view = render_mask_views(photo, mask_set, 3)
    assert [_digest(overlay), _digest(mask_view), _digest(zoom_view)] == [
        "eb00aaf301773418", "e2282b33d4d860e0", "67576b5218471c3d"]
    # the verifier's views (renderer 4 on): the locate view, the close-up and a group view (masks 2, 4 and 9)
    views = [MaskView("locate", photo, mask_set, 3), MaskView("closeup", photo, mask_set, 3),
             MaskView("group", photo, mask_set, indices=(1, 3, 8))]
    assert [_digest(v.render()) for v in views] == ["b86402145896af07", "992efe99643750af", "6d494a5baee8b701"]
    # renderer 6 on: a dense overlay drawn at the VLM's pixel budget (200 x 133 enlarged 4 x, the most it is)
    enlarged = MaskView("overlay", photo, mask_set, enlarged=True).render()
    assert enlarged.size == (800, 532) and _digest(enlarged) == "bf2f05402b1fdc60"
