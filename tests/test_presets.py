"""Backends built from presets."""

from __future__ import annotations

from sam3_agent.presets import BackendSettings, build_backends
from sam3_agent.prompts import load_prompts


def test_local_vlm_has_both_system_prompts_cached_after_build():
    backends = build_backends(BackendSettings(preset="tiny"))
    prompts = load_prompts()
    # already computed by build_backends: nothing left to prefill
    assert backends.vlm.prefill_system_prompts([prompts.main_system, prompts.verify_system]) == 0
    assert backends.vlm.prefill_system_prompts(["a system prompt never seen before"]) > 0
