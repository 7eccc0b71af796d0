"""Reading traces saved in schema version 1 (before views were derived on load): the migration to today's records.

A version-1 trace stored every image as a PNG (``images/<name>.png``) and every mask set inline as RLE. Loaded
here, its images stay the stored pixels (what the model saw then: nothing is re-rendered), and its masks become
``mask_set.Masks``; saving it again writes the current schema (``trace.io``), keeping those images as stored files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..agent.output_parts import reasoning_of
from ..errors import TraceFormatError
from ..mask_set import Masks
from ..messages import ImagePart, Message, Part, TextPart, ToolCall
from ..types import VERDICTS, ContextRecord, MaskVerdict, Round, ToolResult

IMAGE_DIR = "images"


class V1Reader:
    """Rebuilds the records of a version-1 document.

    Args:
        load_image: ``name -> PIL image`` of ``images/<name>.png`` (checked and cached by the caller).
        read_masks: ``(rle list, height, width) -> Masks counts`` that validates the RLE (``trace.io``).
    """

    def __init__(self, load_image: Callable[[Any], Any], read_masks: Callable[..., Masks]) -> None:
        self.image = load_image
        self._read_masks = read_masks

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
            data["role"], tuple(self.part(p) for p in data["parts"]), read_call(data["call"]),
            bool(data["starts_masks"]),
            bool(data.get("mistake", False)),  # absent in traces written before this field existed
        )

    def masks(self, data: dict[str, Any] | None) -> Masks | None:
        if data is None:
            return None
        height, width = (int(v) for v in data["size"])
        return self._read_masks(data["rle"], height, width, data["scores"], data["boxes_xyxy"], str(data["phrase"]))

    def verdict(self, data: dict[str, Any]) -> MaskVerdict:
        return read_verdict(data, lambda name: ImagePart(self.image(name), name))

    def result(self, data: dict[str, Any] | None) -> ToolResult | None:
        return read_result(data, self.message, self.masks, self.verdict)

    def round(self, data: dict[str, Any]) -> Round:
        return read_round(data, self.result)


def read_call(data: dict[str, Any] | None) -> ToolCall | None:
    """A ``ToolCall`` from its JSON form (the same in every schema version)."""
    if data is None:
        return None
    return ToolCall(str(data["name"]), dict(data["parameters"]), str(data["raw_name"]))


def read_verdict(data: dict[str, Any], view: Callable[[Any], ImagePart]) -> MaskVerdict:
    """A ``MaskVerdict`` from its JSON form; ``view`` turns a stored view reference into its ``ImagePart`` (the
    only part that differs between schema versions).

    A mask kept without a usable answer (source ``fallback`` or ``error``) was stored with verdict ``"accept"``
    before issue 30; it is read as ``"unconfirmed"``, what it was (``types.MaskVerdict``).

    Raises:
        TraceFormatError: an unknown source or verdict, or a verdict that does not fit its source.
    """
    source, verdict = data["source"], data["verdict"]
    if source not in ("model", "fallback", "error") or verdict not in VERDICTS:
        raise TraceFormatError(f"a verdict must be one of {', '.join(VERDICTS)} from the model, a fallback or an "
                               f"error, got {verdict!r} from {source!r}")
    if source != "model" and verdict == "accept":
        verdict = "unconfirmed"  # written before issue 30: kept, never confirmed
    try:
        return _verdict_record(data, view, source, verdict)
    except ValueError as error:
        raise TraceFormatError(f"mask {data['mask_number']!r}: {error}") from None


def _verdict_record(data: dict[str, Any], view: Callable[[Any], ImagePart], source: Any, verdict: Any) -> MaskVerdict:
    return MaskVerdict(
        mask_number=int(data["mask_number"]),
        verdict=verdict,
        source=source,
        outputs=tuple(data["outputs"]),
        mask_view=view(data["mask_view"]),
        zoom_view=None if data["zoom_view"] is None else view(data["zoom_view"]),  # None: verified in a group
        prompt_tokens=data["prompt_tokens"],
        seconds=float(data["seconds"]),
        error=data.get("error"),  # absent in traces written before verification errors were recorded
        group=_group(data.get("group", [])),  # absent before verification in groups
    )


def _group(value: Any) -> tuple[int, ...]:
    """A verdict's ``group`` field: the mask numbers verified together (positive ints), or ``()``.

    Raises:
        TraceFormatError: anything else.
    """
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in value):
        raise TraceFormatError(f"a verdict's group must be a list of mask numbers, got {value!r}")
    return tuple(value)


def read_result(data: dict[str, Any] | None, message: Callable[[Any], Message | None],
                masks: Callable[[Any], Masks | None], verdict: Callable[[Any], MaskVerdict]) -> ToolResult | None:
    """A ``ToolResult`` from its JSON form (``None`` stays ``None``); the callables read its message, mask sets and
    verdicts as the trace's schema version stores them."""
    if data is None:
        return None
    return ToolResult(
        reply=message(data["reply"]),
        masks=masks(data["masks"]),
        ends_run=bool(data["ends_run"]),
        final_masks=masks(data["final_masks"]),
        verdicts=tuple(verdict(v) for v in data["verdicts"]),
        summary=str(data["summary"]),
    )


def read_reasons(data: Any) -> tuple[tuple[int, str], ...] | None:
    """``ContextRecord.reasons`` from ``[[index, key], ...]`` (``None``: not recorded).

    Raises:
        TypeError, ValueError: the pairs are not (integer, text) pairs (reported as a malformed trace).
    """
    if data is None:
        return None
    return tuple((int(index), str(key)) for index, key in data)


def read_round(data: dict[str, Any], read_result: Callable[[Any], ToolResult | None]) -> Round:
    """A ``Round`` from its JSON form (the same in every schema version but for its result).

    A round saved before ``reasoning`` was stored gets it from the agent's reading of its output
    (``agent.output_parts.reasoning_of``; whether the reasoning began outside the text was not recorded then).
    """
    context = data["context"]
    output = str(data["output"])
    reasoning = data.get("reasoning")
    return Round(
        index=int(data["index"]),
        context=ContextRecord(
            kept=tuple(context["kept"]),
            dropped=tuple(context["dropped"]),
            images_as_text=tuple(context["images_as_text"]),
            note=context["note"],
            image_count=int(context["image_count"]),
            reasons=read_reasons(context.get("reasons")),  # absent in traces saved before it existed
        ),
        output=output,
        reasoning=str(reasoning) if reasoning is not None else reasoning_of(output, str(data["finish_reason"])),
        finish_reason=data["finish_reason"],
        call=read_call(data["call"]),
        error=data["error"],
        error_detail=data["error_detail"],
        result=read_result(data["result"]),
        assistant_index=data["assistant_index"],
        reply_index=data["reply_index"],
        prompt_tokens=data["prompt_tokens"],
        output_tokens=data["output_tokens"],
        vlm_seconds=float(data["vlm_seconds"]),
        tool_seconds=float(data["tool_seconds"]),
    )
