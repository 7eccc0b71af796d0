"""What the main model is told after examine_each_mask kept masks without a clear Accept (issue 20): which masks,
by their new numbers, and why; the trace's tool result says the same."""

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
    assert [(v.verdict, v.source) for v in result.verdicts] == [("accept", "fallback"), ("accept", "model")]
    assert examine_reply(agent, trace) == (
        agent.prompts.format("examine_result_unchecked", kept=2, total=2) + "\n"
        + agent.prompts.format("examine_unclear", numbers="1")
    )
    assert result.summary == "kept 2 of 2 mask(s); kept unchecked (new numbers): 1 (no clear verdict)"
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
        (1, "reject", "model"), (2, "accept", "error"), (3, "accept", "fallback")]
    assert examine_reply(agent, trace) == "\n".join([
        agent.prompts.format("examine_result_unchecked", kept=2, total=3),
        agent.prompts.format("examine_unchecked", numbers="1"),
        agent.prompts.format("examine_unclear", numbers="2"),
    ])
    assert result.summary == (
        "kept 2 of 3 mask(s); kept unchecked (new numbers): 1 (check failed); 2 (no clear verdict)")


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
