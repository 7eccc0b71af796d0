"""Qwen2.5-VL / Qwen3-VL (Instruct and Thinking) run in-process through Hugging Face ``transformers``.

One ``TransformersQwenVLM`` loads its model and processor once and serves every caller: a lock
lets one generation run at a time, and each call builds its own streamer and stopping criterion,
so concurrent users never see each other's tokens.

Speed (``prefix_cache=True``, the default): requests start from the longest prompt prefix already
computed (the system prompts, a run's raw image and query, an examine's raw image), kept in a
bounded per-model store keyed by token ids and image digests (``kv_prefix``), and
``generate_batch`` answers several conversations in one batch (``qwen_decode``). Greedy output is
token-identical to ``transformers``' ``generate``, which ``prefix_cache=False`` uses.
"""

from __future__ import annotations

import importlib.util
import logging
import queue
import threading
import time
from typing import Any, Callable, Generator, Iterator, Sequence

import torch

from ..errors import BackendError, InputError
from ..types import Generation, ImagePart, Message, TextPart
from .base import StreamItem
from ..engine.kv_prefix import (
    DEFAULT_PREFIX_CACHE_BYTES,
    DEFAULT_PREFIX_CACHE_ENTRIES,
    PrefixCacheStats,
    PrefixCacheStore,
)
from ..engine.qwen_decode import (
    CachedDecoder,
    DecodeCounters,
    EncodedRequest,
    RowResult,
    encode_request,
    supports_config,
)
from ..engine.qwen_inputs import PreprocessedImages, TextIds, encode_messages, to_chat
from .qwen_load import (
    DEFAULT_VLM_MODEL,  # noqa: F401  (re-exported: the model id users see)
    check_local_folder,
    generation_error_message,
    load_error_message,
)
from ..engine.usage import UsageCounter, VLMUsage

logger = logging.getLogger(__name__)

# Default bounds on an image's pixel count after resizing: Qwen's recommended range in the
# Qwen2-VL / Qwen2.5-VL model cards and qwen-vl-utils (min_pixels = 256*28*28, max_pixels =
# 1280*28*28), i.e. 256..1280 tokens of 28*28 px for Qwen2.5-VL and ~196..980 tokens of 32*32 px
# for Qwen3-VL. Released checkpoints allow far more (Qwen3-VL: 16.7 M px, over 16k tokens per image).
DEFAULT_MIN_PIXELS = 256 * 28 * 28
DEFAULT_MAX_PIXELS = 1280 * 28 * 28

_LOCK_POLL_SECONDS = 0.05  # how often a call waiting for the model checks its stop event


