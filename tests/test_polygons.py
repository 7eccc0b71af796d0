"""Masks as polygons (COCO polygon segmentation, YOLO segmentation labels), read back with the formats' own readers.

The masks are cut from the real photos in sam3_agent/assets/ by thresholds (dark coffee, the bright spacesuit, the
orange cat, the bright rocket): ragged outlines, specks and holes, as raw thresholds and as cleaned masks (opened,
closed and without parts under 200 pixels), which look more like SAM 3's. The figures asserted here are the ones
docs/correcting.md gives.
"""

from __future__ import annotations

import math
import os
import re

import cv2
import numpy as np
import pytest
import yaml
from conftest import photo
from pycocotools import mask as coco_mask
from pycocotools.coco import COCO

from sam3_agent.correct.edits import MaskItem
from sam3_agent.correct.export import coco_document, write_coco
from sam3_agent.correct.polygons import mask_polygon, mask_polygons, polygon_document
from sam3_agent.correct.yolo import DATA_FILE, write_yolo, yolo_zip_bytes
from sam3_agent.errors import InputError


def cleaned(mask: np.ndarray) -> np.ndarray:
    kernel = np.ones((5, 5), np.uint8)
    mask = cv2.morphologyEx(cv2.morphologyEx(mask.astype(np.uint8), cv2.MORPH_OPEN, kernel), cv2.MORPH_CLOSE, kernel)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    return np.isin(labels, [i for i in range(1, count) if stats[i, cv2.CC_STAT_AREA] >= 200])


def real_masks() -> dict[str, tuple[str, np.ndarray]]:
    """name -> (photo, bool mask at the photo's size)."""
    gray = {name: np.asarray(photo(name).convert("L")) for name in ("coffee.jpg", "astronaut.jpg", "rocket.jpg")}
    hsv = np.asarray(photo("chelsea.jpg").convert("HSV"))
    raw = {"coffee": ("coffee.jpg", gray["coffee.jpg"] < 70), "astronaut": ("astronaut.jpg", gray["astronaut.jpg"] > 200),
           "chelsea": ("chelsea.jpg", (hsv[..., 0] < 30) & (hsv[..., 1] > 100)),
           "rocket": ("rocket.jpg", gray["rocket.jpg"] > 180)}
    masks = {f"{name} raw": value for name, value in raw.items()}
    masks.update({f"{name} cleaned": (image, cleaned(mask)) for name, (image, mask) in raw.items()})
    return masks


MASKS = real_masks()
# IoU of the mask OpenCV's fillPoly draws from the one YOLO polygon (vertices truncated to whole pixels, as
# Ultralytics' polygon2mask does) against the mask: what its cuts cost, measured (docs/correcting.md)
YOLO_FILLPOLY_IOU = {"coffee raw": 0.9288, "astronaut raw": 0.9470, "chelsea raw": 0.9944, "rocket raw": 0.8080,
                     "coffee cleaned": 0.9982, "astronaut cleaned": 0.9781, "chelsea cleaned": 0.9990,
                     "rocket cleaned": 1.0}
# IoU if the holes were left out (the outlines alone, filled): what cutting them in saves
HOLES_LEFT_OUT_IOU = {"coffee cleaned": 0.9101, "chelsea cleaned": 0.8949, "astronaut cleaned": 0.9843}


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(int((a | b).sum()), 1))


def fill_like_ultralytics(polygon: np.ndarray, height: int, width: int) -> np.ndarray:
    """What Ultralytics' ``polygon2mask`` draws: vertices cast to int32, ``cv2.fillPoly``."""
    canvas = np.zeros((height, width), np.uint8)
    cv2.fillPoly(canvas, [np.asarray(polygon, dtype=np.float64).reshape(-1, 2).astype(np.int32)], 1)
    return canvas.astype(bool)


# ------------------------------------------------------------------ COCO polygons


