"""Running totals of the work a local VLM did (requests, prompt and prefill tokens, outputs).

The benchmark reads them to compare the optimised and naive modes; they cost a lock per request.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from .qwen_decode import DecodeCounters, RowResult
from .qwen_request import EncodedRequest


@dataclass(frozen=True)
class VLMUsage:
    """Work a ``TransformersQwenVLM`` did.

    Attributes:
        requests: conversations answered (a batch counts each of its rows).
        prompt_tokens: tokens in those requests (text and image tokens).
        prefill_tokens: prompt tokens the model actually ran; the rest came from prefix caches.
        output_tokens: tokens generated (end-of-turn tokens included).
        images_encoded: images run through the vision encoder.
    """

    requests: int = 0
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    output_tokens: int = 0
    images_encoded: int = 0


class UsageCounter:
    """Thread-safe running totals behind ``VLMUsage``, and optionally every output's token ids."""

    def __init__(self, record_outputs: bool) -> None:
        self._record = record_outputs
        self._lock = threading.Lock()
        self._totals = VLMUsage()
        self._outputs: list[tuple[int, ...]] = []

    def _bump(self, **amounts: int) -> None:
        current = self._totals
        self._totals = VLMUsage(**{k: getattr(current, k) + amounts.get(k, 0) for k in current.__dataclass_fields__})

    def add(self, counters: DecodeCounters, requests: Sequence[EncodedRequest], rows: Sequence[RowResult]) -> None:
        with self._lock:
            self._bump(
                requests=len(requests),
                prompt_tokens=sum(len(r) for r in requests),
                prefill_tokens=counters.prefill_tokens,
                output_tokens=sum(len(r.output_ids) for r in rows),
                images_encoded=counters.images_encoded,
            )
            if self._record:
                self._outputs.extend(tuple(r.output_ids) for r in rows)

    def add_prefill(self, counters: DecodeCounters) -> None:
        """Prefill work done outside a request (``prefill_system_prompts``)."""
        with self._lock:
            self._bump(prefill_tokens=counters.prefill_tokens, images_encoded=counters.images_encoded)

    def add_plain(self, prompt_tokens: int, images: int, output_ids: list[int]) -> None:
        with self._lock:
            self._bump(requests=1, prompt_tokens=prompt_tokens, prefill_tokens=prompt_tokens,
                       output_tokens=len(output_ids), images_encoded=images)
            if self._record:
                self._outputs.append(tuple(output_ids))

    def snapshot(self) -> VLMUsage:
        with self._lock:
            return self._totals

    def outputs(self) -> list[tuple[int, ...]]:
        with self._lock:
            return list(self._outputs)

    def reset(self) -> None:
        with self._lock:
            self._totals = VLMUsage()
            self._outputs.clear()
