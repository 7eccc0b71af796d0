"""The four tools: argument checks, preconditions and effects.

A tool never raises for a model mistake: bad arguments or an illegal order become a
``ToolOutcome`` whose reply explains the mistake (texts in ``prompts/feedback.toml``). Backend
faults (``BackendError``) propagate to the agent.

A few lines over 400: the four tools' checks and effects read best side by side (their texts, feedback keys and the
state they share); the view drawing and verification they call already live in ``imaging`` and ``verify``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from ..events import Event
from ..imaging.enlarged import enlarged_layout
from ..imaging.legibility import DEFAULT_BOUNDS, PixelBounds
from ..imaging.postprocess import postprocess_masks
from ..imaging.tiles import TILE_PLACES, shows_tiles
from ..imaging.views import MaskView, view_part
from ..limits import VERIFY_GROUP_SIZE
from ..mask_set import Masks
from ..messages import ImagePart, Message, TextPart, ToolCall
from ..sam.segmenter import Segmenter
from ..types import MaskVerdict, ToolResult
from ..vlm.base import VLM
from .config import AgentConfig
from .context import tried_phrases
from .prompts import Prompts
from .tool_specs import TOOL_SPECS
from .verify import RunCancelled, verify_masks
from .verify_groups import verify_in_groups

logger = logging.getLogger(__name__)


@dataclass
class ToolState:
    """What the tools read and change during one run.

    Attributes:
        image: the raw image (RGB, original resolution).
        query: the user's query.
        messages: the run's main conversation (``Trace.messages``), read only: the phrases already sent to SAM 3
            are those of its ``segment_phrase`` calls that ran (``context.tried_phrases``).
        masks: the current masks (numbered 1..N in the latest rendering); ``None`` before any
            ``segment_phrase`` ran; empty after zero detections or when every mask was rejected.
    """

    image: Image.Image
    query: str
    messages: Sequence[Message] = ()
    masks: Masks | None = None


@dataclass(frozen=True)
class ToolOutcome:
    """The result of handling one parsed call.

    Attributes:
        result: what the tool did (reply, masks, verdicts, final masks).
        error: feedback key of the model's mistake, or ``None`` when the tool ran.
        error_detail: the feedback text of that mistake (for the trace and the UI).
        starts_masks: True when a ``segment_phrase`` call ran and replaced the masks.
        status: ``"done"`` or ``"no_mask"`` when the call ended the run, else ``None``.
    """

    result: ToolResult
    error: str | None = None
    error_detail: str | None = None
    starts_masks: bool = False
    status: str | None = None


class CallError(Exception):
    """A model mistake in a tool call: ``key`` names the feedback text, ``fields`` fill it."""

    def __init__(self, key: str, **fields: Any) -> None:
        super().__init__(key)
        self.key = key
        self.fields = fields


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _quoted(phrases: Sequence[str]) -> str:
    """``"cup", "mug"``: phrases as the feedback texts list them."""
    return ", ".join(f'"{p}"' for p in phrases)


def check_parameters(call: ToolCall, arguments_key: str = "parameters") -> None:
    """Check a call's parameters against ``TOOL_SPECS``: the required ones present, no extras, right JSON types,
    not empty. The feedback shows the right call with ``arguments_key`` (``ToolSpec.schema_text``).

    Mask-number lists are only checked for being present here; ``check_mask_numbers`` checks them.

    Raises:
        CallError: ``missing_parameter``, ``extra_parameter``, ``wrong_type`` or ``empty_parameter``.
    """
    spec = TOOL_SPECS[call.name]
    schema = spec.schema_text(arguments_key)
    for parameter in spec.parameters:
        if parameter.required and parameter.name not in call.parameters:
            raise CallError("missing_parameter", tool=call.name, parameter=parameter.name, schema=schema)
    extras = [name for name in call.parameters if name not in spec.parameter_names]
    if extras:
        raise CallError("extra_parameter", tool=call.name, parameters=", ".join(extras), schema=schema)
    for parameter in spec.parameters:
        if parameter.name not in call.parameters:
            continue
        value = call.parameters[parameter.name]
        if parameter.json_type == "string":
            if not isinstance(value, str):
                raise CallError(
                    "wrong_type", tool=call.name, parameter=parameter.name, expected="a string", schema=schema
                )
            if not value.strip():
                raise CallError("empty_parameter", tool=call.name, parameter=parameter.name, schema=schema)
        elif parameter.json_type == "boolean" and not isinstance(value, bool):
            raise CallError("wrong_type", tool=call.name, parameter=parameter.name, expected="true or false",
                            schema=schema)


MASK_RANGE = re.compile(r"\s*(\d+)\s*-\s*(\d+)\s*")  # "5-9": masks 5 to 9, both included


def _numbers_of(item: Any, count: int, parameter: str) -> range | tuple[int]:
    """One entry of a mask-number list as the mask numbers it stands for: an int, or a string ``"A-B"`` (A <= B)
    for A to B inclusive, each bound checked against ``count`` before anything is expanded."""
    if isinstance(item, str) and (match := MASK_RANGE.fullmatch(item)):
        first, last = int(match.group(1)), int(match.group(2))
        if first > last:
            raise CallError("mask_number_not_integer", value=_json(item), parameter=parameter)
        for bound in (first, last):
            if bound < 1 or bound > count:
                raise CallError("mask_number_out_of_range", value=bound, count=count)
        return range(first, last + 1)
    if isinstance(item, bool) or not isinstance(item, int):
        raise CallError("mask_number_not_integer", value=_json(item), parameter=parameter)
    if item < 1 or item > count:
        raise CallError("mask_number_out_of_range", value=item, count=count)
    return (item,)


def check_mask_numbers(value: Any, count: int, parameter: str = "final_answer_masks") -> list[int]:
    """Validate 1-based mask numbers against the ``count`` masks currently shown.

    Each entry is a whole number or a range string ``"A-B"`` (masks A to B, both included: ``["1-150"]`` selects
    all of 150 masks in one short call). There is no cap below ``count``: SAM 3 returns up to 200 masks per phrase
    and a query may want every one of them. ``parameter`` names the list in the feedback: ``final_answer_masks``
    of ``select_masks_and_return`` or ``masks`` of ``examine_each_mask`` (whose empty list is
    ``empty_examine_list``).

    Returns:
        The numbers as a list of ints, in the order given, ranges expanded.

    Raises:
        CallError: ``mask_numbers_not_list``, ``empty_selection``, ``mask_number_not_integer`` (strings other
            than a range, a range whose start exceeds its end, floats, booleans), ``mask_number_out_of_range``
            (0, negative or above ``count``) or ``mask_number_repeated``.
    """
    tool = "select_masks_and_return" if parameter == "final_answer_masks" else "examine_each_mask"
    if not isinstance(value, list):
        raise CallError("mask_numbers_not_list", value=_json(value), parameter=parameter, tool=tool)
    if not value:
        raise CallError("empty_selection" if tool == "select_masks_and_return" else "empty_examine_list")
    numbers: list[int] = []
    seen: set[int] = set()
    for item in value:
        for number in _numbers_of(item, count, parameter):
            if number in seen:
                raise CallError("mask_number_repeated", value=number)
            seen.add(number)
            numbers.append(number)
    return numbers


class Tools:
    """Runs parsed tool calls against a segmenter and a verifier VLM.

    Args:
        segmenter: SAM 3 backend.
        verifier: VLM used for the isolated per-mask verification calls.
        prompts: prompt and feedback texts.
        config: the run's limits; the tools read its SAM 3 score and overlap thresholds and its verification
            token budget and batch size (default: ``AgentConfig()``).
        view_bounds: the main VLM's pixel bounds (``ImageLimits.pixel_bounds``): overlays and tiles size their
            labels for the size it sees them at, and record the bounds in their recipes.
        verify_bounds: the verifier's pixel bounds: its views are drawn at the size its processor uses.
    """

    def __init__(self, segmenter: Segmenter, verifier: VLM, prompts: Prompts, config: AgentConfig | None = None,
                 view_bounds: PixelBounds = DEFAULT_BOUNDS, verify_bounds: PixelBounds = DEFAULT_BOUNDS) -> None:
        self.segmenter = segmenter
        self.verifier = verifier
        self.prompts = prompts
        self.config = config or AgentConfig()
        self.view_bounds = view_bounds
        self.verify_bounds = verify_bounds

    # ------------------------------------------------------------------ dispatch

    def run(
        self, call: ToolCall, state: ToolState, round_index: int, stop: threading.Event | None = None
    ) -> Generator[Event, None, ToolOutcome]:
        """Run one call; yields ``MaskVerdictReady`` events during verification, returns the outcome.

        Raises:
            BackendError: when SAM 3 or the verifier fails.
            RunCancelled: when ``stop`` is set during verification.
        """
        try:
            if call.name not in TOOL_SPECS:  # the parser only returns known names; guard anyway
                raise CallError("unknown_tool", name=call.raw_name or call.name, tools=", ".join(TOOL_SPECS))
            check_parameters(call, "arguments" if self.config.tool_format == "native" else "parameters")
            if call.name == "segment_phrase":
                return self._segment_phrase(call.parameters["text_prompt"], state, round_index)
            if call.name == "examine_each_mask":
                current = self._require_masks(call.name, state)
                named = None
                if "masks" in call.parameters:  # verify only these; the others stay, unchecked
                    named = sorted(check_mask_numbers(call.parameters["masks"], len(current), "masks"))
                in_groups = call.parameters.get("in_groups", False)
                return (yield from self._examine(state, round_index, stop, named, in_groups))
            if call.name == "select_masks_and_return":
                current = self._require_masks(call.name, state)
                numbers = check_mask_numbers(call.parameters["final_answer_masks"], len(current))
                final = current.subset([n - 1 for n in numbers])
                summary = f"selected mask(s) {', '.join(map(str, numbers))}"
                return ToolOutcome(ToolResult(None, state.masks, True, final, (), summary), status="done")
            # report_no_mask
            height, width = state.image.height, state.image.width
            final = Masks.empty(height, width, state.masks.phrase if state.masks is not None else "")
            return ToolOutcome(ToolResult(None, state.masks, True, final, (), "reported no mask"), status="no_mask")
        except CallError as mistake:
            text = self.prompts.format(mistake.key, **mistake.fields)
            reply = Message("user", (TextPart(text),))
            result = ToolResult(reply, state.masks, summary=f"mistake: {mistake.key}")
            return ToolOutcome(result, error=mistake.key, error_detail=text)

    def feedback(self, key: str, fields: dict[str, Any], state: ToolState) -> ToolOutcome:
        """The outcome of a response that had no usable call (parse error ``key``)."""
        text = self.prompts.format(key, **fields)
        result = ToolResult(Message("user", (TextPart(text),)), state.masks, summary=f"mistake: {key}")
        return ToolOutcome(result, error=key, error_detail=text)

    @staticmethod
    def _require_masks(tool: str, state: ToolState) -> Masks:
        if state.masks is None:
            raise CallError("no_masks_yet", tool=tool)
        if len(state.masks) == 0:
            raise CallError("no_current_masks", tool=tool)
        return state.masks

    # ------------------------------------------------------------------ tools

    def _segment_phrase(self, text_prompt: str, state: ToolState, round_index: int) -> ToolOutcome:
        phrase = text_prompt.strip()
        used = tried_phrases(state.messages)
        if phrase.lower() in (p.lower() for p in used):
            raise CallError("phrase_already_used", phrase=phrase, used=_quoted(used))
        config = self.config
        detections = self.segmenter.segment(state.image, phrase, config.score_threshold)
        masks = postprocess_masks(detections, config.score_threshold, config.iom_threshold).renamed(phrase)
        state.masks = masks
        note = self._phrase_cut_note(phrase)
        if len(masks) == 0:
            text = note + self.prompts.format("segment_zero", phrase=phrase, used=_quoted([*used, phrase]))
            reply = Message("user", (TextPart(text),))
            return ToolOutcome(ToolResult(reply, masks, summary=f"0 masks for '{phrase}'"), starts_masks=True)
        text = note + self.prompts.format("segment_result", count=len(masks), phrase=phrase)
        tiles_note, views = self._views(state.image, masks, round_index)
        reply = Message("user", (TextPart(text + tiles_note), *views))
        summary = f"{len(masks)} mask(s) for '{phrase}'"
        return ToolOutcome(ToolResult(reply, masks, summary=summary), starts_masks=True)

    def _views(self, image: Image.Image, masks: Masks, round_index: int) -> tuple[str, tuple[ImagePart, ...]]:
        """The images that show ``masks`` to the model, drawn for the main VLM's pixel bounds, and the note (``""``
        without tiles) that the reply's text ends with to say what the tiles are.

        One image, the numbered overlay, as in the reference agent; for a dense set (``labels.crowded``) it is drawn
        at the VLM's pixel budget (``imaging.enlarged``) when the photo is smaller than that. Only with the opt-in
        ``AgentConfig.dense_tiles`` does a dense set get the overlay at the photo's size and its four tiles after it
        (``imaging.tiles``)."""
        bounds = self.view_bounds
        dense = shows_tiles(image.width, image.height, len(masks), bounds)
        enlarged = (dense and not self.config.dense_tiles
                    and enlarged_layout(image.width, image.height, bounds) is not None)
        overlay = view_part(f"round{round_index}_overlay",
                            MaskView("overlay", image, masks, bounds=bounds, enlarged=enlarged))
        if not dense or not self.config.dense_tiles:
            return "", (overlay,)
        note = self.prompts.format("dense_tiles", count=len(TILE_PLACES), places=", ".join(TILE_PLACES))
        tiles = tuple(view_part(f"round{round_index}_tile{t + 1}", MaskView("tile", image, masks, tile=t, bounds=bounds))
                      for t in range(len(TILE_PLACES)))
        return "\n\n" + note, (overlay, *tiles)

    def _phrase_cut_note(self, phrase: str) -> str:
        """The note (ending in a blank line) telling the model what SAM 3 read of a phrase too long for its text
        encoder, or ``""``. Segmenters without a ``phrase_cut`` method read every phrase whole."""
        phrase_cut = getattr(self.segmenter, "phrase_cut", None)
        cut = phrase_cut(phrase) if phrase_cut is not None else None
        if cut is None:
            return ""
        read, limit = cut
        return self.prompts.format("phrase_cut", limit=limit, phrase=phrase, read=read) + "\n\n"

    def _examine(
        self, state: ToolState, round_index: int, stop: threading.Event | None, named: list[int] | None,
        in_groups: bool = False,
    ) -> Generator[Event, None, ToolOutcome]:
        """Verify the current masks (or only the ``named`` ones, ascending), one call per mask or ``in_groups``
        (``verify_groups``); keep those not rejected, in order."""
        masks = state.masks
        if masks is None:  # checked by the caller; keeps the type checker honest
            raise CallError("no_masks_yet", tool="examine_each_mask")
        verifier = verify_in_groups if in_groups else verify_masks
        verdicts = yield from verifier(
            self.verifier,
            self.prompts,
            state.image,
            state.query,
            masks,
            round_index,
            max_new_tokens=self.config.verify_max_new_tokens,
            stop=stop,
            batch_size=self.config.verify_batch_size,
            numbers=named,
            bounds=self.verify_bounds,
        )
        by_number = {v.mask_number: v for v in verdicts}
        kept = [n for n in range(1, len(masks) + 1) if n not in by_number or by_number[n].kept]
        survivors = masks.subset([n - 1 for n in kept])
        state.masks = survivors
        if not kept:
            text = self.prompts.format("examine_all_rejected", total=len(masks))
            summary = f"kept 0 of {len(masks)} mask(s)"
        else:
            text, summary = self._examine_text([by_number.get(n) for n in kept], len(masks), named)
        if in_groups:  # said to the model and in the summary: the check was coarser than one call per mask
            groups = len({v.group for v in verdicts})
            text += "\n" + self.prompts.format("examine_in_groups", size=VERIFY_GROUP_SIZE, groups=groups)
            summary += f"; checked in {groups} group(s) of up to {VERIFY_GROUP_SIZE}"
        tiles_note, views = self._views(state.image, survivors, round_index) if kept else ("", ())
        reply = Message("user", (TextPart(text + tiles_note), *views))
        return ToolOutcome(ToolResult(reply, survivors, verdicts=tuple(verdicts), summary=summary))

    def _examine_text(
        self, kept: Sequence[MaskVerdict | None], total: int, named: Sequence[int] | None
    ) -> tuple[str, str]:
        """The reply text and the summary of an examine round that kept ``kept`` (in their new order; ``None``: a
        mask not among the ``named`` ones, so not examined).

        The masks kept without a clear Accept (not named; kept not confirmed, verdict ``"unconfirmed"``: check failed,
        ``source="error"``; no clear verdict even after the retry, ``"fallback"``) are named, by their new numbers,
        with why, in both."""
        new_numbers = {
            source: [new for new, v in enumerate(kept, start=1) if (v.source if v is not None else None) == source]
            for source in (None, "error", "fallback")
        }
        summary = f"kept {len(kept)} of {total} mask(s)"
        if named is not None and new_numbers[None]:
            lines = [self.prompts.format("examine_result_named", examined=len(named), kept=len(kept), total=total,
                                         not_examined=number_ranges(new_numbers[None]))]
            summary += (f"; examined only the {len(named)} named ({number_ranges(named)}); not examined, kept as "
                        f"they were (new numbers): {number_ranges(new_numbers[None])}")
        elif not new_numbers["error"] and not new_numbers["fallback"]:
            return self.prompts.format("examine_result", kept=len(kept), total=total), summary
        else:
            lines = [self.prompts.format("examine_result_unchecked", kept=len(kept), total=total)]
        why = []
        for source, key, reason in (("error", "examine_unchecked", "check failed"),
                                    ("fallback", "examine_unclear", "no clear verdict")):
            if new_numbers[source]:
                numbers = ", ".join(map(str, new_numbers[source]))
                lines.append(self.prompts.format(key, numbers=numbers))
                why.append(f"{numbers} ({reason})")
        if why:
            summary += "; kept, not confirmed (new numbers): " + "; ".join(why)
        return "\n".join(lines), summary


def number_ranges(numbers: Sequence[int]) -> str:
    """Ascending mask numbers written short, runs as ranges: ``[1, 2, 3, 5, 7, 8]`` -> ``"1-3, 5, 7-8"``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


__all__ = ["CallError", "RunCancelled", "ToolOutcome", "ToolState", "Tools", "check_mask_numbers", "check_parameters", "number_ranges"]
