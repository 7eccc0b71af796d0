"""HTML of the views in ``view``: rounds, verdict cards, the context panel, the status line, final masks.

All text from models and users is escaped. Images are embedded as JPEG data URLs, downsized to
what the panel shows (so a page update stays small) and memoised by image name: names are unique
within one trace (``ImagePart.name``), so one ``ImageUrls`` serves one run or one loaded trace.

CSS classes the tests and the stylesheet rely on:
``round`` (``data-round``, ``data-finished``), ``round-live``, ``reasoning``, ``tool-call``, ``tool-writing``,
``tool-reply``, ``mistake``, ``round-stopped``, ``round-failed``, ``overlay``, ``tiles`` (``img.tile``),
``verdict-card`` + ``verdict-accept``/``verdict-reject`` (``data-mask``), ``card-view`` (a button holding one of the
verifier's views, ``card-mask`` or ``card-zoom``), ``ctx-open`` (``data-round``: a button opening that round's
context), ``ctx-scroll``, ``ctx-msg`` (``data-index``, ``data-role``) + ``ctx-dropped`` / ``ctx-image-text``,
``ctx-reason``, ``ctx-run`` (a collapsed run of dropped messages), ``ctx-full``, ``ctx-note``, ``ctx-image-count``,
``ctx-tokens``,
``timeline`` (``tr[data-round]``, ``timeline-current``, ``timeline-<kind>``), ``status`` + ``status-<kind>``,
``final-masks``.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from PIL import Image

from ..verification import CHECK_WORDS
from .context_view import ContextEntry, ContextPanel
from .view import STATUS_TITLES, FinalMaskRow, RoundView, StatusLine, TimelineRow, VerdictCard

OVERLAY_SIDE = 768  # px, longer side of round overlays in the page
CARD_SIDE = 320  # px, mask and zoom views on verdict cards
VERDICT_WORDS = {"accept": "Accept", "reject": "Reject", "unconfirmed": "Not confirmed"}  # a card's verdict, in words
THUMB_SIDE = 112  # px, context panel thumbnails
TILE_SIDE = 384  # px, the tiles of a dense set's overlay, two a row under it
JPEG_QUALITY = 85
RUN_CONTEXT_PLACEHOLDER = "The context of each round appears here while a run goes on."
MISTAKE_TITLES = {  # feedback key -> what the page calls the mistake (others: the key in words)
    "no_tool_call": "no tool call",
    "bad_json": "the tool call is not valid JSON",
    "unknown_tool": "an unknown tool",
    "empty_output": "an empty answer",
    "unclosed_think": "the reasoning was never closed",
    "truncated": "the answer was cut off at the token limit",
}


def image_data_url(image: Image.Image, max_side: int) -> str:
    """A ``data:image/jpeg;base64,...`` URL of ``image`` downsized to at most ``max_side`` px (longer side)."""
    shown = image.convert("RGB") if image.mode != "RGB" else image
    if max(shown.size) > max_side:
        shown = shown.copy()
        shown.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    shown.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


class ImageUrls:
    """Memoised data URLs by (image name, size); one instance per run or loaded trace."""

    def __init__(self) -> None:
        self._urls: dict[tuple[str, int], str] = {}

    def url(self, part_name: str, image: Image.Image, max_side: int) -> str:
        key = (part_name, max_side)
        if key not in self._urls:
            self._urls[key] = image_data_url(image, max_side)
        return self._urls[key]


def _img(urls: ImageUrls, part, max_side: int, css: str, alt: str) -> str:
    return f'<img class="{css}" src="{urls.url(part.name, part.image, max_side)}" alt="{escape(alt)}"/>'


# The ``js_on_load`` of every status line's ``gr.HTML``: its element (which stays while its content is replaced) is a
# polite live region, so a screen reader announces "Done", an error or a refusal when it appears. A live region must
# exist before its text changes: one inside the replaced HTML would be new each time and said by few readers.
LIVE_STATUS_JS = "element.setAttribute('role', 'status'); element.setAttribute('aria-live', 'polite');"


def render_status(line: StatusLine) -> str:
    """The status line: ``<div class="status status-<kind>">``."""
    return (
        f'<div class="status status-{escape(line.kind)}" data-status="{escape(line.kind)}" '
        f'title="{escape(STATUS_TITLES.get(line.kind, line.kind))}">{escape(line.text)}</div>'
    )


def _card_view(urls: ImageUrls, part, css: str, alt: str) -> str:
    """One of the verifier's views on a card: a button that opens it larger (``ui.view_zoom``), named for that."""
    return (f'<button type="button" class="card-view" aria-haspopup="dialog" aria-label="Enlarge: {escape(alt)}" '
            f'title="Enlarge">{_img(urls, part, CARD_SIDE, css, alt)}</button>')


