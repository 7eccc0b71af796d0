"""The app's event -> view mapping and its HTML, on a real run (scripted VLM, known segmenter, real photo)."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool, verdict

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.output_parts import split_output
from sam3_agent.events import MaskVerdictReady, RoundFinished, RoundStarted, RunFinished, TokenStreamed, ToolStarted
from sam3_agent.mask_set import Masks
from sam3_agent.types import ContextRecord, Trace
from sam3_agent.ui.context_view import context_panel
from sam3_agent.ui.html import ImageUrls, RunPage, render_context, render_final_masks, render_round, render_status
from sam3_agent.ui.run_view import RunView
from sam3_agent.ui.view import (
    FinalMaskRow,
    StatusLine,
    final_mask_rows,
    final_status_line,
    trace_round_views,
)
from sam3_agent.vlm.scripted import ScriptedVLM

MASKS_GONE_TEXT = ("its overlay shows masks that no longer exist: only the raw image and the current masks' overlay are "
                   "sent (with the overlay's tiles, for a dense set, when they are switched on)")

SEGMENTER = {
    "person": [((10, 10, 110, 210), 0.7), ((200, 50, 300, 250), 0.9), ((350, 300, 450, 500), 0.6)],
    "child": [((20, 20, 120, 220), 0.8), ((300, 300, 400, 400), 0.55)],
}
MAIN = [
    tool("segment_phrase", "find people first", text_prompt="person"),
    tool("segment_phrase", "children are smaller", text_prompt="child"),
    tool("examine_each_mask", "check each child"),
    tool("select_masks_and_return", "mask 1 it is", final_answer_masks=[1]),
]
VERIFY = [verdict("Accept"), verdict("Reject")]


class FixedClock:
    """A clock that ticks one second per call, from 1000.0."""

    def __init__(self) -> None:
        self.now = 999.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture(scope="module")
def recorded():
    """One full run: the events, the view after each event, and the trace."""
    agent = Agent(ScriptedVLM(MAIN), KnownSegmenter(SEGMENTER), AgentConfig(max_rounds=30),
                  verifier=ScriptedVLM(VERIFY))
    agent_run = agent.start(photo("astronaut.jpg"), "the child on the left")
    view = RunView(30, clock=FixedClock())
    snapshots = []
    for event in agent_run:
        view.apply(event)
        live = view.live.view() if view.live is not None else None
        snapshots.append((event, view.status_line(), live, view.context))
    return view, snapshots, agent_run.trace


def classes_by_index(html: str) -> dict[int, set[str]]:
    """data-index -> CSS classes of every context message in the panel HTML."""
    found = re.findall(r'<div class="([^"]*)" data-index="(\d+)"', html)
    return {int(index): set(classes.split()) for classes, index in found}


def test_the_run_ends_done_with_one_child_mask(recorded):
    view, _, trace = recorded
    assert trace.status == "done"
    assert [r.index for r in view.rounds] == [1, 2, 3, 4]
    assert view.status_line() == StatusLine("done", "Done: 1 mask selected after 4 rounds.")


def test_round_views_show_calls_summaries_and_overlays(recorded):
    view, _, _ = recorded
    assert [r.call_text for r in view.rounds] == [
        'segment_phrase(text_prompt="person")',
        'segment_phrase(text_prompt="child")',
        "examine_each_mask()",
        "select_masks_and_return(final_answer_masks=[1])",
    ]
    assert [r.reasoning for r in view.rounds] == ["find people first", "children are smaller", "check each child",
                                                  "mask 1 it is"]
    assert [r.summary for r in view.rounds] == ["3 mask(s) for 'person'", "2 mask(s) for 'child'",
                                                "kept 1 of 2 mask(s)", "selected mask(s) 1"]
    assert [r.overlay.name if r.overlay else None for r in view.rounds] == [
        "round1_overlay", "round2_overlay", "round3_overlay", None]
    assert [r.finished_at for r in view.rounds] == [1000.0, 1001.0, 1002.0, 1003.0]
    assert all(not r.streaming and r.max_rounds == 30 for r in view.rounds)


def test_reasoning_streams_token_by_token_into_the_live_round_without_markup(recorded):
    _, snapshots, _ = recorded
    lives = [live for event, _, live, _ in snapshots if isinstance(event, TokenStreamed) and event.round_index == 1]
    assert len(lives) == len(MAIN[0].split())  # one update per scripted piece
    texts = [live.reasoning + " " + live.writing_call for live in lives]
    assert all(b.startswith(a.strip()) and len(b) > len(a) for a, b in itertools.pairwise(texts))
    assert lives[-1].reasoning == "find people first"
    assert lives[-1].writing_call == '{"name": "segment_phrase", "parameters": {"text_prompt": "person"}}'
    assert not any("<" in live.reasoning or "<" in live.writing_call for live in lives)


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>look</think>\n<tool>{}</tool>", ("look", "{}")),
    ("<think>still thinking", ("still thinking", "")),
    ("no tags at all", ("no tags at all", "")),
    ("plan first <tool_call>{\"name\": \"x\"}", ("plan first", '{"name": "x"}')),  # Qwen's native tag, no think
    ("<think>a</think> then b <tool>{", ("a\nthen b", "{")),
    ("<think>a</think> a closing remark", ("a\na closing remark", "")),
])
def test_model_output_splits_into_reasoning_and_the_call_being_written(text, expected):
    assert split_output(text) == expected


def test_a_tag_still_arriving_is_held_back():
    from sam3_agent.agent.output_parts import split_streamed

    text = "<think>look</think>\n<to"
    assert split_streamed(text) == ("look", "")
    text += "ol>{"
    assert split_streamed(text)[1] == "{"


def test_status_line_while_running_names_round_budget_and_activity(recorded):
    _, snapshots, _ = recorded
    lines = {type(event).__name__ + str(getattr(event, "round_index", "")): line for event, line, _, _ in snapshots}
    assert lines["RoundStarted3"] == StatusLine("running", "Running: round 3 / 30, generating")
    assert lines["ToolStarted3"] == StatusLine("running", "Running: round 3 / 30, running examine_each_mask")
    verdict_lines = [line.text for event, line, _, _ in snapshots if isinstance(event, MaskVerdictReady)]
    assert verdict_lines == ["Running: round 3 / 30, examined mask 1 of 2",
                             "Running: round 3 / 30, examined mask 2 of 2"]


def test_verdict_cards_appear_one_by_one_then_stay_on_the_round(recorded):
    view, snapshots, _ = recorded
    live_cards = [[c.verdict for c in live.cards] for event, _, live, _ in snapshots
                  if isinstance(event, MaskVerdictReady)]
    assert live_cards == [["accept"], ["accept", "reject"]]
    cards = view.rounds[2].cards
    assert [(c.mask_number, c.total, c.verdict, c.fallback) for c in cards] == [(1, 2, "accept", False),
                                                                               (2, 2, "reject", False)]
    assert cards[0].reasoning == verdict("Accept")
    assert [c.mask_view.name for c in cards] == ["round3_mask1_view", "round3_mask2_view"]
    html = render_round(view.rounds[2], ImageUrls())
    assert html.count('class="verdict-card verdict-accept" data-mask="1"') == 1
    assert html.count('class="verdict-card verdict-reject" data-mask="2"') == 1
    assert html.count("data:image/jpeg;base64,") == 5  # 2 cards x 2 views + the survivors' overlay


def test_each_verifier_view_on_a_card_is_a_button_that_opens_it_with_its_alt_text(recorded):
    view, _, _ = recorded
    html = render_round(view.rounds[2], ImageUrls())
    buttons = re.findall(r'<button type="button" class="card-view" aria-haspopup="dialog" aria-label="([^"]+)" '
                         r'title="Enlarge"><img class="(card-mask|card-zoom)" src="data:image/jpeg;base64,[^"]+" '
                         r'alt="([^"]+)"/></button>', html)
    assert buttons == [
        ("Enlarge: mask 1 on the photo, as the verifier saw it", "card-mask", "mask 1 on the photo, as the verifier saw it"),
        ("Enlarge: mask 1 up close, as the verifier saw it", "card-zoom", "mask 1 up close, as the verifier saw it"),
        ("Enlarge: mask 2 on the photo, as the verifier saw it", "card-mask", "mask 2 on the photo, as the verifier saw it"),
        ("Enlarge: mask 2 up close, as the verifier saw it", "card-zoom", "mask 2 up close, as the verifier saw it"),
    ]


def test_context_panel_after_a_second_phrase_greys_out_the_dropped_messages(recorded):
    _, snapshots, _ = recorded
    started = {event.round_index: panel for event, _, _, panel in snapshots if isinstance(event, RoundStarted)}
    assert started[2].dropped_indices == () and started[2].pending
    assert started[3].dropped_indices == (2, 3)
    assert started[3].image_count == 2
    html = render_context(started[3], ImageUrls())
    classes = classes_by_index(html)
    assert sorted(classes) == [0, 1, 2, 3, 4, 5]
    assert [i for i, c in classes.items() if "ctx-dropped" in c] == [2, 3]
    assert "ctx-assistant" in classes[2] and "ctx-user" in classes[3]
    assert '<span class="ctx-image-count">2 images</span>' in html


def test_context_panel_highlights_the_tried_phrases_note(recorded):
    _, snapshots, _ = recorded
    panel = next(p for e, _, _, p in snapshots if isinstance(e, RoundStarted) and e.round_index == 3)
    assert panel.note is not None and '"person"' in panel.note
    html = render_context(panel, ImageUrls())
    notes = re.findall(r'<div class="ctx-note">(.*?)</div>', html)
    assert len(notes) == 1 and "&quot;person&quot;" in notes[0]
    # the note follows message 1
    assert html.index('data-index="1"') < html.index('class="ctx-note"') < html.index('data-index="2"')


def test_context_panel_marks_an_overlay_sent_as_text_and_keeps_two_images(recorded):
    view, _, _ = recorded
    panel = view.context  # the last round's, with its token count filled in at RoundFinished
    assert panel.round_index == 4
    assert panel.dropped_indices == (2, 3)
    assert [e.index for e in panel.entries if e.images_as_text] == [5]
    assert panel.image_count == 2
    classes = classes_by_index(render_context(panel, ImageUrls()))
    assert "ctx-image-text" in classes[5] and "ctx-dropped" not in classes[5]


def test_context_panel_shows_the_prompt_token_count_once_known():
    trace = Trace("q", photo("coffee.jpg"))
    from sam3_agent.messages import ImagePart, Message, TextPart

    trace.messages[:] = [Message("system", (TextPart("sys"),)),
                         Message("user", (ImagePart(trace.image, "raw"), TextPart("find it")))]
    record = ContextRecord(kept=(0, 1), dropped=(), image_count=1)
    panel = context_panel(trace.messages, record, 1)
    assert '<span class="ctx-tokens">token count not reported</span>' in render_context(panel, ImageUrls())
    pending = render_context(replace(panel, pending=True), ImageUrls())
    assert '<span class="ctx-tokens">tokens counted when the round ends</span>' in pending
    html = render_context(context_panel(trace.messages, record, 1, prompt_tokens=812), ImageUrls())
    assert '<span class="ctx-tokens">812 tokens</span>' in html
    assert '<span class="ctx-image-count">1 image</span>' in html


def test_context_panel_rejects_a_record_beyond_the_conversation():
    from sam3_agent.messages import Message, TextPart

    messages = [Message("system", (TextPart("s"),)), Message("user", (TextPart("u"),))]
    with pytest.raises(ValueError, match="names message 3, but the conversation has 2"):
        context_panel(messages, ContextRecord(kept=(0, 1, 3), dropped=(2,)), 2)


def test_final_mask_list_gives_number_score_area_and_box(recorded):
    view, _, _ = recorded
    rows = final_mask_rows(view.trace)
    assert rows == [FinalMaskRow(1, 0.8, 100 * 200, (20.0, 20.0, 100.0, 200.0), "confirmed")]  # mask 1 accepted
    html = render_final_masks(rows)
    assert ('<tr data-mask="1"><td>1</td><td>0.800</td><td>20000</td><td>20, 20, 100, 200</td>'
            '<td class="check-confirmed">confirmed by verification</td></tr>') in html
    assert render_final_masks([]) == '<div class="final-masks final-none">No final masks.</div>'


@pytest.mark.parametrize(
    ("status", "error", "final", "text"),
    [
        ("done", None, 2, "Done: 2 masks selected after 3 rounds."),
        ("no_mask", None, 0, "No mask: the model reported that nothing matches the query (after 3 rounds)."),
        ("max_rounds", "budget", None, "Round budget exhausted: no answer after 3 rounds."),
        ("failed", "SAM 3 ran out of memory", None, "Failed after 3 rounds: SAM 3 ran out of memory."),
        ("cancelled", "stopped by the user", None, "Stopped after 3 rounds. The trace so far is kept."),
        ("cancelled", "the browser session ended", None,
         "Stopped after 3 rounds: the browser session ended. The trace so far is kept."),
    ],
)
def test_status_text_per_final_status(recorded, status, error, final, text):
    _, _, done = recorded
    trace = Trace("q", done.image, rounds=list(done.rounds[:3]), status=status, error=error)
    if final is not None:
        trace.final_masks = Masks(np.ones((final, 2, 2), bool), np.ones(final, np.float32), np.zeros((final, 4),
                                                                                                     np.float32))
    line = final_status_line(trace)
    assert line == StatusLine(status, text)
    html = render_status(line)
    assert html.startswith(f'<div class="status status-{status}" data-status="{status}" ')
    assert html.endswith(f">{text}</div>")


def test_status_html_carries_the_kind_as_class():
    assert render_status(StatusLine("cancelled", "Stopped after 1 round: x")) == (
        '<div class="status status-cancelled" data-status="cancelled" title="Stopped">Stopped after 1 round: x</div>'
    )


def test_model_text_is_escaped_in_the_page(recorded):
    view, _, _ = recorded
    from dataclasses import replace

    hostile = replace(view.rounds[0], reasoning="<script>alert(1)</script>", call_text='a("<b>")')
    html = render_round(hostile, ImageUrls())
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "a(&quot;&lt;b&gt;&quot;)" in html


def test_finished_rounds_are_listed_newest_first_and_rendered_once(recorded):
    view, _, _ = recorded
    page = RunPage()
    first = page.rounds_html(view.rounds[:2])
    second = page.rounds_html(view.rounds)
    assert second.endswith(first) and second.count('<section class="round"') == 4
    assert [int(n) for n in re.findall(r'<section class="round" data-round="(\d)"', second)] == [4, 3, 2, 1]
    assert 'data-round="1" data-finished="1000.000"' in first


def test_a_saved_trace_gives_the_same_views_round_by_round(recorded):
    view, _, trace = recorded
    inspected = trace_round_views(trace)
    assert [r.round for r in inspected] == [
        type(r)(**{**r.__dict__, "finished_at": None}) for r in view.rounds]
    assert [r.context.dropped_indices for r in inspected] == [(), (), (2, 3), (2, 3)]
    assert inspected[3].context == view.context


def test_events_of_the_run_in_order(recorded):
    _, snapshots, _ = recorded
    kinds = [type(e).__name__ for e, *_ in snapshots if not isinstance(e, TokenStreamed)]
    assert kinds.count("RoundStarted") == 4 and kinds[-1] == "RunFinished"
    assert sum(isinstance(e, (RoundFinished, ToolStarted, RunFinished)) for e, *_ in snapshots) == 9


# ------------------------------------------------------------------ why dropped, collapsing, expanding


def test_each_dropped_or_text_only_message_says_why(recorded):
    view, _, _ = recorded
    reasons = {e.index: e.reason for e in view.context.entries if e.reason}
    assert reasons == {
        2: "before the latest segment_phrase: its masks no longer exist",
        3: "before the latest segment_phrase: its masks no longer exist",
        5: MASKS_GONE_TEXT,
    }
    html = render_context(view.context, ImageUrls())
    assert html.count('<div class="ctx-reason">Why: before the latest segment_phrase') == 2
    assert html.count('<div class="ctx-reason">Why: its overlay shows masks that no longer exist') == 1


def test_a_run_of_dropped_messages_collapses_into_one_line_that_says_why(recorded):
    view, _, _ = recorded
    html = render_context(view.context, ImageUrls())
    run = re.search(r'<details class="ctx-run"><summary>(.*?)</summary>(.*?)</details>', html)
    assert run.group(1) == ("2 messages dropped (#2 to #3): before the latest segment_phrase: its masks no "
                            "longer exist")
    assert sorted(classes_by_index(run.group(2))) == [2, 3]  # both messages are inside the collapsed run
    assert "<details class=\"ctx-run\" open" not in html


def test_a_long_message_shows_an_excerpt_that_expands_to_the_whole_text(recorded):
    view, _, trace = recorded
    html = render_context(view.context, ImageUrls())
    system = re.search(r'data-index="0".*?<details class="ctx-text"><summary>(.*?)</summary>'
                       r'<div class="ctx-full">(.*?)</div></details>', html, re.S)
    assert system.group(1).endswith("...") and len(system.group(1)) < 300
    from html import unescape

    assert unescape(system.group(2)) == trace.messages[0].text
    assert '<div class="ctx-text">' in html  # short messages are shown whole, without a toggle


def test_the_message_list_is_a_scroll_region_the_keyboard_reaches(recorded):
    view, _, _ = recorded
    html = render_context(view.context, ImageUrls())
    assert '<div class="ctx-scroll" tabindex="0" role="region" aria-label="Messages of round 4">' in html


def test_an_older_trace_without_reasons_gets_them_from_the_policy_applied_again(recorded):
    _, _, trace = recorded
    record = replace(trace.rounds[3].context, reasons=None)  # as saved before the field existed
    panel = context_panel(trace.messages, record, 4)
    assert [(e.index, e.reason) for e in panel.entries if e.reason] == [
        (2, "before the latest segment_phrase: its masks no longer exist"),
        (3, "before the latest segment_phrase: its masks no longer exist"),
        (5, MASKS_GONE_TEXT),
    ]


def test_an_older_trace_whose_record_the_policy_no_longer_gives_claims_no_reason(recorded):
    _, _, trace = recorded
    record = replace(trace.rounds[3].context, reasons=None, dropped=(2,), kept=(0, 1, 3, 4, 5, 6))
    panel = context_panel(trace.messages, record, 4)
    assert [(e.index, e.reason) for e in panel.entries if e.dropped] == [(2, "reason not recorded in this trace")]


def test_reasons_survive_a_save_and_load_and_an_old_file_reads_as_not_recorded(recorded, tmp_path):
    import json
    import zipfile

    from sam3_agent.trace.io import load_trace_zip, trace_to_zip_bytes

    _, _, trace = recorded
    data = trace_to_zip_bytes(trace)
    assert load_trace_zip(data).rounds[3].context.reasons == trace.rounds[3].context.reasons
    with zipfile.ZipFile(__import__("io").BytesIO(data)) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(files["trace.json"])
    for saved in document["rounds"]:
        del saved["context"]["reasons"]
    files["trace.json"] = json.dumps(document).encode()
    old = tmp_path / "old.zip"
    with zipfile.ZipFile(old, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    assert all(r.context.reasons is None for r in load_trace_zip(old.read_bytes()).rounds)


# ------------------------------------------------------------------ rounds: mistakes, failures, timeline


def mistake_trace():
    """A run whose first answer has no tool call (a mistake), then a phrase that SAM 3 fails on."""
    segmenter = KnownSegmenter(SEGMENTER, failing=["boom"])
    main = ["I am not sure what to do.", tool("segment_phrase", "try it", text_prompt="boom")]
    agent = Agent(ScriptedVLM(main), segmenter, AgentConfig(max_rounds=5))
    agent_run = agent.start(photo("astronaut.jpg"), "the child")
    view = RunView(5)
    for event in agent_run:
        view.apply(event)
    return view, agent_run.trace


def test_a_model_mistake_is_shown_once_with_what_the_model_was_told():
    view, trace = mistake_trace()
    html = render_round(view.rounds[0], ImageUrls())
    feedback = trace.rounds[0].result.reply.text
    assert '<div class="mistake"><b>Model mistake: no tool call.</b> The model was told:<pre>' in html
    from html import escape

    assert html.count(escape(feedback)) == 1 and 'class="tool-reply"' not in html
    assert view.rounds[0].reasoning == "I am not sure what to do."


def test_after_a_failed_run_the_context_no_longer_waits_for_a_token_count():
    view, trace = mistake_trace()
    assert trace.status == "failed" and view.context.round_index == 2
    assert not view.context.pending
    assert '<span class="ctx-tokens">token count not reported</span>' in render_context(view.context, ImageUrls())


def test_the_timeline_gives_tool_outcome_time_and_tokens_per_round(recorded):
    from sam3_agent.ui.html import render_timeline
    from sam3_agent.ui.view import timeline_rows

    _, _, trace = recorded
    rows = timeline_rows(trace)
    assert [(r.index, r.tool, r.outcome, r.kind) for r in rows] == [
        (1, "segment_phrase", "3 mask(s) for 'person'", "ok"),
        (2, "segment_phrase", "2 mask(s) for 'child'", "ok"),
        (3, "examine_each_mask", "kept 1 of 2 mask(s)", "ok"),
        (4, "select_masks_and_return", "selected mask(s) 1", "answer"),
    ]
    html = render_timeline(rows, current=3)
    assert html.count('<tr class="timeline-') == 4
    assert '<tr class="timeline-ok timeline-current" data-round="3">' in html
    assert '<button type="button" class="timeline-open" data-round="4">4</button>' in html
    # a narrow table wraps a tool name after an underscore, never in the middle of a word
    assert "<td><code>select_<wbr>masks_<wbr>and_<wbr>return</code></td>" in html


def test_the_timeline_names_mistakes_and_failures():
    from sam3_agent.ui.view import timeline_rows

    _, trace = mistake_trace()
    assert [(r.tool, r.outcome, r.kind) for r in timeline_rows(trace)] == [
        ("-", "mistake: no tool call", "mistake"),
        ("segment_phrase", "failed: SAM 3 model 'known' ran out of memory: use a smaller image", "failed"),
    ]


def test_finished_run_rounds_carry_a_button_that_opens_their_context(recorded):
    view, _, _ = recorded
    html = RunPage().rounds_html(view.rounds)
    assert [int(n) for n in re.findall(r'<button class="ctx-open" data-round="(\d)"', html)] == [4, 3, 2, 1]


def test_sentences_start_upper_case_and_end_with_a_stop():
    from sam3_agent.ui.view import sentence

    assert [sentence("add an image first"), sentence("Done."), sentence("why?"), sentence("")] == [
        "Add an image first.", "Done.", "Why?", ""]


def test_a_trace_missing_a_field_is_refused_in_words_without_python_class_names(recorded):
    import io
    import json
    import zipfile

    from sam3_agent.errors import TraceFormatError
    from sam3_agent.trace.io import load_trace_zip, trace_to_zip_bytes

    _, _, trace = recorded
    source = zipfile.ZipFile(io.BytesIO(trace_to_zip_bytes(trace)))
    damaged = io.BytesIO()
    with zipfile.ZipFile(damaged, "w") as target:
        for name in source.namelist():
            content = source.read(name)
            if name == "trace.json":
                document = json.loads(content)
                del document["rounds"]
                content = json.dumps(document).encode()
            target.writestr(name, content)
    with pytest.raises(TraceFormatError) as raised:
        load_trace_zip(damaged.getvalue())
    assert str(raised.value) == "the trace is malformed: the field 'rounds' is missing"
    assert "KeyError" not in str(raised.value)


def test_low_level_errors_read_as_words():
    from sam3_agent.errors import what_went_wrong

    assert what_went_wrong(KeyError("rounds")) == "the field 'rounds' is missing"
    assert what_went_wrong(TypeError("'int' object is not iterable")) == "'int' object is not iterable"
    assert what_went_wrong(IndexError("list index out of range")) == (
        "a list is shorter than expected (list index out of range)")


def test_the_timeline_says_which_token_counts_are_unknown():
    from sam3_agent.ui.html import render_timeline
    from sam3_agent.ui.view import TimelineRow

    html = render_timeline([TimelineRow(1, "segment_phrase", "2 mask(s) for 'cup'", "ok", 1.25, None, 15),
                            TimelineRow(2, "-", "mistake: no tool call", "mistake", 0.5, 812, None)])
    assert "<td>1.2 s</td><td>- / 15</td>" in html and "<td>812 / -</td>" in html
    assert '<tr class="timeline-mistake" data-round="2">' in html
