"""Decoding a saved trace into records: schema version 2, and version 1 migrated through ``schema_v1``.

Files are read when first referenced and checked before use: file names against a strict pattern, every mask's
RLE by ``read_mask_set`` (the one place mask data read from a file is validated: against the photo's size, through
``trace.safe_decode``), the photo on its header (``safe_decode.check_image_size``) and then by ``images.load_image`` (the
same normalisation the run applied, so its pixels are the run's), stored images by ``safe_decode.decode_image``
within the largest view of the photo. What one load decodes is bounded by one ``trace.safe_decode.DecodeBudget``.
Callers read files through ``trace.safe_read`` (``FolderFiles`` / ``ZipFiles``) inside ``safe_read.reading``. Views come back as
recipes (``imaging.views.MaskView``) and are rendered when first looked at.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

from ..edit_ops import op_from_json
from ..errors import InputError, TraceFormatError, describe
from ..images import file_name_of, load_image
from ..imaging.legibility import DEFAULT_BOUNDS, PixelBounds
from ..imaging.views import RENDERER_VERSION, MaskView
from ..mask_set import Masks
from ..messages import ImagePart, Message, Part, TextPart
from ..types import SCHEMA_VERSION, MaskVerdict, ToolResult, Trace
from .encode import IMAGE_DIR, IMAGE_NAME, PHOTO_NAME
from .load_limits import COMMAND_LINE_LIMITS, LoadLimits, added_masks, check_held, check_photo_pixels, mask_count
from .safe_decode import (
    DecodeBudget,
    check_edit_masks,
    check_image_size,
    decode_image,
    mask_counts_for_image,
    view_size_limit,
)
from .schema_v1 import V1Reader, read_call, read_result, read_round, read_verdict

logger = logging.getLogger(__name__)

# The files a trace folder may hold besides trace.json (schema 2: content-named photo, views and mask sets; schema 1:
# images/<name>.png). Copiers of trace folders (the review queue's .zip upload) accept the same names.
TRACE_MEMBER = r"(images|masks)/[A-Za-z0-9_-]{1,100}\.[a-z0-9]{1,5}"
FILE_PATH = re.compile(f"^{TRACE_MEMBER}$")
STATUSES = ("running", "done", "no_mask", "max_rounds", "failed", "cancelled")


def read_mask_set(rles: Any, height: int, width: int, scores: Any, boxes: Any, phrase: str,
                  budget: DecodeBudget | None = None) -> Masks:
    """A mask set from its stored parts, with every RLE checked against the photo's ``height`` x ``width``
    (``safe_decode.mask_counts_for_image``: declared size, run lengths, count, ``budget``) before use.

    Raises:
        TraceFormatError: malformed RLE, masks of another size, or counts of masks, scores and boxes that differ.
    """
    counts = mask_counts_for_image(rles, height, width, f"masks of phrase {phrase!r}", budget)
    try:
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        return Masks.from_rle(counts, scores, boxes, phrase, size=(height, width))
    except ValueError as error:
        raise TraceFormatError(f"a mask set in the trace is malformed: {error}") from None


def _view_bounds(value: Any) -> PixelBounds:
    """The pixel bounds an overlay or tile was drawn for, stored as ``[min_pixels, max_pixels]``; absent in traces
    written before views recorded them, whose overlays were drawn for the default bounds.

    Raises:
        ValueError: anything but two whole numbers of at least 1, the first not above the second.
    """
    if value is None:
        return DEFAULT_BOUNDS
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"a view's bounds must be [min_pixels, max_pixels], got {value!r}")
    return PixelBounds(value[0], value[1])


def check_set_size(size: Any, photo: Image.Image, what: str) -> tuple[int, int]:
    """The (height, width) a mask record declares, which must be the photo's.

    Raises:
        TraceFormatError: another size (e.g. transposed); the message says both.
    """
    if [int(v) for v in size] != [photo.height, photo.width]:
        raise TraceFormatError(f"{what} of size {list(size)} (height, width) do not match the image's "
                               f"{[photo.height, photo.width]}")
    return photo.height, photo.width


class _Reader:
    """Rebuilds a version-2 trace; files are read (and checked) once, when first referenced."""

    def __init__(self, document: dict[str, Any], load_bytes: Callable[[str], bytes],
                 limits: LoadLimits = COMMAND_LINE_LIMITS) -> None:
        self._load = load_bytes
        self._limits = limits
        self._document = document
        self._files: list[str] = [self._checked_path(p) for p in document["mask_files"]]
        self._sets: dict[int, Masks] = {}
        self._records: dict[str, dict[str, Any]] = {}
        self._images: dict[str, Image.Image] = {}
        self.budget = DecodeBudget()
        photo = document["photo"]
        self.photo = self._photo(self._checked_path(photo["file"]))
        if self.photo.size != (int(photo["width"]), int(photo["height"])):
            raise TraceFormatError(f"the photo is {self.photo.width}x{self.photo.height}, the trace says "
                                   f"{photo['width']}x{photo['height']}")
        self.photo_file = self._bytes(photo["file"])

    @staticmethod
    def _checked_path(path: Any) -> str:
        if not isinstance(path, str) or not FILE_PATH.match(path):
            raise TraceFormatError(f"bad file name {path!r} in the trace")
        return path

    def _bytes(self, path: str) -> bytes:
        try:
            return self._load(path)
        except (OSError, KeyError) as error:
            raise TraceFormatError(f"{path} is missing or unreadable: {error}") from None

    def _photo(self, path: str) -> Image.Image:
        data = self._bytes(path)
        width, height = check_image_size(data, f"the photo {path}", max_pixels=None, budget=self.budget)
        check_photo_pixels(width, height, self._limits)
        final = self._document.get("final_masks")
        masks = mask_count(self._set_record(self._files[final])) if final in range(len(self._files)) else 0
        check_held(width, height, masks + added_masks(self._document.get("edits")), len(data), self._limits)
        try:
            return load_image(data, max_pixels=self._limits.max_photo_pixels)
        except InputError as error:
            raise TraceFormatError(f"the photo {path} cannot be read: {error}") from None

    def _stored_image(self, path: str) -> Image.Image:
        if path not in self._images:
            limit = view_size_limit(*self.photo.size)
            self._images[path] = decode_image(self._bytes(path), f"image {path}", limit, budget=self.budget)
        return self._images[path]

    def mask_set(self, index: Any) -> Masks | None:
        if index is None:
            return None
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self._files):
            raise TraceFormatError(f"the trace refers to mask set {index!r}, which it does not list")
        if index not in self._sets:
            self._sets[index] = self._read_set(self._files[index])
        return self._sets[index]

    def _set_record(self, path: str) -> dict[str, Any]:
        if path in self._records:
            return self._records[path]
        try:
            record = json.loads(self._bytes(path).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise TraceFormatError(f"{path} is not valid JSON: {error}") from None
        if not isinstance(record, dict):
            raise TraceFormatError(f"{path} does not hold a mask set")
        self._records[path] = record
        return record

    def _read_set(self, path: str) -> Masks:
        record = self._set_record(path)
        height, width = check_set_size(record["size"], self.photo, f"the masks in {path}")
        if "from" in record:
            source_path = self._checked_path(record["from"])
            source = self._set_record(source_path)
            if "rle" not in source or [int(v) for v in source["size"]] != [height, width]:
                raise TraceFormatError(f"{path} picks masks of {source_path}, which holds no masks of its size")
            indices = record["indices"]
            if not isinstance(indices, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(source["rle"]) for i in indices
            ):
                raise TraceFormatError(f"{path} picks masks that {source_path} does not hold")
            rles = [source["rle"][i] for i in indices]
        else:
            rles = record["rle"]
        if not isinstance(rles, list):
            raise TraceFormatError(f"{path}: 'rle' must be a list of COCO RLE counts")
        objects = [{"size": [height, width], "counts": c} for c in rles]
        return read_mask_set(objects, height, width, record["scores"], record["boxes_xyxy"], str(record["phrase"]),
                             self.budget)

    def image(self, ref: dict[str, Any]) -> ImagePart:
        name = ref["name"]
        if not isinstance(name, str) or not IMAGE_NAME.match(name):
            raise TraceFormatError(f"bad image name {name!r} in the trace")
        view = ref.get("view")
        if view is not None:
            masks = self.mask_set(view["masks"])
            indices = view.get("indices")
            if indices is not None and not (isinstance(indices, list) and all(type(k) is int for k in indices)):
                raise TraceFormatError(f"image {name!r}: a group view's indices must be a list of mask indices")
            try:
                recipe = MaskView(view["kind"], self.photo, masks, view.get("index"), view.get("tile"),  # type: ignore[arg-type]
                                  _view_bounds(view.get("bounds")), None if indices is None else tuple(indices),
                                  view.get("enlarged", False))
            except ValueError as error:
                raise TraceFormatError(f"image {name!r}: {error}") from None
            return ImagePart(None, name, recipe)
        if "file" in ref:
            return ImagePart(self._stored_image(self._checked_path(ref["file"])), name)
        if name == PHOTO_NAME:
            return ImagePart(self.photo, name)
        raise TraceFormatError(f"image {name!r} has neither a view nor a file in the trace")

    def part(self, data: dict[str, Any]) -> Part:
        if data["type"] == "text":
            return TextPart(str(data["text"]))
        if data["type"] == "image":
            return self.image(data)
        raise TraceFormatError(f"unknown message part type {data['type']!r}")

    def message(self, data: dict[str, Any] | None) -> Message | None:
        if data is None:
            return None
        if data["role"] not in ("system", "user", "assistant"):
            raise TraceFormatError(f"unknown message role {data['role']!r}")
        return Message(data["role"], tuple(self.part(p) for p in data["parts"]), read_call(data["call"]),
                       bool(data["starts_masks"]), bool(data["mistake"]))

    def verdict(self, data: dict[str, Any]) -> MaskVerdict:
        return read_verdict(data, self.image)

    def result(self, data: dict[str, Any] | None) -> ToolResult | None:
        return read_result(data, self.message, self.mask_set, self.verdict)

    def trace(self) -> Trace:
        document = self._document
        renderer = document.get("renderer_version")
        if renderer != RENDERER_VERSION:
            logger.warning("this trace was drawn by renderer version %r and is shown with version %r: its views "
                           "may differ slightly from what the model saw", renderer, RENDERER_VERSION)
        return Trace(
            query=str(document["query"]),
            image=self.photo,
            settings=dict(document["settings"]),
            messages=[m for m in (self.message(d) for d in document["messages"]) if m is not None],
            rounds=[read_round(r, self.result) for r in document["rounds"]],
            status=document["status"],
            error=document["error"],
            final_masks=self.mask_set(document["final_masks"]),
            started_at=float(document["started_at"]),
            finished_at=None if document["finished_at"] is None else float(document["finished_at"]),
            schema_version=SCHEMA_VERSION,
            edits=_read_edits(document.get("edits", [])),
            image_name=file_name_of(document.get("image_name")),
            image_file=self.photo_file,
        )


def _read_edits(data: Any) -> list:
    if not isinstance(data, list):
        raise TraceFormatError(f"'edits' must be a list of edit operations; got {type(data).__name__}")
    return [op_from_json(op) for op in data]


def _v1_trace(document: dict[str, Any], load_bytes: Callable[[str], bytes], limits: LoadLimits) -> Trace:
    """Migrate a version-1 document (see ``schema_v1``)."""
    cache: dict[str, Image.Image] = {}
    budget = DecodeBudget()
    raw: list[Image.Image] = []  # the photo, read first: every other image and mask is checked against it

    def image(name: Any) -> Image.Image:
        if not isinstance(name, str) or not IMAGE_NAME.match(name):
            raise TraceFormatError(f"bad image name {name!r} in the trace")
        if name not in cache:
            path = f"{IMAGE_DIR}/{name}.png"
            try:
                data = load_bytes(path)
            except (OSError, KeyError):
                raise TraceFormatError(f"image {path} is missing from the trace") from None
            limit = view_size_limit(*raw[0].size) if raw else None
            if not raw:  # the photo: bounded by the loader's limits before it is decoded
                width, height = check_image_size(data, f"image {path}", max_pixels=None)
                check_photo_pixels(width, height, limits)
                final = document.get("final_masks")
                masks = mask_count(final) + added_masks(document.get("edits"))
                check_held(width, height, masks, 0, limits)
            cache[name] = decode_image(data, f"image {path}", limit, budget=budget)
        return cache[name]

    def masks(rles: Any, height: int, width: int, scores: Any, boxes: Any, phrase: str) -> Masks:
        height, width = check_set_size([height, width], raw[0], f"masks of phrase {phrase!r}")
        return read_mask_set(rles, height, width, scores, boxes, phrase, budget)

    reader = V1Reader(image, masks)
    raw.append(reader.image(document["image"]))
    return Trace(
        query=str(document["query"]),
        image=raw[0],
        settings=dict(document["settings"]),
        messages=[m for m in (reader.message(d) for d in document["messages"]) if m is not None],
        rounds=[reader.round(r) for r in document["rounds"]],
        status=document["status"],
        error=document["error"],
        final_masks=reader.masks(document["final_masks"]),
        started_at=float(document["started_at"]),
        finished_at=None if document["finished_at"] is None else float(document["finished_at"]),
        schema_version=1,
        edits=_read_edits(document.get("edits", [])),
        image_name=file_name_of(document.get("image_name")),
    )


def trace_from_json(document: dict[str, Any], load_bytes: Callable[[str], bytes],
                    limits: LoadLimits = COMMAND_LINE_LIMITS) -> Trace:
    """Rebuild a trace from its ``trace.json`` document; ``load_bytes(relative_path) -> bytes`` reads the other
    files. Reads schema versions 1 (migrated, see ``schema_v1``) and 2. ``limits`` bound the photo and what the load
    will hold, checked before the photo is decoded (``trace.load_limits``).

    Raises:
        TraceFormatError: unknown schema version, missing fields, bad values or missing files.
    """
    if not isinstance(document, dict):
        raise TraceFormatError("a trace file holds a JSON object")
    version = document.get("schema_version")
    if version not in (1, SCHEMA_VERSION):
        raise TraceFormatError(
            f"trace schema_version {version!r} is not supported (this version reads 1 to {SCHEMA_VERSION})"
        )
    try:
        trace = (_v1_trace(document, load_bytes, limits) if version == 1
                 else _Reader(document, load_bytes, limits).trace())
    except TraceFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise TraceFormatError(f"the trace is malformed: {describe(error)}") from None
    check_edit_masks(trace.edits, trace.image.height, trace.image.width)
    if trace.status not in STATUSES:
        raise TraceFormatError(f"unknown trace status {trace.status!r}")
    return trace


