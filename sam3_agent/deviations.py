"""Where a run differs from the reference agent (Meta's ``sam3`` agent, whose accuracy the SAM 3 paper reports), and
which of those differences were in effect in one run: ``deviations_in(trace)``, derived from what the trace records
(its settings, its calls, its verdicts, its views), never stored apart.

``DEVIATIONS`` is the list docs/reference.md explains row by row, with its reason, its measured cost and, where one
exists, the switch that gives the reference's behaviour (tests/test_reference_doc.py keeps the two the same). A
deviation is ``always`` in effect (how the product is built: its prompts, its context rules, its reading of replies),
or only when a run's settings switch it on or its model uses it (a tool parameter the reference does not have).
The eval report counts, over a batch, the runs each was in effect in (``summary_lines``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .types import Trace


@dataclass(frozen=True)
class Deviation:
    """One difference from the reference agent.

    Attributes:
        key: its name, as docs/reference.md and the batch records write it.
        title: a few words for a report.
        always: True when every run has it; False when a setting or the model's use of a tool parameter turns it on.
        switch: how to get the reference's behaviour, or ``None`` when no switch exists.
    """

    key: str
    title: str
    always: bool
    switch: str | None = None


DEVIATIONS = (  # in docs/reference.md's order
    Deviation("own_prompts", "this project's own system prompts", True),
    Deviation("context_rules", "context rules: old mistakes dropped, gone overlays as text", True),
    Deviation("dense_overlay_enlarged", "a dense overlay drawn at the VLM's pixel budget", False),
    Deviation("dense_tiles", "a dense set's four tiles (six images a request)", False, "--dense-tiles left out"),
    Deviation("native_tool_format", "the model's own tool-call format", False, "--tool-format reference"),
    Deviation("reply_repairs", "tool calls read with repairs, mistakes fed back", True),
    Deviation("verdict_grammar", "verdicts read by a grammar, an unclear one asked again", True),
    Deviation("kept_unconfirmed", "a mask kept after a check that failed or stayed unclear", False),
    Deviation("verifier_views", "verifier views drawn at the processor's size", True),
    Deviation("examine_named_masks", "examine_each_mask on named masks only", False),
    Deviation("examine_in_groups", "examine_each_mask in groups", False),
    Deviation("selection_ranges", "mask ranges in a selection", False),
    Deviation("no_mask_cap", "any of up to 200 masks selectable", True),
    Deviation("selection_checks", "selection refused when a number is out of range or repeated", True),
    Deviation("round_budget", "round budget 30", True, "--max-rounds 100"),
)
KEYS = tuple(d.key for d in DEVIATIONS)
REFERENCE_MAX_ROUNDS = 100  # sam3.agent.agent_core.agent_inference(max_generations=100)


def _calls(trace: Trace, name: str) -> list[dict]:
    return [r.call.parameters for r in trace.rounds if r.call is not None and r.call.name == name and r.error is None]


def deviations_in(trace: Trace) -> list[str]:
    """The keys of ``DEVIATIONS`` in effect in the run of ``trace``, in ``DEVIATIONS`` order: the ``always`` ones
    (the round budget only when it is not the reference's), the switches of its settings and what its rounds used."""
    settings = trace.settings
    examine = _calls(trace, "examine_each_mask")
    selections = _calls(trace, "select_masks_and_return")
    views = [part.view for message in trace.messages for part in message.images if part.view is not None]
    verdicts = [v for r in trace.rounds if r.result is not None for v in r.result.verdicts]
    on = {
        "round_budget": settings.get("max_rounds") != REFERENCE_MAX_ROUNDS,
        "dense_overlay_enlarged": any(getattr(view, "enlarged", False) for view in views),
        "dense_tiles": bool(settings.get("dense_tiles")),
        "native_tool_format": settings.get("tool_format") == "native",
        "examine_named_masks": any("masks" in p for p in examine),
        "examine_in_groups": any(p.get("in_groups") is True for p in examine),
        "selection_ranges": any(isinstance(n, str) for p in selections for n in p.get("final_answer_masks", [])),
        "kept_unconfirmed": any(v.verdict == "unconfirmed" for v in verdicts),
    }
    return [d.key for d in DEVIATIONS if on.get(d.key, d.always)]


def summary_lines(per_run: Sequence[Sequence[str] | None]) -> list[str]:
    """One line per deviation in effect in any of the runs (``None``: a run whose record predates them), with how
    many of the runs it was in, in ``DEVIATIONS`` order; then how many runs did not record them."""
    known = [run for run in per_run if run is not None]
    counts = Counter(key for run in known for key in set(run))
    lines = [f"{d.title} ({d.key}): {counts[d.key]} of {len(known)} run(s)"
             + (f"; the reference's behaviour: {d.switch}" if d.switch else "")
             for d in DEVIATIONS if counts[d.key]]
    if len(known) < len(per_run):
        lines.append(f"{len(per_run) - len(known)} run(s) recorded before the deviations were: not counted")
    return lines
