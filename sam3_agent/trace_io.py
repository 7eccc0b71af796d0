"""Saving and loading a self-contained trace: ``trace.json`` plus one PNG per image, or one ``.zip``.

Layout of a saved trace folder::

    trace.json          schema_version, query, settings, status, messages, rounds, final masks, edits
    images/<name>.png   every image referenced by name (raw image, overlays, verification views)

Hand corrections (``Trace.edits``) are stored under ``"edits"`` in their JSON form (``edits.op_to_json``); a trace
saved before edits existed has no such key and loads with no edits. Masks are stored as COCO RLE (``{"size": [H, W], "counts": str}``). Image names are built by the
agent from round and mask numbers; on load they are checked against a strict pattern so a
hand-edited file cannot point outside its folder.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .edits import op_from_json, op_to_json
from .errors import TraceFormatError
from .images import file_name_of
from .masks import encode_rle
from .safe_read import (
    MAX_ZIP_BYTES,
    DecodeBudget,
    FolderFiles,
    ZipFiles,
    check_edit_masks,
    decode_image,
    describe,
    masks_for_image,
    read_json,
    reading,
    regular_file,
    view_size_limit,
)
from .types import (
    SCHEMA_VERSION,
    ContextRecord,
    ImagePart,
    Masks,
    MaskVerdict,
    Message,
    Part,
    Round,
    TextPart,
    ToolCall,
    ToolResult,
    Trace,
    images_equal,
)

TRACE_FILE = "trace.json"
IMAGE_DIR = "images"
_NAME = re.compile(r"^[A-Za-z0-9_]{1,80}$")


# ------------------------------------------------------------------ encoding


class _Writer:
    """Collects images by name while encoding, refusing two different images under one name."""

    def __init__(self) -> None:
        self.images: dict[str, Image.Image] = {}

    def image(self, part: ImagePart) -> dict[str, Any]:
        if not _NAME.match(part.name):
            raise ValueError(f"image name {part.name!r} is not a safe file stem")
        known = self.images.get(part.name)
        if known is None:
            self.images[part.name] = part.image
        elif known is not part.image and not images_equal(known, part.image):
            raise ValueError(f"two different images share the name {part.name!r}")
        return {"type": "image", "name": part.name}

    def part(self, part: Part) -> dict[str, Any]:
        if isinstance(part, TextPart):
            return {"type": "text", "text": part.text}
        return self.image(part)

    def message(self, message: Message | None) -> dict[str, Any] | None:
        if message is None:
            return None
        return {
            "role": message.role,
            "parts": [self.part(p) for p in message.parts],
            "call": _call(message.call),
            "starts_masks": message.starts_masks,
            "mistake": message.mistake,
        }

    def masks(self, masks: Masks | None) -> dict[str, Any] | None:
        if masks is None:
            return None
        return {
            "phrase": masks.phrase,
            "size": [int(masks.masks.shape[1]), int(masks.masks.shape[2])],
            "scores": [float(s) for s in masks.scores],
            "boxes_xyxy": [[float(v) for v in box] for box in masks.boxes],
            "rle": encode_rle(masks.masks),
        }

    def verdict(self, verdict: MaskVerdict) -> dict[str, Any]:
        return {
            "mask_number": verdict.mask_number,
            "verdict": verdict.verdict,
            "source": verdict.source,
            "outputs": list(verdict.outputs),
            "mask_view": self.image(verdict.mask_view)["name"],
            "zoom_view": self.image(verdict.zoom_view)["name"],
            "prompt_tokens": verdict.prompt_tokens,
            "seconds": verdict.seconds,
            "error": verdict.error,
        }

    def result(self, result: ToolResult | None) -> dict[str, Any] | None:
        if result is None:
            return None
        return {
            "reply": self.message(result.reply),
            "masks": self.masks(result.masks),
            "ends_run": result.ends_run,
            "final_masks": self.masks(result.final_masks),
            "verdicts": [self.verdict(v) for v in result.verdicts],
            "summary": result.summary,
        }

    def round(self, r: Round) -> dict[str, Any]:
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
            "finish_reason": r.finish_reason,
            "call": _call(r.call),
            "error": r.error,
            "error_detail": r.error_detail,
            "result": self.result(r.result),
            "assistant_index": r.assistant_index,
            "reply_index": r.reply_index,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "vlm_seconds": r.vlm_seconds,
            "tool_seconds": r.tool_seconds,
        }


def _call(call: ToolCall | None) -> dict[str, Any] | None:
    if call is None:
        return None
    return {"name": call.name, "parameters": call.parameters, "raw_name": call.raw_name}


def trace_to_json(trace: Trace) -> tuple[dict[str, Any], dict[str, Image.Image]]:
    """The JSON document of a trace and the images it references (name → image).

    Raises:
        ValueError: when two different images share a name, or a name is not a safe file stem.
    """
    writer = _Writer()
    writer.image(ImagePart(trace.image, "raw"))
    document = {
        "schema_version": SCHEMA_VERSION,
        "query": trace.query,
        "image": "raw",
        "settings": trace.settings,
        "status": trace.status,
        "error": trace.error,
        "started_at": trace.started_at,
        "finished_at": trace.finished_at,
        "messages": [writer.message(m) for m in trace.messages],
        "rounds": [writer.round(r) for r in trace.rounds],
        "final_masks": writer.masks(trace.final_masks),
        "edits": [op_to_json(op) for op in trace.edits],
    }
    if trace.image_name is not None:
        document["image_name"] = trace.image_name
    return document, writer.images


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def save_trace(trace: Trace, folder: str | Path) -> Path:
    """Write ``trace.json`` and ``images/*.png`` into ``folder`` (created if needed); returns the JSON path."""
    folder = Path(folder)
    document, images = trace_to_json(trace)
    (folder / IMAGE_DIR).mkdir(parents=True, exist_ok=True)
    for name, image in images.items():
        (folder / IMAGE_DIR / f"{name}.png").write_bytes(_png(image))
    for stale in (folder / IMAGE_DIR).glob("*.png"):  # left by an earlier trace saved in the same folder
        if stale.stem not in images:
            stale.unlink()
    path = folder / TRACE_FILE
    path.write_text(json.dumps(document, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def trace_to_zip_bytes(trace: Trace) -> bytes:
    """The trace as one ``.zip`` (``trace.json`` + ``images/*.png``), in memory."""
    document, images = trace_to_json(trace)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(TRACE_FILE, json.dumps(document, ensure_ascii=False, indent=1))
        for name, image in images.items():
            archive.writestr(f"{IMAGE_DIR}/{name}.png", _png(image))
    return buffer.getvalue()


# ------------------------------------------------------------------ decoding


class _Reader:
    """Decodes a trace's images and masks, each checked against the raw image (``safe_read``) before decoding."""

    def __init__(self, load_image_bytes: Any) -> None:
        self._load = load_image_bytes
        self._cache: dict[str, Image.Image] = {}
        self.budget = DecodeBudget()
        self.size: tuple[int, int] | None = None  # (width, height) of the raw image, read first

    def image(self, name: Any, raw: bool = False) -> Image.Image:
        if not isinstance(name, str) or not _NAME.match(name):
            raise TraceFormatError(f"bad image name {name!r} in the trace")
        if name not in self._cache:
            path = f"{IMAGE_DIR}/{name}.png"
            try:
                data = self._load(path)
            except (OSError, KeyError):
                raise TraceFormatError(f"image {path} is missing from the trace") from None
            limit = None if raw or self.size is None else view_size_limit(*self.size)
            self._cache[name] = decode_image(data, f"image {path}", limit, budget=self.budget)
        if raw:
            self.size = self._cache[name].size
        return self._cache[name]

    def part(self, data: dict[str, Any]) -> Part:
        if data["type"] == "text":
            return TextPart(str(data["text"]))
        if data["type"] == "image":
            return ImagePart(self.image(data["name"]), data["name"])
        raise TraceFormatError(f"unknown message part type {data['type']!r}")

    def message(self, data: dict[str, Any] | None) -> Message | None:
        if data is None:
            return None
        if data["role"] not in ("system", "user", "assistant"):
            raise TraceFormatError(f"unknown message role {data['role']!r}")
        return Message(
            data["role"], tuple(self.part(p) for p in data["parts"]), _read_call(data["call"]),
            bool(data["starts_masks"]),
            bool(data.get("mistake", False)),  # absent in traces written before this field existed
        )

    def masks(self, data: dict[str, Any] | None) -> Masks | None:
        if data is None:
            return None
        width, height = self.size
        if list(data["size"]) != [height, width]:
            raise TraceFormatError(f"masks of size {data['size']} (height, width) do not match the image's "
                                   f"{[height, width]}")
        masks = masks_for_image(data["rle"], height, width, f"masks of phrase {data['phrase']!r}", self.budget)
        scores = np.asarray(data["scores"], dtype=np.float32).reshape(-1)
        boxes = np.asarray(data["boxes_xyxy"], dtype=np.float32).reshape(-1, 4)
        if not (len(scores) == len(boxes) == masks.shape[0]):
            raise TraceFormatError("mask, score and box counts differ in the trace")
        return Masks(masks, scores, boxes, str(data["phrase"]))

    def verdict(self, data: dict[str, Any]) -> MaskVerdict:
        return MaskVerdict(
            mask_number=int(data["mask_number"]),
            verdict=data["verdict"],
            source=data["source"],
            outputs=tuple(data["outputs"]),
            mask_view=ImagePart(self.image(data["mask_view"]), data["mask_view"]),
            zoom_view=ImagePart(self.image(data["zoom_view"]), data["zoom_view"]),
            prompt_tokens=data["prompt_tokens"],
            seconds=float(data["seconds"]),
            error=data.get("error"),  # absent in traces written before verification errors were recorded
        )

    def result(self, data: dict[str, Any] | None) -> ToolResult | None:
        if data is None:
            return None
        return ToolResult(
            reply=self.message(data["reply"]),
            masks=self.masks(data["masks"]),
            ends_run=bool(data["ends_run"]),
            final_masks=self.masks(data["final_masks"]),
            verdicts=tuple(self.verdict(v) for v in data["verdicts"]),
            summary=str(data["summary"]),
        )

    def round(self, data: dict[str, Any]) -> Round:
        context = data["context"]
        return Round(
            index=int(data["index"]),
            context=ContextRecord(
                kept=tuple(context["kept"]),
                dropped=tuple(context["dropped"]),
                images_as_text=tuple(context["images_as_text"]),
                note=context["note"],
                image_count=int(context["image_count"]),
                reasons=_read_reasons(context.get("reasons")),  # absent in traces saved before it existed
            ),
            output=str(data["output"]),
            finish_reason=data["finish_reason"],
            call=_read_call(data["call"]),
            error=data["error"],
            error_detail=data["error_detail"],
            result=self.result(data["result"]),
            assistant_index=data["assistant_index"],
            reply_index=data["reply_index"],
            prompt_tokens=data["prompt_tokens"],
            output_tokens=data["output_tokens"],
            vlm_seconds=float(data["vlm_seconds"]),
            tool_seconds=float(data["tool_seconds"]),
        )


def _read_reasons(data: Any) -> tuple[tuple[int, str], ...] | None:
    """``ContextRecord.reasons`` from ``[[index, key], ...]`` (``None``: not recorded)."""
    if data is None:
        return None
    return tuple((int(index), str(key)) for index, key in data)


def _read_call(data: dict[str, Any] | None) -> ToolCall | None:
    if data is None:
        return None
    return ToolCall(str(data["name"]), dict(data["parameters"]), str(data["raw_name"]))


def _read_edits(data: Any) -> list:
    if not isinstance(data, list):
        raise TraceFormatError(f"'edits' must be a list of edit operations; got {type(data).__name__}")
    return [op_from_json(op) for op in data]


def trace_from_json(document: dict[str, Any], load_image_bytes: Any) -> Trace:
    """Rebuild a trace from its JSON document; ``load_image_bytes(relative_path) -> bytes``.

    Raises:
        TraceFormatError: unknown schema version, missing fields, bad values or missing images.
    """
    if not isinstance(document, dict):
        raise TraceFormatError("a trace file holds a JSON object")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise TraceFormatError(
            f"trace schema_version {version!r} is not supported (this version reads {SCHEMA_VERSION})"
        )
    reader = _Reader(load_image_bytes)
    try:
        raw = reader.image(document["image"], raw=True)
        trace = Trace(
            query=str(document["query"]),
            image=raw,
            settings=dict(document["settings"]),
            messages=[m for m in (reader.message(d) for d in document["messages"]) if m is not None],
            rounds=[reader.round(r) for r in document["rounds"]],
            status=document["status"],
            error=document["error"],
            final_masks=reader.masks(document["final_masks"]),
            started_at=float(document["started_at"]),
            finished_at=None if document["finished_at"] is None else float(document["finished_at"]),
            schema_version=int(version),
            edits=_read_edits(document.get("edits", [])),
            image_name=file_name_of(document.get("image_name")),
        )
    except TraceFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise TraceFormatError(f"the trace is malformed: {describe(error)}") from None
    check_edit_masks(trace.edits, raw.height, raw.width)
    if trace.status not in ("running", "done", "no_mask", "max_rounds", "failed", "cancelled"):
        raise TraceFormatError(f"unknown trace status {trace.status!r}")
    return trace


def load_trace(path: str | Path) -> Trace:
    """Load a trace from a folder, its ``trace.json``, or a ``.zip`` made by ``trace_to_zip_bytes``.

    Raises:
        TraceFormatError: the file is missing, not a trace, malformed, too large or unsafe (``safe_read``).
    """
    path = Path(path)
    if path.is_dir():
        path = path / TRACE_FILE
    with reading(f"the trace {str(path)!r}"):
        path = regular_file(path, "the trace")
        if path.suffix.lower() == ".zip":
            return load_trace_zip(path)
        files = FolderFiles(path.parent, f"the trace folder {str(path.parent)!r}")
        return trace_from_json(read_json(files, path.name, "the trace folder"), files.read)


def load_trace_zip(data: bytes | str | Path, max_bytes: int = MAX_ZIP_BYTES) -> Trace:
    """Load a trace from a ``.zip`` made by ``trace_to_zip_bytes`` (its bytes or its path).

    Raises:
        TraceFormatError: empty, oversized (compressed or uncompressed), not a zip, unsafe, or not a trace.
    """
    with reading("the trace .zip"), ZipFiles(data, "the trace .zip", max_bytes) as files:
        if TRACE_FILE not in files.names():
            raise TraceFormatError(f"the .zip has no {TRACE_FILE}: it is not a trace saved by SAM3 Agent")
        return trace_from_json(read_json(files, TRACE_FILE, "the .zip"), files.read)
