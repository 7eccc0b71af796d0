"""Qwen2.5-VL / Qwen3-VL (Instruct and Thinking) run in-process through Hugging Face ``transformers``.

One ``TransformersQwenVLM`` loads its model and processor once and serves every caller: a lock
lets one generation run at a time, and each call builds its own streamer and stopping criterion,
so concurrent users never see each other's tokens.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from ..errors import BackendError, InputError
from ..types import Generation, ImagePart, Message, TextPart
from .base import StreamItem

logger = logging.getLogger(__name__)

DEFAULT_VLM_MODEL = "Qwen/Qwen3-VL-8B-Instruct"

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
    ) -> None:
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
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

    @classmethod
    def from_pretrained(
        cls,
        model_id: str,
        *,
        device: str | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_new_tokens: int = 1024,
    ) -> "TransformersQwenVLM":
        """Load a Qwen2.5-VL or Qwen3-VL checkpoint (Hub id or local folder) once.

        Args:
            model_id: Hub repository id (e.g. ``DEFAULT_VLM_MODEL``) or path of a saved folder.
            device: torch device; ``None`` picks ``"cuda"`` (bfloat16) when available, else
                ``"cpu"`` (float32).
            min_pixels / max_pixels: bounds on an image's pixel count after resizing (the image
                processor's ``size["shortest_edge"]`` / ``size["longest_edge"]``); each image
                token covers ``(patch_size * merge_size)**2`` pixels (28*28 for Qwen2.5-VL,
                32*32 for Qwen3-VL), so ``max_pixels`` bounds the image tokens. ``None`` keeps the
                checkpoint's value.
            max_new_tokens: default output-token limit of a call.

        Raises:
            BackendError: the folder does not exist or holds no model, the repository cannot be
                found or downloaded (gated, offline, no network), or the model does not fit.
            InputError: ``min_pixels`` > ``max_pixels``, or a bound below 1 (a ``ValueError``).
        """
        from transformers import AutoModelForImageTextToText, AutoProcessor

        for label, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels)):
            if value is not None and value < 1:
                raise InputError(f"{label} must be a positive pixel count, got {value}")
        _check_local_folder(model_id)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        started = time.perf_counter()
        try:
            processor = AutoProcessor.from_pretrained(model_id)
        except (OSError, ValueError) as exc:
            raise BackendError(_load_error_message(model_id, device, exc)) from exc
        current = processor.image_processor.size
        image_size = {
            "shortest_edge": int(min_pixels if min_pixels is not None else current.shortest_edge),
            "longest_edge": int(max_pixels if max_pixels is not None else current.longest_edge),
        }
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
            raise BackendError(_load_error_message(model_id, device, exc)) from exc
        model.eval()
        logger.info(
            "loaded VLM %s on %s (%s) in %.1f s; image pixels %s",
            model_id, device, dtype, time.perf_counter() - started, image_size,
        )
        return cls(
            model_id, model, processor, device=device, image_size=image_size, max_new_tokens=max_new_tokens
        )

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
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if limit < 1:
            raise InputError(f"max_new_tokens must be at least 1, got {limit}")
        stop = stop if stop is not None else threading.Event()
        # One lock around preprocessing and generation: the model and its tokenizer are shared.
        while not self._lock.acquire(timeout=_LOCK_POLL_SECONDS):
            if stop.is_set():
                yield Generation("", "cancelled", None, 0)
                return
        try:
            if stop.is_set():
                yield Generation("", "cancelled", None, 0)
                return
            try:
                inputs = self.encode(messages)
            except (ValueError, TypeError, RuntimeError) as exc:
                raise BackendError(f"{self.name}: could not prepare the request for the model: {exc}") from exc
            yield from self._generate_locked(inputs, int(inputs["input_ids"].shape[1]), limit, stop)
        finally:
            self._lock.release()

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
            raise BackendError(_generation_error_message(self.name, outcome["error"])) from outcome["error"]

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
        logger.debug(
            "%s: %d prompt + %d output tokens in %.2f s (%s)",
            self.name, prompt_tokens, output_tokens, time.perf_counter() - started, finish,
        )
        yield Generation("".join(pieces), finish, prompt_tokens, output_tokens)


class _EventStopper:
    """Stopping criterion: ends generation once the user's ``stop`` or the internal ``abandoned`` is set."""

    def __init__(self, stop: threading.Event, abandoned: threading.Event) -> None:
        self._stop = stop
        self._abandoned = abandoned

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        done = self._stop.is_set() or self._abandoned.is_set()
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


