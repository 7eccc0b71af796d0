"""A zero-cost SAM 3 whose answers go through the real post-processing (``sam.segmenter.instance_masks``), or not.

The non-model benchmark's stand-in SAM 3 hands over what SAM 3's model would output for the scene's blobs
(``scene.detections``): per query a class logit and a mask logit map at SAM 3's mask resolution (``scene.MASK_SIDE``
px square, ``scene.mask_logits``), normalised xyxy boxes, and low-scoring padding queries up to SAM 3's query count.
The masks the agent receives are then made by the product's own code, the same call ``Sam3Segmenter.segment``
makes: upsampled to the photo's size a chunk at a time and encoded as RLE, so the benchmark's time and peak memory
include the real post-processing at every size. With ``postprocess=False`` it hands over the blobs' full-size masks
instead (made outside the measured time, as the reference's stand-in does), which the product only encodes: the row
that compares like with like against a reference that is not given the upsampling.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image

from ..mask_set import Masks
from ..sam.segmenter import UPSAMPLE_CHUNK_BYTES, instance_masks
from .scene import Blob, detections, mask_logits

QUERIES = 200  # SAM 3's DETR queries per image
PADDING_SCORE = 0.01  # the queries that found nothing


def _logit(probability: float) -> float:
    return float(np.log(probability / (1.0 - probability)))


def model_outputs(blobs: list[Blob], width: int, height: int) -> SimpleNamespace:
    """What ``Sam3Model`` would return for one image of ``width`` x ``height`` whose detections are ``blobs``:
    ``pred_logits`` (1, Q), ``presence_logits`` None, ``pred_boxes`` (1, Q, 4) normalised xyxy, ``pred_masks``
    (1, Q, MASK_SIDE, MASK_SIDE) logits (``scene.mask_logits``); Q = max(len(blobs), QUERIES), the extra queries
    scoring ``PADDING_SCORE`` with empty masks."""
    masks = mask_logits(blobs, width, height, QUERIES)
    queries = len(masks)
    scores = np.full(queries, _logit(PADDING_SCORE), dtype=np.float32)
    boxes = np.zeros((queries, 4), dtype=np.float32)
    for index, blob in enumerate(blobs):
        scores[index] = _logit(blob.score)
        boxes[index] = np.asarray(blob.box(width, height), dtype=np.float32) / [width, height, width, height]
    return SimpleNamespace(pred_logits=torch.from_numpy(scores)[None], presence_logits=None,
                           pred_boxes=torch.from_numpy(boxes)[None], pred_masks=torch.from_numpy(masks)[None])


class PostProcessedSegmenter:
    """Zero-cost SAM 3 (``model_outputs`` of the scene) behind the real post-processing, or, with ``postprocess``
    False, handing over the blobs' full-size masks. ``model_cpu`` is the CPU time spent making the model outputs or
    the full-size masks (not ours); ``returned`` counts the masks handed over."""

    name = "sam3-outputs-segmenter"

    def __init__(self, count: int, chunk_bytes: int = UPSAMPLE_CHUNK_BYTES, postprocess: bool = True) -> None:
        self.count, self.chunk_bytes, self.postprocess = count, chunk_bytes, postprocess
        self.model_cpu = 0.0
        self.returned = 0

    def segment(self, image: Image.Image, phrase: str, score_threshold: float = 0.5) -> Masks:
        started = time.thread_time()
        width, height = image.size
        blobs = detections(width, height, self.count, phrase)
        if not self.postprocess:
            kept = [b for b in blobs if b.score >= score_threshold]
            full = np.stack([b.mask(width, height) for b in kept]) if kept else np.zeros((0, height, width), bool)
            scores = np.array([b.score for b in kept], dtype=np.float32)
            boxes = np.array([b.box(width, height) for b in kept], dtype=np.float32).reshape(-1, 4)
            self.model_cpu += time.thread_time() - started
            masks = Masks(full, scores, boxes, phrase)  # the product's part: encoding the masks it is handed
            self.returned += len(masks)
            return masks
        outputs = model_outputs(blobs, width, height)
        self.model_cpu += time.thread_time() - started
        masks = instance_masks(outputs, height, width, score_threshold, phrase, chunk_bytes=self.chunk_bytes)
        self.returned += len(masks)
        return masks
