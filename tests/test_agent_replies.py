"""The agent with model replies as real models write them (issue 10): verdicts that negate or hedge, replies cut
inside their reasoning, a verification call that fails, masks that no longer exist, a phrase too long for SAM 3."""

from __future__ import annotations

import numpy as np
from conftest import KnownSegmenter, rect_mask, tool, verdict

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.errors import BackendError
from sam3_agent.messages import Generation
from sam3_agent.vlm.scripted import ScriptedVLM

H = W = 512
CHILD_1 = rect_mask(H, W, 20, 20, 120, 220)  # "child" detections of the conftest segmenter, sorted by score
CHILD_2 = rect_mask(H, W, 300, 300, 400, 400)


def make_agent(segmenter, main, verify=(), **config):
    vlm = ScriptedVLM(main if callable(main) else list(main), name="main")
    verifier = ScriptedVLM(verify if callable(verify) else list(verify), name="verifier")
    return Agent(vlm, segmenter, AgentConfig(**config), verifier=verifier), vlm, verifier


def run_all(agent, image, query="the child on the right"):
    agent_run = agent.start(image, query)
    list(agent_run)
    return agent_run.trace


CHILD_RUN = [tool("segment_phrase", text_prompt="child"), tool("examine_each_mask"),
             tool("select_masks_and_return", final_answer_masks=[1])]


# ------------------------------------------------------------------ verdicts


def test_a_negated_accept_rejects_the_mask_at_once_without_a_retry(segmenter, astronaut):
    # issue 30: "Not Accept" was read as unclear, asked again and, given twice, kept by the fallback as accepted
    agent, _, verifier = make_agent(
        segmenter, CHILD_RUN,
        ["<think>This is the left child, not the one asked for.</think>\n<verdict>Not Accept</verdict>",
         verdict("Accept")],
    )
    trace = run_all(agent, astronaut)
    assert trace.status == "done"
    assert np.array_equal(trace.final_masks.masks, CHILD_2[None])
    verdicts = trace.rounds[1].result.verdicts
    assert [(v.verdict, v.source, len(v.outputs)) for v in verdicts] == [("reject", "model", 1), ("accept", "model", 1)]
    assert len(verifier.requests) == 2  # one request per mask: no retry


def test_hedged_verdict_twice_falls_back_to_keeping_the_mask_and_says_so(segmenter, astronaut):
    agent, _, _ = make_agent(
        segmenter, CHILD_RUN,
        ["<verdict>Probably accept</verdict>", "<verdict>Accept?</verdict>", verdict("Reject")],
    )
    trace = run_all(agent, astronaut)
    verdicts = trace.rounds[1].result.verdicts
    assert [(v.verdict, v.source) for v in verdicts] == [("unconfirmed", "fallback"), ("reject", "model")]
    assert np.array_equal(trace.final_masks.masks, CHILD_1[None])


def test_verdict_drafted_inside_reasoning_cut_by_the_token_limit_is_retried_with_the_budget(segmenter, astronaut):
    cut = Generation("The mask lies on the child, so <verdict>Accept</verdict> unless", "length", 900, 40,
                     starts_in_reasoning=True)
    agent, _, verifier = make_agent(segmenter, CHILD_RUN, [cut, verdict("Reject"), verdict("Accept")])
    trace = run_all(agent, astronaut)
    verdicts = trace.rounds[1].result.verdicts
    assert [(v.verdict, v.source) for v in verdicts] == [("reject", "model"), ("accept", "model")]
    assert verifier.requests[1][-1].text == agent.prompts.format("verify_truncated", limit="40 tokens")
    assert np.array_equal(trace.final_masks.masks, CHILD_2[None])


# ------------------------------------------------------------------ main replies cut inside the reasoning


