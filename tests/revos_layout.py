"""A tiny ReVOS download in the released layout, written on the spot from the photos the package ships.

Frames are real: 160 x 120 crops of ``astronaut.jpg`` (a pan 8 px right per frame) and ``coffee.jpg`` (8 px down
per frame), saved as JPEG. The objects are hand-placed rectangles fixed in the photo, so they move with the pan:

- anno 1 (video ``astronaut-pan``): photo rows 10..59, cols 20..69 (50 x 50) on all 3 frames;
- anno 2 (``astronaut-pan``): photo rows 70..99, cols 100..139 (30 x 40), absent (null) on frame 0;
- anno 3 (``demo/coffee-pan``, a video name with a folder, as the release has): photo rows 40..79, cols 30..89
  (40 x 60) on both frames;
- anno 9: an object of the train split only, with a broken RLE on its frame 1 (the valid split must not read it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from sam3_agent.package_files import ASSETS_DIR
from sam3_agent.rle import encode_rle

HEIGHT, WIDTH = 120, 160
STEP = 8  # pixels the window moves per frame

# video -> (photo, number of frames, (dy, dx) per frame)
VIDEOS = {"astronaut-pan": ("astronaut.jpg", 3, (0, STEP)), "demo/coffee-pan": ("coffee.jpg", 2, (STEP, 0))}
# anno id -> (video, photo rows [y0, y1), photo cols [x0, x1), frames where it is absent)
OBJECTS = {1: ("astronaut-pan", (10, 60), (20, 70), ()), 2: ("astronaut-pan", (70, 100), (100, 140), (0,)),
           3: ("demo/coffee-pan", (40, 80), (30, 90), ())}
EXPRESSIONS = {
    "astronaut-pan": {
        "0": {"exp": "the flag", "obj_id": [0], "anno_id": [1], "type_id": 0},
        "1": {"exp": "what would tell you which country sent the astronaut?", "obj_id": [0, 1], "anno_id": [1, 2],
              "type_id": 1},
        "2": {"exp": "the dog", "obj_id": [], "anno_id": [], "type_id": 2},
    },
    "demo/coffee-pan": {
        "0": {"exp": "the  cup", "obj_id": [0], "anno_id": [3], "type_id": 0},
        "1": {"exp": "what holds the drink?", "obj_id": [0], "anno_id": [3], "type_id": 1},
    },
}


def frame_names(video: str) -> list[str]:
    return [f"{k:05d}" for k in range(VIDEOS[video][1])]


def object_mask(anno_id: int, frame: int) -> np.ndarray | None:
    """bool (HEIGHT, WIDTH): the object on that frame in frame coordinates, or None where it is absent."""
    video, (y0, y1), (x0, x1), absent = OBJECTS[anno_id]
    if frame in absent:
        return None
    dy, dx = VIDEOS[video][2]
    mask = np.zeros((HEIGHT, WIDTH), dtype=bool)
    mask[y0 - dy * frame:y1 - dy * frame, x0 - dx * frame:x1 - dx * frame] = True
    return mask


def rle(mask: np.ndarray) -> dict:
    return encode_rle(mask)[0]


def write_revos(root: Path) -> Path:
    """Write the download under ``root/ReVOS`` and return that folder."""
    folder = root / "ReVOS"
    for video, (photo, _count, (dy, dx)) in VIDEOS.items():
        with Image.open(ASSETS_DIR / photo) as image:
            rgb = image.convert("RGB")
        (folder / "JPEGImages" / video).mkdir(parents=True)
        for k, name in enumerate(frame_names(video)):
            window = (dx * k, dy * k, dx * k + WIDTH, dy * k + HEIGHT)
            rgb.crop(window).save(folder / "JPEGImages" / video / f"{name}.jpg", quality=90)
    mask_dict: dict[str, list] = {}
    for anno_id, (video, *_rest) in OBJECTS.items():
        entries = [object_mask(anno_id, k) for k in range(VIDEOS[video][1])]
        mask_dict[str(anno_id)] = [None if m is None else rle(m) for m in entries]
    broken = rle(object_mask(1, 1))
    mask_dict["9"] = [rle(object_mask(1, 0)), {**broken, "counts": broken["counts"][:-2]}, None]
    meta = {"videos": {video: {"vid_id": number, "frames": frame_names(video), "expressions": expressions}
                       for number, (video, expressions) in enumerate(EXPRESSIONS.items())}}
    train = {"videos": {"astronaut-pan": {"vid_id": 0, "frames": frame_names("astronaut-pan"), "expressions": {
        "0": {"exp": "the left half of the flag", "obj_id": [2], "anno_id": [9], "type_id": 0}}}}}
    (folder / "meta_expressions_valid_.json").write_text(json.dumps(meta), encoding="utf-8")
    (folder / "meta_expressions_train_.json").write_text(json.dumps(train), encoding="utf-8")
    (folder / "mask_dict.json").write_text(json.dumps(mask_dict), encoding="utf-8")
    return folder
