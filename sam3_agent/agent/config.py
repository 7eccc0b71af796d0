"""The limits and thresholds of a run (``AgentConfig``), checked when it is built."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..imaging.postprocess import IOM_THRESHOLD, SCORE_THRESHOLD
from ..limits import (
    DEFAULT_MAX_ROUNDS,
    DEFAULT_VERIFY_BATCH_SIZE,
    MAX_MAIN_IMAGES,
    MAX_MAIN_IMAGES_WITH_TILES,
    MAX_ROUNDS_LIMIT,
)
from .tool_format import DEFAULT_TOOL_FORMAT, ToolFormat, check_tool_format


@dataclass(frozen=True)
class AgentConfig:
    """Limits and thresholds of a run.

    Attributes:
        max_rounds: round budget, 1 to ``MAX_ROUNDS_LIMIT``; every main VLM call counts, mistakes included.
        score_threshold: SAM 3 score below which masks are dropped (reference agent: 0.5).
        iom_threshold: intersection-over-smaller-area above which the lower-scoring mask is dropped
            (reference agent: 0.3).
        max_new_tokens: token budget of each main VLM call (``None``: the backend's default).
        verify_max_new_tokens: token budget of each verification call (``None``: backend default).
        verify_batch_size: masks verified per batch when the verifier supports batches (1: one by one;
            greedy verdicts are the same either way).
        tool_format: how the main model is told to call the tools (``tool_format``): ``"reference"``, the
            ``<tool>`` format of the reference agent, or ``"native"``, the model's own function calling.
        dense_tiles: opt-in: a dense set's overlay also goes to the main model as four enlarged tiles
            (``imaging.tiles``), so its requests hold up to ``limits.MAX_MAIN_IMAGES_WITH_TILES`` (6) images and a
            VLM server must allow that many. Off (the default): at most the photo and the overlay
            (``limits.MAX_MAIN_IMAGES``, the reference agent's two), a dense overlay drawn at the main VLM's pixel
            budget instead (``imaging.enlarged``). Recorded in every trace's settings, as every field here is.
    """

    max_rounds: int = DEFAULT_MAX_ROUNDS
    score_threshold: float = SCORE_THRESHOLD
    iom_threshold: float = IOM_THRESHOLD
    max_new_tokens: int | None = None
    verify_max_new_tokens: int | None = None
    verify_batch_size: int = DEFAULT_VERIFY_BATCH_SIZE
    tool_format: ToolFormat = DEFAULT_TOOL_FORMAT
    dense_tiles: bool = False

    @property
    def max_main_images(self) -> int:
        """The most images one main request may hold under this config (the cap ``agent.context`` checks)."""
        return MAX_MAIN_IMAGES_WITH_TILES if self.dense_tiles else MAX_MAIN_IMAGES

    def __post_init__(self) -> None:
        """Raises InputError for a value of the wrong type (e.g. ``max_rounds=2.5`` or ``"3"``) or out of range."""
        _whole("max_rounds", self.max_rounds, 1, MAX_ROUNDS_LIMIT)
        _fraction("score_threshold", self.score_threshold)
        _fraction("iom_threshold", self.iom_threshold)
        _whole("verify_batch_size", self.verify_batch_size, 1)
        check_tool_format(self.tool_format)
        if not isinstance(self.dense_tiles, bool):
            raise InputError(f"dense_tiles must be true or false, got {self.dense_tiles!r}")
        for name in ("max_new_tokens", "verify_max_new_tokens"):
            if getattr(self, name) is not None:
                _whole(name, getattr(self, name), 1)


def _whole(name: str, value: Any, low: int, high: int | None = None) -> None:
    """Raise InputError unless ``value`` is an int (not a bool) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be a whole number, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InputError(f"{name} must be {bounds}, got {value}")


def _fraction(name: str, value: Any) -> None:
    """Raise InputError unless ``value`` is a real number in [0, 1] (NaN is not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
        raise InputError(f"{name} must be a number in [0, 1], got {value!r}")
