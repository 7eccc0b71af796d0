"""What a loaded model's cache lets the engine do: asked of the model once, never assumed from its family.

The cached decoder (``qwen_decode``) keeps per-layer states of computed prefixes and lays rows' states side by
side. That works for two kinds of cache layers of ``transformers`` (checked against ``TRANSFORMERS_VERSION``):

- ``DynamicLayer``: attention keys and values ``(1, kv_heads, L, head_dim)``; a stored prefix can be cut at any
  length, and rows of different lengths are padded (masked) to one batch.
- ``LinearAttentionLayer`` (Qwen3.5's Gated DeltaNet): a convolution state ``(1, channels, kernel)`` and a
  recurrent state ``(1, heads, key_dim, value_dim)`` after the whole prefix, updated in place. Such a state cannot
  be cut back (``transformers`` crops a linear layer only while it records its past), so a stored prefix is
  reused only whole: a *snapshot* of the state after exactly that prefix, copied in and out. Rows never need
  padding in these layers (each row's state already sums its own tokens), so batches stack them as they are.

``probe_cache`` builds the cache ``transformers`` would build for the model (``DynamicCache(config=...)``) and
looks at its layers. Anything else (sliding windows, quantized or static layers, a cache class whose attributes
changed in another ``transformers``, a model without Qwen-VL's 3-D position index) makes the engine use plain
``generate`` for the whole model, and the reason is logged once and recorded in the trace's settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from . import TRANSFORMERS_VERSION

logger = logging.getLogger(__name__)

_ATTENTION_FIELDS = ("keys", "values")
_LINEAR_FIELDS = ("conv_states", "recurrent_states", "has_previous_state")


class UnsupportedCache(RuntimeError):
    """A cache layer the engine cannot snapshot (raised by ``row_caches``; ``probe_cache`` keeps models with such
    layers off the decoder)."""


@dataclass(frozen=True)
class RecurrentState:
    """One linear-attention layer's state after a prefix (copies: nothing else holds them).

    Attributes:
        conv: float (B, channels, kernel) the convolution's last inputs.
        recurrent: float (B, heads, key_dim, value_dim) the recurrent state.
    """

    conv: torch.Tensor
    recurrent: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.conv, self.recurrent))


@dataclass(frozen=True)
class CacheSupport:
    """What the engine may do with a model.

    Attributes:
        decoder: the cached decoder runs this model (prefix reuse and batched decoding); else plain ``generate``.
        hybrid: the cache mixes linear-attention layers in (prefixes are reused only whole: module docstring).
        reason: why the decoder is off, or what it does differently; ``""`` for plain attention caches.
        cache: what the cache holds, for caches other than attention-only or hybrid (e.g. ``"sliding window + full
            attention"``); ``None`` for those two.
    """

    decoder: bool
    hybrid: bool = False
    reason: str = ""
    cache: str | None = None

    def as_record(self) -> dict[str, Any]:
        """Plain JSON values for a trace's settings."""
        kind = self.cache or ("hybrid (linear + full attention)" if self.hybrid else "attention")
        record: dict[str, Any] = {"path": "cached decoder" if self.decoder else "generate", "cache": kind}
        if self.reason:
            record["reason"] = self.reason
        return record


# how a record names each cache layer class transformers builds (others: by their class name)
_LAYER_NAMES = {"DynamicLayer": "full attention", "DynamicSlidingWindowLayer": "sliding window",
                "LinearAttentionLayer": "linear attention"}


def probe_cache(model: Any) -> CacheSupport:
    """Ask ``model`` (a loaded ``...ForConditionalGeneration``) which decoding paths its cache supports."""
    from transformers import DynamicCache

    name = type(model).__name__
    try:
        layers = DynamicCache(config=model.config).layers
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # another transformers: do not rely on it
        return CacheSupport(False, reason=_version_note(f"building the cache of {name} failed ({exc})"))
    kinds = {_layer_kind(layer) for layer in layers}
    hybrid = kinds == {"attention", "linear"}
    other = None if kinds in ({"attention"}, {"attention", "linear"}) else _described(layers)
    rope = getattr(getattr(model, "model", None), "get_rope_index", None)
    if not callable(rope):
        return CacheSupport(False, hybrid, f"{name} has no Qwen-VL 3-D position index (get_rope_index): the cached "
                                           "decoder cannot place its tokens", other)
    if getattr(model.config, "image_token_id", None) is None:
        return CacheSupport(False, hybrid, f"{name} names no image token (image_token_id): the cached decoder "
                                           "cannot find its images", other)
    if not layers or None in kinds:
        classes = sorted({type(layer).__name__ for layer in layers if _layer_kind(layer) is None}) or ["none"]
        return CacheSupport(False, reason=_version_note(
            f"{name}'s cache holds layers the engine does not know ({', '.join(classes)})"), cache=other)
    if kinds == {"attention"}:
        return CacheSupport(True)
    if not hybrid:
        return CacheSupport(False, reason=f"{name}'s cache has no attention layer: nothing tracks its length",
                            cache=other)
    return CacheSupport(True, hybrid=True, reason="hybrid cache (linear attention): prompt prefixes are reused "
                                                  "only whole, as snapshots of the state after them")


def _described(layers: list[Any]) -> str:
    """The layer kinds of a cache in their first order, e.g. ``"sliding window + full attention"`` (``"none"``)."""
    names = [_LAYER_NAMES.get(type(layer).__name__, type(layer).__name__) for layer in layers]
    return " + ".join(dict.fromkeys(names)) or "none"


def _layer_kind(layer: Any) -> str | None:
    """``"attention"`` for a plain ``DynamicLayer``, ``"linear"`` for a plain ``LinearAttentionLayer``, else ``None``
    (exact classes: a subclass such as a sliding-window layer keeps only part of the sequence)."""
    from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

    fields = vars(layer)
    if type(layer) is DynamicLayer and all(f in fields for f in _ATTENTION_FIELDS):
        return "attention"
    if type(layer) is LinearAttentionLayer and all(f in fields for f in _LINEAR_FIELDS):
        return "linear"
    return None


def installed_transformers_version() -> str:
    """The installed ``transformers`` version (``transformers.__version__``)."""
    import transformers

    return transformers.__version__


def _version_note(text: str) -> str:
    installed = installed_transformers_version()
    if installed == TRANSFORMERS_VERSION:
        return text
    return f"{text}; the engine was checked against transformers {TRANSFORMERS_VERSION}, this is {installed}"


def log_choice(name: str, support: CacheSupport) -> None:
    """Say once, when the engine is built, which path a model runs on and why."""
    if not support.decoder:
        logger.warning("%s decodes with generate() (no prefix reuse, no batching): %s", name, support.reason)
    elif support.reason:
        logger.info("%s: %s", name, support.reason)
