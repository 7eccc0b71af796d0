"""Decoding of Qwen2.5-VL / Qwen3-VL that reuses prompt-prefix KV caches and runs requests in batches.

``transformers``' ``generate`` recomputes a whole prompt on every call. ``CachedDecoder`` runs the
model's forward itself: it starts each request from the longest prefix it shares with an entry of
a ``PrefixCacheStore`` (system prompt, raw image, query...), runs only the rest of the prompt, and
decodes (greedy or seeded sampling, ``sampling.TokenChooser``); several requests run as one batch after
their common prefix.

Why this is hand-written rather than ``generate`` (5.24):
- ``generate`` can continue from a copied prefix cache only when the prefix holds no image: with an image
  in the prefix it feeds every image's pixels again while running only the uncached tokens ("Image
  features and image tokens do not match"), and passing only the new images breaks its 3-D position
  index, which needs every image's grid. Every request of a run after its first has the raw image in its
  reusable prefix (tests/test_engine_conformance.py keeps checking that this still fails).
- Left-padded batched ``generate`` pads every row in front of its whole prompt, so the rows cannot start
  from one shared prefix: each row would run the system prompt and raw image again (the benchmark counts
  the prompt tokens this saves).
- The decode loop itself: the benchmark's ablation row ("own decode loop, no cache") measures what it
  gains or loses against ``generate`` on its own.

Hybrid models (Qwen3.5's linear-attention layers, ``cache_support``) run the same way; their stored prefixes are
snapshots reused only whole (the store is built with ``whole_entries=True``), and their rows need no padding.
So that a run's next round still starts after its raw image and query, a single request of a hybrid model also
keeps a snapshot where its last turn opens (its last ``turn_start_id``, ``<|im_start|>``): the next round's
request repeats everything before it.

Two things make this exact:
- Qwen-VL's rotary positions are 3-D (mrope): image tokens take (t, h, w) grid positions and the
  text after an image continues from the image's largest position, so a token's position is not
  its index. The positions of a whole request are computed with the model's own
  ``get_rope_index`` and sliced for the part that is run; a generated token at index ``t`` sits at
  ``t + delta`` (``delta`` from ``get_rope_index``), which is what ``generate`` uses too.
- Batched rows keep each request's own positions. Each row's prompt runs on its own (after the
  shared prefix), so no padding is ever computed; the rows' caches are then laid side by side with
  their different suffix lengths padded on the left of the suffix (zeros, masked out by the
  attention mask) and decoded together. Prefill already keeps the hardware busy with one row
  (many tokens per weight read), so batching it saves little, computes the padding of shorter rows
  and multiplies activation memory by the batch size (on a CPU the larger activations also fall out
  of cache: the benchmark's 6 verification suffixes of 522 tokens took 2.5 s row by row and 3.1-3.7 s
  as one batch on the 2-core dev machine); a decode step reads every weight for one token, so running
  the rows' steps together is where batching pays.

Token choices equal ``generate``'s, including the generation config's repetition penalty (the only logits
processor Qwen's configs use) and seeded sampling (``sampling.SampleAsLogits`` makes ``generate`` draw the
same way); ``supports_config`` says when a config asks for something else (another processor, stop
strings), and the caller then uses ``generate``.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .kv_prefix import KVLayers, PrefixCacheStore, clip_to_image_start, common_prefix_length
from .qwen_request import EncodedRequest
from .row_caches import cache_from, cut, snapshot, stack_rows
from .sampling import GREEDY, Sampling, TokenChooser

logger = logging.getLogger(__name__)

# Generation-config fields that add a logits processor or a stopping rule to decoding, with their neutral values.
_UNSUPPORTED_NEUTRAL: dict[str, Any] = {
    "guidance_scale": (None, 1, 1.0),
    "sequence_bias": (None,),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "remove_invalid_values": (None, False),
    "exponential_decay_length_penalty": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "watermarking_config": (None,),
    "stop_strings": (None,),
}


def supports_config(generation_config: Any) -> bool:
    """True when decoding under ``generation_config`` needs nothing but an optional repetition penalty, its
    end-of-turn tokens and ``sampling.TokenChooser`` (Qwen's released configs need nothing else)."""
    for name, neutral in _UNSUPPORTED_NEUTRAL.items():
        value = getattr(generation_config, name, None)
        if not any(value is n or value == n for n in neutral):
            logger.info("generation config sets %s=%r: prefix caching falls back to generate()", name, value)
            return False
    return True


class StopFlag(Protocol):
    """What ``CachedDecoder.run`` checks between steps (a ``threading.Event`` is one)."""

    def is_set(self) -> bool: ...


@dataclass
class DecodeCounters:
    """Work done by a ``CachedDecoder`` call.

    Attributes:
        prefill_tokens: prompt tokens run through the model (reused prefix tokens are not).
        images_encoded: images run through the vision encoder.
    """

    prefill_tokens: int = 0
    images_encoded: int = 0


@dataclass
class RowResult:
    """The outcome of one request: generated ids (the end-of-turn token included) and why it ended."""

    output_ids: list[int] = field(default_factory=list)
    finish_reason: str = "length"


class CachedDecoder:
    """Decoding with prefix reuse (``store``) and batching, for one loaded Qwen-VL model.

    Not thread-safe by itself: the caller serialises calls (``TransformersQwenVLM`` holds its lock).

    Args:
        model: ``Qwen2_5_VLForConditionalGeneration`` or ``Qwen3VLForConditionalGeneration`` in eval mode.
        store: prefix caches to reuse and fill; ``None`` reuses nothing (batches still run together).
        eos_ids: token ids that end a turn.
        pad_id: id fed for rows that already ended.
        turn_start_id: the token that opens a chat turn (``<|im_start|>``), or ``None``: where a hybrid model's
            request keeps a snapshot (module docstring).
    """

    def __init__(self, model: Any, store: PrefixCacheStore | None, eos_ids: frozenset[int], pad_id: int,
                 turn_start_id: int | None = None) -> None:
        self.model = model
        self.turn_start_id = turn_start_id
        self.store = store
        self.eos_ids = eos_ids
        self.pad_id = pad_id
        penalty = getattr(model.generation_config, "repetition_penalty", None)
        self._penalty = None
        if penalty is not None and penalty != 1.0:
            from transformers import RepetitionPenaltyLogitsProcessor

            self._penalty = RepetitionPenaltyLogitsProcessor(float(penalty))

    # ------------------------------------------------------------------ public

    def run(
        self, requests: Sequence[EncodedRequest], limit: int, stop: StopFlag, counters: DecodeCounters,
        sampling: Sampling = GREEDY,
    ) -> Generator[list[int | None], None, list[RowResult]]:
        """Decode under ``sampling`` (one seeded chooser per row); yields each step's new token per row (``None``
        for rows already ended).

        Returns (as the generator's value) one ``RowResult`` per request. ``finish_reason`` is
        ``"stop"`` (an end-of-turn token), ``"length"`` (``limit`` tokens) or ``"cancelled"``
        (``stop`` set; the row keeps the tokens made so far).

        Raises:
            Whatever the model raises (the caller turns it into a ``BackendError``).
        """
        if not requests:
            return []
        prefix, start = self._start_cache(requests, counters)
        logits, mask, cache = self._prefill(requests, prefix, start, counters)
        rows = [RowResult() for _ in requests]
        histories = [r.tokens.ids.tolist() for r in requests] if self._penalty is not None else []
        choosers = [TokenChooser(sampling, r.tokens.ids.tolist()) for r in requests]
        next_index = [len(r) for r in requests]
        device = logits.device
        for step in range(limit):
            logits = self._penalised(logits, histories)
            emitted: list[int | None] = []
            for i, row in enumerate(rows):
                if row.finish_reason == "stop":
                    emitted.append(None)
                    continue
                token = choosers[i].choose(logits[i : i + 1])
                row.output_ids.append(token)
                if histories:
                    histories[i].append(token)
                if token in self.eos_ids:
                    row.finish_reason = "stop"
                emitted.append(token)
            yield emitted
            live = [row for row in rows if row.finish_reason != "stop"]
            if not live or step == limit - 1:
                break
            if stop.is_set():
                for row in live:
                    row.finish_reason = "cancelled"
                break
            feed = torch.tensor(
                [[self.pad_id if row.finish_reason == "stop" else row.output_ids[-1]] for row in rows], device=device
            )
            positions = torch.tensor(
                [n + r.delta for n, r in zip(next_index, requests)], device=device
            ).view(1, -1, 1).expand(3, -1, -1)
            next_index = [n + 1 for n in next_index]
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            logits = self._forward(feed, mask, positions, cache)
        return rows

    # ------------------------------------------------------------------ prefix caches

    def _start_cache(
        self, requests: Sequence[EncodedRequest], counters: DecodeCounters
    ) -> tuple[KVLayers | None, int]:
        """Keys/values of a prefix all requests share (as much as the store can give), and its length.

        One request starts from the longest prefix any entry shares with it. Several requests start
        from their common prefix, computed (and stored) first when the store lacks it. A request
        that begins with a system turn has that turn stored as a pinned entry on the way.
        Returns ``(None, 0)`` when nothing is reused.
        """
        store = self.store
        first = requests[0]
        if store is None:
            return None, 0
        shared = min(len(r) for r in requests) - 1  # at least one token of each request must run
        for other in requests[1:]:
            shared = min(shared, common_prefix_length(first.tokens, other.tokens))
        shared = clip_to_image_start(shared, first.tokens.spans)
        if 0 < first.system_length <= shared:
            self.ensure_prefix(first, first.system_length, True, counters)
        if len(requests) == 1:
            turn = self._last_turn_start(first, shared)
            if turn:
                return self.ensure_prefix(first, turn, False, counters), turn
            entry, reused = store.lookup(first.tokens, limit=shared)
            if entry is None or reused == 0:
                return None, 0
            return entry.layers, reused
        if shared <= 0:
            return None, 0
        return self.ensure_prefix(first, shared, False, counters), shared

    def _last_turn_start(self, request: EncodedRequest, limit: int) -> int:
        """Where ``request``'s last turn opens, for a hybrid store (0: no such snapshot to keep)."""
        if self.store is None or not self.store.whole_entries or self.turn_start_id is None:
            return 0
        found = torch.nonzero(request.tokens.ids[: limit + 1] == self.turn_start_id).flatten()
        turn = int(found[-1]) if found.numel() else 0
        return turn if turn > request.system_length else 0

    def ensure_prefix(
        self, request: EncodedRequest, length: int, pinned: bool, counters: DecodeCounters
    ) -> KVLayers:
        """Keys/values of ``request``'s first ``length`` tokens: from the store, computing (and storing) what it lacks.

        ``length`` must not cut through an image (see ``kv_prefix.clip_to_image_start``).

        Raises:
            RuntimeError: the decoder has no store.
        """
        store = self.store
        if store is None:
            raise RuntimeError("ensure_prefix needs a decoder built with a PrefixCacheStore")
        entry, reused = store.lookup(request.tokens, limit=length)
        if entry is not None and reused == length:
            return cut(entry.layers, length)
        if entry is None or reused == 0:
            entry, reused = None, 0
        cache = cache_from(entry.layers if entry is not None else None, reused, self.model.config)
        pixel_values, grid, images = self._images_between(request, reused, length)
        positions = request.positions[:, reused:length].unsqueeze(1)
        mask = torch.ones((1, length), dtype=torch.long, device=request.input_ids.device)
        self._forward(request.input_ids[:, reused:length], mask, positions, cache, pixel_values, grid)
        counters.prefill_tokens += length - reused
        counters.images_encoded += images
        layers = snapshot(cache)
        store.insert(request.tokens.prefix(length), layers, pinned=pinned)
        return layers

    # ------------------------------------------------------------------ model calls

    def _prefill(
        self, requests: Sequence[EncodedRequest], prefix: KVLayers | None, start: int, counters: DecodeCounters
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Run every request's tokens after the ``start`` cached ones; returns last logits (B, vocab), the
        attention mask (B, start + width) and the batch's cache.

        Each row runs alone from the shared prefix (see the module docstring); the rows' caches are
        then stacked with each suffix padded on its left (zeros, masked out) to the longest
        (``row_caches.stack_rows``). A single
        request's whole prompt is stored for later requests to reuse.
        """
        device = requests[0].input_ids.device
        lengths = [len(r) - start for r in requests]
        row_logits: list[torch.Tensor] = []
        row_layers: list[KVLayers] = []
        for request, length in zip(requests, lengths):
            cache = cache_from(prefix, start, self.model.config)
            mask = torch.ones((1, start + length), dtype=torch.long, device=device)
            pixel_values, grid, count = self._images_between(request, start, len(request))
            row_logits.append(self._forward(
                request.input_ids[:, start:], mask, request.positions[:, start:].unsqueeze(1), cache, pixel_values, grid
            ))
            counters.prefill_tokens += length
            counters.images_encoded += count
            row_layers.append(snapshot(cache))
        logits = torch.cat(row_logits)
        if len(requests) == 1:
            if self.store is not None and not self.store.whole_entries:  # a whole prompt is never reused whole
                self.store.insert(requests[0].tokens, row_layers[0])
            return logits, torch.ones((1, start + lengths[0]), dtype=torch.long, device=device), cache
        mask, stacked = stack_rows(row_layers, lengths, start, device, self.model.config)
        return logits, mask, stacked

    @staticmethod
    def _images_between(
        request: EncodedRequest, start: int, end: int
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, int]:
        """Patches and grids of the images lying in tokens ``[start, end)`` (never cut: see kv_prefix)."""
        chosen = [i for i, span in enumerate(request.tokens.spans) if span.start >= start and span.end <= end]
        if not chosen or len(request.image_pixels) != len(request.tokens.spans) or request.image_grid_thw is None:
            return None, None, 0
        pixels = torch.cat([request.image_pixels[i] for i in chosen])
        return pixels, request.image_grid_thw[chosen], len(chosen)

    def _forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One forward pass that extends ``cache``; returns float32 logits (B, vocab) of the last position."""
        extra = {} if pixel_values is None else {"pixel_values": pixel_values, "image_grid_thw": image_grid_thw}
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
        return output.logits[:, -1, :].float()

    def _penalised(self, logits: torch.Tensor, histories: list[list[int]]) -> torch.Tensor:
        """``logits`` after the repetition penalty over each row's tokens so far (as ``generate`` applies it)."""
        if self._penalty is None:
            return logits
        logits = logits.clone()
        for i, history in enumerate(histories):
            ids = torch.tensor([history], device=logits.device)
            logits[i : i + 1] = self._penalty(ids, logits[i : i + 1])
        return logits

