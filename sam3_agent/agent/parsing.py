"""Reading the models' answers: ``<think>``, ``<tool>`` and ``<verdict>`` extraction.

The main model must answer with its reasoning inside ``<think>...</think>`` followed by exactly
one ``<tool>{"name": ..., "parameters": {...}}</tool>``. Models get this wrong in many small ways;
the parser is tolerant where the intent is unambiguous (spelling variants of tool names, Qwen's
native ``<tool_call>`` tag and ``"arguments"`` key, code fences, trailing commas, surplus or
missing closing braces, typographic quotes, full-width punctuation, Python-literal dicts,
``parameters`` given as a JSON string, raw control characters in strings; see ``agent.call_json``) and
otherwise returns a feedback key naming the mistake. The keys are those of ``prompts/feedback.toml``;
``error_fields`` fills that text.

A call written without its tag (bare JSON, fenced, inside ``<tools>``) or as a one-element list runs
with a note when it is the reply's only call (``agent.bare_calls``).

Calls in the XML style of Qwen3.5 / Qwen3.6 (``<tool_call><function=NAME><parameter=P>V</parameter></function>
</tool_call>``) are read by the same rules, their values converted by the parameters' types
(``agent.function_calls``).

A reply that ended inside its reasoning runs nothing: neither a tool call nor a verdict drafted
there counts (see ``parse_response`` and ``verdicts.parse_verdict``).

Everything here is a pure function of the text: no model, no I/O.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..messages import ToolCall
from .bare_calls import bare_calls, is_call_shaped, reasoning_before
from .call_json import TOOL_CLOSE, TOOL_OPEN, decode_text, first_opener, read_value
from .function_calls import (
    FUNCTION_OPEN,
    count_call_tags,
    first_call_tag,
    function_after,
    read_function,
    typed_arguments,
    xml_call_text,
)
from .reasoning import THINK_CLOSE, THINK_OPEN, reasoning_close
from .tool_specs import TOOL_SPECS

logger = logging.getLogger(__name__)

_NAME_SEPARATORS = re.compile(r"[\s_\-]+")

CallForm = Literal["json", "xml"]  # a call's JSON object (tagged or not), or the XML style of ``function_calls``
CallStyle = Literal["reference", "json", "xml"]  # how ``format_response`` writes a call

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
            ``"unclosed_think"``, ``"truncated"``, ``"bad_json"``, ``"bad_call"``, ``"bad_function_call"``
            (an XML-style call that is malformed), ``"unknown_tool"``, ``"several_calls"``,
            ``"call_in_reasoning"``), or ``None``.
        error_fields: the ``str.format`` fields of that feedback text (e.g. ``{"detail": ...}``).
        ignored_calls: tool calls after the first one; they are neither run nor stored.
        name_corrected: True when the name as written was a spelling variant of a known tool.
        notes: feedback keys (no fields) of notes for the reply to a call that ran although written in another
            form: ``"untagged_call"`` (no ``<tool>`` tag: bare, fenced, in ``<tools>``, only the closing tag),
            ``"listed_call"`` (a one-element list).
        form: how the call was written: ``"json"`` (a JSON object, in any tag or none) or ``"xml"``
            (``<function=NAME>`` with ``<parameter=...>`` tags).
    """

    thinking: str
    call: ToolCall | None
    stored_text: str
    error: str | None = None
    error_fields: dict[str, str] = field(default_factory=dict)
    ignored_calls: int = 0
    name_corrected: bool = False
    notes: tuple[str, ...] = ()
    form: CallForm = "json"


def canonical_tool_name(raw: str) -> str | None:
    """The registered tool name that ``raw`` spells, or ``None`` when it names no tool.

    Case, surrounding whitespace and the separators ``_``, ``-`` and spaces are ignored, so
    ``"Segment_Phrase"``, ``"segment-phrase"`` and ``" SEGMENT PHRASE "`` all give
    ``"segment_phrase"``.
    """
    return _NAME_KEYS.get(_NAME_SEPARATORS.sub("", raw).lower())


