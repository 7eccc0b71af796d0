"""Builders of tiny random-weight models (real architectures, shrunken configs) for offline tests and demos.

Qwen2.5-VL / Qwen3-VL (``qwen``), Qwen3.5 / Qwen3.6 (``qwen3_5``), Gemma 3 (``gemma3``: a family the inference engine
does not know, so it runs on the plain path), the ``small`` Qwen3-VL of the benchmark, SAM 3, its point model and its
video models (``sam3``, ``tracker``, ``tracker_video``); ``templates`` holds the Qwen chat templates, ``checkpoint``
the once-only writing of a build. Imports: the ground floor only (and ``transformers``, ``tokenizers``).
"""

from __future__ import annotations

from pathlib import Path

# The tiny VLM architectures (``presets.tiny_model_paths``); the command line and the app offer these choices.
TINY_VLM_KINDS = ("qwen3_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "gemma3")


def build_tiny_vlm(out_dir: Path, kind: str) -> Path:
    """Build (once) the tiny VLM of ``kind`` (one of ``TINY_VLM_KINDS``) in ``out_dir``; returns the folder.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind in ("qwen3_5", "qwen3_5_moe"):
        from .qwen3_5 import build_tiny_qwen3_5

        return build_tiny_qwen3_5(out_dir, kind=kind)  # type: ignore[arg-type]
    if kind == "gemma3":
        from .gemma3 import build_tiny_gemma3

        return build_tiny_gemma3(out_dir)
    if kind in ("qwen3_vl", "qwen2_5_vl"):
        from .qwen import build_tiny_qwen

        return build_tiny_qwen(out_dir, kind=kind)  # type: ignore[arg-type]
    raise ValueError(f"unknown tiny VLM kind {kind!r}: use one of {', '.join(TINY_VLM_KINDS)}")
