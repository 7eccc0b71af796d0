"""A bounded, thread-safe store of prompt-prefix KV caches, matched by longest common prefix.

Requests to one model share long prefixes: every main request starts with the same system prompt
and, within a run, with the same raw image and query; the verification requests of one
``examine_each_mask`` share their system prompt and the raw image. The store keeps the key/value
tensors of such prefixes so that a request only runs the model over the tokens after the longest
prefix it shares with an entry.

A prefix is identified by its token ids *and* the content digests of the images inside it: every
image's tokens are the same placeholder id, so ids alone would let two different images match.
Matching stops at the first image whose digest differs, and never ends inside an image (an image's
features are computed whole). Entries hold tensors that nothing mutates (a ``DynamicCache`` built
from them concatenates into new tensors, and recurrent states are copied in and out: ``row_caches``), so
handing out views is safe without copying.

A store for a hybrid model (``whole_entries=True``, ``cache_support``) holds recurrent states, which are valid
only after their entry's whole prefix: a lookup then returns an entry only for its full length, and a longer
entry never replaces a shorter one.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .cache_support import RecurrentState

logger = logging.getLogger(__name__)

DEFAULT_PREFIX_CACHE_ENTRIES = 8  # a run needs ~2 (main + verification); room for a few concurrent users
DEFAULT_PREFIX_CACHE_BYTES = 2 * 1024**3  # ~14k tokens of Qwen3-VL-8B in bfloat16 (144 KiB per token)


@dataclass(frozen=True)
class ImageSpan:
    """Where one image's tokens lie in a token sequence.

    Attributes:
        start / end: token indices, ``end`` exclusive.
        digest: content digest of the image (``images.image_digest``).
    """

    start: int
    end: int
    digest: str


@dataclass(frozen=True)
class TokenSequence:
    """A prompt's token ids with the images inside it.

    Attributes:
        ids: int64 (T,) token ids on the CPU.
        spans: the images in order, as ``ImageSpan`` s.
    """

    ids: torch.Tensor
    spans: tuple[ImageSpan, ...]

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def prefix(self, length: int) -> TokenSequence:
        """The first ``length`` tokens, keeping the images that lie wholly inside them."""
        return TokenSequence(self.ids[:length], tuple(s for s in self.spans if s.end <= length))


def clip_to_image_start(length: int, spans: Sequence[ImageSpan]) -> int:
    """``length`` moved back to the start of any image it would cut through."""
    for span in spans:
        if span.start < length < span.end:
            return span.start
    return length


def common_prefix_length(a: TokenSequence, b: TokenSequence) -> int:
    """Length of the longest common prefix of two sequences that both can reuse.

    Token ids must be equal, every image inside the prefix must have the same digest in both, and
    the prefix never ends inside an image.
    """
    n = min(len(a), len(b))
    if n == 0:
        return 0
    different = torch.nonzero(a.ids[:n] != b.ids[:n])
    length = int(different[0, 0]) if different.numel() else n
    for span_a, span_b in zip(a.spans, b.spans):
        if span_a.start >= length:
            break
        if span_a != span_b or span_a.end > length:
            return span_a.start
    return clip_to_image_start(length, a.spans)


LayerState = tuple[torch.Tensor, torch.Tensor] | RecurrentState  # keys and values, or a linear layer's state
KVLayers = tuple[LayerState, ...]


@dataclass(frozen=True)
class PrefixEntry:
    """A cached prefix: its tokens and, per decoder layer, keys and values ``(1, kv_heads, L, head_dim)`` (or, in a
    linear-attention layer, its ``RecurrentState`` after all ``L`` tokens)."""

    tokens: TokenSequence
    layers: KVLayers
    nbytes: int
    pinned: bool = False

    def __len__(self) -> int:
        return len(self.tokens)


def layers_nbytes(layers: KVLayers) -> int:
    """Bytes held by the tensors of ``layers``."""
    return sum(s.nbytes if isinstance(s, RecurrentState) else s[0].numel() * s[0].element_size()
               + s[1].numel() * s[1].element_size() for s in layers)


@dataclass(frozen=True)
class PrefixCacheStats:
    """A snapshot of the store: entries (pinned among them), bytes held, lookups and hits."""

    entries: int
    pinned: int
    nbytes: int
    lookups: int
    hits: int


class PrefixCacheStore:
    """LRU store of ``PrefixEntry`` s bounded by entry count and bytes; pinned entries are evicted last.

    Args:
        max_entries: most entries kept (pinned included); 0 stores nothing.
        max_bytes: most bytes of key/value tensors kept; an entry larger than this is not stored.
        whole_entries: entries are reused only for their full length (hybrid caches: module docstring).

    Raises:
        ValueError: a negative bound.
    """

    def __init__(self, max_entries: int = DEFAULT_PREFIX_CACHE_ENTRIES, max_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
                 whole_entries: bool = False):
        if max_entries < 0 or max_bytes < 0:
            raise ValueError(
                f"prefix cache bounds must be >= 0, got max_entries={max_entries}, max_bytes={max_bytes}"
            )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.whole_entries = whole_entries
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()
        self._next_key = 0
        self._nbytes = 0
        self._lookups = 0
        self._hits = 0
        self._lock = threading.Lock()

    def lookup(self, tokens: TokenSequence, limit: int | None = None) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest reusable prefix with ``tokens``, and that prefix's length.

        Args:
            tokens: the request's tokens.
            limit: cap on the length returned (e.g. ``len(tokens) - 1``: one token must be run to get logits).

        Returns:
            ``(entry, length)``; ``(None, 0)`` when nothing is shared. The entry becomes most recently used.
        """
        best: tuple[PrefixEntry | None, int, int | None] = (None, 0, None)
        with self._lock:
            self._lookups += 1
            for key, entry in self._entries.items():
                length = common_prefix_length(entry.tokens, tokens)
                if limit is not None:
                    length = clip_to_image_start(min(length, limit), tokens.spans)
                if self.whole_entries and length != len(entry):
                    continue
                if length > best[1]:
                    best = (entry, length, key)
            if best[2] is not None:
                self._entries.move_to_end(best[2])
                self._hits += 1
        return best[0], best[1]

    def insert(self, tokens: TokenSequence, layers: KVLayers, *, pinned: bool = False) -> bool:
        """Store the prefix ``tokens`` with its per-layer keys/values (each ``(1, heads, len(tokens), dim)``).

        An unpinned entry whose tokens are a prefix of ``tokens`` is replaced (the new one covers it);
        when an entry already covers ``tokens`` (and is pinned, if ``pinned``), nothing is added. Then the
        least recently used entries are evicted, unpinned first, until both bounds hold.

        Returns:
            True when the entry was stored.

        Raises:
            ValueError: ``layers`` do not hold ``len(tokens)`` positions.
        """
        for state in layers:
            if isinstance(state, RecurrentState):
                continue
            keys, values = state
            if keys.shape[-2] != len(tokens) or values.shape[-2] != len(tokens):
                raise ValueError(
                    f"prefix cache entry of {len(tokens)} tokens got tensors of {keys.shape[-2]} positions"
                )
        nbytes = layers_nbytes(layers)
        if self.max_entries == 0 or nbytes > self.max_bytes or len(tokens) == 0:
            return False
        with self._lock:
            for key, entry in list(self._entries.items()):
                shared = common_prefix_length(entry.tokens, tokens)
                covers = shared == len(tokens) and (not self.whole_entries or len(entry) == len(tokens))
                if covers and (entry.pinned or not pinned):
                    self._entries.move_to_end(key)
                    return False
                if shared == len(entry) and len(entry) < len(tokens) and not entry.pinned and not self.whole_entries:
                    self._remove(key)
            self._entries[self._next_key] = PrefixEntry(tokens, layers, nbytes, pinned)
            self._next_key += 1
            self._nbytes += nbytes
            self._evict()
        return True

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self._nbytes = 0

    def stats(self) -> PrefixCacheStats:
        """Counts and bytes now."""
        with self._lock:
            pinned = sum(1 for e in self._entries.values() if e.pinned)
            return PrefixCacheStats(len(self._entries), pinned, self._nbytes, self._lookups, self._hits)

    def entries(self) -> list[PrefixEntry]:
        """The entries, least recently used first."""
        with self._lock:
            return list(self._entries.values())

    # ------------------------------------------------------------------ internals (lock held)

    def _remove(self, key: int) -> None:
        entry = self._entries.pop(key)
        self._nbytes -= entry.nbytes

    def _evict(self) -> None:
        while len(self._entries) > self.max_entries or self._nbytes > self.max_bytes:
            victim = next((k for k, e in self._entries.items() if not e.pinned), None)
            if victim is None:
                victim = next(iter(self._entries))
            logger.debug("prefix cache evicts an entry of %d tokens", len(self._entries[victim]))
            self._remove(victim)
