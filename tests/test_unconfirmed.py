"""A mask kept after an unusable verification is never recorded as accepted (issue 30): the trace records it as
``unconfirmed``, and the verdict card, Inspect's mask table, the review queue's mask list, the COCO results, the COCO
export and the reply to the main model all say it was not confirmed; traces written before (``accept`` with source
``fallback`` or ``error``) open with the same reading."""

from __future__ import annotations

import json

import pytest
from conftest import tool, verdict
from test_agent_replies import make_agent, run_all

from sam3_agent.cli.run import write_outputs
from sam3_agent.correct.edits import EditState, agent_items
from sam3_agent.correct.export import bundle_bytes, coco_document, load_bundle
from sam3_agent.errors import TraceFormatError
from sam3_agent.trace.io import load_trace, save_trace
from sam3_agent.types import MaskVerdict
from sam3_agent.ui.correct.view import mask_number_choices
from sam3_agent.ui.html import ImageUrls, render_card, render_final_masks
from sam3_agent.ui.view import final_mask_rows, verdict_card
from sam3_agent.verification import CONFIRMED, NOT_CONFIRMED, NOT_EXAMINED, final_mask_checks

RUN = [tool("segment_phrase", text_prompt="child"), tool("examine_each_mask"),
       tool("select_masks_and_return", final_answer_masks=[1, 2])]
HEDGED = ["<think>hmm</think><verdict>Probably accept</verdict>", "<think>still</think><verdict>Accept?</verdict>"]


@pytest.fixture()
def unconfirmed_run(segmenter, astronaut):
    """Child mask 1: unclear twice (kept, not confirmed); mask 2 accepted; both selected."""
    agent, _, _ = make_agent(segmenter, RUN, [*HEDGED, verdict("Accept")])
    return agent, run_all(agent, astronaut)


def test_a_mask_kept_after_an_unusable_answer_is_recorded_unconfirmed_never_accept(unconfirmed_run, tmp_path):
    _, trace = unconfirmed_run
    assert [(v.verdict, v.source, v.kept) for v in trace.rounds[1].result.verdicts] == [
        ("unconfirmed", "fallback", True), ("accept", "model", True)]
    document = json.loads(save_trace(trace, tmp_path / "run").read_text())  # the trace.json written
    stored = [(v["verdict"], v["source"]) for r in document["rounds"] if r["result"] for v in r["result"]["verdicts"]]
    assert stored == [("unconfirmed", "fallback"), ("accept", "model")]


def test_a_verdict_record_cannot_claim_an_acceptance_its_source_did_not_give(astronaut):
    from sam3_agent.messages import ImagePart

    view = ImagePart(astronaut, "v")
    for verdict_word, source in (("accept", "fallback"), ("accept", "error"), ("unconfirmed", "model")):
        with pytest.raises(ValueError, match="a fallback's or a failed check's is unconfirmed"):
            MaskVerdict(1, verdict_word, source, (), view, None)


def test_the_main_model_is_told_which_masks_were_not_confirmed(unconfirmed_run):
    agent, trace = unconfirmed_run
    reply = trace.messages[trace.rounds[1].reply_index].text
    assert reply == (agent.prompts.format("examine_result_unchecked", kept=2, total=2) + "\n"
                     + agent.prompts.format("examine_unclear", numbers="1"))
    assert "kept but not confirmed (numbers in the attached image): 1." in reply
    assert trace.rounds[1].result.summary == "kept 2 of 2 mask(s); kept, not confirmed (new numbers): 1 (no clear verdict)"


def test_each_final_mask_says_what_verification_established(unconfirmed_run, segmenter, astronaut):
    _, trace = unconfirmed_run
    assert final_mask_checks(trace) == [NOT_CONFIRMED, CONFIRMED]
    unexamined, _, _ = make_agent(segmenter, [RUN[0], RUN[2]])
    assert final_mask_checks(run_all(unexamined, astronaut)) == [NOT_EXAMINED, NOT_EXAMINED]


def test_the_verdict_card_and_inspects_mask_table_say_not_confirmed(unconfirmed_run):
    _, trace = unconfirmed_run
    unclear, accepted = trace.rounds[1].result.verdicts
    html = render_card(verdict_card(unclear, 2), ImageUrls())
    assert 'class="verdict-card verdict-unconfirmed"' in html
    assert ('<b class="verdict">Not confirmed</b> (no clear verdict, even when asked again: kept, not confirmed)'
            in html)
    assert '<b class="verdict">Accept</b>' in render_card(verdict_card(accepted, 2), ImageUrls())
    table = render_final_masks(final_mask_rows(trace))
    assert [r.check for r in final_mask_rows(trace)] == [NOT_CONFIRMED, CONFIRMED]
    assert '<td class="check-not_confirmed">not confirmed by verification</td>' in table


def test_the_review_queues_mask_list_marks_the_unconfirmed_mask(unconfirmed_run):
    _, trace = unconfirmed_run
    assert mask_number_choices(trace, 1) == [("1 (kept, not confirmed by verification)", 1), ("2", 2)]


def test_the_coco_results_and_the_coco_export_say_which_masks_were_confirmed(unconfirmed_run, tmp_path):
    _, trace = unconfirmed_run
    write_outputs(trace, tmp_path / "out")
    results = json.loads((tmp_path / "out" / "final_masks.json").read_text())
    assert [r["verification"] for r in results] == ["not_confirmed", "confirmed"]
    items = agent_items(trace, "child")
    document = coco_document(items, trace.image.width, trace.image.height)
    assert [a["attributes"]["verification"] for a in document["annotations"]] == ["not_confirmed", "confirmed"]
    bundle = load_bundle(bundle_bytes(trace, EditState.from_trace(trace)))  # the attribute survives a bundle
    assert [i.check for i in bundle.state.original] == [NOT_CONFIRMED, CONFIRMED]


def _as_written_before_issue_30(path):
    """Rewrite a saved trace.json's unconfirmed verdicts as every writer before issue 30 stored them: ``accept``."""
    document = json.loads(path.read_text())
    for r in document["rounds"]:
        for v in (r["result"] or {}).get("verdicts", []):
            if v["verdict"] == "unconfirmed":
                v["verdict"] = "accept"
    path.write_text(json.dumps(document))
    return document


def test_an_old_trace_that_stored_accept_for_a_kept_unchecked_mask_opens_as_not_confirmed(unconfirmed_run, tmp_path):
    _, trace = unconfirmed_run
    folder = tmp_path / "old"
    old = _as_written_before_issue_30(save_trace(trace, folder))
    assert old["rounds"][1]["result"]["verdicts"][0]["verdict"] == "accept"
    opened = load_trace(folder)
    assert [(v.verdict, v.source) for v in opened.rounds[1].result.verdicts] == [
        ("unconfirmed", "fallback"), ("accept", "model")]
    assert final_mask_checks(opened) == [NOT_CONFIRMED, CONFIRMED]
    again = json.loads(save_trace(opened, tmp_path / "again").read_text())
    assert again["rounds"][1]["result"]["verdicts"][0]["verdict"] == "unconfirmed"


@pytest.mark.parametrize(("verdict_word", "source"), [("maybe", "model"), ("accept", "oracle"), ("unconfirmed", "model")])
def test_a_trace_with_a_verdict_that_fits_no_source_is_refused(unconfirmed_run, tmp_path, verdict_word, source):
    _, trace = unconfirmed_run
    path = save_trace(trace, tmp_path / "bad")
    document = json.loads(path.read_text())
    document["rounds"][1]["result"]["verdicts"][1].update(verdict=verdict_word, source=source)
    path.write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="verdict"):
        load_trace(path.parent)
