"""``python -m sam3_agent.smoke``: the real models checked on a GPU (docs/gpu.md#smoke-test-on-a-gpu). Exit status:
0 every check passed (or was not judged), 1 a check failed, 2 bad arguments, 5 no CUDA GPU (add ``--allow-cpu``
with ``--preset tiny``), 6 weights not in the Hugging Face cache."""

from __future__ import annotations

import argparse
import gc
import logging
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..tiny import TINY_VLM_KINDS

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU, EXIT_NO_WEIGHTS = 0, 1, 2, 5, 6
DEFAULT_REPORT = "smoke-report.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.smoke", description=__doc__)
    add = parser.add_argument
    add("--preset", choices=["real", "tiny"], default="real", help="real: the Hub models (default); tiny: offline")
    add("--vlm-model", help="VLM id or folder (default Qwen/Qwen3-VL-8B-Instruct); any image-text-to-text model: one "
                            "the engine does not know runs on plain generate, and the report says why")
    add("--tiny-vlm", choices=TINY_VLM_KINDS, default="qwen3_vl",
        help="which tiny VLM --preset tiny builds (default qwen3_vl; gemma3 runs on plain generate)")
    add("--sam3-model", help="SAM 3 id or folder (default facebook/sam3)")
    add("--thinking-model", help="also run the first request of this Thinking VLM (e.g. Qwen/Qwen3-VL-8B-Thinking)")
    add("--max-rounds", type=int, default=10, help="round budget of each example query (default 10)")
    add("--examples", type=int, help="run only the first N example queries (default all)")
    add("--max-new-tokens", type=int, default=64, help="tokens per request when comparing decoding paths (default 64)")
    add("--out", default=DEFAULT_REPORT, help=f"JSON report to write (default {DEFAULT_REPORT})")
    add("--allow-cpu", action="store_true", help="run without CUDA (only with --preset tiny: for tests)")
    add("-v", "--verbose", action="store_true", help="log debug messages")
    return parser


def environment() -> dict[str, Any]:
    import gradio
    import torch
    import transformers

    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                           "torch": torch.__version__, "transformers": transformers.__version__,
                           "gradio": gradio.__version__, "cuda": torch.version.cuda,
                           "device": "cuda" if torch.cuda.is_available() else "cpu"}
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        env.update(device_name=properties.name, gpu_total_gib=round(properties.total_memory / 1024**3, 1),
                   bf16_supported=torch.cuda.is_bf16_supported(), gpu_count=torch.cuda.device_count())
    return env


def missing_weights(ids: list[str]) -> list[str]:
    """The model ids neither a local folder nor in the Hugging Face cache."""
    from ..models.hub import is_cached, is_local_folder

    return [model_id for model_id in ids if not (is_local_folder(model_id) or is_cached(model_id))]


def main(argv: Sequence[str] | None = None, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code else EXIT_PASSED
    if args.max_rounds < 1 or (args.examples is not None and args.examples < 0) or args.max_new_tokens < 1:
        stderr.write("error: --max-rounds and --max-new-tokens must be at least 1, --examples at least 0\n")
        return EXIT_USAGE
    if args.tiny_vlm != "qwen3_vl" and args.preset != "tiny":
        stderr.write("error: --tiny-vlm chooses a tiny model: use it with --preset tiny (or pass --vlm-model)\n")
        return EXIT_USAGE
    if args.allow_cpu and args.preset != "tiny":
        stderr.write("error: --allow-cpu is for the tiny preset only (real weights on a CPU take hours)\n")
        return EXIT_USAGE
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        stderr.write("error: no CUDA GPU is visible to torch, and the smoke run checks the models on one. Run it on a "
                     "machine with an NVIDIA GPU (check `nvidia-smi` and that torch is a CUDA build), or try the "
                     "code paths offline with `--preset tiny --allow-cpu`.\n")
        return EXIT_NO_GPU
    if args.preset == "real":
        from ..sam.segmenter import DEFAULT_SAM3_MODEL
        from ..vlm.qwen_load import DEFAULT_VLM_MODEL

        wanted = [args.vlm_model or DEFAULT_VLM_MODEL, args.sam3_model or DEFAULT_SAM3_MODEL]
        missing = missing_weights(wanted + ([args.thinking_model] if args.thinking_model else []))
        if missing:
            stderr.write(f"error: not in the Hugging Face cache: {', '.join(missing)}. Download them first, e.g. "
                         f"`hf download {missing[0]}` (facebook/sam3 is gated: accept its licence on its Hub page and "
                         "run `hf auth login` first), or pass local folders with --vlm-model / --sam3-model.\n")
            return EXIT_NO_WEIGHTS
    report = run_checks(args, stdout)
    report.write(Path(args.out))
    stdout.write(report.summary() + f"\nJSON report: {args.out}\n")
    return EXIT_FAILED if report.failed else EXIT_PASSED


def run_checks(args: argparse.Namespace, stdout: TextIO):
    """Load the models once and run every check in order; returns the ``SmokeReport``."""
    from ..agent.prompts import load_prompts
    from ..presets import BackendSettings, build_backends, build_point_segmenter
    from . import checks
    from .page import check_page_load
    from .report import CheckResult, SmokeReport, measured

    report = SmokeReport(environment())
    settings = BackendSettings(preset=args.preset, vlm_model=args.vlm_model, sam3_model=args.sam3_model,
                               device=None if report.environment["device"] == "cuda" else "cpu",
                               tiny_vlm_kind=args.tiny_vlm)
    loading = CheckResult("loading")
    report.checks.append(loading)
    with measured(loading):
        backends = build_backends(settings)
        point = build_point_segmenter(args.preset, model=args.sam3_model, device=settings.device,
                                      dtype=backends.settings.get("sam3_dtype"))
        models = checks.Models(backends.vlm, backends.segmenter, point, backends.settings, load_prompts(),
                               judge=args.preset == "real")
        checks.check_loading(loading, models)
    if loading.passed is False:
        return report
    steps = [
        ("sam3_precision", lambda r: checks.check_sam3_precision(r, models)),
        ("first_request", lambda r: checks.check_first_request(r, models)),
        ("decoding_paths", lambda r: checks.check_decoding(r, models, args.max_new_tokens)),
        ("examples", lambda r: checks.check_examples(r, models, args.max_rounds, args.examples)),
    ]
    if args.thinking_model:
        steps.append(("thinking_request", lambda r: thinking_request(r, models, args.thinking_model)))
    steps.append(("page_load", lambda r: check_page_load(r, backends, point, settings)))
    for name, step in steps:
        result = CheckResult(name)
        report.checks.append(result)
        stdout.write(f"running {name}...\n")
        stdout.flush()
        with measured(result):
            step(result)
        gc.collect()
    return report


def thinking_request(result: Any, models: Any, model_id: str) -> None:
    """A Thinking VLM's first main request (loaded for this check only)."""
    import torch

    from ..vlm.transformers_qwen import TransformersQwenVLM
    from . import checks

    thinking = TransformersQwenVLM.from_pretrained(model_id, prefix_cache=False)
    try:
        checks.check_first_request(result, models, vlm=thinking)
    finally:
        del thinking
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