@pytest.mark.parametrize("name", sorted(MASKS))
def test_coco_polygons_give_back_each_real_photo_mask_exactly_with_pycocotools(name, tmp_path):
    image, mask = MASKS[name]
    height, width = mask.shape
    document = polygon_document(coco_document([MaskItem(mask, "thing", None, "agent")], width, height, image))
    coco = COCO(str(write_coco(document, tmp_path / "polygons.json")))
    [annotation] = coco.loadAnns(coco.getAnnIds())
    assert isinstance(annotation["segmentation"], list) and all(len(p) >= 8 for p in annotation["segmentation"])
    assert np.array_equal(coco.annToMask(annotation).astype(bool), mask)  # IoU 1: not a pixel lost or added
    assert annotation["area"] == int(mask.sum())


def test_holes_are_cut_into_their_outline_and_stay_holes():
    ring = np.zeros((40, 60), dtype=bool)
    ring[5:35, 10:50] = True
    ring[15:25, 20:30] = False  # hole 1
    ring[12:20, 35:45] = False  # hole 2
    ring[28:31, 40:43] = True  # a speck inside nothing: a second part
    [outline] = [p for p in mask_polygons(ring) if len(p) > 4]
    decoded = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects([outline.ravel().tolist()], 40, 60)))
    assert np.array_equal(decoded.astype(bool), ring)
    assert np.array_equal(fill_like_ultralytics(mask_polygon(ring), 40, 60), ring)  # the cuts run inside the mask


@pytest.mark.parametrize("name", sorted(HOLES_LEFT_OUT_IOU))
def test_what_leaving_the_holes_out_would_cost(name):
    _, mask = MASKS[name]
    height, width = mask.shape
    outlines = np.zeros((height, width), np.uint8)
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    cv2.drawContours(outlines, contours, -1, 1, thickness=cv2.FILLED)
    assert iou(outlines.astype(bool), mask) == pytest.approx(HOLES_LEFT_OUT_IOU[name], abs=5e-5)


def test_vertices_lie_a_quarter_pixel_inside_the_pixel_edges():
    square = np.zeros((10, 10), dtype=bool)
    square[2:5, 3:7] = True  # columns 3..6, rows 2..4
    [polygon] = mask_polygons(square)
    assert sorted(map(tuple, polygon.tolist())) == [(3.25, 2.25), (3.25, 4.75), (6.75, 2.25), (6.75, 4.75)]
    single = np.zeros((5, 5), dtype=bool)
    single[4, 4] = True  # one pixel in the corner
    decoded = coco_mask.decode(coco_mask.frPyObjects([mask_polygons(single)[0].ravel().tolist()], 5, 5))
    assert np.array_equal(decoded[..., 0].astype(bool), single)


def test_an_empty_mask_has_no_polygon_and_a_bad_document_is_refused():
    assert mask_polygons(np.zeros((4, 4), bool)) == [] and mask_polygon(np.zeros((4, 4), bool)) is None
    document = coco_document([MaskItem(np.ones((4, 4), bool), "x", None, "agent")], 4, 4)
    document["annotations"][0]["image_id"] = 7
    with pytest.raises(InputError, match="annotation 1 of the COCO document is on image 7, which it does not list"):
        polygon_document(document)


# ------------------------------------------------------------------ YOLO labels


def read_yolo_strictly(folder) -> tuple[dict[int, str], dict[str, list[tuple[int, np.ndarray]]]]:
    """The dataset as Ultralytics documents it, every rule checked: data.yaml with ``train``/``val`` folders and
    ``names`` {0..n-1: name}; for each image in images/ a label file labels/<stem>.txt; each line an integer class
    in range and at least three (x, y) pairs, each coordinate a number in [0, 1]. Returns (names, stem -> lines)."""
    data = yaml.safe_load((folder / DATA_FILE).read_text(encoding="utf-8"))
    names = data["names"]
    assert set(data) == {"train", "val", "nc", "names"} and data["nc"] == len(names)
    assert list(names) == list(range(len(names))) and all(isinstance(n, str) for n in names.values())
    images = sorted((folder / data["train"]).iterdir())
    assert data["val"] == data["train"] and images
    labels: dict[str, list[tuple[int, np.ndarray]]] = {}
    for image in images:
        text = (folder / "labels" / f"{image.stem}.txt").read_text(encoding="ascii")
        assert text == "" or text.endswith("\n")
        rows = []
        for line in text.splitlines():
            assert re.fullmatch(r"\d+( [0-9.]+)+", line), line[:80]
            fields = line.split(" ")
            cls, values = int(fields[0]), np.array([float(v) for v in fields[1:]])
            assert cls in names and len(values) % 2 == 0 and len(values) >= 6
            assert ((values >= 0) & (values <= 1)).all()
            rows.append((cls, values.reshape(-1, 2)))
        labels[image.stem] = rows
    return names, labels


