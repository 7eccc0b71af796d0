"""The engine asks each model what its cache supports (``engine.cache_support``) and falls back to ``generate`` with
a recorded reason; models that cannot take images are refused before anything large loads."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import transformers

from sam3_agent.engine import TRANSFORMERS_VERSION, cache_support
from sam3_agent.engine.cache_support import CacheSupport, probe_cache
from sam3_agent.errors import InputError
from sam3_agent.messages import Message, TextPart
from sam3_agent.tiny.qwen import QWEN_ADDED_TOKENS
from sam3_agent.tiny.qwen3_5 import tiny_config
from sam3_agent.vlm.base import generate
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

IDS = {text: 500 + i for i, (text, _) in enumerate(QWEN_ADDED_TOKENS)}
HYBRID_REASON = "hybrid cache (linear attention): prompt prefixes are reused only whole, as snapshots of the state after them"


class TinyVLM:
    """What ``probe_cache`` reads of a model: its config and whether ``model.model.get_rope_index`` exists."""

    def __init__(self, config, rope: bool = True):
        self.config = config
        self.model = SimpleNamespace(get_rope_index=(lambda *a, **k: None) if rope else None)


def fake_model(config, rope=True):
    return TinyVLM(config, rope)


def qwen3_vl_config():
    return transformers.Qwen3VLConfig(
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, vocab_size=600),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32),
        image_token_id=IDS["<|image_pad|>"],
    )


def test_an_attention_only_cache_runs_the_decoder():
    assert probe_cache(fake_model(qwen3_vl_config())) == CacheSupport(True)


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe"])
def test_a_hybrid_cache_runs_the_decoder_with_whole_snapshots(kind):
    support = probe_cache(fake_model(tiny_config(kind, IDS, 600)))
    assert support == CacheSupport(True, hybrid=True, reason=HYBRID_REASON)
    assert support.as_record() == {"path": "cached decoder", "cache": "hybrid (linear + full attention)",
                                   "reason": HYBRID_REASON}


def test_a_model_without_qwen_positions_decodes_with_generate():
    support = probe_cache(fake_model(qwen3_vl_config(), rope=False))
    assert support == CacheSupport(False, reason="TinyVLM has no Qwen-VL 3-D position index (get_rope_index): the "
                                                 "cached decoder cannot place its tokens")
    assert support.as_record()["path"] == "generate"


def test_a_sliding_window_cache_decodes_with_generate():
    config = transformers.Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                           layer_types=["sliding_attention", "full_attention"])
    config.image_token_id = 5
    support = probe_cache(fake_model(config))
    assert support == CacheSupport(False, reason="TinyVLM's cache holds layers the engine does not know "
                                                 "(DynamicSlidingWindowLayer)", cache="sliding window + full attention")
    assert support.as_record()["cache"] == "sliding window + full attention"


def test_a_changed_cache_class_in_another_transformers_falls_back_and_says_so(monkeypatch):
    class Renamed:  # what the engine would look for if transformers replaced LinearAttentionLayer
        pass

    monkeypatch.setattr(transformers.cache_utils, "LinearAttentionLayer", Renamed)
    monkeypatch.setattr(cache_support, "installed_transformers_version", lambda: "9.0.0")
    support = probe_cache(fake_model(tiny_config("qwen3_5", IDS, 600)))
    assert support == CacheSupport(False, reason=(
        "TinyVLM's cache holds layers the engine does not know (LinearAttentionLayer); the engine was checked "
        f"against transformers {TRANSFORMERS_VERSION}, this is 9.0.0"), cache="linear attention + full attention")


# ---------------------------------------------------------------- through a loaded model


@pytest.fixture(scope="module")
def tiny_qwen3_vl(tmp_path_factory) -> Path:
    from sam3_agent.tiny.qwen import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("support") / "qwen3_vl")


def test_a_model_the_decoder_cannot_run_answers_through_generate_with_its_reason_logged(tiny_qwen3_vl, caplog,
                                                                                        monkeypatch):
    """An unknown architecture (here: a Qwen3-VL whose position index is hidden) runs on the plain path."""
    reference = TransformersQwenVLM.from_pretrained(str(tiny_qwen3_vl), max_new_tokens=6, prefix_cache=False)
    expected = generate(reference, [Message("user", (TextPart("the cup"),))])
    monkeypatch.setattr(reference.model.model, "get_rope_index", None)
    with caplog.at_level(logging.WARNING, logger="sam3_agent.engine.cache_support"):
        plain = TransformersQwenVLM(reference.name, reference.model, reference.processor, device="cpu",
                                    image_size=reference.image_size, max_new_tokens=6)
    assert plain.prefix_store is None
    assert plain.decoding_paths() == {
        "path": "generate", "cache": "attention", "prefix_cache": False,
        "reason": "Qwen3VLForConditionalGeneration has no Qwen-VL 3-D position index (get_rope_index): the cached "
                  "decoder cannot place its tokens"}
    assert [r.getMessage() for r in caplog.records] == [
        f"{reference.name} decodes with generate() (no prefix reuse, no batching): " + plain.decoding_paths()["reason"]]
    assert generate(plain, [Message("user", (TextPart("the cup"),))]) == expected
    batch = plain.generate_batch([[Message("user", (TextPart("the cup"),))]] * 2, stop=threading.Event())
    assert batch == [expected, expected]


def test_a_text_only_model_is_refused_before_loading_with_its_name(tmp_path):
    folder = tmp_path / "qwen3-text"
    transformers.Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                             num_key_value_heads=1, vocab_size=600).save_pretrained(folder)
    with pytest.raises(InputError) as refused:
        TransformersQwenVLM.from_pretrained(str(folder))
    assert str(refused.value) == (
        f"{folder} is a 'qwen3' model, which cannot take images: the agent needs an image-text-to-text model "
        "(e.g. Qwen/Qwen3-VL-8B-Instruct or a Qwen3.5 checkpoint); see docs/models.md")


def test_a_model_whose_processor_takes_no_pixel_bounds_decodes_with_generate(tiny_qwen3_vl):
    """A model with Qwen-VL positions behind a processor of another kind (``image_size=None``) stays off the decoder,
    which lays requests out the Qwen-VL way."""
    reference = TransformersQwenVLM.from_pretrained(str(tiny_qwen3_vl), max_new_tokens=6, prefix_cache=False)
    plain = TransformersQwenVLM(reference.name, reference.model, reference.processor, device="cpu", image_size=None,
                                max_new_tokens=6)
    assert plain.prefix_store is None and plain.decoding_paths() == {
        "path": "generate", "cache": "attention", "prefix_cache": False,
        "reason": "its image processor (Qwen2VLImageProcessor) runs without pixel bounds (not a Qwen-VL one): the "
                  "cached decoder cannot lay out its requests"}
    assert generate(plain, [Message("user", (TextPart("the cup"),))]) == generate(
        reference, [Message("user", (TextPart("the cup"),))])
