"""Reading the models' answers: ``<think>``, ``<tool>`` and ``<verdict>`` extraction.

The main model must answer with its reasoning inside ``<think>...</think>`` followed by exactly
one ``<tool>{"name": ..., "parameters": {...}}</tool>``. Models get this wrong in many small ways;
the parser is tolerant where the intent is unambiguous (spelling variants of tool names, Qwen's
native ``<tool_call>`` tag and ``"arguments"`` key, code fences, trailing commas, surplus or
missing closing braces, typographic quotes) and otherwise returns a feedback key naming the
mistake. The keys are those of ``prompts/feedback.toml``; ``error_fields`` fills that text.

Everything here is a pure function of the text: no model, no I/O.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

from .tool_specs import TOOL_SPECS
from .types import ToolCall

logger = logging.getLogger(__name__)

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# Opening tags of a tool call: ours (<tool>) and Qwen's native one (<tool_call>).
_TOOL_OPEN = re.compile(r"<\s*(?:tool_call|tool)\s*>", re.IGNORECASE)
# Either closing tag ends either opening tag: models mix them up.
_TOOL_CLOSE = re.compile(r"<\s*/\s*(?:tool_call|tool)\s*>", re.IGNORECASE)
_CODE_FENCE = re.compile(r"```[A-Za-z0-9_-]*")
_NAME_SEPARATORS = re.compile(r"[\s_\-]+")
_VERDICT_TAG = re.compile(r"<\s*verdict\s*>([^<]*)", re.IGNORECASE)
_VERDICT_WORD = re.compile(r"\b(accept|reject)", re.IGNORECASE)

_DOUBLE_TYPOGRAPHIC = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"'})
_SINGLE_TYPOGRAPHIC = str.maketrans({"\u2018": '"', "\u2019": '"', "\u201a": '"', "\u201b": '"'})

# Spelling-insensitive key -> canonical tool name ("segmentphrase" -> "segment_phrase").
_NAME_KEYS: dict[str, str] = {_NAME_SEPARATORS.sub("", name).lower(): name for name in TOOL_SPECS}


@dataclass(frozen=True)
class ParsedResponse:
    """What the main model's answer contained.

    Attributes:
        thinking: the reasoning text, stripped of surrounding whitespace (``""`` when none).
        call: the first tool call with its name canonicalised (``ToolCall.raw_name`` keeps the
            name as written); ``None`` exactly when ``error`` is set.
        stored_text: what to store as the assistant message. When a call was parsed without error:
            ``"<think>{thinking}</think>\\n<tool>{json}</tool>"`` holding only the first call, with
            canonical name and ``"parameters"`` key; otherwise the raw text unchanged.
        error: feedback key of the mistake (``"empty_output"``, ``"no_tool_call"``,
            ``"unclosed_think"``, ``"truncated"``, ``"bad_json"``, ``"bad_call"``,
            ``"unknown_tool"``), or ``None``.
        error_fields: the ``str.format`` fields of that feedback text (e.g. ``{"detail": ...}``).
        ignored_calls: tool calls after the first one; they are neither run nor stored.
        name_corrected: True when the name as written was a spelling variant of a known tool.
    """

    thinking: str
    call: ToolCall | None
    stored_text: str
    error: str | None = None
    error_fields: dict[str, str] = field(default_factory=dict)
    ignored_calls: int = 0
    name_corrected: bool = False


def canonical_tool_name(raw: str) -> str | None:
    """The registered tool name that ``raw`` spells, or ``None`` when it names no tool.

    Case, surrounding whitespace and the separators ``_``, ``-`` and spaces are ignored, so
    ``"Segment_Phrase"``, ``"segment-phrase"`` and ``" SEGMENT PHRASE "`` all give
    ``"segment_phrase"``.
    """
    return _NAME_KEYS.get(_NAME_SEPARATORS.sub("", raw).lower())


def parse_response(text: str, finish_reason: str = "stop") -> ParsedResponse:
    """Parse one answer of the main model.

    Args:
        text: the generated text (for thinking chat templates that open ``<think>`` themselves,
            it starts inside the reasoning and holds only ``</think>``).
        finish_reason: ``"stop"``, ``"length"`` (hit the token limit) or ``"cancelled"``. With
            ``"length"``, an answer without a complete tool call is reported as ``"truncated"``.

    Returns:
        A ``ParsedResponse``; mistakes are reported in ``error``, never raised.

    Rules: the reasoning is the text before the first ``</think>`` (without its ``<think>``), and
    only the text after it is searched for a call, so calls quoted inside the reasoning are
    ignored. The first ``</think>``, not the last: a reply holding two think-then-call pairs must
    run its first call. Without think tags, the text before the first tool tag counts as reasoning.
    """
    truncated = finish_reason == "length"
    if not text.strip():
        return _failure(text, "", "empty_output")

    close = text.find(THINK_CLOSE)
    if close >= 0:
        thinking = _strip_think_open(text[:close])
        body = text[close + len(THINK_CLOSE) :]
    elif THINK_OPEN in text:
        thinking = text.split(THINK_OPEN, 1)[1].strip()
        return _failure(text, thinking, "truncated" if truncated else "unclosed_think")
    else:
        first_tag = _TOOL_OPEN.search(text)
        thinking = text[: first_tag.start()].strip() if first_tag else text.strip()
        body = text[first_tag.start() :] if first_tag else ""

    openings = list(_TOOL_OPEN.finditer(body))
    if not openings:
        return _failure(text, thinking, "truncated" if truncated else "no_tool_call")
    ignored = len(openings) - 1

    start = openings[0].end()
    closing = _TOOL_CLOSE.search(body, start)
    end = len(body)
    if closing:
        end = closing.start()
    if ignored:
        end = min(end, openings[1].start())
    closed = closing is not None and closing.start() == end

    decoded, detail = _decode_json_object(body[start:end], closed)
    if detail is not None:
        if truncated:
            return _failure(text, thinking, "truncated", ignored=ignored)
        return _failure(text, thinking, "bad_json", {"detail": detail}, ignored)

    call_or_error = _build_call(decoded)
    if isinstance(call_or_error, tuple):
        key, fields = call_or_error
        return _failure(text, thinking, key, fields, ignored)
    call = call_or_error
    canonical = canonical_tool_name(call.raw_name)
    if canonical is None:
        fields = {"name": call.raw_name, "tools": ", ".join(TOOL_SPECS)}
        return _failure(text, thinking, "unknown_tool", fields, ignored)
    call = ToolCall(name=canonical, parameters=call.parameters, raw_name=call.raw_name)
    if ignored:
        logger.debug("ignored %d tool call(s) after the first", ignored)
    return ParsedResponse(
        thinking=thinking,
        call=call,
        stored_text=format_response(thinking, call),
        ignored_calls=ignored,
        name_corrected=canonical != call.raw_name,
    )


def format_response(thinking: str, call: ToolCall) -> str:
    """The normalised assistant text for a call: ``<think>...</think>`` then one ``<tool>`` JSON.

    The JSON is ``{"name": call.name, "parameters": call.parameters}`` written with
    ``json.dumps(..., ensure_ascii=False)``.
    """
    payload = json.dumps({"name": call.name, "parameters": call.parameters}, ensure_ascii=False)
    return f"{THINK_OPEN}{thinking}{THINK_CLOSE}\n<tool>{payload}</tool>"


def parse_verdict(text: str) -> tuple[Literal["accept", "reject"] | None, str | None]:
    """Read the verdict of a per-mask verification answer.

    Looks for ``<verdict>Accept</verdict>`` or ``<verdict>Reject</verdict>`` (case-insensitive,
    whitespace tolerated, the closing tag may be missing) in the text after the first ``</think>``
    when there is one, else in the whole text.

    Returns:
        ``(verdict, None)`` on success; ``(None, "missing_verdict")`` when no tag holds either
        word; ``(None, "ambiguous_verdict")`` when a tag holds both words or tags disagree.
    """
    close = text.find(THINK_CLOSE)
    if close >= 0:
        text = text[close + len(THINK_CLOSE) :]
    found: set[str] = set()
    for tag in _VERDICT_TAG.finditer(text):
        words = {w.lower() for w in _VERDICT_WORD.findall(tag.group(1))}
        if len(words) > 1:
            return None, "ambiguous_verdict"
        found |= words
    if not found:
        return None, "missing_verdict"
    if len(found) > 1:
        return None, "ambiguous_verdict"
    verdict = found.pop()
    return ("accept" if verdict == "accept" else "reject"), None


# ---------------------------------------------------------------- helpers


def _failure(
    text: str,
    thinking: str,
    key: str,
    fields: dict[str, str] | None = None,
    ignored: int = 0,
) -> ParsedResponse:
    return ParsedResponse(
        thinking=thinking,
        call=None,
        stored_text=text,
        error=key,
        error_fields=dict(fields or {}),
        ignored_calls=ignored,
    )


def _strip_think_open(before_close: str) -> str:
    """The reasoning before ``</think>``: drop the first ``<think>`` and surrounding whitespace."""
    head, _, tail = before_close.partition(THINK_OPEN)
    return "\n".join(part.strip() for part in (head, tail) if part.strip())


def _build_call(decoded: Any) -> ToolCall | tuple[str, dict[str, str]]:
    """A ``ToolCall`` with the name as written, or ``("bad_call", {"detail": ...})``."""
    if not isinstance(decoded, dict):
        kind = type(decoded).__name__
        return "bad_call", {"detail": f"expected a JSON object with a \"name\" key, got a JSON {_json_kind(kind)}"}
    name = decoded.get("name")
    if not isinstance(name, str) or not name.strip():
        what = "has no \"name\" key" if "name" not in decoded else "has a \"name\" that is not a non-empty string"
        return "bad_call", {"detail": f"the JSON object {what}"}
    key = "parameters" if "parameters" in decoded else "arguments"
    params = decoded.get(key)
    if params is None:  # absent or null: the intent (no parameters) is clear
        params = {}
    if not isinstance(params, dict):
        return "bad_call", {"detail": f"\"{key}\" must be a JSON object, got a JSON {_json_kind(type(params).__name__)}"}
    return ToolCall(name=name, parameters=params, raw_name=name)


def _json_kind(python_type: str) -> str:
    return {
        "dict": "object",
        "list": "array",
        "str": "string",
        "int": "number",
        "float": "number",
        "bool": "boolean",
        "NoneType": "null",
    }.get(python_type, python_type)


def _decode_json_object(segment: str, closed: bool) -> tuple[Any, str | None]:
    """Decode the JSON of a tool call, repairing common slips only when plain decoding fails.

    Repairs, cumulative: code fences removed; the balanced object starting at the first ``{``
    extracted (drops surplus closing braces and trailing junk); trailing commas removed; when the
    call was properly closed by a tag, missing closing braces appended; then typographic double
    quotes, then also typographic single quotes, read as ``"``.

    Returns:
        ``(value, None)`` or ``(None, detail)`` where ``detail`` is the JSON parser's message for
        the structurally repaired text (before quote substitution).
    """
    stripped = segment.strip()
    try:
        return json.loads(stripped), None
    except json.JSONDecodeError:
        pass
    base = _CODE_FENCE.sub("", stripped)
    candidates = [
        _repair_structure(base, closed),
        _repair_structure(base.translate(_DOUBLE_TYPOGRAPHIC), closed),
        _repair_structure(base.translate(_DOUBLE_TYPOGRAPHIC).translate(_SINGLE_TYPOGRAPHIC), closed),
    ]
    first_error: str | None = None
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            if first_error is None:
                first_error = str(exc)
            continue
        logger.debug("repaired tool-call JSON %r -> %r", segment, candidate)
        return value, None
    return None, first_error


def _repair_structure(text: str, closed: bool) -> str:
    """Balanced object from the first ``{``, trailing commas removed, missing braces added."""
    start = text.find("{")
    if start < 0:
        return text.strip()
    end, depth, in_string = _scan_object(text, start)
    if end is not None:
        return _remove_trailing_commas(text[start:end])
    obj = text[start:].rstrip()
    if closed and not in_string:
        obj += "}" * depth
    return _remove_trailing_commas(obj)


def _json_chars(text: str, start: int = 0) -> Iterator[tuple[int, str, bool]]:
    """Yield ``(index, char, in_string)`` from ``start`` on; ``in_string`` is the JSON string state
    *after* the char (True inside a string literal and on its opening quote, False on its closing one)."""
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        yield i, c, in_string


def _scan_object(text: str, start: int) -> tuple[int | None, int, bool]:
    """Scan the object opened at ``start``, respecting JSON strings.

    Returns ``(end, 0, False)`` with ``end`` the index after the matching ``}``, or, when the
    text ends first, ``(None, depth still open, whether the text ends inside a string)``.
    """
    depth = 0
    in_string = False
    for i, c, in_string in _json_chars(text, start):
        if in_string:
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1, 0, False
    return None, depth, in_string


def _remove_trailing_commas(text: str) -> str:
    """Drop commas (outside strings) that are followed only by whitespace and ``}`` or ``]``."""
    out: list[str] = []
    for i, c, in_string in _json_chars(text):
        if c == "," and not in_string and text[i + 1 :].lstrip()[:1] in ("}", "]"):
            continue
        out.append(c)
    return "".join(out)