def render_card(card: VerdictCard, urls: ImageUrls) -> str:
    """One verdict card: mask view, zoom view (each a ``card-view`` button that opens it larger), verdict, the
    verifier's reasoning (collapsed)."""
    verdict = VERDICT_WORDS.get(card.verdict, card.verdict)
    note = ""
    if card.fallback:
        note = (" (the check failed: kept, not confirmed)" if card.failed
                else " (no clear verdict, even when asked again: kept, not confirmed)")
    number = card.mask_number
    if card.group:
        note += f" (checked together with {len(card.group) - 1} other mask(s))"
    shown = f"masks {', '.join(map(str, card.group))}" if card.group else f"mask {number}"
    zoom = "" if card.zoom_view is None else _card_view(urls, card.zoom_view, "card-zoom",
                                                        f"mask {number} up close, as the verifier saw it")
    return (
        f'<div class="verdict-card verdict-{escape(card.verdict)}" data-mask="{number}">'
        f'<div class="card-head">Mask {number} / {card.total}: <b class="verdict">{verdict}</b>'
        f"{escape(note)} <small>{card.seconds:.1f} s</small></div>"
        f'<div class="card-views">'
        f"{_card_view(urls, card.mask_view, 'card-mask', f'{shown} on the photo, as the verifier saw it')}"
        f"{zoom}</div>"
        f'<details class="card-reasoning"><summary>Verifier reasoning</summary>'
        f"<pre>{escape(card.reasoning)}</pre></details></div>"
    )


def _cost(view: RoundView) -> str:
    bits = []
    if view.seconds is not None:
        bits.append(f"{view.seconds:.1f} s")
    if view.prompt_tokens is not None:
        bits.append(f"{view.prompt_tokens} prompt tokens")
    if view.output_tokens is not None:
        bits.append(f"{view.output_tokens} output tokens")
    return " · ".join(bits)


def mistake_title(key: str) -> str:
    """What the page calls a model mistake (``MISTAKE_TITLES``, else the feedback key in words)."""
    return MISTAKE_TITLES.get(key, key.replace("_", " "))


@dataclass(frozen=True)
class RoundHtml:
    """A round's HTML in the pieces a live page patches apart: ``html`` is ``top + reasoning + middle + cards + end``.

    While a round streams only ``reasoning`` (escaped text) and ``cards`` grow, each by an append (escaping keeps
    a prefix a prefix), so Gradio's diff of a streamed output sends only what is new; the other pieces are small.
    """

    top: str  # the section's opening, its header, the reasoning's opening up to its text
    reasoning: str
    middle: str  # the reasoning's closing, the call, mistake, stop, failure, summary; the cards' opening
    cards: str
    end: str  # the cards' closing, overlay, reply, the section's closing

    @property
    def html(self) -> str:
        return self.top + self.reasoning + self.middle + self.cards + self.end


NO_ROUND = RoundHtml(top="", reasoning="", middle="", cards="", end="")  # no round in progress: nothing shown


def render_round(view: RoundView, urls: ImageUrls, reasoning_open: bool = False, context_button: bool = False) -> str:
    """One round: header (number / budget, time, tokens), reasoning, call, reply, overlay, cards.

    A streaming round has its reasoning open and the class ``round-live``; a finished one has it collapsed
    unless ``reasoning_open``. ``context_button`` adds a button (``ctx-open``) that opens the round's context.
    A model mistake is shown once: its name, then what the model was told.
    """
    return round_parts(view, urls, reasoning_open, context_button).html


