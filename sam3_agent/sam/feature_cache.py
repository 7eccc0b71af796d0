"""A bounded least-recently-used store of image encodings, keyed by image content.

SAM 3's image encoder dominates its cost (on a 2-core CPU about 63 s per image at full size
against about 7 s per text prompt, see FACTS), so the segmenter and the point-prompt model both
keep the encodings of recent images. Not thread-safe on its own: callers hold their model lock.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..shared import SharedObject

logger = logging.getLogger(__name__)


def tensors_nbytes(tensors: Iterable[Any]) -> int:
    """Bytes of storage of the tensors in ``tensors`` (``None`` items and non-tensors count 0)."""
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class FeatureCache:
    """At most ``max_entries`` encodings whose sizes add up to at most ``max_bytes``; oldest use goes first.

    An encoding larger than ``max_bytes`` on its own is returned but not kept. ``max_entries == 0``
    or ``max_bytes == 0`` disables the cache.

    Args:
        max_entries: most images kept.
        max_bytes: most bytes kept (as reported by ``nbytes`` for each encoding).
        nbytes: size in bytes of one encoding.
        label: what is cached, for debug logs.

    Raises:
        ValueError: a negative bound.
    """

    def __init__(self, max_entries: int, max_bytes: int, nbytes: Callable[[Any], int], label: str = "features"):
        if max_entries < 0:
            raise ValueError(f"feature_cache_size must be >= 0 (0 disables the cache), got {max_entries}")
        if max_bytes < 0:
            raise ValueError(f"feature_cache_bytes must be >= 0 (0 disables the cache), got {max_bytes}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._nbytes = nbytes
        self._label = label
        self._entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self.computed = 0  # how many times ``compute`` ran (cache misses)

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        """The encoding stored under ``key``, or ``compute()``'s result (kept when it fits)."""
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            logger.debug("%s cache hit %s", self._label, key[:12])
            return found[0]
        value = compute()
        self.computed += 1
        size = self._nbytes(value)
        if self.max_entries > 0 and size <= self.max_bytes:
            self._entries[key] = (value, size)
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                evicted, (_, evicted_size) = self._entries.popitem(last=False)
                self._bytes -= evicted_size
                logger.debug("%s cache evicted %s", self._label, evicted[:12])
        return value

    def info(self) -> tuple[int, int]:
        """``(images, bytes)`` held now."""
        return len(self._entries), self._bytes

    def clear(self) -> None:
        """Forget every encoding."""
        self._entries.clear()
        self._bytes = 0


class CachedImageModel(SharedObject):
    """What a model wrapper holding a ``FeatureCache`` exposes: encode count, device, cache size, clearing.

    A loaded model is shared by every user of the process: copying the wrapper returns it (``shared.SharedObject``).

    Subclasses set ``self._model`` (a torch module), ``self._cache`` (a ``FeatureCache``) and
    ``self._lock`` (the lock that guards the cache).
    """

    _model: Any
    _cache: FeatureCache
    _lock: Any

    @property
    def encode_count(self) -> int:
        """Number of times the image encoder has run since construction (cache misses)."""
        return self._cache.computed

    @property
    def device(self) -> torch.device:
        """The device the model runs on."""
        return next(self._model.parameters()).device

    def cache_info(self) -> tuple[int, int]:
        """``(images, bytes)`` held by the cache now."""
        with self._lock:
            return self._cache.info()

    def clear_cache(self) -> None:
        """Forget every cached image encoding."""
        with self._lock:
            self._cache.clear()

    def _run_locked(self, run: Callable[[], Any], model: str, image_size: tuple[int, int], advice: str) -> Any:
        """``run()`` under the lock and ``torch.inference_mode``; out of memory becomes a ``BackendError`` saying
        ``"{model} ran out of memory on a WxH image on {device}: try a smaller image, free memory, or {advice}."``.

        Raises:
            BackendError: out of memory (the CUDA cache is emptied first).
        """
        from ..errors import BackendError, is_out_of_memory

        with self._lock:
            try:
                with torch.inference_mode():
                    return run()
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                width, height = image_size
                raise BackendError(
                    f"{model} ran out of memory on a {width}x{height} image on {self.device}: try a smaller image, "
                    f"free memory, or {advice}."
                ) from exc
