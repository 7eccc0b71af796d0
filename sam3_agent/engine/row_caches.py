"""Caches of a decoder's rows: snapshots, batch-1 caches from stored layers, and one batch stacked from rows.

A layer's stored state is either attention keys and values ``(1, heads, L, head_dim)`` or, in a hybrid model
(Qwen3.5), a ``cache_support.RecurrentState`` of a linear-attention layer (see that module for what each allows).

``CachedDecoder`` runs each row's prompt alone from the shared prefix, then lays the rows' caches side by
side for the decode steps: in attention layers each row's suffix is padded on its left (zeros) to the longest,
and the attention mask hides the padding, so every row keeps its own positions and never attends to another
row's tokens; linear-attention states are per row already and are stacked as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .cache_support import RecurrentState, UnsupportedCache
from .kv_prefix import KVLayers, LayerState


def snapshot(cache: Any) -> KVLayers:
    """The cache's per-layer states now. Keys and values are kept as they are (later updates concatenate into new
    tensors); recurrent states are copied (the model updates them in place).

    Raises:
        UnsupportedCache: a layer is neither kind (``cache_support.probe_cache`` keeps such models off the decoder).
    """
    states: list[LayerState] = []
    for layer in cache.layers:
        if hasattr(layer, "recurrent_states"):
            states.append(RecurrentState(layer.conv_states[0].clone(), layer.recurrent_states[0].clone()))
        elif hasattr(layer, "keys"):
            states.append((layer.keys, layer.values))
        else:
            raise UnsupportedCache(f"cannot snapshot a {type(layer).__name__} cache layer")
    return tuple(states)


def cut(layers: KVLayers, length: int) -> KVLayers:
    """The first ``length`` positions of ``layers`` (recurrent states are whole-prefix states: kept as they are;
    the store hands them out only for their own length)."""
    return tuple(s if isinstance(s, RecurrentState) else (s[0][:, :, :length], s[1][:, :, :length]) for s in layers)


def cache_from(layers: KVLayers | None, length: int, config: Any) -> Any:
    """A batch-1 ``DynamicCache`` holding the first ``length`` positions of ``layers`` (empty for ``None``).

    Args:
        layers: per-layer states (keys and values (1, heads, L >= length, head_dim), or recurrent states after
            exactly ``length`` tokens); or ``None``.
        length: positions to keep.
        config: the model's config (``DynamicCache(config=...)``).
    """
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    if layers is None or length == 0:
        return cache
    _fill(cache, cut(layers, length))
    return cache


def _fill(cache: Any, layers: KVLayers) -> None:
    """Put ``layers``' states into a fresh ``DynamicCache`` built from the model's config (copies of recurrent
    states: the model updates them in place)."""
    for layer, state in zip(cache.layers, layers, strict=True):
        if isinstance(state, RecurrentState):
            layer.update_conv_state(state.conv.clone())
            layer.update_recurrent_state(state.recurrent.clone())
        else:
            layer.update(state[0], state[1])


def stack_rows(
    row_layers: Sequence[KVLayers], lengths: Sequence[int], start: int, device: Any, config: Any
) -> tuple[torch.Tensor, Any]:
    """One batch's attention mask and cache from rows that share ``start`` prefix positions.

    Args:
        row_layers: per row, its cache's layers (1, heads, start + lengths[i], head_dim), or recurrent states.
        lengths: tokens of each row after the shared prefix.
        start: positions of the shared prefix (the same in every row).
        device: where the mask is made.
        config: the model's config (``DynamicCache(config=...)``).

    Returns:
        ``(mask, cache)``: int64 (B, start + width) attention mask, 1 on the prefix and on each row's own
        suffix, 0 on its left padding (``width`` = the longest suffix); and a ``DynamicCache`` of batch B.
    """
    from transformers import DynamicCache

    width = max(lengths)
    mask = torch.zeros((len(lengths), start + width), dtype=torch.long, device=device)
    for i, length in enumerate(lengths):
        mask[i, :start] = 1
        mask[i, start + width - length :] = 1
    stacked: list[LayerState] = []
    for layer in zip(*row_layers):
        if isinstance(layer[0], RecurrentState):
            stacked.append(RecurrentState(torch.cat([s.conv for s in layer]), torch.cat([s.recurrent for s in layer])))
            continue
        stacked.append(tuple(
            torch.cat([_pad_suffix(kv[n], start, width - length) for kv, length in zip(layer, lengths)])
            for n in (0, 1)
        ))
    cache = DynamicCache(config=config)
    _fill(cache, tuple(stacked))
    return mask, cache


def _pad_suffix(states: torch.Tensor, start: int, pad: int) -> torch.Tensor:
    """Keys or values (1, heads, start + n, dim) with ``pad`` zero positions inserted after the first ``start``."""
    if pad == 0:
        return states
    zeros = states.new_zeros((states.shape[0], states.shape[1], pad, states.shape[3]))
    return torch.cat([states[:, :, :start], zeros, states[:, :, start:]], dim=2)
