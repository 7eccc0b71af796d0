"""What verification established about each mask, derived from a trace's rounds (never stored: the verdicts are).

Three states, as every front end words them:

- ``CONFIRMED``: the last ``examine_each_mask`` that checked the mask accepted it;
- ``NOT_CONFIRMED``: it was kept without a usable answer: its check failed, or gave no clear verdict even when asked
  again (verdict ``"unconfirmed"``; traces written before issue 30 stored ``"accept"``, read as ``"unconfirmed"``);
- ``NOT_EXAMINED``: no ``examine_each_mask`` checked it since its ``segment_phrase`` (none ran, or it named other
  masks).

``final_mask_checks`` follows the masks through the rounds: a ``segment_phrase`` that ran starts a new set, all
``NOT_EXAMINED``; an ``examine_each_mask`` that ran gives each mask it checked the state of its verdict and keeps the
survivors in order; the final masks are found in the set shown last by their RLE (``select_masks_and_return`` picks
masks of that set). A mask the trace cannot trace back (a hand-built trace) is ``NOT_EXAMINED``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .mask_set import Masks
from .types import MaskVerdict, Round, Trace

CONFIRMED, NOT_CONFIRMED, NOT_EXAMINED = "confirmed", "not_confirmed", "not_examined"
CHECK_STATES = (CONFIRMED, NOT_CONFIRMED, NOT_EXAMINED)
CHECK_WORDS = {CONFIRMED: "confirmed by verification", NOT_CONFIRMED: "not confirmed by verification",
               NOT_EXAMINED: "not examined"}  # what a page or a printout says of each state


def verdict_state(verdict: MaskVerdict) -> str | None:
    """``CONFIRMED`` for an accept, ``NOT_CONFIRMED`` for a mask kept unconfirmed, ``None`` for a rejection."""
    return {"accept": CONFIRMED, "unconfirmed": NOT_CONFIRMED}.get(verdict.verdict)


def _examined(r: Round) -> bool:
    return r.error is None and r.call is not None and r.call.name == "examine_each_mask" and r.result is not None


def _segmented(r: Round) -> bool:
    return r.error is None and r.call is not None and r.call.name == "segment_phrase" and r.result is not None


def checks_after_rounds(rounds: Sequence[Round]) -> tuple[Masks | None, list[str]]:
    """The masks current after ``rounds`` and the state of each (``CHECK_STATES``), in their order."""
    current: Masks | None = None
    states: list[str] = []
    for r in rounds:
        if _segmented(r):
            current = r.result.masks  # type: ignore[union-attr]
            states = [NOT_EXAMINED] * (len(current) if current is not None else 0)
        elif _examined(r) and current is not None and len(states) == len(current):
            by_number = {v.mask_number: v for v in r.result.verdicts}  # type: ignore[union-attr]
            states = [verdict_state(by_number[n]) if n in by_number else states[n - 1]  # type: ignore[misc]
                      for n in range(1, len(current) + 1) if n not in by_number or by_number[n].kept]
            current = r.result.masks  # type: ignore[union-attr]
            if current is None or len(current) != len(states):  # a hand-built trace: nothing can be traced back
                states = [NOT_EXAMINED] * (len(current) if current is not None else 0)
    return current, states


def final_mask_checks(trace: Trace) -> list[str]:
    """The state (``CHECK_STATES``) of each final mask of ``trace``, in answer order (empty without final masks)."""
    final = trace.final_masks
    if final is None or len(final) == 0:
        return []
    current, states = checks_after_rounds(trace.rounds)
    index: dict[bytes | str, list[int]] = {}
    if current is not None:
        for k, counts in enumerate(current.counts):
            index.setdefault(counts, []).append(k)
    result = []
    for counts in final.counts:
        found = index.get(counts)
        result.append(states[found.pop(0)] if found else NOT_EXAMINED)
    return result
