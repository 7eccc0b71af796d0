"""The command line's model and agent flags, shared by ``run``, ``batch`` and ``eval`` (one definition, one reading).

``add_model_arguments`` declares them on a subcommand's parser; ``backend_settings`` and ``agent_config`` turn the
parsed values into ``presets.BackendSettings`` and ``agent.AgentConfig``. ``add_video_arguments`` declares the video
options of ``video``, ``batch`` and ``eval`` (the newcomer mode, clip caps), ``video_config`` and ``clip_caps`` read
them. Only light modules are imported at the top
(defaults come from ``limits`` and ``vlm.timeouts``), so ``--help`` loads no model library: ``presets`` (torch) is
imported when settings are built.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..limits import (
    DEFAULT_MAX_ROUNDS,
    DEFAULT_SCORE_THRESHOLD,
    DEFAULT_VERIFY_BATCH_SIZE,
    MAX_IMAGE_PIXELS,
    MAX_MAIN_IMAGES,
    MAX_MAIN_IMAGES_WITH_TILES,
    MAX_ROUNDS_LIMIT,
)
from ..tiny import TINY_VLM_KINDS
from ..vlm.timeouts import TIMEOUT_ENVIRONMENT, ServerTimeouts

if TYPE_CHECKING:
    from ..agent.config import AgentConfig
    from ..presets import BackendSettings


# which models --vlm-model takes (docs/models.md; the command line and the app say the same)
VLM_MODEL_HELP = ("Hugging Face id or local folder of the VLM: Qwen2.5-VL, Qwen3-VL or Qwen3.5 / Qwen3.6 (fast path), or "
                  "any other image-text-to-text model (plain generate; docs/models.md)")


def add_model_arguments(parser: Any, *, image_limit_help: str = "refuse input images with more pixels than this") -> None:
    """Declare the model, decoding and agent flags on ``parser`` (an ``argparse`` parser or argument group)."""
    add = parser.add_argument
    add("--preset", choices=["real", "tiny"], default="real",
        help="real: Hub models (default); tiny: random tiny models, offline (code paths only)")
    add("--vlm-model", help=f"{VLM_MODEL_HELP} (default Qwen/Qwen3-VL-8B-Instruct)")
    add("--vlm-server", help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    add("--vlm-server-model", help="model name on that server")
    timeouts = ServerTimeouts()
    for name, what in (("connect-timeout", "to connect to the server"),
                       ("read-timeout", "of silence allowed while the server answers"),
                       ("deadline", "for one whole server call, retries included")):
        key = name.split("-")[0]
        add(f"--vlm-server-{name}", type=float, metavar="S",
            help=f"seconds {what} (default ${TIMEOUT_ENVIRONMENT[key]} or {getattr(timeouts, key):g})")
    add("--script", help="JSON file of VLM responses to replay instead of a model (from the start for every run)")
    add("--sam3-model", help="SAM 3 id or local folder (default facebook/sam3, gated on the Hub)")
    add("--sam3-dtype", choices=["float32", "bfloat16"],
        help="SAM 3's precision (default float32; on a GPU too small for it, bfloat16 is picked)")
    add("--tiny-vlm", choices=TINY_VLM_KINDS, default="qwen3_vl",
        help="architecture of the tiny VLM (with --preset tiny)")
    add("--device", choices=["cuda", "cpu"], help="default: cuda when available")
    add("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS,
        help=f"round budget, 1 to {MAX_ROUNDS_LIMIT} (default {DEFAULT_MAX_ROUNDS})")
    add("--score-threshold", type=float, default=DEFAULT_SCORE_THRESHOLD,
        help=f"SAM 3 score threshold (default {DEFAULT_SCORE_THRESHOLD})")
    add("--min-pixels", type=int, help="lower bound on pixels per image given to the VLM")
    add("--max-pixels", type=int, help="upper bound on pixels per image given to the VLM")
    add_decoding_arguments(parser)
    add_tool_format_argument(parser)
    add("--dense-tiles", action="store_true", help=DENSE_TILES_HELP)
    add("--max-image-pixels", type=int, default=MAX_IMAGE_PIXELS,
        help=f"{image_limit_help} (default {MAX_IMAGE_PIXELS:,})")
    add("--verify-batch-size", type=int,
        help="masks verified per batched VLM call (1: one by one; same verdicts either way, verified on CPU in "
             f"float32; default {DEFAULT_VERIFY_BATCH_SIZE}, fewer on a small GPU)")
    add("--no-prefix-cache", dest="prefix_cache", action="store_false",
        help="recompute every prompt in full with transformers' generate (same output on CPU in float32, slower; "
             "saves the KV caches' memory)")



# --dense-tiles (command line) and --dense-tiles on|off (the app): the opt-in of ``AgentConfig.dense_tiles``
DENSE_TILES_HELP = (
    "opt-in: a dense set's overlay also goes to the main VLM as four enlarged tiles, so a main request holds up to "
    f"{MAX_MAIN_IMAGES_WITH_TILES} images (a VLM server must allow {MAX_MAIN_IMAGES_WITH_TILES}); default: at most "
    f"{MAX_MAIN_IMAGES}, the photo and the overlay, as in the reference agent, a dense overlay drawn at the VLM's "
    "pixel budget")


def add_tool_format_argument(parser: Any, default: str | None = "reference") -> None:
    """``--tool-format``: how the main model calls the tools (``agent.tool_format``); the command line and the app share it."""
    parser.add_argument(
        "--tool-format", choices=["reference", "native"], default=default,
        help="reference: the <tool> format of the reference agent, whose accuracy the SAM 3 paper reports (default); "
             "native: the tools as the chat template's function schema, called in the model's own <tool_call> format",
    )


def add_decoding_arguments(parser: Any) -> None:
    """Declare the token-budget and decoding flags (``--max-new-tokens`` ... ``--seed``) on ``parser``, with no
    defaults (``None``: the model's own); the command line (``add_model_arguments``) and the app share them."""
    add = parser.add_argument
    add("--max-new-tokens", type=int,
        help="token budget of each main VLM call (default per model: 2048, Thinking models 8192)")
    add("--verify-max-new-tokens", type=int,
        help="token budget of each mask verification (default per model: 512, Thinking models 4096)")
    add("--decoding", choices=["sample", "greedy"],
        help="how tokens are chosen (default: the model's generation config, on a server too; Qwen3-VL samples)")
    add("--temperature", type=float, help="sampling temperature of the main calls (implies sampling)")
    add("--top-p", type=float, help="nucleus sampling bound of the main calls (implies sampling)")
    add("--top-k", type=int, help="sample among the k most likely tokens (implies sampling)")
    add("--seed", type=int, help="seed of sampled decoding (default 0): the same seed repeats a run")

def backend_settings(args: argparse.Namespace) -> BackendSettings:
    """The ``presets.BackendSettings`` the flags describe, checked before any model loads.

    Raises:
        InputError: a flag out of range or one the settings would silently ignore (``presets.check_backend_settings``),
            or ``--max-image-pixels`` below 1.
    """
    from ..engine.decoding import DecodingOverrides
    from ..presets import BackendSettings, check_backend_settings

    if args.max_image_pixels < 1:
        raise InputError(f"--max-image-pixels must be at least 1, got {args.max_image_pixels}")
    settings = BackendSettings(
        preset=args.preset,
        vlm_model=args.vlm_model,
        vlm_server=args.vlm_server,
        vlm_server_model=args.vlm_server_model,
        script=args.script,
        sam3_model=args.sam3_model,
        device=args.device,
        min_pixels=args.min_pixels,
        max_pixels=args.max_pixels,
        max_new_tokens=args.max_new_tokens,
        tiny_vlm_kind=args.tiny_vlm,
        prefix_cache=args.prefix_cache,
        vlm_server_connect_timeout=args.vlm_server_connect_timeout,
        vlm_server_read_timeout=args.vlm_server_read_timeout,
        vlm_server_deadline=args.vlm_server_deadline,
        sam3_dtype=args.sam3_dtype,
        decoding=DecodingOverrides(
            greedy=None if args.decoding is None else args.decoding == "greedy",
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            verify_max_new_tokens=args.verify_max_new_tokens,
        ),
    )
    check_backend_settings(settings)
    return settings


def agent_config(args: argparse.Namespace, backend_record: dict[str, Any] | None = None) -> AgentConfig:
    """The ``agent.AgentConfig`` the flags describe; without ``--verify-batch-size``, the batch size the loaded
    backends planned (``backend_record["verify_batch_size"]``: smaller on a small GPU), else the default.

    Raises:
        InputError: a value out of range (the message names it).
    """
    from ..agent.config import AgentConfig

    planned = (backend_record or {}).get("verify_batch_size", DEFAULT_VERIFY_BATCH_SIZE)
    batch = args.verify_batch_size if args.verify_batch_size is not None else planned
    return AgentConfig(max_rounds=args.max_rounds, score_threshold=args.score_threshold, verify_batch_size=batch,
                       tool_format=getattr(args, "tool_format", None) or "reference",
                       dense_tiles=bool(getattr(args, "dense_tiles", False)))


def with_planned_batch(config: AgentConfig, args: argparse.Namespace,
                       backend_record: dict[str, Any]) -> AgentConfig:
    """``config`` with the backends' planned verification batch size, unless ``--verify-batch-size`` was given."""
    if args.verify_batch_size is not None:
        return config
    return dataclasses.replace(config, verify_batch_size=agent_config(args, backend_record).verify_batch_size)


def add_video_arguments(parser: Any) -> None:
    """Declare the video options (newcomer mode, clip caps) on ``parser`` (a parser or an argument group): the
    ``video`` command's, and a batch's for its video items."""
    add = parser.add_argument
    add("--newcomers", action="store_true",
        help="also add objects that appear elsewhere in the clip: SAM 3's detector runs with the final phrase on the "
             "frames and the verifier checks each new candidate (costs a detector call per frame and a VLM call per "
             "candidate)")
    add("--detect-every", type=int, default=1, metavar="N",
        help="with --newcomers, run the detector on every N-th frame (default 1)")
    add("--max-newcomer-checks", type=int, default=None, metavar="N",
        help="with --newcomers, most verifier checks of new candidates (default 10)")
    add("--max-frames", type=int, default=None, metavar="N", help="refuse clips with more frames (default 3,000)")
    add("--max-seconds", type=float, default=None, metavar="S", help="refuse clips longer than this (default 600 s)")


def video_config(args: argparse.Namespace) -> Any:
    """The ``video.run.VideoConfig`` of the video flags.

    Raises:
        InputError: a count below 1 (the message names it).
    """
    from ..video.run import VideoConfig

    extra = {} if args.max_newcomer_checks is None else {"max_newcomer_checks": args.max_newcomer_checks}
    return VideoConfig(newcomers=args.newcomers, detect_every=args.detect_every, **extra)


def clip_caps(args: argparse.Namespace) -> Any:
    """The ``video.clip_caps.ClipCaps`` of the video flags (pixels per frame: ``--max-image-pixels``).

    Raises:
        InputError: a cap that is not a positive number.
    """
    from ..video.clip_caps import DEFAULT_CLIP_CAPS, ClipCaps

    return ClipCaps(
        max_frames=args.max_frames if args.max_frames is not None else DEFAULT_CLIP_CAPS.max_frames,
        max_seconds=args.max_seconds if args.max_seconds is not None else DEFAULT_CLIP_CAPS.max_seconds,
        max_pixels=args.max_image_pixels,
        max_file_bytes=DEFAULT_CLIP_CAPS.max_file_bytes,
    )
