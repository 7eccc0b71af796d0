"""The context policy (sam3_agent.agent.context.build_context)."""

from __future__ import annotations

import pytest
from PIL import Image

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.context import (
    BEFORE_LATEST_SEGMENT,
    MASKS_GONE,
    MAX_CONTEXT_IMAGES,
    OLD_MISTAKE,
    REASONS,
    build_context,
    tried_phrases,
)
from sam3_agent.limits import MAX_MAIN_IMAGES, MAX_MAIN_IMAGES_WITH_TILES
from sam3_agent.messages import ImagePart, Message, TextPart, ToolCall


def fmt(key: str, **fields: str) -> str:
    if key == "tried_phrases_note":
        return f"NOTE tried: {fields['phrases']}"
    if key == "image_omitted":
        return "[older image omitted]"
    raise KeyError(key)


def img(name: str, shade: int) -> ImagePart:
    return ImagePart(Image.new("RGB", (8, 6), (shade, shade, shade)), name)


def assistant_segment(phrase: str) -> Message:
    call = ToolCall("segment_phrase", {"text_prompt": phrase}, "segment_phrase")
    text = f'<think>try {phrase}</think>\n<tool>{{"name": "segment_phrase", "parameters": {{"text_prompt": "{phrase}"}}}}</tool>'
    return Message("assistant", (TextPart(text),), call, starts_masks=True)


def assistant_call(name: str) -> Message:
    return Message("assistant", (TextPart(f'<tool>{{"name": "{name}"}}</tool>'),), ToolCall(name, {}, name))


def base() -> list[Message]:
    return [
        Message("system", (TextPart("SYSTEM"),)),
        Message("user", (img("raw", 10), TextPart("query: the child"))),
    ]


def issue_example() -> list[Message]:
    return base() + [
        assistant_segment("person"),
        Message("user", (TextPart("5 masks"), img("round1_overlay", 20))),
        assistant_segment("child"),
        Message("user", (TextPart("3 masks"), img("round2_overlay", 30))),
        assistant_call("examine_each_mask"),
        Message("user", (TextPart("1 mask kept"), img("round3_overlay", 40))),
    ]


def count_images(messages: list[Message]) -> int:
    return sum(len(m.images) for m in messages)


def test_issue_example_keeps_0_1_4_5_6_7() -> None:
    sent, record = build_context(issue_example(), fmt)
    assert record.kept == (0, 1, 4, 5, 6, 7)
    assert record.dropped == (2, 3)
    assert [m.text.splitlines()[0] for m in sent] == [
        "SYSTEM",
        "query: the child",
        sent[2].text.splitlines()[0],
        "3 masks",
        '<tool>{"name": "examine_each_mask"}</tool>',
        "1 mask kept",
    ]
    assert sent[2].call == ToolCall("segment_phrase", {"text_prompt": "child"}, "segment_phrase")


def test_issue_example_note_names_earlier_phrase_on_message_1() -> None:
    sent, record = build_context(issue_example(), fmt)
    assert record.note == 'NOTE tried: "person"'
    assert sent[1].parts[-1] == TextPart('NOTE tried: "person"')
    assert sent[1].images[0].name == "raw"


def test_issue_example_older_overlay_becomes_text_and_two_images_remain() -> None:
    sent, record = build_context(issue_example(), fmt)
    assert sent[3].parts == (TextPart("3 masks"), TextPart("[older image omitted]"))
    assert record.images_as_text == (5,)
    assert [p.name for m in sent for p in m.images] == ["raw", "round3_overlay"]
    assert record.image_count == count_images(sent) == 2


def test_stored_messages_are_not_modified() -> None:
    history = issue_example()
    before = list(history)
    build_context(history, fmt)
    assert history == before
    assert len(history[1].parts) == 2 and history[5].images[0].name == "round2_overlay"


def test_before_any_segment_everything_is_kept_without_note() -> None:
    history = base() + [
        Message("assistant", (TextPart("I think it is the child."),)),
        Message("user", (TextPart("no tool call, please call a tool"),)),
    ]
    sent, record = build_context(history, fmt)
    assert record.kept == (0, 1, 2, 3) and record.dropped == () and record.note is None
    assert sent == history


def test_first_segment_has_no_note() -> None:
    history = base() + [assistant_segment("person"), Message("user", (TextPart("5 masks"), img("round1_overlay", 5)))]
    _, record = build_context(history, fmt)
    assert record.kept == (0, 1, 2, 3) and record.note is None and record.image_count == 2


def test_refused_segment_call_does_not_move_the_boundary() -> None:
    refused = Message(
        "assistant", (TextPart("again person"),), ToolCall("segment_phrase", {"text_prompt": "person"}), False
    )
    history = base() + [
        assistant_segment("person"),
        Message("user", (TextPart("5 masks"), img("round1_overlay", 5))),
        refused,
        Message("user", (TextPart("already used"),)),
    ]
    _, record = build_context(history, fmt)
    assert record.kept == (0, 1, 2, 3, 4, 5) and record.note is None


