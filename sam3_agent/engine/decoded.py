"""What the engine answers for one request, and how it fails: ``Decoded``, ``CANCELLED``, ``EngineError``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
