"""Tool calls in the XML style Qwen3.5 / Qwen3.6 are trained to write (the Qwen3-Coder style):

    <tool_call>
    <function=select_masks_and_return>
    <parameter=final_answer_masks>
    [1, "5-9"]
    </parameter>
    </function>
    </tool_call>

The released Qwen3.5 chat template renders a ``tools=`` schema as JSON signatures in ``<tools></tools>`` and asks
for exactly this form; it writes earlier calls back the same way (a string value as it is, a list or an object as
JSON). vLLM reads it with its ``qwen3_coder`` tool parser, ``transformers serve`` with the ``xml-inline`` response
template of the ``qwen3_5`` family.

How a call is read (``read_function``):

- the function's name is the text of ``<function=NAME>`` (spaces and quotes around it dropped);
- a parameter's value is the text between ``<parameter=NAME>`` and ``</parameter>``; a missing ``</parameter>`` ends
  at the next ``<parameter=``, at ``</function>`` or at the end of the body (as vLLM reads it);
- the body ends at ``</function>``, else at ``</tool_call>``, the next ``<tool_call>`` or ``<function=``, or the end
  of the text; a call closed by neither ``</function>`` nor ``</tool_call>`` is "unclosed" (the parser calls a reply
  cut by its token budget there ``truncated``);
- a body without parameter tags that holds one JSON object gives that object as the arguments (the
  ``<function=NAME>{...}</function>`` form other models write); an empty body, no arguments;
- an empty function or parameter name, a parameter named twice, or other text in the body outside the parameter
  tags make the call malformed: ``FunctionCall.error`` says what, in words for the model.

Values arrive as text; ``typed_arguments`` converts them by each parameter's type in the registry
(``tool_specs``, from which the schema the model was given is built):

- ``"string"``: the text, surrounding whitespace removed (the template writes each value between line breaks);
- ``"array<integer>"``: the text read as the JSON value it holds, as a call's JSON is read (``agent.call_json``:
  ``[1, "5-9"]``, with its tolerance for slips); a text without brackets is read as a JSON scalar when it is one
  (``2`` gives the number 2) and otherwise kept as text, so the tool's own check tells the model that the
  parameter must be a list of mask numbers, exactly as it would for a JSON call with that value;
- a parameter the tool does not have, and every parameter of an unknown function: the text (the tool's check, or
  the parser's unknown-tool feedback, names the mistake).

Hand-written: ``transformers``' response parser needs the rendered chat prefix and reads only well-formed replies,
without a mistake to tell the model, and vLLM's parser lives in its server; the agent reads its replies itself
with the rules of ``agent.parsing``. Everything here is a pure function of the text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .call_json import FAILED, TOOL_CLOSE, TOOL_OPEN, decode_text, read_value
from .tool_specs import ToolSpec

FUNCTION_OPEN = re.compile(r"<\s*function\s*=\s*([^<>\n]*)>", re.IGNORECASE)
FUNCTION_CLOSE = re.compile(r"<\s*/\s*function\s*>", re.IGNORECASE)
PARAMETER_OPEN = re.compile(r"<\s*parameter\s*=\s*([^<>\n]*)>", re.IGNORECASE)
PARAMETER_CLOSE = re.compile(r"<\s*/\s*parameter\s*>", re.IGNORECASE)

_NAME_WRAPPING = " \t\"'`"
_SHOWN_CHARS = 40  # of stray text quoted back to the model


@dataclass(frozen=True)
class FunctionCall:
    """One call written in the XML style, as read from the text.

    Attributes:
        name: the function's name as written (quotes and spaces around it dropped).
        texts: parameter name -> its value's text, surrounding whitespace removed, in the order written.
        json_arguments: the arguments when the body held one JSON object instead of parameter tags, else ``None``.
        start / end: indices of the ``<function=`` tag and just after the call's body (after ``</function>`` when
            it was written).
        closed: the call ended with ``</function>`` or ``</tool_call>``.
        error: what makes the call malformed, in words for the model (``None``: well formed).
    """

    name: str
    texts: dict[str, str] = field(default_factory=dict)
    json_arguments: dict[str, Any] | None = None
    start: int = 0
    end: int = 0
    closed: bool = True
    error: str | None = None


def function_after(text: str, start: int) -> re.Match[str] | None:
    """The ``<function=...>`` tag that opens at ``start`` (after spaces), or ``None``."""
    found = FUNCTION_OPEN.search(text, start)
    return found if found is not None and not text[start:found.start()].strip() else None


def first_call_tag(text: str, start: int = 0) -> re.Match[str] | None:
    """The first ``<tool>`` / ``<tool_call>`` or ``<function=...>`` tag in ``text[start:]``, or ``None``."""
    found = [m for m in (TOOL_OPEN.search(text, start), FUNCTION_OPEN.search(text, start)) if m is not None]
    return min(found, key=lambda m: m.start(), default=None)


def count_call_tags(text: str, start: int = 0) -> int:
    """Calls begun in ``text[start:]``: each ``<tool>`` / ``<tool_call>`` tag, and each ``<function=...>`` tag not
    directly inside one (a ``<tool_call>`` that wraps a function is one call)."""
    tags = TOOL_OPEN.findall(text, start)
    wrapped = sum(1 for tag in TOOL_OPEN.finditer(text, start) if function_after(text, tag.end()) is not None)
    return len(tags) + len(FUNCTION_OPEN.findall(text, start)) - wrapped


def read_function(text: str, opening: re.Match[str]) -> FunctionCall:
    """Read the call whose ``<function=...>`` tag is ``opening`` (a match of ``FUNCTION_OPEN`` in ``text``); see the
    module docstring for the rules."""
    name = opening.group(1).strip(_NAME_WRAPPING)
    body_start = opening.end()
    ends = [m for m in (FUNCTION_CLOSE.search(text, body_start), TOOL_CLOSE.search(text, body_start),
                        TOOL_OPEN.search(text, body_start), FUNCTION_OPEN.search(text, body_start)) if m is not None]
    first_end = min(ends, key=lambda m: m.start(), default=None)
    body_end = first_end.start() if first_end is not None else len(text)
    closed = first_end is not None and first_end.re in (FUNCTION_CLOSE, TOOL_CLOSE)
    end = first_end.end() if first_end is not None and first_end.re is FUNCTION_CLOSE else body_end
    body = text[body_start:body_end]
    where = dict(start=opening.start(), end=end, closed=closed)
    if not name:
        return FunctionCall(name, error="the <function=...> tag names no function", **where)
    texts, error = _parameters(body)
    if error is None and not texts and body.strip():
        json_arguments, error = _json_body(body)
        if error is None:
            return FunctionCall(name, json_arguments=json_arguments, **where)
    return FunctionCall(name, texts, None, error=error, **where)


def typed_arguments(spec: ToolSpec | None, call: FunctionCall) -> dict[str, Any]:
    """The call's arguments with each value converted by its parameter's type in ``spec`` (``None``: an unknown
    function, values kept as text); see the module docstring."""
    if call.json_arguments is not None:
        return dict(call.json_arguments)
    types = {p.name: p.json_type for p in spec.parameters} if spec is not None else {}
    return {name: _typed(text, types.get(name, "string")) for name, text in call.texts.items()}


def xml_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A call written in the XML style, as the released Qwen3.5 template writes an earlier call back: each value on
    its own lines, a string as it is, anything else as JSON (``json.dumps``, ``ensure_ascii=False``)."""
    lines = ["<tool_call>", f"<function={name}>"]
    for key, value in arguments.items():
        written = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines += [f"<parameter={key}>", written, "</parameter>"]
    return "\n".join([*lines, "</function>", "</tool_call>"])


