"""COCO RLE helpers: our encoder and window decoder give exactly what pycocotools gives."""

from __future__ import annotations

import numpy as np
import pytest
from pycocotools import mask as coco_mask

from sam3_agent import rle


def random_masks(count: int, seed: int):
    """Masks of every kind that trips run-length code: noise, empty, full, boxes, lines, one pixel, edges."""
    rng = np.random.default_rng(seed)
    for t in range(count):
        h, w = (int(v) for v in rng.integers(1, 40, 2))
        kind = t % 6
        mask = np.zeros((h, w), dtype=bool)
        if kind == 0:
            mask = rng.random((h, w)) < rng.random()
        elif kind == 1:
            mask[:] = t % 12 == 1  # empty or full
        elif kind == 2:
            y0, y1 = sorted(rng.integers(0, h, 2))
            x0, x1 = sorted(rng.integers(0, w, 2))
            mask[y0 : y1 + 1, x0 : x1 + 1] = True
        elif kind == 3:
            mask[:, rng.integers(0, w)] = True  # a full column: runs cross column ends
            mask[rng.integers(0, h), :] = True
        elif kind == 4:
            mask[rng.integers(0, h), rng.integers(0, w)] = True
        else:
            mask[0, :] = mask[-1, :] = mask[:, 0] = mask[:, -1] = True
        yield mask


def coco_counts(mask: np.ndarray) -> bytes:
    return coco_mask.encode(np.asfortranarray(mask[:, :, None].astype(np.uint8)))[0]["counts"]


def test_encode_gives_the_counts_pycocotools_writes():
    for mask in random_masks(1200, seed=1):
        h, w = mask.shape
        assert rle.encode([mask], h, w) == (coco_counts(mask),)


def test_encode_takes_an_array_an_iterable_and_non_bool_masks():
    masks = np.stack(list(random_masks(12, seed=2))[:1] * 3)
    h, w = masks.shape[1:]
    expected = tuple(coco_counts(m) for m in masks)
    assert rle.encode(masks, h, w) == expected
    assert rle.encode(iter(list(masks)), h, w) == expected
    assert rle.encode(masks.astype(np.uint8) * 7, h, w) == expected


def test_encode_refuses_a_mask_of_another_size():
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) where \(4, 6\) was expected"):
        rle.encode([np.zeros((4, 5), bool)], 4, 6)


def test_decode_window_gives_the_pixels_pycocotools_decodes():
    rng = np.random.default_rng(3)
    for mask in random_masks(1500, seed=4):
        h, w = mask.shape
        counts = coco_counts(mask)
        x0, x1 = sorted(int(v) for v in rng.integers(0, w + 1, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, h + 1, 2))
        window = rle.decode_window(counts, h, (x0, y0, x1, y1))
        assert window.dtype == bool and window.flags.c_contiguous
        assert np.array_equal(window, coco_mask.decode({"size": [h, w], "counts": counts}).astype(bool)[y0:y1, x0:x1])


def test_run_lengths_read_the_compressed_counts():
    mask = np.zeros((5, 4), bool)
    mask[1:3, 1] = True  # column-major: 6 background, 2 foreground, 12 background
    assert rle.run_lengths(coco_counts(mask)).tolist() == [6, 2, 12]
    with pytest.raises(ValueError, match="outside the COCO RLE alphabet"):
        rle.run_lengths(b"abc~")
    with pytest.raises(ValueError, match="ends in the middle of a run length"):
        rle.run_lengths(b"0a")


def test_areas_boxes_and_intersections_come_from_the_runs():
    masks = np.stack(list(random_masks(6, seed=5))[2:3] * 2)
    masks[1, 0, 0] = True
    h, w = masks.shape[1:]
    counts = rle.encode(masks, h, w)
    areas = rle.areas(counts, h, w)
    assert areas.tolist() == [int(m.sum()) for m in masks]
    shared = rle.intersections(counts[0], counts, h, w, int(areas[0]))
    assert shared.tolist() == [int((masks[0] & m).sum()) for m in masks]
    ys, xs = np.nonzero(masks[0])
    assert rle.tight_boxes(counts, h, w)[0].tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
