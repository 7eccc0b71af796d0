"""Per-model decoding defaults: the token budget and sampling of the main calls and of the verifier.

Sampling comes from the checkpoint's own ``generation_config.json`` (what the model's authors ship and what
``generate`` would use); a folder whose config sets none gets the model card's advice for its family
(``CARD_SAMPLING``). Token budgets are ours (``BUDGETS``). The values, as published:

- Qwen3-VL Instruct (``Qwen/Qwen3-VL-8B-Instruct`` generation_config.json): sampling, temperature 0.7,
  top_p 0.8, top_k 20; the same as the Qwen3-VL README's "Generation Hyperparameters" for Instruct models,
  which also set presence_penalty 1.5 (a serving-engine option ``transformers`` does not have: not applied)
  and out_seq_length 16,384-32,768 (for benchmark answers).
- Qwen3-VL Thinking (model cards of the Thinking editions, vision-language settings): sampling, temperature
  1.0, top_p 0.95, top_k 20, out_seq_length 40,960; Qwen advises against greedy decoding for thinking
  (performance loss and endless repetition).
- Qwen3.5 / Qwen3.6, dense and MoE (``Qwen/Qwen3.5-27B``, ``Qwen/Qwen3.6-27B`` generation_config.json): sampling,
  temperature 1.0, top_p 0.95, top_k 20, for Thinking, their default; the model cards' non-thinking settings are
  temperature 0.7, top_p 0.8, top_k 20; both add presence_penalty 1.5 (not applied, as above).
- Qwen2.5-VL Instruct (``Qwen/Qwen2.5-VL-7B-Instruct`` generation_config.json): repetition_penalty 1.05,
  temperature 0.1, top_p 0.001, top_k 1: a single candidate, so its "sampling" is greedy decoding.

Budgets: one agent round of an Instruct model is a short reasoning and one tool call (a few hundred tokens),
so 2,048 leaves ample room. A Thinking model reasons first and a round needs far more: 8,192 per round
(Qwen's 40,960 is for long benchmark answers; a round rarely needs more, 30 rounds of 40k tokens would take
hours, and a round that hits its budget is reported as truncated and the run goes on).

The verifier (``examine_each_mask``): a verdict is a short answer about one mask, the most likely answer is
the one we want, and a verification is never revisited (no later round profits from a different draw), so an
Instruct model's verifier decodes greedily: the verdict of a mask is then the same on every run and whatever
the seed, batched or not. A Thinking model's verifier reasons before its verdict, where greedy decoding risks
the repetition loops Qwen warns of, so it samples with the model's settings and a budget of 4,096.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from .sampling import GREEDY, Sampling

Family = Literal["qwen3_vl", "qwen2_5_vl", "qwen3_5", "other"]

DEFAULT_SEED = 0

# (thinking?) -> (main budget, verifier budget)
BUDGETS: dict[bool, tuple[int, int]] = {False: (2048, 512), True: (8192, 4096)}

# Model-card sampling per (family, thinking), used when the checkpoint's generation config sets none.
CARD_SAMPLING: dict[tuple[Family, bool], Sampling] = {
    ("qwen3_vl", False): Sampling(do_sample=True, temperature=0.7, top_p=0.8, top_k=20),
    ("qwen3_vl", True): Sampling(do_sample=True, temperature=1.0, top_p=0.95, top_k=20),
    ("qwen2_5_vl", False): Sampling(do_sample=True, temperature=0.1, top_p=0.001, top_k=1),
    ("qwen3_5", True): Sampling(do_sample=True, temperature=1.0, top_p=0.95, top_k=20),
    ("qwen3_5", False): Sampling(do_sample=True, temperature=0.7, top_p=0.8, top_k=20),
}


@dataclass(frozen=True)
class DecodingSettings:
    """What one kind of call decodes with.

    Attributes:
        max_new_tokens: token budget of each call (>= 1).
        sampling: how each token is chosen.

    Raises:
        ValueError: ``max_new_tokens`` below 1.
    """

    max_new_tokens: int
    sampling: Sampling = GREEDY

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")

    def as_record(self) -> dict[str, Any]:
        """Plain JSON values for a trace."""
        return {"max_new_tokens": self.max_new_tokens, **self.sampling.as_record()}


@dataclass(frozen=True)
class ModelDecoding:
    """A model's decoding for the main calls and for the verifier, and where the values came from.

    Attributes:
        main / verify: the settings of each kind of call.
        thinking: the chat template opens ``<think>`` (a Thinking model).
        family: ``"qwen3_vl"``, ``"qwen2_5_vl"``, ``"qwen3_5"`` or ``"other"``.
        source: where the sampling values came from (``"generation_config.json"`` or ``"model card"``).
    """

    main: DecodingSettings
    verify: DecodingSettings
    thinking: bool
    family: Family
    source: str

    def as_record(self, repetition_penalty: float | None = None) -> dict[str, Any]:
        """Plain JSON values for a trace (``repetition_penalty``: the model's, applied to every call)."""
        record: dict[str, Any] = {"main": self.main.as_record(), "verify": self.verify.as_record(),
                                  "thinking": self.thinking, "sampling_source": self.source}
        if repetition_penalty is not None and repetition_penalty != 1.0:
            record["repetition_penalty"] = repetition_penalty
        return record


@dataclass(frozen=True)
class DecodingOverrides:
    """What a user asked for instead of the defaults (``None``: keep the default).

    Attributes:
        greedy: ``True``: greedy decoding for every call; ``False``: sample the main calls (with the model's
            settings or those given here).
        temperature / top_p / top_k: sampling of the main calls (any of them implies sampling).
        seed: seed of every sampled call.
        max_new_tokens / verify_max_new_tokens: budgets of the main and the verification calls.
    """

    greedy: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    max_new_tokens: int | None = None
    verify_max_new_tokens: int | None = None

    def sets_sampling(self) -> bool:
        """True when any sampling value (not only budgets) is given."""
        return any(v is not None for v in (self.greedy, self.temperature, self.top_p, self.top_k, self.seed))


def model_family(model_type: str) -> Family:
    """The family of a ``config.model_type`` (``qwen3_vl_moe`` counts as ``qwen3_vl``, ``qwen3_5_moe`` as ``qwen3_5``)."""
    if model_type.startswith("qwen3_5"):
        return "qwen3_5"
    if model_type.startswith("qwen3_vl"):
        return "qwen3_vl"
    if model_type == "qwen2_5_vl":
        return "qwen2_5_vl"
    return "other"


def sampling_from_config(generation_config: Any) -> Sampling | None:
    """The sampling a ``GenerationConfig`` asks for: ``GREEDY`` when it says ``do_sample=False``, its values when
    it samples, ``None`` when it says nothing (``do_sample`` unset and no temperature, top_p or top_k)."""
    do_sample = getattr(generation_config, "do_sample", None)
    temperature = getattr(generation_config, "temperature", None)
    top_p = getattr(generation_config, "top_p", None)
    top_k = getattr(generation_config, "top_k", None)
    if do_sample is None and temperature is None and top_p is None and top_k is None:
        return None
    if not do_sample:
        return replace(GREEDY, seed=DEFAULT_SEED)
    return Sampling(
        do_sample=True,
        temperature=1.0 if temperature is None else float(temperature),
        top_p=1.0 if top_p is None else float(top_p),
        top_k=0 if top_k is None else int(top_k),
        seed=DEFAULT_SEED,
    )


def model_decoding(generation_config: Any, model_type: str, thinking: bool) -> ModelDecoding:
    """The defaults of a loaded model (see the module docstring for every value and its source).

    Args:
        generation_config: the model's ``GenerationConfig`` (from its ``generation_config.json``).
        model_type: ``model.config.model_type``.
        thinking: whether the chat template opens ``<think>`` in the generation prompt.
    """
    family = model_family(model_type)
    sampling = sampling_from_config(generation_config)
    source = "generation_config.json"
    if sampling is None:
        sampling = CARD_SAMPLING.get((family, thinking))
        source = "model card" if sampling is not None else "greedy (no sampling settings found)"
        sampling = sampling or GREEDY
    main_budget, verify_budget = BUDGETS[thinking]
    verify_sampling = sampling if thinking else replace(GREEDY, seed=sampling.seed)
    return ModelDecoding(
        main=DecodingSettings(main_budget, sampling),
        verify=DecodingSettings(verify_budget, verify_sampling),
        thinking=thinking,
        family=family,
        source=source,
    )


def check_overrides(overrides: DecodingOverrides) -> None:
    """Refuse inconsistent or out-of-range overrides before any model is loaded.

    Raises:
        ValueError: what ``apply_overrides`` would refuse (the message names the value).
    """
    probe = ModelDecoding(DecodingSettings(1, GREEDY), DecodingSettings(1, GREEDY), False, "other", "check")
    apply_overrides(probe, overrides)


def apply_overrides(defaults: ModelDecoding, overrides: DecodingOverrides) -> ModelDecoding:
    """``defaults`` with what ``overrides`` sets.

    ``greedy=True`` makes every call greedy (sampling values given with it are an error); temperature, top_p or
    top_k make the main calls sample (from the model's settings, these replacing theirs); the seed applies to
    every call.

    Raises:
        ValueError: greedy decoding asked together with sampling values, or a value out of range.
    """
    main, verify = defaults.main, defaults.verify
    shaping = {k: v for k, v in (("temperature", overrides.temperature), ("top_p", overrides.top_p),
                                 ("top_k", overrides.top_k)) if v is not None}
    if overrides.greedy and shaping:
        raise ValueError(f"greedy decoding takes no sampling values, got {', '.join(sorted(shaping))}: drop them "
                         "or ask for sampling")
    if overrides.greedy:
        main = replace(main, sampling=replace(GREEDY, seed=main.sampling.seed))
        verify = replace(verify, sampling=replace(GREEDY, seed=verify.sampling.seed))
    elif overrides.greedy is False or shaping:
        base = main.sampling if main.sampling.do_sample else Sampling(do_sample=True, seed=main.sampling.seed)
        main = replace(main, sampling=replace(base, do_sample=True, **shaping))
    if overrides.seed is not None:
        main = replace(main, sampling=replace(main.sampling, seed=overrides.seed))
        verify = replace(verify, sampling=replace(verify.sampling, seed=overrides.seed))
    if overrides.max_new_tokens is not None:
        main = replace(main, max_new_tokens=overrides.max_new_tokens)
    if overrides.verify_max_new_tokens is not None:
        verify = replace(verify, max_new_tokens=overrides.verify_max_new_tokens)
    return replace(defaults, main=main, verify=verify)
