"""SAM 3's post-processing (``instance_masks``) on stand-in model outputs: the chunked path gives exactly what
upsampling every mask at once gives, and it never holds the whole (N, H, W) mask array."""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import numpy as np
import torch

from sam3_agent.bench.sam_outputs import PostProcessedSegmenter, model_outputs
from sam3_agent.bench.scene import detections
from sam3_agent.mask_set import Masks
from sam3_agent.sam.segmenter import MASK_THRESHOLD, instance_masks


def random_outputs(queries: int = 12, side: int = 24, seed: int = 0) -> SimpleNamespace:
    generator = torch.Generator().manual_seed(seed)
    corners = torch.rand(1, queries, 2, 2, generator=generator).sort(dim=2).values  # x1 <= x2, y1 <= y2
    return SimpleNamespace(
        pred_logits=torch.randn(1, queries, generator=generator) + 1.0,
        presence_logits=torch.tensor([[2.0]]),
        pred_boxes=corners.permute(0, 1, 3, 2).reshape(1, queries, 4)[..., [0, 2, 1, 3]],
        pred_masks=torch.randn(1, queries, side, side, generator=generator) * 4.0,
    )


def whole_array(outputs: SimpleNamespace, height: int, width: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Every kept mask upsampled at once, as transformers' post-processing does: (masks bool (N, H, W), scores)."""
    scores = outputs.pred_logits[0].sigmoid() * outputs.presence_logits[0].sigmoid()
    keep = scores >= threshold
    upsampled = torch.nn.functional.interpolate(outputs.pred_masks[0][keep].sigmoid()[None], size=(height, width),
                                                mode="bilinear", align_corners=False)[0]
    return (upsampled > MASK_THRESHOLD).numpy(), scores[keep].numpy()


def test_chunked_encoding_equals_the_whole_array_exactly_for_every_chunk_size():
    outputs = random_outputs()
    masks, scores = whole_array(outputs, 90, 130, 0.5)
    assert 4 <= len(masks) < 12  # some queries are dropped, several kept
    expected = Masks(masks, scores, np.zeros((len(masks), 4)), "thing")
    for chunk_bytes in (1, 3 * 4 * 90 * 130, 1024**3):  # one, three, all masks per chunk
        got = instance_masks(outputs, 90, 130, 0.5, "thing", chunk_bytes=chunk_bytes)
        assert got.counts == expected.counts  # COCO RLE is canonical: same counts, same pixels
        assert np.array_equal(got.masks, masks) and np.array_equal(got.scores, scores.astype(np.float32))


def test_boxes_are_scaled_to_pixels_and_clipped():
    outputs = random_outputs()
    outputs.pred_boxes[0, 0] = torch.tensor([-0.1, 0.25, 0.5, 1.2])
    outputs.pred_logits[0, 0] = 5.0
    got = instance_masks(outputs, 100, 200, 0.5, "thing")
    assert got.boxes[0].tolist() == [0.0, 25.0, 100.0, 100.0]


def test_peak_memory_stays_far_below_the_whole_mask_array():
    # 1 MP, 40 masks: the whole bool array is 40 MB. With one 4 MB float32 mask per chunk, numpy never holds more
    # than one mask's RLE band at a time (the chunk itself is torch's memory, at most chunk_bytes by construction).
    height = width = 1000
    blobs = detections(width, height, 40, "object")[:40]
    outputs = model_outputs(blobs, width, height)
    tracemalloc.start()
    try:
        masks = instance_masks(outputs, height, width, 0.5, "object", chunk_bytes=4 * height * width)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(masks) == 40
    whole = 40 * height * width
    assert peak < whole / 8, f"peak {peak / 1e6:.1f} MB against {whole / 1e6:.0f} MB for the whole array"


def test_the_benchmark_segmenter_returns_the_scenes_blobs_through_the_post_processing():
    from PIL import Image

    segmenter = PostProcessedSegmenter(6)
    masks = segmenter.segment(Image.new("RGB", (300, 200)), "object")
    blobs = detections(300, 200, 6, "object")
    assert len(masks) == len(blobs) == segmenter.returned == 8  # 6 blobs and 2 near-duplicates
    assert np.allclose(masks.scores, [b.score for b in blobs], atol=1e-6)
    for blob, area in zip(blobs, masks.areas):
        drawn = blob.mask(300, 200).sum()
        assert abs(int(area) - int(drawn)) <= 0.35 * drawn  # the same blob, drawn from 288 px logits
