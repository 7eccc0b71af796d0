"""Verification in groups (issue 23 item 3): ``examine_each_mask`` with ``"in_groups": true`` checks
``VERIFY_GROUP_SIZE`` masks per call on one view, reads one verdict per mask strictly, asks again about the masks
without exactly one clear verdict, keeps the per-mask path as it was, and stores the group's view as a recipe."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, rect_mask, tool
from test_many_masks import grid_boxes

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.agent.verdicts import parse_group_verdicts
from sam3_agent.agent.verify_groups import mask_groups, numbers_text
from sam3_agent.errors import BackendError
from sam3_agent.events import MaskVerdictReady
from sam3_agent.images import image_digest
from sam3_agent.imaging.verify_views import processor_size
from sam3_agent.limits import VERIFY_GROUP_SIZE
from sam3_agent.messages import Generation
from sam3_agent.trace.io import load_trace, load_trace_zip, save_trace, trace_to_zip_bytes
from sam3_agent.vlm.scripted import ScriptedVLM

H = W = 512
GRID = grid_boxes(20)  # twenty disjoint rectangles, scores falling: mask k is the k-th box
ASKED = re.compile(r"Candidates: masks ([\d, and]+)\.")


def asked(messages) -> list[int]:
    """The mask numbers a group request (or its retry) asks about, from its last message."""
    text = messages[-1].text
    found = ASKED.search(text) or re.search(r"verdict for masks ([\d, and]+)\.", text)
    return [int(n) for n in re.findall(r"\d+", found.group(1))]


def lines(verdicts: dict[int, str]) -> str:
    return "<think>looking at each mask</think>\n" + "\n".join(
        f"Mask {n}: <verdict>{word}</verdict>" for n, word in verdicts.items())


def answers(rejected=(), skip=(), twice=(), failing=(), then=None):
    """A group verifier: Accept for each mask asked about, Reject for ``rejected``; leaves out the masks ``skip`` and
    writes ``twice`` twice in a first answer; a retry is answered by ``then`` (default: as a first answer without the
    gaps); raises a backend fault for a group holding a mask of ``failing``."""

    def respond(messages):
        numbers = asked(messages)
        if set(numbers) & set(failing):
            raise BackendError("the VLM server answered HTTP 500")
        retry = len(messages) > 2
        if retry and then is not None:
            return then(numbers)
        chosen = {n: "Reject" if n in rejected else "Accept" for n in numbers if retry or n not in skip}
        text = lines(chosen)
        for n in twice if not retry else ():
            text += f"\nMask {n}: <verdict>Accept</verdict>"
        return text

    return respond


def examine_run(examine: dict, verifier, select=("1-20",), **config):
    """segment 'bird' (the 20 grid masks) -> examine_each_mask(**examine) -> select ``select``."""
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="bird"), tool("examine_each_mask", **examine),
                       tool("select_masks_and_return", final_answer_masks=list(select))])
    agent = Agent(vlm, KnownSegmenter({"bird": GRID}), AgentConfig(**config), verifier=verifier)
    agent_run = agent.start(photo("astronaut.jpg"), "the birds")
    events = list(agent_run)
    return agent, agent_run.trace, events


def grid_masks(numbers) -> np.ndarray:
    return np.stack([rect_mask(H, W, *GRID[n - 1][0]) for n in numbers])


# ---------------------------------------------------------------- groups and verdicts


def test_masks_are_sent_eight_to_a_call_in_order_each_group_on_one_view():
    verifier = ScriptedVLM(answers())
    _, trace, events = examine_run({"in_groups": True}, verifier)
    assert VERIFY_GROUP_SIZE == 8
    assert [asked(r) for r in verifier.requests] == [list(range(1, 9)), list(range(9, 17)), [17, 18, 19, 20]]
    for request, first in zip(verifier.requests, (1, 9, 17)):
        [raw, view] = request[1].images  # the raw photo, then the group's one view
        assert raw.name == "raw" and view.name == f"round2_group{first}"
        assert view.view.kind == "group" and view.image.size == processor_size(W, H) == (512, 512)
    assert [(e.verdict.mask_number, e.total) for e in events if isinstance(e, MaskVerdictReady)] == [
        (n, 20) for n in range(1, 21)]


def test_each_mask_gets_the_verdict_of_its_own_line_and_the_group_it_was_checked_in():
    _, trace, _ = examine_run({"in_groups": True}, ScriptedVLM(answers(rejected={3, 9, 20})), ["1-17"])
    verdicts = trace.rounds[1].result.verdicts
    assert [(v.mask_number, v.verdict, v.source) for v in verdicts] == [
        (n, "reject" if n in {3, 9, 20} else "accept", "model") for n in range(1, 21)]
    assert [v.group for v in verdicts] == [tuple(range(1, 9))] * 8 + [tuple(range(9, 17))] * 8 + [(17, 18, 19, 20)] * 4
    assert all(v.zoom_view is None for v in verdicts)
    assert verdicts[0].mask_view is verdicts[7].mask_view  # one view per group, shared by its verdicts
    assert verdicts[16].outputs == (lines({17: "Accept", 18: "Accept", 19: "Accept", 20: "Reject"}),)


def test_survivors_are_the_accepted_masks_renumbered_in_order():
    _, trace, _ = examine_run({"in_groups": True}, ScriptedVLM(answers(rejected={3, 9, 20})), ["1-17"])
    kept = [n for n in range(1, 21) if n not in {3, 9, 20}]
    assert trace.status == "done"
    assert np.array_equal(trace.rounds[1].result.masks.masks, grid_masks(kept))
    assert np.array_equal(trace.final_masks.masks, grid_masks(kept))


def test_the_reply_says_what_was_kept_and_that_the_check_was_in_groups():
    agent, trace, _ = examine_run({"in_groups": True}, ScriptedVLM(answers(rejected={3, 9, 20})), ["1-17"])
    examine = trace.rounds[1]
    reply = trace.messages[examine.reply_index]
    assert reply.text == (agent.prompts.format("examine_result", kept=17, total=20) + "\n" +
                          agent.prompts.format("examine_in_groups", size=8, groups=3))
    assert reply.text.endswith("The masks were checked in groups of up to 8, each group in one view of the whole "
                               "image (3 checks): a quicker, less close look than one check per mask.")
    assert [p.name for p in reply.images] == ["round2_overlay"]
    assert examine.result.summary == "kept 17 of 20 mask(s); checked in 3 group(s) of up to 8"


def test_named_masks_in_groups_are_grouped_alone_and_the_others_named_as_not_examined():
    verifier = ScriptedVLM(answers(rejected={6}))
    agent, trace, _ = examine_run({"masks": [9, "5-7", 2], "in_groups": True}, verifier, ["1-19"])
    assert [asked(r) for r in verifier.requests] == [[2, 5, 6, 7, 9]]
    examine = trace.rounds[1]
    assert [v.mask_number for v in examine.result.verdicts] == [2, 5, 6, 7, 9]
    # not examined (old numbers): 1, 3, 4, 8, 10-20; mask 6 removed, so new: 1, 3, 4, 7, 9-19
    assert trace.messages[examine.reply_index].text == "\n".join([
        agent.prompts.format("examine_result_named", examined=5, kept=19, total=20,
                             not_examined="1, 3-4, 7, 9-19"),
        agent.prompts.format("examine_in_groups", size=8, groups=1)])


# ---------------------------------------------------------------- missing, duplicate and unclear verdicts


def test_a_missing_or_duplicate_verdict_is_asked_again_for_those_masks_only():
    verifier = ScriptedVLM(answers(rejected={12}, skip={4}, twice={12}))
    _, trace, _ = examine_run({"in_groups": True}, verifier, ["1-19"])
    assert [asked(r) for r in verifier.requests] == [list(range(1, 9)), [4], list(range(9, 17)), [12], [17, 18, 19, 20]]
    retry = verifier.requests[1]
    assert [m.role for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[-1].text.startswith("Your answer had no single clear verdict for masks 4. ")
    verdicts = {v.mask_number: v for v in trace.rounds[1].result.verdicts}
    assert (verdicts[4].verdict, verdicts[4].source, len(verdicts[4].outputs)) == ("accept", "model", 2)
    assert (verdicts[12].verdict, verdicts[12].source) == ("reject", "model")  # the retry's answer counts
    assert (verdicts[5].source, len(verdicts[5].outputs)) == ("model", 2)  # the group's outputs, both tries


def test_a_mask_still_unclear_after_the_retry_is_kept_and_named_as_unclear():
    verifier = ScriptedVLM(answers(skip={4, 18}, then=lambda numbers: lines({n: "Accept or Reject" for n in numbers})))
    agent, trace, _ = examine_run({"in_groups": True}, verifier)
    examine = trace.rounds[1]
    fallbacks = [(v.mask_number, v.verdict) for v in examine.result.verdicts if v.source == "fallback"]
    assert fallbacks == [(4, "unconfirmed"), (18, "unconfirmed")]
    assert trace.messages[examine.reply_index].text == "\n".join([
        agent.prompts.format("examine_result_unchecked", kept=20, total=20),
        agent.prompts.format("examine_unclear", numbers="4, 18"),
        agent.prompts.format("examine_in_groups", size=8, groups=3)])


def test_a_group_answer_cut_off_in_its_reasoning_is_asked_again_with_the_token_budget():
    def respond(messages):
        if len(messages) > 2:
            return lines({n: "Accept" for n in asked(messages)})
        return Generation("<think>mask 1 is a bird, mask 2", "length", 3, 64)

    verifier = ScriptedVLM(respond)
    _, trace, _ = examine_run({"masks": ["1-3"], "in_groups": True}, verifier)
    assert verifier.requests[1][-1].text.startswith(
        "Your answer reached its length limit (64 tokens) before its reasoning was closed, so it gave no verdict "
        "for masks 1, 2 and 3.")
    assert [v.source for v in trace.rounds[1].result.verdicts] == ["model"] * 3


def test_a_failing_group_keeps_its_masks_unchecked_and_the_other_groups_are_still_checked():
    agent, trace, _ = examine_run({"in_groups": True}, ScriptedVLM(answers(rejected={1}, failing={10})), ["1-19"])
    verdicts = trace.rounds[1].result.verdicts
    assert [v.source for v in verdicts] == ["model"] * 8 + ["error"] * 8 + ["model"] * 4
    assert verdicts[8].error == "the VLM server answered HTTP 500" and verdicts[8].group == tuple(range(9, 17))
    assert trace.messages[trace.rounds[1].reply_index].text == "\n".join([
        agent.prompts.format("examine_result_unchecked", kept=19, total=20),
        agent.prompts.format("examine_unchecked", numbers="8, 9, 10, 11, 12, 13, 14, 15"),
        agent.prompts.format("examine_in_groups", size=8, groups=3)])


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>x</think>\nMask 3: <verdict>Accept</verdict>\n**Mask 4**: <verdict>Reject</verdict>", {3: "accept", 4: "reject"}),
    ("<think>x</think>\nMask 3: <verdict>Accept</verdict>", {3: "accept", 4: "missing_verdict"}),
    ("<think>x</think>\nMask 3: <verdict>Accept</verdict>\nMask 3: <verdict>Accept</verdict>\n"
     "Mask 4: <verdict>Reject</verdict>", {3: "duplicate_verdict", 4: "reject"}),
    ("<think>x</think>\nMask 3: <verdict>not accept: reject</verdict>\nMask 4: <verdict>Probably accept</verdict>",
     {3: "reject", 4: "unclear_verdict"}),
    ("<think>x</think>\nMask 3: <verdict>Accept</verdict> no wait: reject\nMask 9: <verdict>Reject</verdict>\n"
     "Mask 4: <verdict>Accept or Reject</verdict>", {3: "reject", 4: "ambiguous_verdict"}),
    ("Mask 3: <verdict>Accept</verdict> (<think> never closed", {3: "unclosed_think", 4: "unclosed_think"}),
    ("Masks 3-4: <verdict>Accept</verdict>", {3: "missing_verdict", 4: "missing_verdict"}),
])
def test_group_answers_are_read_strictly(text, expected):
    read = parse_group_verdicts(text, [3, 4])
    assert {n: verdict or reason for n, (verdict, reason) in read.items()} == expected


def test_groups_and_how_a_sentence_lists_them():
    assert mask_groups(list(range(1, 21)), 8) == [tuple(range(1, 9)), tuple(range(9, 17)), (17, 18, 19, 20)]
    assert mask_groups([2, 5, 9], 8) == [(2, 5, 9)]
    assert numbers_text([4]) == "4" and numbers_text([1, 2, 3]) == "1, 2 and 3"


# ---------------------------------------------------------------- batches, the tool surface, the trace


class BatchGroups:
    """A batch-capable group verifier; logs the groups of each call (a batch as its list)."""

    name = "batch-groups"

    def __init__(self) -> None:
        self.respond = answers()
        self.calls: list[list[list[int]]] = []

    def stream(self, messages, *, max_new_tokens=None, stop=None):
        self.calls.append([asked(messages)])
        yield Generation(self.respond(messages), "stop")

    def generate_batch(self, conversations, *, max_new_tokens=None, stop=None):
        self.calls.append([asked(c) for c in conversations])
        return [Generation(self.respond(c), "stop") for c in conversations]


def test_groups_are_batched_on_a_batching_backend():
    verifier = BatchGroups()
    examine_run({"in_groups": True}, verifier, verify_batch_size=2)
    assert verifier.calls == [[list(range(1, 9)), list(range(9, 17))], [[17, 18, 19, 20]]]


def test_in_groups_false_is_the_per_mask_path_and_a_non_boolean_is_told():
    verifier = ScriptedVLM(lambda messages: "<think>ok</think><verdict>Accept</verdict>")
    _, trace, _ = examine_run({"in_groups": False}, verifier)
    assert len(verifier.requests) == 20 and all(v.group == () for v in trace.rounds[1].result.verdicts)
    agent, trace, _ = examine_run({"in_groups": "yes"}, ScriptedVLM(answers()))
    examine = trace.rounds[1]
    assert examine.error == "wrong_type"
    assert examine.error_detail == agent.prompts.format(
        "wrong_type", tool="examine_each_mask", parameter="in_groups", expected="true or false",
        schema='{"name": "examine_each_mask", "parameters": {}} or '
               '{"name": "examine_each_mask", "parameters": {"masks": [1, 2], "in_groups": true}}')


def test_the_trace_stores_the_group_view_as_a_recipe_and_draws_it_again_on_load(tmp_path):
    _, trace, _ = examine_run({"in_groups": True}, ScriptedVLM(answers(rejected={3})), ["1-19"])
    sent = {v.mask_view.name: image_digest(v.mask_view.image) for v in trace.rounds[1].result.verdicts}
    save_trace(trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    stored = document["rounds"][1]["result"]["verdicts"][16]
    assert stored["mask_view"] == {"name": "round2_group17",
                                   "view": {"kind": "group", "masks": 0, "indices": [16, 17, 18, 19],
                                            "bounds": [200_704, 1_003_520]}}
    assert stored["zoom_view"] is None and stored["group"] == [17, 18, 19, 20]
    assert [p.name for p in (tmp_path / "images").iterdir()] == [document["photo"]["file"].split("/")[1]]
    loaded = load_trace(tmp_path)
    assert loaded == trace
    verdicts = loaded.rounds[1].result.verdicts
    assert {v.mask_view.name: image_digest(v.mask_view.image) for v in verdicts} == sent
    assert [v.group for v in load_trace_zip(trace_to_zip_bytes(trace)).rounds[1].result.verdicts] == [
        v.group for v in trace.rounds[1].result.verdicts]


def test_a_group_verdicts_card_shows_the_group_view_alone_and_says_it_was_checked_with_others():
    from sam3_agent.ui.html import ImageUrls, render_card
    from sam3_agent.ui.view import verdict_card

    _, trace, _ = examine_run({"in_groups": True}, ScriptedVLM(answers()))
    card = verdict_card(trace.rounds[1].result.verdicts[17], 20)
    html = render_card(card, ImageUrls())
    assert card.group == (17, 18, 19, 20) and card.zoom_view is None
    assert html.count("<img ") == 1 and 'alt="masks 17, 18, 19, 20 on the photo, as the verifier saw it"' in html
    assert "Mask 18 / 20: <b class=\"verdict\">Accept</b> (checked together with 3 other mask(s))" in html
