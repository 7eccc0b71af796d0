"""Tiny random-weight Qwen2.5-VL / Qwen3-VL checkpoints for offline tests and demos.

``build_tiny_qwen`` writes a folder that ``TransformersQwenVLM.from_pretrained`` (and plain
``AutoModelForImageTextToText`` / ``AutoProcessor``) load exactly like a real checkpoint: the real
architecture classes with shrunken sizes, a byte-level BPE tokenizer trained here on a little text,
Qwen's special tokens, our own chat template, and a small image-pixel budget so images cost few
tokens. Nothing is downloaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal


from .checkpoint import is_built, save_model_and_processor, seeded_model, write_checkpoint

logger = logging.getLogger(__name__)

BUILD_VERSION = "sam3_agent tiny qwen v1"
MARKER_FILE = "TINY_BUILD"

# Image-pixel budget of the tiny processors (pixels after resizing). An image token covers 32*32 px
# in Qwen3-VL (16 px patches merged 2x2) and 28*28 px in Qwen2.5-VL, so an image costs at most
# 16 (Qwen3-VL) or 20 (Qwen2.5-VL) tokens, and at least one.
TINY_MIN_PIXELS = 32 * 32
TINY_MAX_PIXELS = 128 * 128

# Tokens with a fixed role in Qwen's vocabulary. ``special=True`` ones are dropped by
# ``skip_special_tokens``; the others are added tokens kept in decoded text, as in real Qwen3.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
NON_SPECIAL_ADDED_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")

BPE_VOCAB_SIZE = 600  # 256 byte symbols + merges; small enough for a 32-wide embedding

# Text the tiny tokenizer is trained on: plain English plus the agent's tool syntax, so that
# typical prompts and outputs take a reasonable number of tokens.
_TRAINING_TEXT = """
You are a careful assistant that finds objects in images. Look at the image and think step by step.
The user asks for the person on the left holding a cup of coffee. There are two people in the image.
Segment the phrase that names the object, then examine each mask and select the masks that match.
If nothing in the image matches the query, report that there is no mask.
The cat is sitting on the table next to the window. The rocket stands on the launch pad.
An astronaut in a white suit holds a helmet. A cup of coffee on a saucer with a spoon.
Which mask shows the largest dog? Mask 1 covers the red car; mask 2 covers the blue bicycle.
<think>The query asks for the cup. I will segment "cup" first.</think>
<tool_call>{"name": "segment_phrase", "parameters": {"text_prompt": "cup"}}</tool_call>
<tool_call>{"name": "examine_each_mask", "parameters": {}}</tool_call>
<tool_call>{"name": "select_masks_and_return", "parameters": {"final_answer_masks": [1, 2]}}</tool_call>
<tool_call>{"name": "report_no_mask", "parameters": {}}</tool_call>
<tool>{"name": "segment_phrase", "parameters": {"text_prompt": "white mug"}}</tool>
<verdict>Accept</verdict> <verdict>Reject</verdict>
system user assistant image text the a an of in on at to and or with for is are was were this that
0 1 2 3 4 5 6 7 8 9 10 11 12 100 ( ) [ ] { } : ; , . ! ? " ' - _ / \\ * # = + < >
"""

# Our own chat template: <|im_start|>role\\n...<|im_end|> turns; an image becomes
# <|vision_start|><|image_pad|><|vision_end|> (the processor expands the pad to the image's tokens).
_CONTENT_MACRO = (
    "{%- macro render_content(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for item in content -%}"
    "{%- if item.type == 'image' or 'image' in item -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif item.type == 'text' -%}{{ item.text }}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)
# Newlines are written as {{ '\n' }} so that Jinja's whitespace control cannot eat them.
_TURNS = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message.role }}{{ '\n' }}{{ render_content(message.content) }}<|im_end|>{{ '\n' }}"
    "{%- endfor -%}"
)


def chat_template(thinking: bool) -> str:
    """The Jinja chat template of the tiny models; with ``thinking`` the generation prompt opens ``<think>``."""
    generation_prompt = "<|im_start|>assistant{{ '\n' }}" + ("<think>{{ '\n' }}" if thinking else "")
    return _CONTENT_MACRO + _TURNS + "{%- if add_generation_prompt -%}" + generation_prompt + "{%- endif -%}"


def is_complete_build(out_dir: Path) -> bool:
    """True when ``out_dir`` holds a finished build of this builder version."""
    marker = Path(out_dir) / MARKER_FILE
    return marker.is_file() and marker.read_text(encoding="utf-8").startswith(BUILD_VERSION)


def build_tiny_qwen(
    out_dir: Path,
    kind: Literal["qwen2_5_vl", "qwen3_vl"] = "qwen3_vl",
    thinking: bool = False,
    seed: int = 0,
) -> Path:
    """Build and save a tiny random-weight Qwen-VL checkpoint (model, processor, tokenizer, template).

    The folder loads offline with ``from_pretrained`` like a real checkpoint. The build is skipped
    when ``out_dir`` already holds a complete build (a marker file with ``BUILD_VERSION`` and the
    arguments); files are written to a temporary folder first and the marker is moved in last, so
    an interrupted build is never mistaken for a complete one.

    Args:
        out_dir: folder to write (created if missing).
        kind: ``"qwen3_vl"`` (Qwen3VLForConditionalGeneration) or ``"qwen2_5_vl"``.
        thinking: when True the chat template's generation prompt ends with ``"<think>\\n"``,
            like Qwen's Thinking models.
        seed: seeds the weights (the global torch RNG state is restored afterwards).

    Returns:
        ``out_dir`` as a ``Path``.

    Raises:
        ValueError: for an unknown ``kind``.
    """
    if kind not in ("qwen2_5_vl", "qwen3_vl"):
        raise ValueError(f"unknown tiny Qwen kind {kind!r}: use 'qwen3_vl' or 'qwen2_5_vl'")
    out_dir = Path(out_dir)
    signature = f"{BUILD_VERSION}\nkind={kind}\nthinking={thinking}\nseed={seed}\n"
    if is_built(out_dir, MARKER_FILE, signature):
        logger.debug("tiny %s already built in %s", kind, out_dir)
        return out_dir
    processor = _build_processor(kind, thinking)
    model = _build_model(kind, processor.tokenizer, seed)
    write_checkpoint(out_dir, MARKER_FILE, signature, save_model_and_processor(model, processor))
    logger.info("built tiny %s (thinking=%s, seed=%d) in %s", kind, thinking, seed, out_dir)
    return out_dir


def _build_tokenizer(thinking: bool):
    """A byte-level BPE trained on ``_TRAINING_TEXT``, wrapped as ``Qwen2Tokenizer`` with Qwen's tokens."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    # The same pre-tokenization as Qwen2Tokenizer, so the learned merges fit its pipeline.
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    lines = [line for line in _TRAINING_TEXT.splitlines() if line.strip()]
    bpe.train_from_iterator(lines, trainer=trainer)
    model_state = _bpe_vocab_and_merges(bpe)

    tokenizer = Qwen2Tokenizer(
        vocab=model_state[0],
        merges=model_state[1],
        unk_token=None,
        eos_token="<|endoftext|>",  # switched to <|im_end|> below, once the tokens are in Qwen's order
        pad_token="<|endoftext|>",
        bos_token=None,
        errors="replace",
        model_max_length=32768,
    )
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS], special_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED_TOKENS])
    tokenizer.eos_token = "<|im_end|>"  # a chat model's turn ends with <|im_end|>
    tokenizer.chat_template = chat_template(thinking)
    return tokenizer


