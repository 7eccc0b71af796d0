"""Encoding a trace into the files of its saved form (schema version 2; the layout is in ``trace.io``).

``TraceEncoder`` remembers what it already encoded, so a writer that saves a running trace after every round
encodes only what is new: the photo once, each mask set once, each stored image once. Mask sets are recognised
by object first and by value next; a set that only picks masks of an earlier set (the survivors of a
verification, a final selection) is stored as that set's name and the indices, so each mask's RLE is written
once per run.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from PIL import Image

from .. import rle
from ..edit_ops import op_to_json
from ..errors import InputError
from ..images import load_image
from ..imaging.views import RENDERER_VERSION, MaskView
from ..mask_set import Masks
from ..messages import ImagePart, Message, Part, TextPart, ToolCall, images_equal
from ..types import SCHEMA_VERSION, MaskVerdict, Round, ToolResult, Trace

logger = logging.getLogger(__name__)

TRACE_FILE = "trace.json"
IMAGE_DIR = "images"
MASK_DIR = "masks"
MAX_PHOTO_PIXELS = 256_000_000  # a stored photo above this is refused on load (the CLI's limit can be raised)
PHOTO_NAME = "raw"  # the name message 1 gives the photo
IMAGE_NAME = re.compile(r"^[A-Za-z0-9_]{1,80}$")  # image names: built from round and mask numbers only
_PHOTO_EXT = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "TIFF": "tif", "BMP": "bmp", "GIF": "gif",
              "HEIF": "heic", "AVIF": "avif"}


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def png_bytes(image: Image.Image) -> bytes:
    """Lossless PNG, fast setting (``compress_level=1``): these are written while a run goes on."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def json_bytes(document: Any, indent: int | None = None) -> bytes:
    """UTF-8 JSON; compact unless ``indent`` is given."""
    separators = None if indent else (",", ":")
    return json.dumps(document, ensure_ascii=False, indent=indent, separators=separators).encode("utf-8")


# ------------------------------------------------------------------ encoding


