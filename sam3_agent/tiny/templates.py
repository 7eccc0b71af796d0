"""Chat templates of the tiny and ``small`` Qwen models: the real models' renderings, in our own Jinja.

Each template renders the conversations this product sends (a system turn first, user turns of text and
images, assistant turns of text) to exactly the text the released model's own ``chat_template`` renders
(``tests/test_tiny_presets.py`` pins the renderings). What each released template does, as published with
the checkpoints on the Hugging Face Hub (``chat_template.json``; public copies checked: the Qwen3-VL-8B-Instruct
template embedded in Qwen3-VL-8B-Instruct-GGUF files, ollama's Qwen3-VL Thinking renderer in
``model/renderers/`` of ollama/ollama, FACTS.md "Real model configurations"):

- Qwen3-VL Instruct: a leading system turn is rendered (its text only); later system turns are dropped;
  user turns render text and an image as ``<|vision_start|><|image_pad|><|vision_end|>``; assistant turns
  render their text as given; the generation prompt is ``<|im_start|>assistant\\n``.
- Qwen3-VL Thinking: as Instruct, except that later system turns are kept, the generation prompt opens
  ``<think>\\n``, and an assistant turn's text is cut at its last ``</think>``: before the last user query only
  the answer after it is kept (earlier reasoning never returns to the model); after it, the reasoning is
  re-wrapped as ``<think>\\n...\\n</think>\\n\\n`` before the answer.
- Qwen3.5 / Qwen3.6 (dense and MoE, one template for both; Thinking by default): as Qwen3-VL Thinking, except
  that ``enable_thinking=False`` (a ``chat_template_kwargs`` switch) closes an empty reasoning block in the
  generation prompt, ``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``, instead of opening one; every
  turn's text is stripped of surrounding whitespace; an assistant turn after the last user query always shows its
  (stripped) reasoning block; a chat without a user query, or with a system turn other than the first, is refused
  (``raise_exception``, as the released template does). Public copies checked: Qwen/Qwen3.5-4B's
  ``chat_template.jinja`` and ollama's ``model/renderers/qwen35.go``.
- Qwen2.5-VL Instruct: every turn renders its text and images; a conversation that does not start with a
  system turn gets ``You are a helpful assistant.`` as one; the generation prompt is ``<|im_start|>assistant\\n``.

Tool definitions (``tools=``, the native tool format) are rendered as the released templates render them:

- Qwen3-VL (Instruct and Thinking): after the system text and a blank line, ``# Tools`` with one JSON signature a
  line inside ``<tools></tools>`` and the instruction to answer ``<tool_call>{"name": ..., "arguments": ...}
  </tool_call>``;
- Qwen3.5 / Qwen3.6: the system turn opens with ``# Tools``, the JSON signatures inside ``<tools></tools>`` and the
  instruction to answer in the XML style (``<tool_call>``, ``<function=NAME>``, ``<parameter=NAME>`` ...; read by
  ``agent.function_calls``), then the system text after a blank line;
- Qwen2.5-VL: no tools branch; the schema is ignored, as the released template ignores it (``engine.qwen_tools``
  notices and writes it into the system turn instead).

The instructions' words are the released templates' own output (what the models were trained on), not ours. Tool
turns, videos and ``add_vision_id`` are left out: the product never sends them.
"""

from __future__ import annotations

import json
from typing import Literal

Variant = Literal["qwen3_vl_instruct", "qwen3_vl_thinking", "qwen2_5_vl", "qwen3_5"]

QWEN2_5_VL_DEFAULT_SYSTEM = "You are a helpful assistant."

