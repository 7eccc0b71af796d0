"""ReasonSeg ground truth in its published form: one JSON file per image, beside the image.

Per image ``NAME.jpg`` there is ``NAME.json`` with (facts from the LISA repository's data description and tools):

- ``text``: the queries about this image (a list of strings; a single string is accepted too);
- ``is_sentence``: whether the queries are long sentences (true) or short phrases (false);
- ``shapes``: polygons, each ``{"label": str, "points": [[x, y], ...], ...}`` in pixels; a label containing
  ``ignore`` (any case) marks a region left out of scoring, the label ``flag`` marks a deprecated shape that is
  skipped, every other label is part of the target;
- ``imageHeight``, ``imageWidth`` (LabelMe's, optional): the upright photo's size (``scoring.frames``).

Each query is one sample (id ``NAME`` for a single query, ``NAME_1``, ``NAME_2``... for several), broken down by
``query_type`` (``short`` / ``long``, from ``is_sentence``), as LISA reports ReasonSeg. The target is rasterised
as ReasonSeg's tools do (``ground_truth.PolygonTruth``). Hidden and system files (a Mac's ``._NAME.json``...:
``batch.hidden_files``) are skipped and counted in a log line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...errors import InputError
from ..batch.hidden_files import without_hidden_files
from ..batch.items import IMAGE_SUFFIXES
from .ground_truth import EvalSample, Polygon, PolygonTruth

SKIPPED_LABEL = "flag"  # deprecated shapes in ReasonSeg's files


def _read_json(path: Path) -> Any:
    data = path.read_bytes()
    for encoding in ("utf-8", "cp1252"):  # a few published files are not UTF-8
        try:
            return json.loads(data.decode(encoding))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
    raise InputError(f"{path} is not a JSON file (neither UTF-8 nor cp1252 JSON)")


def _image_of(json_path: Path, images: Path) -> Path:
    for suffix in (".jpg",) + IMAGE_SUFFIXES:
        candidate = images / (json_path.stem + suffix)
        if candidate.exists():
            return candidate
    return images / (json_path.stem + ".jpg")  # missing: the batch records the item as failed, naming the path


def _polygons(shapes: Any, where: str) -> tuple[Polygon, ...]:
    if not isinstance(shapes, list):
        raise InputError(f"{where}: \"shapes\" must be a list of polygons")
    polygons = []
    for number, shape in enumerate(shapes, start=1):
        if not isinstance(shape, dict) or not isinstance(shape.get("label"), str):
            raise InputError(f"{where}: shape {number} needs a \"label\" and \"points\"")
        label = shape["label"].lower()
        if label == SKIPPED_LABEL:
            continue
        points = shape.get("points")
        try:
            pairs = tuple((float(x), float(y)) for x, y in points)
        except (TypeError, ValueError):
            raise InputError(f"{where}: shape {number} \"points\" must be a list of [x, y] pairs") from None
        if len(pairs) < 3:
            raise InputError(f"{where}: shape {number} has {len(pairs)} point(s); a polygon needs at least 3")
        polygons.append(Polygon(pairs, ignore="ignore" in label))
    return tuple(polygons)


def _size(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def read_reasonseg(folder: str | Path, images: str | Path | None = None) -> list[EvalSample]:
    """The samples of a ReasonSeg split folder (``NAME.json`` beside ``NAME.jpg``), in file-name order.

    Args:
        folder: the split folder.
        images: where the images are when not beside the JSON files (``NAME.jpg``, or another image suffix).

    Raises:
        InputError: the folder is missing or holds no JSON file; a file is not JSON, lacks ``text`` or
            ``shapes``, or has a malformed polygon (the message names the file and shape).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder: give a ReasonSeg split folder (NAME.json beside NAME.jpg)")
    files = without_hidden_files(sorted(folder.glob("*.json")), folder)  # a Mac's ._NAME.json is no annotation
    if not files:
        raise InputError(f"{folder} holds no .json annotation files: is it a ReasonSeg split folder?")
    samples = []
    for path in files:
        data = _read_json(path)
        if not isinstance(data, dict):
            raise InputError(f"{path}: expected a JSON object with \"text\" and \"shapes\"")
        texts = data.get("text")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise InputError(f"{path}: \"text\" must be a query or a list of queries")
        truth = PolygonTruth(_polygons(data.get("shapes"), str(path)), _size(data, "imageHeight"),
                             _size(data, "imageWidth"))
        query_type = "long" if bool(data.get("is_sentence", False)) else "short"
        image = _image_of(path, Path(images) if images is not None else folder)
        for number, text in enumerate(texts, start=1):
            sample_id = path.stem if len(texts) == 1 else f"{path.stem}_{number}"
            samples.append(EvalSample(sample_id, image, image.name, text.strip(), truth, {"query_type": query_type}))
    return samples
