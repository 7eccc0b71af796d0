"""The fixed scene of the non-model benchmark: a photo at a given size and the masks a stand-in SAM 3 returns.

Imports only numpy and Pillow, so the reference harness (``reference_loop``, run by another interpreter) draws
exactly the same masks as ours.

Per phrase, the stand-in returns ``count`` blobs (wavy ellipses on a jittered grid, scores 0.95 down to 0.6) and,
for every fifth blob, a slightly larger copy of it at score 0.55, which the overlap filter removes: so each run
verifies and selects exactly ``count`` masks, and the filter has real overlapping pairs to compare.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

# The package's assets folder, found by path: the reference's interpreter loads this module as a file, where a
# relative import (``..package_files``) has no package to resolve against.
ASSETS = Path(__file__).resolve().parents[1] / "assets"
PHRASES = ("object", "thing")
QUERY = "every object"
DUPLICATE_EVERY = 5  # every fifth blob also comes as a near-duplicate the overlap filter drops


def photo_file(width: int, height: int) -> bytes:
    """``assets/astronaut.jpg`` resized (bicubic) to ``width`` x ``height``, as JPEG bytes (quality 90): the file
    a user would upload."""
    with Image.open(ASSETS / "astronaut.jpg") as source:
        image = source.convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@dataclass(frozen=True)
class Blob:
    """One detection: a wavy ellipse centred at (cx, cy) with radii (rx, ry) px; ``grow`` > 1 for a duplicate."""

    cx: float
    cy: float
    rx: float
    ry: float
    phase: float
    score: float
    grow: float = 1.0

    def box(self, width: int, height: int) -> tuple[int, int, int, int]:
        """A box (x0, y0, x1, y1) that holds the whole blob, clipped to the image (SAM 3's boxes are not tight)."""
        reach = 1.2 * self.grow
        return (max(0, int(self.cx - reach * self.rx)), max(0, int(self.cy - reach * self.ry)),
                min(width, int(self.cx + reach * self.rx) + 1), min(height, int(self.cy + reach * self.ry) + 1))

    def window(self, width: int, height: int) -> tuple[tuple[int, int, int, int], np.ndarray]:
        """The blob's pixels inside ``box``: (box, bool (y1 - y0, x1 - x0))."""
        x0, y0, x1, y1 = self.box(width, height)
        yy, xx = np.mgrid[y0:y1, x0:x1]
        u, v = (xx - self.cx) / (self.rx * self.grow), (yy - self.cy) / (self.ry * self.grow)
        radius = 1.0 + 0.12 * np.sin(5.0 * np.arctan2(v, u) + self.phase)
        return (x0, y0, x1, y1), u * u + v * v <= radius * radius

    def mask(self, width: int, height: int) -> np.ndarray:
        """bool (H, W)."""
        out = np.zeros((height, width), dtype=bool)
        (x0, y0, x1, y1), inside = self.window(width, height)
        out[y0:y1, x0:x1] = inside
        return out


def detections(width: int, height: int, count: int, phrase: str) -> list[Blob]:
    """What the stand-in SAM 3 returns for ``phrase``: ``count`` blobs, then their near-duplicates."""
    rng = np.random.default_rng(sum(map(ord, phrase)) * 1000 + count)
    columns = max(1, round(math.sqrt(count * width / height)))
    rows = -(-count // columns)
    cell_w, cell_h = width / columns, height / rows
    blobs = []
    for i, score in enumerate(np.linspace(0.95, 0.6, count)):
        cx = (i % columns + 0.5 + rng.uniform(-0.1, 0.1)) * cell_w
        cy = (i // columns + 0.5 + rng.uniform(-0.1, 0.1)) * cell_h
        blobs.append(Blob(cx, cy, cell_w * rng.uniform(0.25, 0.38), cell_h * rng.uniform(0.25, 0.38),
                          rng.uniform(0.0, 6.0), round(float(score), 4)))
    duplicates = [Blob(b.cx, b.cy, b.rx, b.ry, b.phase, 0.55, grow=1.08) for b in blobs[::DUPLICATE_EVERY]]
    return blobs + duplicates


MASK_SIDE = 288  # facebook/sam3's mask logits: 4x its 72 x 72 patch grid (1008 px input)
LOGIT = 8.0  # mask logit inside (+) and outside (-) a blob: a sharp edge, as a confident SAM 3 gives


def mask_logits(blobs: list[Blob], width: int, height: int, queries: int | None = None) -> np.ndarray:
    """The mask logits SAM 3 would give for ``blobs`` on a ``width`` x ``height`` photo: float32
    (max(len(blobs), queries), ``MASK_SIDE``, ``MASK_SIDE``), +``LOGIT`` inside each blob drawn at that resolution and
    -``LOGIT`` elsewhere (queries past the blobs: -``LOGIT`` everywhere). Both sides' stand-ins start from these, so
    each upsamples the same logits when its SAM 3 post-processing is measured."""
    count = max(len(blobs), queries or 0)
    sx, sy = MASK_SIDE / width, MASK_SIDE / height
    logits = np.full((count, MASK_SIDE, MASK_SIDE), -LOGIT, dtype=np.float32)
    for index, blob in enumerate(blobs):
        small = Blob(blob.cx * sx, blob.cy * sy, blob.rx * sx, blob.ry * sy, blob.phase, blob.score, blob.grow)
        logits[index][small.mask(MASK_SIDE, MASK_SIDE)] = LOGIT
    return logits


def masks_of(blobs: list[Blob], width: int, height: int) -> Iterator[np.ndarray]:
    """The blobs' masks, bool (H, W), one at a time."""
    for blob in blobs:
        yield blob.mask(width, height)
