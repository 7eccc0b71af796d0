"""The app's event -> view mapping and its HTML, on a real run (scripted VLM, known segmenter, real photo)."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool, verdict

from sam3_agent.agent import Agent, AgentConfig
from sam3_agent.types import (
    ContextRecord,
    Masks,
    MaskVerdictReady,
    RoundFinished,
    RoundStarted,
    RunFinished,
    TokenStreamed,
    ToolStarted,
    Trace,
)
from sam3_agent.ui.html import (
    ImageUrls,
    RunPage,
    render_context,
    render_final_masks,
    render_round,
    render_status,
)
from sam3_agent.ui.view import (
    FinalMaskRow,
    RunView,
    StatusLine,
    context_panel,
    final_mask_rows,
    final_status_line,
    trace_round_views,
)
from sam3_agent.vlm.scripted import ScriptedVLM

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
        view.apply(event, agent_run.trace.messages)
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


def test_reasoning_streams_token_by_token_into_the_live_round(recorded):
    _, snapshots, _ = recorded
    texts = [live.reasoning for event, _, live, _ in snapshots if isinstance(event, TokenStreamed)
             and event.round_index == 1]
    assert texts[-1] == MAIN[0]
    assert len(texts) == len(MAIN[0].split())  # one update per scripted piece
    assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(texts))


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
    from sam3_agent.types import ImagePart, Message, TextPart

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
    from sam3_agent.types import Message, TextPart

    messages = [Message("system", (TextPart("s"),)), Message("user", (TextPart("u"),))]
    with pytest.raises(ValueError, match="names message 3, but the conversation has 2"):
        context_panel(messages, ContextRecord(kept=(0, 1, 3), dropped=(2,)), 2)


def test_final_mask_list_gives_number_score_area_and_box(recorded):
    view, _, _ = recorded
    rows = final_mask_rows(view.final_masks)
    assert rows == [FinalMaskRow(1, 0.8, 100 * 200, (20.0, 20.0, 100.0, 200.0))]
    html = render_final_masks(rows)
    assert '<tr data-mask="1"><td>1</td><td>0.800</td><td>20000</td><td>20, 20, 100, 200</td></tr>' in html
    assert render_final_masks([]) == '<div class="final-masks final-none">No final masks.</div>'


@pytest.mark.parametrize(
    ("status", "error", "final", "text"),
    [
        ("done", None, 2, "Done: 2 masks selected after 3 rounds."),
        ("no_mask", None, 0, "No mask: the model reported that nothing matches the query (after 3 rounds)."),
        ("max_rounds", "budget", None, "Round budget exhausted: no answer after 3 rounds."),
        ("failed", "SAM 3 ran out of memory", None, "Failed after 3 rounds: SAM 3 ran out of memory"),
        ("cancelled", "stopped by the user", None,
         "Stopped after 3 rounds: stopped by the user. The trace so far is kept."),
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


def test_finished_rounds_html_only_grows(recorded):
    view, _, _ = recorded
    page = RunPage()
    first = page.rounds_html(view.rounds[:2])
    second = page.rounds_html(view.rounds)
    assert second.startswith(first) and second.count('<section class="round"') == 4
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
