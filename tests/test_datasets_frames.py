"""Scoring photos with an EXIF orientation: each format's frame, a frame read from the sizes, and a note where the
sizes cannot tell (``datasets.scoring.frames``)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as coco_mask

from sam3_agent.datasets.batch.records import ItemRecord
from sam3_agent.datasets.formats.ground_truth import CocoTruth, EvalSample, RleTruth
from sam3_agent.datasets.scoring.evaluate import Unscored, score_sample


def rle(mask: np.ndarray) -> dict:
    encoded = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in encoded["size"]], "counts": encoded["counts"].decode("ascii")}


def photo(tmp_path, width: int, height: int, orientation: int):
    path = tmp_path / "photo.jpg"
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.new("RGB", (width, height), (90, 120, 150)).save(path, exif=exif)
    return path


def stored_block(height: int, width: int) -> np.ndarray:
    mask = np.zeros((height, width), dtype=bool)
    mask[0:5, 0:10] = True  # top-left, not symmetric: a wrong turn moves it
    return mask


def record_of(upright_answer: np.ndarray) -> ItemRecord:
    height, width = upright_answer.shape
    return ItemRecord(id="s", image="photo.jpg", query="the block", status="done", width=width, height=height,
                      masks=[{"segmentation": rle(upright_answer)}])


def test_jsonl_truth_in_the_stored_frame_is_found_by_its_size_turned_and_noted(tmp_path):
    image = photo(tmp_path, 40, 20, orientation=6)  # stored 40x20, upright 20x40 (a quarter turn clockwise)
    stored = stored_block(20, 40)
    sample = EvalSample("s", image, "photo.jpg", "the block", RleTruth((rle(stored),), (), 20, 40))
    score = score_sample(sample, record_of(np.rot90(stored, k=-1)))
    assert (score.intersection, score.union, score.target_pixels) == (50, 50, 50)
    assert score.note == ("the photo is turned a quarter clockwise by its EXIF orientation 6; the ground truth is "
                          "40x20, the photo's stored size, though this format's annotations are upright: scored in the "
                          "stored frame")


def test_coco_truth_is_in_the_stored_frame_and_scored_turned_upright_without_a_note(tmp_path):
    image = photo(tmp_path, 40, 20, orientation=8)  # a quarter turn counter-clockwise
    polygon = [[0.0, 0.0, 9.0, 0.0, 9.0, 4.0, 0.0, 4.0]]  # COCO polygons: x, y in the stored frame
    sample = EvalSample("s", image, "photo.jpg", "the block", CocoTruth(polygon, 20, 40))
    stored = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(polygon, 20, 40))).astype(bool)
    score = score_sample(sample, record_of(np.rot90(stored, k=1)))
    assert (score.intersection, score.union, score.note) == (int(stored.sum()), int(stored.sum()), "")
    wrong = score_sample(sample, record_of(np.rot90(stored, k=-1)))  # the other way round: no overlap at all
    assert (wrong.intersection, wrong.union) == (0, 2 * int(stored.sum()))


def test_a_square_turned_photo_is_scored_in_the_formats_frame_with_a_note(tmp_path):
    image = photo(tmp_path, 30, 30, orientation=6)
    upright = stored_block(30, 30)
    sample = EvalSample("s", image, "photo.jpg", "the block", RleTruth((rle(upright),), (), 30, 30))
    score = score_sample(sample, record_of(upright))
    assert (score.intersection, score.union) == (50, 50)
    assert score.note == ("the photo is turned a quarter clockwise by its EXIF orientation 6 and its size cannot tell "
                          "which frame the ground truth is in: scored as in the upright frame, this format's "
                          "convention")


@pytest.mark.parametrize("orientation", [1, 3])
def test_frames_that_share_a_size_score_in_the_formats_frame(tmp_path, orientation):
    image = photo(tmp_path, 40, 20, orientation=orientation)
    mask = stored_block(20, 40)
    sample = EvalSample("s", image, "photo.jpg", "the block", RleTruth((rle(mask),), (), 20, 40))
    score = score_sample(sample, record_of(mask))
    assert (score.intersection, score.union) == (50, 50)
    assert bool(score.note) == (orientation == 3)  # a half turn keeps the size: noted; no orientation: nothing to say


def test_a_photo_that_changed_since_its_run_is_not_scored(tmp_path):
    image = photo(tmp_path, 40, 20, orientation=6)
    sample = EvalSample("s", image, "photo.jpg", "the block", RleTruth((), (), 0, 0))
    result = score_sample(sample, record_of(np.zeros((20, 40), dtype=bool)))  # the run saw it 40x20 upright
    assert result == Unscored("s", "the photo is 20x40 upright now but its run saw 40x20: it changed since; run the "
                                   "sample again")
