"""Exporting masks: COCO instance-segmentation JSON, one PNG per mask, and a bundle .zip that imports back.

COCO document for one image (loads with ``pycocotools.coco.COCO``)::

    images       [{id: 1, file_name, width, height}]   file_name: the input's (``coco_file_name``)
    categories   [{id, name}]   one per distinct label, in order of first use, ids from 1
    annotations  [{id, image_id: 1, category_id, segmentation: {size: [H, W], counts: str}, bbox: [x, y, w, h]
                   (pixels), area (pixels), iscrowd: 0, score (only where SAM 3 produced the pixels),
                   attributes: {edited_by_hand: bool, origin: str, verification (an agent mask's:
                   confirmed, not_confirmed or not_examined, ``verification.final_mask_checks``)}}]

Empty masks (erased to nothing) are left out, with a logged warning: a COCO annotation with no pixel has no box
and breaks most evaluation code.

Bundle layout (.zip)::

    bundle.json            format tag, version, query, image size and the member names below
    image.png              the image (lossless)
    query.txt              the query
    agent_masks.json       COCO of the agent's answer
    corrected_masks.json   COCO of the corrected answer (after the edits)
    trace/trace.json, trace/images/..., trace/masks/...   the full trace, edits included (``trace.io`` layout)

``load_bundle`` rebuilds the trace (with its edits) and checks that the corrected masks in the bundle are what the
edits give, so a bundle edited by hand is refused with a clear message rather than silently half-applied.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from pycocotools import mask as coco_mask

from ..edit_ops import AGENT_ORIGIN
from ..errors import InputError, TraceFormatError, describe
from ..rle import encode_rle
from ..trace.file_kind import BUNDLE_FILE
from ..trace.io import TRACE_FILE, trace_files, trace_from_json
from ..trace.load_limits import COMMAND_LINE_LIMITS, LoadLimits
from ..trace.safe_decode import DecodeBudget, masks_for_image
from ..trace.safe_read import MAX_ZIP_BYTES, ZipFiles, read_json, reading
from ..types import Trace
from ..verification import CHECK_STATES
from .edits import EditState, MaskItem, agent_items

logger = logging.getLogger(__name__)

BUNDLE_FORMAT = "sam3_agent.bundle"
BUNDLE_VERSION = 1
TRACE_PREFIX = "trace/"


# ------------------------------------------------------------------ COCO


def coco_file_name(trace: Trace) -> str:
    """The ``file_name`` a standalone COCO export gives the image: the input's file name, else ``"image.png"``.

    (Inside a bundle the image is the bundle's ``image.png``, so its COCO files name that.)
    """
    return trace.image_name or "image.png"


def coco_document(
    items: Sequence[MaskItem], width: int, height: int, file_name: str = "image.png", image_id: int = 1
) -> dict[str, Any]:
    """The COCO instance-segmentation document of ``items`` on one image (see the module docstring).

    Args:
        items: masks to export, in order (bool (H, W) each); empty ones are skipped with a warning.
        width, height: the image size in pixels; every mask must have it.
        file_name: the image's file name recorded in ``images``.
        image_id: the image's id.

    Raises:
        InputError: a mask of another size.
    """
    categories: dict[str, int] = {}
    annotations: list[dict[str, Any]] = []
    for number, item in enumerate(items, start=1):
        if item.mask.shape != (height, width):
            raise InputError(f"mask {number} is {item.mask.shape[::-1]} (W, H) but the image is {width}x{height}")
        if not item.mask.any():
            logger.warning("mask %d is empty: left out of the COCO export", number)
            continue
        rle = encode_rle(item.mask)[0]
        binary = {"size": rle["size"], "counts": rle["counts"].encode("ascii")}
        category = categories.setdefault(item.label, len(categories) + 1)
        annotation: dict[str, Any] = {
            "id": len(annotations) + 1,
            "image_id": int(image_id),
            "category_id": category,
            "segmentation": rle,
            "bbox": [float(v) for v in coco_mask.toBbox(binary)],
            "area": int(coco_mask.area(binary)),
            "iscrowd": 0,
        }
        if item.score is not None:
            annotation["score"] = float(item.score)
        annotation["attributes"] = {"edited_by_hand": bool(item.edited), "origin": item.origin}
        if item.check is not None:
            annotation["attributes"]["verification"] = item.check
        annotations.append(annotation)
    return {
        "images": [{"id": int(image_id), "file_name": file_name, "width": int(width), "height": int(height)}],
        "categories": [{"id": cid, "name": name} for name, cid in categories.items()],
        "annotations": annotations,
    }


def _check(value: Any) -> str | None:
    """An annotation's ``verification`` attribute: one of ``verification.CHECK_STATES``, else ``None``."""
    return value if value in CHECK_STATES else None


def items_from_coco(document: Any, width: int, height: int, what: str = "the COCO file") -> list[MaskItem]:
    """Read back the masks of a COCO document written by :func:`coco_document` (one image).

    Returns:
        items in annotation order: mask bool (H, W), label = category name, score (or None), ``edited`` and
        ``origin`` from ``attributes`` (default False / ``"agent"``).

    Raises:
        InputError: not a COCO document, an image of another size, unknown categories, malformed RLE, masks of
            another size; the message names ``what`` and the problem.
    """
    try:
        images = document["images"]
        names = {int(c["id"]): str(c["name"]) for c in document["categories"]}
        annotations = list(document["annotations"])
        if len(images) != 1:
            raise ValueError(f"it describes {len(images)} images, expected 1")
        size = (int(images[0]["width"]), int(images[0]["height"]))
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise InputError(f"{what} is not a COCO instance file of one image: {describe(error)}") from None
    if size != (width, height):
        raise InputError(f"{what} is for a {size[0]}x{size[1]} image but the image is {width}x{height}")
    items = []
    budget = DecodeBudget()
    for number, ann in enumerate(annotations, start=1):
        try:
            label = names[int(ann["category_id"])]
            mask = masks_for_image([ann["segmentation"]], height, width, f"annotation {number} of {what}", budget)[0]
            attributes = ann.get("attributes") or {}
            score = ann.get("score")
            items.append(MaskItem(mask, label, None if score is None else float(score),
                                  str(attributes.get("origin", AGENT_ORIGIN)),
                                  edited=bool(attributes.get("edited_by_hand", False)),
                                  check=_check(attributes.get("verification"))))
        except TraceFormatError as error:  # the mask does not fit the image; the message names the annotation
            raise InputError(str(error)) from None
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"annotation {number} of {what} is malformed: {describe(error)}") from None
    return items


