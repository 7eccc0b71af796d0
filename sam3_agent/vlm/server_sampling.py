"""Which decoding fields a server is sent: none unless asked, so the server's own settings apply.

vLLM and SGLang decode with the model's ``generation_config.json`` when a request sets no sampling field (vLLM's
``--generation-config auto``, its default), Ollama with the model's Modelfile: the settings the model's authors
recommend, which the local path uses too (``engine.decoding``). Qwen3-VL samples (Instruct: temperature 0.7, top-p
0.8, top-k 20; Thinking: 1.0, 0.95, 20), and greedy decoding of a Thinking model risks the endless repetition Qwen
warns of; so the client sends no ``temperature`` unless a flag asks for one. The flags map as on the local path:

- ``--decoding greedy``: ``temperature: 0`` on every call (the main and the verification calls);
- ``--temperature`` / ``--top-p`` / ``--top-k``: sent with the main calls (``top_k`` is an extension vLLM, SGLang
  and Ollama read; the OpenAI API itself has none); ``--decoding sample`` alone sends nothing (the server's own
  sampling);
- ``--seed``: ``seed`` on every call (vLLM, SGLang and Ollama honour it).

The verification calls send nothing unless greedy decoding or a seed is asked for: an Instruct model's verifier
decodes greedily on the local path, but a server does not say whether its model reasons first (where greedy
decoding risks repetition), so the server's own settings stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerSampling:
    """The decoding fields sent with the main and with the verification calls (empty: none, the server's own)."""

    main: dict[str, float | int]
    verify: dict[str, float | int]

    def as_record(self, max_new_tokens: int, verify_max_new_tokens: int) -> dict[str, Any]:
        """What the trace's ``settings["decoding"]`` records: the budgets and the fields sent, and their source."""
        given = bool(self.main or self.verify)
        return {"main": {"max_new_tokens": max_new_tokens, "sent": dict(self.main)},
                "verify": {"max_new_tokens": verify_max_new_tokens, "sent": dict(self.verify)},
                "sampling_source": "flags" if given else "the server's own (no sampling field sent)"}


def server_sampling(overrides: Any) -> ServerSampling:
    """The fields ``overrides`` (an ``engine.decoding.DecodingOverrides``, checked by ``check_overrides``) asks
    for; see the module docstring."""
    main: dict[str, float | int] = {}
    verify: dict[str, float | int] = {}
    if overrides.greedy:
        main["temperature"] = verify["temperature"] = 0
    for name in ("temperature", "top_p", "top_k"):
        if getattr(overrides, name) is not None:
            main[name] = getattr(overrides, name)
    if overrides.seed is not None:
        main["seed"] = verify["seed"] = overrides.seed
    return ServerSampling(main, verify)
