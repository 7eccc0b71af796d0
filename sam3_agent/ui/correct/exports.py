"""The files the Correct tab's export buttons write for a session, under the session's own folder: COCO JSON (RLE or
polygons), PNG masks, YOLO segmentation labels and the trace. No Gradio here.

Every file holds the corrected answer: the masks neither hidden, deleted nor empty (``EditState.corrected_items``).
"""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path
from typing import Any

from ...correct.export import coco_document, coco_file_name, write_coco, write_mask_pngs
from ...correct.polygons import polygon_document
from ...correct.yolo import yolo_zip_bytes
from ...trace.io import trace_to_zip_bytes
from .session import CorrectSession, corrected_trace

COCO_FILE = "corrected_masks.json"
POLYGON_FILE = "corrected_masks_polygons.json"
PNG_ZIP_FILE = "corrected_masks_png.zip"
YOLO_ZIP_FILE = "corrected_masks_yolo.zip"
BUNDLE_ZIP_FILE = "bundle.zip"
TRACE_ZIP_FILE = "trace_with_edits.zip"


def corrected_document(session: CorrectSession) -> dict[str, Any]:
    """The COCO instance document (RLE) of the corrected answer, image id 1, named as the input photo."""
    width, height = session.trace.image.size
    return coco_document(session.state.corrected_items(), width, height, file_name=coco_file_name(session.trace))


def write_corrected_coco(session: CorrectSession, folder: Path) -> Path:
    """``folder/corrected_masks.json``: COCO with RLE segmentations."""
    return write_coco(corrected_document(session), folder / COCO_FILE)


def write_corrected_polygons(session: CorrectSession, folder: Path) -> Path:
    """``folder/corrected_masks_polygons.json``: the same COCO with polygon segmentations (``correct.polygons``)."""
    return write_coco(polygon_document(corrected_document(session)), folder / POLYGON_FILE)


def write_corrected_yolo(session: CorrectSession, folder: Path) -> Path:
    """``folder/corrected_masks_yolo.zip``: data.yaml, images/<stem>.png and labels/<stem>.txt (``correct.yolo``)."""
    target = folder / YOLO_ZIP_FILE
    target.write_bytes(yolo_zip_bytes(corrected_document(session), {1: session.trace.image.convert("RGB")}))
    return target


def write_corrected_pngs(session: CorrectSession, folder: Path) -> Path:
    """``folder/corrected_masks_png.zip`` holding ``mask_001.png``... (8-bit, 0 / 255, full size)."""
    pngs = folder / "png"
    shutil.rmtree(pngs, ignore_errors=True)
    paths = write_mask_pngs(session.state.corrected_items(), pngs)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:  # PNGs are compressed already
        for path in paths:
            archive.write(path, path.name)
    target = folder / PNG_ZIP_FILE
    target.write_bytes(buffer.getvalue())
    shutil.rmtree(pngs, ignore_errors=True)
    return target


def write_corrected_trace(session: CorrectSession, folder: Path) -> Path:
    """``folder/trace_with_edits.zip``: the trace with the edits in effect (``trace.io`` layout)."""
    target = folder / TRACE_ZIP_FILE
    target.write_bytes(trace_to_zip_bytes(corrected_trace(session)))
    return target
