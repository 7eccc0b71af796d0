"""The verifier's views since renderer 4 (issue 23 item 5): drawn at the size the VLM's image processor uses, the
photo once per request, a small locate view and a close-up per mask, a group view; stored as recipes; traces drawn
by renderer 3 still load and draw their views as that renderer did."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import KnownSegmenter, photo, resampled_alike, tool, verdict
from PIL import Image

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.errors import TraceFormatError
from sam3_agent.images import image_digest
from sam3_agent.imaging import views as views_module
from sam3_agent.imaging.postprocess import boxes_from_masks
from sam3_agent.imaging.verify_views import (
    closeup_layout,
    locate_size,
    processor_size,
    render_closeup_view,
    render_locate_view,
)
from sam3_agent.imaging.views import RENDERER_VERSION, MaskView
from sam3_agent.limits import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from sam3_agent.mask_set import Masks
from sam3_agent.trace.io import load_trace
from sam3_agent.vlm.scripted import ScriptedVLM

RENDERER3 = Path(__file__).resolve().parent / "data" / "renderer3"


def mask_set(height: int, width: int, boxes: list[tuple[int, int, int, int]]) -> Masks:
    masks = np.zeros((len(boxes), height, width), dtype=bool)
    for k, (x0, y0, x1, y1) in enumerate(boxes):
        masks[k, y0:y1, x0:x1] = True
    return Masks(masks, np.linspace(0.9, 0.5, len(boxes), dtype=np.float32), boxes_from_masks(masks), "cup")


def tokens(size: tuple[int, int]) -> int:
    return (size[0] // 32) * (size[1] // 32)


def test_processor_size_is_qwens_smart_resize():
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    for width in range(40, 4100, 97):
        for height in range(40, 3100, 89):
            h, w = smart_resize(height, width, 32, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS)
            assert processor_size(width, height) == (w, h), (width, height)


@pytest.mark.parametrize(("width", "height", "size"), [
    (640, 427, (576, 384)), (1008, 1008, (448, 448)), (4000, 3000, (544, 416)), (300, 200, (576, 384))])
def test_the_locate_view_is_the_smallest_size_the_processor_keeps(width, height, size):
    assert locate_size(width, height) == size
    assert processor_size(*size) == size and size[0] * size[1] >= DEFAULT_MIN_PIXELS
    assert abs(size[0] / size[1] - width / height) < 0.06  # the photo's shape, to a token's rounding


def test_the_locate_view_draws_only_its_mask_over_the_shrunk_photo():
    image = photo("coffee.jpg")  # 600 x 400
    masks = mask_set(400, 600, [(300, 100, 420, 220), (20, 20, 80, 80)])
    view = np.asarray(render_locate_view(image, masks, 0))
    plain = np.asarray(image.resize((576, 384), Image.Resampling.BOX))
    changed = np.any(view != plain, axis=2)
    ys, xs = np.nonzero(changed)
    # mask 1 at 0.96 scale: x 288-403, y 96-211; nothing else (mask 2 is not drawn)
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (288, 403, 96, 211)


def test_a_rounds_locate_views_shrink_the_photo_once_and_each_draws_on_its_own_copy(monkeypatch):
    image = photo("coffee.jpg").copy()  # 600 x 400, an object of this test's own
    masks = mask_set(400, 600, [(300, 100, 420, 220), (20, 20, 80, 80), (450, 250, 590, 390)])
    resizes = []
    original = Image.Image.resize
    monkeypatch.setattr(Image.Image, "resize", lambda self, *a, **k: resizes.append(self.size) or original(self, *a, **k))
    views = [np.asarray(render_locate_view(image, masks, k)) for k in range(3)]
    assert resizes == [(600, 400)]  # one shrink for the three views
    plain = np.asarray(original(image, (576, 384), Image.Resampling.BOX))
    for k, view in enumerate(views):  # each view has its own mask only: no view drew on another's copy
        others = [j for j in range(3) if j != k]
        for j in others:
            x0, y0, x1, y1 = (round(v * 0.96) for v in masks.tight_boxes[j])
            assert np.array_equal(view[y0 + 2:y1 - 2, x0 + 2:x1 - 2], plain[y0 + 2:y1 - 2, x0 + 2:x1 - 2]), (k, j)
    other = image.copy()  # another photo of the same size is shrunk again, not taken for the first
    render_locate_view(other, masks, 0)
    assert resizes == [(600, 400), (600, 400)]


def test_a_close_up_is_laid_out_in_whole_tokens_with_the_crop_centred_in_each_half():
    assert closeup_layout(100, 100) == ((768, 384), (382, 382))  # enlarged: 288 tokens
    assert closeup_layout(2000, 1500) == ((768, 288), (382, 286))  # shrunk: 216 tokens
    assert closeup_layout(64, 200) == ((384, 576), (184, 576))  # thin: raised to the processor's minimum
    image = photo("coffee.jpg")
    masks = mask_set(400, 600, [(300, 100, 420, 220)])
    view = np.asarray(render_closeup_view(image, masks, 0))
    assert view.shape == (384, 768, 3)
    crop = np.asarray(image.crop((270, 70, 450, 250)))  # the box grown by a quarter each side
    left = np.asarray(Image.fromarray(crop).resize((382, 382), Image.Resampling.BICUBIC))  # enlarged by Pillow
    assert np.array_equal(view[1:383, 0:382], left)
    assert (view[[0, 383], :382] == 0).all() and (view[[0, 383], 386:] == 0).all()  # one padded row above and below
    assert (view[:, 382:386] == 255).all()  # the separator
    right = view[1:383, 386:768]
    changed = np.any(right != left, axis=2)
    ys, xs = np.nonzero(changed)
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (64, 318, 64, 318)  # the mask (30-150 of 180 px), enlarged


@pytest.mark.parametrize(("width", "height"), [(640, 427), (1008, 1008), (4000, 3000), (512, 512)])
def test_a_masks_own_views_cost_at_most_512_tokens_at_any_photo_size(width, height):
    image = Image.new("RGB", (width, height), (120, 130, 140))
    masks = mask_set(height, width, [(10, 10, width // 2, height // 3), (width - 40, height - 30, width, height)])
    for index in (0, 1):
        locate = MaskView("locate", image, masks, index).render()
        closeup = MaskView("closeup", image, masks, index).render()
        for view in (locate, closeup):
            assert processor_size(*view.size) == view.size  # the processor resizes nothing
        assert tokens(locate.size) <= 224 and tokens(closeup.size) <= 288


def test_a_group_view_is_the_photo_at_the_processors_size_with_only_its_masks_numbered():
    image = photo("coffee.jpg")
    masks = mask_set(400, 600, [(20, 20, 120, 120), (300, 100, 420, 220), (450, 250, 590, 390)])
    view = MaskView("group", image, masks, indices=(0, 2)).render()
    assert view.size == processor_size(600, 400) == (608, 384)
    plain = np.asarray(image.resize((608, 384), Image.Resampling.BICUBIC))
    changed = np.any(np.asarray(view) != plain, axis=2)
    # at 608 / 600 by 384 / 400: mask 1 covers x 20-121, y 19-115; mask 3 x 456-598, y 240-374; mask 2 x 304-425, y 96-211
    assert changed[22:113, 23:119].all() and changed[243:372, 459:596].all()
    assert not changed[98:209, 306:423].any()  # mask 2 is not in the group: not drawn


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"kind": "group", "index": 0}, "takes no mask index"),
    ({"kind": "group"}, "needs mask indices"),
    ({"kind": "locate", "index": 0, "indices": (0,)}, "takes no mask indices"),
    ({"kind": "group", "indices": (0, 0)}, "distinct mask indices"),
    ({"kind": "group", "indices": (0, 5)}, "out of range"),
    ({"kind": "closeup", "index": 3}, "out of range"),
])
def test_a_bad_view_recipe_is_refused(kwargs, message):
    masks = mask_set(40, 60, [(1, 1, 10, 10), (20, 20, 30, 30)])
    with pytest.raises(ValueError, match=message):
        MaskView(photo=Image.new("RGB", (60, 40)), masks=masks, **kwargs)


def test_each_mask_is_verified_alone_with_the_photo_then_its_own_two_views():
    verifier = ScriptedVLM([verdict("Reject"), verdict("Accept"), verdict("Accept")])
    segmenter = KnownSegmenter({"cup": [((20, 20, 120, 120), 0.9), ((300, 100, 420, 220), 0.8),
                                        ((450, 250, 590, 390), 0.7)]})
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="cup"), tool("examine_each_mask"), tool("report_no_mask")])
    Agent(vlm, segmenter, AgentConfig(verify_batch_size=1), verifier=verifier).run(photo("coffee.jpg"), "the cup")
    for number, request in enumerate(verifier.requests, start=1):
        assert [m.role for m in request] == ["system", "user"]  # no earlier verdict, no other conversation
        views = [(p.name, p.view.kind if p.view else None, p.view.index if p.view else None) for p in request[1].images]
        assert views == [("raw", None, None), (f"round2_mask{number}_view", "locate", number - 1),
                         (f"round2_mask{number}_zoom", "closeup", number - 1)]
        assert f"Candidate: mask {number}." in request[1].text
        assert not any(f"mask {other}" in request[1].text for other in {1, 2, 3} - {number})


# ---------------------------------------------------------------- traces of earlier renderers


def test_a_renderer_3_trace_loads_and_draws_every_view_as_it_was_sent_but_its_zooms_resampled(tmp_path, caplog,
                                                                                               monkeypatch):
    folder = tmp_path / "trace"
    shutil.copytree(RENDERER3, folder)
    sent = json.loads((folder / "views.json").read_text())
    assert json.loads((folder / "trace.json").read_text())["renderer_version"] == 3 and RENDERER_VERSION == 6
    with caplog.at_level(logging.WARNING):
        trace = load_trace(folder)
    assert "drawn by renderer version 3 and is shown with version 6" in caplog.text
    verdicts = trace.rounds[1].result.verdicts
    assert [(v.mask_view.view.kind, v.zoom_view.view.kind) for v in verdicts] == [("mask", "zoom")] * 2
    drawn = {p.name: image_digest(p.image) for m in trace.messages for p in m.images}
    drawn.update({p.name: image_digest(p.image) for v in verdicts for p in (v.mask_view, v.zoom_view)})
    zooms = {name: drawn.pop(name) for name in ("round2_mask1_zoom", "round2_mask2_zoom")}
    assert drawn == {name: digest for name, digest in sent.items() if name not in zooms}  # every other view: exact
    # The zoom views enlarge a crop: renderer 3 did it with OpenCV's bicubic, whose pixels depend on the CPU (the
    # sent digests were made on a machine with AVX-512), renderer 5 with Pillow's. Drawn both ways here, they differ
    # by less than one level on average.
    monkeypatch.setattr(views_module, "resize_photo", lambda pixels, size: cv2.resize(pixels, size,
                                                                                       interpolation=cv2.INTER_CUBIC))
    for examined in verdicts:
        now, then = examined.zoom_view.image, examined.zoom_view.view.render()
        assert now.size == (772, 384)
        alike, mean, largest = resampled_alike(now, then)
        assert alike, (examined.mask_number, mean, largest)


def test_a_group_view_with_bad_indices_in_a_trace_is_refused(tmp_path):
    from test_examine_groups import answers, examine_run

    from sam3_agent.trace.io import save_trace

    _, trace, _ = examine_run({"in_groups": True}, ScriptedVLM(answers()), ["1-20"])
    save_trace(trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    document["rounds"][1]["result"]["verdicts"][0]["mask_view"]["view"]["indices"] = [0, "1"]
    (tmp_path / "trace.json").write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="indices must be a list of mask indices"):
        load_trace(tmp_path)


def test_a_view_of_an_extreme_shape_under_small_bounds_is_drawn_at_a_size_the_processor_keeps():
    from sam3_agent.imaging.legibility import PixelBounds
    from sam3_agent.imaging.verify_views import kept_size

    small = PixelBounds(256 * 256, 256 * 256)
    assert processor_size(772, 4, small) == (3584, 32)  # raised to the minimum, past the maximum
    assert kept_size(772, 4, small) == (2048, 32) == processor_size(2048, 32, small)
    assert kept_size(640, 427) == processor_size(640, 427) == (640, 416)  # one step for ordinary shapes
