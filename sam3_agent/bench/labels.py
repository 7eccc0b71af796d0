"""Legibility of the numbered overlay and of a dense set's tiles at any count: ``python -m sam3_agent.bench.labels``.

For 10, 50, 100 and 200 masks on each real photo of ``assets/`` (a crowd of wavy blobs, ``crowd``), prints

- the overlay: the share of labels that overlap no other label and lie inside the image
  (``imaging.legibility.legible_share``), the digits' height at the size the VLM sees the overlay and how many
  labels sit beside their mask on a leader line;
- the tiles (``imaging.tiles``): whether the agent shows them at that count, the same share over every label of the
  four tiles (each tile against its own border), their digits' height where the VLM sees them, the share of masks
  numbered in at least one tile, and what the overlay and the four tiles cost in image tokens (Qwen3-VL: images
  padded as ``vlm.image_fit`` sends them, resized by transformers' ``smart_resize``, one token per 32 x 32 px).

Then the main request of a dense round both ways, for 20, 100 and 200 masks (``--request-counts``): by default (the
reference agent's two images: the photo and the overlay, a crowded overlay drawn at the VLM's pixel budget,
``imaging.enlarged``) and with the opt-in ``--dense-tiles`` (the overlay at the photo's size and, when crowded, its four
tiles: six images): the images, their Qwen3-VL image tokens, and the labels' legible share and digit height where the
VLM sees them (with the tiles: the overlay's and the tiles').

``--max-pixels`` / ``--min-pixels`` set the VLM's pixel bounds (default: ``limits``'s), as ``--max-pixels`` does
for a run: the labels are sized for them. ``--save DIR`` also writes each overlay and its tiles as PNG, to look at.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from ..imaging.enlarged import enlarged_labels, enlarged_layout
from ..imaging.labels import OverlayLabels, overlay_labels
from ..imaging.legibility import DEFAULT_BOUNDS, PixelBounds, legible_share, seen_scale
from ..imaging.overlay import render_numbered_overlay
from ..imaging.tiles import TILE_PLACES, numbered_tiles, render_tile, shows_tiles, tile_labels, tile_layouts
from ..mask_set import Masks
from ..vlm.image_fit import ImageLimits, padded_size
from .scene import ASSETS, Blob

PHOTOS = ("astronaut.jpg", "coffee.jpg", "chelsea.jpg", "rocket.jpg")
COUNTS = (10, 50, 100, 200)
REQUEST_COUNTS = (20, 100, 200)  # the main-request table (issue 30)
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


def image_tokens(width: int, height: int, limits: ImageLimits) -> int:
    """The image tokens a Qwen-VL processor makes of a ``width`` x ``height`` image the agent sends: padded as
    ``vlm.image_fit`` pads it, resized by transformers' ``smart_resize`` to whole tokens within the pixel bounds,
    one token per ``token_side`` x ``token_side`` px."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    padded_w, padded_h = padded_size(width, height, limits)
    resized_h, resized_w = smart_resize(padded_h, padded_w, factor=limits.token_side, min_pixels=limits.min_pixels,
                                        max_pixels=limits.max_pixels)
    return (resized_h // limits.token_side) * (resized_w // limits.token_side)


def measure(photo: str, count: int, save: Path | None = None,
            bounds: PixelBounds = DEFAULT_BOUNDS) -> dict[str, float | int | str]:
    """One row of the overlay table: legibility of ``count`` crowd masks on ``assets/<photo>``, for a VLM with
    pixel ``bounds``."""
    image = Image.open(ASSETS / photo).convert("RGB")
    masks = crowd(image.width, image.height, count)
    started = time.perf_counter()
    labels = overlay_labels(masks, bounds=bounds)
    seconds = time.perf_counter() - started
    boxes = [p.box if p is not None else None for p in labels.placements]
    scale = seen_scale(image.width, image.height, bounds)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        render_numbered_overlay(image, masks, bounds=bounds).save(save / f"{Path(photo).stem}_{count}.png")
    return {
        "photo": photo, "size": f"{image.width}x{image.height}",
        "seen": f"{round(image.width * scale)}x{round(image.height * scale)}", "masks": count,
        "digits_px": labels.digit_height * scale, "legible": legible_share(boxes, image.width, image.height),
        "beside": sum(1 for p in labels.placements if p is not None and p.leader), "seconds": seconds,
    }


def measure_tiles(photo: str, count: int, save: Path | None = None,
                  bounds: PixelBounds = DEFAULT_BOUNDS) -> dict[str, float | int | str | bool]:
    """One row of the tiles table: the four tiles of ``count`` crowd masks on ``assets/<photo>`` (measured whether
    or not the agent would show them at this count: ``shown`` says), for a VLM with pixel ``bounds``."""
    image = Image.open(ASSETS / photo).convert("RGB")
    arr = crowd(image.width, image.height, count)
    masks = Masks(arr, np.ones(count, np.float32), np.zeros((count, 4), np.float32))
    legible = total = 0
    digits = math.inf
    for tile in range(len(TILE_PLACES)):
        labels, layout = tile_labels(masks, tile, bounds)
        boxes = [p.box for p in labels.placements if p is not None]
        legible += round(legible_share(boxes, *layout.size) * len(boxes))
        total += len(boxes)
        digits = min(digits, labels.digit_height * seen_scale(*layout.size, bounds))
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
            render_tile(image, masks, tile, bounds).save(save / f"{Path(photo).stem}_{count}_tile{tile + 1}.png")
    return {
        "photo": photo, "masks": count, "shown": shows_tiles(image.width, image.height, count, bounds),
        "tile": f"{layout.size[0]}x{layout.size[1]}", "legible": legible / total if total else 1.0,
        "digits_px": digits, "numbered": _numbered_share(masks, bounds),
    }


def view_tokens(width: int, height: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> tuple[int, int]:
    """The image tokens (Qwen3-VL, ``image_tokens``) of the overlay of a ``width`` x ``height`` photo and of its four
    tiles together, for a VLM with pixel ``bounds``."""
    limits = ImageLimits(min_pixels=bounds.min_pixels, max_pixels=bounds.max_pixels)
    tiles = sum(image_tokens(*layout.size, limits) for layout in tile_layouts(width, height, bounds))
    return image_tokens(width, height, limits), tiles


def _share_and_digits(labels: OverlayLabels, width: int, height: int, bounds: PixelBounds) -> tuple[float, float]:
    boxes = [p.box if p is not None else None for p in labels.placements]
    return legible_share(boxes, width, height), labels.digit_height * seen_scale(width, height, bounds)


def measure_request(photo: str, count: int, bounds: PixelBounds = DEFAULT_BOUNDS) -> dict[str, float | int | str | bool]:
    """One row of the main-request table: what the main request of a round showing ``count`` crowd masks on
    ``assets/<photo>`` holds by default and with the opt-in tiles, for a VLM with pixel ``bounds``.

    Returns:
        ``dense`` (the overlay is crowded); per mode (``default_*``, ``tiles_*``): ``images``, ``tokens`` (Qwen3-VL
        image tokens of the whole request, the photo included), ``legible`` (share) and ``digits_px`` of the
        overlay as sent; ``tiles_tiles_legible`` / ``tiles_tiles_digits_px`` of the four tiles when they are sent.
    """
    image = Image.open(ASSETS / photo).convert("RGB")
    width, height = image.size
    arr = crowd(width, height, count)
    masks = Masks(arr, np.ones(count, np.float32), np.zeros((count, 4), np.float32))
    limits = ImageLimits(min_pixels=bounds.min_pixels, max_pixels=bounds.max_pixels)
    photo_tokens = image_tokens(width, height, limits)
    dense = shows_tiles(width, height, count, bounds)
    plain = overlay_labels(masks, bounds=bounds)
    plain_share, plain_digits = _share_and_digits(plain, width, height, bounds)
    layout = enlarged_layout(width, height, bounds) if dense else None
    if layout is not None:
        labels, layout = enlarged_labels(masks, bounds)
        default_share, default_digits = _share_and_digits(labels, *layout.size, bounds)
        default_tokens = image_tokens(*layout.size, limits)
    else:
        default_share, default_digits, default_tokens = plain_share, plain_digits, image_tokens(width, height, limits)
    row: dict[str, float | int | str | bool] = {
        "photo": photo, "masks": count, "dense": dense,
        "default_images": 2, "default_tokens": photo_tokens + default_tokens,
        "default_legible": default_share, "default_digits_px": default_digits,
        "tiles_images": 2 + (len(TILE_PLACES) if dense else 0),
        "tiles_tokens": photo_tokens + sum(view_tokens(width, height, bounds)[: 2 if dense else 1]),
        "tiles_legible": plain_share, "tiles_digits_px": plain_digits,
    }
    if dense:
        tiles = measure_tiles(photo, count, bounds=bounds)
        row["tiles_tiles_legible"], row["tiles_tiles_digits_px"] = tiles["legible"], tiles["digits_px"]
    return row


def _numbered_share(masks: Masks, bounds: PixelBounds) -> float:
    """The share of non-empty masks numbered in at least one tile."""
    per_tile = numbered_tiles(masks, tile_layouts(masks.width, masks.height, bounds))
    numbered = sum(1 for k in range(len(masks)) if any(tile[k] for tile in per_tile))
    nonempty = int((masks.areas > 0).sum())
    return numbered / nonempty if nonempty else 1.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench.labels", description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="folder to write each overlay and its tiles to as PNG")
    parser.add_argument("--photos", nargs="+", default=list(PHOTOS), help="photos of assets/ (default: all four)")
    parser.add_argument("--counts", nargs="+", type=int, default=list(COUNTS), help="mask counts (default: 10 50 100 200)")
    parser.add_argument("--request-counts", nargs="+", type=int, default=list(REQUEST_COUNTS),
                        help="mask counts of the main-request table (default: 20 100 200)")
    parser.add_argument("--max-pixels", type=int, default=DEFAULT_BOUNDS.max_pixels, help="the VLM's pixel bound")
    parser.add_argument("--min-pixels", type=int, default=None, help="the VLM's lower pixel bound")
    args = parser.parse_args(argv)
    try:
        bounds = PixelBounds(min(DEFAULT_BOUNDS.min_pixels, args.max_pixels) if args.min_pixels is None
                             else args.min_pixels, args.max_pixels)
    except ValueError as error:
        parser.error(str(error))
    print(f"pixel bounds of the VLM: {bounds.min_pixels:,} to {bounds.max_pixels:,}\n\noverlay")
    print(f"{'photo':<14}{'size':>9}{'VLM sees':>10}{'masks':>6}{'digits px':>10}{'legible':>9}{'beside':>7}{'s':>7}")
    worst: dict[int, float] = {}
    for photo in args.photos:
        for count in args.counts:
            row = measure(photo, count, args.save, bounds)
            worst[count] = min(worst.get(count, 1.0), float(row["legible"]))
            print(f"{row['photo']:<14}{row['size']:>9}{row['seen']:>10}{row['masks']:>6}{row['digits_px']:>10.1f}"
                  f"{row['legible']:>9.1%}{row['beside']:>7}{row['seconds']:>7.2f}")
    print("worst legible share: " + ", ".join(f"{count} masks {share:.1%}" for count, share in worst.items()))
    print(f"\ntiles (with --dense-tiles the agent shows them when the overlay is crowded; tokens: Qwen3-VL, overlay vs the "
          f"{len(TILE_PLACES)} tiles)")
    print(f"{'photo':<14}{'masks':>6}{'shown':>6}{'tile':>9}{'digits px':>10}{'legible':>9}{'numbered':>9}"
          f"{'tokens':>13}")
    worst_tiles: dict[int, float] = {}
    for photo in args.photos:
        for count in args.counts:
            row = measure_tiles(photo, count, args.save, bounds)
            worst_tiles[count] = min(worst_tiles.get(count, 1.0), float(row["legible"]))
            tokens = "{} + {}".format(*view_tokens(*Image.open(ASSETS / photo).size, bounds))
            print(f"{row['photo']:<14}{row['masks']:>6}{'yes' if row['shown'] else 'no':>6}{row['tile']:>9}"
                  f"{row['digits_px']:>10.1f}{row['legible']:>9.1%}{row['numbered']:>9.1%}{tokens:>13}")
    print("worst legible share in the tiles: "
          + ", ".join(f"{count} masks {share:.1%}" for count, share in worst_tiles.items()))
    print_requests(args.photos, args.request_counts, bounds)
    return 0


def print_requests(photos: Sequence[str], counts: Sequence[int], bounds: PixelBounds) -> None:
    """The main-request table (``measure_request``): default (two images) against the opt-in tiles."""
    print("\nmain request of the round (Qwen3-VL image tokens, the photo included; legible share and digits px where the "
          "VLM sees them)\n  default: the photo and the overlay, a dense one drawn at the VLM's pixel budget; "
          "--dense-tiles: the overlay at the photo's size and, when dense, its 4 tiles (legible: overlay / tiles)")
    print(f"{'photo':<14}{'masks':>6}{'dense':>6} | {'images':>6}{'tokens':>7}{'legible':>9}{'digits':>7} | "
          f"{'images':>6}{'tokens':>7}{'legible':>16}{'digits':>12}")
    worst: dict[int, list[float]] = {}
    for photo in photos:
        for count in counts:
            row = measure_request(photo, count, bounds)
            tiles = "tiles_tiles_legible" in row
            legible = (f"{row['tiles_legible']:.1%} / {row['tiles_tiles_legible']:.1%}" if tiles
                       else f"{row['tiles_legible']:.1%}")
            digits = (f"{row['tiles_digits_px']:.1f} / {row['tiles_tiles_digits_px']:.1f}" if tiles
                      else f"{row['tiles_digits_px']:.1f}")
            print(f"{photo:<14}{count:>6}{'yes' if row['dense'] else 'no':>6} | {row['default_images']:>6}"
                  f"{row['default_tokens']:>7}{row['default_legible']:>9.1%}{row['default_digits_px']:>7.1f} | "
                  f"{row['tiles_images']:>6}{row['tiles_tokens']:>7}{legible:>16}{digits:>12}")
            best_tiles = max(float(row["tiles_legible"]), float(row.get("tiles_tiles_legible", 0.0)))
            low = worst.setdefault(count, [1.0, 1.0])
            low[0], low[1] = min(low[0], float(row["default_legible"])), min(low[1], best_tiles)
    print("worst legible share, default vs --dense-tiles (the better of overlay and tiles): "
          + ", ".join(f"{count} masks {a:.1%} vs {b:.1%}" for count, (a, b) in worst.items()))


if __name__ == "__main__":
    raise SystemExit(main())