def parse_response(text: str, finish_reason: str = "stop", starts_in_reasoning: bool = False) -> ParsedResponse:
    """Parse one answer of the main model.

    Args:
        text: the generated text (for thinking chat templates that open ``<think>`` themselves,
            it starts inside the reasoning and holds only ``</think>``).
        finish_reason: ``"stop"``, ``"length"`` (hit the token limit) or ``"cancelled"``.
        starts_in_reasoning: the text begins inside a reasoning block opened outside it (by the chat
            template, or a server that sent the reasoning apart); ``Generation.starts_in_reasoning``.

    Returns:
        A ``ParsedResponse``; mistakes are reported in ``error``, never raised.

    Rules: the reasoning is the text before the first ``</think>`` (without its ``<think>``), and
    only the text after it is searched for a call, so calls quoted inside the reasoning are
    ignored. The first ``</think>``, not the last: a reply holding two think-then-call pairs must
    run its first call. A reply whose reasoning was never closed runs nothing: ``"truncated"``
    when it hit the token limit, else ``"unclosed_think"``; a reply cut by the token limit without
    any ``</think>`` is ``"truncated"`` too, since a call in it may be a draft written while
    reasoning. Without think tags (and not cut), the text before the first tool tag counts as
    reasoning. The call's object is found by its bracket structure (``agent.call_json``), so a closing
    tag inside a string value does not end it. The reasoning ends at its first ``</think>`` that is not quoted
    (``agent.reasoning``).

    Without any tool tag after the reasoning, a lone call written otherwise (bare JSON, a ```json fence,
    ``<tools>``, only the closing tag; ``agent.bare_calls``) runs with the note ``"untagged_call"``, and a
    one-element list of a call, tagged or not, with ``"listed_call"``; two or more such calls are
    ``"several_calls"``. When nothing follows the reasoning but it holds a call, the reply is
    ``"call_in_reasoning"`` (that call does not run).
    """
    truncated = finish_reason == "length"
    if not text.strip():
        return _failure(text, "", "empty_output")
    split = _reasoning_and_body(text, truncated, starts_in_reasoning)
    if isinstance(split, ParsedResponse):
        return split
    thinking, body, tagged = split
    return _call_in_body(text, thinking, body, truncated, tagged)


def _reasoning_and_body(
    text: str, truncated: bool, starts_in_reasoning: bool
) -> tuple[str, str, bool] | ParsedResponse:
    """The reasoning, the text searched for a call (see ``parse_response``'s rules) and whether think tags delimited
    the reasoning; or the failure of a reply that ended inside its reasoning or was cut without closing it."""
    close = reasoning_close(text)
    if close >= 0:
        return _strip_think_open(text[:close]), text[close + len(THINK_CLOSE) :], True
    if starts_in_reasoning or THINK_OPEN in text:
        thinking = text.split(THINK_OPEN, 1)[1].strip() if THINK_OPEN in text else text.strip()
        return _failure(text, thinking, "truncated" if truncated else "unclosed_think")
    first_tag = TOOL_OPEN.search(text)
    thinking = text[: first_tag.start()].strip() if first_tag else text.strip()
    if truncated:
        cut = first_call_tag(text)
        return _failure(text, text[: cut.start()].strip() if cut else thinking, "truncated")
    return thinking, text[first_tag.start() :] if first_tag else text, False


def _call_in_body(text: str, thinking: str, body: str, truncated: bool, tagged: bool) -> ParsedResponse:
    """The reply's first call, read from ``body`` (the text after the reasoning), or the mistake that hides it.

    ``tagged``: think tags delimited the reasoning (else ``thinking`` is all the text, until a call is found in it)."""
    opening = TOOL_OPEN.search(body)
    if opening is None:
        return _bare_call(text, thinking, body, truncated, tagged)
    function = function_after(body, opening.end())
    if function is not None:
        return _function_call(text, thinking, body, function, truncated, ())
    decoded, end, detail = _read_call(body, opening.end())
    ignored = count_call_tags(body, end)
    if detail is not None:
        if truncated:
            return _failure(text, thinking, "truncated", ignored=ignored)
        return _failure(text, thinking, "bad_json", {"detail": detail}, ignored)
    return _finished_call(text, thinking, decoded, ignored, ())


