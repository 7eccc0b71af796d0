"""What the main model is told (issue 20): after examine_each_mask kept masks without a clear Accept, which masks
(by their new numbers) and why, the trace's tool result saying the same; a note when a call in another form ran; why
a call written only inside the reasoning did not run."""

from __future__ import annotations

from conftest import tool, verdict
from test_agent_replies import failing_on_mask, make_agent, run_all

from sam3_agent.errors import BackendError

CHILD_RUN = [tool("segment_phrase", text_prompt="child"), tool("examine_each_mask"), tool("report_no_mask")]
PERSON_RUN = [tool("segment_phrase", text_prompt="person"), tool("examine_each_mask"), tool("report_no_mask")]


def examine_reply(agent, trace):
    return trace.messages[trace.rounds[1].reply_index].text


def test_unclear_verdict_after_the_retry_is_named_as_kept_unchecked(segmenter, astronaut):
    # mask 1 "not accept, not reject" twice (unclear), mask 2 accepted
    unclear = "<think>hmm</think><verdict>Do not accept, not reject</verdict>"
    agent, _, _ = make_agent(segmenter, CHILD_RUN, [unclear, unclear, verdict("Accept")])
    trace = run_all(agent, astronaut)
    result = trace.rounds[1].result
    assert [(v.verdict, v.source) for v in result.verdicts] == [("unconfirmed", "fallback"), ("accept", "model")]
    assert examine_reply(agent, trace) == (
        agent.prompts.format("examine_result_unchecked", kept=2, total=2) + "\n"
        + agent.prompts.format("examine_unclear", numbers="1")
    )
    assert result.summary == "kept 2 of 2 mask(s); kept, not confirmed (new numbers): 1 (no clear verdict)"
    assert "any mask that did not match the query was removed" not in examine_reply(agent, trace)


def test_failed_and_unclear_checks_are_both_named_by_their_new_numbers(segmenter, astronaut):
    # person masks 1..3: mask 1 rejected, mask 2's check fails, mask 3 unclear twice -> kept as new 1 and 2
    answers = {1: [verdict("Reject")], 3: [verdict("Probably accept"), verdict("Accept?")]}

    def respond(messages):
        number = next(n for n in (1, 2, 3) if f"mask {n}." in messages[1].parts[-1].text)
        if number == 2:
            raise BackendError("the VLM server answered HTTP 500")
        return answers[number].pop(0)

    agent, _, _ = make_agent(segmenter, PERSON_RUN, respond)
    trace = run_all(agent, astronaut, "the astronaut")
    result = trace.rounds[1].result
    assert [(v.mask_number, v.verdict, v.source) for v in result.verdicts] == [
        (1, "reject", "model"), (2, "unconfirmed", "error"), (3, "unconfirmed", "fallback")]
    assert examine_reply(agent, trace) == "\n".join([
        agent.prompts.format("examine_result_unchecked", kept=2, total=3),
        agent.prompts.format("examine_unchecked", numbers="1"),
        agent.prompts.format("examine_unclear", numbers="2"),
    ])
    assert result.summary == (
        "kept 2 of 3 mask(s); kept, not confirmed (new numbers): 1 (check failed); 2 (no clear verdict)")


def test_failed_check_alone_gets_the_unchecked_reply(segmenter, astronaut):
    agent, _, _ = make_agent(segmenter, PERSON_RUN, failing_on_mask(3, "Accept"))
    trace = run_all(agent, astronaut, "the astronaut")
    assert examine_reply(agent, trace) == (
        agent.prompts.format("examine_result_unchecked", kept=3, total=3) + "\n"
        + agent.prompts.format("examine_unchecked", numbers="3")
    )


def test_reply_says_masks_were_removed_only_when_every_kept_mask_was_accepted(segmenter, astronaut):
    agent, _, _ = make_agent(segmenter, PERSON_RUN, [verdict("Accept"), verdict("Reject"), verdict("Accept")])
    trace = run_all(agent, astronaut, "the astronaut")
    assert examine_reply(agent, trace) == agent.prompts.format("examine_result", kept=2, total=3)
    assert trace.rounds[1].result.summary == "kept 2 of 3 mask(s)"


# ------------------------------------------------------------------ calls in another form (issue 20)


def test_a_fenced_call_runs_and_its_reply_starts_with_the_note(segmenter, astronaut):
    from sam3_agent.messages import ToolCall

    fenced = '<think>the child</think>\n```json\n{"name": "segment_phrase", "parameters": {"text_prompt": "child"}}\n```'
    agent, vlm, _ = make_agent(segmenter, [fenced, tool("select_masks_and_return", final_answer_masks=[2])])
    trace = run_all(agent, astronaut)
    assert trace.status == "done"
    assert (trace.rounds[0].call, trace.rounds[0].error) == (
        ToolCall("segment_phrase", {"text_prompt": "child"}, "segment_phrase"), None)
    assert vlm.requests[1][-1].text == (
        agent.prompts.format("untagged_call") + "\n\n" + agent.prompts.format("segment_result", count=2, phrase="child"))


def test_a_call_only_inside_the_reasoning_runs_nothing_and_the_model_is_told_why(segmenter, astronaut):
    from sam3_agent.messages import Generation

    claimed = Generation('I call <tool>{"name": "report_no_mask", "parameters": {}}</tool></think>\nDone: no mask.',
                         "stop", starts_in_reasoning=True)
    agent, vlm, _ = make_agent(segmenter, [claimed, tool("report_no_mask")])
    trace = run_all(agent, astronaut)
    assert [(r.call is None, r.error) for r in trace.rounds] == [(True, "call_in_reasoning"), (False, None)]
    assert vlm.requests[1][-1].text == agent.prompts.format("call_in_reasoning")
    assert trace.status == "no_mask"