@pytest.fixture(scope="module")
def coffee_dataset(tmp_path_factory):
    """Three masks on coffee.jpg (two labels) and a photo with no mask, written as a YOLO dataset."""
    coffee_mask, chelsea_mask = MASKS["coffee cleaned"][1], MASKS["chelsea raw"][1]
    square = np.zeros((400, 600), dtype=bool)
    square[50:150, 300:420] = True
    square[90:110, 340:380] = False
    coffee = coco_document([MaskItem(coffee_mask, "coffee", None, "agent"), MaskItem(square, "box", 0.5, "box"),
                            MaskItem(MASKS["coffee raw"][1], "coffee", None, "brush")], 600, 400, "shots/coffee.jpg")
    chelsea = coco_document([MaskItem(chelsea_mask, "cat", None, "agent")], 451, 300, "chelsea.jpg", image_id=2)
    empty = coco_document([], 512, 512, "astronaut.jpg", image_id=3)
    categories = [{"id": 1, "name": "coffee"}, {"id": 2, "name": "box"}, {"id": 3, "name": "cat"}]
    cat = {**chelsea["annotations"][0], "id": 4, "category_id": 3}
    document = {"images": coffee["images"] + chelsea["images"] + empty["images"], "categories": categories,
                "annotations": coffee["annotations"] + [cat]}
    folder = tmp_path_factory.mktemp("yolo")
    photos = {1: photo("coffee.jpg"), 2: photo("chelsea.jpg"), 3: photo("astronaut.jpg")}
    write_yolo(document, photos, folder)
    masks = {"coffee": [coffee_mask, square, MASKS["coffee raw"][1]], "chelsea": [chelsea_mask], "astronaut": []}
    return folder, document, photos, masks


def test_the_yolo_dataset_reads_back_with_a_strict_parser_of_the_documented_format(coffee_dataset):
    folder, _, photos, masks = coffee_dataset
    names, labels = read_yolo_strictly(folder)
    assert names == {0: "coffee", 1: "box", 2: "cat"}
    assert sorted(labels) == ["astronaut", "chelsea", "coffee"] and labels["astronaut"] == []  # an empty label file
    assert [cls for cls, _ in labels["coffee"]] == [0, 1, 0] and [cls for cls, _ in labels["chelsea"]] == [2]
    for stem, expected in masks.items():
        width, height = photos[{"coffee": 1, "chelsea": 2, "astronaut": 3}[stem]].size
        assert cv2.imread(str(folder / "images" / f"{stem}.png")).shape == (height, width, 3)
        got = [iou(fill_like_ultralytics(points * (width, height), height, width), mask)
               for (_, points), mask in zip(labels[stem], expected)]
        want = {"coffee": [YOLO_FILLPOLY_IOU["coffee cleaned"], 1.0, YOLO_FILLPOLY_IOU["coffee raw"]],
                "chelsea": [YOLO_FILLPOLY_IOU["chelsea raw"]], "astronaut": []}[stem]
        assert got == pytest.approx(want, abs=5e-5)


@pytest.mark.parametrize("name", sorted(YOLO_FILLPOLY_IOU))
def test_the_one_yolo_polygon_of_each_real_photo_mask_costs_what_the_docs_say(name):
    _, mask = MASKS[name]
    height, width = mask.shape
    polygon = mask_polygon(mask)
    assert iou(fill_like_ultralytics(polygon, height, width), mask) == pytest.approx(YOLO_FILLPOLY_IOU[name], abs=5e-5)
    # pycocotools fills by crossings: the cuts, walked there and back, cost nothing there
    decoded = coco_mask.decode(coco_mask.frPyObjects([polygon.ravel().tolist()], height, width))[..., 0]
    assert np.array_equal(decoded.astype(bool), mask)


