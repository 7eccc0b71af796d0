"""Benchmark doubles: a VLM that runs a real model but answers with scripted text, and a 6-mask segmenter.

Both wrap real backends so that the work measured is the real work (prefill, decode steps, SAM 3
encodes and detection heads); only the *content* of their answers is fixed, so that every run takes
the same path through the agent whatever the random weights say.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from PIL import Image

from ..mask_set import Masks
from ..messages import Generation, ImagePart, Message
from ..sam.segmenter import Segmenter
from ..vlm.base import StreamItem, generate_each
from ..vlm.scripted import split_pieces
from ..vlm.transformers_qwen import TransformersQwenVLM

_MASK_VIEW = re.compile(r"_mask(\d+)_view$")


def mask_number_of(messages: Sequence[Message]) -> int:
    """The number of the mask a verification conversation is about, read from its mask-view image name.

    Raises:
        ValueError: the conversation holds no ``round{k}_mask{n}_view`` image.
    """
    for message in messages:
        for part in message.parts:
            if isinstance(part, ImagePart):
                match = _MASK_VIEW.search(part.name)
                if match:
                    return int(match.group(1))
    raise ValueError("not a verification conversation: no image named round<k>_mask<n>_view")


def reply_steps(vlm: TransformersQwenVLM, text: str) -> int:
    """Decode steps the model would take to write ``text``: its tokens plus the end-of-turn token."""
    return len(vlm.processor.tokenizer(text, add_special_tokens=False)["input_ids"]) + 1


class ScriptedOverModel:
    """Runs ``model`` for real on every request (its prefill and greedy decode steps), then answers with
    scripted text.

    Args:
        model: the real backend (its prefill/decode work is what is measured).
        respond: returns the scripted text for a conversation.
        decode_steps: tokens decoded per request; ``None``: as many as the scripted reply has in the model's
            tokenizer, plus the end-of-turn token, as if the model had written it (fewer when the random
            model ends its turn early).
        name: backend name for traces.

    Attributes:
        seconds: wall time spent inside the real model's calls.
        calls: model invocations (one per ``stream``, one per ``generate_batch``).
    """

    def __init__(
        self,
        model: TransformersQwenVLM,
        respond: Callable[[Sequence[Message]], str],
        decode_steps: int | None,
        name: str,
    ) -> None:
        self.model = model
        self.respond = respond
        self.decode_steps = decode_steps
        self.name = name
        self.seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def _account(self, started: float) -> None:
        with self._lock:
            self.seconds += time.perf_counter() - started
            self.calls += 1

    def _steps(self, text: str) -> int:
        return self.decode_steps if self.decode_steps is not None else reply_steps(self.model, text)

    @staticmethod
    def _scripted(text: str, real: Generation) -> Generation:
        if real.finish_reason == "cancelled":
            return real
        return Generation(text, "stop", real.prompt_tokens, real.output_tokens)

    def stream(
        self, messages: Sequence[Message], *, max_new_tokens: int | None = None, stop: threading.Event | None = None
    ) -> Iterator[StreamItem]:
        """The model's real call to the end, then the scripted text in pieces and its ``Generation``."""
        text = self.respond(messages)
        started = time.perf_counter()
        real: Generation | None = None
        for item in self.model.stream(messages, max_new_tokens=self._steps(text), stop=stop):
            if isinstance(item, Generation):
                real = item
        self._account(started)
        if real is None:
            raise RuntimeError(f"{self.model.name} ended its stream without a result")
        result = self._scripted(text, real)
        yield from split_pieces(result.text)
        yield result

    def generate_batch(
        self,
        conversations: Sequence[Sequence[Message]],
        *,
        max_new_tokens: int | None = None,
        stop: threading.Event | None = None,
    ) -> list[Generation]:
        """The model's real batch (decoding as many steps as the longest scripted reply needs), then one
        scripted answer per conversation."""
        texts = [self.respond(messages) for messages in conversations]
        started = time.perf_counter()
        steps = max(self._steps(text) for text in texts) if texts else 1
        real = generate_each(self.model, conversations, max_new_tokens=steps, stop=stop)
        self._account(started)
        return [self._scripted(text, g) for text, g in zip(texts, real)]


# (x, y) radii of each ellipse as fractions of its grid cell: shapes from round to flat and tall, so each mask's zoom
# view (cropped around the mask, drawn 384 px high) has another aspect and token count (on the 512 px astronaut
# with Qwen3-VL's processor: 192, 78, 72, 84, 144 and 204 tokens) and the batched verification rows are padded.
ELLIPSE_RADII = ((0.40, 0.40), (0.08, 0.42), (0.45, 0.06), (0.20, 0.45), (0.45, 0.15), (0.12, 0.12))


def fixed_masks(width: int, height: int, count: int = 6) -> Masks:
    """``count`` disjoint ellipses of different shapes (``ELLIPSE_RADII``, repeated) on a 3-column grid over the
    image, scores 0.95 down by 0.05.

    Returns:
        Masks bool (count, height, width); scores float32 (count,); boxes float32 (count, 4) xyxy pixels.
    """
    columns = 3
    rows = (count + columns - 1) // columns
    yy, xx = np.mgrid[0:height, 0:width]
    masks = np.zeros((count, height, width), dtype=bool)
    boxes = np.zeros((count, 4), dtype=np.float32)
    cell_w, cell_h = width / columns, height / rows
    for i in range(count):
        cx, cy = (i % columns + 0.5) * cell_w, (i // columns + 0.5) * cell_h
        fx, fy = ELLIPSE_RADII[i % len(ELLIPSE_RADII)]
        masks[i] = ((xx - cx) / (fx * cell_w)) ** 2 + ((yy - cy) / (fy * cell_h)) ** 2 <= 1.0
        ys, xs = np.nonzero(masks[i])
        boxes[i] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
    scores = np.round(0.95 - 0.05 * np.arange(count), 2).astype(np.float32)
    return Masks(masks, scores, boxes)


class SixMaskSegmenter:
    """Runs the real SAM 3 (``inner``) for every phrase, then answers with 6 fixed masks.

    Random SAM 3 weights give a varying number of masks; fixed masks make ``examine_each_mask`` verify
    exactly 6. The SAM 3 work (image encode or cache hit, detection and mask heads) is real and timed.

    Attributes:
        seconds: wall time inside ``inner.segment``.
    """

    def __init__(self, inner: Segmenter) -> None:
        self.inner = inner
        self.name = f"six-masks({inner.name})"
        self.seconds = 0.0

    def segment(self, image: Image.Image, phrase: str, score_threshold: float = 0.5) -> Masks:
        started = time.perf_counter()
        self.inner.segment(image, phrase, score_threshold)
        self.seconds += time.perf_counter() - started
        fixed = fixed_masks(image.width, image.height)
        return Masks(fixed.masks, fixed.scores, fixed.boxes, phrase)
