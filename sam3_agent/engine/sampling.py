"""How the next token is chosen: greedy, or sampled from a generator seeded per request.

Sampling is a function of the settings, the request's prompt token ids and the logits: each request draws
from its own ``torch.Generator`` seeded from ``(seed, prompt ids)``. So a request gives the same tokens
alone or as a row of a batch, with or without a prefix cache, and through ``transformers``' ``generate``
(where ``SampleAsLogits`` makes the draw and leaves greedy decoding one finite logit to pick): the fast
paths honour sampling exactly as they honour greedy decoding, and a run repeated with the same seed
repeats its trace. The logits are shaped by ``transformers``' own warpers in ``generate``'s order
(temperature, top-k, top-p), after the repetition penalty, as ``generate(do_sample=True)`` does; the draw
itself is an inverse-CDF lookup of one uniform number from the request's generator (``generate`` would
use the global RNG, which no caller can seed per request).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Sampling:
    """How each next token is chosen.

    Attributes:
        do_sample: ``False``: greedy (the most likely token); ``True``: drawn from the shaped distribution.
        temperature: logits are divided by it before the draw (> 0; 1.0: unchanged).
        top_p: keep the smallest set of most likely tokens whose probabilities sum to at least this (0 < p <= 1;
            1.0: all).
        top_k: keep the ``top_k`` most likely tokens (0: all).
        seed: seeds each request's generator together with its prompt (see the module docstring).

    Raises:
        ValueError: a value out of its range (the message names it).
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature} (for greedy decoding use do_sample=False)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), got {self.top_k}")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")

    def as_record(self) -> dict[str, Any]:
        """The settings as plain JSON values (for a trace)."""
        if not self.do_sample:
            return {"do_sample": False, "seed": self.seed}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "seed": self.seed}


GREEDY = Sampling()


def request_seed(seed: int, prompt_ids: Sequence[int]) -> int:
    """A 63-bit seed from ``seed`` and a request's prompt token ids (blake2b of both)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(int(seed).to_bytes(8, "little"))
    digest.update(torch.as_tensor(list(prompt_ids), dtype=torch.int64).numpy().tobytes())
    return int.from_bytes(digest.digest(), "little") >> 1


class TokenChooser:
    """Chooses one request's tokens step by step under ``sampling``.

    Args:
        sampling: the settings.
        prompt_ids: the request's prompt token ids (they seed its generator).
    """

    def __init__(self, sampling: Sampling, prompt_ids: Sequence[int]) -> None:
        self.sampling = sampling
        self._warpers: list[Any] = []
        self._generator: torch.Generator | None = None
        if sampling.do_sample:
            from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

            if sampling.temperature != 1.0:
                self._warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k:
                self._warpers.append(TopKLogitsWarper(sampling.top_k))
            if sampling.top_p < 1.0:
                self._warpers.append(TopPLogitsWarper(sampling.top_p))
            self._generator = torch.Generator().manual_seed(request_seed(sampling.seed, prompt_ids))

    def choose(self, scores: torch.Tensor, history: torch.Tensor | None = None) -> int:
        """The next token id.

        Args:
            scores: float (1, vocab) logits after any repetition penalty.
            history: int64 (1, T) the request's tokens so far, as ``generate`` gives its warpers (which ignore it).
        """
        if self._generator is None:
            return int(scores.argmax(dim=-1))
        ids = history if history is not None else torch.zeros((1, 0), dtype=torch.long, device=scores.device)
        for warper in self._warpers:
            scores = warper(ids, scores)
        probabilities = torch.softmax(scores.float(), dim=-1)[0]
        cumulative = torch.cumsum(probabilities, dim=0)
        draw = torch.rand((), generator=self._generator).item() * float(cumulative[-1])
        # the first token whose cumulative probability exceeds the draw: never one the warpers removed
        index = int(torch.searchsorted(cumulative, torch.tensor([draw], dtype=cumulative.dtype,
                                                                device=cumulative.device), right=True))
        if index >= probabilities.shape[0]:  # rounding at the very top: the last token still allowed
            index = int(torch.nonzero(probabilities).max())
        return index


class SampleAsLogits:
    """A ``transformers`` logits processor that makes ``TokenChooser``'s choice inside ``generate``.

    It returns scores that are ``-inf`` except at the chosen token, so ``generate``'s greedy step picks exactly it.
    Runs after ``generate``'s own processors (the repetition penalty), as custom processors do. Batch size 1.
    """

    def __init__(self, chooser: TokenChooser) -> None:
        self.chooser = chooser

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        token = self.chooser.choose(scores, input_ids)
        chosen = torch.full_like(scores, float("-inf"))
        chosen[:, token] = 0.0
        return chosen