class TransformersQwenVLM:
    """A Qwen-VL chat model (``AutoModelForImageTextToText`` + ``AutoProcessor``) behind the ``VLM`` protocol.

    Build it with ``from_pretrained``. Decoding is greedy (deterministic). Text is returned as
    generated with special tokens removed; ``<think>``/``</think>`` are ordinary added tokens in
    Qwen's vocabulary and stay in the text.

    Attributes:
        name: the model id or folder it was loaded from.
        model: the loaded ``transformers`` model (eval mode).
        processor: the loaded processor (tokenizer, image processor, chat template).
        device: torch device string the model runs on (``"cuda"`` or ``"cpu"``...).
        image_size: image-processor pixel bounds used on every call:
            ``{"shortest_edge": min pixels, "longest_edge": max pixels}`` (pixels after resizing).
        max_new_tokens: default output-token limit of a call.
        prefix_store: the prefix KV caches of this model (``None`` when ``prefix_cache`` is off or
            the generation config needs ``generate``'s own decoding).

    Args:
        prefix_cache: reuse computed prompt prefixes across requests (see the module docstring).
        prefix_cache_entries / prefix_cache_bytes: bounds of the prefix store (entries, bytes of
            key/value tensors).
        record_output_ids: keep every request's generated token ids (``output_ids()``), for
            benchmarks and tests.

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
        image_size: dict[str, int],
        max_new_tokens: int = 1024,
        prefix_cache: bool = True,
        prefix_cache_entries: int = DEFAULT_PREFIX_CACHE_ENTRIES,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
        record_output_ids: bool = False,
    ) -> None:
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if prefix_cache_entries < 0 or prefix_cache_bytes < 0:
            raise InputError(
                f"prefix cache bounds must be >= 0, got {prefix_cache_entries} entries, {prefix_cache_bytes} bytes"
            )
        self.name = name
        self.model = model
        self.processor = processor
        self.device = device
        self.image_size = dict(image_size)
        self.max_new_tokens = max_new_tokens
        self._lock = threading.Lock()
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = processor.tokenizer.eos_token_id
        self._eos_ids: frozenset[int] = frozenset([eos] if isinstance(eos, int) else (eos or []))
        pad = model.generation_config.pad_token_id
        if pad is None:
            pad = processor.tokenizer.pad_token_id
        if pad is None:
            pad = min(self._eos_ids) if self._eos_ids else 0
        exact = supports_config(model.generation_config)
        self.prefix_store = (
            PrefixCacheStore(prefix_cache_entries, prefix_cache_bytes) if prefix_cache and exact else None
        )
        self._cached = CachedDecoder(model, self.prefix_store, self._eos_ids, int(pad)) if self.prefix_store else None
        self._batched = CachedDecoder(model, None, self._eos_ids, int(pad)) if exact else None
        self._image_token_id = int(model.config.image_token_id)
        self._images = PreprocessedImages()  # each distinct image is preprocessed once (cached path)
        self._texts = TextIds()  # each distinct text piece is tokenized once (cached path)
        self._system_ids: dict[str, list[int]] = {}  # system prompt text -> ids of its rendered turn
        self._usage = UsageCounter(record_output_ids)

    @classmethod
    def from_pretrained(
        cls,
        model_id: str,
        *,
        device: str | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_new_tokens: int = 1024,
        prefix_cache: bool = True,
        prefix_cache_entries: int = DEFAULT_PREFIX_CACHE_ENTRIES,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
    ) -> "TransformersQwenVLM":
        """Load a Qwen2.5-VL or Qwen3-VL checkpoint (Hub id or local folder) once.

        Args:
            model_id: Hub repository id (e.g. ``DEFAULT_VLM_MODEL``) or path of a saved folder.
            device: torch device; ``None`` picks ``"cuda"`` (bfloat16) when available, else
                ``"cpu"`` (float32).
            min_pixels / max_pixels: bounds on an image's pixel count after resizing (the image
                processor's ``size["shortest_edge"]`` / ``size["longest_edge"]``); each image
                token covers ``(patch_size * merge_size)**2`` pixels (28*28 for Qwen2.5-VL,
                32*32 for Qwen3-VL), so ``max_pixels`` bounds the image tokens. ``None``: the
                tighter of the checkpoint's bound and ``DEFAULT_MIN_PIXELS`` / ``DEFAULT_MAX_PIXELS``
                (never more image tokens than either allows); an unset minimum never exceeds the maximum.
            max_new_tokens: default output-token limit of a call.
            prefix_cache / prefix_cache_entries / prefix_cache_bytes: see the class.

        Raises:
            BackendError: the folder does not exist or holds no model, the repository cannot be
                found or downloaded (gated, offline, no network), or the model does not fit.
            InputError: ``min_pixels`` > ``max_pixels``, or a bound below 1 (a ``ValueError``).
        """
        from transformers import AutoModelForImageTextToText, AutoProcessor

        for label, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels)):
            if value is not None and value < 1:
                raise InputError(f"{label} must be a positive pixel count, got {value}")
        check_local_folder(model_id)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        started = time.perf_counter()
        try:
            processor = AutoProcessor.from_pretrained(model_id)
        except (OSError, ValueError) as exc:
            raise BackendError(load_error_message(model_id, device, exc)) from exc
        image_size = default_image_size(processor.image_processor.size, min_pixels, max_pixels)
        if image_size["shortest_edge"] > image_size["longest_edge"]:
            raise InputError(
                f"min_pixels ({image_size['shortest_edge']}) is larger than max_pixels "
                f"({image_size['longest_edge']}) for {model_id}: lower min_pixels or raise max_pixels"
            )
        try:
            # With accelerate installed the weights load straight onto the device; else via CPU memory.
            placement = {"device_map": device} if importlib.util.find_spec("accelerate") else {}
            model = AutoModelForImageTextToText.from_pretrained(model_id, dtype=dtype, **placement)
            if not placement:
                model = model.to(device)
        except (OSError, ValueError, RuntimeError, AssertionError) as exc:
            raise BackendError(load_error_message(model_id, device, exc)) from exc
        model.eval()
        logger.info(
            "loaded VLM %s on %s (%s) in %.1f s; image pixels %s",
            model_id, device, dtype, time.perf_counter() - started, image_size,
        )
        return cls(
            model_id, model, processor, device=device, image_size=image_size, max_new_tokens=max_new_tokens,
            prefix_cache=prefix_cache, prefix_cache_entries=prefix_cache_entries,
            prefix_cache_bytes=prefix_cache_bytes,
        )

    # ------------------------------------------------------------------ counters

    def usage(self) -> VLMUsage:
        """Work done since construction (or ``reset_usage``)."""
        return self._usage.snapshot()

    def reset_usage(self) -> None:
        """Zero the counters and forget recorded output ids."""
        self._usage.reset()

    def output_ids(self) -> list[tuple[int, ...]]:
        """Generated token ids of every request since the last reset, in completion order (rows of a
        batch in order); empty unless built with ``record_output_ids=True``."""
        return self._usage.outputs()

    def clear_caches(self) -> None:
        """Forget every cached prompt prefix (pinned system prompts included) and preprocessed image."""
        if self.prefix_store is not None:
            self.prefix_store.clear()
        self._images.clear()
        self._texts.clear()

    def prefix_cache_stats(self) -> PrefixCacheStats | None:
        """Entries, pinned entries and bytes of the prefix store, or ``None`` when it is off."""
        return self.prefix_store.stats() if self.prefix_store is not None else None

    # ------------------------------------------------------------------ prompts

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The prompt text the chat template makes of ``messages`` (with the generation prompt).

        Each image appears as the template's single placeholder (not yet expanded to its tokens).
        """
        return self.processor.apply_chat_template(to_chat(messages), add_generation_prompt=True, tokenize=False)

    def encode(self, messages: Sequence[Message]) -> Any:
        """Tokenize ``messages`` and preprocess their images for ``generate``.

        Returns:
            A ``BatchFeature`` on ``self.device``: ``input_ids`` int64 (1, T) with each image expanded
            to its tokens, ``attention_mask``, and for images ``pixel_values`` float
            (patches, channels * temporal_patch * patch * patch) and ``image_grid_thw`` int64 (I, 3).
        """
        inputs = self.processor.apply_chat_template(
            to_chat(messages),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            processor_kwargs={"images_kwargs": {"size": dict(self.image_size)}},
        )
        return inputs.to(self.device)

    # ------------------------------------------------------------------ generation

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[StreamItem]:
        """Generate greedily the reply to ``messages``; yield text pieces, then one ``Generation``.

        The pieces concatenate to ``Generation.text``. ``finish_reason`` is ``"cancelled"`` when
        ``stop`` was set (before or during generation), ``"length"`` when ``max_new_tokens`` tokens
        were generated without an end-of-turn token, else ``"stop"``. ``prompt_tokens`` counts text
        and image tokens; ``output_tokens`` counts generated tokens including the end-of-turn token.
        Callers wait for each other (one request at a time); a caller whose ``stop`` is set before
        its turn gets ``Generation("", "cancelled", None, 0)`` without any model work.

        Raises:
            BackendError: preprocessing or generation failed (out of memory, device error...).
            InputError: ``max_new_tokens`` below 1 (a ``ValueError``).
        """
        limit = self._limit(max_new_tokens)
        stop = stop if stop is not None else threading.Event()
        # One lock around preprocessing and generation: the model and its tokenizer are shared.
        if not self._acquire(stop):
            yield Generation("", "cancelled", None, 0)
            return
        try:
            if stop.is_set():
                yield Generation("", "cancelled", None, 0)
                return
            if self._cached is not None:
                request = self._prepare(messages)
                yield from self._stream_cached(request, limit, stop)
                return
            inputs = self._encode_or_fail(messages)
            yield from self._generate_locked(inputs, int(inputs["input_ids"].shape[1]), limit, stop)
        finally:
            self._lock.release()

    def generate_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> list[Generation]:
        """Answer several independent conversations in one batch; one ``Generation`` per conversation, in order.

        Greedy outputs equal those of ``stream`` on each conversation alone. Each prompt runs on its
        own after the prefix they share (with ``prefix_cache`` that prefix is run once and kept for
        later batches); the rows then decode together, one step for all (see ``qwen_decode``). When
        ``stop`` is set, unfinished rows end with ``finish_reason="cancelled"`` (all rows, with empty
        text, when set before the model started).

        Raises:
            BackendError: preprocessing or generation failed.
            InputError: ``max_new_tokens`` below 1.
        """
        limit = self._limit(max_new_tokens)
        stop = stop if stop is not None else threading.Event()
        if not conversations:
            return []
        cancelled = [Generation("", "cancelled", None, 0) for _ in conversations]
        if not self._acquire(stop):
            return cancelled
        try:
            if stop.is_set():
                return cancelled
            decoder = self._cached or self._batched
            if decoder is None:  # the generation config needs generate(): one by one
                results = []
                for messages in conversations:
                    inputs = self._encode_or_fail(messages)
                    items = list(self._generate_locked(inputs, int(inputs["input_ids"].shape[1]), limit, stop))
                    results.append(items[-1])
                return results
            requests = [self._prepare(messages) for messages in conversations]
            collectors = [_PieceCollector(self.processor.tokenizer) for _ in requests]
            counters = DecodeCounters()
            started = time.perf_counter()
            rows = self._drive(decoder, requests, limit, stop, counters, collectors)
            for collector in collectors:
                collector.finish()
            results = [
                Generation(collector.text(), _finish(row, limit), len(request), len(row.output_ids))
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

    # ------------------------------------------------------------------ cached decoding (lock held)

    def _limit(self, max_new_tokens: int | None) -> int:
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if limit < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {limit}")
        return limit

    def _encode_or_fail(self, messages: Sequence[Message]) -> Any:
        try:
            return self.encode(messages)
        except (ValueError, TypeError, RuntimeError) as exc:
            raise BackendError(f"{self.name}: could not prepare the request for the model: {exc}") from exc

    def _acquire(self, stop: threading.Event) -> bool:
        """Wait for the model; False when ``stop`` was set while waiting."""
        while not self._lock.acquire(timeout=_LOCK_POLL_SECONDS):
            if stop.is_set():
                return False
        return True

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
            raise BackendError(f"{self.name}: could not prepare the request for the model: {exc}") from exc

    def prefill_system_prompts(self, texts: Sequence[str]) -> int:
        """Compute now, once for this model, the KV caches of these system prompts (e.g. at start-up).

        Requests starting with one of them then run only the tokens after it. Does nothing when
        ``prefix_cache`` is off. Returns the number of tokens computed (0 for prompts already cached).

        Raises:
            BackendError: the model failed.
        """
        if self._cached is None:
            return 0
        counters = DecodeCounters()
        with self._lock:
            for text in texts:
                messages = [Message("system", (TextPart(text),))]
                ids = self._system_turn_ids(messages[0])
                inputs = {
                    "input_ids": torch.tensor([ids], device=self.device),
                    "mm_token_type_ids": torch.zeros((1, len(ids)), dtype=torch.int32, device=self.device),
                }
                request = encode_request(self.model, inputs, [], self._image_token_id, len(ids))
                try:
                    with torch.inference_mode():
                        self._cached.ensure_prefix(request, len(ids), True, counters)
                except Exception as exc:
                    raise BackendError(generation_error_message(self.name, exc)) from exc
        self._usage.add_prefill(counters)
        return counters.prefill_tokens

    def _system_turn_ids(self, message: Message) -> list[int]:
        """Token ids of a system message rendered as the first turn (remembered per text)."""
        text = message.text
        ids = self._system_ids.get(text)
        if ids is None:
            rendered = self.processor.apply_chat_template(to_chat([message]), add_generation_prompt=False, tokenize=False)
            ids = list(self.processor.tokenizer(rendered, add_special_tokens=False)["input_ids"])
            if len(self._system_ids) >= _SYSTEM_MEMO_SIZE:
                self._system_ids.pop(next(iter(self._system_ids)))
            self._system_ids[text] = ids
        return ids

    def _system_length(self, messages: Sequence[Message], input_ids: torch.Tensor) -> int:
        """Tokens of the leading system turn when the request starts with exactly them, else 0."""
        if not messages or messages[0].role != "system" or messages[0].images:
            return 0
        ids = self._system_turn_ids(messages[0])
        n = len(ids)
        if n == 0 or n >= int(input_ids.shape[0]) or input_ids[:n].tolist() != ids:
            return 0
        return n

    def _drive(
        self,
        decoder: CachedDecoder,
        requests: list[EncodedRequest],
        limit: int,
        stop: threading.Event,
        counters: DecodeCounters,
        collectors: list["_PieceCollector"],
    ) -> list[RowResult]:
        """Run ``decoder`` to the end in a worker thread (as ``generate`` runs), feeding each row's collector."""
        outcome: dict[str, Any] = {}

        def feed(emitted: list[int | None]) -> None:
            for token, collector in zip(emitted, collectors):
                if token is not None:
                    collector.add(token)

        def work() -> None:
            _consume(lambda: decoder.run(requests, limit, stop, counters), feed, outcome)

        worker = threading.Thread(target=work, name=f"decode[{self.name}]", daemon=True)
        worker.start()
        worker.join()
        if "error" in outcome:
            raise BackendError(generation_error_message(self.name, outcome["error"])) from outcome["error"]
        return outcome["rows"]

    def _stream_cached(self, request: EncodedRequest, limit: int, stop: threading.Event) -> Iterator[StreamItem]:
        """Decode one request with prefix reuse in a worker thread (as ``generate`` runs), relaying text
        pieces as tokens come, then the ``Generation``."""
        collector = _PieceCollector(self.processor.tokenizer)
        counters = DecodeCounters()
        started = time.perf_counter()
        tokens: queue.Queue[int | None] = queue.Queue()
        abandoned = threading.Event()  # set when the consumer stops iterating early
        halt = _EitherEvent(stop, abandoned)
        outcome: dict[str, Any] = {}

        def relay(emitted: list[int | None]) -> None:
            if emitted[0] is not None:
                tokens.put(emitted[0])

        def work() -> None:
            try:
                _consume(lambda: self._cached.run([request], limit, halt, counters), relay, outcome)  # type: ignore[union-attr]
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
            raise BackendError(generation_error_message(self.name, outcome["error"])) from outcome["error"]
        yield from collector.finish()
        row = outcome["rows"][0]
        self._usage.add(counters, [request], outcome["rows"])
        logger.debug(
            "%s: %d prompt tokens (%d run) + %d output tokens in %.2f s",
            self.name, len(request), counters.prefill_tokens, len(row.output_ids), time.perf_counter() - started,
        )
        yield Generation(collector.text(), _finish(row, limit), len(request), len(row.output_ids))

    def _generate_locked(
        self, inputs: Any, prompt_tokens: int, limit: int, stop: threading.Event
    ) -> Iterator[StreamItem]:
        """Run ``generate`` in a thread and relay its streamer; the caller holds the lock."""
        from transformers import StoppingCriteriaList, TextIteratorStreamer

        streamer = TextIteratorStreamer(self.processor.tokenizer, skip_prompt=True, skip_special_tokens=True)
        abandoned = threading.Event()  # set when the consumer stops iterating early
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                with torch.inference_mode():
                    outcome["sequences"] = self.model.generate(
                        **inputs,
                        streamer=streamer,
                        max_new_tokens=limit,
                        do_sample=False,
                        temperature=None,  # unset the checkpoint's sampling defaults: greedy decoding
                        top_p=None,
                        top_k=None,
                        stopping_criteria=StoppingCriteriaList([_EventStopper(stop, abandoned)]),
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
            raise BackendError(generation_error_message(self.name, outcome["error"])) from outcome["error"]

        new_tokens = outcome["sequences"][0, prompt_tokens:]
        output_tokens = int(new_tokens.shape[0])
        ended_by_eos = output_tokens > 0 and int(new_tokens[-1]) in self._eos_ids
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
        yield Generation("".join(pieces), finish, prompt_tokens, output_tokens)


def _consume(
    start: Callable[[], Generator[list[int | None], None, list[RowResult]]],
    on_step: Callable[[list[int | None]], None],
    outcome: dict[str, Any],
) -> None:
    """Run a ``CachedDecoder.run`` generator to its end under ``torch.inference_mode`` (in a worker thread),
    handing each step's tokens to ``on_step``; leaves ``outcome["rows"]``, or ``outcome["error"]`` for the caller's
    thread to re-raise."""
    try:
        with torch.inference_mode():
            steps = start()
            while True:
                try:
                    emitted = next(steps)
                except StopIteration as done:
                    outcome["rows"] = done.value
                    return
                on_step(emitted)
    except BaseException as exc:  # re-raised in the caller's thread
        outcome["error"] = exc


class _EitherEvent:
    """Looks like a ``threading.Event`` that is set when either of two events is."""

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        self._events = (first, second)

    def is_set(self) -> bool:
        return any(event.is_set() for event in self._events)


_SYSTEM_MEMO_SIZE = 8  # distinct system prompts whose token ids are remembered


def default_image_size(current: Any, min_pixels: int | None, max_pixels: int | None) -> dict[str, int]:
    """The pixel bounds to use: given values, else the tighter of the checkpoint's and the defaults.

    Args:
        current: the image processor's ``size`` (``shortest_edge`` / ``longest_edge`` in pixels, or unset).
        min_pixels / max_pixels: bounds asked for, or ``None``.

    Returns:
        ``{"shortest_edge": min pixels, "longest_edge": max pixels}``. An unset minimum is lowered
        to the maximum when it would exceed it.
    """
    checkpoint_min = getattr(current, "shortest_edge", None)
    checkpoint_max = getattr(current, "longest_edge", None)
    if max_pixels is None:
        max_pixels = DEFAULT_MAX_PIXELS if checkpoint_max is None else min(int(checkpoint_max), DEFAULT_MAX_PIXELS)
    if min_pixels is None:
        min_pixels = DEFAULT_MIN_PIXELS if checkpoint_min is None else min(int(checkpoint_min), DEFAULT_MIN_PIXELS)
        min_pixels = min(min_pixels, max_pixels)
    return {"shortest_edge": int(min_pixels), "longest_edge": int(max_pixels)}


class _PieceCollector:
    """Turns tokens into the text pieces ``TextIteratorStreamer`` would produce (same chunking, specials skipped)."""

    def __init__(self, tokenizer: Any) -> None:
        from transformers import TextStreamer

        pieces: list[str] = []

        class _Streamer(TextStreamer):
            def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
                if text:
                    pieces.append(text)

        self._streamer = _Streamer(tokenizer, skip_prompt=False, skip_special_tokens=True)
        self._pieces = pieces
        self._given = 0

    def _new(self) -> list[str]:
        fresh = self._pieces[self._given :]
        self._given = len(self._pieces)
        return fresh

    def add(self, token: int) -> list[str]:
        """Feed one token; returns the pieces it completed."""
        self._streamer.put(torch.tensor([token]))
        return self._new()

    def finish(self) -> list[str]:
        """Flush the text held back; returns the last pieces."""
        self._streamer.end()
        return self._new()

    def text(self) -> str:
        """All text so far (after ``finish``: the whole output)."""
        return "".join(self._pieces)


def _finish(row: RowResult, limit: int) -> str:
    """``Generation.finish_reason`` of a decoded row, with ``stream``'s precedence: stop, length, cancelled."""
    if row.finish_reason == "stop":
        return "stop"
    if len(row.output_ids) >= limit:
        return "length"
    return row.finish_reason


class _EventStopper:
    """Stopping criterion: ends generation once the user's ``stop`` or the internal ``abandoned`` is set."""

    def __init__(self, stop: threading.Event, abandoned: threading.Event) -> None:
        self._stop = stop
        self._abandoned = abandoned

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        done = self._stop.is_set() or self._abandoned.is_set()
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)
