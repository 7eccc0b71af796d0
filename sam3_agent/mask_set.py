"""A set of instance masks held once as COCO RLE (``Masks``): what SAM 3 returns, what a round shows, what a trace stores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import rle


class Masks:
    """A set of instance masks for one image, held once and compactly as COCO RLE (``rle``).

    Build it from a bool (N, H, W) array (encoded once, here) or from RLE counts (``Masks.from_rle``). Areas,
    tight boxes, subsets, overlap tests and trace/COCO output all read the RLE; pixels are decoded only where
    they are needed (``mask(i)`` for one mask, ``masks`` for all). Immutable.

    Args:
        masks: bool (N, H, W) at the original image resolution (any non-zero value counts as set), or an
            iterable of bool (H, W) masks (then ``size`` is required; encoded one at a time).
        scores: float32 (N,), SAM 3 detection scores in [0, 1].
        boxes: float32 (N, 4), xyxy, pixels, as SAM 3 gave them (``tight_boxes`` are read from the masks).
        phrase: the text prompt that produced them.
        size: (H, W), needed when ``masks`` is not an array.

    Attributes:
        masks: bool (N, H, W), decoded on every access (N x H x W bytes: prefer ``mask(i)``).
        scores, boxes, phrase: as given (scores float32 (N,), boxes float32 (N, 4)).
        height, width: the mask size in pixels.
        counts: tuple of N ``bytes``, COCO compressed RLE counts (column-major runs).

    Raises:
        ValueError: masks that are not (N, H, W), or counts of scores / boxes that differ from N.
    """

    __slots__ = ("_counts", "height", "width", "scores", "boxes", "phrase", "_areas", "_tight")

    def __init__(
        self,
        masks: Any,
        scores: Any,
        boxes: Any,
        phrase: str = "",
        *,
        size: tuple[int, int] | None = None,
    ) -> None:
        if isinstance(masks, np.ndarray) or hasattr(masks, "shape"):
            arr = np.asarray(masks)
            if arr.ndim != 3:
                raise ValueError(f"masks must be a bool array of shape (N, H, W); got shape {arr.shape}")
            height, width = int(arr.shape[1]), int(arr.shape[2])
            counts = rle.encode(arr, height, width)
        else:
            if size is None:
                raise ValueError("give size=(H, W) with masks that are not an (N, H, W) array")
            height, width = int(size[0]), int(size[1])
            counts = rle.encode(masks, height, width)
        self._init(counts, height, width, scores, boxes, phrase)

    def _init(self, counts: tuple[bytes, ...], height: int, width: int, scores: Any, boxes: Any, phrase: str) -> None:
        n = len(counts)
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4) if np.size(boxes) else np.zeros((0, 4), np.float32)
        if scores.shape[0] != n or boxes.shape[0] != n:
            raise ValueError(
                f"masks, scores and boxes must describe the same N masks: got {n} masks, {scores.shape[0]} scores "
                f"and {boxes.shape[0]} boxes (boxes must be (N, 4))"
            )
        self._counts = counts
        self.height, self.width = height, width
        self.scores, self.boxes, self.phrase = scores, boxes, phrase
        self._areas: np.ndarray | None = None
        self._tight: np.ndarray | None = None

    @classmethod
    def from_rle(
        cls, counts: Sequence[bytes | str], scores: Any, boxes: Any, phrase: str = "", *, size: tuple[int, int]
    ) -> Masks:
        """Masks from trusted COCO compressed counts (``bytes`` or ASCII ``str``) of masks of ``size`` (H, W).

        Counts read from a file must be checked first (``rle.decode_rle`` validates them).
        """
        out = cls.__new__(cls)
        held = tuple(c.encode("ascii") if isinstance(c, str) else bytes(c) for c in counts)
        out._init(held, int(size[0]), int(size[1]), scores, boxes, phrase)
        return out

    @property
    def counts(self) -> tuple[bytes, ...]:
        return self._counts

    @property
    def size(self) -> tuple[int, int]:
        """(H, W) in pixels."""
        return self.height, self.width

    @property
    def masks(self) -> np.ndarray:
        return rle.decode_all(self._counts, self.height, self.width)

    def mask(self, index: int) -> np.ndarray:
        """Mask ``index`` (0-based) as bool (H, W), C-ordered."""
        return rle.decode_one(self._counts[index], self.height, self.width)

    @property
    def areas(self) -> np.ndarray:
        """Pixels in each mask, int64 (N,)."""
        if self._areas is None:
            self._areas = rle.areas(self._counts, self.height, self.width)
        return self._areas

    @property
    def tight_boxes(self) -> np.ndarray:
        """Tight boxes around the masks, float32 (N, 4), xyxy pixels, x2/y2 exclusive; zeros for an empty mask."""
        if self._tight is None:
            self._tight = rle.tight_boxes(self._counts, self.height, self.width)
        return self._tight

    def __len__(self) -> int:
        return len(self._counts)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Masks)
            and self.phrase == other.phrase
            and self.size == other.size
            and self._counts == other._counts  # COCO compressed RLE is canonical: equal masks, equal counts
            and np.allclose(self.scores, other.scores, atol=1e-6)
            and np.allclose(self.boxes, other.boxes, atol=1e-3)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Masks({len(self)} x {self.height}x{self.width}, phrase={self.phrase!r})"

    def subset(self, indices: Sequence[int]) -> Masks:
        """The masks at the given 0-based indices, in that order (the RLE is shared, not encoded again)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = Masks.from_rle([self._counts[i] for i in idx], self.scores[idx], self.boxes[idx], self.phrase,
                             size=self.size)
        if self._areas is not None:
            out._areas = self._areas[idx]
        if self._tight is not None:
            out._tight = self._tight[idx]
        return out

    def renamed(self, phrase: str) -> Masks:
        """The same masks under another phrase (the RLE is shared)."""
        out = Masks.from_rle(self._counts, self.scores, self.boxes, phrase, size=self.size)
        out._areas, out._tight = self._areas, self._tight
        return out

    @staticmethod
    def empty(height: int, width: int, phrase: str = "") -> Masks:
        """Zero masks for an image of the given size."""
        return Masks.from_rle((), np.zeros((0,), np.float32), np.zeros((0, 4), np.float32), phrase,
                              size=(height, width))


def to_coco_results(masks: Masks, image_id: int = 1, category_id: int = 1,
                    checks: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The masks in COCO results format (one dict per mask, in order), read from their RLE (no encoding).

    Each dict: ``image_id`` int, ``category_id`` int, ``segmentation`` compressed RLE with
    ``counts`` as str, ``bbox`` ``[x, y, w, h]`` float pixels (the tight box, as ``pycocotools.mask.toBbox``),
    ``score`` float, ``area`` int pixel count (``pycocotools.mask.area``); with ``checks`` (one per mask:
    ``verification.final_mask_checks``) also ``verification``: ``"confirmed"``, ``"not_confirmed"`` or
    ``"not_examined"``.

    Raises:
        ValueError: ``checks`` of another length than the masks.
    """
    if checks is not None and len(checks) != len(masks):
        raise ValueError(f"{len(checks)} verification states for {len(masks)} masks")
    boxes = masks.tight_boxes
    results = [
        {
            "image_id": int(image_id),
            "category_id": int(category_id),
            "segmentation": {"size": [masks.height, masks.width], "counts": rle.text(counts)},
            "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])],
            "score": float(score),
            "area": int(area),
        }
        for counts, box, area, score in zip(masks.counts, boxes, masks.areas, masks.scores)
    ]
    for result, check in zip(results, checks or ()):
        result["verification"] = check
    return results
