"""Launch settings of the app, from command-line flags and environment variables.

Every flag has an environment variable, so the same ``app.py`` runs locally and as a Hugging Face
Space (where only the environment can be set). A flag given on the command line wins over its
variable; the variable wins over the built-in default. Nothing heavy (torch, Gradio) is imported
before the flags are parsed, so ``python app.py --help`` answers at once.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent.tool_format import check_tool_format
from ..cli.flags import DENSE_TILES_HELP, VLM_MODEL_HELP, add_decoding_arguments, add_tool_format_argument
from ..errors import InputError
from ..limits import DEFAULT_MAX_ROUNDS, DEFAULT_SCORE_THRESHOLD, MAX_ROUNDS_LIMIT
from ..models.zerogpu import on_zero_gpu
from ..tiny import TINY_VLM_KINDS
from ..vlm.timeouts import TIMEOUT_ENVIRONMENT, ServerTimeouts

if TYPE_CHECKING:  # presets imports torch: loaded only once the flags are parsed, so --help is instant
    from ..presets import BackendSettings


def _default_backend() -> BackendSettings:
    from ..presets import BackendSettings

    return BackendSettings()

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
DEFAULT_CONCURRENCY = 1  # one GPU: one run at a time; others wait in the queue
# Largest photo a run in the app accepts (pixels): a shared demo serves one run at a time, and an 8 MP run's trace
# .zip (about 110 MB with 4 masks verified) stays within what the app's own Inspect and Correct tabs read back
# (safe_read.MAX_ZIP_BYTES); the command line takes up to images.MAX_PIXELS.
APP_MAX_IMAGE_PIXELS = 8_000_000

# A ZeroGPU Space's defaults (docs/gpu.md "ZeroGPU Spaces"): with these token budgets a main call asks for about 33 s
# of GPU and a batch of 8 verifications for 46 s (estimates; x1.5 on the half Blackwell slice: 50 and 69 s), so each
# call of a run can start within the 2 minutes a day ZeroGPU gives a visitor without an account, and 8 rounds bound
# what a run can use. The photo limit bounds what each call sends to the GPU worker (the photo and the overlay,
# pickled) and the full-size masks it sends back. Flags and variables still win.
SPACE_DEFAULTS: dict[str, int] = {"max_rounds": 8, "max_image_pixels": 4_000_000, "max_new_tokens": 512,
                                  "verify_max_new_tokens": 256}

# flag destination -> environment variable
ENVIRONMENT: dict[str, str] = {
    "preset": "SAM3_AGENT_PRESET",
    "vlm_model": "SAM3_AGENT_VLM_MODEL",
    "vlm_server": "SAM3_AGENT_VLM_SERVER",
    "vlm_server_model": "SAM3_AGENT_VLM_SERVER_MODEL",
    "script": "SAM3_AGENT_SCRIPT",
    "script_piece_delay": "SAM3_AGENT_SCRIPT_PIECE_DELAY",
    "sam3_model": "SAM3_AGENT_SAM3_MODEL",
    "sam3_dtype": "SAM3_AGENT_SAM3_DTYPE",
    "tiny_vlm": "SAM3_AGENT_TINY_VLM",
    "device": "SAM3_AGENT_DEVICE",
    "max_rounds": "SAM3_AGENT_MAX_ROUNDS",
    "score_threshold": "SAM3_AGENT_SCORE_THRESHOLD",
    "tool_format": "SAM3_AGENT_TOOL_FORMAT",
    "dense_tiles": "SAM3_AGENT_DENSE_TILES",
    "min_pixels": "SAM3_AGENT_MIN_PIXELS",
    "max_pixels": "SAM3_AGENT_MAX_PIXELS",
    "max_new_tokens": "SAM3_AGENT_MAX_NEW_TOKENS",
    "max_image_pixels": "SAM3_AGENT_MAX_IMAGE_PIXELS",
    "verify_max_new_tokens": "SAM3_AGENT_VERIFY_MAX_NEW_TOKENS",
    "decoding": "SAM3_AGENT_DECODING",
    "temperature": "SAM3_AGENT_TEMPERATURE",
    "top_p": "SAM3_AGENT_TOP_P",
    "top_k": "SAM3_AGENT_TOP_K",
    "seed": "SAM3_AGENT_SEED",
    "prefix_cache": "SAM3_AGENT_PREFIX_CACHE",
    "vlm_server_connect_timeout": TIMEOUT_ENVIRONMENT["connect"],
    "vlm_server_read_timeout": TIMEOUT_ENVIRONMENT["read"],
    "vlm_server_deadline": TIMEOUT_ENVIRONMENT["deadline"],
    "concurrency": "SAM3_AGENT_CONCURRENCY",
    "review_root": "SAM3_AGENT_REVIEW_ROOT",
    "host": "GRADIO_SERVER_NAME",
    "port": "GRADIO_SERVER_PORT",
}


@dataclass(frozen=True)
class AppSettings:
    """How the app was launched.

    Attributes:
        backend: which models to load (shared by all sessions).
        max_rounds: default round budget of a run (the UI may change it per run).
        score_threshold: default SAM 3 score threshold (the UI may change it per run).
        tool_format: how the main model calls the tools (``agent.tool_format``: ``"reference"`` or ``"native"``).
        dense_tiles: the opt-in of ``AgentConfig.dense_tiles`` (a dense set's tiles: up to 6 images a main request).
        script_piece_delay: seconds between streamed pieces of a scripted VLM (0: as fast as possible);
            lets a replay stream visibly and be stopped mid-generation.
        concurrency: runs processed at once across all sessions (1 suits one GPU).
        max_image_pixels: largest photo (width * height) a run accepts; larger ones are refused with a message.
        host / port: where the server listens.
        review_root: folder under which the Review tab opens batch outputs by path (``None``: .zip uploads only).
    """

    backend: BackendSettings = field(default_factory=_default_backend)
    max_rounds: int = DEFAULT_MAX_ROUNDS
    score_threshold: float = DEFAULT_SCORE_THRESHOLD
    tool_format: str = "reference"
    dense_tiles: bool = False
    script_piece_delay: float = 0.0
    concurrency: int = DEFAULT_CONCURRENCY
    max_image_pixels: int = APP_MAX_IMAGE_PIXELS
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    review_root: Path | None = None


def build_parser() -> argparse.ArgumentParser:
    """The ``app.py`` command line (defaults are applied afterwards, from the environment)."""
    parser = argparse.ArgumentParser(
        prog="python app.py",
        description="SAM3 Agent web app. Every flag can also be set with the environment variable in brackets.",
    )
    add = parser.add_argument
    add("--preset", choices=["real", "tiny"], help="real: Hub models (default); tiny: random tiny models, offline")
    add("--vlm-model", help=f"{VLM_MODEL_HELP} (default Qwen/Qwen3-VL-8B-Instruct)")
    add("--vlm-server", help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    add("--vlm-server-model", help="model name on that server")
    add("--script", help="JSON file of VLM responses replayed from the start on every run")
    add("--script-piece-delay", type=float, help="seconds between streamed pieces of a scripted reply (default 0)")
    add("--sam3-model", help="SAM 3 id or local folder")
    add("--sam3-dtype", choices=["float32", "bfloat16"],
        help="SAM 3's precision (default float32; on a GPU too small for it, bfloat16 is picked)")
    add("--tiny-vlm", choices=TINY_VLM_KINDS, help="tiny VLM architecture (with --preset tiny)")
    add("--device", choices=["cuda", "cpu"], help="default: cuda when available")
    add("--max-rounds", type=int, help=f"default round budget (default {DEFAULT_MAX_ROUNDS})")
    add("--score-threshold", type=float, help=f"default SAM 3 score threshold (default {DEFAULT_SCORE_THRESHOLD})")
    add("--min-pixels", type=int, help="lower bound on pixels per image given to the VLM")
    add("--max-pixels", type=int, help="upper bound on pixels per image given to the VLM")
    add_decoding_arguments(parser)
    add_tool_format_argument(parser, default=None)
    add("--dense-tiles", choices=["on", "off"], help=f"{DENSE_TILES_HELP} (default off)")
    add("--max-image-pixels", type=int,
        help=f"largest photo a run accepts, in pixels (default {APP_MAX_IMAGE_PIXELS:,}; stated on the page)")
    timeouts = ServerTimeouts()
    add("--vlm-server-connect-timeout", type=float, metavar="S",
        help=f"seconds to connect to the VLM server (default {timeouts.connect:g})")
    add("--vlm-server-read-timeout", type=float, metavar="S",
        help=f"seconds of silence allowed while the VLM server answers (default {timeouts.read:g})")
    add("--vlm-server-deadline", type=float, metavar="S",
        help=f"seconds for one whole VLM server call, retries included (default {timeouts.deadline:g})")
    add("--prefix-cache", choices=["on", "off"],
        help="reuse prompt-prefix KV caches in the local VLM (default on; off: same output, verified on CPU in "
             "float32; slower, less memory)")
    add("--concurrency", type=int, help=f"runs processed at once (default {DEFAULT_CONCURRENCY})")
    add("--review-root", metavar="FOLDER",
        help="folder under which the Review tab opens batch outputs by path (default: none, .zip uploads only)")
    add("--host", help=f"address to listen on (default {DEFAULT_HOST})")
    add("--port", type=int, help=f"port to listen on (default {DEFAULT_PORT})")
    add("-v", "--verbose", action="store_true", help="log debug messages")
    for action in parser._actions:
        variable = ENVIRONMENT.get(action.dest)
        if variable and action.help:
            action.help += f" [{variable}]"
    return parser


# flag destination -> how its environment variable's text becomes a value (the others are taken as text)
CONVERTERS: dict[str, Callable[[str], object]] = {
    "max_rounds": int, "score_threshold": float, "min_pixels": int, "max_pixels": int,
    "max_new_tokens": int, "concurrency": int, "port": int, "script_piece_delay": float, "max_image_pixels": int,
    "vlm_server_connect_timeout": float, "vlm_server_read_timeout": float, "vlm_server_deadline": float,
    "verify_max_new_tokens": int, "temperature": float, "top_p": float, "top_k": int, "seed": int,
}


def _typed(name: str, raw: str, convert: Callable[[str], object]) -> object:
    try:
        return convert(raw)
    except ValueError:
        raise InputError(f"environment variable {ENVIRONMENT[name]}={raw!r} is not a valid value") from None


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[AppSettings, bool]:
    """Settings from flags (first) and environment variables (second).

    Args:
        argv: command-line arguments without the program name (``None``: ``sys.argv[1:]``).
        environ: the environment (``None``: ``os.environ``).

    Returns:
        The settings and whether verbose logging was asked for.

    Raises:
        InputError: an environment variable holds a value of the wrong type or choice, or a number
            is out of range (round budget < 1, threshold outside [0, 1], port outside 1..65535...).
        SystemExit: bad flags (argparse prints the usage).
    """
    parser = build_parser()
    args = parser.parse_args(argv)  # exits on --help before anything heavy is imported
    values = _space_defaults(_given_values(parser, args, os.environ if environ is None else environ))
    settings = _app_settings(values, _backend_settings(values))
    check_settings(settings)
    return settings, bool(args.verbose)


def _given_values(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  env: Mapping[str, str]) -> dict[str, object]:
    """Each setting's given value (``None``: not given): its flag, else its environment variable, converted and
    checked against the flag's choices."""
    choices = {a.dest: a.choices for a in parser._actions if a.choices}
    values: dict[str, object] = {}
    for name, variable in ENVIRONMENT.items():
        value = getattr(args, name)
        raw = env.get(variable, "").strip()
        if value is None and raw:
            value = _typed(name, raw, CONVERTERS[name]) if name in CONVERTERS else raw
            if name in choices and value not in choices[name]:
                raise InputError(f"environment variable {variable}={raw!r} must be one of {sorted(choices[name])}")
        values[name] = value
    return values


def _space_defaults(values: Mapping[str, object]) -> dict[str, object]:
    """``values`` with ``SPACE_DEFAULTS`` for those not given, on ZeroGPU hardware (the tiny preset keeps its own
    token budgets)."""
    given = dict(values)
    if on_zero_gpu():
        for name, default in SPACE_DEFAULTS.items():
            if given[name] is None and not (name.endswith("new_tokens") and given["preset"] == "tiny"):
                given[name] = default
    return given


def _pick(values: Mapping[str, object], name: str, default: object) -> object:
    return default if values[name] is None else values[name]


def _backend_settings(values: Mapping[str, object]) -> BackendSettings:
    """Which models to load, from the given values (a value not given keeps the backend's own default)."""
    from ..engine.decoding import DecodingOverrides  # torch: imported only once the flags are parsed
    from ..presets import BackendSettings

    return BackendSettings(
        preset=_pick(values, "preset", "real"),  # type: ignore[arg-type]
        vlm_model=values["vlm_model"],  # type: ignore[arg-type]
        vlm_server=values["vlm_server"],  # type: ignore[arg-type]
        vlm_server_model=values["vlm_server_model"],  # type: ignore[arg-type]
        script=values["script"],  # type: ignore[arg-type]
        sam3_model=values["sam3_model"],  # type: ignore[arg-type]
        device=values["device"],  # type: ignore[arg-type]
        min_pixels=values["min_pixels"],  # type: ignore[arg-type]
        max_pixels=values["max_pixels"],  # type: ignore[arg-type]
        max_new_tokens=values["max_new_tokens"],  # type: ignore[arg-type]
        tiny_vlm_kind=_pick(values, "tiny_vlm", "qwen3_vl"),  # type: ignore[arg-type]
        prefix_cache=_pick(values, "prefix_cache", "on") == "on",
        vlm_server_connect_timeout=values["vlm_server_connect_timeout"],  # type: ignore[arg-type]
        vlm_server_read_timeout=values["vlm_server_read_timeout"],  # type: ignore[arg-type]
        vlm_server_deadline=values["vlm_server_deadline"],  # type: ignore[arg-type]
        sam3_dtype=values["sam3_dtype"],  # type: ignore[arg-type]
        decoding=DecodingOverrides(
            greedy=None if values["decoding"] is None else values["decoding"] == "greedy",
            temperature=values["temperature"],  # type: ignore[arg-type]
            top_p=values["top_p"],  # type: ignore[arg-type]
            top_k=values["top_k"],  # type: ignore[arg-type]
            seed=values["seed"],  # type: ignore[arg-type]
            verify_max_new_tokens=values["verify_max_new_tokens"],  # type: ignore[arg-type]
        ),
    )


def _app_settings(values: Mapping[str, object], backend: BackendSettings) -> AppSettings:
    """The app's own settings from the given values (built-in defaults for those not given), around ``backend``."""
    return AppSettings(
        backend=backend,
        max_rounds=int(_pick(values, "max_rounds", DEFAULT_MAX_ROUNDS)),  # type: ignore[call-overload]
        score_threshold=float(_pick(values, "score_threshold", DEFAULT_SCORE_THRESHOLD)),  # type: ignore[arg-type]
        tool_format=str(_pick(values, "tool_format", "reference")),
        dense_tiles=_pick(values, "dense_tiles", "off") == "on",
        script_piece_delay=float(_pick(values, "script_piece_delay", 0.0)),  # type: ignore[arg-type]
        concurrency=int(_pick(values, "concurrency", DEFAULT_CONCURRENCY)),  # type: ignore[call-overload]
        max_image_pixels=int(_pick(values, "max_image_pixels", APP_MAX_IMAGE_PIXELS)),  # type: ignore[call-overload]
        host=str(_pick(values, "host", DEFAULT_HOST)),
        port=int(_pick(values, "port", DEFAULT_PORT)),  # type: ignore[call-overload]
        review_root=None if values["review_root"] is None else Path(str(values["review_root"])).expanduser(),
    )


def check_settings(settings: AppSettings) -> None:
    """Raise ``InputError`` naming the first out-of-range value (model settings: ``presets.check_backend_settings``)."""
    from ..presets import check_backend_settings  # torch: imported only once the flags are parsed

    check_backend_settings(settings.backend)
    if not 1 <= settings.max_rounds <= MAX_ROUNDS_LIMIT:
        raise InputError(f"the round budget must be between 1 and {MAX_ROUNDS_LIMIT}, got {settings.max_rounds}")
    if not 0.0 <= settings.score_threshold <= 1.0:
        raise InputError(f"the score threshold must be in [0, 1], got {settings.score_threshold}")
    check_tool_format(settings.tool_format)
    if settings.script_piece_delay < 0:
        raise InputError(f"the script piece delay must be >= 0 seconds, got {settings.script_piece_delay}")
    if settings.concurrency < 1:
        raise InputError(f"concurrency must be at least 1, got {settings.concurrency}")
    if settings.max_image_pixels < 1:
        raise InputError(f"the image pixel limit must be at least 1, got {settings.max_image_pixels}")
    if not 1 <= settings.port <= 65535:
        raise InputError(f"the port must be between 1 and 65535, got {settings.port}")
    if settings.review_root is not None and not settings.review_root.is_dir():
        raise InputError(f"the review folder {settings.review_root} (--review-root, SAM3_AGENT_REVIEW_ROOT) is not a "
                         "folder: give the folder that holds your batch outputs")