def _bare_call(text: str, thinking: str, body: str, truncated: bool, tagged: bool) -> ParsedResponse:
    """The call of a body without a tool tag: its one bare call (``agent.bare_calls``), run with a note; or the
    mistake: ``"several_calls"`` (two or more), ``"call_in_reasoning"`` (the only call was drafted inside closed
    reasoning), ``"truncated"`` or ``"no_tool_call"``."""
    found = bare_calls(body)
    functions = list(FUNCTION_OPEN.finditer(body))
    if not found and not functions:
        if truncated:
            return _failure(text, thinking, "truncated")
        if tagged and (first_call_tag(thinking) or bare_calls(thinking)):
            return _failure(text, thinking, "call_in_reasoning")
        return _failure(text, thinking, "no_tool_call")
    count = sum(value.calls for value in found) + len(functions)
    first = min([v.start for v in found] + [f.start() for f in functions])
    if not tagged:
        thinking = reasoning_before(body, first)
    if count > 1:
        return _failure(text, thinking, "several_calls", {"count": str(count)})
    if functions:
        return _function_call(text, thinking, body, functions[0], truncated, ("untagged_call",))
    return _finished_call(text, thinking, found[0].value, 0, ("untagged_call",))


def _function_call(text: str, thinking: str, body: str, opening: re.Match[str], truncated: bool,
                   notes: tuple[str, ...]) -> ParsedResponse:
    """The call written in the XML style whose ``<function=...>`` tag is ``opening``, or its mistake: ``"truncated"``
    (cut by the token budget before it was closed) or ``"bad_function_call"``."""
    read = read_function(body, opening)
    ignored = count_call_tags(body, read.end)
    if truncated and not read.closed:
        return _failure(text, thinking, "truncated", ignored=ignored)
    if read.error is not None:
        return _failure(text, thinking, "bad_function_call", {"detail": read.error}, ignored)
    canonical = canonical_tool_name(read.name)
    arguments = typed_arguments(TOOL_SPECS.get(canonical) if canonical else None, read)
    return _finished_call(text, thinking, {"name": read.name, "arguments": arguments}, ignored, notes, "xml")


def _finished_call(text: str, thinking: str, decoded: Any, ignored: int, notes: tuple[str, ...],
                   form: CallForm = "json") -> ParsedResponse:
    """The parsed response of one decoded call value (a one-element list is unwrapped, with a note)."""
    if isinstance(decoded, list) and is_call_shaped(decoded):
        if len(decoded) > 1:
            return _failure(text, thinking, "several_calls", {"count": str(len(decoded))}, ignored)
        decoded, notes = decoded[0], (*notes, "listed_call")
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
        notes=notes,
        form=form,
    )


def _read_call(body: str, start: int) -> tuple[Any, int, str | None]:
    """The value of the call opened just before ``start``: ``(value, end index, None)`` or ``(None, end, detail)``.

    The value is the first ``{``/``[`` structure before the next tool tag; without one, the text up to
    that tag is given to ``json.loads`` so the detail says what is there instead.
    """
    tags = [m.start() for m in (TOOL_OPEN.search(body, start), TOOL_CLOSE.search(body, start)) if m]
    tag_at = min(tags, default=len(body))
    opener = first_opener(body, start, tag_at)
    if opener is None:
        segment = body[start:tag_at].strip()
        try:
            return json.loads(segment, strict=False), tag_at, None
        except json.JSONDecodeError as exc:
            return None, tag_at, str(exc)
    read = read_value(body, opener)
    return read.value, read.end, read.error


def format_response(thinking: str, call: ToolCall, style: CallStyle = "reference") -> str:
    """The normalised assistant text for a call: ``<think>...</think>``, a line break, then the call in ``style``:

    - ``"reference"``: ``<tool>{"name": call.name, "parameters": call.parameters}</tool>``;
    - ``"json"``: ``<tool_call>``, ``{"name": ..., "arguments": ...}`` and ``</tool_call>`` on lines of their own
      (the form Qwen's Hermes-style templates ask for);
    - ``"xml"``: the XML style of Qwen3.5 (``function_calls.xml_call_text``).

    JSON is written with ``json.dumps(..., ensure_ascii=False)``.
    """
    if style == "xml":
        written = xml_call_text(call.name, call.parameters)
    elif style == "json":
        written = "<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.parameters},
                                                ensure_ascii=False) + "\n</tool_call>"
    else:
        written = "<tool>" + json.dumps({"name": call.name, "parameters": call.parameters}, ensure_ascii=False) + "</tool>"
    return f"{THINK_OPEN}{thinking}{THINK_CLOSE}\n{written}"


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
    if isinstance(params, str):  # parameters written as a JSON-encoded string: read what it holds
        inner = {} if not params.strip() else decode_text(params)
        params = inner if isinstance(inner, dict) else params
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


