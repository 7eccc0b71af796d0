"""Verification at scale (issue 23 item 3): ``examine_each_mask(masks=[...])`` verifies only the masks named
(numbers and ranges, as ``final_answer_masks``), keeps the others unchecked and says which; with no parameter it
verifies every mask as before."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, rect_mask, tool, verdict
from test_many_masks import grid_boxes

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.tool_specs import TOOL_SPECS
from sam3_agent.agent.tools import number_ranges
from sam3_agent.errors import BackendError
from sam3_agent.events import MaskVerdictReady
from sam3_agent.messages import Generation
from sam3_agent.vlm.scripted import ScriptedVLM

H = W = 512
GRID = grid_boxes(10)  # ten disjoint rectangles, scores falling: mask k is the k-th box
CANDIDATE = re.compile(r"Candidate: mask (\d+)\.")


def candidates(requests) -> list[int]:
    """The mask number each verification request asked about, in call order."""
    return [int(CANDIDATE.search(messages[-1].text).group(1)) for messages in requests]


def answers_by_mask(rejected=(), failing=()):
    """A verifier answering Reject for the masks ``rejected``, failing (backend fault) on ``failing``, else Accept."""

    def respond(messages):
        number = int(CANDIDATE.search(messages[-1].text).group(1))
        if number in failing:
            raise BackendError("the VLM server answered HTTP 500")
        return verdict("Reject" if number in rejected else "Accept")

    return respond


class BatchAnswers:
    """A batch-capable verifier (``generate_batch``) answering as ``answers_by_mask``; logs the candidates of each
    call: a batch as its list, a one-by-one call as a one-element list."""

    name = "batch-answers"

    def __init__(self, rejected=()) -> None:
        self.respond = answers_by_mask(rejected)
        self.calls: list[list[int]] = []

    def stream(self, messages, *, max_new_tokens=None, stop=None):
        self.calls.append(candidates([messages]))
        yield Generation(self.respond(messages), "stop")

    def generate_batch(self, conversations, *, max_new_tokens=None, stop=None):
        self.calls.append(candidates(conversations))
        return [Generation(self.respond(c), "stop") for c in conversations]


def examine_run(examine: dict, verifier, select=("1-10",), **config):
    """segment 'bird' (the 10 grid masks) -> examine_each_mask(**examine) -> select ``select``; returns the run."""
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="bird"), tool("examine_each_mask", **examine),
                       tool("select_masks_and_return", final_answer_masks=list(select))])
    agent = Agent(vlm, KnownSegmenter({"bird": GRID}), AgentConfig(**config), verifier=verifier)
    agent_run = agent.start(photo("astronaut.jpg"), "the birds")
    events = list(agent_run)
    return agent, agent_run.trace, events


def grid_masks(numbers) -> np.ndarray:
    return np.stack([rect_mask(H, W, *GRID[n - 1][0]) for n in numbers])


# ---------------------------------------------------------------- only the named masks are verified


def test_the_verifier_is_called_for_exactly_the_named_masks_in_mask_order():
    verifier = ScriptedVLM(answers_by_mask())
    _, trace, events = examine_run({"masks": [9, "5-7", 2]}, verifier)
    assert candidates(verifier.requests) == [2, 5, 6, 7, 9]
    assert [v.mask_number for v in trace.rounds[1].result.verdicts] == [2, 5, 6, 7, 9]
    verdict_events = [(e.verdict.mask_number, e.total) for e in events if isinstance(e, MaskVerdictReady)]
    assert verdict_events == [(2, 10), (5, 10), (6, 10), (7, 10), (9, 10)]


def test_survivors_are_the_unexamined_and_the_accepted_masks_renumbered_in_order():
    _, trace, _ = examine_run({"masks": [2, "5-7", 9]}, ScriptedVLM(answers_by_mask(rejected={5, 7})), ["1-8"])
    assert trace.status == "done" and trace.rounds[2].error is None
    assert np.array_equal(trace.rounds[1].result.masks.masks, grid_masks([1, 2, 3, 4, 6, 8, 9, 10]))
    assert np.array_equal(trace.final_masks.masks, grid_masks([1, 2, 3, 4, 6, 8, 9, 10]))


def test_the_reply_and_the_tool_result_name_the_masks_not_examined_by_their_new_numbers():
    agent, trace, _ = examine_run({"masks": [2, "5-7", 9]}, ScriptedVLM(answers_by_mask(rejected={5, 7})), ["1-8"])
    examine = trace.rounds[1]
    reply = trace.messages[examine.reply_index]
    # kept (old numbers) 1 2 3 4 6 8 9 10 -> new 1..8; not examined: old 1 3 4 8 10 = new 1 3 4 6 8
    assert reply.text == agent.prompts.format("examine_result_named", examined=5, kept=8, total=10,
                                              not_examined="1, 3-4, 6, 8")
    assert "not examined and were kept as they were (numbers in the attached image): 1, 3-4, 6, 8." in reply.text
    assert len(reply.images) == 1
    assert examine.result.summary == ("kept 8 of 10 mask(s); examined only the 5 named (2, 5-7, 9); not examined, "
                                      "kept as they were (new numbers): 1, 3-4, 6, 8")


def test_a_failed_check_among_the_named_masks_is_named_too():
    agent, trace, _ = examine_run({"masks": [3, 4]}, ScriptedVLM(answers_by_mask(rejected={3}, failing={4})))
    examine = trace.rounds[1]
    assert [(v.mask_number, v.verdict, v.source) for v in examine.result.verdicts] == [
        (3, "reject", "model"), (4, "unconfirmed", "error")]
    reply = trace.messages[examine.reply_index]
    assert reply.text == "\n".join([
        agent.prompts.format("examine_result_named", examined=2, kept=9, total=10, not_examined="1-2, 4-9"),
        agent.prompts.format("examine_unchecked", numbers="3"),
    ])
    assert examine.result.summary == ("kept 9 of 10 mask(s); examined only the 2 named (3-4); not examined, kept as "
                                      "they were (new numbers): 1-2, 4-9; kept, not confirmed (new numbers): 3 (check failed)")


def test_naming_every_mask_is_the_per_mask_path():
    agent, trace, _ = examine_run({"masks": ["1-10"]}, ScriptedVLM(answers_by_mask(rejected={1})), ["1-9"])
    examine = trace.rounds[1]
    assert trace.messages[examine.reply_index].text == agent.prompts.format("examine_result", kept=9, total=10)
    assert examine.result.summary == "kept 9 of 10 mask(s)"


def test_no_parameter_still_verifies_every_mask():
    verifier = ScriptedVLM(answers_by_mask(rejected={10}))
    agent, trace, _ = examine_run({}, verifier, ["1-9"])
    assert candidates(verifier.requests) == list(range(1, 11))
    assert trace.messages[trace.rounds[1].reply_index].text == agent.prompts.format("examine_result", kept=9, total=10)


# ---------------------------------------------------------------- the batched path


def test_the_batched_path_batches_the_named_masks_alone():
    verifier = BatchAnswers(rejected={8})
    _, trace, _ = examine_run({"masks": [2, 3, 5, "8-9"]}, verifier, ["1-9"], verify_batch_size=3)
    assert verifier.calls == [[2, 3, 5], [8, 9]]
    assert np.array_equal(trace.final_masks.masks, grid_masks([1, 2, 3, 4, 5, 6, 7, 9, 10]))


# ---------------------------------------------------------------- the model's mistakes


@pytest.mark.parametrize(
    ("masks", "key", "fields"),
    [
        ([0], "mask_number_out_of_range", {"value": 0, "count": 10}),
        (["4-11"], "mask_number_out_of_range", {"value": 11, "count": 10}),
        ([2, "1-3"], "mask_number_repeated", {"value": 2}),
        (["all"], "mask_number_not_integer", {"value": '"all"', "parameter": "masks"}),
        ("1-3", "mask_numbers_not_list", {"value": '"1-3"', "parameter": "masks", "tool": "examine_each_mask"}),
        ([], "empty_examine_list", {}),
    ],
)
def test_bad_mask_numbers_are_told_and_nothing_is_verified(masks, key, fields):
    verifier = ScriptedVLM(answers_by_mask())
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="bird"), tool("examine_each_mask", masks=masks),
                       tool("report_no_mask")])
    agent = Agent(vlm, KnownSegmenter({"bird": GRID}), AgentConfig(), verifier=verifier)
    trace = agent.run(photo("astronaut.jpg"), "the birds")
    examine = trace.rounds[1]
    assert (examine.error, examine.error_detail) == (key, agent.prompts.format(key, **fields))
    assert verifier.requests == []
    assert trace.status == "no_mask" and len(examine.result.masks) == 10  # the masks are as they were


def test_the_feedback_names_the_examine_parameter():
    from sam3_agent.agent.prompts import load_prompts

    prompts = load_prompts()
    assert prompts.format("mask_numbers_not_list", value='"1-3"', parameter="masks", tool="examine_each_mask") == (
        'masks must be a list of mask numbers such as [1, 3], not "1-3". Call examine_each_mask again with a list.')
    assert prompts.format("mask_number_not_integer", value='"all"', parameter="masks").startswith(
        '"all" is not a mask number: masks may hold only whole numbers')


def test_a_misnamed_parameter_is_told_both_forms_of_the_call():
    assert TOOL_SPECS["examine_each_mask"].schema_text() == (
        '{"name": "examine_each_mask", "parameters": {}} or '
        '{"name": "examine_each_mask", "parameters": {"masks": [1, 2], "in_groups": true}}')
    assert TOOL_SPECS["select_masks_and_return"].schema_text() == (
        '{"name": "select_masks_and_return", "parameters": {"final_answer_masks": [1, 2]}}')


@pytest.mark.parametrize(
    ("numbers", "text"),
    [([1, 2, 3, 5, 7, 8], "1-3, 5, 7-8"), ([4], "4"), ([1, 3, 5], "1, 3, 5"), (list(range(1, 201)), "1-200")],
)
def test_number_ranges_write_runs_as_ranges(numbers, text):
    assert number_ranges(numbers) == text


def test_a_saved_trace_keeps_the_named_call_its_verdicts_and_its_tool_result():
    from sam3_agent.trace.io import load_trace_zip, trace_to_zip_bytes

    _, trace, _ = examine_run({"masks": [2, "5-7", 9]}, ScriptedVLM(answers_by_mask(rejected={5, 7})), ["1-8"])
    examine = load_trace_zip(trace_to_zip_bytes(trace)).rounds[1]
    assert examine.call.parameters == {"masks": [2, "5-7", 9]}
    assert [(v.mask_number, v.verdict) for v in examine.result.verdicts] == [
        (2, "accept"), (5, "reject"), (6, "accept"), (7, "reject"), (9, "accept")]
    assert examine.result.summary == trace.rounds[1].result.summary