def to_chat(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Convert messages to the processor's chat format.

    A message with exactly one text part gets a plain string as content (the form every Qwen
    template handles for every role); other messages get a list of
    ``{"type": "image", "image": PIL}`` / ``{"type": "text", "text": str}`` items in order.
    """
    chat: list[dict[str, Any]] = []
    for message in messages:
        parts = message.parts
        if len(parts) == 1 and isinstance(parts[0], TextPart):
            content: Any = parts[0].text
        else:
            content = []
            for part in parts:
                if isinstance(part, ImagePart):
                    content.append({"type": "image", "image": part.image})
                elif isinstance(part, TextPart):
                    content.append({"type": "text", "text": part.text})
                else:
                    raise TypeError(f"unsupported message part {type(part).__name__}: use TextPart or ImagePart")
        chat.append({"role": message.role, "content": content})
    return chat


def _looks_like_path(model_id: str) -> bool:
    """True for ids that can only be a local folder (absolute, relative or home paths)."""
    return model_id.startswith(("/", "./", "../", "~", "\\")) or model_id.count("/") > 1 or (
        len(model_id) > 1 and model_id[1] == ":"
    )


def _check_local_folder(model_id: str) -> None:
    """Fail early and clearly for a local folder that is missing or holds no model."""
    path = Path(model_id).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BackendError(
                f"the folder {model_id} holds no model (no config.json): pass a folder saved with "
                "save_pretrained (model + processor) or a Hub id such as " + DEFAULT_VLM_MODEL
            )
        return
    if _looks_like_path(model_id) or path.exists():
        raise BackendError(
            f"the model folder {model_id} does not exist: check the path, or pass a Hub id such as "
            + DEFAULT_VLM_MODEL
        )


def _load_error_message(model_id: str, device: str, exc: BaseException) -> str:
    """A one-paragraph explanation of a failed load, naming the model and the fixes."""
    text = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
    lowered = str(exc).lower()
    if _is_out_of_memory(exc):
        return (
            f"{model_id} does not fit in memory on {device}: use a smaller model (e.g. Qwen/Qwen3-VL-2B-Instruct) "
            f"or another device ({text})"
        )
    if "cuda" in lowered and ("driver" in lowered or "not compiled" in lowered or "no cuda" in lowered):
        return f"cannot load {model_id} on {device}: no usable CUDA device; pass device='cpu' ({text})"
    return (
        f"cannot load the VLM {model_id}: {text}. Check the model id (e.g. {DEFAULT_VLM_MODEL}) or pass a local "
        "folder saved with save_pretrained; for a gated or private repository log in with `hf auth login`; "
        "offline (HF_HUB_OFFLINE=1) only works when the Hugging Face cache already holds the files."
    )


def _is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    lowered = str(exc).lower()
    return "out of memory" in lowered or "can't allocate memory" in lowered


def _generation_error_message(name: str, exc: BaseException) -> str:
    if _is_out_of_memory(exc):
        return (
            f"{name} ran out of memory while generating: reduce max_pixels (fewer image tokens), "
            f"max_new_tokens, or use a smaller model ({type(exc).__name__}: {exc})"
        )
    return f"{name} failed while generating: {type(exc).__name__}: {exc}"