class TraceEncoder:
    """Turns a trace into its files; remembers what it already encoded, so that encoding the same run again
    after each round only encodes what is new (the photo once, each mask set once).

    Not thread-safe: one encoder per writer.
    """

    def __init__(self) -> None:
        self._photo: tuple[int, str, bytes] | None = None  # (id of the image, path, bytes)
        self._sets: dict[int, tuple[Masks, int]] = {}  # id(Masks) -> (the object, index in set_files)
        self._set_files: list[tuple[str, bytes]] = []
        self._set_of_value: list[Masks] = []
        self._inline: dict[bytes, tuple[int, int]] = {}  # counts -> (set index, mask index) where stored inline
        self._stored: dict[int, tuple[ImagePart, str, bytes]] = {}  # id(part) -> (part, path, bytes)

    # -- the photo

    def photo(self, trace: Trace) -> tuple[str, bytes]:
        """The photo's file: ``trace.image_file`` when it decodes to exactly ``trace.image``, else a PNG."""
        if self._photo is not None and self._photo[0] == id(trace.image):
            return self._photo[1], self._photo[2]
        data, ext = None, "png"
        if trace.image_file:
            try:
                decoded = load_image(trace.image_file, max_pixels=MAX_PHOTO_PIXELS)
                if images_equal(decoded, trace.image):
                    data = bytes(trace.image_file)
                    with Image.open(io.BytesIO(data)) as probe:
                        ext = _PHOTO_EXT.get(str(probe.format), "img")
                else:
                    logger.info("the photo's file decodes to other pixels than the run's image: stored as PNG")
            except InputError as error:
                logger.info("the photo's file cannot be stored as given (%s): stored as PNG", error)
        if data is None:
            data, ext = png_bytes(trace.image), "png"
        path = f"{IMAGE_DIR}/photo-{_hash(data)}.{ext}"
        self._photo = (id(trace.image), path, data)
        return path, data

    # -- mask sets

    def mask_set(self, masks: Masks) -> int:
        """The index (in ``set_files``) of the file storing ``masks``; encodes it the first time."""
        known = self._sets.get(id(masks))
        if known is not None:
            return known[1]
        for index, other in enumerate(self._set_of_value):  # the same set under another object
            if other == masks:
                self._sets[id(masks)] = (masks, index)
                return index
        index = len(self._set_files)
        record: dict[str, Any] = {
            "size": [masks.height, masks.width],
            "phrase": masks.phrase,
            "scores": [float(s) for s in masks.scores],
            "boxes_xyxy": [[float(v) for v in box] for box in masks.boxes],
        }
        places = [self._inline.get(c) for c in masks.counts]
        sources = {p[0] for p in places if p is not None}
        if len(masks) and None not in places and len(sources) == 1:
            source = sources.pop()
            record["from"] = self._set_files[source][0]
            record["indices"] = [p[1] for p in places]  # type: ignore[index]
        else:
            record["rle"] = [rle.text(c) for c in masks.counts]
            for k, counts in enumerate(masks.counts):
                self._inline.setdefault(counts, (index, k))
        data = json_bytes(record)
        self._set_files.append((f"{MASK_DIR}/{_hash(data)}.json", data))
        self._set_of_value.append(masks)
        self._sets[id(masks)] = (masks, index)
        return index

    # -- images

    def image(self, part: ImagePart, trace: Trace, names: dict[str, Any]) -> dict[str, Any]:
        """The JSON reference of an image part: a view recipe, the photo, or a stored PNG.

        Raises:
            ValueError: a name that is not a safe file stem, or two different images under one name.
        """
        if not IMAGE_NAME.match(part.name):
            raise ValueError(f"image name {part.name!r} is not a safe file stem")
        view = part.view
        if isinstance(view, MaskView) and (view.photo is trace.image or images_equal(view.photo, trace.image)):
            ref: dict[str, Any] = {"name": part.name, "view": {"kind": view.kind, "masks": self.mask_set(view.masks)}}
            if view.index is not None:
                ref["view"]["index"] = view.index
            if view.tile is not None:
                ref["view"]["tile"] = view.tile
            if view.indices is not None:
                ref["view"]["indices"] = list(view.indices)
            if view.enlarged:  # absent: drawn at the photo's size, as every overlay before renderer 6
                ref["view"]["enlarged"] = True
            if view.kind not in ("mask", "zoom"):  # drawn for these pixel bounds: a reload draws the same pixels
                ref["view"]["bounds"] = [view.bounds.min_pixels, view.bounds.max_pixels]
        elif part.name == PHOTO_NAME:
            if part.image is not trace.image and not images_equal(part.image, trace.image):
                raise ValueError(f"the image named {PHOTO_NAME!r} is not the trace's photo")
            ref = {"name": part.name}
        else:
            stored = self._stored.get(id(part))
            if stored is None:
                data = png_bytes(part.image)
                stored = (part, f"{IMAGE_DIR}/{part.name}-{_hash(data)}.png", data)
                self._stored[id(part)] = stored
            ref = {"name": part.name, "file": stored[1]}
        known = names.setdefault(part.name, (part, ref))
        if known[0] is not part and known[1] != ref and not (known[0] == part):
            raise ValueError(f"two different images share the name {part.name!r}")
        return ref

    def _part(self, part: Part, trace: Trace, names: dict[str, Any]) -> dict[str, Any]:
        if isinstance(part, TextPart):
            return {"type": "text", "text": part.text}
        return {"type": "image", **self.image(part, trace, names)}

    def _message(self, message: Message | None, trace: Trace, names: dict[str, Any]) -> dict[str, Any] | None:
        if message is None:
            return None
        return {
            "role": message.role,
            "parts": [self._part(p, trace, names) for p in message.parts],
            "call": call_json(message.call),
            "starts_masks": message.starts_masks,
            "mistake": message.mistake,
        }

    def _masks(self, masks: Masks | None) -> int | None:
        return None if masks is None else self.mask_set(masks)

    def _verdict(self, verdict: MaskVerdict, trace: Trace, names: dict[str, Any]) -> dict[str, Any]:
        record = {
            "mask_number": verdict.mask_number,
            "verdict": verdict.verdict,
            "source": verdict.source,
            "outputs": list(verdict.outputs),
            "mask_view": self.image(verdict.mask_view, trace, names),
            "zoom_view": None if verdict.zoom_view is None else self.image(verdict.zoom_view, trace, names),
            "prompt_tokens": verdict.prompt_tokens,
            "seconds": verdict.seconds,
            "error": verdict.error,
        }
        if verdict.group:
            record["group"] = list(verdict.group)
        return record

    def _result(self, result: ToolResult | None, trace: Trace, names: dict[str, Any]) -> dict[str, Any] | None:
        if result is None:
            return None
        return {
            "reply": self._message(result.reply, trace, names),
            "masks": self._masks(result.masks),
            "ends_run": result.ends_run,
            "final_masks": self._masks(result.final_masks),
            "verdicts": [self._verdict(v, trace, names) for v in result.verdicts],
            "summary": result.summary,
        }

    def _round(self, r: Round, trace: Trace, names: dict[str, Any]) -> dict[str, Any]:
        return {
            "index": r.index,
            "context": {
                "kept": list(r.context.kept),
                "dropped": list(r.context.dropped),
                "images_as_text": list(r.context.images_as_text),
                "note": r.context.note,
                "image_count": r.context.image_count,
                "reasons": None if r.context.reasons is None else [list(pair) for pair in r.context.reasons],
            },
            "output": r.output,
            "reasoning": r.reasoning,
            "finish_reason": r.finish_reason,
            "call": call_json(r.call),
            "error": r.error,
            "error_detail": r.error_detail,
            "result": self._result(r.result, trace, names),
            "assistant_index": r.assistant_index,
            "reply_index": r.reply_index,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "vlm_seconds": r.vlm_seconds,
            "tool_seconds": r.tool_seconds,
        }

    def files(self, trace: Trace) -> dict[str, bytes]:
        """Every file of the saved trace (relative path -> bytes), ``trace.json`` last.

        Raises:
            ValueError: two different images share a name, or a name is not a safe file stem.
        """
        photo_path, photo = self.photo(trace)
        names: dict[str, Any] = {}
        messages = [self._message(m, trace, names) for m in trace.messages]
        rounds = [self._round(r, trace, names) for r in trace.rounds]
        final = self._masks(trace.final_masks)
        files = {photo_path: photo}
        # Every set encoded so far is written and listed: rounds only grow, so indices stay valid from one
        # incremental save to the next.
        files.update(self._set_files)
        stored = {ref["name"]: ref["file"] for ref in (v[1] for v in names.values()) if "file" in ref}
        for part, path, data in self._stored.values():
            if stored.get(part.name) == path:
                files[path] = data
        document = {
            "schema_version": SCHEMA_VERSION,
            "renderer_version": RENDERER_VERSION,
            "query": trace.query,
            "image_name": trace.image_name,
            "photo": {"file": photo_path, "width": trace.image.width, "height": trace.image.height},
            "mask_files": [p for p, _ in self._set_files],
            "settings": trace.settings,
            "status": trace.status,
            "error": trace.error,
            "started_at": trace.started_at,
            "finished_at": trace.finished_at,
            "messages": messages,
            "rounds": rounds,
            "final_masks": final,
            "edits": [op_to_json(op) for op in trace.edits],
        }
        files[TRACE_FILE] = json_bytes(document)  # compact: the C encoder (an indent falls back to Python)
        return files


def call_json(call: ToolCall | None) -> dict[str, Any] | None:
    """The JSON form of a tool call (the same in every schema version)."""
    if call is None:
        return None
    return {"name": call.name, "parameters": call.parameters, "raw_name": call.raw_name}


def photo_file_of(source: Any) -> bytes | None:
    """The photo's file as given, for ``Agent.start(image_file=...)``: the bytes of encoded image data, or of a
    regular file at a path; ``None`` for anything else (a PIL image, an array, a FIFO, an unreadable path). The
    trace stores these bytes only when they decode to the run's pixels (``TraceEncoder.photo``)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        try:
            path = Path(source)
            return path.read_bytes() if path.is_file() else None
        except OSError:
            return None
    return None


def trace_files(trace: Trace) -> dict[str, bytes]:
    """Every file of a saved trace (relative path -> bytes, ``trace.json`` last); see ``trace.io``.

    Raises:
        ValueError: when two different images share a name, or a name is not a safe file stem.
    """
    return TraceEncoder().files(trace)