def write_coco(document: dict[str, Any], path: str | Path) -> Path:
    """Write a COCO document as JSON (folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def write_mask_pngs(items: Sequence[MaskItem], folder: str | Path) -> list[Path]:
    """One 8-bit PNG per non-empty mask (0 outside, 255 inside, full size): ``mask_001.png``, ``mask_002.png``...

    Numbers follow the COCO annotation ids of :func:`coco_document` for the same items (empty masks skipped), so
    ``mask_007.png`` is annotation 7. Names never contain labels or model text.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for item in (it for it in items if it.mask.any()):
        path = folder / f"mask_{len(paths) + 1:03d}.png"
        Image.fromarray(item.mask.astype(np.uint8) * 255, mode="L").save(path)
        paths.append(path)
    return paths


# ------------------------------------------------------------------ bundle


@dataclass(frozen=True, eq=False)
class Bundle:
    """What a bundle holds once imported: the trace (edits included) and its edit state (cursor at the end)."""

    trace: Trace
    state: EditState


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def bundle_bytes(trace: Trace, state: EditState | None = None) -> bytes:
    """The bundle .zip of a trace, in memory.

    Args:
        trace: the run; its ``edits`` are replaced by ``state``'s operations in effect when ``state`` is given.
        state: the current corrections (default: those recorded in ``trace``).

    Raises:
        TraceFormatError: the trace's recorded edits do not apply (only when ``state`` is None).
    """
    if state is not None:
        trace = state.to_trace(trace)
    else:
        state = EditState.from_trace(trace)
    width, height = trace.image.size
    agent = agent_items(trace, state.label)
    files = trace_files(trace)
    manifest = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "query": trace.query,
        "width": width,
        "height": height,
        "image": "image.png",
        "agent_masks": "agent_masks.json",
        "corrected_masks": "corrected_masks.json",
        "trace": TRACE_PREFIX + TRACE_FILE,
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(BUNDLE_FILE, json.dumps(manifest, ensure_ascii=False, indent=1))
        archive.writestr("image.png", _png_bytes(trace.image))
        archive.writestr("query.txt", trace.query)
        archive.writestr("agent_masks.json", json.dumps(coco_document(agent, width, height), ensure_ascii=False))
        archive.writestr("corrected_masks.json",
                         json.dumps(coco_document(state.corrected_items(), width, height), ensure_ascii=False))
        for relative, data in files.items():  # trace.json last, as in a trace folder
            archive.writestr(TRACE_PREFIX + relative, data)
    return buffer.getvalue()


