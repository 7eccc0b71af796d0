"""GPU memory: what the default models need, the settings picked for a smaller GPU, and the refusal that names the
flags when nothing fits. No GPU here: free memory and the loaders are stand-ins; the arithmetic is the real one."""

from __future__ import annotations

import json

import pytest

from sam3_agent import presets
from sam3_agent.errors import BackendError
from sam3_agent.models.gpu_memory import (
    DEFAULT_KV_BYTES_PER_TOKEN,
    GIB,
    MIB,
    PLANS,
    checkpoint_files,
    estimate_bytes,
    kv_bytes_per_token,
    plan_for_gpu,
)
from sam3_agent.presets import Backends, BackendSettings, build_backends, tiny_model_paths
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.settings import AppSettings
from sam3_agent.vlm.scripted import ScriptedVLM

QWEN3_VL_8B = 17_500_000_000  # bytes of bfloat16 weights
QWEN3_VL_8B_TEXT = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                    "hidden_size": 4096}


def test_the_kv_cache_of_qwen3_vl_8b_is_144_kib_per_token(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_vl", "text_config": QWEN3_VL_8B_TEXT}))
    assert kv_bytes_per_token(config) == 2 * 36 * 8 * 128 * 2 == 144 * 1024 == DEFAULT_KV_BYTES_PER_TOKEN
    assert kv_bytes_per_token(None) == DEFAULT_KV_BYTES_PER_TOKEN


def test_the_full_plan_with_qwen3_vl_8b_needs_about_29_5_gib():
    full = PLANS[0]
    # 17.5 GB weights + SAM 3 in float32 (0.86 B x 4) + 1 GiB features + 256 MiB upsampling + 1.5 GiB margin
    # + 2 GiB prefix store + the larger of a main request (1600 + 6 x 1280 + 1500 + 1024 tokens: photo, overlay and
    # its 4 tiles) and a batch of 8 verifications (8 x (900 + 3 x 1280) tokens), at 144 KiB per token
    expected = (QWEN3_VL_8B + 860_000_000 * 4 + GIB + 256 * MIB + int(1.5 * GIB) + 2 * GIB
                + 8 * (900 + 3 * 1280) * 144 * 1024)
    assert estimate_bytes(full, QWEN3_VL_8B, DEFAULT_KV_BYTES_PER_TOKEN) == expected
    assert round(expected / GIB, 1) == 29.5


@pytest.mark.parametrize(("free_gib", "plan", "sam3", "batch"), [
    (79.0, "full", "float32", 8),        # H100 80 GB
    (39.0, "full", "float32", 8),        # A100 40 GB / a ZeroGPU slice
    (23.2, "reduced", "bfloat16", 2),    # RTX 4090 / 3090 24 GB
    (22.0, "reduced", "bfloat16", 2),    # A10G / L4 24 GB (22.5 GiB, less the CUDA context)
    (21.0, "minimal", "bfloat16", 1),    # a 24 GB card with another process on it
])
def test_the_plan_follows_the_free_memory(free_gib, plan, sam3, batch):
    chosen = plan_for_gpu(int(free_gib * GIB), QWEN3_VL_8B)
    assert (chosen.name, chosen.sam3_dtype, chosen.verify_batch_size) == (plan, sam3, batch)
    assert chosen.estimate_bytes <= free_gib * GIB


def test_a_gpu_too_small_is_refused_with_the_sizes_and_the_flags_to_use():
    with pytest.raises(BackendError) as raised:
        plan_for_gpu(int(15.5 * GIB), QWEN3_VL_8B, vlm_name="Qwen/Qwen3-VL-8B-Instruct")
    assert str(raised.value) == (
        "Qwen/Qwen3-VL-8B-Instruct (16.3 GiB of weights) and SAM 3 need about 20.8 GiB of GPU memory even with the "
        "smallest settings, and 15.5 GiB are free: use a smaller VLM (--vlm-model Qwen/Qwen3-VL-4B-Instruct or "
        "Qwen/Qwen3-VL-2B-Instruct), serve the VLM elsewhere (--vlm-server URL --vlm-server-model NAME), or run on "
        "the CPU (--device cpu, slow)")


def test_with_the_vlm_on_a_server_sam3_alone_fits_a_small_gpu():
    assert plan_for_gpu(8 * GIB, 0).name == "full"


def test_a_folders_weights_and_config_are_read_from_disk():
    _, vlm = tiny_model_paths()
    weights, config = checkpoint_files(str(vlm))
    assert weights == (vlm / "model.safetensors").stat().st_size and config == vlm / "config.json"


@pytest.fixture
def qwen3_vl_8b_folder(tmp_path):
    """A folder the size of Qwen3-VL-8B-Instruct's weights (a sparse file: no disk used) with its text config."""
    folder = tmp_path / "qwen3-vl-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "text_config": QWEN3_VL_8B_TEXT}))
    with open(folder / "model.safetensors", "wb") as handle:
        handle.truncate(QWEN3_VL_8B)
    return folder


def test_a_24_gb_gpu_gets_the_reduced_settings_and_the_trace_records_them(qwen3_vl_8b_folder, monkeypatch):
    loaded = {}
    monkeypatch.setattr(presets, "free_gpu_bytes", lambda: int(23.2 * GIB))
    monkeypatch.setattr(presets, "_segmenter", lambda *args: loaded.setdefault("sam3", args) and "sam3")
    monkeypatch.setattr(presets, "_local_vlm", lambda *args: loaded.setdefault("vlm", args) and ScriptedVLM([]))
    monkeypatch.setattr(presets, "_decoding_views", lambda vlm, *rest: (vlm, vlm, {"main": {"max_new_tokens": 7}}))
    backends = build_backends(BackendSettings(preset="real", device="cuda", vlm_model=str(qwen3_vl_8b_folder),
                                              sam3_model="facebook/sam3"))
    # SAM 3: model, device, dtype, feature cache bytes; VLM: model, device, min_pixels, max_pixels, prefix cache,
    # prefix cache bytes
    assert loaded["sam3"] == ("facebook/sam3", "cuda", "bfloat16", 256 * MIB)
    assert loaded["vlm"][3] == 640 * 28 * 28 and loaded["vlm"][5] == 512 * MIB
    assert backends.settings["sam3_dtype"] == "bfloat16" and backends.settings["verify_batch_size"] == 2
    assert backends.settings["memory_plan"].startswith("reduced: SAM 3 in bfloat16, verification batches of 2")
    assert backends.settings["max_pixels"] == 640 * 28 * 28


def test_explicit_settings_win_over_the_plan(qwen3_vl_8b_folder, monkeypatch):
    loaded = {}
    monkeypatch.setattr(presets, "free_gpu_bytes", lambda: int(23.2 * GIB))
    monkeypatch.setattr(presets, "_segmenter", lambda *args: loaded.setdefault("sam3", args) and "sam3")
    monkeypatch.setattr(presets, "_local_vlm", lambda *args: loaded.setdefault("vlm", args) and ScriptedVLM([]))
    monkeypatch.setattr(presets, "_decoding_views", lambda vlm, *rest: (vlm, vlm, {"main": {"max_new_tokens": 7}}))
    build_backends(BackendSettings(preset="real", device="cuda", vlm_model=str(qwen3_vl_8b_folder),
                                   sam3_model="facebook/sam3", sam3_dtype="float32", max_pixels=1000 * 28 * 28))
    assert loaded["sam3"][2] == "float32" and loaded["vlm"][3] == 1000 * 28 * 28


def test_the_app_verifies_in_batches_of_the_plans_size():
    idle = ScriptedVLM([])
    factory = AgentFactory(AppSettings(), Backends(idle, idle, object(), {"verify_batch_size": 2}))
    assert factory.new_agent(5, 0.5).config.verify_batch_size == 2
    factory = AgentFactory(AppSettings(), Backends(idle, idle, object(), {}))
    assert factory.new_agent(5, 0.5).config.verify_batch_size == 8


def test_on_the_cpu_and_with_the_tiny_models_no_plan_is_made():
    backends = build_backends(BackendSettings(preset="tiny"))
    assert "memory_plan" not in backends.settings
    assert (backends.settings["sam3_dtype"], backends.settings["verify_batch_size"]) == ("float32", 8)


# Qwen3.6-27B and Qwen3.6-35B-A3B text configs (public copies; only the fields the plan reads): 64 / 40 layers, every
# fourth one full attention, the others Gated DeltaNet.
QWEN3_6_27B_TEXT = {"num_hidden_layers": 64, "full_attention_interval": 4, "num_attention_heads": 24,
                    "num_key_value_heads": 4, "head_dim": 256, "hidden_size": 5120}
QWEN3_6_35B_A3B_TEXT = {**QWEN3_6_27B_TEXT, "num_hidden_layers": 40, "num_key_value_heads": 2, "hidden_size": 2048}


@pytest.mark.parametrize(("text", "expected"), [
    (QWEN3_6_27B_TEXT, 2 * 16 * 4 * 256 * 2),  # 64 KiB: 16 attention layers of 64
    (QWEN3_6_35B_A3B_TEXT, 2 * 10 * 2 * 256 * 2),  # 20 KiB: 10 of 40
    ({**QWEN3_6_27B_TEXT, "layer_types": ["linear_attention"] * 3 + ["full_attention"]}, 2 * 1 * 4 * 256 * 2),
])
def test_only_the_attention_layers_of_a_hybrid_model_count_per_token(tmp_path, text, expected):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_5", "text_config": text}))
    assert kv_bytes_per_token(config) == expected
