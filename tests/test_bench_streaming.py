"""The streaming benchmark's measure: a long reasoning streams as appends, within 3x the text it shows."""

from __future__ import annotations

import pytest

from sam3_agent.bench import streaming


@pytest.fixture(scope="module")
def events():
    return list(streaming.scripted_events(400))


def test_a_streamed_reasoning_sends_within_three_times_its_text(events):
    rounds, _ = streaming.measure(events, tokens_per_update=4, before=False)
    first = rounds[0]
    assert (first.index, first.updates, first.text) == (1, 101, 3190)
    assert first.streamed == 9_433 and first.streamed <= 3 * first.text


def test_resending_the_whole_live_round_grows_with_the_square_of_the_reasoning(events):
    rounds, _ = streaming.measure(events, tokens_per_update=4, before=True)
    assert rounds[0].streamed == 217_383 > 60 * rounds[0].text
