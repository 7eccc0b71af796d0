"""Tiny random-weight Qwen2.5-VL / Qwen3-VL checkpoints for offline tests and demos.

``build_tiny_qwen`` writes a folder that ``TransformersQwenVLM.from_pretrained`` (and plain
``AutoModelForImageTextToText`` / ``AutoProcessor``) load exactly like a real checkpoint. What is real, so
that what the tests render, encode and decode is what the released models get:

- the architecture classes (shrunken sizes: hidden 32, 2 layers);
- the chat templates (``tiny.templates``: Qwen3-VL-8B-Instruct, Qwen3-VL-8B-Thinking, Qwen2.5-VL-7B-Instruct);
- Qwen's added tokens, in Qwen's order and with Qwen's special flags (``QWEN_ADDED_TOKENS``); the ids follow
  a byte-level BPE of 600 tokens trained here (the ``small`` preset has Qwen's real vocabulary and ids);
- the image processors' settings (``preprocessor_config.json``): Qwen3-VL-8B-Instruct: 16 px patches merged
  2 x 2, mean/std 0.5, pixel bounds 65,536..16,777,216; Qwen2.5-VL-7B-Instruct: 14 px patches merged 2 x 2,
  CLIP mean/std, min_pixels 3,136, max_pixels 12,845,056 (FACTS.md "Real model configurations");
- the generation configs (``generation_config.json``, see ``real_generation_config``).

The weights are random, drawn with std 1/sqrt(fan_in) (``checkpoint.redraw_by_fan_in``) and, in Qwen3-VL, a
gain of ``QK_NORM_GAIN`` on its query/key norms, so that the output depends on the input (with
``transformers``' default init most prompts gave the same tokens, and a test comparing two decoders could not
tell a right one from a wrong one). Nothing is downloaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from .checkpoint import is_built, redraw_by_fan_in, save_model_and_processor, seeded_model, write_checkpoint
from .templates import Variant, chat_template

logger = logging.getLogger(__name__)

BUILD_VERSION = "sam3_agent tiny qwen v2"
MARKER_FILE = "TINY_BUILD"

# The released processors' pixel bounds (pixels after resizing); TransformersQwenVLM tightens them to its
# defaults (DEFAULT_MIN_PIXELS..DEFAULT_MAX_PIXELS) unless asked otherwise, as it does for the real models.
QWEN3_VL_MIN_PIXELS = 65_536
QWEN3_VL_MAX_PIXELS = 16_777_216
QWEN2_5_VL_MIN_PIXELS = 3_136
QWEN2_5_VL_MAX_PIXELS = 12_845_056
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # Qwen2.5-VL's image_mean / image_std (OpenAI CLIP's)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# Qwen2.5/Qwen3's added tokens in id order (the order of Qwen's tokenizer_config.json, from id 151643 in the
# real vocabulary); ``True`` marks the special ones (dropped by skip_special_tokens); <tool_call>, <think>...
# stay in decoded text.
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

# Qwen3-VL normalises each head's queries and keys (RMSNorm with weight 1 at init), which with 16-wide heads
# caps attention logits near 4: attention stays flat and the last position barely depends on the prompt.
# A gain of 4 lets a tiny model's attention pick out tokens (measured: 8 different prompts then gave 8
# different outputs and 4 different first tokens, against 1 first token with gain 1).
QK_NORM_GAIN = 4.0

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

def is_complete_build(out_dir: Path) -> bool:
    """True when ``out_dir`` holds a finished build of this builder version."""
    marker = Path(out_dir) / MARKER_FILE
    return marker.is_file() and marker.read_text(encoding="utf-8").startswith(BUILD_VERSION)


def template_variant(kind: str, thinking: bool) -> Variant:
    """The chat-template variant of a tiny build.

    Raises:
        ValueError: an unknown ``kind``, or ``thinking`` with Qwen2.5-VL (it has no Thinking edition).
    """
    if kind == "qwen3_vl":
        return "qwen3_vl_thinking" if thinking else "qwen3_vl_instruct"
    if kind == "qwen2_5_vl":
        if thinking:
            raise ValueError("Qwen2.5-VL has no Thinking edition: use kind='qwen3_vl' with thinking=True")
        return "qwen2_5_vl"
    raise ValueError(f"unknown tiny Qwen kind {kind!r}: use 'qwen3_vl' or 'qwen2_5_vl'")


def build_tiny_qwen(
    out_dir: Path,
    kind: Literal["qwen2_5_vl", "qwen3_vl"] = "qwen3_vl",
    thinking: bool = False,
    seed: int = 0,
) -> Path:
    """Build and save a tiny random-weight Qwen-VL checkpoint (model, processor, tokenizer, template).

    The folder loads offline with ``from_pretrained`` like a real checkpoint (see the module docstring for
    what is real). The build is skipped when ``out_dir`` already holds a complete build (a marker file with
    ``BUILD_VERSION`` and the arguments); files are written to a temporary folder first and the marker is
    moved in last, so an interrupted build is never mistaken for a complete one.

    Args:
        out_dir: folder to write (created if missing).
        kind: ``"qwen3_vl"`` (Qwen3VLForConditionalGeneration) or ``"qwen2_5_vl"``.
        thinking: Qwen3-VL Thinking's chat template and generation config (its generation prompt opens
            ``<think>\\n``) instead of Instruct's.
        seed: seeds the weights (the global torch RNG state is restored afterwards).

    Returns:
        ``out_dir`` as a ``Path``.

    Raises:
        ValueError: for an unknown ``kind``, or ``thinking`` with Qwen2.5-VL.
    """
    variant = template_variant(kind, thinking)
    out_dir = Path(out_dir)
    signature = f"{BUILD_VERSION}\nkind={kind}\nthinking={thinking}\nseed={seed}\n"
    if is_built(out_dir, MARKER_FILE, signature):
        logger.debug("tiny %s already built in %s", kind, out_dir)
        return out_dir
    processor = _build_processor(kind, variant)
    model = _build_model(kind, variant, processor.tokenizer, seed)
    write_checkpoint(out_dir, MARKER_FILE, signature, save_model_and_processor(model, processor))
    logger.info("built tiny %s (thinking=%s, seed=%d) in %s", kind, thinking, seed, out_dir)
    return out_dir


def add_qwen_tokens(tokenizer, variant: Variant) -> None:
    """Give ``tokenizer`` Qwen's added tokens (``QWEN_ADDED_TOKENS``, in order, with their special flags), turns
    that end at ``<|im_end|>`` and ``variant``'s chat template."""
    from tokenizers import AddedToken

    for text, special in QWEN_ADDED_TOKENS:
        tokenizer.add_tokens([AddedToken(text, special=special, normalized=False)], special_tokens=special)
    tokenizer.eos_token = "<|im_end|>"  # a chat model's turn ends with <|im_end|>
    tokenizer.chat_template = chat_template(variant)


