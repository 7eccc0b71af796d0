"""The tiny Qwen presets carry the released models' chat templates, added tokens, processor settings and generation
configs, loaded back through ``from_pretrained`` as the real checkpoints are (``sam3_agent.tiny.qwen``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image
from transformers import AutoProcessor, GenerationConfig

from sam3_agent.engine import TRANSFORMERS_VERSION
from sam3_agent.engine.decoding import DecodingSettings
from sam3_agent.engine.sampling import GREEDY, Sampling
from sam3_agent.tiny.qwen import QWEN_ADDED_TOKENS, build_tiny_qwen
from sam3_agent.vlm.transformers_qwen import TransformersQwenVLM

ROOT = Path(__file__).resolve().parent.parent
IMAGE = Image.new("RGB", (64, 64))


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("presets")
    return {
        "instruct": build_tiny_qwen(root / "instruct", kind="qwen3_vl"),
        "thinking": build_tiny_qwen(root / "thinking", kind="qwen3_vl", thinking=True),
        "qwen2_5_vl": build_tiny_qwen(root / "qwen2_5_vl", kind="qwen2_5_vl"),
    }


def render(folder: Path, chat: list[dict], generation_prompt: bool = True) -> str:
    processor = AutoProcessor.from_pretrained(str(folder))
    return processor.apply_chat_template(chat, add_generation_prompt=generation_prompt, tokenize=False)


AGENT_CHAT = [
    {"role": "system", "content": "You segment."},
    {"role": "user", "content": [{"type": "image", "image": IMAGE}, {"type": "text", "text": "Query: the cup"}]},
    {"role": "assistant", "content": "I look first.\n</think>\n\n<tool>segment cup</tool>"},
    {"role": "user", "content": [{"type": "text", "text": "found 2:"}, {"type": "image", "image": IMAGE}]},
]
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


# ---------------------------------------------------------------- chat templates


def test_instruct_renders_as_qwen3_vl_instruct(folders):
    late_system = AGENT_CHAT + [{"role": "system", "content": "dropped"}]
    assert render(folders["instruct"], late_system) == (
        "<|im_start|>system\nYou segment.<|im_end|>\n"
        f"<|im_start|>user\n{VISION}Query: the cup<|im_end|>\n"
        "<|im_start|>assistant\nI look first.\n</think>\n\n<tool>segment cup</tool><|im_end|>\n"
        f"<|im_start|>user\nfound 2:{VISION}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_thinking_drops_earlier_reasoning_and_opens_think(folders):
    assert render(folders["thinking"], AGENT_CHAT) == (
        "<|im_start|>system\nYou segment.<|im_end|>\n"
        f"<|im_start|>user\n{VISION}Query: the cup<|im_end|>\n"
        "<|im_start|>assistant\n<tool>segment cup</tool><|im_end|>\n"
        f"<|im_start|>user\nfound 2:{VISION}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    # an assistant turn after the last query keeps its reasoning, re-wrapped; later system turns are kept
    after = AGENT_CHAT + [{"role": "assistant", "content": "\nchecking\n</think>\n\nmask 1"},
                          {"role": "system", "content": "kept"}]
    assert render(folders["thinking"], after, generation_prompt=False).endswith(
        "<|im_start|>assistant\n<think>\nchecking\n</think>\n\nmask 1<|im_end|>\n<|im_start|>system\nkept<|im_end|>\n"
    )


def test_qwen2_5_vl_adds_its_default_system_prompt(folders):
    chat = [{"role": "user", "content": [{"type": "image", "image": IMAGE}, {"type": "text", "text": "hi"}]}]
    assert render(folders["qwen2_5_vl"], chat) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{VISION}hi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render(folders["qwen2_5_vl"], AGENT_CHAT).startswith("<|im_start|>system\nYou segment.<|im_end|>\n")


# ---------------------------------------------------------------- tokens, processors, generation configs


@pytest.mark.parametrize("name", ["instruct", "qwen2_5_vl"])
def test_qwens_added_tokens_in_order_with_their_special_flags(folders, name):
    tokenizer = AutoProcessor.from_pretrained(str(folders[name])).tokenizer
    ids = [tokenizer.convert_tokens_to_ids(text) for text, _ in QWEN_ADDED_TOKENS]
    assert ids == sorted(ids) and len(set(ids)) == len(QWEN_ADDED_TOKENS)
    added = {t.content: t.special for t in tokenizer.added_tokens_decoder.values()}
    assert added == dict(QWEN_ADDED_TOKENS)
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    text = "<think>a</think><tool_call>b</tool_call><|im_end|>"
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text[: -len("<|im_end|>")]


def test_image_processors_have_the_released_settings(folders):
    qwen3 = AutoProcessor.from_pretrained(str(folders["instruct"])).image_processor
    assert (qwen3.patch_size, qwen3.merge_size, qwen3.temporal_patch_size) == (16, 2, 2)
    assert (list(qwen3.image_mean), list(qwen3.image_std)) == ([0.5] * 3, [0.5] * 3)
    assert (qwen3.size["shortest_edge"], qwen3.size["longest_edge"]) == (65_536, 16_777_216)
    qwen25 = AutoProcessor.from_pretrained(str(folders["qwen2_5_vl"])).image_processor
    assert (qwen25.patch_size, qwen25.merge_size, qwen25.temporal_patch_size) == (14, 2, 2)
    assert list(qwen25.image_mean) == pytest.approx([0.48145466, 0.4578275, 0.40821073])
    assert (qwen25.size["shortest_edge"], qwen25.size["longest_edge"]) == (3_136, 12_845_056)


@pytest.mark.parametrize("name, values, defaults", [
    ("instruct", {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20},
     (DecodingSettings(2048, Sampling(True, 0.7, 0.8, 20)), DecodingSettings(512, GREEDY))),
    ("thinking", {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20},
     (DecodingSettings(8192, Sampling(True, 1.0, 0.95, 20)), DecodingSettings(4096, Sampling(True, 1.0, 0.95, 20)))),
    ("qwen2_5_vl", {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.1, "top_p": 0.001, "top_k": 1},
     (DecodingSettings(2048, Sampling(True, 0.1, 0.001, 1)), DecodingSettings(512, GREEDY))),
])
def test_generation_configs_are_the_released_ones_and_set_the_defaults(folders, name, values, defaults):
    saved = GenerationConfig.from_pretrained(str(folders[name]))
    assert {key: getattr(saved, key) for key in values} == values
    tokenizer = AutoProcessor.from_pretrained(str(folders[name])).tokenizer
    assert saved.eos_token_id == [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    vlm = TransformersQwenVLM.from_pretrained(str(folders[name]))
    assert (vlm.defaults.main, vlm.defaults.verify) == defaults
    assert vlm.defaults.thinking is (name == "thinking")
    assert vlm.decoding == defaults[0]  # a plain from_pretrained decodes with the model's own settings


def test_qwen2_5_vl_has_no_thinking_edition(tmp_path):
    with pytest.raises(ValueError, match="Qwen2.5-VL has no Thinking edition"):
        build_tiny_qwen(tmp_path / "x", kind="qwen2_5_vl", thinking=True)


def test_requirements_pin_the_transformers_version_the_engine_names():
    pins = re.findall(r"^transformers==(\S+)$", (ROOT / "requirements.txt").read_text(), flags=re.MULTILINE)
    assert pins == [TRANSFORMERS_VERSION]


def test_the_tiny_vlm_kinds_offered_are_those_the_presets_build():
    import typing

    from sam3_agent.presets import TinyVlmKind
    from sam3_agent.tiny import TINY_VLM_KINDS
    from sam3_agent.ui.settings import parse_settings

    assert typing.get_args(TinyVlmKind) == TINY_VLM_KINDS
    assert parse_settings(["--preset", "tiny", "--tiny-vlm", "qwen3_5"])[0].backend.tiny_vlm_kind == "qwen3_5"
