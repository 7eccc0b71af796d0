"""Legibility of the numbered overlay at any count: ``python -m sam3_agent.bench.labels``.

For 10, 50, 100 and 200 masks on each real photo of ``assets/`` (a crowd of wavy blobs, ``crowd``), prints the
share of labels that overlap no other label and lie inside the image (``imaging.legibility.legible_share``), the
digits' height at the size the VLM sees the overlay (default pixel bounds) and how many labels sit beside their
mask on a leader line. ``--save DIR`` also writes each overlay as PNG, to look at.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from ..imaging.labels import overlay_labels
from ..imaging.legibility import legible_share, seen_scale
from ..imaging.overlay import render_numbered_overlay
from .scene import ASSETS, Blob

PHOTOS = ("astronaut.jpg", "coffee.jpg", "chelsea.jpg", "rocket.jpg")
COUNTS = (10, 50, 100, 200)
COVER = 0.5  # share of the photo the crowd's masks cover together, about


def crowd(width: int, height: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` masks like a flock or a crowd: wavy ellipses at random places (a centre never inside an earlier
    blob's ellipse), sizes varying by up to 3x, together covering about ``COVER`` of the image.

    Returns:
        bool (count, height, width).
    """
    rng = np.random.default_rng(seed * 1000 + count)
    mean_radius = math.sqrt(COVER * width * height / count / math.pi)
    blobs: list[Blob] = []
    while len(blobs) < count:
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        if any(((cx - b.cx) / b.rx) ** 2 + ((cy - b.cy) / b.ry) ** 2 < 1 for b in blobs):
            continue
        r = mean_radius * rng.uniform(0.55, 1.6)
        aspect = rng.uniform(0.6, 1.6)
        blobs.append(Blob(cx, cy, r * math.sqrt(aspect), r / math.sqrt(aspect), rng.uniform(0, 6), 0.9))
    return np.stack([b.mask(width, height) for b in blobs])


def measure(photo: str, count: int, save: Path | None = None) -> dict[str, float | int | str]:
    """One row of the table: legibility of ``count`` crowd masks on ``assets/<photo>``."""
    image = Image.open(ASSETS / photo).convert("RGB")
    masks = crowd(image.width, image.height, count)
    started = time.perf_counter()
    labels = overlay_labels(masks)
    seconds = time.perf_counter() - started
    boxes = [p.box if p is not None else None for p in labels.placements]
    scale = seen_scale(image.width, image.height)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        render_numbered_overlay(image, masks).save(save / f"{Path(photo).stem}_{count}.png")
    return {
        "photo": photo, "size": f"{image.width}x{image.height}",
        "seen": f"{round(image.width * scale)}x{round(image.height * scale)}", "masks": count,
        "digits_px": labels.digit_height * scale, "legible": legible_share(boxes, image.width, image.height),
        "beside": sum(1 for p in labels.placements if p is not None and p.leader), "seconds": seconds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench.labels", description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="folder to write each overlay to as PNG")
    parser.add_argument("--photos", nargs="+", default=list(PHOTOS), help="photos of assets/ (default: all four)")
    parser.add_argument("--counts", nargs="+", type=int, default=list(COUNTS), help="mask counts (default: 10 50 100 200)")
    args = parser.parse_args(argv)
    print(f"{'photo':<14}{'size':>9}{'VLM sees':>10}{'masks':>6}{'digits px':>10}{'legible':>9}{'beside':>7}{'s':>7}")
    worst: dict[int, float] = {}
    for photo in args.photos:
        for count in args.counts:
            row = measure(photo, count, args.save)
            worst[count] = min(worst.get(count, 1.0), float(row["legible"]))
            print(f"{row['photo']:<14}{row['size']:>9}{row['seen']:>10}{row['masks']:>6}{row['digits_px']:>10.1f}"
                  f"{row['legible']:>9.1%}{row['beside']:>7}{row['seconds']:>7.2f}")
    print("worst legible share: " + ", ".join(f"{count} masks {share:.1%}" for count, share in worst.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