def _bpe_vocab_and_merges(bpe) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges of a trained ``tokenizers`` BPE, read from its JSON form."""
    import json

    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    return dict(state["vocab"]), merges


def _build_processor(kind: str, thinking: bool):
    """The processor of the given kind with the tiny tokenizer and a small image-pixel budget."""
    from transformers import (
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen3VLProcessor,
    )

    tokenizer = _build_tokenizer(thinking)
    size = {"shortest_edge": TINY_MIN_PIXELS, "longest_edge": TINY_MAX_PIXELS}
    if kind == "qwen3_vl":
        from transformers import Qwen3VLVideoProcessor

        # Qwen3-VL: 16 px patches, mean/std 0.5 (as in the released preprocessor configs)
        image_processor = Qwen2VLImageProcessor(
            size=size, patch_size=16, temporal_patch_size=2, merge_size=2,
            image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
        )
        video_processor = Qwen3VLVideoProcessor(size=size, patch_size=16, temporal_patch_size=2, merge_size=2)
        return Qwen3VLProcessor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=video_processor,
            chat_template=tokenizer.chat_template,
        )
    from transformers import Qwen2VLVideoProcessor

    # Qwen2.5-VL: 14 px patches, CLIP mean/std (the image processor's defaults)
    image_processor = Qwen2VLImageProcessor(size=size, patch_size=14, temporal_patch_size=2, merge_size=2)
    video_processor = Qwen2VLVideoProcessor(size=size, patch_size=14, temporal_patch_size=2, merge_size=2)
    return Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=tokenizer.chat_template,
    )


def _build_model(kind: str, tokenizer, seed: int):
    """A seeded random-weight model of the real architecture with shrunken sizes."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    token_ids = dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    # hidden 32 with 2 heads -> head_dim 16; the 3 mrope sections (t, h, w) must sum to head_dim / 2.
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        pad_token_id=ids["<|endoftext|>"],
    )
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32,
                  spatial_merge_size=2, temporal_patch_size=2)
    if kind == "qwen3_vl":
        from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

        config = Qwen3VLConfig(
            text_config=dict(
                text,
                head_dim=16,
                rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                 "mrope_section": [4, 2, 2], "mrope_interleaved": True},
            ),
            vision_config=dict(vision, patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0]),
            tie_word_embeddings=False,
            **token_ids,
        )
        model_cls = Qwen3VLForConditionalGeneration
    else:
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        config = Qwen2_5_VLConfig(
            text_config=dict(
                text,
                rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [4, 2, 2]},
                bos_token_id=None,
                eos_token_id=ids["<|im_end|>"],
            ),
            vision_config=dict(vision, patch_size=14, window_size=112, fullatt_block_indexes=[0]),
            tie_word_embeddings=False,
            **token_ids,
        )
        model_cls = Qwen2_5_VLForConditionalGeneration

    return with_greedy_generation(seeded_model(lambda: model_cls(config), seed), ids)


def with_greedy_generation(model, ids: dict[str, int]):
    """``model`` with Qwen's generation settings: greedy, a turn ends at ``<|im_end|>`` or ``<|endoftext|>``
    (``ids`` maps those tokens to their ids), padding with ``<|endoftext|>``, no BOS token."""
    generation = model.generation_config
    generation.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    generation.pad_token_id = ids["<|endoftext|>"]
    generation.bos_token_id = None
    generation.do_sample = False
    return model
