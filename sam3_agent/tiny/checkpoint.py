"""Writing a built tiny checkpoint once: staged in a sibling folder, moved in, the marker file last.

A marker file holding the builder's signature (version and arguments) says the folder is complete;
a matching marker skips the build, and a half-written folder is never taken for a finished one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def is_built(out_dir: Path, marker_file: str, signature: str) -> bool:
    """True when ``out_dir/marker_file`` holds exactly ``signature``."""
    marker = Path(out_dir) / marker_file
    try:
        return marker.is_file() and marker.read_text(encoding="utf-8") == signature
    except (OSError, UnicodeDecodeError):
        return False


def write_checkpoint(out_dir: Path, marker_file: str, signature: str, save: Callable[[Path], None]) -> None:
    """Call ``save(staging_folder)``, then move its files into ``out_dir`` and write the marker last.

    Each move is atomic; a stale marker is removed first so an interrupted rebuild reads as unbuilt.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.building-", dir=out_dir.parent) as tmp:
        staging = Path(tmp)
        save(staging)
        stale = out_dir / marker_file
        if stale.exists():
            stale.unlink()
        for path in sorted(staging.iterdir()):
            target = out_dir / path.name
            if target.is_dir() and not path.is_dir():
                shutil.rmtree(target)
            os.replace(path, target)
        # the marker's staging name is unique too: two processes building the same checkpoint at once (test workers)
        # each move their own identical files in, and neither loses its marker to the other's rename
        marker_tmp = staging / f".{marker_file}.tmp"
        marker_tmp.write_text(signature, encoding="utf-8")
        os.replace(marker_tmp, out_dir / marker_file)


def json_signature(builder: str, version: object, seed: int) -> str:
    """A marker signature naming the builder module, its build version and the seed."""
    return json.dumps({"builder": builder, "version": version, "seed": seed})


def save_model_and_processor(model, processor) -> Callable[[Path], None]:
    """A ``save`` for :func:`write_checkpoint` that writes both with ``save_pretrained``."""

    def save(staging: Path) -> None:
        model.save_pretrained(staging)
        processor.save_pretrained(staging)

    return save


def seeded_model(build: Callable[[], Any], seed: int) -> Any:
    """``build()`` (a torch module) in eval mode, its construction drawing from a generator seeded with ``seed``;
    the global torch RNG state is restored afterwards, so building leaves the caller's randomness alone."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build().eval()


def redraw_by_fan_in(model: Any, generator: Any) -> None:
    """Redraw ``model``'s weights in module order: linear and convolution weights with std 1/sqrt(fan_in), their
    biases 0, embeddings with std 1; norms untouched.

    ``transformers``' own init (std 0.02 everywhere) leaves a random network's activations tiny, so its output
    hardly depends on its input (a tiny Qwen wrote the same tokens for most prompts; a tiny SAM 3's mask logits
    were ~1e-4, every pixel a coin flip). Fan-in scaling keeps activations O(1): outputs follow the input.
    """
    import math

    import torch
    from torch import nn

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d)):
                weight = module.weight
                # a transposed convolution (kernel == stride here) feeds each output from in_channels inputs
                fan_in = int(weight.shape[0]) if isinstance(module, nn.ConvTranspose2d) else int(weight[0].numel())
                weight.copy_(torch.randn(weight.shape, generator=generator) * (1.0 / math.sqrt(fan_in)))
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator))