# Newlines are written as {{ '\n' }} so that Jinja's whitespace control (transformers compiles templates with
# trim_blocks and lstrip_blocks) cannot eat them; every tag strips the layout whitespace around it.
_MACROS = (
    "{%- macro text_of(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for item in content -%}{%- if 'text' in item -%}{{ item.text }}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- macro with_images(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for item in content -%}"
    "{%- if item.type == 'image' or 'image' in item or 'image_url' in item -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif 'text' in item -%}{{ item.text }}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)

_LEADING_SYSTEM = (
    "{%- if messages and messages[0].role == 'system' -%}"
    "<|im_start|>system{{ '\n' }}{{ text_of(messages[0].content) }}<|im_end|>{{ '\n' }}"
    "{%- endif -%}"
)

# Qwen3-VL (Instruct and Thinking) with ``tools``: the system turn (its text, a blank line) is followed by the
# function signatures, one JSON object a line, and the instruction to answer in <tool_call> tags.
_TOOLS_BLOCK = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>"
)
# json.dumps writes each text as a Jinja string literal (same escapes), out of reach of the whitespace control
_LEADING_SYSTEM_OR_TOOLS = (
    "{%- if tools -%}"
    "<|im_start|>system{{ '\n' }}"
    "{%- if messages and messages[0].role == 'system' -%}{{ text_of(messages[0].content) }}{{ '\n\n' }}{%- endif -%}"
    "{{ " + json.dumps(_TOOLS_BLOCK) + " }}"
    "{%- for tool in tools -%}{{ '\n' }}{{ tool | tojson }}{%- endfor -%}"
    "{{ " + json.dumps(_TOOLS_TAIL) + " }}<|im_end|>{{ '\n' }}"
    "{%- else -%}" + _LEADING_SYSTEM + "{%- endif -%}"
)

