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
  generation prompt, ``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``, instead of opening one (public notes
  on the Qwen3.5/3.6 templates: the ``enable_thinking is false`` branch, the same tail as Qwen3's).
- Qwen2.5-VL Instruct: every turn renders its text and images; a conversation that does not start with a
  system turn gets ``You are a helpful assistant.`` as one; the generation prompt is ``<|im_start|>assistant\\n``.

Tool turns, tool definitions, videos and ``add_vision_id`` of the released templates are left out: the product
never sends them.
"""

from __future__ import annotations

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

_QWEN3_VL_INSTRUCT = (
    _MACROS
    + _LEADING_SYSTEM
    + "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}"
    "<|im_start|>user{{ '\n' }}{{ with_images(message.content) }}<|im_end|>{{ '\n' }}"
    "{%- elif message.role == 'assistant' -%}"
    "<|im_start|>assistant{{ '\n' }}{{ text_of(message.content) }}<|im_end|>{{ '\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\n' }}{%- endif -%}"
)

_THINKING_TURNS = (
    _MACROS
    + _LEADING_SYSTEM
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
    _THINKING_TURNS
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
    "qwen3_5": _THINKING_TURNS + _QWEN3_5_GENERATION_PROMPT,
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
