"""The reviewed dataset written in the format a person picks: COCO with RLE masks, COCO with polygon masks, or YOLO
segmentation labels (``correct.polygons``, ``correct.yolo``), beside the batch's own files.

Files, in the batch folder::

    reviewed_coco.json            COCO, RLE segmentations (``ReviewQueue.coco``)
    reviewed_coco_polygons.json   the same with polygon segmentations
    reviewed_yolo/                data.yaml, images/<stem>.png, labels/<stem>.txt (replaced whole on each export)
    reviewed_yolo.zip             that folder zipped, to download
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from PIL import Image

from ...correct.polygons import polygon_document
from ...correct.yolo import write_yolo
from ...errors import InputError
from ..batch.files import write_json_atomic
from .queue import ReviewQueue

COCO_RLE, COCO_POLYGONS, YOLO = "coco", "polygons", "yolo"
FORMATS = {COCO_RLE: "COCO JSON (RLE masks)", COCO_POLYGONS: "COCO JSON (polygons)",
           YOLO: "YOLO segmentation labels (.zip)"}  # what the export picker calls each format
EXPORT_FILE = "reviewed_coco.json"  # written into the batch folder, beside its coco.json
POLYGON_FILE = "reviewed_coco_polygons.json"
YOLO_DIR = "reviewed_yolo"
YOLO_ZIP = "reviewed_yolo.zip"


def export_reviewed(queue: ReviewQueue, form: str = COCO_RLE, include_unreviewed: bool = False) -> tuple[Path,
                                                                                                         dict[str, Any]]:
    """Write the reviewed dataset (``ReviewQueue.coco``) in format ``form`` (a key of ``FORMATS``) into the batch
    folder; returns (the file to download, the COCO document it was made from).

    Raises:
        InputError: an unknown format, or a mask the polygon or YOLO writers cannot read.
        TraceFormatError: the trace of an exported item is missing or malformed.
        OSError: the batch folder cannot be written.
    """
    if form not in FORMATS:
        raise InputError(f"unknown export format {form!r}: choose one of {', '.join(FORMATS.values())}")
    if form == COCO_RLE:
        document = queue.coco(include_unreviewed=include_unreviewed)
        return write_json_atomic(queue.folder / EXPORT_FILE, document), document
    if form == COCO_POLYGONS:
        document = queue.coco(include_unreviewed=include_unreviewed)
        return write_json_atomic(queue.folder / POLYGON_FILE, polygon_document(document)), document
    with tempfile.TemporaryDirectory(prefix="photos-", dir=queue.folder) as photos:
        # one photo in memory at a time: each is saved as it is read, and read back as it is written out
        def keep(image_id: int, photo: Image.Image) -> None:
            photo.convert("RGB").save(Path(photos) / f"{image_id}.png", compress_level=1)

        def photo_of(image_id: int) -> Image.Image:
            with Image.open(Path(photos) / f"{image_id}.png") as opened:
                return opened.copy()

        document = queue.coco(include_unreviewed=include_unreviewed, on_image=keep)
        folder = queue.folder / YOLO_DIR
        shutil.rmtree(folder, ignore_errors=True)  # a previous export's files (items since left out) go
        write_yolo(document, photo_of, folder)
    target = queue.folder / YOLO_ZIP
    partial = target.with_name(f".{target.name}.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    partial.replace(target)
    return target, document