def test_the_zip_holds_the_same_files(coffee_dataset, tmp_path):
    import zipfile

    folder, document, photos, _ = coffee_dataset
    with zipfile.ZipFile(__import__("io").BytesIO(yolo_zip_bytes(document, photos))) as archive:
        archive.extractall(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert (tmp_path / "labels" / "coffee.txt").read_bytes() == (folder / "labels" / "coffee.txt").read_bytes()


def test_ultralytics_reads_the_dataset_with_its_own_loader(coffee_dataset, tmp_path, monkeypatch):
    """Ultralytics' own label check (``verify_image_label``), dataset check (``check_det_dataset``) and rasteriser
    (``polygon2mask``). Ultralytics is not a dependency (AGPL, and heavy): install it in a separate venv to run this
    (docs/correcting.md says how)."""
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path))  # its settings file, not the user's
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    utils = pytest.importorskip("ultralytics.data.utils", reason="ultralytics is not installed (optional reader)")
    folder, _, photos, masks = coffee_dataset
    data = utils.check_det_dataset(str(folder / DATA_FILE))
    assert data["names"] == {0: "coffee", 1: "box", 2: "cat"} and data["nc"] == 3
    assert os.path.samefile(data["train"], folder / "images")
    for stem, image_id in (("coffee", 1), ("chelsea", 2), ("astronaut", 3)):
        found = utils.verify_image_label((str(folder / "images" / f"{stem}.png"), str(folder / "labels" / f"{stem}.txt"),
                                          "", False, 3, 0, 0, False))
        _, classes, shape, segments, _, missing, seen, empty, corrupt, message = found
        width, height = photos[image_id].size
        assert (shape, missing, seen, corrupt, message) == ((height, width), 0, 1, 0, "")
        assert empty == (0 if masks[stem] else 1) and len(segments) == len(masks[stem])
        assert classes[:, 0].tolist() == {"coffee": [0, 1, 0], "chelsea": [2], "astronaut": []}[stem]
        for segment, mask in zip(segments, masks[stem]):
            drawn = utils.polygon2mask((height, width), [(segment * (width, height)).ravel()]).astype(bool)
            assert math.isclose(iou(drawn, mask), iou(fill_like_ultralytics(segment * (width, height), height, width),
                                                      mask), abs_tol=1e-12)


# ------------------------------------------------------------------ where the formats are offered


