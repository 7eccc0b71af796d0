"""Turning conversations into one loaded Qwen-VL model's inputs: prompt text, ``generate`` inputs, ``EncodedRequest`` s.

``RequestPreparer`` holds what preparing requests remembers between them: each distinct image preprocessed
once, each distinct text piece tokenized once (``qwen_inputs``), and the token ids of recent system prompts
(so a request that starts with a known system turn says how long it is, and the decoder pins its cache).
It is called with the engine's lock held (``qwen_engine.QwenEngine``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
from jinja2 import TemplateError  # a chat template's raise_exception (e.g. roles that must alternate)

from ..errors import InputError
from ..messages import ImagePart, Message, TextPart
from .decoded import EngineError
from .qwen_inputs import PreprocessedImages, TextIds, encode_messages, to_chat
from .qwen_request import EncodedRequest, encode_request
from .qwen_tools import ToolSchemaRoute, renders_tools, tools_block

logger = logging.getLogger(__name__)

_SYSTEM_MEMO_SIZE = 8  # distinct system prompts whose token ids are remembered
_TURN_START = "<|im_start|>"  # Qwen's chat turns open with it


class RequestPreparer:
    """Request preparation for one loaded model.

    Args:
        model: the loaded ``...ForConditionalGeneration`` model (its config names the image token;
            ``encode_request`` asks it for positions).
        processor: its processor (chat template, tokenizer, image processor).
        device: torch device string the model is on.
        image_size: pixel bounds given to the image processor (``{"shortest_edge", "longest_edge"}``, pixels);
            ``None`` for a processor that sizes images its own way (``qwen_inputs.takes_pixel_bounds``), which is then
            given no size.
    """

    def __init__(self, model: Any, processor: Any, device: str, image_size: dict[str, int] | None) -> None:
        self.model = model
        self.processor = processor
        self.device = device
        self.image_size = image_size
        token = getattr(model.config, "image_token_id", None)  # None: a model the decoder does not run (generate only)
        self._image_token_id = -1 if token is None else int(token)
        self._images = PreprocessedImages()  # each distinct image is preprocessed once (decoder paths)
        self._texts = TextIds()  # each distinct text piece is tokenized once (decoder paths)
        self._system_ids: dict[str, list[int]] = {}  # system prompt text -> ids of its rendered turn
        self.tools: list[dict[str, Any]] | None = None  # function schema the chat template renders (``tools=``)
        self.tool_schema: ToolSchemaRoute | None = None  # how ``tools`` reach the model (``qwen_tools``)
        self._system_suffix = ""  # the schema appended to the system turn when the template drops it
        self._template_renders_tools: list[bool] = []  # asked once per model; shared by the views

    def with_tools(self, tools: list[dict[str, Any]]) -> RequestPreparer:
        """This preparer showing every chat's model ``tools`` (the function schema): through the chat template's
        ``tools=``, or, when the template drops them (Qwen2.5-VL's), appended to the system turn in Qwen's own
        function-calling form (``qwen_tools``; noticed once per model and logged). The image and text caches are
        shared, the system turns (which hold the schema) are remembered apart.

        Raises:
            InputError: the template drops the schema and the model is not a Qwen (``model_type`` ``qwen...``), whose
                family's form is the only one known here.
        """
        view = copy.copy(self)
        view.tools = list(tools)
        view._system_ids = {}
        if self._renders_tools(view.tools):
            view.tool_schema = "chat_template"
        elif str(getattr(self.model.config, "model_type", "")).startswith("qwen"):
            view.tool_schema, view._system_suffix = "system_turn", tools_block(view.tools)
        else:
            raise InputError(
                f"the chat template of this {getattr(self.model.config, 'model_type', 'unknown')} model ignores the "
                "function schema (tools=), and its family's own function-calling form is not known here: use the "
                "reference tool format (--tool-format reference)")
        return view

    def _renders_tools(self, tools: list[dict[str, Any]]) -> bool:
        if not self._template_renders_tools:
            def render(chat: list[dict[str, Any]], **kwargs: Any) -> str:
                return self.processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False, **kwargs)

            self._template_renders_tools.append(renders_tools(render, tools))
            if not self._template_renders_tools[0]:
                logger.info("the chat template of this model ignores tools=: the function schema is written into "
                            "the system turn in Qwen's function-calling form instead")
        return self._template_renders_tools[0]

    def _template(self) -> dict[str, Any]:
        """Extra ``apply_chat_template`` arguments: ``tools`` when the template renders them."""
        return {"tools": self.tools} if self.tools and self.tool_schema == "chat_template" else {}

    def _chat(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """``messages`` in the processor's chat format, the schema appended to a leading system turn when the template
        drops it."""
        return to_chat(self._with_schema(messages))

    def _with_schema(self, messages: Sequence[Message]) -> Sequence[Message]:
        if not self._system_suffix or not messages or messages[0].role != "system" or messages[0].images:
            return messages
        first = Message("system", (TextPart(messages[0].text + self._system_suffix),))
        return [first, *messages[1:]]

    def clear(self) -> None:
        """Forget every preprocessed image and tokenized text piece."""
        self._images.clear()
        self._texts.clear()

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The prompt text the chat template makes of ``messages`` (with the generation prompt)."""
        return self.processor.apply_chat_template(
            self._chat(messages), add_generation_prompt=True, tokenize=False, **self._template()
        )

    def opens_thinking(self) -> bool:
        """True when the chat template's generation prompt opens ``<think>`` (a Thinking model)."""
        probe = self.render_prompt([Message("user", (TextPart("x"),))])
        return probe.rstrip().endswith("<think>")

    def encode(self, messages: Sequence[Message]) -> Any:
        """The processor's encoding of ``messages`` for ``generate`` (``input_ids`` int64 (1, T), attention mask,
        ``pixel_values`` and ``image_grid_thw`` int64 (I, 3) for images) on ``self.device``."""
        sizing = {} if self.image_size is None else {
            "processor_kwargs": {"images_kwargs": {"size": dict(self.image_size)}}}
        inputs = self.processor.apply_chat_template(
            self._chat(messages), add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
            **sizing, **self._template(),
        )
        return inputs.to(self.device)

    def encode_or_fail(self, messages: Sequence[Message]) -> Any:
        """``encode``, its faults raised as ``EngineError("prepare", ...)``."""
        try:
            return self.encode(messages)
        except (ValueError, TypeError, RuntimeError, TemplateError) as exc:
            raise EngineError("prepare", exc) from exc

    def prepare(self, messages: Sequence[Message]) -> EncodedRequest:
        """Tokenize ``messages`` (each distinct image preprocessed once) and describe them for ``CachedDecoder``
        (only for models the decoder runs: a Qwen-VL processor, ``image_size`` set).

        Raises:
            EngineError: the processor or the model's position index refused the request (stage ``"prepare"``).
        """
        try:
            parts = [part for message in messages for part in message.parts if isinstance(part, ImagePart)]
            images = [part.image for part in parts]
            digests = [part.digest for part in parts]
            if self.image_size is None:
                raise ValueError("the cached decoder needs a Qwen-VL image processor (pixel bounds)")
            encoded = encode_messages(
                self.processor, self._chat(messages), images, self.image_size, self._images, digests, self._texts,
                self._template(),
            )
            if encoded is None:
                inputs = self.encode(messages)
            else:
                inputs = {
                    k: tuple(t.to(self.device) for t in v) if isinstance(v, tuple) else v.to(self.device)
                    for k, v in encoded.items()
                }
            system_length = self._system_length(messages, inputs["input_ids"][0])
            return encode_request(self.model, inputs, images, self._image_token_id, system_length, digests)
        except (ValueError, TypeError, RuntimeError, TemplateError) as exc:
            raise EngineError("prepare", exc) from exc

    def system_request(self, text: str) -> EncodedRequest:
        """A request holding only a system turn with ``text`` (what ``prefill_system_prompts`` computes)."""
        ids = self.system_turn_ids(text)
        inputs = {
            "input_ids": torch.tensor([ids], device=self.device),
            "mm_token_type_ids": torch.zeros((1, len(ids)), dtype=torch.int32, device=self.device),
        }
        return encode_request(self.model, inputs, [], self._image_token_id, len(ids))

    def system_turn_ids(self, text: str) -> list[int]:
        """Token ids of a system message with ``text`` rendered as the first turn (remembered per text).

        The turn is rendered before a one-word user turn, which is then cut off at its ``<|im_start|>``: the released
        Qwen3.5 template refuses a chat without a user query.
        """
        ids = self._system_ids.get(text)
        if ids is None:
            probe = [Message("system", (TextPart(text),)), Message("user", (TextPart("x"),))]
            rendered = self.processor.apply_chat_template(
                self._chat(probe), add_generation_prompt=False, tokenize=False, **self._template()
            )
            cut = rendered.rfind(_TURN_START)
            rendered = rendered[:cut] if cut > 0 else rendered
            ids = list(self.processor.tokenizer(rendered, add_special_tokens=False)["input_ids"])
            if len(self._system_ids) >= _SYSTEM_MEMO_SIZE:
                self._system_ids.pop(next(iter(self._system_ids)))
            self._system_ids[text] = ids
        return ids

    def _system_length(self, messages: Sequence[Message], input_ids: torch.Tensor) -> int:
        """Tokens of the leading system turn when the request starts with exactly them, else 0."""
        if not messages or messages[0].role != "system" or messages[0].images:
            return 0
        ids = self.system_turn_ids(messages[0].text)
        n = len(ids)
        if n == 0 or n >= int(input_ids.shape[0]) or input_ids[:n].tolist() != ids:
            return 0
        return n
