"""The native tool format's function schema for a chat template that drops it (Qwen2.5-VL's).

Qwen2.5-VL's released chat template (``chat_template.json`` of Qwen/Qwen2.5-VL-*-Instruct) has no tools branch:
``apply_chat_template(..., tools=...)`` renders exactly what it renders without them, so the model would never see
the functions. The same checkpoints' ``tokenizer_config.json`` carries Qwen2.5's text template, whose function-calling
block (the Hermes style: JSON signatures inside ``<tools></tools>``, answers as ``<tool_call>{"name": ...,
"arguments": ...}</tool_call>``) is how the Qwen2.5 family is trained to take functions, and Qwen2.5-VL users who
call tools add that block to the system turn (custom templates merging it in: QwenLM/Qwen3-VL issue #1093; the
missing branch: QwenLM/Qwen3-VL #914, vllm-project/vllm #16797). The engine does the same when it notices the drop:
the system text, a blank line, then the block, as Qwen2.5's template writes it after a system message (Qwen3-VL's
templates write the same block; a test checks that the two agree).

``renders_tools`` notices the drop by rendering one small chat with and without the schema; ``RequestPreparer`` asks
it once per loaded model. Everything here is pure text work (no model, no tokenizer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

# How the schema reaches the model: the chat template renders ``tools=``, or ``tools_block`` is appended to the system
# turn (recorded in a trace's settings as ``tool_schema``).
ToolSchemaRoute = Literal["chat_template", "system_turn"]

_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>"
)
_PROBE = [{"role": "system", "content": "You answer."}, {"role": "user", "content": "Which function?"}]


def tools_block(tools: list[dict[str, Any]]) -> str:
    """The text appended to the system turn for a template that drops ``tools``: a blank line, then Qwen2.5's
    function-calling block with one JSON signature a line (``json.dumps(..., ensure_ascii=False)``, as the templates'
    ``tojson`` writes it)."""
    signatures = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    return "\n\n" + _HEAD + signatures + _TAIL


def renders_tools(render: Callable[..., str], tools: list[dict[str, Any]]) -> bool:
    """True when ``render`` (``apply_chat_template`` with ``tokenize=False``) shows ``tools`` to the model: a small chat
    rendered with them differs from the same chat rendered without them."""
    return render(_PROBE, tools=tools) != render(_PROBE)