def round_parts(view: RoundView, urls: ImageUrls, reasoning_open: bool = False,
                context_button: bool = False) -> RoundHtml:
    """``render_round``'s HTML in its pieces (``RoundHtml``)."""
    budget = f" / {view.max_rounds}" if view.max_rounds else ""
    classes = "round round-live" if view.streaming else "round"
    finished = f' data-finished="{view.finished_at:.3f}"' if view.finished_at is not None else ""
    cost = _cost(view)
    head = f"Round {view.index}{budget}" + (" (in progress)" if view.streaming else "")
    button = (f' <button class="ctx-open" data-round="{view.index}" type="button">Context sent</button>'
              if context_button else "")
    top = (
        f'<section class="{classes}" data-round="{view.index}"{finished}>'
        f'<div class="round-head"><b>{escape(head)}</b> <small class="round-cost">{escape(cost)}</small>{button}</div>'
        f'<details class="reasoning"{" open" if view.streaming or reasoning_open else ""}>'
        f'<summary>{"Reasoning (streaming)" if view.streaming else "Reasoning"}</summary>'
        '<pre class="reasoning-text">'
    )
    reasoning = escape(view.reasoning) if view.reasoning else '<span class="none">(no reasoning written)</span>'
    middle = ["</pre></details>"]
    if view.call_text is not None:
        middle.append(f'<div class="tool-call">Tool call: <code>{escape(view.call_text)}</code></div>')
    elif view.writing_call:
        middle.append(f'<div class="tool-call tool-writing">Writing a tool call: <code>{escape(view.writing_call)}'
                      "</code></div>")
    if view.mistake is not None:
        told = f"<pre>{escape(view.reply_text)}</pre>" if view.reply_text else ""
        middle.append(f'<div class="mistake"><b>Model mistake: {escape(mistake_title(view.mistake))}.</b> '
                      f"The model was told:{told}</div>")
    if view.stopped:
        middle.append('<div class="round-stopped">Stopped by the user during this round.</div>')
    if view.failure is not None:
        middle.append(f'<div class="round-failed">Backend failure: {escape(view.failure)}</div>')
    if view.summary and view.mistake is None:
        middle.append(f'<div class="tool-summary">{escape(view.summary)}</div>')
    end = []
    if view.cards:
        middle.append('<div class="cards">')
        end.append("</div>")
    if view.overlay is not None:
        end.append(_img(urls, view.overlay, OVERLAY_SIDE, "overlay", f"round {view.index} overlay"))
    if view.tiles:
        tiles = "".join(_img(urls, tile, TILE_SIDE, "tile", f"round {view.index} tile {k}")
                        for k, tile in enumerate(view.tiles, start=1))
        end.append(f'<details class="tiles"><summary>The same masks in {len(view.tiles)} enlarged parts (sent with '
                   f'the overlay: a dense set)</summary><div class="tile-grid">{tiles}</div></details>')
    if view.reply_text is not None and view.mistake is None:
        end.append(
            f'<details class="tool-reply" open><summary>Reply to the model</summary>'
            f"<pre>{escape(view.reply_text)}</pre></details>"
        )
    end.append("</section>")
    return RoundHtml(top=top, reasoning=reasoning, middle="".join(middle),
                     cards="".join(render_card(c, urls) for c in view.cards), end="".join(end))


def _entry(entry: ContextEntry, urls: ImageUrls) -> str:
    classes = ["ctx-msg", f"ctx-{entry.role}"]
    tags = []
    if entry.dropped:
        classes.append("ctx-dropped")
        tags.append("dropped")
    if entry.images_as_text:
        classes.append("ctx-image-text")
        tags.append("image sent as text")
    thumbs = "".join(_img(urls, part, THUMB_SIDE, "ctx-thumb", part.name) for part in entry.images)
    tag_html = "".join(f'<span class="ctx-tag">{escape(t)}</span>' for t in tags)
    reason = f'<div class="ctx-reason">Why: {escape(entry.reason)}</div>' if entry.reason else ""
    full = " ".join(entry.text.split())
    if full != entry.excerpt:  # cut: the excerpt opens to the whole text
        text = (f'<details class="ctx-text"><summary>{escape(entry.excerpt)}</summary>'
                f'<div class="ctx-full">{escape(entry.text)}</div></details>')
    else:
        text = f'<div class="ctx-text">{escape(entry.excerpt)}</div>'
    return (
        f'<div class="{" ".join(classes)}" data-index="{entry.index}" data-role="{escape(entry.role)}">'
        f'<div class="ctx-meta">#{entry.index} {escape(entry.role)} {tag_html}</div>{reason}{thumbs}{text}</div>'
    )


def _dropped_runs(entries: Sequence[ContextEntry]) -> list[list[ContextEntry]]:
    """``entries`` split into runs: consecutive dropped messages together, every other message alone."""
    runs: list[list[ContextEntry]] = []
    for entry in entries:
        if entry.dropped and runs and runs[-1][-1].dropped:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return runs


def render_context(panel: ContextPanel | None, urls: ImageUrls, placeholder: str = RUN_CONTEXT_PLACEHOLDER,
                   latest: int | None = None) -> str:
    """The context panel: header with counts, then every message (dropped ones greyed out, with the reason).

    Two or more dropped messages in a row collapse into one line that says how many and why; long
    messages show an excerpt that expands to the whole text. The list is a scroll region that the
    keyboard can reach (``tabindex``). ``latest``: the newest round, named when ``panel`` is an older one.
    """
    if panel is None:
        return f'<div class="ctx-empty">{escape(placeholder)}</div>'
    if panel.prompt_tokens is not None:
        tokens = f"{panel.prompt_tokens} tokens"
    else:
        tokens = "tokens counted when the round ends" if panel.pending else "token count not reported"
    images = f'{panel.image_count} image{"s" if panel.image_count != 1 else ""}'
    older = f" (latest: round {latest})" if latest is not None and latest != panel.round_index else ""
    head = (
        f'<div class="ctx-head" data-round="{panel.round_index}">'
        f"<b>Context of round {panel.round_index}</b>{older}: {panel.sent_count} of {len(panel.entries)} messages "
        f'sent · <span class="ctx-image-count">{images}</span> · <span class="ctx-tokens">{tokens}</span></div>'
    )
    out = [head, f'<div class="ctx-scroll" tabindex="0" role="region" aria-label="Messages of round '
                 f'{panel.round_index}">']
    for run in _dropped_runs(panel.entries):
        if len(run) > 1:
            reasons = sorted({e.reason for e in run if e.reason})
            why = f": {reasons[0]}" if len(reasons) == 1 else ""
            out.append(f'<details class="ctx-run"><summary>{len(run)} messages dropped (#{run[0].index} to '
                       f"#{run[-1].index}){escape(why)}</summary>"
                       + "".join(_entry(e, urls) for e in run) + "</details>")
        else:
            out.append(_entry(run[0], urls))
        if any(e.index == 1 for e in run) and panel.note:
            out.append(f'<div class="ctx-note">Note added to message 1: {escape(panel.note)}</div>')
    out.append("</div>")
    return "".join(out)


