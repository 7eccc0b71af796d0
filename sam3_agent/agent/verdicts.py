"""Reading the verdict of a per-mask verification answer (``<verdict>Accept</verdict>`` / ``Reject``).

The rules, in the order they apply (docs/replies.md says the same in short):

- Only the text after the reasoning counts (``agent.reasoning``); a reply that ended inside its reasoning gives none.
- Each ``<verdict>`` tag is one statement (without a closing tag: its first line). A tag is cut into clauses at
  punctuation (``. , ; : ! ?``), dashes and the words *but, so, therefore, hence, thus, because*.
- A verdict word is negated when *not, no, never, cannot, n't, neither, nor, without, non* (or the contractions
  written without their apostrophe: *dont, cant, wont, isnt, ...*) stands before it in its clause with no other
  verdict word between, or when it carries the prefix *un*/*non* ("unacceptable"). A clause is hedged when it holds
  *probably, maybe, if, might, could* (but *could not* negates), *not sure, whether, unsure, doubt, ...*, and asked
  when it ends in "?".
- A rejection is an explicit *reject* (or *rejected, rejects, rejecting*) that is neither negated nor hedged nor
  asked, or a negated acceptance (*not accept, do not accept, not accepted, would not accept this mask, cannot
  accept, isn't acceptable, unacceptable*) that is neither hedged nor asked. In a tag a rejection wins whatever else
  the tag says, whatever the punctuation or brackets between them: "not accept: reject", "Reject (not Accept)",
  "I reject this; I cannot accept it" and "Accept, not accept" are rejections. One exception: a negated acceptance
  beside a negated rejection ("Do not accept, not reject", "neither accept nor reject") decides nothing: unclear.
- Otherwise a tag accepts only when a clause is exactly the word *accept* (or *accepted*; bold, quotes, backticks
  and brackets allowed; a negated *reject* beside it is left out, so "Accept (not Reject)" accepts) and no clause
  hedges or asks; both words plain in one clause ("Accept or Reject", "accept/reject") are ambiguous; anything else
  holding a verdict word ("Probably accept", "Accept?", "Probably not accept", "Not reject") is unclear.
- The last explicit verdict wins: a later tag overrides an earlier one, and so does prose after a tag that withdraws
  it with a bare verdict word as its own clause ("<verdict>Accept</verdict> ... no wait: reject" is a rejection, and
  the same with the words swapped an acceptance). Prose never counts otherwise, and prose before the first tag never.
- Two tags joined only by "or" ("<verdict>Accept</verdict> or <verdict>Reject</verdict>", an echo of the
  instruction) are ambiguous.

A group's answer (several masks checked in one call, ``parse_group_verdicts``) gives one line per mask, ``Mask 12:
<verdict>Accept</verdict>``: each line that starts with "Mask N" opens mask N's statement, which runs to the next
such line and is read by the rules above. Every mask named must get exactly one statement: a mask with none is
missing, a mask with two or more (even if they agree) is unclear, and statements about masks not in the group are
ignored.

Hand-written: no library reads English negation; these few regular expressions are the whole grammar.
Everything here is a pure function of the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .reasoning import THINK_OPEN, split_reasoning

VerdictWord = Literal["accept", "reject"]
Reading = Literal["accept", "reject", "unclear", "ambiguous"]

_TAG = re.compile(r"<\s*verdict\s*>([^<]*)(<\s*/\s*verdict\s*>)?", re.IGNORECASE)
_WORD = re.compile(r"(\w*?)(accept|reject)(\w*)", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(
    r"([.,;:!?\n]|\s[-\u2013\u2014]+\s|\b(?:but|so|therefore|hence|thus|because)\b)", re.IGNORECASE
)
_NEGATION = re.compile(
    r"\b(?:not|no|never|cannot|neither|nor|without|non"
    r"|dont|doesnt|didnt|cant|couldnt|wont|wouldnt|shouldnt|isnt|arent|wasnt|werent|mustnt)\b|n['\u2019]t\b",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"\b(?:probably|maybe|perhaps|possibly|likely|might|if|unless|partly|partially|somewhat|tentatively"
    r"|lean|leaning|whether|unsure|uncertain|unclear|doubt|doubtful)\b"
    r"|\bcould\b(?!\s*(?:not\b|n['\u2019]t))|\bnot\s+(?:sure|certain|confident|clear)\b",
    re.IGNORECASE,
)
_EXACT_ACCEPT = re.compile(r"accept(?:ed)?", re.IGNORECASE)
_EXACT_WORD = re.compile(r"(accept|reject)(?:ed)?", re.IGNORECASE)
_REJECT_FORMS = {"", "ed", "s", "ing"}
_ACCEPT_FORMS = {"", "ed", "s", "ing", "able"}  # negated, a rejection
_DECORATION = " \t\r\n*_`\"'\u201c\u201d\u2018\u2019"
_BRACKETS = "()[]{}"
_AUXILIARY = re.compile(r"\b(?:do|does|did)\s+$", re.IGNORECASE)  # "do not reject": left out whole
_ALTERNATIVE = re.compile(r"\s*(?:or|/|\|)\s*", re.IGNORECASE)


def parse_verdict(
    text: str, finish_reason: str = "stop", starts_in_reasoning: bool = False
) -> tuple[VerdictWord | None, str | None]:
    """Read the verdict of a per-mask verification answer (rules in the module docstring).

    A reply that ended inside its reasoning gives no verdict, even when it drafted one there: with
    ``starts_in_reasoning`` (the template or the server opened the reasoning), or an unclosed ``<think>``, and no
    ``</think>``; and any reply cut by the token limit without ``</think>``.

    Returns:
        ``(verdict, None)`` on success, else ``(None, reason)`` with reason ``"missing_verdict"`` (no tag holds either
        word), ``"ambiguous_verdict"`` (both words in one clause, or two tags offered as alternatives),
        ``"unclear_verdict"`` (the deciding tag holds a verdict word but negated, hedged or asked), ``"truncated"``
        (cut by the token limit inside the reasoning) or ``"unclosed_think"`` (ended inside the reasoning).
    """
    split = split_reasoning(text)
    if split is not None:
        text = split[1]
    elif starts_in_reasoning or THINK_OPEN in text or finish_reason == "length":
        return None, "truncated" if finish_reason == "length" else "unclosed_think"
    reading = _last_reading(text)
    if reading is None:
        return None, "missing_verdict"
    if reading in ("accept", "reject"):
        return reading, None
    return None, f"{reading}_verdict"


_GROUP_LINE = re.compile(r"^[ \t>*_#-]*mask\s*#?\s*(\d+)\b", re.IGNORECASE | re.MULTILINE)


def parse_group_verdicts(
    text: str, numbers: Sequence[int], finish_reason: str = "stop", starts_in_reasoning: bool = False
) -> dict[int, tuple[VerdictWord | None, str | None]]:
    """Read a group verification answer: one verdict per mask of ``numbers`` (rules in the module docstring).

    Returns:
        For each number of ``numbers``: ``(verdict, None)``, or ``(None, reason)`` with the reasons of
        ``parse_verdict`` (a reply that ended inside its reasoning gives every mask ``"truncated"`` or
        ``"unclosed_think"``), ``"missing_verdict"`` for a mask without a line, and ``"duplicate_verdict"`` for a
        mask with more than one.
    """
    split = split_reasoning(text)
    if split is not None:
        text = split[1]
    elif starts_in_reasoning or THINK_OPEN in text or finish_reason == "length":
        reason = "truncated" if finish_reason == "length" else "unclosed_think"
        return {n: (None, reason) for n in numbers}
    lines = list(_GROUP_LINE.finditer(text))
    statements: dict[int, list[str]] = {}
    for i, line in enumerate(lines):
        end = lines[i + 1].start() if i + 1 < len(lines) else len(text)
        statements.setdefault(int(line.group(1)), []).append(text[line.end() : end])
    read: dict[int, tuple[VerdictWord | None, str | None]] = {}
    for number in numbers:
        found = statements.get(number, [])
        reading = _last_reading(found[0]) if len(found) == 1 else None
        if len(found) > 1:
            read[number] = (None, "duplicate_verdict")
        elif reading in ("accept", "reject"):
            read[number] = (reading, None)  # type: ignore[assignment]
        else:
            read[number] = (None, "missing_verdict" if reading is None else f"{reading}_verdict")
    return read


def _last_reading(text: str) -> Reading | None:
    """The reading of the last statement that holds one (tags, and bare verdict words in the prose after them)."""
    last: Reading | None = None
    previous_end: int | None = None
    previous: Reading | None = None
    for tag in _TAG.finditer(text):
        closed = tag.group(2) is not None
        content = tag.group(1) if closed else _first_line(tag.group(1))
        end = tag.end() if closed else tag.start(1) + _first_line_end(tag.group(1))
        if previous_end is not None:
            gap = text[previous_end : tag.start()]
            last = _prose_reading(gap) or last
            if previous is not None and _ALTERNATIVE.fullmatch(gap) and _tag_reading(content) not in (None, previous):
                return "ambiguous"
        reading = _tag_reading(content)
        last = reading or last
        previous, previous_end = reading, end
    if previous_end is not None:
        last = _prose_reading(text[previous_end:]) or last
    return last


def _clauses(content: str) -> list[tuple[str, str]]:
    """``(clause, the break after it)`` pairs of a statement."""
    parts = _CLAUSE_BREAK.split(content)
    pairs = [(parts[i], parts[i + 1] if i + 1 < len(parts) else "") for i in range(0, len(parts), 2)]
    return [(clause, end) for clause, end in pairs if clause.strip(_DECORATION)]


@dataclass(frozen=True)
class _Clause:
    """What one clause of a tag says: a rejection (an explicit one or a negated acceptance), a plain acceptance
    (the clause is exactly the word), a negated rejection, both words plain (ambiguous), or a doubtful mention."""

    rejects: bool = False
    negated_accept_only: bool = False
    accepts: bool = False
    negated_reject: bool = False
    ambiguous: bool = False
    doubtful: bool = False


def _negated(clause: str, word: re.Match[str], after: int) -> bool:
    """Whether ``word`` is negated: a prefix *un*/*non*, or a negation between ``after`` (the end of the previous
    verdict word, or 0) and the word."""
    return word.group(1).lower() in ("un", "non") or _NEGATION.search(clause, after, word.start()) is not None


def _negation_start(clause: str, word: re.Match[str], after: int) -> int:
    """Where the negation of a negated ``word`` starts (the span "not reject" left out of an acceptance)."""
    found = _NEGATION.search(clause, after, word.start())
    start = found.start() if found is not None else word.start()
    auxiliary = _AUXILIARY.search(clause, after, start)
    return auxiliary.start() if auxiliary is not None else start


def _read_clause(clause: str, end: str) -> _Clause | None:
    """What one clause says (``None``: no verdict word in it); ``end`` is the break after it."""
    words = list(_WORD.finditer(clause))
    if not words:
        return None
    hedged = end == "?" or _HEDGE.search(clause) is not None
    if hedged:
        return _Clause(doubtful=True)
    explicit_reject = negated_accept = negated_reject = plain_accept = other_reject = False
    kept = clause  # the clause with its negated rejections left out: what an acceptance must be exactly
    after = 0
    for word in words:
        negated = _negated(clause, word, after)
        stem, form = word.group(2).lower(), word.group(3).lower()
        if stem == "reject":
            if negated:
                negated_reject = True
                start = _negation_start(clause, word, after)
                kept = kept[:start] + " " * (word.end() - start) + kept[word.end():]
            elif form in _REJECT_FORMS:
                explicit_reject = True
            else:
                other_reject = True
        elif negated:
            if word.group(1).lower() in ("un", "non") and _NEGATION.search(clause, after, word.start()):
                return _Clause(doubtful=True)  # "not unacceptable": a double negation decides nothing
            if form in _ACCEPT_FORMS:
                negated_accept = True
            else:
                return _Clause(doubtful=True)
        else:
            plain_accept = True
        after = word.end()
    if plain_accept and (explicit_reject or other_reject):
        return _Clause(ambiguous=True)  # "Accept or Reject", "accept/reject"
    if explicit_reject:
        return _Clause(rejects=True)
    if negated_accept:
        return _Clause(rejects=not negated_reject, negated_accept_only=not negated_reject, doubtful=negated_reject)
    if plain_accept:
        exact = _EXACT_ACCEPT.fullmatch(kept.strip(_DECORATION + _BRACKETS).strip(_DECORATION))
        return _Clause(accepts=exact is not None, negated_reject=negated_reject, doubtful=exact is None)
    return _Clause(negated_reject=negated_reject, doubtful=other_reject)


def _tag_reading(content: str) -> Reading | None:
    """What one ``<verdict>`` tag says (rules in the module docstring), or ``None`` when it holds neither word."""
    read = [c for c in (_read_clause(clause, end) for clause, end in _clauses(content)) if c is not None]
    if not read:
        return None
    negated_reject = any(c.negated_reject for c in read)
    if any(c.rejects and not (c.negated_accept_only and negated_reject) for c in read):
        return "reject"
    if any(c.ambiguous for c in read):
        return "ambiguous"
    if any(c.accepts for c in read) and not any(c.doubtful or c.negated_accept_only for c in read):
        return "accept"
    return "unclear"


def _prose_reading(prose: str) -> VerdictWord | None:
    """The last bare verdict word standing as its own clause in prose ("no wait: reject"), or ``None``."""
    found: VerdictWord | None = None
    for clause, end in _clauses(prose):
        exact = _EXACT_WORD.fullmatch(clause.strip(_DECORATION))
        if exact is not None and end != "?":
            found = "accept" if exact.group(1).lower() == "accept" else "reject"
    return found


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


def _first_line_end(text: str) -> int:
    """Index in ``text`` just after its first non-empty line."""
    offset = 0
    for line in text.splitlines(keepends=True):
        offset += len(line)
        if line.strip():
            return offset
    return offset