def write_bundle(trace: Trace, path: str | Path, state: EditState | None = None) -> Path:
    """Write :func:`bundle_bytes` to ``path`` (folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bundle_bytes(trace, state))
    return path


def _read_json(archive: ZipFiles, name: str) -> Any:
    try:
        return read_json(archive, name, "the bundle")
    except KeyError:
        raise TraceFormatError(f"the bundle has no {name}; export it again") from None


def load_bundle(data: bytes | str | Path, max_bytes: int = MAX_ZIP_BYTES, limits: LoadLimits = COMMAND_LINE_LIMITS) -> Bundle:
    """Import a bundle made by :func:`bundle_bytes` (its bytes or its path); its trace is read within ``limits``
    (``trace.load_limits``).

    Raises:
        TraceFormatError: not a zip or not a bundle, too large, unsafe (``trace.safe_read``), unknown version, a malformed
            trace or COCO file, masks whose size differs from the image, or corrected masks that differ from what the
            edits give.
    """
    with reading("the bundle"), ZipFiles(data, "the bundle", max_bytes) as archive:
        return bundle_from_files(archive, limits)


def bundle_from_files(archive: ZipFiles, limits: LoadLimits = COMMAND_LINE_LIMITS) -> Bundle:
    """The bundle in an opened ``.zip`` (see :func:`load_bundle`, which opens it; ``correct.saved`` opens a ``.zip``
    once and calls this when ``trace.file_kind`` finds a bundle).

    Raises:
        TraceFormatError: as :func:`load_bundle`.
    """
    with reading("the bundle"):
        manifest = _read_json(archive, BUNDLE_FILE)
        if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
            raise TraceFormatError(f"{BUNDLE_FILE} does not describe a SAM3 Agent bundle")
        if manifest.get("version") != BUNDLE_VERSION:
            raise TraceFormatError(
                f"bundle version {manifest.get('version')!r} is not supported (this version reads {BUNDLE_VERSION})"
            )
        document = _read_json(archive, TRACE_PREFIX + TRACE_FILE)

        def read(relative: str) -> bytes:
            return archive.read(TRACE_PREFIX + relative)

        trace = trace_from_json(document, read, limits)
        width, height = trace.image.size
        state = EditState.from_trace(trace)
        for name, expected in (("agent_masks.json", agent_items(trace, state.label)),
                               ("corrected_masks.json", state.corrected_items())):
            try:
                found = items_from_coco(_read_json(archive, name), width, height, name)
            except InputError as error:
                raise TraceFormatError(f"{error}; the bundle is damaged: export it again") from None
            if not _same_masks(found, expected):
                raise TraceFormatError(
                    f"{name} does not match the trace in the bundle (was it changed by hand?); the trace is the "
                    "source of truth: export the bundle again from it"
                )
    return Bundle(trace, state)


def _same_masks(found: Sequence[MaskItem], expected: Sequence[MaskItem]) -> bool:
    expected = [it for it in expected if it.mask.any()]
    return len(found) == len(expected) and all(
        a.label == b.label
        and a.edited == b.edited
        and a.origin == b.origin
        and (a.score is None) == (b.score is None)
        and (a.score is None or abs(a.score - b.score) <= 1e-6)
        and np.array_equal(a.mask, b.mask)
        for a, b in zip(found, expected)
    )

