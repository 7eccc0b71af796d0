"""Running ``transformers``' ``generate`` in a worker thread and relaying its streamer: the engine's plain path.

This is the reference the cached decoder is compared with (tests/test_engine_conformance.py): one request
at a time, each with its own ``TextIteratorStreamer``, its own seeded chooser (``sampling.SampleAsLogits``)
and a stopping criterion on the caller's stop event. The caller holds the engine's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

from .decoded import Decoded, EngineError
from .sampling import SampleAsLogits, Sampling, TokenChooser
from .usage import UsageCounter
from .workers import EventStopper

logger = logging.getLogger(__name__)


def stream_generate(
    model: Any, inputs: Any, limit: int, stop: threading.Event, sampling: Sampling, *,
    tokenizer: Any, eos_ids: frozenset[int], usage: UsageCounter, name: str,
) -> Iterator[str | Decoded]:
    """Run ``generate`` in a worker thread and relay its streamer, then the ``Decoded``.

    Args:
        model: the loaded model; inputs: its processor's encoding of the request (``input_ids`` int64 (1, T)...).
        limit: most tokens generated.
        stop: ends generation at its next step; so does leaving the iteration early.
        sampling: how tokens are chosen (the same seeded choice as the decoder path).
        tokenizer: the model's tokenizer; eos_ids: the tokens that end a turn.
        usage: counts the work done; name: the model, for logs.

    Raises:
        EngineError: the model failed (stage ``"generate"``).
    """
    from transformers import TextIteratorStreamer

    prompt_tokens = int(inputs["input_ids"].shape[1])
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    abandoned = threading.Event()  # set when the consumer stops iterating early
    outcome: dict[str, Any] = {}
    worker = threading.Thread(
        target=_generate,
        args=(model, inputs, limit, _processors(sampling, inputs), tokenizer, streamer, EventStopper(stop, abandoned),
              outcome),
        name=f"generate[{name}]", daemon=True,
    )
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
    finish = _finish_reason(new_tokens, eos_ids, limit, stop)
    grid = inputs.get("image_grid_thw")
    usage.add_plain(prompt_tokens, 0 if grid is None else int(grid.shape[0]), new_tokens.tolist())
    logger.debug(
        "%s: %d prompt + %d output tokens in %.2f s (%s)",
        name, prompt_tokens, output_tokens, time.perf_counter() - started, finish,
    )
    yield Decoded("".join(pieces), finish, prompt_tokens, output_tokens)


def _generate(
    model: Any, inputs: Any, limit: int, processors: Any, tokenizer: Any, streamer: Any, stopper: EventStopper,
    outcome: dict[str, Any],
) -> None:
    """The worker: ``generate`` into ``streamer``; leaves ``outcome["sequences"]``, or ``outcome["error"]`` for the
    caller's thread to re-raise (the streamer is then ended, releasing the consumer waiting on it)."""
    from transformers import StoppingCriteriaList

    try:
        with torch.inference_mode():
            outcome["sequences"] = model.generate(
                **inputs,
                streamer=streamer,
                max_new_tokens=limit,
                do_sample=False,
                temperature=None,  # the checkpoint's sampling values are applied by SampleAsLogits
                top_p=None,
                top_k=None,
                logits_processor=processors,
                tokenizer=tokenizer,  # for stop strings a generation config may set
                stopping_criteria=StoppingCriteriaList([stopper]),
            )
    except BaseException as exc:  # re-raised in the caller's thread
        outcome["error"] = exc
        streamer.end()  # release the consumer waiting on the queue


def _processors(sampling: Sampling, inputs: Any) -> Any:
    """The ``LogitsProcessorList`` of a request: empty for greedy; for sampling, the request's seeded choice
    (``generate`` then decodes greedily and so picks it)."""
    from transformers import LogitsProcessorList

    processors = LogitsProcessorList()
    if sampling.do_sample:  # the same seeded choice as the decoder path; greedy then picks it
        processors.append(SampleAsLogits(TokenChooser(sampling, inputs["input_ids"][0].tolist())))
    return processors


def _finish_reason(new_tokens: torch.Tensor, eos_ids: frozenset[int], limit: int, stop: threading.Event) -> str:
    """Why ``generate`` ended, from its new tokens (int64 (n,)): stop, length, cancelled, in that precedence."""
    output_tokens = int(new_tokens.shape[0])
    if output_tokens > 0 and int(new_tokens[-1]) in eos_ids:
        return "stop"
    if output_tokens >= limit:
        return "length"
    if stop.is_set():
        return "cancelled"
    return "stop"  # ended by a limit of the model's own generation config
