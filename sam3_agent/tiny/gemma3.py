"""A tiny random-weight Gemma 3 checkpoint: an image-text-to-text family the engine does not know (the plain path).

``build_tiny_gemma3`` writes a folder that ``AutoModelForImageTextToText`` / ``AutoProcessor`` (and so
``--vlm-model FOLDER``) load like a released Gemma 3 checkpoint (``google/gemma-3-4b-it``'s layout). It is here to
prove that a model of another family runs on ``transformers``' plain ``generate`` with its own processor and chat
template, never on code that assumes a Qwen processor. What is real:

- the classes: ``Gemma3ForConditionalGeneration`` (a SigLIP vision tower, image embeddings pooled to a fixed number
  of soft tokens, a Gemma 3 text stack mixing sliding-window and full attention layers) built from ``Gemma3Config``,
  and ``Gemma3Processor`` around ``Gemma3ImageProcessor`` and ``GemmaTokenizer``;
- the processor's behaviour: every image resized to one fixed square (no pixel bounds, no merged patches), its
  ``<start_of_image>`` placeholder expanded to ``\\n\\n<start_of_image>`` + soft tokens + ``<end_of_image>\\n\\n``,
  ``token_type_ids`` marking the image tokens; mean/std 0.5 and bilinear resizing as released;
- the tokenizer's kind: byte-fallback BPE over text whose spaces become ``▁``, ``<bos>`` first, Gemma's special
  tokens (ids our own: pad 0, eos 1, bos 2, unk 3, mask 4 as released, the turn and image tokens after the BPE);
- the chat template's rendering (``CHAT_TEMPLATE``, our own Jinja): ``<bos>``, a leading system turn's text and a
  blank line put before the first user turn's content, turns as ``<start_of_turn>user|model\\n...<end_of_turn>\\n``
  with texts trimmed, images as ``<start_of_image>``, roles that must alternate, and ``<start_of_turn>model\\n``
  as the generation prompt (the released template's rules, as published with the checkpoints);
- the generation config: ``google/gemma-3-4b-it``'s ``generation_config.json`` (``GEMMA3_GENERATION``: sampling
  with top_k 64, top_p 0.95; a turn ends at ``<eos>`` or ``<end_of_turn>``; ``cache_implementation`` "hybrid").

Shrunken: text hidden 32 with 2 layers (one sliding-window, one full: released 5 to 1), a 112 px image of 8 x 8
patches pooled to 16 soft tokens (released: 896 px, 64 x 64 patches, 256 tokens). Weights are random
(``checkpoint.redraw_by_fan_in``): output proves code paths, not answers. Nothing is downloaded.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .checkpoint import is_built, redraw_by_fan_in, save_model_and_processor, seeded_model, write_checkpoint
from .qwen import _TRAINING_TEXT

logger = logging.getLogger(__name__)

BUILD_VERSION = "sam3_agent tiny gemma3 v1"
MARKER_FILE = "TINY_BUILD"

IMAGE_SIDE = 112  # pixels; the processor resizes every image to IMAGE_SIDE x IMAGE_SIDE
PATCH_SIZE = 14
IMAGE_TOKENS = 16  # soft tokens per image: 8 x 8 patches average-pooled 2 x 2
SLIDING_WINDOW = 1024  # google/gemma-3-4b-it's sliding_window
BPE_VOCAB_SIZE = 700  # Gemma's 5 specials + 256 byte-fallback tokens + merges

SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")  # ids 0..4, as released
TURN_TOKENS = ("<start_of_turn>", "<end_of_turn>")
IMAGE_MARKERS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}

# google/gemma-3-4b-it generation_config.json (public copies), token ids set from the tiny vocabulary.
GEMMA3_GENERATION: dict[str, object] = {"do_sample": True, "top_k": 64, "top_p": 0.95,
                                        "cache_implementation": "hybrid"}

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set first = messages[0] if messages else none -%}"
    "{%- if first is not none and first['role'] == 'system' -%}"
    "{%- set head = (first['content'] if first['content'] is string else first['content'][0]['text']) + '\\n\\n' -%}"
    "{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set head = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for turn in turns -%}"
    "{%- if (turn['role'] == 'user') != (loop.index0 is even) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{{ '<start_of_turn>' ~ ('model' if turn['role'] == 'assistant' else turn['role']) ~ '\\n' }}"
    "{%- if loop.first -%}{{ head }}{%- endif -%}"
    "{%- if turn['content'] is string -%}{{ turn['content'] | trim }}"
    "{%- else -%}{%- for part in turn['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


def build_tiny_gemma3(out_dir: Path, seed: int = 0) -> Path:
    """Build and save the tiny random-weight Gemma 3 checkpoint (model, processor, tokenizer, template).

    Skipped when ``out_dir`` already holds a complete build of this version and seed (``checkpoint.write_checkpoint``:
    staged, the marker written last).

    Returns:
        ``out_dir`` as a ``Path``.
    """
    out_dir = Path(out_dir)
    signature = f"{BUILD_VERSION}\nseed={seed}\n"
    if is_built(out_dir, MARKER_FILE, signature):
        return out_dir
    processor = build_processor()
    model = _build_model(processor.tokenizer, seed)
    write_checkpoint(out_dir, MARKER_FILE, signature, save_model_and_processor(model, processor))
    logger.info("built tiny gemma3 (seed=%d) in %s", seed, out_dir)
    return out_dir


def build_processor():
    """``Gemma3Processor`` with the tiny tokenizer, the released image-processor settings at ``IMAGE_SIDE`` and
    ``CHAT_TEMPLATE``."""
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    image_processor = Gemma3ImageProcessor(size={"height": IMAGE_SIDE, "width": IMAGE_SIDE}, image_mean=[0.5] * 3,
                                           image_std=[0.5] * 3, do_pan_and_scan=False)
    return Gemma3Processor(image_processor=image_processor, tokenizer=_build_tokenizer(),
                           chat_template=CHAT_TEMPLATE, image_seq_length=IMAGE_TOKENS)


def _build_tokenizer():
    """A byte-fallback BPE trained on the tiny Qwen tokenizer's text with Gemma's normalisation, as ``GemmaTokenizer``."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizer

    bpe = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    bpe.normalizer = normalizers.Replace(" ", "▁")  # GemmaTokenizer's own pipeline, so the merges fit it
    bpe.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    byte_tokens = [f"<0x{value:02X}>" for value in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB_SIZE, min_frequency=1, show_progress=False,
                                  special_tokens=[*SPECIAL_TOKENS, *byte_tokens])
    bpe.train_from_iterator([line for line in _TRAINING_TEXT.splitlines() if line.strip()], trainer=trainer)
    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    tokenizer = GemmaTokenizer(vocab=dict(state["vocab"]), merges=merges, extra_special_tokens=dict(IMAGE_MARKERS),
                               model_max_length=32768)
    markers = (*TURN_TOKENS, *IMAGE_MARKERS.values())
    tokenizer.add_tokens([AddedToken(text, special=True, normalized=False) for text in markers], special_tokens=True)
    return tokenizer


def _build_model(tokenizer, seed: int):
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    ids = {text: tokenizer.convert_tokens_to_ids(text) for text in (*SPECIAL_TOKENS, *TURN_TOKENS,
                                                                     *IMAGE_MARKERS.values())}
    config = Gemma3Config(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                         sliding_window=SLIDING_WINDOW, layer_types=["sliding_attention", "full_attention"],
                         max_position_embeddings=32768, pad_token_id=ids["<pad>"], bos_token_id=ids["<bos>"],
                         eos_token_id=ids["<eos>"]),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=IMAGE_SIDE, patch_size=PATCH_SIZE),
        mm_tokens_per_image=IMAGE_TOKENS, boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"], image_token_index=ids["<image_soft_token>"],
    )
    model = seeded_model(lambda: Gemma3ForConditionalGeneration(config), seed)
    redraw_by_fan_in(model, torch.Generator().manual_seed(seed))
    generation = model.generation_config
    generation.bos_token_id = ids["<bos>"]
    generation.eos_token_id = [ids["<eos>"], ids["<end_of_turn>"]]
    generation.pad_token_id = ids["<pad>"]
    for key, value in GEMMA3_GENERATION.items():
        setattr(generation, key, value)
    return model