def test_call_drafted_inside_reasoning_cut_by_the_token_limit_runs_nothing(segmenter, astronaut):
    draft = Generation('Maybe <tool>{"name": "report_no_mask", "parameters": {}}</tool> would do, but', "length",
                       1200, 64, starts_in_reasoning=True)
    agent, vlm, _ = make_agent(segmenter, [draft, tool("segment_phrase", text_prompt="child"),
                                           tool("select_masks_and_return", final_answer_masks=[2])])
    trace = run_all(agent, astronaut)
    assert trace.status == "done"
    assert np.array_equal(trace.final_masks.masks, CHILD_2[None])
    first = trace.rounds[0]
    assert (first.call, first.error, first.finish_reason) == (None, "truncated", "length")
    assert first.error_detail == agent.prompts.format("truncated", limit="64 tokens")
    assert vlm.requests[1][-1].text == first.error_detail


def test_reply_ended_inside_reasoning_opened_by_the_template_is_unclosed(segmenter, astronaut):
    ended = Generation('I pick <tool>{"name": "report_no_mask"}</tool>', "stop", starts_in_reasoning=True)
    agent, _, _ = make_agent(segmenter, [ended, tool("report_no_mask")])
    trace = run_all(agent, astronaut)
    assert [(r.call is None, r.error) for r in trace.rounds] == [(True, "unclosed_think"), (False, None)]


def test_a_reply_ended_inside_the_template_opened_reasoning_is_all_reasoning_after_a_save(segmenter, astronaut):
    ended = Generation('I pick <tool>{"name": "report_no_mask"}</tool>', "stop", starts_in_reasoning=True)
    agent, _, _ = make_agent(segmenter, [ended, tool("report_no_mask")])
    from sam3_agent.trace.io import load_trace_zip, trace_to_zip_bytes

    trace = run_all(agent, astronaut)
    assert trace.rounds[0].reasoning == 'I pick <tool>{"name": "report_no_mask"}</tool>'  # the draft call included
    assert load_trace_zip(trace_to_zip_bytes(trace)).rounds[0].reasoning == trace.rounds[0].reasoning


# ------------------------------------------------------------------ a verification that fails


def failing_on_mask(number, answer="Accept"):
    """A verifier that fails (backend fault) on mask ``number`` and answers ``answer`` for the others."""

    def respond(messages):
        if f"mask {number}." in messages[-1].text:
            raise BackendError("the VLM server answered HTTP 500: image too small")
        return verdict(answer)

    return respond


def test_failed_verification_of_one_mask_is_an_error_verdict_and_the_run_goes_on(segmenter, astronaut):
    agent, vlm, _ = make_agent(
        segmenter,
        [tool("segment_phrase", text_prompt="person"), tool("examine_each_mask"),
         tool("select_masks_and_return", final_answer_masks=[1])],
        failing_on_mask(2, "Reject"),
    )
    trace = run_all(agent, astronaut, "the astronaut")
    assert trace.status == "done"
    verdicts = trace.rounds[1].result.verdicts
    assert [(v.mask_number, v.verdict, v.source) for v in verdicts] == [
        (1, "reject", "model"), (2, "unconfirmed", "error"), (3, "reject", "model")]
    assert verdicts[1].error == "the VLM server answered HTTP 500: image too small" and verdicts[1].outputs == ()
    reply = trace.messages[trace.rounds[1].reply_index]
    assert reply.text.endswith(agent.prompts.format("examine_unchecked", numbers="1"))
    # person masks sorted by score: (200,50,300,250) .9, (10,10,110,210) .7, (350,300,450,500) .6: only mask 2 is left
    assert np.array_equal(trace.final_masks.masks, rect_mask(H, W, 10, 10, 110, 210)[None])


def test_error_verdict_survives_a_trace_save_and_load(segmenter, astronaut):
    from sam3_agent.trace.io import load_trace_zip, trace_to_zip_bytes

    agent, _, _ = make_agent(segmenter, [tool("segment_phrase", text_prompt="child"), tool("examine_each_mask"),
                                         tool("report_no_mask")], failing_on_mask(1))
    trace = run_all(agent, astronaut)
    loaded = load_trace_zip(trace_to_zip_bytes(trace))
    assert loaded == trace
    [error, checked] = loaded.rounds[1].result.verdicts
    assert (error.source, error.error, checked.source, checked.error) == (
        "error", "the VLM server answered HTTP 500: image too small", "model", None)