# Qwen3.5 / Qwen3.6 with ``tools``: the function signatures and the XML-style instruction open the system turn; the
# system text, stripped, follows after a blank line. Without tools the system text alone, stripped.
_QWEN3_5_TOOLS_HEAD = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
_QWEN3_5_TOOLS_TAIL = (
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>"
)
_QWEN3_5_SYSTEM = (
    "{%- if tools -%}"
    "<|im_start|>system{{ '\n' }}{{ " + json.dumps(_QWEN3_5_TOOLS_HEAD) + " }}"
    "{%- for tool in tools -%}{{ '\n' }}{{ tool | tojson }}{%- endfor -%}"
    "{{ " + json.dumps(_QWEN3_5_TOOLS_TAIL) + " }}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system_text = text_of(messages[0].content) | trim -%}"
    "{%- if system_text -%}{{ '\n\n' }}{{ system_text }}{%- endif -%}"
    "{%- endif -%}"
    "<|im_end|>{{ '\n' }}"
    "{%- elif messages and messages[0].role == 'system' -%}"
    "<|im_start|>system{{ '\n' }}{{ text_of(messages[0].content) | trim }}<|im_end|>{{ '\n' }}"
    "{%- endif -%}"
)
# The turns after the system turn: Qwen3-VL Thinking's rules with the released Qwen3.5 template's differences.
_QWEN3_5_AFTER_SYSTEM = (
    "{%- set query = namespace(index=messages | length - 1, found=false) -%}"
    "{%- for message in messages | reverse -%}"
    "{%- if not query.found and message.role == 'user' -%}"
    "{%- set plain = text_of(message.content) | trim -%}"
    "{%- if not (plain.startswith('<tool_response>') and plain.endswith('</tool_response>')) -%}"
    "{%- set query.found = true -%}{%- set query.index = messages | length - 1 - loop.index0 -%}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if not query.found -%}{{ raise_exception('No user query found in messages.') }}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}"
    "{%- if not loop.first -%}{{ raise_exception('System message must be at the beginning.') }}{%- endif -%}"
    "{%- elif message.role == 'user' -%}"
    "<|im_start|>user{{ '\n' }}{{ with_images(message.content) | trim }}<|im_end|>{{ '\n' }}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- set answer = text_of(message.content) | trim -%}{%- set reasoning = '' -%}"
    "{%- if '</think>' in answer -%}"
    "{%- set reasoning = answer.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}"
    "{%- set answer = answer.split('</think>')[-1].lstrip('\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > query.index -%}"
    "<|im_start|>assistant{{ '\n' }}<think>{{ '\n' }}{{ reasoning | trim }}{{ '\n' }}</think>{{ '\n\n' }}{{ answer }}"
    "{%- else -%}"
    "<|im_start|>assistant{{ '\n' }}{{ answer }}"
    "{%- endif -%}"
    "<|im_end|>{{ '\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

_QWEN3_VL_INSTRUCT = (
    _MACROS
    + _LEADING_SYSTEM_OR_TOOLS
    + "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}"
    "<|im_start|>user{{ '\n' }}{{ with_images(message.content) }}<|im_end|>{{ '\n' }}"
    "{%- elif message.role == 'assistant' -%}"
    "<|im_start|>assistant{{ '\n' }}{{ text_of(message.content) }}<|im_end|>{{ '\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\n' }}{%- endif -%}"
)

_THINKING_AFTER_SYSTEM = (
    ""
    # the last user turn that is not a wrapped tool response is the query; reasoning before it is dropped
    + "{%- set query = namespace(index=messages | length - 1, found=false) -%}"
    "{%- for message in messages | reverse -%}"
    "{%- if not query.found and message.role == 'user' -%}"
    "{%- set plain = text_of(message.content) | string -%}"
    "{%- if not (plain.startswith('<tool_response>') and plain.endswith('</tool_response>')) -%}"
    "{%- set query.found = true -%}{%- set query.index = messages | length - 1 - loop.index0 -%}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}"
    "<|im_start|>{{ message.role }}{{ '\n' }}{{ with_images(message.content) }}<|im_end|>{{ '\n' }}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- set answer = text_of(message.content) | string -%}{%- set reasoning = '' -%}"
    "{%- if '</think>' in answer -%}"
    "{%- set reasoning = answer.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}"
    "{%- set answer = answer.split('</think>')[-1].lstrip('\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > query.index and (loop.last or reasoning) -%}"
    "<|im_start|>assistant{{ '\n' }}<think>{{ '\n' }}{{ reasoning.strip('\n') }}{{ '\n' }}</think>{{ '\n\n' }}"
    "{{ answer.lstrip('\n') }}"
    "{%- else -%}"
    "<|im_start|>assistant{{ '\n' }}{{ answer }}"
    "{%- endif -%}"
    "<|im_end|>{{ '\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

# Qwen3.5's generation prompt: Thinking unless the caller passes enable_thinking=False.
_QWEN3_5_GENERATION_PROMPT = (
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}<think>{{ '\n\n' }}</think>{{ '\n\n' }}"
    "{%- else -%}<think>{{ '\n' }}{%- endif -%}{%- endif -%}"
)
_QWEN3_VL_THINKING = (
    _MACROS + _LEADING_SYSTEM_OR_TOOLS + _THINKING_AFTER_SYSTEM
    + "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\n' }}<think>{{ '\n' }}{%- endif -%}"
)

_QWEN2_5_VL = (
    _MACROS
    + "{%- for message in messages -%}"
    "{%- if loop.first and message.role != 'system' -%}"
    "<|im_start|>system{{ '\n' }}" + QWEN2_5_VL_DEFAULT_SYSTEM + "<|im_end|>{{ '\n' }}"
    "{%- endif -%}"
    "<|im_start|>{{ message.role }}{{ '\n' }}{{ with_images(message.content) }}<|im_end|>{{ '\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\n' }}{%- endif -%}"
)

CHAT_TEMPLATES: dict[Variant, str] = {
    "qwen3_vl_instruct": _QWEN3_VL_INSTRUCT,
    "qwen3_vl_thinking": _QWEN3_VL_THINKING,
    "qwen2_5_vl": _QWEN2_5_VL,
    "qwen3_5": _MACROS + _QWEN3_5_SYSTEM + _QWEN3_5_AFTER_SYSTEM + _QWEN3_5_GENERATION_PROMPT,
}


def chat_template(variant: Variant) -> str:
    """The Jinja chat template of ``variant`` (see the module docstring).

    Raises:
        ValueError: an unknown variant.
    """
    try:
        return CHAT_TEMPLATES[variant]
    except KeyError:
        raise ValueError(f"unknown chat template {variant!r}: use one of {sorted(CHAT_TEMPLATES)}") from None
