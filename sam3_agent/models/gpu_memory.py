"""What fits on one GPU, and the settings chosen for it (docs/gpu.md).

GPU memory with the default models (estimates from the architectures; the smoke command measures the peaks):

- the VLM's weights, bfloat16: the checkpoint's size (Qwen3-VL-8B-Instruct: 17.5 GB = 16.3 GiB);
- SAM 3 (detector, and the point model sharing its vision backbone), about 0.86 B parameters: 3.2 GiB in float32
  (the default, the precision of SAM 3's official usage), 1.6 GiB in bfloat16;
- the VLM's KV cache: 2 (keys, values) x layers x key-value heads x head size x 2 bytes per token (Qwen3-VL-8B:
  144 KiB per token); a main request holds the system prompt (~1.6k tokens), two images (the photo and the
  overlay), counted as ``limits.MAX_MAIN_IMAGES_WITH_TILES`` (six: with ``--dense-tiles`` a dense set's four tiles
  come too; the plan is made before any run's config) of up to ``max_pixels / 28**2`` tokens each, the
  rounds' text and the reply; a batched verification holds, per mask, the
  verification prompt (~0.6k tokens) and three images;
- the prefix KV store of the VLM (``prefix_cache_bytes``) and SAM 3's per-image feature cache
  (``feature_cache_bytes``, ~220 MB per image in float32);
- SAM 3's full-resolution masks, upsampled at most ``sam.segmenter.UPSAMPLE_CHUNK_BYTES`` at a time (a 12 MP mask is
  48 MB in float32);
- a margin for activations, the CUDA context and fragmentation.

``plan_for_gpu`` picks the richest of three settings whose estimate fits the free GPU memory, or refuses with the
flags that make it fit.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError
from ..limits import DEFAULT_MAX_PIXELS, MAX_MAIN_IMAGES_WITH_TILES

logger = logging.getLogger(__name__)

GIB = 1024**3
MIB = 1024**2
SAM3_PARAMETERS = 860_000_000  # detector ~840 M (FACTS) + the point model's neck and decoder on the shared backbone
DEFAULT_VLM_BYTES = 17_500_000_000  # Qwen3-VL-8B-Instruct in bfloat16, when the checkpoint's size is unknown
DEFAULT_KV_BYTES_PER_TOKEN = 2 * 36 * 8 * 128 * 2  # Qwen3-VL-8B: 144 KiB
SYSTEM_TOKENS, TEXT_TOKENS, REPLY_TOKENS = 1600, 1500, 1024  # main request: system prompt, rounds' text, reply
VERIFY_TOKENS = 900  # verification prompt and text per mask
PIXELS_PER_TOKEN = 28 * 28  # Qwen2.5-VL (Qwen3-VL: 32 * 32, fewer tokens): the larger count is planned for
MARGIN_BYTES = int(1.5 * GIB)  # activations, CUDA context, fragmentation


@dataclass(frozen=True)
class MemoryPlan:
    """Settings sized to a GPU.

    Attributes:
        name: ``"full"``, ``"reduced"`` or ``"minimal"``.
        sam3_dtype: ``"float32"`` or ``"bfloat16"``.
        verify_batch_size: masks verified per batched VLM call.
        max_pixels: pixels per image given to the VLM (``None``: the model's default bound).
        prefix_cache_bytes: bound of the VLM's prefix KV store.
        feature_cache_bytes: bound of SAM 3's feature cache.
        estimate_bytes: the GPU memory this plan is expected to need at its peak.
    """

    name: str
    sam3_dtype: str
    verify_batch_size: int
    max_pixels: int | None
    prefix_cache_bytes: int
    feature_cache_bytes: int
    estimate_bytes: int = 0

    def describe(self) -> str:
        """One line for logs and the trace's settings."""
        pixels = f"{self.max_pixels} max pixels" if self.max_pixels else "default max pixels"
        return (f"{self.name}: SAM 3 in {self.sam3_dtype}, verification batches of {self.verify_batch_size}, "
                f"{pixels}, {self.prefix_cache_bytes / GIB:.2g} GiB prefix cache, "
                f"{self.feature_cache_bytes / GIB:.2g} GiB SAM 3 feature cache; about "
                f"{self.estimate_bytes / GIB:.1f} GiB at the peak")


PLANS = (
    MemoryPlan("full", "float32", 8, None, 2 * GIB, GIB),
    MemoryPlan("reduced", "bfloat16", 2, 640 * 28 * 28, 512 * MIB, 256 * MIB),
    MemoryPlan("minimal", "bfloat16", 1, 256 * 28 * 28, 256 * MIB, 128 * MIB),
)


def estimate_bytes(plan: MemoryPlan, vlm_bytes: int, kv_bytes_per_token: int) -> int:
    """Peak GPU memory of ``plan`` with a local VLM of ``vlm_bytes`` (0: the VLM runs elsewhere)."""
    sam3 = SAM3_PARAMETERS * (4 if plan.sam3_dtype == "float32" else 2)
    image_tokens = (plan.max_pixels or DEFAULT_MAX_PIXELS) // PIXELS_PER_TOKEN
    total = sam3 + plan.feature_cache_bytes + 256 * MIB + MARGIN_BYTES  # + SAM 3's upsampling chunk
    if vlm_bytes:
        # the opt-in tiles' bound (the plan is made when the models load, before any run's config)
        request = SYSTEM_TOKENS + MAX_MAIN_IMAGES_WITH_TILES * image_tokens + TEXT_TOKENS + REPLY_TOKENS
        verification = plan.verify_batch_size * (VERIFY_TOKENS + 3 * image_tokens)
        total += vlm_bytes + plan.prefix_cache_bytes + max(request, verification) * kv_bytes_per_token
    return total


def plan_for_gpu(free_bytes: int, vlm_bytes: int, kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN,
                 vlm_name: str = "the VLM") -> MemoryPlan:
    """The richest plan of ``PLANS`` whose estimate fits ``free_bytes``.

    Args:
        free_bytes: free memory of the GPU before the models load.
        vlm_bytes: the VLM's weights in bytes (0 when it runs on a server).
        kv_bytes_per_token: the VLM's KV cache per token (:func:`kv_bytes_per_token`).
        vlm_name: named in the refusal.

    Raises:
        BackendError: not even the smallest plan fits; the message gives the sizes and the flags to use.
    """
    for plan in PLANS:
        need = estimate_bytes(plan, vlm_bytes, kv_bytes_per_token)
        if need <= free_bytes:
            return MemoryPlan(plan.name, plan.sam3_dtype, plan.verify_batch_size, plan.max_pixels,
                              plan.prefix_cache_bytes, plan.feature_cache_bytes, need)
    need = estimate_bytes(PLANS[-1], vlm_bytes, kv_bytes_per_token)
    raise BackendError(
        f"{vlm_name} ({vlm_bytes / GIB:.1f} GiB of weights) and SAM 3 need about {need / GIB:.1f} GiB of GPU memory "
        f"even with the smallest settings, and {free_bytes / GIB:.1f} GiB are free: use a smaller VLM "
        "(--vlm-model Qwen/Qwen3-VL-4B-Instruct or Qwen/Qwen3-VL-2B-Instruct), serve the VLM elsewhere "
        "(--vlm-server URL --vlm-server-model NAME), or run on the CPU (--device cpu, slow)"
    )


def checkpoint_files(model_id: str) -> tuple[int | None, Path | None]:
    """``(bytes of weights, config.json path)`` of a local folder or a Hub model in the local cache; ``None`` for
    what is unknown (no download is made)."""
    folder = Path(model_id).expanduser()
    if folder.is_dir():
        weights = [p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")]
        config = folder / "config.json"
        return (sum(p.stat().st_size for p in weights) or None), (config if config.is_file() else None)
    try:
        import huggingface_hub

        config_path = huggingface_hub.try_to_load_from_cache(model_id, "config.json")
        index = huggingface_hub.try_to_load_from_cache(model_id, "model.safetensors.index.json")
        single = huggingface_hub.try_to_load_from_cache(model_id, "model.safetensors")
    except (ValueError, OSError):
        return None, None
    config = Path(config_path) if isinstance(config_path, str) else None
    if isinstance(index, str):
        total = json.loads(Path(index).read_text(encoding="utf-8")).get("metadata", {}).get("total_size")
        return (int(total) if total else None), config
    if isinstance(single, str):
        return Path(single).stat().st_size, config
    return None, config


def kv_bytes_per_token(config_path: Path | None) -> int:
    """KV cache bytes per token in bfloat16 from a ``config.json`` (text config: attention layers, key-value heads,
    head size); ``DEFAULT_KV_BYTES_PER_TOKEN`` when unknown.

    Only attention layers keep keys and values per token: in a hybrid model (Qwen3.5 / Qwen3.6: ``layer_types`` with
    ``linear_attention`` layers, or ``full_attention_interval``) the Gated DeltaNet layers hold a fixed-size state
    per sequence instead (``ATTENTION_LAYER_TYPES``; that state is left to ``MARGIN_BYTES``, see docs/gpu.md).
    Sliding-window layers are counted as full ones (an upper bound).
    """
    if config_path is None:
        return DEFAULT_KV_BYTES_PER_TOKEN
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        text = config.get("text_config") or config
        heads = int(text["num_attention_heads"])
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        return 2 * _attention_layers(text) * int(text.get("num_key_value_heads", heads)) * head_dim * 2
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_KV_BYTES_PER_TOKEN


# layer types of a text config that keep keys and values per token (transformers' ``layer_types`` names)
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _attention_layers(text: dict) -> int:
    """How many layers of a text config keep a KV cache per token (``layer_types``, else every
    ``full_attention_interval``-th layer, else all of them)."""
    layers = int(text["num_hidden_layers"])
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for kind in types if kind in ATTENTION_LAYER_TYPES)
    interval = text.get("full_attention_interval")
    return layers // int(interval) if interval else layers


def free_gpu_bytes() -> int:
    """Free memory of the current CUDA device (``torch.cuda.mem_get_info``)."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    return int(free)

