"""KV caches of a decoder's rows: snapshots, batch-1 caches from stored layers, and one batch stacked from rows.

``CachedDecoder`` runs each row's prompt alone from the shared prefix, then lays the rows' caches side by
side for the decode steps: each row's suffix is padded on its left (zeros) to the longest, and the attention
mask hides the padding, so every row keeps its own positions and never attends to another row's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .kv_prefix import KVLayers


def snapshot(cache: Any) -> KVLayers:
    """The cache's per-layer (keys, values) now; later updates concatenate into new tensors, leaving these intact."""
    return tuple((layer.keys, layer.values) for layer in cache.layers)


def cache_from(layers: KVLayers | None, length: int, config: Any) -> Any:
    """A batch-1 ``DynamicCache`` holding the first ``length`` positions of ``layers`` (empty for ``None``).

    Args:
        layers: per-layer keys and values, each (1, heads, L >= length, head_dim); or ``None``.
        length: positions to keep.
        config: the model's config (``DynamicCache(config=...)``).
    """
    from transformers import DynamicCache

    if layers is None or length == 0:
        return DynamicCache(config=config)
    return DynamicCache([(k[:, :, :length], v[:, :, :length]) for k, v in layers], config=config)


def stack_rows(
    row_layers: Sequence[KVLayers], lengths: Sequence[int], start: int, device: Any, config: Any
) -> tuple[torch.Tensor, Any]:
    """One batch's attention mask and cache from rows that share ``start`` prefix positions.

    Args:
        row_layers: per row, its cache's layers (1, heads, start + lengths[i], head_dim).
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
    stacked = []
    for layer in zip(*row_layers):
        stacked.append(tuple(
            torch.cat([_pad_suffix(kv[n], start, width - length) for kv, length in zip(layer, lengths)])
            for n in (0, 1)
        ))
    return mask, DynamicCache(stacked, config=config)


def _pad_suffix(states: torch.Tensor, start: int, pad: int) -> torch.Tensor:
    """Keys or values (1, heads, start + n, dim) with ``pad`` zero positions inserted after the first ``start``."""
    if pad == 0:
        return states
    zeros = states.new_zeros((states.shape[0], states.shape[1], pad, states.shape[3]))
    return torch.cat([states[:, :, :start], zeros, states[:, :, start:]], dim=2)
