"""Qwen2.5-VL / Qwen3-VL (Instruct and Thinking) run in-process through Hugging Face ``transformers``.

``TransformersQwenVLM`` is the ``VLM`` / ``BatchVLM`` adapter of the inference engine (``sam3_agent.engine``):
it loads a checkpoint once (``from_pretrained``), holds the decoding settings of its calls (token budget and
sampling, with per-model defaults from ``engine.decoding``), and turns the engine's results into
``Generation`` s and its faults into ``BackendError`` s. The engine serves every caller: one request uses the
model at a time, and each has its own streamer, sampler and stop check, so concurrent users never see each
other's tokens.

Speed (``prefix_cache=True``, the default): requests start from the longest prompt prefix already computed
(the system prompts, a run's raw image and query, an examine's raw image), and ``generate_batch`` answers
several conversations in one batch. Output is token-identical to ``transformers``' ``generate``, which
``prefix_cache=False`` uses, greedy or sampled with the same seed (verified on CPU in float32 by
tests/test_engine_conformance.py; in bfloat16 on a GPU, tiny numeric differences can make the paths diverge).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..engine.decoded import Decoded, EngineError
from ..engine.decoding import DecodingSettings, ModelDecoding, model_decoding
from ..engine.kv_prefix import DEFAULT_PREFIX_CACHE_BYTES, DEFAULT_PREFIX_CACHE_ENTRIES, PrefixCacheStats
from ..engine.qwen_engine import QwenEngine
from ..engine.qwen_inputs import takes_pixel_bounds
from ..engine.sampling import Sampling
from ..engine.usage import VLMUsage
from ..errors import BackendError, InputError
from ..messages import Generation, Message
from .base import StreamItem
from .image_fit import DEFAULT_LIMITS, ImageLimits, checked_image_size, fit_messages
from .qwen_load import (
    check_local_folder,
    check_takes_images,
    device_and_dtype,
    generation_error_message,
    load_processor,
    load_qwen_model,
)

logger = logging.getLogger(__name__)


class TransformersQwenVLM:
    """A Qwen-VL chat model (``AutoModelForImageTextToText`` + ``AutoProcessor``) behind the ``VLM`` protocol.

    Build it with ``from_pretrained``. Text is returned as generated with special tokens removed;
    ``<think>``/``</think>`` are ordinary added tokens in Qwen's vocabulary and stay in the text.

    Attributes:
        name: the model id or folder it was loaded from.
        model: the loaded ``transformers`` model (eval mode).
        processor: the loaded processor (tokenizer, image processor, chat template).
        device: torch device string the model runs on (``"cuda"`` or ``"cpu"``...).
        image_size: image-processor pixel bounds used on every call:
            ``{"shortest_edge": min pixels, "longest_edge": max pixels}`` (pixels after resizing); ``None`` for a
            processor that is not a Qwen-VL one (``engine.qwen_inputs.takes_pixel_bounds``): it sizes images itself.
        defaults: this model's decoding defaults for main and verification calls (``engine.decoding``).
        decoding: what this object's calls use (token budget, sampling).
        prefix_store: the prefix KV caches of this model (``None`` when ``prefix_cache`` is off or
            the generation config needs ``generate``'s own decoding).
        image_limits: what the image processor accepts (``image_fit``); every image is fitted to it.
        starts_in_reasoning: the chat template opens ``<think>`` in the generation prompt (Thinking
            checkpoints), so every ``Generation`` is marked as starting inside the reasoning.

    Args:
        max_new_tokens / sampling: this object's token budget and sampling; ``None``: ``defaults.main``'s.
        prefix_cache: reuse computed prompt prefixes across requests (see the module docstring).
        prefix_cache_entries / prefix_cache_bytes: bounds of the prefix store (entries, bytes of
            key/value tensors).
        record_output_ids: keep every request's generated token ids (``output_ids()``), for
            benchmarks and tests.
        plain_loop: without the prefix cache, ``"generate"`` (default) or ``"own_loop"`` (the engine's decoder
            reusing nothing: the benchmark's ablation).

    Raises:
        InputError: ``max_new_tokens`` below 1 or a negative cache bound.
    """

    def __init__(
        self,
        name: str,
        model: Any,
        processor: Any,
        *,
        device: str,
        image_size: dict[str, int] | None,
        max_new_tokens: int | None = None,
        sampling: Sampling | None = None,
        prefix_cache: bool = True,
        prefix_cache_entries: int = DEFAULT_PREFIX_CACHE_ENTRIES,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
        record_output_ids: bool = False,
        plain_loop: str = "generate",
    ) -> None:
        if max_new_tokens is not None and max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if prefix_cache_entries < 0 or prefix_cache_bytes < 0:
            raise InputError(
                f"prefix cache bounds must be >= 0, got {prefix_cache_entries} entries, {prefix_cache_bytes} bytes"
            )
        self.name = name
        self._engine = QwenEngine(
            name, model, processor, device=device, image_size=image_size, prefix_cache=prefix_cache,
            prefix_cache_entries=prefix_cache_entries, prefix_cache_bytes=prefix_cache_bytes,
            record_output_ids=record_output_ids, plain_loop=plain_loop,  # type: ignore[arg-type]
        )
        self.image_limits = (DEFAULT_LIMITS if self._engine.image_size is None
                             else ImageLimits.of_processor(processor.image_processor, self._engine.image_size))
        self.starts_in_reasoning = self._engine.opens_thinking()
        self.defaults: ModelDecoding = model_decoding(
            model.generation_config, model.config.model_type, self.starts_in_reasoning
        )
        main = self.defaults.main
        self.decoding = DecodingSettings(
            main.max_new_tokens if max_new_tokens is None else max_new_tokens,
            main.sampling if sampling is None else sampling,
        )

    @classmethod
    def from_pretrained(
        cls,
        model_id: str,
        *,
        device: str | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_new_tokens: int | None = None,
        sampling: Sampling | None = None,
        prefix_cache: bool = True,
        prefix_cache_entries: int = DEFAULT_PREFIX_CACHE_ENTRIES,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
    ) -> TransformersQwenVLM:
        """Load a Qwen-VL checkpoint (Qwen2.5-VL, Qwen3-VL, Qwen3.5/3.6), or any other image-text-to-text model
        ``AutoModelForImageTextToText`` loads (Hub id or local folder), once. Another family runs on plain
        ``generate`` with its own processor and chat template (``engine.cache_support``: the reason is logged and
        recorded).

        Args:
            model_id: Hub repository id (e.g. ``DEFAULT_VLM_MODEL``) or path of a saved folder.
            device: torch device; ``None`` picks ``"cuda"`` (bfloat16) when available, else
                ``"cpu"`` (float32).
            min_pixels / max_pixels: bounds on an image's pixel count after resizing (the image
                processor's ``size["shortest_edge"]`` / ``size["longest_edge"]``); each image
                token covers ``(patch_size * merge_size)**2`` pixels (28*28 for Qwen2.5-VL,
                32*32 for Qwen3-VL), so ``max_pixels`` bounds the image tokens. ``None``: the
                tighter of the checkpoint's bound and ``DEFAULT_MIN_PIXELS`` / ``DEFAULT_MAX_PIXELS``
                (never more image tokens than either allows); an unset minimum never exceeds the maximum. A
                processor that is not a Qwen-VL one sizes images itself: the bounds are then not applied (logged).
            max_new_tokens / sampling: default token limit and sampling of a call; ``None``: the model's
                defaults for its main calls (``defaults.main``).
            prefix_cache / prefix_cache_entries / prefix_cache_bytes: see the class.

        Raises:
            BackendError: the folder does not exist or holds no model, the repository cannot be
                found or downloaded (gated, offline, no network), or the model does not fit.
            InputError: ``min_pixels`` > ``max_pixels``, or a bound below 1 (a ``ValueError``); a model that cannot
                take images (``qwen_load.check_takes_images``).
        """
        for label, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels)):
            if value is not None and value < 1:
                raise InputError(f"{label} must be a positive pixel count, got {value}")
        check_local_folder(model_id)
        check_takes_images(model_id)
        device, dtype = device_and_dtype(device)
        started = time.perf_counter()
        processor = load_processor(model_id, device)
        image_size = _pixel_bounds(processor.image_processor, min_pixels, max_pixels, model_id)
        model = load_qwen_model(model_id, device, dtype)  # straight to the device, every weight checked
        logger.info(
            "loaded VLM %s on %s (%s) in %.1f s; image pixels %s",
            model_id, device, dtype, time.perf_counter() - started, image_size,
        )
        return cls(
            model_id, model, processor, device=device, image_size=image_size, max_new_tokens=max_new_tokens,
            sampling=sampling, prefix_cache=prefix_cache, prefix_cache_entries=prefix_cache_entries,
            prefix_cache_bytes=prefix_cache_bytes,
        )

    # ------------------------------------------------------------------ the engine's state

    @property
    def model(self) -> Any:
        return self._engine.model

    @property
    def processor(self) -> Any:
        return self._engine.processor

    @property
    def device(self) -> str:
        return self._engine.device

    @property
    def image_size(self) -> dict[str, int]:
        return self._engine.image_size

    @property
    def prefix_store(self) -> Any:
        return self._engine.prefix_store

    @property
    def max_new_tokens(self) -> int:
        """Default output-token limit of a call."""
        return self.decoding.max_new_tokens

    @property
    def repetition_penalty(self) -> float | None:
        """The generation config's repetition penalty, applied to every call (``None``: none)."""
        penalty = getattr(self.model.generation_config, "repetition_penalty", None)
        return None if penalty in (None, 1.0) else float(penalty)

    def with_decoding(self, decoding: DecodingSettings) -> TransformersQwenVLM:
        """This model with other decoding settings (e.g. the verifier's); shares the loaded model, its lock,
        caches and counters."""
        view = copy.copy(self)
        view.decoding = decoding
        return view

    def with_tools(self, tools: list[dict[str, Any]]) -> TransformersQwenVLM:
        """This model shown ``tools`` (the function schema of the native tool format) in every request: passed to the
        chat template (``tools=``) or, for a template that drops them (Qwen2.5-VL's), written into the system turn
        (``engine.qwen_tools``); shares the loaded model, its lock, caches and counters."""
        view = copy.copy(self)
        view._engine = self._engine.with_tools(tools)
        return view

    @property
    def tool_schema(self) -> str | None:
        """How a ``with_tools`` view shows the schema: ``"chat_template"`` or ``"system_turn"``; ``None`` without
        tools."""
        return self._engine.tool_schema

    def decoding_paths(self) -> dict[str, Any]:
        """Which decoding path the engine chose for this model and why (``engine.cache_support``), for a trace."""
        return self._engine.paths()

    def decoding_record(self) -> dict[str, Any]:
        """This object's decoding settings as plain JSON values (for a trace)."""
        record = self.decoding.as_record()
        if self.repetition_penalty is not None:
            record["repetition_penalty"] = self.repetition_penalty
        return record

    def usage(self) -> VLMUsage:
        """Work done since construction (or ``reset_usage``)."""
        return self._engine.usage()

    def reset_usage(self) -> None:
        """Zero the counters and forget recorded output ids."""
        self._engine.reset_usage()

    def output_ids(self) -> list[tuple[int, ...]]:
        """Generated token ids of every request since the last reset, in completion order (rows of a
        batch in order); empty unless built with ``record_output_ids=True``."""
        return self._engine.output_ids()

    def clear_caches(self) -> None:
        """Forget every cached prompt prefix (pinned system prompts included) and preprocessed image."""
        self._engine.clear_caches()

    def prefix_cache_stats(self) -> PrefixCacheStats | None:
        """Entries, pinned entries and bytes of the prefix store, or ``None`` when it is off."""
        return self._engine.prefix_cache_stats()

    # ------------------------------------------------------------------ prompts

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The prompt text the chat template makes of ``messages`` (with the generation prompt).

        Each image appears as the template's single placeholder (not yet expanded to its tokens).
        """
        return self._engine.render_prompt(messages)

    def encode(self, messages: Sequence[Message]) -> Any:
        """Tokenize ``messages`` and preprocess their images for ``generate``.

        Returns:
            A ``BatchFeature`` on ``self.device``: ``input_ids`` int64 (1, T) with each image expanded
            to its tokens, ``attention_mask``, and for images ``pixel_values`` float
            (patches, channels * temporal_patch * patch * patch) and ``image_grid_thw`` int64 (I, 3).
        """
        return self._engine.encode(messages)

    # ------------------------------------------------------------------ generation

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[StreamItem]:
        """Generate the reply to ``messages`` (with ``decoding``'s sampling); yield text pieces, then one ``Generation``.

        The pieces concatenate to ``Generation.text``. ``finish_reason`` is ``"cancelled"`` when
        ``stop`` was set (before or during generation), ``"length"`` when ``max_new_tokens`` tokens
        were generated without an end-of-turn token, else ``"stop"``. ``prompt_tokens`` counts text
        and image tokens; ``output_tokens`` counts generated tokens including the end-of-turn token.
        Callers wait for each other (one request at a time); a caller whose ``stop`` is set before
        its turn gets ``Generation("", "cancelled", None, 0)`` without any model work.

        Every image is first fitted to the processor's limits (``image_fit``); with a Thinking template every
        ``Generation`` is marked ``starts_in_reasoning``.

        Raises:
            BackendError: preprocessing or generation failed (out of memory, device error...).
            InputError: ``max_new_tokens`` below 1 (a ``ValueError``).
        """
        limit = self._limit(max_new_tokens)
        stop = stop if stop is not None else threading.Event()
        fitted = fit_messages(messages, self.image_limits)
        try:
            for item in self._engine.stream(fitted, limit, stop, self.decoding.sampling):
                yield item if isinstance(item, str) else self._generation(item)
        except EngineError as error:
            raise self._backend_error(error) from error.cause

    def generate_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> list[Generation]:
        """Answer several independent conversations in one batch; one ``Generation`` per conversation, in order.

        Outputs equal those of ``stream`` on each conversation alone (greedy, or sampled: each request draws
        from its own seeded generator). Each prompt runs on its own after the prefix they share (with
        ``prefix_cache`` that prefix is run once and kept for later batches); the rows then decode together,
        one step for all (see ``engine.qwen_decode``). When ``stop`` is set, unfinished rows end with
        ``finish_reason="cancelled"`` (all rows, with empty text, when set before the model started).

        Images are fitted and generations marked as in ``stream``.

        Raises:
            BackendError: preprocessing or generation failed.
            InputError: ``max_new_tokens`` below 1.
        """
        limit = self._limit(max_new_tokens)
        stop = stop if stop is not None else threading.Event()
        try:
            fitted = [fit_messages(messages, self.image_limits) for messages in conversations]
            decoded = self._engine.generate_batch(fitted, limit, stop, self.decoding.sampling)
        except EngineError as error:
            raise self._backend_error(error) from error.cause
        return [self._generation(d) for d in decoded]

    def prefill_system_prompts(self, texts: Sequence[str]) -> int:
        """Compute now, once for this model, the KV caches of these system prompts (e.g. at start-up).

        Requests starting with one of them then run only the tokens after it. Does nothing when
        ``prefix_cache`` is off. Returns the number of tokens computed (0 for prompts already cached).

        Raises:
            BackendError: the model failed.
        """
        try:
            return self._engine.prefill_system_prompts(texts)
        except EngineError as error:
            raise self._backend_error(error) from error.cause

    def _limit(self, max_new_tokens: int | None) -> int:
        limit = self.decoding.max_new_tokens if max_new_tokens is None else max_new_tokens
        if limit < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {limit}")
        return limit

    def _generation(self, decoded: Decoded) -> Generation:
        """The ``VLM`` protocol's record of an engine result (marked when the template opened ``<think>``)."""
        return Generation(decoded.text, decoded.finish_reason, decoded.prompt_tokens,  # type: ignore[arg-type]
                          decoded.output_tokens, starts_in_reasoning=self.starts_in_reasoning)

    def _backend_error(self, error: EngineError) -> BackendError:
        if error.stage == "prepare":
            return BackendError(f"{self.name}: could not prepare the request for the model: {error.cause}")
        return BackendError(generation_error_message(self.name, error.cause))


def _pixel_bounds(image_processor: Any, min_pixels: int | None, max_pixels: int | None,
                  model_id: str) -> dict[str, int] | None:
    """The pixel bounds of a Qwen-VL image processor (``image_fit.checked_image_size``); ``None`` for another kind,
    which resizes every image its own way (bounds asked for are then not applied, and the log says so)."""
    if takes_pixel_bounds(image_processor):
        return checked_image_size(image_processor.size, min_pixels, max_pixels, model_id)
    if min_pixels is not None or max_pixels is not None:
        logger.warning("%s: its image processor (%s) resizes images to a size of its own; min/max pixels are not "
                       "applied", model_id, type(image_processor).__name__)
    return None
