"""Masks as polygons, for COCO polygon segmentation and YOLO segmentation labels.

Coordinates are (x, y) in original-image pixels on the COCO convention: pixel (col, row) covers [col, col + 1) x
[row, row + 1), so its centre is (col + 0.5, row + 0.5).

**Outlines.** OpenCV's ``findContours`` (``RETR_CCOMP``: the outer contour of each part and the contours of the holes
directly inside it) runs on the mask at twice its size (each pixel a 2 x 2 block), and each vertex is mapped back to
the centre of its half-pixel: vertices lie a quarter pixel inside the mask's pixel edges. So every mask pixel's
centre is inside the polygon by a quarter pixel or more and every other pixel's centre outside it, and a reader that
fills polygons at pixel centres (pycocotools' ``frPyObjects``) gives back exactly the mask; one that truncates the
vertices to whole pixels and fills them with their edges (OpenCV ``fillPoly``, as Ultralytics' ``polygon2mask`` does)
also does, apart from the cuts below.

**Holes.** A COCO polygon segmentation is a list of polygons whose union is the mask (pycocotools merges them), so a
hole cannot be a polygon of its own, and a YOLO line is one polygon. Each hole is therefore joined to the outline of
its part by a cut of zero width: the polygon runs from a vertex of the outline to the hole, around the hole in the
opposite direction, and back along the same cut. Readers that fill by crossings (pycocotools) or by winding number
both leave the hole empty; ``fillPoly`` also paints the one-pixel line of each cut. For YOLO, whose line holds one
polygon per object, the parts of a mask are joined by cuts the same way (each part to the nearest one already
joined, by their bounding boxes), as Ultralytics' own COCO converter joins segments. What is lost is measured on
real-photo masks by ``tests/test_polygons.py`` and stated in docs/correcting.md.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import cv2
import numpy as np

from ..errors import InputError, TraceFormatError
from ..trace.safe_decode import DecodeBudget, masks_for_image

Polygon = np.ndarray  # float64 (K, 2): (x, y) vertices in pixels, closed implicitly (last joins first)
PAIR_SAMPLES = 32  # vertices of a hole (or part) tried when choosing where its cut starts: cost grows with it


def _signed_area(loop: Polygon) -> float:
    x, y = loop[:, 0], loop[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def _parts(mask: np.ndarray) -> list[tuple[Polygon, list[Polygon]]]:
    """(outline, holes) of each part of a bool (H, W) mask: the outlines turn one way, the holes the other."""
    rows, cols = np.nonzero(mask)
    if rows.size == 0:
        return []
    top, left = int(rows.min()), int(cols.min())
    crop = np.zeros((int(rows.max()) - top + 3, int(cols.max()) - left + 3), dtype=np.uint8)  # a pixel of margin
    crop[1:-1, 1:-1] = mask[top:int(rows.max()) + 1, left:int(cols.max()) + 1]
    doubled = np.repeat(np.repeat(crop, 2, axis=0), 2, axis=1)
    contours, hierarchy = cv2.findContours(doubled, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    # a vertex at doubled pixel p is the centre of that half-pixel, (p + 0.5) / 2 in the crop, less its margin
    loops = [(c.reshape(-1, 2).astype(np.float64) + 0.5) / 2.0 - 1.0 + (left, top) for c in contours]
    parts: dict[int, tuple[Polygon, list[Polygon]]] = {}
    for k, (_, _, _, parent) in enumerate(hierarchy[0]):
        if parent < 0:
            loop = loops[k]
            parts[k] = (loop if _signed_area(loop) > 0 else loop[::-1], [])
    for k, (_, _, _, parent) in enumerate(hierarchy[0]):
        if parent >= 0:
            loop = loops[k]
            parts[int(parent)][1].append(loop if _signed_area(loop) < 0 else loop[::-1])
    return list(parts.values())


def _nearest(loop: Polygon, point: np.ndarray) -> int:
    return int(np.argmin(((loop - point) ** 2).sum(axis=1)))


def _join(loops: list[Polygon], hangs: dict[int, tuple[int, int, int]]) -> Polygon:
    """One polygon through every loop: loop 0 is the root; loop k > 0 hangs from loop ``hangs[k][0]`` at its vertex
    ``hangs[k][1]`` and is entered at its own vertex ``hangs[k][2]``; each cut is walked there and back."""
    children: dict[tuple[int, int], list[int]] = defaultdict(list)
    for k, (parent, at, _) in sorted(hangs.items()):
        children[(parent, at)].append(k)
    out: list[np.ndarray] = []
    stack = [(0, 0, 0)]  # (loop, entry vertex, step); iterative: a chain of many parts must not exhaust recursion
    while stack:
        k, entry, step = stack.pop()
        n = len(loops[k])
        last = n - 1 if k == 0 else n  # a hanging loop comes back to its entry vertex before the cut back
        if step > last:
            if k != 0:
                parent, at, _ = hangs[k]
                out.append(loops[parent][at])
            continue
        vertex = (entry + step) % n
        out.append(loops[k][vertex])
        stack.append((k, entry, step + 1))
        if step < n:
            for child in reversed(children.get((k, vertex), [])):
                stack.append((child, hangs[child][2], 0))
    return np.asarray(out, dtype=np.float64)


def _closest_pair(parent: Polygon, child: Polygon) -> tuple[int, int]:
    """(parent vertex, child vertex) about as close as any pair: the parent's vertex nearest to any of up to
    ``PAIR_SAMPLES`` child vertices spread around it, then the child's vertex nearest to that one (exact for the
    sampled vertices; bounded cost for a long outline)."""
    step = max(1, len(child) // PAIR_SAMPLES)
    sampled = child[::step]
    # only parent vertices no farther from the child's box than the parent is from one child vertex can do better
    reach = np.sqrt(((parent - sampled[0]) ** 2).sum(axis=1).min())
    near = np.flatnonzero(((parent >= sampled.min(axis=0) - reach) & (parent <= sampled.max(axis=0) + reach)).all(axis=1))
    distances = ((parent[near, None, :] - sampled[None, :, :]) ** 2).sum(axis=2)  # (len(near), <= PAIR_SAMPLES)
    at = int(near[np.unravel_index(int(np.argmin(distances)), distances.shape)[0]])
    return at, _nearest(child, parent[at])


def _box_gaps(lows: np.ndarray, highs: np.ndarray, source: int) -> np.ndarray:
    """The gap between loop ``source``'s bounding box and every loop's (0 where they overlap), pixels."""
    apart = np.maximum(0.0, np.maximum(lows - highs[source], lows[source] - highs))
    return np.hypot(apart[:, 0], apart[:, 1])


def _cut_tree(loops: list[Polygon], gaps_from: Any) -> dict[int, tuple[int, int, int]]:
    """Where each loop but the first hangs (see ``_join``): a spanning tree grown from loop 0 that joins the loop
    nearest to those already joined (``gaps_from(k)``: a cheap distance from loop k to every loop), along a short
    cut (``_closest_pair``)."""
    joined = np.zeros(len(loops), dtype=bool)
    joined[0] = True
    gap = gaps_from(0).astype(np.float64)
    nearest = np.zeros(len(loops), dtype=np.int64)
    hangs = {}
    for _ in range(len(loops) - 1):
        k = int(np.argmin(np.where(joined, np.inf, gap)))
        parent = int(nearest[k])
        hangs[k] = (parent, *_closest_pair(loops[parent], loops[k]))
        joined[k] = True
        distance = gaps_from(k)
        closer = distance < gap
        gap[closer], nearest[closer] = distance[closer], k
    return hangs


def _with_holes(outline: Polygon, holes: list[Polygon]) -> Polygon:
    """The outline with its holes cut in: each hole hangs from the outline or from a hole near it."""
    if not holes:
        return outline
    loops = [outline, *holes]
    lows, highs = np.stack([p.min(axis=0) for p in loops]), np.stack([p.max(axis=0) for p in loops])
    # how far a hole's box lies inside the outline's box, on its nearest side: a cheap distance to the outline
    inside = np.minimum(lows - lows[0], highs[0] - highs).min(axis=1).clip(min=0.0)

    def gaps_from(source: int) -> np.ndarray:
        if source == 0:
            return inside
        distance = _box_gaps(lows, highs, source)
        distance[0] = inside[source]
        return distance

    return _join(loops, _cut_tree(loops, gaps_from))


def mask_polygons(mask: np.ndarray) -> list[Polygon]:
    """The polygons of a COCO polygon segmentation of ``mask``: one per part (8-connected), its holes cut in.

    Args:
        mask: bool (H, W).

    Returns:
        float64 (K, 2) arrays of (x, y) pixel coordinates (see the module docstring), K >= 4, largest part first;
        ``[]`` for an empty mask.
    """
    joined = [(_with_holes(outline, holes), abs(_signed_area(outline))) for outline, holes in _parts(mask)]
    return [polygon for polygon, _ in sorted(joined, key=lambda pair: -pair[1])]


def mask_polygon(mask: np.ndarray) -> Polygon | None:
    """One polygon for all of ``mask`` (a YOLO segmentation line): its parts joined by cuts, holes cut in.

    Each part hangs from the nearest part already joined (by the gap between their bounding boxes), along a short
    cut between the two; the largest part is the root.

    Returns:
        float64 (K, 2) (x, y) pixel coordinates, K >= 4; ``None`` for an empty mask.
    """
    polygons = mask_polygons(mask)
    if not polygons:
        return None
    lows, highs = np.stack([p.min(axis=0) for p in polygons]), np.stack([p.max(axis=0) for p in polygons])
    return _join(polygons, _cut_tree(polygons, lambda source: _box_gaps(lows, highs, source)))


def polygon_document(document: dict[str, Any], what: str = "the COCO document") -> dict[str, Any]:
    """A copy of a COCO instance document whose RLE segmentations are polygon lists ``[[x1, y1, x2, y2, ...], ...]``
    (:func:`mask_polygons`; ``bbox`` and ``area`` stay those of the mask, exact). Each image's size is its entry in
    ``images``.

    Raises:
        InputError: an annotation whose image is not listed, or whose RLE is malformed or of another size.
    """
    sizes = {int(image["id"]): (int(image["height"]), int(image["width"])) for image in document.get("images", [])}
    budget = DecodeBudget()
    annotations = []
    for number, annotation in enumerate(document.get("annotations", []), start=1):
        image_id = int(annotation["image_id"])
        if image_id not in sizes:
            raise InputError(f"annotation {number} of {what} is on image {image_id}, which it does not list")
        height, width = sizes[image_id]
        try:
            mask = masks_for_image([annotation["segmentation"]], height, width, f"annotation {number} of {what}",
                                   budget)[0]
        except TraceFormatError as error:  # the decoder's message names the annotation and what is wrong
            raise InputError(str(error)) from None
        polygons = [[float(v) for v in polygon.ravel()] for polygon in mask_polygons(mask)]
        annotations.append({**annotation, "segmentation": polygons})
    return {**document, "annotations": annotations}