def test_the_export_command_writes_coco_polygons_and_yolo_labels_of_the_corrected_masks(tmp_path, capsys):
    from conftest import people_run

    from sam3_agent.cli.main import main
    from sam3_agent.correct.edits import EditState, delete_mask, paint
    from sam3_agent.trace.io import save_trace

    trace = people_run()  # astronaut.jpg, the agent chose two rectangles
    spacesuit = MASKS["astronaut cleaned"][1]
    state = paint(delete_mask(EditState.from_trace(trace), 1), None, spacesuit)
    save_trace(state.to_trace(trace), tmp_path / "run")
    code = main(["export", str(tmp_path / "run"), "--coco-polygons", str(tmp_path / "p.json"),
                 "--yolo", str(tmp_path / "yolo")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"wrote {tmp_path / 'p.json'}, {tmp_path / 'yolo' / DATA_FILE}" in captured.out
    expected = [item.mask for item in state.corrected_items()]
    coco = COCO(str(tmp_path / "p.json"))
    assert coco.imgs[1]["file_name"] == "image.png"  # the run was given a photo without a file name
    assert [np.array_equal(coco.annToMask(a).astype(bool), m) for a, m in zip(coco.loadAnns(coco.getAnnIds()),
                                                                               expected)] == [True, True]
    names, labels = read_yolo_strictly(tmp_path / "yolo")
    assert names == {0: "the people"} and [cls for cls, _ in labels["image"]] == [0, 0]
    drawn = [fill_like_ultralytics(points * 512, 512, 512) for _, points in labels["image"]]
    assert [iou(d, m) for d, m in zip(drawn, expected)] == pytest.approx([1.0, YOLO_FILLPOLY_IOU["astronaut cleaned"]],
                                                                         abs=5e-5)


def test_the_correct_tab_offers_coco_polygons_and_yolo_labels(tmp_path):
    import io
    import zipfile

    from sam3_agent.mask_set import Masks
    from sam3_agent.types import Trace
    from sam3_agent.ui.correct import actions as correct
    from sam3_agent.ui.correct.handlers import CorrectHandlers

    _, mask = MASKS["chelsea cleaned"]
    trace = Trace(query="the cat", image=photo("chelsea.jpg"), status="done", image_name="chelsea.jpg",
                  final_masks=Masks(mask[None], np.array([0.9], np.float32), np.array([[0, 0, 451, 300]], np.float32)))
    handlers = CorrectHandlers(lambda: None, warn=lambda message: None, root=tmp_path / "app")
    key = handlers.sessions.put(correct.start_session(trace))
    status, path = handlers.export_polygons(key)
    assert "Exported COCO polygons (1 mask): corrected_masks_polygons.json." in status
    coco = COCO(path)
    assert np.array_equal(coco.annToMask(coco.loadAnns(coco.getAnnIds())[0]).astype(bool), mask)
    status, path = handlers.export_yolo(key)
    assert "Exported YOLO labels (1 mask): corrected_masks_yolo.zip." in status
    with zipfile.ZipFile(io.BytesIO(open(path, "rb").read())) as archive:
        assert sorted(archive.namelist()) == ["data.yaml", "images/chelsea.png", "labels/chelsea.txt"]
        archive.extractall(tmp_path / "yolo")
    names, labels = read_yolo_strictly(tmp_path / "yolo")
    assert names == {0: "the cat"}
    [(cls, points)] = labels["chelsea"]
    assert iou(fill_like_ultralytics(points * (451, 300), 300, 451), mask) == pytest.approx(
        YOLO_FILLPOLY_IOU["chelsea cleaned"], abs=5e-5)


def test_the_review_export_writes_each_format_of_the_reviewed_dataset(tmp_path):
    from dataset_fixtures import review_batch

    from sam3_agent.datasets.review.exports import COCO_POLYGONS, YOLO, YOLO_DIR, YOLO_ZIP
    from sam3_agent.ui.correct.handlers import CorrectHandlers
    from sam3_agent.ui.review.handlers import ReviewHandlers

    root = tmp_path / "reviews"
    batch = review_batch(root / "made")
    correct = CorrectHandlers(lambda: None, warn=lambda message: None, root=tmp_path / "app")
    review = ReviewHandlers(correct, tmp_path / "app", review_root=root)
    out = review.open_folder(batch.relative_to(root).as_posix(), None)
    out = review.accept(out.slot, out.correct.session)  # the cup, as the agent answered it
    rle_status, rle_path = review.export(out.slot)
    status, path = review.export(out.slot, False, COCO_POLYGONS)
    assert "Exported reviewed_coco_polygons.json: 1 image, 1 mask; 2 items not reviewed were left out." in status
    rle, polygons = COCO(rle_path), COCO(path)
    assert polygons.imgs == rle.imgs and polygons.cats == rle.cats
    [a], [b] = rle.loadAnns(rle.getAnnIds()), polygons.loadAnns(polygons.getAnnIds())
    assert isinstance(b["segmentation"], list) and np.array_equal(polygons.annToMask(b), rle.annToMask(a))
    status, path = review.export(out.slot, True, YOLO)  # with the items not reviewed, as the agent answered them
    assert path.endswith(YOLO_ZIP) and "3 images" in status
    names, labels = read_yolo_strictly(batch / YOLO_DIR)
    assert names == {0: "the cup", 1: "the dog", 2: "the flag"}  # the batch's categories, in its order
    # the cup's box (200, 40, 420, 310) and the flag's (0, 0, 95, 340); the dog photo has no mask
    assert {stem: [cls for cls, _ in rows] for stem, rows in labels.items()} == {"coffee": [0], "chelsea": [],
                                                                                 "astronaut": [2]}
    for stem, (width, height), box in (("coffee", (600, 400), (200, 40, 420, 310)),
                                       ("astronaut", (512, 512), (0, 0, 95, 340))):
        drawn = fill_like_ultralytics(labels[stem][0][1] * (width, height), height, width)
        assert np.array_equal(drawn, np.pad(np.ones((box[3] - box[1], box[2] - box[0]), bool),
                                            ((box[1], height - box[3]), (box[0], width - box[2]))))