def _break_after_underscores(name: str) -> str:
    """``name`` escaped, with a line-break opportunity after each underscore: a narrow table (a phone) wraps a tool name
    between its words (``select_masks_`` / ``and_return``), never in the middle of one."""
    return "_<wbr>".join(escape(part) for part in name.split("_"))


def render_timeline(rows: Sequence[TimelineRow], current: int | None = None) -> str:
    """The rounds of a trace as one table (tool, outcome, time, tokens); each row opens its round when clicked
    (``tr[data-round]``, a focusable button in the first cell); ``current`` is marked."""
    if not rows:
        return ""
    body = []
    for r in rows:
        mark = " timeline-current" if r.index == current else ""
        tokens = " / ".join("-" if n is None else str(n) for n in (r.prompt_tokens, r.output_tokens))
        body.append(
            f'<tr class="timeline-{escape(r.kind)}{mark}" data-round="{r.index}">'
            f'<td><button type="button" class="timeline-open" data-round="{r.index}">{r.index}</button></td>'
            f"<td><code>{_break_after_underscores(r.tool)}</code></td><td>{escape(r.outcome)}</td><td>{r.seconds:.1f} s</td>"
            f"<td>{escape(tokens)}</td></tr>"
        )
    return (
        '<table class="timeline"><thead><tr><th>round</th><th>tool</th><th>outcome</th><th>time</th>'
        f'<th>tokens in / out</th></tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def render_final_masks(rows: Sequence[FinalMaskRow]) -> str:
    """The final masks as a table (number, score, area, box, what verification established), or a line saying there
    are none."""
    if not rows:
        return '<div class="final-masks final-none">No final masks.</div>'
    body = "".join(
        f'<tr data-mask="{r.number}"><td>{r.number}</td><td>{r.score:.3f}</td><td>{r.area}</td>'
        f"<td>{', '.join(f'{v:g}' for v in r.bbox_xywh)}</td>"
        f'<td class="check-{escape(r.check or "unknown")}">{escape(CHECK_WORDS.get(r.check or "", "-"))}</td></tr>'
        for r in rows
    )
    return (
        '<table class="final-masks"><thead><tr><th>mask</th><th>score</th><th>area (px)</th>'
        f"<th>box x, y, w, h (px)</th><th>verification</th></tr></thead><tbody>{body}</tbody></table>"
    )


class RunPage:
    """The HTML of a live run's panels, rendered incrementally from a ``RunView``.

    Finished rounds never change, so each round's HTML is rendered once and kept; the panel lists them
    newest first, under the round in progress, so what is happening now stays at the top.
    """

    def __init__(self) -> None:
        self.urls = ImageUrls()
        self._rounds: list[str] = []
        self._context_key: tuple[int, int | None, bool] | None = None
        self._context_html = render_context(None, self.urls)

    def rounds_html(self, views: Sequence[RoundView]) -> str:
        """All finished rounds, newest first (only new ones are rendered), each with a button that opens its
        context."""
        for view in views[len(self._rounds):]:
            self._rounds.append(render_round(view, self.urls, context_button=True))
        return "".join(reversed(self._rounds))

    def live_parts(self, live: RoundView | None) -> RoundHtml:
        """The round in progress in its pieces (``RoundHtml``); every piece ``""`` when there is none."""
        if live is None:
            return NO_ROUND
        return round_parts(live, self.urls, context_button=True)

    def context_html(self, panel: ContextPanel | None) -> str:
        """The context panel (re-rendered only when its round or token count changes)."""
        key = None if panel is None else (panel.round_index, panel.prompt_tokens, panel.pending)
        if key != self._context_key:
            self._context_key = key
            self._context_html = render_context(panel, self.urls)
        return self._context_html