def _parameters(body: str) -> tuple[dict[str, str], str | None]:
    """The parameters' texts of a function body, or the mistake that makes it malformed."""
    texts: dict[str, str] = {}
    position = 0
    for opening in PARAMETER_OPEN.finditer(body):
        if opening.start() < position:  # inside the previous value (it had no closing tag)
            continue
        stray = body[position:opening.start()].strip()
        if stray:
            return texts, _stray(stray)
        name = opening.group(1).strip(_NAME_WRAPPING)
        if not name:
            return texts, "a <parameter=...> tag names no parameter"
        if name in texts:
            return texts, f'the parameter "{name}" is given twice'
        value_end, position = _value_end(body, opening.end())
        texts[name] = body[opening.end():value_end].strip()
    stray = body[position:].strip() if texts else ""
    return texts, _stray(stray) if stray else None


def _value_end(body: str, start: int) -> tuple[int, int]:
    """``(end of the value, where reading goes on)`` for a value starting at ``start``: at its ``</parameter>``,
    else at the next ``<parameter=`` or the end of the body."""
    closing = PARAMETER_CLOSE.search(body, start)
    following = PARAMETER_OPEN.search(body, start)
    if closing is not None and (following is None or closing.start() < following.start()):
        return closing.start(), closing.end()
    end = following.start() if following is not None else len(body)
    return end, end


def _json_body(body: str) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments of a body written as one JSON object, or the mistake."""
    stripped = body.strip()
    if stripped[:1] in "{\uff5b":
        start = body.index(stripped[0])
        read = read_value(body, start)
        if read.error is None and isinstance(read.value, dict) and not body[read.end:].strip():
            return read.value, None
    return None, _stray(stripped)


def _stray(text: str) -> str:
    shown = text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."
    return f'the function holds text outside its <parameter=...></parameter> tags: "{shown}"'


def _typed(text: str, json_type: str) -> Any:
    if json_type == "string":
        return text
    decoded = decode_text(text)
    if decoded is not FAILED:
        return decoded
    try:
        return json.loads(text)
    except ValueError:
        return text
