"""How the main model is told to call the tools: the reference agent's ``<tool>`` format, or the model's own.

- ``"reference"`` (default): the system prompt spells out ``<tool>{"name": ..., "parameters": {...}}</tool>``, the
  format of the reference agent, whose accuracy the SAM 3 paper reports.
- ``"native"``: the four tools go to the model as the chat template's function schema (``tools=`` of
  ``apply_chat_template`` locally, ``"tools"`` of the request on a server), which Qwen models are trained to answer
  with ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; the system prompt keeps all its guidance but
  its "How to reply" section says to call the functions, and its examples are written in that form.

The parser reads every form with the same rules (``parsing``): Qwen3-VL's ``<tool_call>`` JSON and the XML style
Qwen3.5 / Qwen3.6 are trained to write (``function_calls``). In the native format the feedback texts that spell the
reference syntax are those of ``prompts/native_feedback.toml`` (``native_prompts``), and a call is stored in the
conversation in the form the model wrote it (``Agent.in_own_style``).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import replace
from typing import Any, Literal

from ..errors import InputError
from ..package_files import PROMPTS_DIR
from ..vlm.base import VLM
from .parsing import ParsedResponse, format_response
from .prompts import PromptError, Prompts, checked_feedback
from .tool_specs import TOOL_SPECS, ToolSpec

ToolFormat = Literal["reference", "native"]
TOOL_FORMATS: tuple[ToolFormat, ...] = ("reference", "native")
DEFAULT_TOOL_FORMAT: ToolFormat = "reference"

REPLY_HEADING = "# How to reply"
NATIVE_REPLY_FILE = "native_reply.md"  # in prompts/: what the native prompt says instead of the reply section
NATIVE_FEEDBACK_FILE = "native_feedback.toml"  # in prompts/: the feedback texts that differ in the native format


_JSON_TYPES = {"string": {"type": "string"}, "array<integer>": {"type": "array", "items": {"type": ["integer", "string"]}},
               "boolean": {"type": "boolean"}}
_EXAMPLE = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)
_TOOL_PARAGRAPH = r"\*\*{name}\*\*: (.*?)(?:\n\n|\Z)"


def check_tool_format(value: Any) -> ToolFormat:
    """``value`` when it names a tool format, else InputError naming the choices."""
    if value not in TOOL_FORMATS:
        raise InputError(f"tool_format must be one of {', '.join(TOOL_FORMATS)}, got {value!r}")
    return value


def function_schemas(main_system: str, specs: dict[str, ToolSpec] = TOOL_SPECS) -> list[dict[str, Any]]:
    """The tools as OpenAI function schemas (``{"type": "function", "function": {name, description, parameters}}``),
    in registry order: names and parameters from ``specs``, each tool's description from its paragraph
    ``**name**: ...`` in ``main_system`` (the prompt stays the one text describing the tools)."""
    schemas = []
    for spec in specs.values():
        found = re.search(_TOOL_PARAGRAPH.format(name=re.escape(spec.name)), main_system, re.DOTALL)
        description = " ".join(found.group(1).split()) if found else spec.name.replace("_", " ")
        properties = {p.name: {**_JSON_TYPES[p.json_type], "description": p.description} for p in spec.parameters}
        schemas.append({"type": "function", "function": {
            "name": spec.name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(spec.required_names)},
        }})
    return schemas


def native_system_prompt(main_system: str) -> str:
    """``main_system`` for the native format: its "# How to reply" section replaced by ``prompts/native_reply.md`` and each
    example ``<tool>{"name": N, "parameters": P}</tool>`` written as ``<tool_call>{"name": N, "arguments": P}</tool_call>``.

    Raises:
        PromptError: the prompt has no "# How to reply" section, or an example is not a JSON call.
    """
    start = main_system.find(REPLY_HEADING)
    if start < 0:
        raise PromptError(f"the main system prompt has no {REPLY_HEADING!r} section for the native tool format to replace")
    after = start + len(REPLY_HEADING)
    following = re.search(r"^#{1,2} ", main_system[after:], re.MULTILINE)
    end = after + following.start() if following else len(main_system)
    reply = (PROMPTS_DIR / NATIVE_REPLY_FILE).read_text(encoding="utf-8").strip()
    text = main_system[:start] + reply + "\n\n" + main_system[end:]
    return _EXAMPLE.sub(_native_example, text)


def native_prompts(prompts: Prompts) -> Prompts:
    """``prompts`` with the feedback texts of ``prompts/native_feedback.toml`` in place of the reference ones (those
    that spell the ``<tool>`` syntax); the file's text joins the fingerprint ``Prompts.hashes`` records.

    Raises:
        PromptError: the file is missing, not valid TOML, names a key the code does not use, or a text uses a field
            the code does not fill in for its key.
    """
    path = PROMPTS_DIR / NATIVE_FEEDBACK_FILE
    try:
        source = path.read_text(encoding="utf-8")
        table = tomllib.loads(source)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PromptError(f"cannot read {path}: {exc}") from exc
    unknown = sorted(set(table) - set(prompts.feedback))
    if unknown:
        raise PromptError(f"{path} names feedback texts the code does not use: {', '.join(unknown)}")
    feedback = {**prompts.feedback, **checked_feedback(table, path)}
    base = prompts.feedback_source or json.dumps(prompts.feedback, sort_keys=True, ensure_ascii=False)
    return Prompts(prompts.main_system, prompts.verify_system, feedback, base + "\n" + source)


def in_own_style(parsed: ParsedResponse, tool_format: ToolFormat) -> ParsedResponse:
    """``parsed`` with its call stored as the run's format asks: the reference ``<tool>`` form (``parsed.stored_text``),
    or in the native format the form the model wrote (``<tool_call>`` JSON, or Qwen3.5's XML style), so that the
    conversation never shows the model a call written in a form it was not told to use."""
    if tool_format == "reference" or parsed.call is None:
        return parsed
    return replace(parsed, stored_text=format_response(parsed.thinking, parsed.call, parsed.form))


def with_tools(vlm: VLM, schemas: list[dict[str, Any]]) -> VLM:
    """``vlm`` told the tools as its chat template's function schema (its class's ``with_tools``; looked up on the
    class so a proxy such as ZeroGPU's ``GpuVLM`` is refused rather than bypassed).

    Raises:
        InputError: the backend cannot take a function schema.
    """
    method = getattr(type(vlm), "with_tools", None)
    if method is None:
        raise InputError(f"the VLM backend {getattr(vlm, 'name', type(vlm).__name__)!r} cannot be given the tools as "
                         "a function schema: use the reference tool format (--tool-format reference)")
    return method(vlm, schemas)


def _native_example(match: re.Match[str]) -> str:
    try:
        call = json.loads(match.group(1))
        name, arguments = call["name"], call["parameters"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PromptError(f"an example call in the main system prompt is not a JSON call: {match.group(0)}") from exc
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"