class BatchFailingVerifier(ScriptedVLM):
    """A batching verifier whose batches fail; alone, each mask but ``failing`` is answered."""

    def __init__(self, failing: int):
        super().__init__(failing_on_mask(failing), name="batch-verifier")
        self.batches = 0

    def generate_batch(self, conversations, *, max_new_tokens=None, stop=None):
        self.batches += 1
        raise BackendError("CUDA out of memory in a batch of verifications")


def test_failed_batch_is_verified_again_one_by_one_to_find_the_failing_mask(segmenter, astronaut):
    verifier = BatchFailingVerifier(failing=3)
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="person"), tool("examine_each_mask"), tool("report_no_mask")])
    agent = Agent(vlm, segmenter, AgentConfig(verify_batch_size=8), verifier=verifier)
    trace = run_all(agent, astronaut, "the astronaut")
    verdicts = trace.rounds[1].result.verdicts
    assert verifier.batches == 1 and len(verifier.requests) == 3
    assert [(v.verdict, v.source) for v in verdicts] == [("accept", "model"), ("accept", "model"), ("unconfirmed", "error")]
    assert trace.status == "no_mask"


# ------------------------------------------------------------------ masks that no longer exist


def test_after_every_mask_was_rejected_no_request_shows_their_overlay(segmenter, astronaut):
    agent, vlm, _ = make_agent(
        segmenter,
        [tool("segment_phrase", text_prompt="child"), tool("examine_each_mask"), tool("report_no_mask")],
        [verdict("Reject"), verdict("Reject")],
    )
    trace = run_all(agent, astronaut)
    after = vlm.requests[2]
    assert [p.name for m in after for p in m.images] == ["raw"]
    assert trace.rounds[2].context.image_count == 1
    assert trace.rounds[2].context.images_as_text == (3,)


# ------------------------------------------------------------------ a phrase too long for SAM 3


class CuttingSegmenter(KnownSegmenter):
    """Reads only the first 3 words of a phrase, as a text encoder with a short limit would."""

    def phrase_cut(self, phrase):
        words = phrase.split()
        return (" ".join(words[:3]), 5) if len(words) > 3 else None


def test_reply_says_what_sam3_read_of_a_phrase_too_long_for_it(astronaut):
    long_phrase = "child wearing a blue vest on the left"
    segmenter = CuttingSegmenter({long_phrase: [((20, 20, 120, 220), 0.8)], "child": []})
    agent, _, _ = make_agent(segmenter, [tool("segment_phrase", text_prompt=long_phrase),
                                         tool("segment_phrase", text_prompt="child"), tool("report_no_mask")])
    trace = run_all(agent, astronaut)
    cut_reply = trace.messages[trace.rounds[0].reply_index].text
    note = agent.prompts.format("phrase_cut", limit=5, phrase=long_phrase, read="child wearing a")
    assert cut_reply == note + "\n\n" + agent.prompts.format("segment_result", count=1, phrase=long_phrase)
    whole_reply = trace.messages[trace.rounds[1].reply_index].text
    assert not whole_reply.startswith("Note:")


# ------------------------------------------------------------------ how front ends show an error verdict


def error_verdict_event():
    from PIL import Image

    from sam3_agent.events import MaskVerdictReady
    from sam3_agent.messages import ImagePart
    from sam3_agent.types import MaskVerdict

    view = ImagePart(Image.new("RGB", (4, 4)), "round2_mask1_view")
    error = MaskVerdict(1, "unconfirmed", "error", (), view, view, None, 0.5, error="server answered HTTP 500")
    return MaskVerdictReady(2, error, 3)


def test_cli_prints_why_a_mask_was_kept_unchecked():
    import io

    from sam3_agent.cli.run import EventPrinter

    out = io.StringIO()
    EventPrinter(out)(error_verdict_event())
    assert out.getvalue() == "    mask 1/3: not confirmed (check failed: server answered HTTP 500; kept)\n"


def test_app_card_of_an_error_verdict_is_marked_kept_and_shows_the_failure():
    from sam3_agent.ui.view import verdict_card

    card = verdict_card(error_verdict_event().verdict, 3)
    assert (card.verdict, card.fallback, card.failed, card.reasoning) == (
        "unconfirmed", True, True, "server answered HTTP 500")
