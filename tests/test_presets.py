"""Backends built from presets."""

from __future__ import annotations

from sam3_agent.agent.prompts import load_prompts
from sam3_agent.presets import BackendSettings, build_backends


def test_local_vlm_has_both_system_prompts_cached_after_build():
    backends = build_backends(BackendSettings(preset="tiny"))
    prompts = load_prompts()
    # already computed by build_backends: nothing left to prefill
    assert backends.vlm.prefill_system_prompts([prompts.main_system, prompts.verify_system]) == 0
    assert backends.vlm.prefill_system_prompts(["a system prompt never seen before"]) > 0


def test_prefix_cache_can_be_turned_off_and_is_recorded():
    on = build_backends(BackendSettings(preset="tiny"))
    off = build_backends(BackendSettings(preset="tiny", prefix_cache=False))
    assert (on.settings["prefix_cache"], off.settings["prefix_cache"]) == (True, False)
    assert on.vlm.prefix_store is not None and off.vlm.prefix_store is None
    assert off.vlm.prefill_system_prompts(["a system prompt never seen before"]) == 0  # nothing is kept


def test_the_apps_point_model_shares_sam3s_backbone_on_the_tiny_preset(tmp_path):
    from sam3_agent.presets import build_point_segmenter, share_sam3_backbone
    from sam3_agent.ui.run.runner import AgentFactory
    from sam3_agent.ui.settings import AppSettings

    factory = AgentFactory.load(AppSettings(backend=BackendSettings(preset="tiny")))
    point, segmenter = factory.point_segmenter, factory.backends.segmenter
    assert point is build_point_segmenter("tiny") and point._shared is not None and point._shared.source is segmenter
    assert share_sam3_backbone(point, object()) is False  # not a SAM 3 segmenter: nothing to share


def test_server_backend_gets_timeouts_and_pixel_bounds_and_records_them(monkeypatch):
    monkeypatch.setenv("SAM3_AGENT_VLM_SERVER_READ_TIMEOUT", "33")
    backends = build_backends(BackendSettings(preset="tiny", vlm_server="http://127.0.0.1:9/v1", vlm_server_model="q",
                                              vlm_server_deadline=90, max_pixels=500_000))
    vlm = backends.vlm
    assert (vlm.timeouts.connect, vlm.timeouts.read, vlm.timeouts.deadline) == (10.0, 33.0, 90.0)
    assert (vlm.image_limits.min_pixels, vlm.image_limits.max_pixels) == (200_704, 500_000)
    assert backends.settings["vlm_server_timeouts"] == {"connect": 10.0, "read": 33.0, "deadline": 90.0}
    assert (backends.settings["min_pixels"], backends.settings["max_pixels"]) == (200_704, 500_000)
