"""One loaded Qwen-VL model's inference: request encoding, prefix reuse, batching, decoding, usage counters.

``QwenEngine`` is the engine's narrow interface. It takes conversations (``messages.Message`` s) and returns
text: ``stream`` yields text pieces then one ``Decoded``; ``generate_batch`` answers several conversations
together; ``prefill_system_prompts`` computes system-prompt caches ahead of time. A lock lets one request
use the model at a time; each request has its own streamer, sampler and stop check, so concurrent callers
never see each other's tokens.

Two decoding paths, chosen at construction from what the model supports (``cache_support.probe_cache``: attention
and hybrid caches run the decoder; anything else, or a generation config the decoder cannot follow, runs
``generate``, the reason logged once and given by ``paths()`` for the trace's settings):
- ``prefix_cache=True``: ``qwen_decode.CachedDecoder`` starts each request from the longest prompt prefix
  already computed (``kv_prefix``) and decodes batches together.
- ``prefix_cache=False``: ``transformers``' ``generate``, one request at a time: the reference the
  conformance tests compare the fast path with.
Both choose tokens through ``sampling.TokenChooser`` (greedy, or seeded sampling), so both give the same
tokens for the same request and settings (verified on CPU in float32: tests/test_engine_conformance.py).

This module is the front: the lock, the choice of path and the counters. Requests are prepared by
``qwen_prepare``, run by ``decoder_thread`` (the decoder paths) or ``generate_thread`` (``generate``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import torch

from ..messages import Message
from . import check_transformers_version
from .cache_support import CacheSupport, log_choice, probe_cache
from .decoded import CANCELLED, Decoded, EngineError
from .decoder_thread import decode_batch, stream_decoder
from .generate_thread import stream_generate
from .kv_prefix import DEFAULT_PREFIX_CACHE_BYTES, DEFAULT_PREFIX_CACHE_ENTRIES, PrefixCacheStats, PrefixCacheStore
from .qwen_decode import CachedDecoder, DecodeCounters, supports_config
from .qwen_prepare import RequestPreparer
from .qwen_request import EncodedRequest
from .sampling import GREEDY, Sampling
from .usage import UsageCounter, VLMUsage

_LOCK_POLL_SECONDS = 0.05  # how often a call waiting for the model checks its stop event


class QwenEngine:
    """Inference for one loaded ``Qwen2_5_VLForConditionalGeneration`` / ``Qwen3VLForConditionalGeneration``.

    Args:
        name: model id or folder (for logs).
        model / processor: the loaded model (eval mode) and its processor.
        device: torch device string the model is on.
        image_size: pixel bounds given to the image processor (``{"shortest_edge", "longest_edge"}``, pixels);
            ``None``: the processor sizes images its own way (not a Qwen-VL processor: the model runs on ``generate``).
        prefix_cache: reuse computed prompt prefixes and decode batches together (see the module docstring).
        prefix_cache_entries / prefix_cache_bytes: bounds of the prefix store.
        record_output_ids: keep every request's generated token ids (``output_ids()``).
        plain_loop: without the prefix cache, decode with ``"generate"`` (default) or ``"own_loop"``
            (``CachedDecoder`` reusing nothing, one request at a time: the benchmark's ablation).

    Raises:
        ValueError: a negative cache bound.
    """

    def __init__(
        self,
        name: str,
        model: Any,
        processor: Any,
        *,
        device: str,
        image_size: dict[str, int] | None,
        prefix_cache: bool = True,
        prefix_cache_entries: int = DEFAULT_PREFIX_CACHE_ENTRIES,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
        record_output_ids: bool = False,
        plain_loop: Literal["generate", "own_loop"] = "generate",
    ) -> None:
        check_transformers_version()  # logs a warning on another version (cheap: a string compare)
        self.name = name
        self.model = model
        self.processor = processor
        self.device = device
        self.image_size = None if image_size is None else dict(image_size)
        self._lock = threading.Lock()
        self.eos_ids, pad = _end_and_pad_ids(model, processor)
        self.support = _decoding_support(model, processor, self.image_size is not None)
        log_choice(name, self.support)
        exact = self.support.decoder
        self.prefix_store = (
            PrefixCacheStore(prefix_cache_entries, prefix_cache_bytes, whole_entries=self.support.hybrid)
            if prefix_cache and exact else None
        )
        turn = processor.tokenizer.convert_tokens_to_ids("<|im_start|>")
        turn = turn if isinstance(turn, int) and turn != processor.tokenizer.unk_token_id else None
        self._cached = CachedDecoder(model, self.prefix_store, self.eos_ids, pad, turn) if self.prefix_store else None
        self._batched = CachedDecoder(model, None, self.eos_ids, pad) if exact else None
        self._own_loop = plain_loop == "own_loop" and self._batched is not None
        self._requests = RequestPreparer(model, processor, device, self.image_size)
        self._usage = UsageCounter(record_output_ids)

    def with_tools(self, tools: list[dict[str, Any]]) -> QwenEngine:
        """This engine rendering every chat with ``tools`` as the template's function schema; the model, its lock,
        caches and counters are shared."""
        view = copy.copy(self)
        view._requests = self._requests.with_tools(tools)
        return view

    @property
    def tool_schema(self) -> str | None:
        """How ``with_tools``' schema reaches the model (``"chat_template"`` or ``"system_turn"``, ``qwen_tools``);
        ``None`` without tools."""
        return self._requests.tool_schema

    # ------------------------------------------------------------------ counters and caches

    def paths(self) -> dict[str, object]:
        """Which decoding path this model runs on and why (plain JSON values for a trace's settings)."""
        record = self.support.as_record()
        record["prefix_cache"] = self.prefix_store is not None
        return record

    def usage(self) -> VLMUsage:
        """Work done since construction (or ``reset_usage``)."""
        return self._usage.snapshot()

    def reset_usage(self) -> None:
        """Zero the counters and forget recorded output ids."""
        self._usage.reset()

    def output_ids(self) -> list[tuple[int, ...]]:
        """Generated token ids of every request since the last reset, in completion order (rows of a batch in
        order); empty unless built with ``record_output_ids=True``."""
        return self._usage.outputs()

    def clear_caches(self) -> None:
        """Forget every cached prompt prefix (pinned system prompts included), preprocessed image and text."""
        if self.prefix_store is not None:
            self.prefix_store.clear()
        self._requests.clear()

    def prefix_cache_stats(self) -> PrefixCacheStats | None:
        """Entries, pinned entries and bytes of the prefix store, or ``None`` when it is off."""
        return self.prefix_store.stats() if self.prefix_store is not None else None

    # ------------------------------------------------------------------ prompts

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The prompt text the chat template makes of ``messages`` (with the generation prompt)."""
        return self._requests.render_prompt(messages)

    def opens_thinking(self) -> bool:
        """True when the chat template's generation prompt opens ``<think>`` (a Thinking model)."""
        return self._requests.opens_thinking()

    def encode(self, messages: Sequence[Message]) -> Any:
        """The processor's encoding of ``messages`` for ``generate`` (``input_ids`` int64 (1, T), attention mask,
        ``pixel_values`` and ``image_grid_thw`` int64 (I, 3) for images) on ``self.device``."""
        return self._requests.encode(messages)

    def system_turn_ids(self, text: str) -> list[int]:
        """Token ids of a system message with ``text`` rendered as the first turn (remembered per text)."""
        return self._requests.system_turn_ids(text)

    # ------------------------------------------------------------------ decoding

    def stream(
        self, messages: Sequence[Message], limit: int, stop: threading.Event, sampling: Sampling = GREEDY
    ) -> Iterator[str | Decoded]:
        """Decode the reply to ``messages``: text pieces as they come, then one ``Decoded``.

        Waits for the model (checking ``stop``); ``CANCELLED`` without model work when ``stop`` is set first.

        Raises:
            EngineError: preparing the request or running the model failed.
        """
        if not self._acquire(stop):
            yield CANCELLED
            return
        try:
            if stop.is_set():
                yield CANCELLED
                return
            if self._cached is not None or self._own_loop:
                decoder = self._cached if self._cached is not None else self._batched
                yield from self._stream_decoder(decoder, self._requests.prepare(messages), limit, stop, sampling)  # type: ignore[arg-type]
                return
            inputs = self._requests.encode_or_fail(messages)
            yield from self._stream_generate(inputs, limit, stop, sampling)
        finally:
            self._lock.release()

    def generate_batch(
        self, conversations: Sequence[Sequence[Message]], limit: int, stop: threading.Event,
        sampling: Sampling = GREEDY,
    ) -> list[Decoded]:
        """Answer several conversations; one ``Decoded`` per conversation, in order.

        With the prefix cache the rows decode together after their shared prefix (see ``qwen_decode``);
        otherwise one after another. A row gives the same tokens as ``stream`` on its conversation alone.

        Raises:
            EngineError: preparing a request or running the model failed.
        """
        if not conversations:
            return []
        if not self._acquire(stop):
            return [CANCELLED] * len(conversations)
        try:
            if stop.is_set():
                return [CANCELLED] * len(conversations)
            if self._cached is None:  # one by one, on the plain path
                results = []
                for messages in conversations:
                    if self._own_loop:
                        items = list(self._stream_decoder(self._batched, self._requests.prepare(messages), limit, stop, sampling))  # type: ignore[arg-type]
                    else:
                        items = list(self._stream_generate(self._requests.encode_or_fail(messages), limit, stop, sampling))
                    results.append(items[-1])
                return results
            requests = [self._requests.prepare(messages) for messages in conversations]
            return decode_batch(self._cached, requests, limit, stop, sampling, tokenizer=self.processor.tokenizer,
                                usage=self._usage, name=self.name)
        finally:
            self._lock.release()

    def prefill_system_prompts(self, texts: Sequence[str]) -> int:
        """Compute now, once, the KV caches of these system prompts; returns the tokens computed (0 without the
        prefix cache, and for prompts already cached).

        Raises:
            EngineError: the model failed.
        """
        if self._cached is None:
            return 0
        counters = DecodeCounters()
        with self._lock:
            for text in texts:
                request = self._requests.system_request(text)
                try:
                    with torch.inference_mode():
                        self._cached.ensure_prefix(request, len(request), True, counters)
                except Exception as exc:
                    raise EngineError("generate", exc) from exc
        self._usage.add_prefill(counters)
        return counters.prefill_tokens

    # ------------------------------------------------------------------ internals

    def _acquire(self, stop: threading.Event) -> bool:
        """Wait for the model; False when ``stop`` was set while waiting."""
        while not self._lock.acquire(timeout=_LOCK_POLL_SECONDS):
            if stop.is_set():
                return False
        return True

    def _stream_decoder(
        self, decoder: CachedDecoder, request: EncodedRequest, limit: int, stop: threading.Event, sampling: Sampling,
    ) -> Iterator[str | Decoded]:
        return stream_decoder(decoder, request, limit, stop, sampling, tokenizer=self.processor.tokenizer,
                              usage=self._usage, name=self.name)

    def _stream_generate(
        self, inputs: Any, limit: int, stop: threading.Event, sampling: Sampling
    ) -> Iterator[str | Decoded]:
        return stream_generate(self.model, inputs, limit, stop, sampling, tokenizer=self.processor.tokenizer,
                               eos_ids=self.eos_ids, usage=self._usage, name=self.name)


def _decoding_support(model: Any, processor: Any, sized: bool) -> CacheSupport:
    """What the model's cache allows (``probe_cache``), off as well when its generation config needs ``generate`` or
    its processor is not a Qwen-VL one (``sized`` False: no pixel bounds, so no request layout the decoder knows)."""
    support = probe_cache(model)
    if support.decoder and not supports_config(model.generation_config):
        return CacheSupport(False, support.hybrid, "the generation config asks for decoding rules only generate() has")
    if support.decoder and not sized:
        name = type(getattr(processor, "image_processor", processor)).__name__
        return CacheSupport(False, support.hybrid, f"its image processor ({name}) runs without pixel bounds (not a "
                                                   "Qwen-VL one): the cached decoder cannot lay out its requests")
    return support


def _end_and_pad_ids(model: Any, processor: Any) -> tuple[frozenset[int], int]:
    """The token ids that end a turn, and the id fed for rows that ended (generation config, else tokenizer)."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = processor.tokenizer.eos_token_id
    eos_ids: frozenset[int] = frozenset([eos] if isinstance(eos, int) else (eos or []))
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = processor.tokenizer.pad_token_id
    if pad is None:
        pad = min(eos_ids) if eos_ids else 0
    return eos_ids, int(pad)
