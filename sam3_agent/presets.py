"""Named model sets and backend construction (models load once per process and are shared).

Presets:
- ``real``: SAM 3 (``facebook/sam3``) and Qwen3-VL-8B-Instruct from the Hugging Face Hub or local
  folders; the VLM may instead be an OpenAI-compatible server.
- ``tiny``: SAM 3 and a VLM (Qwen-VL, Qwen3.5, or Gemma 3 for the plain path) with the real architectures,
  shrunken configs and random seeded weights, built locally and loaded through ``from_pretrained`` like real
  weights. Offline; for tests and demos of the code paths. Random weights: their masks and text mean nothing.

Any preset can take a scripted VLM (``script``): the responses replay in order, SAM 3 still runs.

Over 400 lines: it is the one place that assembles every wing into backends; the point-prompt and video-tracker parts
at its end (``build_point_segmenter``, ``build_video_tracker``) are the pieces to move out next (tests patch their
names here).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .engine.decoding import DecodingOverrides, apply_overrides, check_overrides
from .errors import InputError
from .limits import DEFAULT_VERIFY_BATCH_SIZE
from .models.gpu_memory import (
    DEFAULT_VLM_BYTES,
    MemoryPlan,
    checkpoint_files,
    free_gpu_bytes,
    kv_bytes_per_token,
    plan_for_gpu,
)
from .models.hub import check_model_source
from .models.loading import default_device
from .models.zerogpu import on_zero_gpu
from .sam.segmenter import DEFAULT_FEATURE_CACHE_BYTES, DEFAULT_SAM3_MODEL, Sam3Segmenter, Segmenter, sam3_dtype
from .vlm.base import VLM
from .vlm.scripted import ScriptedVLM, load_run_script

logger = logging.getLogger(__name__)

Preset = Literal["real", "tiny"]
TinyVlmKind = Literal["qwen3_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "gemma3"]  # tiny.TINY_VLM_KINDS
TINY_MAX_NEW_TOKENS = 48  # random weights ramble; keep tiny runs short
SERVER_MAX_NEW_TOKENS = 1024  # token budget of a server's calls unless asked (sampling: ``vlm.server_sampling``)
_build_lock = threading.Lock()


def cache_dir() -> Path:
    """Where built tiny models live: ``$SAM3_AGENT_CACHE`` or ``~/.cache/sam3_agent``."""
    return Path(os.environ.get("SAM3_AGENT_CACHE") or Path.home() / ".cache" / "sam3_agent")


def tiny_model_paths(vlm_kind: TinyVlmKind = "qwen3_vl") -> tuple[Path, Path]:
    """Build (once) and return the folders of the tiny SAM 3 and the tiny VLM of ``vlm_kind``."""
    from .tiny import build_tiny_vlm
    from .tiny.sam3 import build_tiny_sam3

    root = cache_dir() / "tiny"
    with _build_lock:
        return build_tiny_sam3(root / "sam3"), build_tiny_vlm(root / vlm_kind, vlm_kind)


@dataclass(frozen=True)
class BackendSettings:
    """How to build the backends of a run.

    Attributes:
        preset: ``"real"`` or ``"tiny"``.
        vlm_model: Hugging Face id or local folder of the VLM (``real`` preset): Qwen2.5-VL, Qwen3-VL or Qwen3.5 /
            Qwen3.6 on the fast path, any other image-text-to-text model on plain ``generate`` (docs/models.md).
        vlm_server: base URL of an OpenAI-compatible server (e.g. ``http://127.0.0.1:8000/v1``);
            replaces the local VLM.
        vlm_server_model: model name to ask that server for.
        api_key: bearer token for that server (default: ``$OPENAI_API_KEY`` when set).
        script: JSON file of scripted VLM responses (see ``vlm.scripted.load_script``).
        sam3_model: Hugging Face id or local folder of SAM 3 (``real`` preset).
        device: ``"cuda"``, ``"cpu"`` or ``None`` (CUDA when available).
        min_pixels / max_pixels: bounds on the pixels of each image given to the VLM (local or server).
        max_new_tokens: token budget of each main VLM call (``None``: the model's default, see
            ``engine.decoding``; the tiny preset: ``TINY_MAX_NEW_TOKENS``).
        vlm_server_connect_timeout / vlm_server_read_timeout / vlm_server_deadline: seconds to connect to the
            server, of silence allowed while it answers, and for a whole call (``None``: the environment
            variables of ``openai_server.TIMEOUT_ENVIRONMENT``, else ``ServerTimeouts``' defaults).
        tiny_vlm_kind: which tiny VLM architecture the ``tiny`` preset uses.
        prefix_cache: reuse prompt-prefix KV caches in the local VLM (same output, verified on CPU in float32;
            off saves its memory).
        sam3_dtype: ``"float32"`` or ``"bfloat16"`` for SAM 3 and its point model (``None``: float32, or what the
            GPU memory plan picks on a small GPU, see ``models.gpu_memory``).
        decoding: sampling, seed and verification budget asked for instead of the local model's defaults
            (``engine.decoding.DecodingOverrides``; its own ``max_new_tokens`` is ignored: use the field above).
    """

    preset: Preset = "real"
    vlm_model: str | None = None
    vlm_server: str | None = None
    vlm_server_model: str | None = None
    api_key: str | None = None
    script: str | None = None
    sam3_model: str | None = None
    device: str | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    max_new_tokens: int | None = None
    tiny_vlm_kind: TinyVlmKind = "qwen3_vl"
    prefix_cache: bool = True
    vlm_server_connect_timeout: float | None = None
    vlm_server_read_timeout: float | None = None
    vlm_server_deadline: float | None = None
    sam3_dtype: str | None = None
    decoding: DecodingOverrides = DecodingOverrides()


@dataclass(frozen=True)
class Backends:
    """The built backends and what to record about them in a trace."""

    vlm: VLM
    verifier: VLM
    segmenter: Segmenter
    settings: dict[str, Any]


@functools.lru_cache(maxsize=4)
def _local_vlm(model: str, device: str | None, min_pixels: int | None, max_pixels: int | None,
               prefix_cache: bool = True, prefix_cache_bytes: int | None = None) -> Any:
    from .vlm.transformers_qwen import TransformersQwenVLM

    check_model_source(model, "VLM")
    bound = {} if prefix_cache_bytes is None else {"prefix_cache_bytes": prefix_cache_bytes}
    return TransformersQwenVLM.from_pretrained(
        model, device=device, min_pixels=min_pixels, max_pixels=max_pixels, prefix_cache=prefix_cache, **bound,
    )


def _decoding_views(loaded: Any, settings: BackendSettings, tiny: bool) -> tuple[VLM, VLM, dict[str, Any]]:
    """The main and verification views of a loaded local VLM under the model's defaults and the settings'
    overrides, and their trace record.

    Raises:
        InputError: inconsistent or out-of-range decoding values (the message names them).
    """
    overrides = replace(settings.decoding, max_new_tokens=settings.max_new_tokens)
    if tiny:  # random weights ramble: keep tiny runs short unless asked otherwise
        overrides = replace(
            overrides,
            max_new_tokens=overrides.max_new_tokens or TINY_MAX_NEW_TOKENS,
            verify_max_new_tokens=overrides.verify_max_new_tokens or TINY_MAX_NEW_TOKENS,
        )
    try:
        resolved = apply_overrides(loaded.defaults, overrides)
    except ValueError as error:
        raise InputError(str(error)) from None
    main, verifier = loaded.with_decoding(resolved.main), loaded.with_decoding(resolved.verify)
    record = {"main": main.decoding_record(), "verify": verifier.decoding_record(), "thinking": resolved.thinking,
              "sampling_source": resolved.source}
    return main, verifier, record


@functools.lru_cache(maxsize=4)
def _segmenter(model: str, device: str | None, dtype: str | None = None,
               feature_cache_bytes: int = DEFAULT_FEATURE_CACHE_BYTES) -> Segmenter:
    check_model_source(model, "SAM 3 model")
    return Sam3Segmenter.from_pretrained(model, device=device, dtype=dtype, feature_cache_bytes=feature_cache_bytes)


def memory_plan(settings: BackendSettings, vlm_id: str) -> MemoryPlan | None:
    """The GPU memory plan of a ``real`` run on CUDA (``gpu_memory.plan_for_gpu``), or ``None`` (CPU, tiny).

    Raises:
        BackendError: the models do not fit the GPU even with the smallest settings (the message names the flags).
    """
    device = settings.device or default_device()
    if settings.preset != "real" or not device.startswith("cuda"):
        return None
    local_vlm = not (settings.vlm_server or settings.script)
    weights, config = checkpoint_files(vlm_id) if local_vlm else (0, None)
    if local_vlm and weights is None:
        logger.info("the size of %s is unknown before download; planning GPU memory for %.1f GB", vlm_id,
                    DEFAULT_VLM_BYTES / 1e9)
    plan = plan_for_gpu(free_gpu_bytes(), (weights or DEFAULT_VLM_BYTES) if local_vlm else 0,
                        kv_bytes_per_token(config), vlm_id)
    logger.info("GPU memory plan %s", plan.describe())
    return plan


_system_prompts_cached: weakref.WeakSet = weakref.WeakSet()  # VLMs whose system prompts this process has computed


def cache_system_prompts(vlm: VLM) -> None:
    """Compute the KV caches of both system prompts, once per model and process, so no run pays for them.

    ``build_backends`` calls it at load, except on a ZeroGPU Space (no CUDA work outside a GPU call); there the
    app's first request calls it inside its GPU call. A ZeroGPU worker is a fork of the main process: what the main
    process never computed, each worker computes once. Does nothing for VLMs without ``prefill_system_prompts``.

    Raises:
        BackendError: the model failed (e.g. out of memory).
    """
    prefill = getattr(vlm, "prefill_system_prompts", None)
    if prefill is None or vlm in _system_prompts_cached:
        return
    from .agent.prompts import load_prompts

    prompts = load_prompts()
    prefill([prompts.main_system, prompts.verify_system])
    _system_prompts_cached.add(vlm)


def check_backend_settings(settings: BackendSettings) -> None:
    """Refuse settings that would fail later or be silently ignored, before any model loads.

    Raises:
        InputError: an unknown preset; a model id given with the ``tiny`` preset (which builds its own models); a
            token budget or pixel bound that is not a whole number of at least 1; ``min_pixels`` above ``max_pixels``;
            decoding values that contradict each other or are out of range (``engine.decoding.check_overrides``) or
            that a script would ignore; a server URL without a model name; both a server and a script; a script
            file a run cannot replay (``vlm.scripted.load_run_script``: read now, before any model loads).
    """
    if settings.preset not in ("real", "tiny"):
        raise InputError(f"unknown preset {settings.preset!r}: use 'real' or 'tiny'")
    if settings.preset == "tiny":
        ignored = [flag for flag, value in (("--sam3-model", settings.sam3_model), ("--vlm-model", settings.vlm_model))
                   if value]
        if ignored:
            raise InputError(f"{' and '.join(ignored)} would be ignored with --preset tiny, which builds its own random "
                             "tiny models: drop it, or use --preset real to load that model")
    for flag, value in (("--max-new-tokens", settings.max_new_tokens), ("--min-pixels", settings.min_pixels),
                        ("--max-pixels", settings.max_pixels)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{flag} must be a whole number of at least 1, got {value!r}")
    if settings.min_pixels and settings.max_pixels and settings.min_pixels > settings.max_pixels:
        raise InputError(f"--min-pixels ({settings.min_pixels}) is above --max-pixels ({settings.max_pixels})")
    if settings.vlm_server and not settings.vlm_server_model:
        raise InputError("a VLM server needs a model name too (--vlm-server-model)")
    sources = [s for s in (settings.vlm_server, settings.script) if s]
    if len(sources) > 1:
        raise InputError("choose one VLM: a server URL or a script file, not both")
    try:
        check_overrides(replace(settings.decoding, max_new_tokens=settings.max_new_tokens))
    except ValueError as error:
        raise InputError(str(error)) from None
    if settings.decoding.sets_sampling() and settings.script:
        raise InputError(
            "--decoding, --temperature, --top-p, --top-k and --seed apply to a model (--vlm-model or --vlm-server): "
            "a script replays its text"
        )
    if settings.script:
        load_run_script(settings.script)


def build_backends(settings: BackendSettings) -> Backends:
    """Build (or reuse, within this process) the VLM, verifier and SAM 3 backends.

    Raises:
        InputError: inconsistent settings (``check_backend_settings``).
        BackendError: a model cannot be loaded (the message names it and says how to fix it).
    """
    check_backend_settings(settings)
    record: dict[str, Any] = {"preset": settings.preset, "device": settings.device}
    sam3_id, vlm_id, max_new_tokens = _model_ids(settings)
    sam3_dtype(settings.sam3_dtype)  # an unknown dtype is refused before anything loads
    plan = memory_plan(settings, vlm_id)
    segmenter = _planned_segmenter(settings, sam3_id, plan, record)
    if settings.script:
        vlm, verifier = _scripted_vlms(settings.script, record)
    elif settings.vlm_server:
        vlm, verifier = _server_vlms(settings, max_new_tokens, record)
    else:
        vlm, verifier, max_new_tokens = _loaded_vlms(settings, vlm_id, plan, record)
    record["max_new_tokens"] = max_new_tokens
    return Backends(vlm, verifier, segmenter, record)


def _model_ids(settings: BackendSettings) -> tuple[str, str, int]:
    """SAM 3's and the VLM's ids or folders (the tiny preset's built now) and the default token budget."""
    from .vlm.qwen_load import DEFAULT_VLM_MODEL

    if settings.preset == "tiny":
        sam3_path, vlm_path = tiny_model_paths(settings.tiny_vlm_kind)
        return str(sam3_path), str(vlm_path), settings.max_new_tokens or TINY_MAX_NEW_TOKENS
    return (settings.sam3_model or DEFAULT_SAM3_MODEL, settings.vlm_model or DEFAULT_VLM_MODEL,
            settings.max_new_tokens or SERVER_MAX_NEW_TOKENS)


def _planned_segmenter(settings: BackendSettings, sam3_id: str, plan: MemoryPlan | None,
                       record: dict[str, Any]) -> Segmenter:
    """SAM 3 in the dtype and feature-cache size asked for or planned; records them and the plan."""
    dtype = settings.sam3_dtype or (plan.sam3_dtype if plan else "float32")
    segmenter = _segmenter(sam3_id, settings.device, dtype,
                           plan.feature_cache_bytes if plan else DEFAULT_FEATURE_CACHE_BYTES)
    record.update(sam3_model=sam3_id, sam3_dtype=dtype,
                  verify_batch_size=plan.verify_batch_size if plan else DEFAULT_VERIFY_BATCH_SIZE)
    if plan is not None:
        record["memory_plan"] = plan.describe()
    return segmenter


def _scripted_vlms(script_file: str, record: dict[str, Any]) -> tuple[VLM, VLM]:
    """The main and verification VLMs replaying a script file (``InputError`` when it has no main responses)."""
    script = load_run_script(script_file)
    name = Path(script_file).name
    main = ScriptedVLM(script["main"], name=f"scripted:{name}")
    record["vlm_model"] = f"script {name}"
    return main, ScriptedVLM(script["verify"], name=f"scripted-verify:{name}")


def _server_vlms(settings: BackendSettings, max_new_tokens: int, record: dict[str, Any]) -> tuple[VLM, VLM]:
    """The main and verification views of an OpenAI-compatible server (one connection pool and request gate),
    sending the decoding fields the flags ask for (``vlm.server_sampling``); records where it is and what is sent."""
    from .vlm.openai_server import OpenAIServerVLM, ServerTimeouts
    from .vlm.server_sampling import server_sampling

    timeouts = ServerTimeouts.resolve(settings.vlm_server_connect_timeout, settings.vlm_server_read_timeout,
                                      settings.vlm_server_deadline)
    sampling = server_sampling(settings.decoding)
    vlm = OpenAIServerVLM(
        settings.vlm_server, settings.vlm_server_model or "",
        api_key=settings.api_key or os.environ.get("OPENAI_API_KEY"), timeouts=timeouts,
        max_new_tokens=max_new_tokens, min_pixels=settings.min_pixels, max_pixels=settings.max_pixels,
        sampling=sampling.main,
    )
    verify_budget = settings.decoding.verify_max_new_tokens or max_new_tokens
    verifier = vlm.with_sampling(sampling.verify, max_new_tokens=verify_budget)
    record.update(vlm_model=settings.vlm_server_model, vlm_server=settings.vlm_server,
                  vlm_server_timeouts=asdict(timeouts), min_pixels=vlm.image_limits.min_pixels,
                  max_pixels=vlm.image_limits.max_pixels, decoding=sampling.as_record(max_new_tokens, verify_budget))
    return vlm, verifier


def _loaded_vlms(settings: BackendSettings, vlm_id: str, plan: MemoryPlan | None,
                 record: dict[str, Any]) -> tuple[VLM, VLM, int]:
    """The local VLM's main and verification views and their token budget, system prompts cached; records them."""
    max_pixels = settings.max_pixels or (plan.max_pixels if plan else None)
    loaded = _local_vlm(vlm_id, settings.device, settings.min_pixels, max_pixels, settings.prefix_cache,
                        plan.prefix_cache_bytes if plan else None)
    vlm, verifier, record["decoding"] = _decoding_views(loaded, settings, settings.preset == "tiny")
    if not on_zero_gpu():
        cache_system_prompts(vlm)
    paths = getattr(loaded, "decoding_paths", None)  # the local engine's choice of path (a stand-in VLM has none)
    record.update(vlm_model=vlm_id, min_pixels=settings.min_pixels, max_pixels=max_pixels,
                  prefix_cache=settings.prefix_cache, **({"decoding_path": paths()} if paths else {}))
    return vlm, verifier, record["decoding"]["main"]["max_new_tokens"]


# ---------------------------------------------------------------- point prompts (hand corrections)
# SAM 3's point-prompt model (``tracker.Sam3PointSegmenter``) refines masks from clicks in the "Correct" step. It is
# built on demand, separately from the run's backends: a run never needs it.


def tiny_tracker_path() -> Path:
    """Build (once) and return the folder of the tiny random-weight SAM 3 point-prompt model."""
    from .tiny.tracker import build_tiny_sam3_tracker

    with _build_lock:
        return build_tiny_sam3_tracker(cache_dir() / "tiny" / "sam3_tracker")


@functools.lru_cache(maxsize=4)
def _point_segmenter(model: str, device: str | None, dtype: str | None = None):
    from .sam.tracker import Sam3PointSegmenter

    check_model_source(model, "SAM 3 point-prompt model")
    return Sam3PointSegmenter.from_pretrained(model, device=device, dtype=dtype)


def share_sam3_backbone(tracker: Any, segmenter: Any) -> bool:
    """Let SAM 3's point model or video tracker use the detector's vision backbone and image encodings when both are
    SAM 3 models with the same backbone (their ``share_backbone_with``): one backbone in memory, and an image (or
    frame) the agent encoded costs only the tracker's neck. Returns whether it is shared."""
    share = getattr(tracker, "share_backbone_with", None)  # both trackers have it; neither is imported for this
    return bool(share(segmenter)) if isinstance(segmenter, Sam3Segmenter) and callable(share) else False


def build_point_segmenter(preset: Preset = "real", model: str | None = None, device: str | None = None,
                          dtype: str | None = None):
    """SAM 3's point-prompt model for a preset, loaded once per process and shared.

    Args:
        preset: ``"real"`` (``model`` or ``facebook/sam3``) or ``"tiny"`` (random weights, offline; ``model`` ignored).
        model: Hugging Face id or local folder of SAM 3 (``real`` preset).
        device: ``"cuda"``, ``"cpu"`` or ``None`` (CUDA when available).
        dtype: ``"float32"`` (``None``) or ``"bfloat16"``: SAM 3's dtype (``Backends.settings["sam3_dtype"]``), so
            that the two share their vision backbone.

    Returns:
        a ``tracker.Sam3PointSegmenter``.

    Raises:
        InputError: unknown preset.
        BackendError: the model cannot be loaded (the message names it and the fix).
    """
    if preset not in ("real", "tiny"):
        raise InputError(f"unknown preset {preset!r}: use 'real' or 'tiny'")
    model_id = str(tiny_tracker_path()) if preset == "tiny" else (model or DEFAULT_SAM3_MODEL)
    return _point_segmenter(model_id, device, dtype or "float32")  # one cache entry for None and "float32"


# SAM 3's video tracker (``video_tracker.Sam3VideoTracker``), built on demand like the point model: an image run never
# loads it.


def tiny_video_tracker_path() -> Path:
    """Build (once) and return the folder of the tiny random-weight SAM 3 video tracker."""
    from .tiny.tracker_video import build_tiny_sam3_tracker_video

    with _build_lock:
        return build_tiny_sam3_tracker_video(cache_dir() / "tiny" / "sam3_tracker_video")


@functools.lru_cache(maxsize=4)
def _video_tracker(model: str, device: str | None, dtype: str):
    from .sam.video_tracker import Sam3VideoTracker

    check_model_source(model, "SAM 3 video tracker")
    return Sam3VideoTracker.from_pretrained(model, device=device, dtype=dtype)


def build_video_tracker(preset: Preset = "real", model: str | None = None, device: str | None = None,
                        dtype: str | None = None):
    """SAM 3's video tracker for a preset, loaded once per process and shared (``share_sam3_backbone`` then gives it
    the detector's backbone). Arguments and errors as :func:`build_point_segmenter`; returns a
    ``video_tracker.Sam3VideoTracker``."""
    if preset not in ("real", "tiny"):
        raise InputError(f"unknown preset {preset!r}: use 'real' or 'tiny'")
    model_id = str(tiny_video_tracker_path()) if preset == "tiny" else (model or DEFAULT_SAM3_MODEL)
    return _video_tracker(model_id, device, dtype or "float32")
