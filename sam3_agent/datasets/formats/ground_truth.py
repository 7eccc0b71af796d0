"""Evaluation samples and their ground truth, rasterised on demand at the image's size.

A sample is one query on one image with the region it refers to (``target``) and, for some benchmarks, a region
excluded from scoring (``ignore``). Each benchmark describes regions its own way; the three kinds here turn them
into masks only when a sample is scored (a dataset of thousands of images never sits in memory as masks):

- ``PolygonTruth``: ReasonSeg's polygons, drawn by its own rules (``reasonseg``).
- ``CocoTruth``: a COCO instance annotation's ``segmentation`` (polygons or RLE), as RefCOCO/+/g use (``refcoco``).
- ``RleTruth``: COCO RLE masks (the simple JSONL format, ``jsonl_gt``).

Each kind also says which frame of a photo with an EXIF orientation its format annotates (``frame``: ``UPRIGHT`` or
``STORED``) and the image size its file declares (``declared_size``), from which ``scoring.frames`` decides which
frame a sample really is in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import cv2
import numpy as np
from pycocotools import mask as coco_mask

from ...errors import InputError
from ...rle import decode_rle
from ..batch.items import BatchItem

UPRIGHT = "upright"  # after the photo's EXIF orientation is applied (what the agent sees)
STORED = "stored"  # the pixel rows as the file stores them


def _declared(height: int, width: int) -> tuple[int, int] | None:
    return (height, width) if height and width else None


class GroundTruth(Protocol):
    """The regions of one sample."""

    frame: ClassVar[str]  # the frame this format annotates (``UPRIGHT`` or ``STORED``; ``scoring.frames``)

    @property
    def declared_size(self) -> tuple[int, int] | None:
        """``(height, width)`` of the image as the ground-truth file declares it, or ``None`` when it does not."""
        ...

    def masks(self, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """``(target, ignore)``: bool (H, W) each at the image's size; ``ignore`` pixels are left out of scoring.

        Raises:
            InputError: the ground truth does not fit an image of this size.
        """
        ...


@dataclass(frozen=True)
class EvalSample:
    """One query on one image with its ground truth.

    Attributes:
        id: unique in the dataset (names the batch item).
        image: path of the image file.
        image_ref: the image as the dataset names it (for reports).
        query: the text query.
        truth: the target / ignore regions.
        attributes: facts to break the metrics down by (e.g. ``{"query_type": "long"}``; strings).
    """

    id: str
    image: Path
    image_ref: str
    query: str
    truth: GroundTruth
    attributes: dict[str, str] = field(default_factory=dict)

    def item(self) -> BatchItem:
        """The batch item that runs this sample."""
        return BatchItem(self.id, self.image, self.query, self.image_ref)


# ---------------------------------------------------------------- polygons (ReasonSeg)


@dataclass(frozen=True)
class Polygon:
    """A closed polygon: ``points`` ``[x, y]`` in pixels (image coordinates, x right, y down)."""

    points: tuple[tuple[float, float], ...]
    ignore: bool = False


def _draw(canvas: np.ndarray, polygon: Polygon, value: int) -> None:
    # ReasonSeg's published masks: vertices truncated to integers, the polygon filled and its outline drawn
    # one pixel wide with the same value (the outline is part of the region).
    points = np.array([polygon.points], dtype=np.int32)
    cv2.polylines(canvas, points, True, value, 1)
    cv2.fillPoly(canvas, points, value)


@dataclass(frozen=True)
class PolygonTruth:
    """Target and ignore polygons, rasterised as ReasonSeg's own tooling does: each polygon's area is measured
    alone, then polygons are drawn largest first (ties: later first) so a smaller polygon inside a larger one
    wins, targets as 1 and ignore regions as 255; pixels left at 1 are the target, at 255 ignored.

    Attributes:
        polygons: in file order.
        height, width: the file's ``imageHeight``/``imageWidth`` (0 when it has none).
    """

    polygons: tuple[Polygon, ...]
    height: int = 0
    width: int = 0
    frame: ClassVar[str] = UPRIGHT

    @property
    def declared_size(self) -> tuple[int, int] | None:
        return _declared(self.height, self.width)

    def masks(self, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        areas = []
        for polygon in self.polygons:
            alone = np.zeros((height, width), dtype=np.uint8)
            _draw(alone, polygon, 1)
            areas.append(int(alone.sum()))
        canvas = np.zeros((height, width), dtype=np.uint8)
        for index in np.argsort(np.asarray(areas, dtype=np.int64), kind="stable")[::-1]:
            polygon = self.polygons[int(index)]
            _draw(canvas, polygon, 255 if polygon.ignore else 1)
        return canvas == 1, canvas == 255


# ---------------------------------------------------------------- COCO annotations (RefCOCO/+/g)


@dataclass(frozen=True)
class CocoTruth:
    """A COCO instance annotation's ``segmentation`` (a list of polygons ``[x1, y1, x2, y2, ...]`` or an RLE) on an
    image of the declared size; several polygons form one region (their union).

    Attributes:
        segmentation: the annotation's ``segmentation`` as in ``instances.json``.
        height, width: the image size ``instances.json`` declares.
    """

    segmentation: Any
    height: int
    width: int
    frame: ClassVar[str] = STORED

    @property
    def declared_size(self) -> tuple[int, int] | None:
        return _declared(self.height, self.width)

    def masks(self, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        if (height, width) != (self.height, self.width):
            raise InputError(f"the annotation is for a {self.width}x{self.height} image but the image is "
                             f"{width}x{height}")
        target = coco_segmentation_mask(self.segmentation, height, width)
        return target, np.zeros((height, width), dtype=bool)


def coco_segmentation_mask(segmentation: Any, height: int, width: int) -> np.ndarray:
    """A COCO ``segmentation`` (polygon list, uncompressed RLE with list counts, or compressed RLE) as one
    bool (H, W) mask, through ``pycocotools.mask`` (several parts are merged).

    Raises:
        InputError: not a COCO segmentation, or an RLE of another size.
    """
    try:
        if isinstance(segmentation, list):
            polygons = [[float(v) for v in polygon] for polygon in segmentation if len(polygon) >= 6]
            if not polygons:
                return np.zeros((height, width), dtype=bool)
            rle = coco_mask.merge(coco_mask.frPyObjects(polygons, height, width))
            return coco_mask.decode(rle).astype(bool)
        if isinstance(segmentation, dict):
            return decode_rle([segmentation], height=height, width=width)[0]
    except (ValueError, TypeError) as error:
        raise InputError(f"a COCO segmentation could not be read: {error}") from None
    raise InputError(f"a COCO segmentation must be a list of polygons or an RLE, got {type(segmentation).__name__}")


# ---------------------------------------------------------------- RLE (simple JSONL)


@dataclass(frozen=True)
class RleTruth:
    """Target (and optional ignore) masks as COCO RLE dicts (``{"size": [H, W], "counts": str | [int]}``); several
    target RLEs form one region (their union); no RLE means the query refers to nothing ("no target")."""

    target: tuple[dict[str, Any], ...]
    ignore: tuple[dict[str, Any], ...] = ()
    height: int = 0
    width: int = 0
    frame: ClassVar[str] = UPRIGHT

    @property
    def declared_size(self) -> tuple[int, int] | None:
        return _declared(self.height, self.width)

    def masks(self, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        if self.height and (height, width) != (self.height, self.width):
            raise InputError(f"the ground truth is {self.width}x{self.height} but the image is {width}x{height}")

        def union(rles: tuple[dict[str, Any], ...]) -> np.ndarray:
            if not rles:
                return np.zeros((height, width), dtype=bool)
            try:
                return decode_rle(list(rles), height=height, width=width).any(axis=0)
            except ValueError as error:
                raise InputError(f"a ground-truth RLE could not be decoded: {error}") from None

        return union(self.target), union(self.ignore)