def _build_tokenizer(variant: Variant):
    """A byte-level BPE trained on ``_TRAINING_TEXT``, wrapped as ``Qwen2Tokenizer`` with Qwen's tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
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
        eos_token="<|endoftext|>",  # switched to <|im_end|> once Qwen's tokens are added
        pad_token="<|endoftext|>",
        bos_token=None,
        errors="replace",
        model_max_length=32768,
    )
    add_qwen_tokens(tokenizer, variant)
    return tokenizer


def _bpe_vocab_and_merges(bpe) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges of a trained ``tokenizers`` BPE, read from its JSON form."""
    import json

    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    return dict(state["vocab"]), merges


def real_processor(kind: str, tokenizer):
    """``kind``'s processor with the released image-processor settings (module docstring) around ``tokenizer``."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen3VLProcessor

    if kind == "qwen3_vl":
        from transformers import Qwen3VLVideoProcessor

        image_processor = Qwen2VLImageProcessor(
            size={"shortest_edge": QWEN3_VL_MIN_PIXELS, "longest_edge": QWEN3_VL_MAX_PIXELS},
            patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
        )
        video_processor = Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2)
        return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                video_processor=video_processor, chat_template=tokenizer.chat_template)
    from transformers import Qwen2VLVideoProcessor

    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": QWEN2_5_VL_MIN_PIXELS, "longest_edge": QWEN2_5_VL_MAX_PIXELS},
        patch_size=14, temporal_patch_size=2, merge_size=2, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD),
    )
    video_processor = Qwen2VLVideoProcessor(patch_size=14, temporal_patch_size=2, merge_size=2)
    return Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                               video_processor=video_processor, chat_template=tokenizer.chat_template)


def _build_processor(kind: str, variant: Variant):
    return real_processor(kind, _build_tokenizer(variant))


def _build_model(kind: str, variant: Variant, tokenizer, seed: int):
    """A seeded random-weight model of the real architecture with shrunken sizes (see the module docstring)."""
    import torch

    ids = {text: tokenizer.convert_tokens_to_ids(text) for text, _ in QWEN_ADDED_TOKENS}
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
        max_position_embeddings=32768,
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
            vision_config=dict(vision, patch_size=16, num_position_embeddings=2304, deepstack_visual_indexes=[0]),
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

    model = seeded_model(lambda: model_cls(config), seed)
    redraw_by_fan_in(model, torch.Generator().manual_seed(seed))
    if kind == "qwen3_vl":
        sharpen_query_key_norms(model)
    return with_real_generation_config(model, ids, variant)


def sharpen_query_key_norms(model, gain: float = QK_NORM_GAIN) -> None:
    """Set every text-attention query/key norm weight of a Qwen3-VL model to ``gain`` (see ``QK_NORM_GAIN``)."""
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")) and ".visual." not in f".{name}":
                parameter.fill_(gain)


def real_generation_config(variant: Variant) -> dict[str, object]:
    """The sampling values of ``variant``'s released ``generation_config.json`` (token ids set separately).

    - Qwen3-VL-8B-Instruct's file: do_sample, temperature 0.7, top_p 0.8, top_k 20 (FACTS.md).
    - Qwen3-VL Thinking: the model cards' vision-language settings, do_sample, temperature 1.0, top_p 0.95,
      top_k 20 (no public copy of its generation_config.json was found; ``engine.decoding`` falls back to
      these values too).
    - Qwen2.5-VL-7B-Instruct's file: repetition_penalty 1.05, temperature 0.1, top_p 0.001, top_k 1 (FACTS.md;
      with one candidate left, sampling equals greedy decoding).
    """
    if variant == "qwen3_vl_instruct":
        return {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
    if variant == "qwen3_vl_thinking":
        return {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20}
    return {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.1, "top_p": 0.001, "top_k": 1}


def with_real_generation_config(model, ids: dict[str, int], variant: Variant):
    """``model`` with ``variant``'s released generation settings (``real_generation_config``): a turn ends at
    ``<|im_end|>`` or ``<|endoftext|>``, padding and BOS are ``<|endoftext|>`` (``ids`` maps tokens to ids)."""
    generation = model.generation_config
    generation.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    generation.pad_token_id = ids["<|endoftext|>"]
    generation.bos_token_id = ids["<|endoftext|>"]
    for key, value in real_generation_config(variant).items():
        setattr(generation, key, value)
    return model
