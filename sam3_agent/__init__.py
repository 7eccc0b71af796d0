"""SAM3 Agent: a vision-language model reasons in rounds and uses SAM 3 to segment what a complex query points at.

The public API (README "Library use")::

    from sam3_agent import Agent, BackendSettings, build_backends, load_image

    backends = build_backends(BackendSettings(preset="real"))      # or vlm_model=..., sam3_model=...
    agent = Agent.from_backends(backends)
    run = agent.start(load_image("photo.jpg"), "the leftmost child wearing a blue vest")
    for event in run:                                               # RoundStarted, TokenStreamed, ... RunFinished
        ...
    save_trace(run.trace, "out/")                                   # load_trace("out/") reads it back

Names are imported on first use, so ``import sam3_agent`` (and the light modules below it: ``errors``, ``limits``)
stays cheap; torch and transformers load with the first name that needs them.

The package, wing by wing (each folder's docstring says what lives there and what it may import):
the ground floor (``types``, ``messages``, ``mask_set``, ``events``, ``errors``, ``limits``, ``rle``, ``images``,
``edit_ops``, ``shared``, ``package_files``: where the shipped prompts and example photos lie), ``presets``, and
``agent/``, ``imaging/``, ``sam/``, ``vlm/``, ``engine/``, ``models/``, ``trace/``, ``correct/``, ``cli/``, ``ui/``,
``datasets/``, ``bench/``, ``smoke/``, ``tiny/``.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it (one source: the module; this table only says where)
_EXPORTS = {
    "Agent": ".agent.loop",
    "AgentConfig": ".agent.config",
    "AgentRun": ".agent.loop",
    "Trace": ".types",
    "Round": ".types",
    "Masks": ".mask_set",
    "load_trace": ".correct.saved",  # a trace folder, trace.json, trace .zip or bundle .zip
    "load_trace_zip": ".correct.saved",
    "save_trace": ".trace.io",
    "TraceWriter": ".trace.io",
    "BackendSettings": ".presets",
    "Backends": ".presets",
    "build_backends": ".presets",
    "build_point_segmenter": ".presets",
    "load_image": ".images",
    "ASSETS_DIR": ".package_files",
    "Sam3AgentError": ".errors",
    "InputError": ".errors",
    "BackendError": ".errors",
    "TraceFormatError": ".errors",
}

__all__ = sorted(_EXPORTS)

def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sam3_agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