def test_context_stays_bounded_over_many_rounds() -> None:
    history = base()
    for k in range(40):
        history += [assistant_segment(f"thing {k}"), Message("user", (TextPart(f"{k}"), img(f"round{k}_overlay", k)))]
        history += [assistant_call("examine_each_mask"), Message("user", (TextPart("kept"), img(f"round{k}_b", k)))]
    sent, record = build_context(history, fmt)
    assert len(sent) == 6
    assert record.image_count == 2 == count_images(sent)
    assert tried_phrases(history, before=record.kept[2]) == [f"thing {k}" for k in range(39)]
    assert record.note is not None and record.note.count('"thing') == 39


def dense_reply(round_index: int, shade: int) -> Message:
    """A reply as the tools make it for a dense set: its text, the overlay, then the overlay's four tiles."""
    tiles = [img(f"round{round_index}_tile{t}", shade + t) for t in range(1, 5)]
    return Message("user", (TextPart(f"{round_index}: 150 masks"), img(f"round{round_index}_overlay", shade), *tiles))


def test_the_default_cap_is_the_reference_agents_two_images() -> None:
    assert MAX_CONTEXT_IMAGES == MAX_MAIN_IMAGES == 2 and MAX_MAIN_IMAGES_WITH_TILES == 6
    assert AgentConfig().max_main_images == 2 and AgentConfig(dense_tiles=True).max_main_images == 6


def test_a_dense_reply_holding_tiles_sends_only_the_overlay_by_default() -> None:
    history = base() + [assistant_segment("bird"), dense_reply(1, 10)]
    sent, record = build_context(history, fmt)
    assert [p.name for m in sent for p in m.images] == ["raw", "round1_overlay"]
    assert sent[3].parts[2:] == (TextPart("[older image omitted]"),)  # the four tiles: one placeholder
    assert record.image_count == 2 == count_images(sent)


def test_with_the_opt_in_tiles_a_dense_overlay_is_sent_with_its_four_tiles_and_nothing_more() -> None:
    history = base() + [assistant_segment("bird"), dense_reply(1, 10)]
    sent, record = build_context(history, fmt, MAX_MAIN_IMAGES_WITH_TILES)
    assert [p.name for m in sent for p in m.images] == ["raw", "round1_overlay", *(f"round1_tile{t}" for t in range(1, 5))]
    assert record.image_count == 6 == count_images(sent)


def test_an_overlay_whose_masks_are_gone_turns_to_one_placeholder_with_its_tiles() -> None:
    history = base() + [assistant_segment("bird"), dense_reply(1, 10), assistant_call("examine_each_mask"),
                        Message("user", (TextPart("kept 3"), img("round2_overlay", 50)))]
    sent, record = build_context(history, fmt, MAX_MAIN_IMAGES_WITH_TILES)
    assert sent[3].parts == (TextPart("1: 150 masks"), TextPart("[older image omitted]"))
    assert record.images_as_text == (3,)
    assert [p.name for m in sent for p in m.images] == ["raw", "round2_overlay"]
    assert record.image_count == 2


@pytest.mark.parametrize(("cap", "names"), [(2, ["raw", "a"]), (6, ["raw", "a", "b", "c", "d", "e"])])
def test_at_most_the_cap_even_with_more_images_in_one_message(cap, names) -> None:
    history = base() + [
        assistant_segment("cup"),
        Message("user", tuple(img(name, k) for k, name in enumerate("abcdefg")) + (TextPart("seven images"),)),
    ]
    sent, record = build_context(history, fmt, cap)
    assert [p.name for m in sent for p in m.images] == names  # the overlay comes first
    assert record.image_count == cap
    assert sent[3].parts[cap - 1:] == (TextPart("[older image omitted]"), TextPart("seven images"))


def test_conversation_must_start_with_system_and_user() -> None:
    with pytest.raises(ValueError, match="starts with a system message"):
        build_context([Message("user", (TextPart("hi"),))], fmt)


def test_tried_phrases_dedupes_case_insensitively_in_first_use_order() -> None:
    history = base() + [assistant_segment("Person"), assistant_segment("cup"), assistant_segment("person ")]
    assert tried_phrases(history) == ["Person", "cup"]


def mistake(text: str) -> list[Message]:
    return [
        Message("assistant", (TextPart(text),), None, False, mistake=True),
        Message("user", (TextPart(f"feedback on {text}"),)),
    ]


def test_only_the_latest_mistake_exchange_is_kept_when_it_ends_the_conversation() -> None:
    history = base() + mistake("a") + mistake("b") + mistake("c")
    sent, record = build_context(history, fmt)
    assert record.kept == (0, 1, 6, 7) and record.dropped == (2, 3, 4, 5)
    assert [m.text for m in sent[2:]] == ["c", "feedback on c"]


