"""The benchmark's verdict: which outputs agree across modes, the ratios the targets are about, and the ablation.

Two kinds of equality are checked and said apart in the output: the generated token ids compare the *model*
across modes (a decoding bug changes them); the verdicts and final masks are fixed by the benchmark's script
(scripted replies, six fixed masks), so they only show that every mode ran the agent the same way.
A ratio is compared with its target as printed (two decimals), so "2.00x" never reads "target >= 2x: NO".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .run import PHASES, VERDICTS, ModeResult, ratio_text

YES = {True: "yes", False: "NO"}


def _printed(value: float) -> float:
    """``value`` as the report prints it (two decimals), so a target is judged on the figure shown."""
    return round(value, 2)


@dataclass(frozen=True)
class Checks:
    """Outcome checks between the modes and the speed targets.

    Attributes:
        same_token_ids: every run of every mode generated the same token ids (compares the model).
        same_verdicts / same_final_masks: every run ended with the scripted verdicts and masks (fixed by the script).
        encodes: SAM 3 image encodes (naive, optimised).
        prefill_fraction_cli: optimised / naive prompt tokens computed, counting the one-time system-prompt
            prefill (what a single CLI run computes).
        prefill_fraction_app: the same without it (an app prefills once at start and serves many runs).
        verification_speedup / total_speedup: naive / optimised wall time of ``examine_each_mask`` and of the run.
    """

    same_token_ids: bool
    same_verdicts: bool
    same_final_masks: bool
    encodes: tuple[int, int]
    prefill_fraction_cli: float
    prefill_fraction_app: float
    verification_speedup: float
    total_speedup: float

    def lines(self) -> list[str]:
        cli, app = self.prefill_fraction_cli, self.prefill_fraction_app
        return [
            f"model outputs across modes: generated token ids identical: {YES[self.same_token_ids]} "
            "(compares the model: a decoding difference changes them)",
            f"agent outcomes across modes: verdicts {YES[self.same_verdicts]}, final masks "
            f"{YES[self.same_final_masks]} (fixed by the script: scripted replies and six fixed masks)",
            f"SAM 3 image encodes: naive {self.encodes[0]}, optimised {self.encodes[1]} "
            f"(target 2 -> 1: {YES[self.encodes == (2, 1)]})",
            f"VLM prefill tokens computed, optimised / naive, one CLI run (system prompts prefilled once, counted): "
            f"{cli:.1%} (target <= 40%: {YES[round(cli, 3) <= 0.40]})",
            f"  the same in a running app (system prompts prefilled once at start, not per run): {app:.1%}",
            f"verification (examine_each_mask tool) speed-up: {self.verification_speedup:.2f}x "
            f"(target >= 2x: {YES[_printed(self.verification_speedup) >= 2.0]})",
            f"total wall-time speed-up: {self.total_speedup:.2f}x "
            f"(target >= 2x: {YES[_printed(self.total_speedup) >= 2.0]})",
        ]


def compare(naive: ModeResult, optimised: ModeResult, every_run: Sequence[ModeResult] = (),
            load_prefill: int = 0) -> Checks:
    """Equality of outcomes (between the two modes and across ``every_run``) and the ratios the targets are about.

    ``load_prefill``: prompt tokens the optimised mode computed once before the run (the system prompts).
    """
    masks_a = naive.trace.final_masks if naive.trace is not None else None
    masks_b = optimised.trace.final_masks if optimised.trace is not None else None
    same_masks = masks_a is not None and masks_b is not None and np.array_equal(masks_a.masks, masks_b.masks)
    examine = PHASES.index("examine")
    runs = list(every_run) or [naive, optimised]
    naive_prefill = max(1, naive.total().prefill_tokens)
    return Checks(
        same_token_ids=all(r.output_ids == naive.output_ids for r in runs) and len(naive.output_ids) > 0,
        same_verdicts=all(r.verdicts() == naive.verdicts() for r in runs) and len(naive.verdicts()) == len(VERDICTS),
        same_final_masks=same_masks and all(
            r.trace is not None and r.trace.final_masks is not None
            and np.array_equal(r.trace.final_masks.masks, masks_a.masks) for r in runs
        ),
        encodes=(naive.total().sam3_encodes, optimised.total().sam3_encodes),
        prefill_fraction_cli=(optimised.total().prefill_tokens + load_prefill) / naive_prefill,
        prefill_fraction_app=optimised.total().prefill_tokens / naive_prefill,
        verification_speedup=naive.phases[examine].tool / max(1e-9, optimised.phases[examine].tool),
        total_speedup=naive.wall / max(1e-9, optimised.wall),
    )


def format_ablation(rows: Sequence[tuple[str, ModeResult, int]]) -> str:
    """What each speed-up adds, one row per mode (``(label, fastest run, one-time prefill)``), the first the baseline:
    wall time, time inside VLM calls, VLM prompt tokens computed (one-time prefill included), and the baseline's
    VLM time over each row's."""
    header = f"{'mode':<44} {'wall s':>8} {'VLM s':>8} {'prefill tok':>12} {'VLM speed-up':>13}"
    lines = [header, "-" * len(header)]
    base = rows[0][1].vlm_seconds
    for label, result, once in rows:
        lines.append(f"{label:<44} {result.wall:>8.3f} {result.vlm_seconds:>8.3f} "
                     f"{result.total().prefill_tokens + once:>12,} {ratio_text(base, result.vlm_seconds):>13}")
    return "\n".join(lines)
