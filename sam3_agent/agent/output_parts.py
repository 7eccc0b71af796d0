"""The main model's output split into its reasoning and its call, as the agent reads it, for front ends to show.

The agent puts these on its events and rounds (``TokenStreamed.reasoning`` / ``writing_call`` while a round streams,
``ToolStarted.reasoning``, ``Round.reasoning``), so that no front end parses model text. Display only:
``parsing.parse_response`` decides what the call is.
"""

from __future__ import annotations

import re

from .parsing import parse_response
from .reasoning import THINK_CLOSE, THINK_OPEN, reasoning_close

# Tool-call tags as models write them (ours and Qwen's native one), for display only: ``parsing`` reads calls.
_TOOL_TAG = re.compile(r"<\s*/?\s*(?:tool_call|tool)\s*>", re.IGNORECASE)
_PARTIAL_TAG = re.compile(r"<[^<>\s]{0,11}$")  # a tag still arriving at the end of a streamed text ("<thi")


def split_output(text: str, starts_in_reasoning: bool = False) -> tuple[str, str]:
    """A model output, finished or still streaming, as (reasoning, tool call being written), markup removed.

    The reasoning is the text before ``</think>`` (or, without it, before the first tool tag) without the
    ``<think>`` tag; the call is what follows the first tool tag, tags removed. With ``starts_in_reasoning``
    (``Generation.starts_in_reasoning``: the reasoning was opened outside the text) and no ``</think>`` yet, all of
    it is reasoning: a tool tag there is a draft, as the parser reads it.
    """
    close = reasoning_close(text)
    if close < 0 and starts_in_reasoning:
        return text.replace(THINK_OPEN, "").strip(), ""
    if close >= 0:
        reasoning, rest = text[:close], text[close + len(THINK_CLOSE):]
    else:
        reasoning, rest = text, ""
    tag = _TOOL_TAG.search(reasoning) if close < 0 else None
    if tag is not None:
        reasoning, rest = reasoning[:tag.start()], reasoning[tag.start():]
    reasoning = reasoning.replace(THINK_OPEN, "").strip()
    tag = _TOOL_TAG.search(rest)
    if tag is None:
        reasoning = (reasoning + "\n" + rest.strip()).strip() if rest.strip() else reasoning
        return reasoning, ""
    before = rest[:tag.start()].strip()
    if before:
        reasoning = (reasoning + "\n" + before).strip()
    return reasoning, _TOOL_TAG.sub("", rest[tag.start():]).strip()


def split_streamed(text: str, starts_in_reasoning: bool = False) -> tuple[str, str]:
    """``split_output`` of the output streamed so far, a tag still arriving (``"<thi"``) held back until it is
    complete, so that markup never shows."""
    return split_output(_PARTIAL_TAG.sub("", text), starts_in_reasoning)


def shown_reasoning(thinking: str, text: str) -> str:
    """The reasoning a round shows: what the parser read as reasoning (``ParsedResponse.thinking``) or, when it read
    none, the text of ``text`` before its call, markup removed."""
    return thinking or split_output(text)[0]


def reasoning_of(text: str, finish_reason: str = "stop", starts_in_reasoning: bool = False) -> str:
    """The reasoning a round with output ``text`` shows (``shown_reasoning`` of the parser's reading of it); ``""``
    for an empty output. The arguments are those of ``parsing.parse_response``."""
    thinking = parse_response(text, finish_reason, starts_in_reasoning).thinking if text else ""
    return shown_reasoning(thinking, text)
