"""One loaded Qwen-VL model's inference: request encoding, prefix reuse, batching, decoding, usage counters.

``QwenEngine`` is the engine's narrow interface. It takes conversations (``messages.Message`` s) and returns
text: ``stream`` yields text pieces then one ``Decoded``; ``generate_batch`` answers several conversations
together; ``prefill_system_prompts`` computes system-prompt caches ahead of time. A lock lets one request
use the model at a time; each request has its own streamer, sampler and stop check, so concurrent callers
never see each other's tokens.

Two decoding paths, chosen at construction:
- ``prefix_cache=True``: ``qwen_decode.CachedDecoder`` starts each request from the longest prompt prefix
  already computed (``kv_prefix``) and decodes batches together.
- ``prefix_cache=False``: ``transformers``' ``generate``, one request at a time: the reference the
  conformance tests compare the fast path with.
Both choose tokens through ``sampling.TokenChooser`` (greedy, or seeded sampling), so both give the same
tokens for the same request and settings (verified on CPU in float32: tests/test_engine_conformance.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ..messages import ImagePart, Message, TextPart
from . import check_transformers_version
from .kv_prefix import DEFAULT_PREFIX_CACHE_BYTES, DEFAULT_PREFIX_CACHE_ENTRIES, PrefixCacheStats, PrefixCacheStore
from .qwen_decode import CachedDecoder, DecodeCounters, EncodedRequest, RowResult, encode_request, supports_config
from .qwen_inputs import PreprocessedImages, TextIds, encode_messages, to_chat
from .sampling import GREEDY, SampleAsLogits, Sampling, TokenChooser
from .usage import UsageCounter, VLMUsage
from .workers import EitherEvent, EventStopper, PieceCollector, consume_steps, row_finish

logger = logging.getLogger(__name__)

_LOCK_POLL_SECONDS = 0.05  # how often a call waiting for the model checks its stop event
_SYSTEM_MEMO_SIZE = 8  # distinct system prompts whose token ids are remembered


@dataclass(frozen=True)
class Decoded:
    """The outcome of one request.

    Attributes:
        text: generated text, special tokens removed.
        finish_reason: ``"stop"`` (an end-of-turn token), ``"length"`` (the token limit) or ``"cancelled"``.
        prompt_tokens: tokens in the request (text and image tokens); ``None`` when cancelled before encoding.
        output_tokens: tokens generated, the end-of-turn token included.
    """

    text: str
    finish_reason: str
    prompt_tokens: int | None
    output_tokens: int


CANCELLED = Decoded("", "cancelled", None, 0)


class EngineError(RuntimeError):
    """The model failed on a request (``cause`` holds what it raised; the caller words the message)."""

    def __init__(self, stage: Literal["prepare", "generate"], cause: BaseException) -> None:
        super().__init__(f"{stage}: {cause}")
        self.stage = stage
        self.cause = cause


class QwenEngine:
    """Inference for one loaded ``Qwen2_5_VLForConditionalGeneration`` / ``Qwen3VLForConditionalGeneration``.

    Args:
        name: model id or folder (for logs).
        model / processor: the loaded model (eval mode) and its processor.
        device: torch device string the model is on.
        image_size: pixel bounds given to the image processor (``{"shortest_edge", "longest_edge"}``, pixels).
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
        image_size: dict[str, int],
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
        self.image_size = dict(image_size)
        self._lock = threading.Lock()
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = processor.tokenizer.eos_token_id
        self.eos_ids: frozenset[int] = frozenset([eos] if isinstance(eos, int) else (eos or []))
        pad = model.generation_config.pad_token_id
        if pad is None:
            pad = processor.tokenizer.pad_token_id
        if pad is None:
            pad = min(self.eos_ids) if self.eos_ids else 0
        exact = supports_config(model.generation_config)
        self.prefix_store = (
            PrefixCacheStore(prefix_cache_entries, prefix_cache_bytes) if prefix_cache and exact else None
        )
        self._cached = CachedDecoder(model, self.prefix_store, self.eos_ids, int(pad)) if self.prefix_store else None
        self._batched = CachedDecoder(model, None, self.eos_ids, int(pad)) if exact else None
        self._own_loop = plain_loop == "own_loop" and self._batched is not None
        self._image_token_id = int(model.config.image_token_id)
        self._images = PreprocessedImages()  # each distinct image is preprocessed once (decoder paths)
        self._texts = TextIds()  # each distinct text piece is tokenized once (decoder paths)
        self._system_ids: dict[str, list[int]] = {}  # system prompt text -> ids of its rendered turn
        self._usage = UsageCounter(record_output_ids)

    # ------------------------------------------------------------------ counters and caches

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
        self._images.clear()
        self._texts.clear()

    def prefix_cache_stats(self) -> PrefixCacheStats | None:
        """Entries, pinned entries and bytes of the prefix store, or ``None`` when it is off."""
        return self.prefix_store.stats() if self.prefix_store is not None else None

    # ------------------------------------------------------------------ prompts

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The prompt text the chat template makes of ``messages`` (with the generation prompt)."""
        return self.processor.apply_chat_template(to_chat(messages), add_generation_prompt=True, tokenize=False)

    def opens_thinking(self) -> bool:
        """True when the chat template's generation prompt opens ``<think>`` (a Thinking model)."""
        probe = self.render_prompt([Message("user", (TextPart("x"),))])
        return probe.rstrip().endswith("<think>")

    def encode(self, messages: Sequence[Message]) -> Any:
        """The processor's encoding of ``messages`` for ``generate`` (``input_ids`` int64 (1, T), attention mask,
        ``pixel_values`` and ``image_grid_thw`` int64 (I, 3) for images) on ``self.device``."""
        inputs = self.processor.apply_chat_template(
            to_chat(messages),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            processor_kwargs={"images_kwargs": {"size": dict(self.image_size)}},
        )
        return inputs.to(self.device)

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
                yield from self._stream_decoder(decoder, self._prepare(messages), limit, stop, sampling)  # type: ignore[arg-type]
                return
            inputs = self._encode_or_fail(messages)
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
                        items = list(self._stream_decoder(self._batched, self._prepare(messages), limit, stop, sampling))  # type: ignore[arg-type]
                    else:
                        items = list(self._stream_generate(self._encode_or_fail(messages), limit, stop, sampling))
                    results.append(items[-1])
                return results
            requests = [self._prepare(messages) for messages in conversations]
            collectors = [PieceCollector(self.processor.tokenizer) for _ in requests]
            counters = DecodeCounters()
            started = time.perf_counter()
            rows = self._drive(self._cached, requests, limit, stop, counters, collectors, sampling)
            for collector in collectors:
                collector.finish()
            results = [
                Decoded(collector.text(), row_finish(row, limit), len(request), len(row.output_ids))
                for request, row, collector in zip(requests, rows, collectors)
            ]
            self._usage.add(counters, requests, rows)
            logger.debug(
                "%s: batch of %d, %d prompt tokens (%d run) in %.2f s",
                self.name, len(requests), sum(len(r) for r in requests), counters.prefill_tokens,
                time.perf_counter() - started,
            )
            return results
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
                ids = self.system_turn_ids(text)
                inputs = {
                    "input_ids": torch.tensor([ids], device=self.device),
                    "mm_token_type_ids": torch.zeros((1, len(ids)), dtype=torch.int32, device=self.device),
                }
                request = encode_request(self.model, inputs, [], self._image_token_id, len(ids))
                try:
                    with torch.inference_mode():
                        self._cached.ensure_prefix(request, len(ids), True, counters)
                except Exception as exc:
                    raise EngineError("generate", exc) from exc
        self._usage.add_prefill(counters)
        return counters.prefill_tokens

    def system_turn_ids(self, text: str) -> list[int]:
        """Token ids of a system message with ``text`` rendered as the first turn (remembered per text)."""
        ids = self._system_ids.get(text)
        if ids is None:
            message = Message("system", (TextPart(text),))
            rendered = self.processor.apply_chat_template(to_chat([message]), add_generation_prompt=False, tokenize=False)
            ids = list(self.processor.tokenizer(rendered, add_special_tokens=False)["input_ids"])
            if len(self._system_ids) >= _SYSTEM_MEMO_SIZE:
                self._system_ids.pop(next(iter(self._system_ids)))
            self._system_ids[text] = ids
        return ids

    # ------------------------------------------------------------------ internals (lock held)

    def _acquire(self, stop: threading.Event) -> bool:
        """Wait for the model; False when ``stop`` was set while waiting."""
        while not self._lock.acquire(timeout=_LOCK_POLL_SECONDS):
            if stop.is_set():
                return False
        return True

    def _encode_or_fail(self, messages: Sequence[Message]) -> Any:
        try:
            return self.encode(messages)
        except (ValueError, TypeError, RuntimeError) as exc:
            raise EngineError("prepare", exc) from exc

    def _prepare(self, messages: Sequence[Message]) -> EncodedRequest:
        """Tokenize ``messages`` (each distinct image preprocessed once) and describe them for ``CachedDecoder``."""
        try:
            parts = [part for message in messages for part in message.parts if isinstance(part, ImagePart)]
            images = [part.image for part in parts]
            digests = [part.digest for part in parts]
            encoded = encode_messages(
                self.processor, to_chat(messages), images, self.image_size, self._images, digests, self._texts
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
        except (ValueError, TypeError, RuntimeError) as exc:
            raise EngineError("prepare", exc) from exc

    def _system_length(self, messages: Sequence[Message], input_ids: torch.Tensor) -> int:
        """Tokens of the leading system turn when the request starts with exactly them, else 0."""
        if not messages or messages[0].role != "system" or messages[0].images:
            return 0
        ids = self.system_turn_ids(messages[0].text)
        n = len(ids)
        if n == 0 or n >= int(input_ids.shape[0]) or input_ids[:n].tolist() != ids:
            return 0
        return n

    def _drive(
        self, decoder: CachedDecoder, requests: list[EncodedRequest], limit: int, stop: threading.Event,
        counters: DecodeCounters, collectors: list[PieceCollector], sampling: Sampling,
    ) -> list[RowResult]:
        """Run ``decoder`` to the end in a worker thread (as ``generate`` runs), feeding each row's collector."""
        outcome: dict[str, Any] = {}

        def feed(emitted: list[int | None]) -> None:
            for token, collector in zip(emitted, collectors):
                if token is not None:
                    collector.add(token)

        def work() -> None:
            consume_steps(lambda: decoder.run(requests, limit, stop, counters, sampling), feed, outcome)

        worker = threading.Thread(target=work, name=f"decode[{self.name}]", daemon=True)
        worker.start()
        worker.join()
        if "error" in outcome:
            raise EngineError("generate", outcome["error"]) from outcome["error"]
        return outcome["rows"]

    def _stream_decoder(
        self, decoder: CachedDecoder, request: EncodedRequest, limit: int, stop: threading.Event, sampling: Sampling,
    ) -> Iterator[str | Decoded]:
        """Decode one request in a worker thread, relaying text pieces as tokens come, then its ``Decoded``."""
        collector = PieceCollector(self.processor.tokenizer)
        counters = DecodeCounters()
        started = time.perf_counter()
        tokens: queue.Queue[int | None] = queue.Queue()
        abandoned = threading.Event()  # set when the consumer stops iterating early
        halt = EitherEvent(stop, abandoned)
        outcome: dict[str, Any] = {}

        def relay(emitted: list[int | None]) -> None:
            if emitted[0] is not None:
                tokens.put(emitted[0])

        def work() -> None:
            try:
                consume_steps(lambda: decoder.run([request], limit, halt, counters, sampling), relay, outcome)
            finally:
                tokens.put(None)

        worker = threading.Thread(target=work, name=f"decode[{self.name}]", daemon=True)
        worker.start()
        try:
            while (token := tokens.get()) is not None:
                yield from collector.add(token)
        finally:
            abandoned.set()  # no-op when decoding already ended; stops it when the consumer left early
            worker.join()
        if "error" in outcome:
            raise EngineError("generate", outcome["error"]) from outcome["error"]
        yield from collector.finish()
        row = outcome["rows"][0]
        self._usage.add(counters, [request], outcome["rows"])
        logger.debug(
            "%s: %d prompt tokens (%d run) + %d output tokens in %.2f s",
            self.name, len(request), counters.prefill_tokens, len(row.output_ids), time.perf_counter() - started,
        )
        yield Decoded(collector.text(), row_finish(row, limit), len(request), len(row.output_ids))

    def _stream_generate(
        self, inputs: Any, limit: int, stop: threading.Event, sampling: Sampling
    ) -> Iterator[str | Decoded]:
        """Run ``generate`` in a worker thread and relay its streamer, then the ``Decoded``."""
        from transformers import LogitsProcessorList, StoppingCriteriaList, TextIteratorStreamer

        prompt_tokens = int(inputs["input_ids"].shape[1])
        streamer = TextIteratorStreamer(self.processor.tokenizer, skip_prompt=True, skip_special_tokens=True)
        abandoned = threading.Event()  # set when the consumer stops iterating early
        outcome: dict[str, Any] = {}
        processors = LogitsProcessorList()
        if sampling.do_sample:  # the same seeded choice as the decoder path; greedy then picks it
            processors.append(SampleAsLogits(TokenChooser(sampling, inputs["input_ids"][0].tolist())))

        def run() -> None:
            try:
                with torch.inference_mode():
                    outcome["sequences"] = self.model.generate(
                        **inputs,
                        streamer=streamer,
                        max_new_tokens=limit,
                        do_sample=False,
                        temperature=None,  # the checkpoint's sampling values are applied by SampleAsLogits
                        top_p=None,
                        top_k=None,
                        logits_processor=processors,
                        tokenizer=self.processor.tokenizer,  # for stop strings a generation config may set
                        stopping_criteria=StoppingCriteriaList([EventStopper(stop, abandoned)]),
                    )
            except BaseException as exc:  # re-raised in the caller's thread
                outcome["error"] = exc
                streamer.end()  # release the consumer waiting on the queue

        worker = threading.Thread(target=run, name=f"generate[{self.name}]", daemon=True)
        started = time.perf_counter()
        worker.start()
        pieces: list[str] = []
        try:
            for piece in streamer:
                if piece:
                    pieces.append(piece)
                    yield piece
        finally:
            abandoned.set()  # no-op when generation already ended; stops it when the consumer left early
            worker.join()
        if "error" in outcome:
            raise EngineError("generate", outcome["error"]) from outcome["error"]

        new_tokens = outcome["sequences"][0, prompt_tokens:]
        output_tokens = int(new_tokens.shape[0])
        ended_by_eos = output_tokens > 0 and int(new_tokens[-1]) in self.eos_ids
        if ended_by_eos:
            finish = "stop"
        elif output_tokens >= limit:
            finish = "length"
        elif stop.is_set():
            finish = "cancelled"
        else:
            finish = "stop"  # ended by a limit of the model's own generation config
        grid = inputs.get("image_grid_thw")
        self._usage.add_plain(prompt_tokens, 0 if grid is None else int(grid.shape[0]), new_tokens.tolist())
        logger.debug(
            "%s: %d prompt + %d output tokens in %.2f s (%s)",
            self.name, prompt_tokens, output_tokens, time.perf_counter() - started, finish,
        )
        yield Decoded("".join(pieces), finish, prompt_tokens, output_tokens)