def test_mistakes_before_a_successful_call_are_dropped() -> None:
    history = base() + [assistant_segment("cup"), Message("user", (TextPart("2 masks"), img("round1_overlay", 1)))]
    history += mistake("select [7]")
    history += [assistant_call("examine_each_mask"), Message("user", (TextPart("1 kept"), img("round3_overlay", 3)))]
    _, record = build_context(history, fmt)
    assert record.kept == (0, 1, 2, 3, 6, 7) and record.dropped == (4, 5)


def test_context_stays_bounded_while_the_model_keeps_failing() -> None:
    history = base()
    sizes = []
    for k in range(30):
        history += mistake(f"garbage {k}")
        sent, _ = build_context(history, fmt)
        sizes.append(len(sent))
    assert set(sizes) == {4}


# ---------------------------------------------------------------- masks that no longer exist (issue 10)


def test_overlay_of_masks_all_rejected_is_never_sent_as_a_current_image() -> None:
    history = base() + [
        assistant_segment("cup"),
        Message("user", (TextPart("2 masks"), img("round1_overlay", 1))),
        assistant_call("examine_each_mask"),
        Message("user", (TextPart("all rejected"),)),
    ]
    sent, record = build_context(history, fmt)
    assert record.kept == (0, 1, 2, 3, 4, 5)
    assert [p.name for m in sent for p in m.images] == ["raw"]
    assert record.image_count == 1 and record.images_as_text == (3,)
    assert sent[3].parts == (TextPart("2 masks"), TextPart("[older image omitted]"))


def test_overlay_stays_current_after_a_refused_call_and_its_feedback() -> None:
    history = base() + [
        assistant_segment("cup"),
        Message("user", (TextPart("2 masks"), img("round1_overlay", 1))),
    ] + mistake("select [7]")
    sent, record = build_context(history, fmt)
    assert [p.name for m in sent for p in m.images] == ["raw", "round1_overlay"]
    assert record.images_as_text == ()


def test_a_refused_examine_does_not_hide_the_current_overlay() -> None:
    refused = Message("assistant", (TextPart("examine"),), ToolCall("examine_each_mask", {}, "examine_each_mask"),
                      mistake=True)
    history = base() + [
        assistant_segment("cup"),
        Message("user", (TextPart("2 masks"), img("round1_overlay", 1))),
        refused,
        Message("user", (TextPart("not now"),)),
    ]
    sent, _ = build_context(history, fmt)
    assert [p.name for m in sent for p in m.images] == ["raw", "round1_overlay"]


def test_overlay_after_examine_replaces_the_segment_overlay() -> None:
    sent, record = build_context(issue_example(), fmt)
    assert [p.name for m in sent for p in m.images] == ["raw", "round3_overlay"]
    assert record.images_as_text == (5,)
# ------------------------------------------------------------------ why each message was dropped or turned into text


def test_every_dropped_or_text_only_message_carries_the_rule_that_left_it_out() -> None:
    _, record = build_context(issue_example(), fmt)
    assert record.reasons == ((2, BEFORE_LATEST_SEGMENT), (3, BEFORE_LATEST_SEGMENT), (5, MASKS_GONE))


def test_an_old_mistake_is_told_apart_from_messages_before_the_latest_phrase() -> None:
    history = base() + mistake("garbage") + [assistant_segment("cup"),
                                               Message("user", (TextPart("2 masks"), img("round2_overlay", 1)))]
    history += mistake("select [7]")
    history += [assistant_call("examine_each_mask"), Message("user", (TextPart("1 kept"), img("round4_overlay", 3)))]
    _, record = build_context(history, fmt)
    # the first mistake lies before the latest segment_phrase: that rule comes first
    assert record.dropped == (2, 3, 6, 7)
    assert record.reasons == ((2, BEFORE_LATEST_SEGMENT), (3, BEFORE_LATEST_SEGMENT), (5, MASKS_GONE),
                              (6, OLD_MISTAKE), (7, OLD_MISTAKE))


def test_reasons_cover_exactly_the_dropped_and_text_only_messages_over_many_rounds() -> None:
    history = base()
    for k in range(6):
        history += mistake(f"bad {k}") + [assistant_segment(f"thing {k}"),
                                           Message("user", (TextPart(f"{k}"), img(f"r{k}", k)))]
        history += [assistant_call("examine_each_mask"), Message("user", (TextPart("kept"), img(f"r{k}b", k)))]
        _, record = build_context(history, fmt)
        assert [i for i, _ in record.reasons] == sorted(record.dropped + record.images_as_text)
        assert all(key in REASONS for _, key in record.reasons)


def test_nothing_dropped_means_no_reasons() -> None:
    _, record = build_context(base(), fmt)
    assert record.reasons == ()
